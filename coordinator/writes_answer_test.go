package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// describeRun is the columns, rows and tag (or SQLSTATE) of one statement
// sent as a simple Query.
func describeRun(t *testing.T, pc *pgconn.PgConn, sql string) string {
	t.Helper()
	var b strings.Builder
	mrr := pc.Exec(context.Background(), sql)
	for mrr.NextResult() {
		rr := mrr.ResultReader()
		for _, f := range rr.FieldDescriptions() {
			fmt.Fprintf(&b, "%s:%d ", f.Name, f.DataTypeOID)
		}
		n := 0
		for rr.NextRow() {
			n++
		}
		tag, err := rr.Close()
		if err != nil {
			fmt.Fprintf(&b, "error %s; ", sqlState(err))
			continue
		}
		fmt.Fprintf(&b, "%d rows %s; ", n, tag)
	}
	if err := mrr.Close(); err != nil {
		fmt.Fprintf(&b, "error %s", sqlState(err))
	}
	return b.String()
}

// TestReturningNoRows: a write with RETURNING that returns no row still
// describes its columns, as PostgreSQL does: multi-shard UPDATE and
// DELETE, INSERT ... SELECT between colocated tables, and reference-table
// writes (regression: the columns were left out, and clients saw none).
func TestReturningNoRows(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	c := connect(t, srv.Addr())
	testTable(t, c, "rn", "(k bigint PRIMARY KEY, v text)", "SELECT create_distributed_table('rn', 'k', shard_count => 4)")
	testTable(t, c, "rn2", "(k bigint PRIMARY KEY, v text)", "SELECT create_distributed_table('rn2', 'k', colocate_with => 'rn')")
	testTable(t, c, "rnr", "(k int PRIMARY KEY, v text)", "SELECT create_reference_table('rnr')")
	plainTables(t, c, "rno (k bigint PRIMARY KEY, v text)", "rno2 (k bigint PRIMARY KEY, v text)", "rnro (k int PRIMARY KEY, v text)")
	for _, tb := range []string{"rn", "rno", "rnr", "rnro"} {
		exec(t, c, "INSERT INTO "+tb+" VALUES (1, 'a'), (2, 'b'), (3, 'c')")
	}
	pc := c.PgConn()
	fleet := strings.NewReplacer("{t}", "rn", "{t2}", "rn2", "{r}", "rnr")
	oracle := strings.NewReplacer("{t}", "rno", "{t2}", "rno2", "{r}", "rnro")
	for _, q := range []string{
		"UPDATE {t} SET v = 'z' WHERE v = 'nope' RETURNING k, v",
		"DELETE FROM {t} WHERE v = 'nope' RETURNING *",
		"UPDATE {t} SET v = v WHERE k > 1 RETURNING k, v || '!' AS w",
		"INSERT INTO {t2} (k, v) SELECT k, v FROM {t} WHERE v = 'nope' RETURNING k",
		"DELETE FROM {r} WHERE k = 42 RETURNING k",
		"UPDATE {r} SET v = 'z' WHERE k = 42 RETURNING v, k",
		"INSERT INTO {r} VALUES (1, 'x') ON CONFLICT DO NOTHING RETURNING *",
		"DELETE FROM {t} WHERE k = 42 RETURNING k, v",
	} {
		for _, block := range []bool{false, true} {
			if block {
				q = "BEGIN; " + q + "; ROLLBACK"
			}
			got, want := describeRun(t, pc, fleet.Replace(q)), describeRun(t, pc, oracle.Replace(q))
			if got != want || strings.Contains(got, "error") {
				t.Errorf("%s:\n got %s\nwant %s (plain PostgreSQL)", q, got, want)
			}
		}
	}
}

