package coordinator_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestCTEScopeAndDeparseOracle: what an adversary with a held-out corpus
// found answered wrong, each statement beside plain PostgreSQL's answer.
//   - A CTE named as a table hid the table everywhere in the statement,
//     where PostgreSQL scopes it to its WITH's statement and the CTEs after
//     it: WITH t AS (SELECT * FROM t WHERE ...) SELECT count(*) FROM t ran
//     on the default node's empty table (0, not 3), and an INSERT ...
//     SELECT reading such a CTE inserted nothing (INSERT 0 0, not 60).
//   - (x AT TIME ZONE z)::date reached the shards as x AT TIME ZONE
//     z::date (22007), and AT TIME ZONE ('UTC' || '+3') lost its
//     parentheses (another value, another column name).
//   - DISTINCT ON (v * 2) ... ORDER BY v * 2 over several shards: the
//     constants lifted into two parameters made the merge's two
//     expressions differ (42P10).
//   - (a AND b) IS NULL, (NOT x)::int and the like reached the shards
//     without their parentheses: other counts, and a DELETE that removed
//     rows PostgreSQL keeps.
func TestCTEScopeAndDeparseOracle(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	plain := oracleDB(t, cl.Servers[1].Addr(), "cteoracle")
	ctx := context.Background()
	for _, conn := range []*pgx.Conn{c, plain} {
		exec(t, conn, "DROP TABLE IF EXISTS ho_t, ho_u, ho_r, ho_log")
	}
	testTable(t, c, "ho_t", "(id int PRIMARY KEY, v int, at timestamptz)", "SELECT create_distributed_table('ho_t', 'id', shard_count => 4)")
	testTable(t, c, "ho_u", "(id int, w text)", "SELECT create_distributed_table('ho_u', 'id', colocate_with => 'ho_t')")
	testTable(t, c, "ho_log", "(id int, n int, m int)", "SELECT create_distributed_table('ho_log', 'id', colocate_with => 'ho_t')")
	testTable(t, c, "ho_r", "(id int PRIMARY KEY, name text)", "SELECT create_reference_table('ho_r')")
	exec(t, plain, "CREATE TABLE ho_t (id int PRIMARY KEY, v int, at timestamptz)")
	exec(t, plain, "CREATE TABLE ho_u (id int, w text)")
	exec(t, plain, "CREATE TABLE ho_log (id int, n int, m int)")
	exec(t, plain, "CREATE TABLE ho_r (id int PRIMARY KEY, name text)")
	t.Cleanup(func() { _, _ = plain.Exec(ctx, "DROP TABLE IF EXISTS ho_t, ho_u, ho_r, ho_log") })
	for _, conn := range []*pgx.Conn{c, plain} {
		exec(t, conn, "SET TimeZone = 'UTC'", pgx.QueryExecModeSimpleProtocol)
		exec(t, conn, "INSERT INTO ho_t SELECT g, g % 7, timestamptz '2026-03-28 22:30:00+00' + g * interval '37 minutes' FROM generate_series(1, 60) g", pgx.QueryExecModeSimpleProtocol)
		exec(t, conn, "INSERT INTO ho_u SELECT g, 'w' || g FROM generate_series(1, 60, 3) g", pgx.QueryExecModeSimpleProtocol)
		exec(t, conn, "INSERT INTO ho_r VALUES (1, 'one'), (2, 'two'), (3, 'three'), (4, NULL)", pgx.QueryExecModeSimpleProtocol)
		exec(t, conn, "INSERT INTO ho_t VALUES (61, NULL, NULL), (62, NULL, timestamptz '2026-01-02 03:04:05+00')", pgx.QueryExecModeSimpleProtocol)
	}
	compareOracle(t, c, plain, []string{
		// CTE scope.
		"WITH ho_t AS (SELECT * FROM ho_t WHERE id <= 3) SELECT count(*) FROM ho_t",
		"WITH a AS (SELECT * FROM ho_t), ho_t AS (SELECT 1) SELECT count(*) FROM a",
		"WITH x AS (SELECT count(*) AS c FROM ho_t) SELECT c, (WITH ho_t AS (SELECT 1) SELECT count(*) FROM ho_t) FROM x",
		"SELECT count(*) FROM (WITH ho_t AS (SELECT * FROM ho_t WHERE v = 2) SELECT * FROM ho_t) s",
		"SELECT EXISTS (WITH ho_u AS (SELECT 1 AS id) SELECT 1 FROM ho_u WHERE id = 2)",
		"WITH ho_r AS (SELECT * FROM ho_r WHERE id < 3) SELECT count(*) FROM ho_r",
		"WITH ho_u AS (SELECT * FROM ho_u WHERE id < 20) SELECT ho_u.w, ho_t.v FROM ho_u JOIN ho_t ON ho_t.id = ho_u.id ORDER BY 1",
		"WITH ho_t AS (SELECT 5 AS id) SELECT id FROM ho_t",
		"WITH RECURSIVE ho_t AS (SELECT 1 AS id UNION ALL SELECT id + 1 FROM ho_t WHERE id < 4) SELECT sum(id) FROM ho_t",
		"WITH a AS (SELECT * FROM ho_t), ho_t AS (SELECT 1) INSERT INTO ho_log SELECT id, 1, 1 FROM a",
		"SELECT count(*), sum(id) FROM ho_log",
		"WITH ho_log AS (SELECT 1) UPDATE ho_log SET n = 2 WHERE id = 5",
		"WITH ho_log AS (SELECT 1) DELETE FROM ho_log WHERE id = 6",
		"SELECT id, n FROM ho_log WHERE id < 8 ORDER BY id",
		// AT TIME ZONE, routed, multi-shard and reference.
		"SELECT (at AT TIME ZONE 'UTC')::date, (at AT TIME ZONE 'UTC')::text FROM ho_t WHERE id = 5",
		"SELECT at AT TIME ZONE ('UTC' || '+3') FROM ho_t WHERE id = 5",
		"SELECT (at AT TIME ZONE 'UTC')::date AS d, count(*) FROM ho_t GROUP BY 1 ORDER BY 1",
		"SELECT CAST((at AT TIME ZONE 'Europe/Paris') AS date), id FROM ho_t WHERE v = 3 ORDER BY id",
		"SELECT (timestamptz '2026-01-01 00:00+00' AT TIME ZONE 'UTC')::date, name FROM ho_r WHERE id = 1",
		"SELECT id, at AT TIME ZONE ('UT' || 'C') AT TIME ZONE 'Asia/Tokyo' FROM ho_t ORDER BY id LIMIT 2",
		// DISTINCT ON of an expression with a constant, over every shard.
		"SELECT DISTINCT ON (v * 2) id FROM ho_t ORDER BY v * 2, id",
		"SELECT DISTINCT ON (v % 3, v * 2) v % 3, id FROM ho_t ORDER BY v % 3, v * 2, id DESC",
		"SELECT DISTINCT ON (v % 03) id FROM ho_t ORDER BY v % 3, id",
		// Parentheses the deparser left out around operands: a boolean
		// expression under IS NULL, a cast or a comparison, a negative
		// constant under ^, in reads and writes, routed, multi-shard and
		// reference.
		"SELECT count(*) FROM ho_t WHERE (NOT (v > 2)) IS NULL",
		"SELECT count(*) FROM ho_t WHERE (v > 2 AND id > 30) IS NOT NULL",
		"SELECT count(*) FROM ho_t WHERE (v > 2 OR id > 50) IS NULL",
		"SELECT sum((v > 2 OR id > 50)::int), sum((NOT (v > 2))::int) FROM ho_t",
		"SELECT (v = 3) IN (true), (-2) ^ 2, (-v) ^ 2 FROM ho_t WHERE id = 3",
		"SELECT count(*) FROM ho_r WHERE (id > 1 AND name LIKE 't%') IS NULL",
		"SELECT id FROM ho_t WHERE id = 61 AND (NOT (v > 2)) IS NULL",
		"DELETE FROM ho_t WHERE id = 60 AND (NOT (v > 2)) IS NULL",
		"UPDATE ho_r SET name = name || '!' WHERE (id > 1 AND name LIKE 't%') IS NOT NULL AND id < 4",
		"SELECT id, name FROM ho_r ORDER BY id",
		"SELECT count(*) FROM ho_t",
		// DDL rewritten for the shards too: the constraint the shards get
		// is the one written.
		"ALTER TABLE ho_t ADD CONSTRAINT ho_ck CHECK ((v > 100 AND id > 0) IS NOT TRUE)",
		"INSERT INTO ho_t VALUES (70, 200, NULL)",
		"INSERT INTO ho_t VALUES (71, 50, NULL)",
		"SELECT count(*) FROM ho_t WHERE id >= 70",
	}, nil)
}

