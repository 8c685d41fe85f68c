package coordinator_test

import (
	"context"
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
		exec(t, conn, "INSERT INTO ho_r VALUES (1, 'one'), (2, 'two'), (3, 'three')", pgx.QueryExecModeSimpleProtocol)
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
		// DISTINCT ON of an expression with a constant, over every shard.
		"SELECT DISTINCT ON (v * 2) id FROM ho_t ORDER BY v * 2, id",
		"SELECT DISTINCT ON (v % 3, v * 2) v % 3, id FROM ho_t ORDER BY v % 3, v * 2, id DESC",
	}, nil)
}