// TestOnConflictOnConstraint: INSERT ... ON CONFLICT ON CONSTRAINT names
// the table's constraint, which each shard has under its own name: routed,
// over several shards, INSERT ... SELECT, reference tables, both protocols
// (regression: 42704 from the shard).
func TestOnConflictOnConstraint(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	c := connect(t, srv.Addr())
	testTable(t, c, "oc", "(k bigint PRIMARY KEY, v text)", "SELECT create_distributed_table('oc', 'k', shard_count => 4)")
	testTable(t, c, "oc2", "(k bigint, v text, CONSTRAINT oc2_k_uniq_with_a_rather_long_name_to_be_shortened_on_shards UNIQUE (k))",
		"SELECT create_distributed_table('oc2', 'k', colocate_with => 'oc')")
	testTable(t, c, "ocr", "(k int PRIMARY KEY, v text)", "SELECT create_reference_table('ocr')")
	plainTables(t, c, "oco (k bigint PRIMARY KEY, v text)",
		"oco2 (k bigint, v text, CONSTRAINT oco2_k_uniq_with_a_rather_long_name_to_be_shortened_on_shards UNIQUE (k))",
		"ocro (k int PRIMARY KEY, v text)")
	fleet := strings.NewReplacer("{t}", "oc", "{t2}", "oc2", "{r}", "ocr")
	oracle := strings.NewReplacer("{t}", "oco", "{t2}", "oco2", "{r}", "ocro")
	simple, ext := pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement
	for _, q := range []string{
		"INSERT INTO {t} VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd')",
		"INSERT INTO {t} VALUES (1, 'x') ON CONFLICT ON CONSTRAINT {t}_pkey DO NOTHING",
		"INSERT INTO {t} VALUES (2, 'x') ON CONFLICT ON CONSTRAINT {t}_pkey DO UPDATE SET v = excluded.v RETURNING *",
		"INSERT INTO {t} VALUES (3, 'y'), (4, 'y'), (5, 'y') ON CONFLICT ON CONSTRAINT {t}_pkey DO UPDATE SET v = excluded.v || {t}.v",
		"INSERT INTO {t} VALUES (6, 'z') ON CONFLICT ON CONSTRAINT no_such_constraint DO NOTHING",
		"INSERT INTO {t2} (k, v) SELECT k, v FROM {t} ON CONFLICT ON CONSTRAINT {t2}_k_uniq_with_a_rather_long_name_to_be_shortened_on_shards DO NOTHING",
		"INSERT INTO {t2} (k, v) SELECT k, v || '2' FROM {t} ON CONFLICT ON CONSTRAINT {t2}_k_uniq_with_a_rather_long_name_to_be_shortened_on_shards DO UPDATE SET v = excluded.v",
		"INSERT INTO {r} VALUES (1, 'a') ON CONFLICT ON CONSTRAINT {r}_pkey DO NOTHING",
		"INSERT INTO {r} VALUES (1, 'b') ON CONFLICT ON CONSTRAINT {r}_pkey DO UPDATE SET v = excluded.v",
		"SELECT * FROM {t} ORDER BY k",
		"SELECT * FROM {t2} ORDER BY k",
		"SELECT * FROM {r} ORDER BY k",
	} {
		gatherBoth(t, c, fleet, oracle, q, simple)
	}
	gatherBoth(t, c, fleet, oracle, "INSERT INTO {t} VALUES ($1, $2) ON CONFLICT ON CONSTRAINT {t}_pkey DO UPDATE SET v = excluded.v RETURNING k, v", ext, 1, "p")
	gatherBoth(t, c, fleet, oracle, "INSERT INTO {r} VALUES ($1, $2) ON CONFLICT ON CONSTRAINT {r}_pkey DO UPDATE SET v = excluded.v", ext, 1, "p")
	gatherBoth(t, c, fleet, oracle, "SELECT * FROM {t} ORDER BY k", simple)
	gatherBoth(t, c, fleet, oracle, "SELECT * FROM {r} ORDER BY k", simple)
}