// TestSearchPathRefusalNamesUnqualified: under a search_path other than
// public a statement naming a catalog table without its schema is
// refused (it might mean another schema's table); the message names the
// tables written without a schema, not the qualified ones beside them
// (it named every table of the statement).
func TestSearchPathRefusalNamesUnqualified(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	exec(t, c, "DROP TABLE IF EXISTS sp_a, sp_b")
	testTable(t, c, "sp_a", "(id int PRIMARY KEY, v int)", "SELECT create_distributed_table('sp_a', 'id', shard_count => 4)")
	testTable(t, c, "sp_b", "(id int PRIMARY KEY, w int)", "SELECT create_distributed_table('sp_b', 'id', colocate_with => 'sp_a')")
	// (A table of that name in the schema before public: PostgreSQL would
	// read it. Without one the statement runs: TestSearchPathFindsPublic.)
	exec(t, c, "DROP SCHEMA IF EXISTS app CASCADE", pgx.QueryExecModeSimpleProtocol)
	exec(t, c, "CREATE SCHEMA app", pgx.QueryExecModeSimpleProtocol)
	exec(t, c, "CREATE TABLE app.sp_b (id int, w int)", pgx.QueryExecModeSimpleProtocol)
	t.Cleanup(func() {
		_, _ = c.Exec(context.Background(), "DROP SCHEMA IF EXISTS app CASCADE", pgx.QueryExecModeSimpleProtocol)
	})
	exec(t, c, "SET search_path = app, public", pgx.QueryExecModeSimpleProtocol)
	_, err := c.Exec(context.Background(), "SELECT a.v FROM public.sp_a a JOIN sp_b b ON a.id = b.id WHERE a.id = 1", pgx.QueryExecModeSimpleProtocol)
	if sqlState(err) != "0A000" {
		t.Fatalf("got %v, want 0A000", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "sp_b is named without its schema") || strings.Contains(msg, "sp_a") {
		t.Errorf("message %q: want it to name sp_b alone", msg)
	}
	var n int
	if err := c.QueryRow(context.Background(), "SELECT count(*) FROM public.sp_a a JOIN public.sp_b b ON a.id = b.id", pgx.QueryExecModeSimpleProtocol).Scan(&n); err != nil {
		t.Fatalf("qualified names under that search_path: %v", err)
	}
}

// TestParseDuplicateNameInFailedBlock: a Parse reusing a statement name in
// a failed transaction block gets 25P02, as on PostgreSQL, which answers
// the failed block before it stores the statement (it got 42P05).
func TestParseDuplicateNameInFailedBlock(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	for _, addr := range []string{srv.Addr(), cl.Servers[0].Addr()} {
		c := connect(t, addr)
		pc := c.PgConn()
		if _, err := pc.Prepare(ctx, "dup_s1", "SELECT 1", nil); err != nil {
			t.Fatal(err)
		}
		if err := pc.Exec(ctx, "BEGIN").Close(); err != nil {
			t.Fatal(err)
		}
		_ = pc.Exec(ctx, "SELECT 1/0").Close()
		_, err := pc.Prepare(ctx, "dup_s1", "SELECT 2", nil)
		if sqlState(err) != "25P02" {
			t.Errorf("%s: Parse of a used name in a failed block: %v, want 25P02", addr, err)
		}
		if err := pc.Exec(ctx, "ROLLBACK").Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := pc.Prepare(ctx, "dup_s1", "SELECT 2", nil); sqlState(err) != "42P05" {
			t.Errorf("%s: Parse of a used name after the block: %v, want 42P05", addr, err)
		}
	}
}

// TestPrepareTransactionRefusalEndsBlock: PREPARE TRANSACTION in a block
// over several workers is refused, and, as a failed PREPARE TRANSACTION on
// PostgreSQL, the refusal ends the block rolled back (it left it open and
// failed: the next statement got 25P02).
func TestPrepareTransactionRefusalEndsBlock(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	testTable(t, c, "ptx_t", "(id int PRIMARY KEY)", "SELECT create_distributed_table('ptx_t', 'id', shard_count => 4)")
	exec(t, c, "BEGIN", simple)
	exec(t, c, "INSERT INTO ptx_t SELECT generate_series(1, 8)", simple) // rows on both workers
	_, err := c.Exec(context.Background(), "PREPARE TRANSACTION 'ptx_gid'", simple)
	wantRefusal(t, "PREPARE TRANSACTION over several workers", err)
	if got := queryString(t, c, "SELECT count(*)::text FROM ptx_t"); got != "0" {
		t.Errorf("after the refused PREPARE TRANSACTION: %s rows, want 0 (rolled back) and no failed block", got)
	}
}