// TestWorkerErrorsAsPostgreSQL: a worker's error in a statement the
// coordinator runs on several shards (reference-table writes, multi-row
// INSERT, multi-shard UPDATE, COPY) reaches the client as PostgreSQL gives
// it: the same SQLSTATE, message, detail and constraint and table names,
// without shard names or where it ran (regression: "on node 1 (...): "
// before the message).
func TestWorkerErrorsAsPostgreSQL(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	c := connect(t, srv.Addr())
	testTable(t, c, "we", "(k bigint PRIMARY KEY, v int NOT NULL)", "SELECT create_distributed_table('we', 'k', shard_count => 4)")
	testTable(t, c, "wer", "(k int PRIMARY KEY, v int NOT NULL)", "SELECT create_reference_table('wer')")
	plainTables(t, c, "weo (k bigint PRIMARY KEY, v int NOT NULL)", "wero (k int PRIMARY KEY, v int NOT NULL)")
	fleet := strings.NewReplacer("{t}", "we", "{r}", "wer")
	oracle := strings.NewReplacer("{t}", "weo", "{r}", "wero")
	ctx := context.Background()
	errOf := func(q string, names *strings.Replacer) string {
		_, err := c.Exec(ctx, names.Replace(q), pgx.QueryExecModeSimpleProtocol)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) {
			return fmt.Sprint(err)
		}
		// The oracle's table names read as the fleet's.
		un := strings.NewReplacer("weo", "we", "wero", "wer")
		return fmt.Sprintf("%s %q %q %q %q", pe.Code, un.Replace(pe.Message), un.Replace(pe.Detail), un.Replace(pe.ConstraintName), un.Replace(pe.TableName))
	}
	for _, q := range []string{
		"INSERT INTO {t} VALUES (1, 1), (2, 2), (3, 3), (4, 4)",
		"INSERT INTO {r} VALUES (1, 1), (2, 2)",
	} {
		exec(t, c, fleet.Replace(q))
		exec(t, c, oracle.Replace(q))
	}
	for _, q := range []string{
		"INSERT INTO {t} VALUES (5, 5), (6, 6), (1, 7)",
		"INSERT INTO {t} VALUES (5, 5), (6, NULL), (7, 7)",
		"INSERT INTO {r} VALUES (1, 1)",
		"INSERT INTO {r} VALUES (3, NULL)",
		"UPDATE {r} SET v = 1 / (k - 2)",
		"UPDATE {t} SET v = 1 / (k - 3)",
		"UPDATE {t} SET v = NULL WHERE k > 2",
	} {
		got, want := errOf(q, fleet), errOf(q, oracle)
		if got != want {
			t.Errorf("%s:\n got %s\nwant %s (plain PostgreSQL)", q, got, want)
		}
	}
}

// TestMultiRowInsertAcrossShards: a multi-row INSERT whose rows belong to
// several shards returns its RETURNING rows in the VALUES order, as
// PostgreSQL does, in and out of transaction blocks (inside one it joins
// the client's transaction: ROLLBACK undoes it); one that would make each
// worker compute its own transaction time (now(), DEFAULT now()) is
// refused with a hint (regression: the rows on different workers got
// different timestamps where PostgreSQL gives them one).
func TestMultiRowInsertAcrossShards(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	c := connect(t, srv.Addr())
	const cols = "(id int PRIMARY KEY, v text, n int DEFAULT 7, ts timestamptz DEFAULT now())"
	testTable(t, c, "mri", cols, "SELECT create_distributed_table('mri', 'id', shard_count => 8)")
	plainTables(t, c, "mrio "+cols)
	fleet, oracle := strings.NewReplacer("{t}", "mri"), strings.NewReplacer("{t}", "mrio")
	simple := pgx.QueryExecModeSimpleProtocol
	ordered := func(q string) {
		t.Helper()
		got := gatherRun(t, c, fleet.Replace(q), simple)
		want := gatherRun(t, c, oracle.Replace(q), simple)
		if !reflect.DeepEqual(got, want) || got.State != "" {
			t.Errorf("%s:\n got %+v\nwant %+v (plain PostgreSQL)", q, got, want)
		}
	}
	ordered("INSERT INTO {t} (id, v, ts) VALUES (5, 'e', '2026-01-01'), (1, 'a', '2026-01-01'), (9, 'i', '2026-01-01'), (2, 'b', '2026-01-01'), (14, 'n', '2026-01-01') RETURNING id, v, n")
	ordered("INSERT INTO {t} (id, v, ts) VALUES (30, 'x', '2026-01-02'), (31, 'y', '2026-01-02'), (32, 'z', '2026-01-02'), (33, 'w', '2026-01-02') ON CONFLICT (id) DO UPDATE SET v = excluded.v || '!' RETURNING *")
	ordered("INSERT INTO {t} (id, v, ts) VALUES (1, 'a2', '2026-01-03'), (40, 'q', '2026-01-03'), (9, 'i2', '2026-01-03') ON CONFLICT (id) DO UPDATE SET v = excluded.v RETURNING id, v")
	ordered("BEGIN; INSERT INTO {t} (id, v, ts) VALUES (50, 'p', '2026-01-04'), (51, 'q', '2026-01-04'), (52, 'r', '2026-01-04') RETURNING id; ROLLBACK")
	ordered("BEGIN; INSERT INTO {t} (id, v, ts) VALUES (60, 'p', '2026-01-04'), (61, 'q', '2026-01-04'), (62, 'r', '2026-01-04'); COMMIT")
	ordered("SELECT * FROM {t} ORDER BY id")
	ctx := context.Background()
	// Rows over several shards that take now() (a DEFAULT or the
	// statement's) get one moment, read once (freeze.go).
	for _, q := range []string{
		"INSERT INTO mri (id, v) VALUES (70, 'a'), (71, 'b'), (72, 'c'), (73, 'd')",
		"INSERT INTO mri (id, v, ts) VALUES (74, 'a', now()), (75, 'b', now()), (76, 'c', now()), (77, 'd', now())",
	} {
		exec(t, c, q, simple)
	}
	if n := queryString(t, c, "SELECT count(DISTINCT ts)::text || '/' || count(*)::text FROM mri WHERE id BETWEEN 70 AND 73"); n != "1/4" {
		t.Errorf("rows 70-73 with DEFAULT now(): %s distinct moments/rows, want 1/4", n)
	}
	if n := queryString(t, c, "SELECT count(DISTINCT ts)::text || '/' || count(*)::text FROM mri WHERE id BETWEEN 74 AND 77"); n != "1/4" {
		t.Errorf("rows 74-77 with now(): %s distinct moments/rows, want 1/4", n)
	}
	exec(t, c, "DELETE FROM mri WHERE id BETWEEN 70 AND 77", simple)
	for _, q := range []string{
		"BEGIN; INSERT INTO mri (id, v, ts) VALUES (78, 'a', CURRENT_TIMESTAMP), (79, 'b', CURRENT_TIMESTAMP), (80, 'c', '2026-01-01'), (81, 'd', '2026-01-01'); COMMIT",
		"INSERT INTO mri (id, v, ts) VALUES (82, 'a', 'now'), (83, 'b', 'now'), (84, 'c', 'now'), (85, 'd', 'now')",
		"INSERT INTO mri (id, v, ts) VALUES (86, 'a', '2026-01-01'), (87, 'b', '2026-01-01'), (88, 'c', '2026-01-01') ON CONFLICT DO NOTHING RETURNING id",
	} {
		_, err := c.Exec(ctx, q, simple)
		wantRefusal(t, q, err)
		if strings.HasPrefix(q, "BEGIN") {
			exec(t, c, "ROLLBACK", simple) // the refusal failed the block, as an error does on PostgreSQL
		}
	}
	if n := queryString(t, c, "SELECT count(*)::text FROM mri WHERE id >= 70"); n != "0" {
		t.Errorf("refused INSERTs left %s rows", n)
	}
	// Rows of one shard, or one distribution value, take now() as usual.
	exec(t, c, "INSERT INTO mri (id, v) VALUES (90, 'a'), (90, 'b') ON CONFLICT (id) DO NOTHING", simple)
	if n := queryString(t, c, "SELECT count(*)::text FROM mri WHERE id = 90 AND ts IS NOT NULL"); n != "1" {
		t.Errorf("single-shard multi-row INSERT with DEFAULT now(): %s rows", n)
	}
}

// TestRenamedColumns: a range variable that renames its table's columns
// (orders AS o(oid, cid)) gives the distribution column's name to another
// column, so the name routes nothing and joins nothing: reads give
// PostgreSQL's answer, writes that would place rows by it are refused
// (regression: routed by the renamed column, 0 rows for 1; INSERT ...
// SELECT stored rows in the wrong shards; UPDATE ... FROM changed none).
func TestRenamedColumns(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	c := connect(t, srv.Addr())
	testTable(t, c, "rco", "(cid int, oid int, amount int, PRIMARY KEY (cid, oid))", "SELECT create_distributed_table('rco', 'cid', shard_count => 4)")
	testTable(t, c, "rci", "(cid int, iid int, oid int, PRIMARY KEY (cid, iid))", "SELECT create_distributed_table('rci', 'cid', colocate_with => 'rco')")
	plainTables(t, c, "rcoo (cid int, oid int, amount int, PRIMARY KEY (cid, oid))", "rcio (cid int, iid int, oid int, PRIMARY KEY (cid, iid))")
	var orows, irows []string
	for g := 1; g <= 40; g++ {
		orows = append(orows, fmt.Sprintf("(%d, %d, %d)", g%7, g, g*3))
		if g <= 30 {
			irows = append(irows, fmt.Sprintf("(%d, %d, %d)", g%5, g, g%9))
		}
	}
	for _, tb := range []string{"rco", "rcoo"} {
		exec(t, c, "INSERT INTO "+tb+" VALUES "+strings.Join(orows, ", "))
	}
	for _, tb := range []string{"rci", "rcio"} {
		exec(t, c, "INSERT INTO "+tb+" VALUES "+strings.Join(irows, ", "))
	}
	fleet := strings.NewReplacer("{o}", "rco", "{i}", "rci")
	oracle := strings.NewReplacer("{o}", "rcoo", "{i}", "rcio")
	simple := pgx.QueryExecModeSimpleProtocol
	for _, q := range []string{
		"SELECT * FROM {o} AS o(oid, cid) WHERE o.cid = 5",
		"SELECT count(*) FROM {o} o JOIN {i} AS i(iid, cid) ON o.cid = i.cid",
		"SELECT count(*) FROM {o} o JOIN {i} AS i(iid, cid) USING (cid)",
		"SELECT cid, count(*) FROM {o} AS o(oid, cid) GROUP BY cid ORDER BY cid",
		"SELECT count(*) FROM {o} AS a(oid, cid) JOIN {o} b ON a.cid = b.cid",
		"SELECT o.oid FROM {o} AS o(x, oid) WHERE o.oid = 3 ORDER BY 1",
	} {
		for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeCacheStatement} {
			gatherBoth(t, c, fleet, oracle, q, mode)
		}
	}
	// The INSERT ... SELECT runs in two steps (the renamed columns do not
	// push down); the rows are where their values say.
	gatherBoth(t, c, fleet, oracle, "INSERT INTO {i} (cid, iid, oid) SELECT cid, oid + 1000, oid FROM {o} AS o(oid, cid) WHERE o.oid < 3 ORDER BY 1, 2 RETURNING *", simple)
	gatherBoth(t, c, fleet, oracle, "SELECT count(*) FROM {i} WHERE cid = 7", simple)
	ctx := context.Background()
	for _, q := range []string{
		"UPDATE rci i SET oid = 77 FROM rco AS o(oid, cid) WHERE o.cid = i.cid AND i.cid < 3",
		"DELETE FROM rci i USING rco AS o(oid, cid) WHERE o.cid = i.cid AND i.cid < 3",
	} {
		_, err := c.Exec(ctx, q, simple)
		wantRefusal(t, q, err)
	}
	gatherBoth(t, c, fleet, oracle, "SELECT * FROM {i} ORDER BY cid, iid", simple)
}

// TestWorkerErrorsInTransactions: a worker's error in a multi-row INSERT
// over several shards, a multi-shard write or a reference-table write
// inside a transaction block (or a query string of several statements),
// and a deferred constraint's error at the commit of a write over several
// workers, reach the client as PostgreSQL gives them (adversary: the
// shard's constraint name, and "cannot prepare the transaction on node
// ..." before the message).
func TestWorkerErrorsInTransactions(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	c := connect(t, srv.Addr())
	testTable(t, c, "wt", "(k int PRIMARY KEY, v int)", "SELECT create_distributed_table('wt', 'k', shard_count => 4)")
	testTable(t, c, "wtr", "(k int PRIMARY KEY, v int)", "SELECT create_reference_table('wtr')")
	testTable(t, c, "wtd", "(k int, u int, CONSTRAINT wtd_u UNIQUE (k, u) DEFERRABLE INITIALLY DEFERRED)", "SELECT create_distributed_table('wtd', 'k', shard_count => 4)")
	plainTables(t, c, "wto (k int PRIMARY KEY, v int)", "wtro (k int PRIMARY KEY, v int)", "wtdo (k int, u int, CONSTRAINT wtdo_u UNIQUE (k, u) DEFERRABLE INITIALLY DEFERRED)")
	for _, q := range []string{"INSERT INTO {t} VALUES (1, 1), (2, 2), (3, 3)", "INSERT INTO {r} VALUES (1, 1)", "INSERT INTO {d} VALUES (2, 1)"} {
		for _, names := range []*strings.Replacer{strings.NewReplacer("{t}", "wt", "{r}", "wtr", "{d}", "wtd"), strings.NewReplacer("{t}", "wto", "{r}", "wtro", "{d}", "wtdo")} {
			exec(t, c, names.Replace(q))
		}
	}
	pc, _ := noticeConn(t, srv.Addr())
	un := strings.NewReplacer("wtdo", "wtd", "wtro", "wtr", "wto", "wt")
	errOf := func(q string, names *strings.Replacer) string {
		ctx := context.Background()
		_, err := pc.Exec(ctx, names.Replace(q)).ReadAll()
		status := pc.TxStatus()
		if _, rerr := pc.Exec(ctx, "ROLLBACK").ReadAll(); rerr != nil {
			t.Fatalf("ROLLBACK after %s: %v", q, rerr)
		}
		var pe *pgconn.PgError
		if !errors.As(err, &pe) {
			return fmt.Sprintf("no error: %v", err)
		}
		return fmt.Sprintf("%s %q %q %q %c", pe.Code, un.Replace(pe.Message), un.Replace(pe.Detail), un.Replace(pe.ConstraintName), status)
	}
	fleet := strings.NewReplacer("{t}", "wt", "{r}", "wtr", "{d}", "wtd")
	oracle := strings.NewReplacer("{t}", "wto", "{r}", "wtro", "{d}", "wtdo")
	for _, q := range []string{
		"BEGIN; INSERT INTO {t} VALUES (5, 5), (6, 6), (1, 7)",
		"BEGIN; UPDATE {t} SET v = 1 / (k - 2)",
		"BEGIN; INSERT INTO {r} VALUES (1, 1)",
		"INSERT INTO {t} VALUES (7, 7), (8, 8), (2, 9) RETURNING k",
		"INSERT INTO {d} VALUES (2, 1), (3, 77), (4, 78)",
		"BEGIN; INSERT INTO {d} VALUES (2, 1); INSERT INTO {d} VALUES (3, 77); COMMIT",
		// Rows on both workers: the deferred violation comes at PREPARE
		// TRANSACTION, with its constraint and table (adversary: lost).
		"BEGIN; INSERT INTO {d} VALUES (2, 1); INSERT INTO {d} VALUES (3, 77); INSERT INTO {d} VALUES (4, 78); INSERT INTO {d} VALUES (5, 79); INSERT INTO {d} VALUES (6, 80); COMMIT",
	} {
		got, want := errOf(q, fleet), errOf(q, oracle)
		if got != want {
			t.Errorf("%s:\n got %s\nwant %s (plain PostgreSQL)", q, got, want)
		}
	}
}

// wantRefusal fails the test unless err is a refusal: 0A000 with a hint.
func wantRefusal(t *testing.T, what string, err error) {
	t.Helper()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "0A000" || pe.Hint == "" {
		t.Errorf("%s: %v, want 0A000 with a hint", what, err)
	}
}
