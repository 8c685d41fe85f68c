package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestRoutingThroughCoordinators distributes a table through one
// coordinator and checks, as a user would, that every row sits in its
// shard and that point reads and writes by key give what plain PostgreSQL
// gives, through both protocols and through a second coordinator.
func TestRoutingThroughCoordinators(t *testing.T) {
	cl := pgtest.Shared(t)
	a := pgtest.Coordinator(t, cl, nil)
	b := pgtest.Coordinator(t, cl, nil) // started before the table is distributed
	ctx := context.Background()
	c := connect(t, a.Addr())
	const n = 5000
	exec(t, c, "DROP TABLE IF EXISTS rt_acc, rt_ref")
	exec(t, c, "CREATE TABLE rt_acc (aid bigint PRIMARY KEY, bid int NOT NULL, v text, n int CHECK (n >= 0))")
	exec(t, c, fmt.Sprintf("INSERT INTO rt_acc SELECT g, g %% 10 + 1, 'v' || g, g %% 100 FROM generate_series(1, %d) g", n))
	exec(t, c, "CREATE TABLE rt_ref (bid int PRIMARY KEY, name text)")
	exec(t, c, "INSERT INTO rt_ref SELECT g, 'branch ' || g FROM generate_series(1, 10) g")
	simple := pgx.QueryExecModeSimpleProtocol
	exec(t, c, "SELECT create_distributed_table('rt_acc', 'aid', shard_count => 6)", simple)
	exec(t, c, "SELECT create_reference_table('rt_ref')", simple)
	t.Cleanup(func() {
		for _, q := range []string{"SELECT undistribute_table('rt_acc')", "SELECT undistribute_table('rt_ref')", "DROP TABLE IF EXISTS rt_acc, rt_ref"} {
			_, _ = c.Exec(ctx, q, simple)
		}
	})

	// Every row is in the shard whose hash range holds it, on the node the
	// catalog names, and none is lost.
	meta := connect(t, cl.Servers[0].Addr())
	total, shards, nodes := shardRows(t, cl.Servers[0].Addr(), "public.rt_acc", "aid")
	if shards != 6 {
		t.Fatalf("%d shards in the catalog, want 6", shards)
	}
	if total != n || nodes != 2 {
		t.Errorf("shards hold %d rows on %d nodes, want %d rows on 2", total, nodes, n)
	}
	var shell int
	if err := meta.QueryRow(ctx, "SELECT count(*) FROM rt_acc").Scan(&shell); err != nil || shell != 0 {
		t.Errorf("the default node's table still has %d rows (%v)", shell, err)
	}
	// A write that reaches that table (a coordinator whose catalog is a
	// moment behind) is refused, not acknowledged and lost.
	if _, err := meta.Exec(ctx, "INSERT INTO rt_acc (aid, bid) VALUES (-1, 1)"); sqlState(err) != "40001" {
		t.Errorf("write into the default node's table of a distributed table: %v, want 40001", err)
	}

	// Point reads, updates, deletes and inserts by key, in both protocols.
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, simple} {
		for k := int64(1); k <= n; k += 397 {
			var v string
			var num int
			if err := c.QueryRow(ctx, "SELECT v, n FROM rt_acc WHERE aid = $1", mode, k).Scan(&v, &num); err != nil {
				t.Fatalf("read %d (%v): %v", k, mode, err)
			}
			if v != fmt.Sprint("v", k) || num != int(k%100) {
				t.Errorf("row %d = %q %d", k, v, num)
			}
		}
		exec(t, c, "UPDATE rt_acc SET n = n + 1000 WHERE aid = $1", mode, 77)
		exec(t, c, "DELETE FROM rt_acc WHERE aid = $1", mode, 78)
		exec(t, c, "INSERT INTO rt_acc (aid, bid, v, n) VALUES ($1, 1, 'new', 5)", mode, 100000)
		var num int
		if err := c.QueryRow(ctx, "SELECT n FROM rt_acc WHERE aid = 77").Scan(&num); err != nil || num != 77+1000 {
			t.Errorf("after update: n = %d, %v", num, err)
		}
		exec(t, c, "UPDATE rt_acc SET n = 77 WHERE aid = 77")
		if err := c.QueryRow(ctx, "SELECT n FROM rt_acc WHERE aid = 78").Scan(&num); !errors.Is(err, pgx.ErrNoRows) {
			t.Errorf("deleted row: %v", err)
		}
		exec(t, c, "INSERT INTO rt_acc (aid, bid, v, n) VALUES (78, 8, 'v78', 78)")
		var v string
		if err := c.QueryRow(ctx, "SELECT v FROM rt_acc WHERE aid = 100000").Scan(&v); err != nil || v != "new" {
			t.Errorf("inserted row: %q, %v", v, err)
		}
		exec(t, c, "DELETE FROM rt_acc WHERE aid = 100000")
	}

	// A multi-row INSERT is split by shard, all or nothing.
	exec(t, c, "INSERT INTO rt_acc (aid, bid, v, n) VALUES (200001, 1, 'm1', 1), (200002, 2, 'm2', 2), (200003, 3, 'm3', 3), (200004, 4, 'm4', 4)", simple)
	for k := 200001; k <= 200004; k++ {
		if got := queryString(t, c, "SELECT v FROM rt_acc WHERE aid = $1", k); got != fmt.Sprint("m", k-200000) {
			t.Errorf("multi-row insert row %d: %q", k, got)
		}
	}
	if _, err := c.Exec(ctx, "INSERT INTO rt_acc (aid, bid, v, n) VALUES (200011, 1, 'x', 1), (200012, 1, 'x', 1), (200013, 1, 'x', 1), (200014, 1, 'x', 1), (5, 1, 'dup', 1)", simple); sqlState(err) != "23505" {
		t.Errorf("multi-row insert with a duplicate: %v, want 23505", err)
	}
	for k := 200011; k <= 200014; k++ {
		if err := c.QueryRow(ctx, "SELECT v FROM rt_acc WHERE aid = $1", k).Scan(new(string)); !errors.Is(err, pgx.ErrNoRows) {
			t.Errorf("row %d of the failed multi-row insert: %v", k, err)
		}
	}
	exec(t, c, "DELETE FROM rt_acc WHERE aid = 200001")

	// A constraint violation on a shard comes back with the worker's code.
	_, err := c.Exec(ctx, "INSERT INTO rt_acc (aid, bid, v, n) VALUES (5, 1, 'dup', 1)")
	if sqlState(err) != "23505" {
		t.Errorf("duplicate key: %v, want 23505", err)
	}

	// A reference table joins a distributed one; every node has it.
	var bname string
	if err := c.QueryRow(ctx, "SELECT r.name FROM rt_acc a JOIN rt_ref r ON r.bid = a.bid WHERE a.aid = $1", 13).Scan(&bname); err != nil || bname != "branch 4" {
		t.Errorf("join: %q, %v", bname, err)
	}
	for i := 0; i < 4; i++ {
		rc := connect(t, a.Addr()) // sessions spread reference reads over nodes
		if got := queryString(t, rc, "SELECT name FROM rt_ref WHERE bid = 7"); got != "branch 7" {
			t.Errorf("reference read: %q", got)
		}
	}

	// Reference-table writes inside a transaction block, even one whose
	// BEGIN the coordinator has not sent yet, run on every copy inside the
	// transaction: ROLLBACK undoes them, as it undoes a multi-row INSERT
	// over several shards, which joins the transaction too.
	for _, q := range []string{
		"INSERT INTO rt_ref VALUES (99, 'rolled back')",
		"UPDATE rt_ref SET name = 'rolled back' WHERE bid = 1",
	} {
		exec(t, c, "BEGIN", simple)
		exec(t, c, q, simple)
		exec(t, c, "ROLLBACK", simple)
	}
	exec(t, c, "BEGIN", simple)
	exec(t, c, "INSERT INTO rt_acc (aid, bid, v, n) VALUES (300001, 1, 'x', 1), (300002, 1, 'x', 1), (300003, 1, 'x', 1), (300004, 1, 'x', 1)", simple)
	var inTx int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM rt_acc WHERE aid BETWEEN 300001 AND 300004", simple).Scan(&inTx); err != nil || inTx != 4 {
		t.Errorf("multi-shard INSERT inside BEGIN, read back in the transaction: %d, %v; want 4", inTx, err)
	}
	exec(t, c, "ROLLBACK", simple)
	for _, q := range []string{"SELECT count(*) FROM rt_ref WHERE bid = 99 OR name = 'rolled back'",
		"SELECT count(*) FROM rt_acc WHERE aid BETWEEN 300001 AND 300004"} {
		var leaked int
		if err := c.QueryRow(ctx, q, simple).Scan(&leaked); err != nil || leaked != 0 {
			t.Errorf("%s after the rolled-back transactions: %d (%v), want 0", q, leaked, err)
		}
	}

	// A transaction that needs a second worker takes it in (two-phase
	// commit at COMMIT, txn_multi_test.go); a failure on either fails the
	// whole transaction and COMMIT rolls back both.
	exec(t, c, "BEGIN")
	exec(t, c, "UPDATE rt_acc SET n = 555 WHERE aid = 1")
	w1 := workerOfAid(t, c, "rt_acc", 1)
	crossKey := 2
	for ; crossKey < 60 && workerOfAid(t, c, "rt_acc", crossKey) == w1; crossKey++ {
	}
	exec(t, c, "UPDATE rt_acc SET n = 555 WHERE aid = $1", crossKey)
	if _, err := c.Exec(ctx, "UPDATE rt_acc SET n = -1 WHERE aid = $1", crossKey); sqlState(err) != "23514" {
		t.Fatalf("check violation on the second worker: %v, want 23514", err)
	}
	// The transaction has failed: any statement, for either worker, gets
	// 25P02 until it ends, as in PostgreSQL.
	for _, k := range []int{1, crossKey} {
		if _, err := c.Exec(ctx, "SELECT n FROM rt_acc WHERE aid = $1", k); sqlState(err) != "25P02" {
			t.Errorf("aid %d in the failed transaction: %v, want 25P02", k, err)
		}
	}
	if tag, err := c.Exec(ctx, "COMMIT"); err != nil || tag.String() != "ROLLBACK" {
		t.Fatalf("COMMIT of the failed transaction: %q, %v", tag, err)
	}
	var n1 int
	if err := c.QueryRow(ctx, "SELECT n FROM rt_acc WHERE aid = 1").Scan(&n1); err != nil || n1 != 1 {
		t.Errorf("after the failed transaction n = %d (%v), want the original 1", n1, err)
	}

	// Each transaction goes to the worker its first statement needs,
	// whichever worker that is.
	for k := 100; k < 120; k++ {
		exec(t, c, "BEGIN")
		exec(t, c, "UPDATE rt_acc SET n = n + 1 WHERE aid = $1", k)
		exec(t, c, "UPDATE rt_acc SET n = n - 1 WHERE aid = $1", k)
		exec(t, c, "COMMIT")
	}
	// A negative key through the simple protocol is routed, not refused.
	if err := c.QueryRow(ctx, "SELECT v FROM rt_acc WHERE aid = -7", simple).Scan(new(string)); !errors.Is(err, pgx.ErrNoRows) {
		t.Errorf("negative key: %v", err)
	}
	// Parse, Describe, Bind and Execute in one pipeline, for keys on both
	// workers.
	for k := int64(200); k < 210; k++ {
		pl := c.PgConn().StartPipeline(ctx)
		pl.SendPrepare(fmt.Sprint("pipe_", k), "SELECT v FROM rt_acc WHERE aid = $1", nil)
		pl.SendQueryPrepared(fmt.Sprint("pipe_", k), [][]byte{[]byte(fmt.Sprint(k))}, nil, nil)
		if err := pl.Sync(); err != nil {
			t.Fatal(err)
		}
		var got string
		for {
			r, err := pl.GetResults()
			if err != nil {
				t.Fatalf("pipeline for key %d: %v", k, err)
			}
			if r == nil {
				break
			}
			if rr, ok := r.(*pgconn.ResultReader); ok {
				res := rr.Read()
				if res.Err != nil {
					t.Fatalf("pipeline for key %d: %v", k, res.Err)
				}
				if len(res.Rows) == 1 {
					got = string(res.Rows[0][0])
				}
			}
			if _, ok := r.(*pgconn.PipelineSync); ok {
				break
			}
		}
		if err := pl.Close(); err != nil {
			t.Fatal(err)
		}
		if got != fmt.Sprint("v", k) {
			t.Errorf("pipeline for key %d: %q", k, got)
		}
	}

	// With another schema first in search_path holding a table of that
	// name, the unqualified name means that table: refused, while the
	// qualified name works.
	exec(t, c, "DROP SCHEMA IF EXISTS other_schema CASCADE", simple)
	exec(t, c, "CREATE SCHEMA other_schema", simple)
	exec(t, c, "CREATE TABLE other_schema.rt_acc (aid int, v text)", simple)
	t.Cleanup(func() { _, _ = c.Exec(context.Background(), "DROP SCHEMA IF EXISTS other_schema CASCADE", simple) })
	exec(t, c, "SET search_path TO other_schema, public")
	if _, err := c.Exec(ctx, "SELECT v FROM rt_acc WHERE aid = 1", simple); sqlState(err) != "0A000" {
		t.Errorf("unqualified name with search_path set: %v, want 0A000", err)
	}
	if got := queryString(t, c, "SELECT v FROM public.rt_acc WHERE aid = 3", simple); got != "v3" {
		t.Errorf("qualified name with search_path set: %q", got)
	}
	exec(t, c, "RESET search_path")

	// Queries the router cannot run are refused, never answered wrongly.
	// A reference-table write reaches every copy, atomically.
	if tag, err := c.PgConn().Exec(ctx, "UPDATE rt_ref SET name = name || '!' WHERE bid = 2").ReadAll(); err != nil || tag[0].CommandTag.String() != "UPDATE 1" {
		t.Fatalf("reference write: %v %v", tag, err)
	}
	for _, s := range cl.Servers {
		var name string
		if err := connect(t, s.Addr()).QueryRow(ctx, "SELECT name FROM pgfleet_shards.rt_ref_"+refShard(t, meta)+" WHERE bid = 2").Scan(&name); err != nil || name != "branch 2!" {
			t.Errorf("copy on %s: %q, %v", s.Addr(), name, err)
		}
	}
	if _, err := c.Exec(ctx, "INSERT INTO rt_ref VALUES (2, 'dup')", simple); sqlState(err) != "23505" {
		t.Errorf("duplicate in a reference table: %v, want 23505", err)
	}
	// Multi-shard reads work (scatter_test.go has the details).
	if got := queryString(t, c, "SELECT count(*)::text FROM rt_acc WHERE aid BETWEEN 1 AND 5000 AND n = 3"); got != "50" {
		t.Errorf("multi-shard count: %s, want 50", got)
	}
	for _, q := range []string{"WITH c AS (SELECT 3 AS n) UPDATE rt_acc SET v = 'x' WHERE n IN (SELECT n FROM c)"} {
		var args []any
		if strings.Contains(q, "$1") {
			args = append(args, 1)
		}
		if _, err := c.Exec(ctx, q, args...); sqlState(err) != "0A000" {
			t.Errorf("%s: %v, want 0A000", q, err)
		}
	}

	// The second coordinator picks the change up from the catalog.
	cb := connect(t, b.Addr())
	deadline := time.Now().Add(5 * time.Second)
	for {
		var v string
		err := cb.QueryRow(ctx, "SELECT v FROM rt_acc WHERE aid = 4242", simple).Scan(&v)
		if err == nil && v == "v4242" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("second coordinator after 5s: %q, %v", v, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestCopyIntoDistributedTable loads rows with COPY FROM STDIN through the
// coordinator: every row lands in its shard, and a COPY that fails on one
// shard stores nothing anywhere.
func TestCopyIntoDistributedTable(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	testTable(t, c, "cp_t", "(id bigint PRIMARY KEY, name text)", "SELECT create_distributed_table('cp_t', 'id', shard_count => 5)")
	const n = 20000
	var data strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&data, "%d\tname %d\n", i, i)
	}
	tag, err := c.PgConn().CopyFrom(ctx, strings.NewReader(data.String()), "COPY cp_t FROM STDIN")
	if err != nil {
		t.Fatal(err)
	}
	if tag.RowsAffected() != n {
		t.Errorf("COPY reported %d rows, want %d", tag.RowsAffected(), n)
	}
	total, _, _ := shardRows(t, cl.Servers[0].Addr(), "public.cp_t", "id")
	if total != n {
		t.Errorf("shards hold %d rows, want %d", total, n)
	}
	if got := queryString(t, c, "SELECT name FROM cp_t WHERE id = $1", 12345); got != "name 12345" {
		t.Errorf("row 12345: %q", got)
	}
	// A duplicate key in the middle of a second load: nothing of it stays.
	bad := "30001\tnew\n30002\tnew\n5\tdup\n30003\tnew\n"
	if _, err := c.PgConn().CopyFrom(ctx, strings.NewReader(bad), "COPY cp_t FROM STDIN"); sqlState(err) != "23505" {
		t.Fatalf("COPY with a duplicate: %v, want 23505", err)
	}
	if total, _, _ := shardRows(t, cl.Servers[0].Addr(), "public.cp_t", "id"); total != n {
		t.Errorf("after the failed COPY the shards hold %d rows, want %d", total, n)
	}
	// CSV with a header, through the simple protocol's COPY.
	csv := "id,name\n40001,\"comma, inside\"\n"
	if _, err := c.PgConn().CopyFrom(ctx, strings.NewReader(csv), "COPY cp_t FROM STDIN WITH (FORMAT csv, HEADER)"); err != nil {
		t.Fatal(err)
	}
	if got := queryString(t, c, "SELECT name FROM cp_t WHERE id = 40001"); got != "comma, inside" {
		t.Errorf("csv row: %q", got)
	}
}

// shardRows counts a distributed table's rows on the workers, its shards
// and the nodes holding them, failing the test if any row is outside its
// shard's hash range.
func shardRows(t *testing.T, metaAddr, table, col string) (total, shards, nodes int) {
	t.Helper()
	ctx := context.Background()
	meta := connect(t, metaAddr)
	rows, err := meta.Query(ctx, `SELECT s.shardid, s.min_hash, s.max_hash, n.host || ':' || n.port
		FROM pgfleet.shards s JOIN pgfleet.placements p USING (shardid) JOIN pgfleet.nodes n USING (nodeid)
		WHERE s.table_name = $1`, table)
	if err != nil {
		t.Fatal(err)
	}
	type sh struct {
		id     int64
		lo, hi int32
		addr   string
	}
	var list []sh
	for rows.Next() {
		var s sh
		if err := rows.Scan(&s.id, &s.lo, &s.hi, &s.addr); err != nil {
			t.Fatal(err)
		}
		list = append(list, s)
	}
	// The hash PostgreSQL's own function gives the column's type.
	var typ string
	if err := meta.QueryRow(ctx, "SELECT dist_type FROM pgfleet.tables WHERE name = $1", table).Scan(&typ); err != nil {
		t.Fatal(err)
	}
	hashFn := map[string]string{"int2": "hashint2", "int4": "hashint4", "int8": "hashint8", "text": "hashtext",
		"varchar": "hashtext", "bpchar": "hashbpchar", "uuid": "uuid_hash"}[typ]
	rel := table[strings.IndexByte(table, '.')+1:]
	seen := map[string]bool{}
	for _, s := range list {
		seen[s.addr] = true
		w := connect(t, s.addr)
		var cnt, wrong int
		q := fmt.Sprintf("SELECT count(*), count(*) FILTER (WHERE %s(%s) NOT BETWEEN %d AND %d) FROM pgfleet_shards.%s_%d", hashFn, col, s.lo, s.hi, rel, s.id)
		if err := w.QueryRow(ctx, q).Scan(&cnt, &wrong); err != nil {
			t.Fatalf("shard %d on %s: %v", s.id, s.addr, err)
		}
		if wrong != 0 {
			t.Errorf("shard %d holds %d rows outside its hash range", s.id, wrong)
		}
		total += cnt
	}
	return total, len(list), len(seen)
}

func refShard(t *testing.T, meta *pgx.Conn) string {
	t.Helper()
	var id string
	if err := meta.QueryRow(context.Background(), "SELECT shardid::text FROM pgfleet.shards WHERE table_name = 'public.rt_ref'").Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

func TestExplainShowsShardAndWorker(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	testTable(t, c, "ex_t", "(id bigint PRIMARY KEY, v int)", "SELECT create_distributed_table('ex_t', 'id', shard_count => 3)")
	rows, err := c.Query(ctx, "EXPLAIN SELECT v FROM ex_t WHERE id = 7", simple)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) < 2 || !strings.Contains(lines[0], "pgfleet router: shard ex_t_") || !strings.Contains(lines[0], "on worker 127.0.0.1:") ||
		!strings.Contains(lines[0], "= 7") || !strings.Contains(strings.Join(lines[1:], "\n"), "ex_t_") {
		t.Errorf("EXPLAIN output:\n%s", strings.Join(lines, "\n"))
	}
}

// TestDDLReachesEveryShard changes a distributed table's definition
// through the coordinator and checks every shard and the routed queries.
func TestDDLReachesEveryShard(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	exec(t, c, "DROP TABLE IF EXISTS ddl_t")
	exec(t, c, "CREATE TABLE ddl_t (id bigint PRIMARY KEY, v int)")
	exec(t, c, "SELECT create_distributed_table('ddl_t', 'id', shard_count => 4)", simple)
	t.Cleanup(func() { _, _ = c.Exec(ctx, "DROP TABLE IF EXISTS ddl_t", simple) })
	exec(t, c, "INSERT INTO ddl_t (id, v) VALUES (1, 10), (2, 20), (3, 30)", simple)
	exec(t, c, "ALTER TABLE ddl_t ADD COLUMN note text NOT NULL DEFAULT 'none'", simple)
	exec(t, c, "CREATE INDEX ddl_t_v_idx ON ddl_t (v)", simple)
	exec(t, c, "ALTER TABLE ddl_t ADD CONSTRAINT v_positive CHECK (v > 0)", simple)
	if got := queryString(t, c, "SELECT note FROM ddl_t WHERE id = 2"); got != "none" {
		t.Errorf("new column on an existing row: %q", got)
	}
	if _, err := c.Exec(ctx, "INSERT INTO ddl_t (id, v) VALUES (9, -1)"); sqlState(err) != "23514" {
		t.Errorf("CHECK on a shard: %v, want 23514", err)
	}
	meta := connect(t, cl.Servers[0].Addr())
	var shards, indexed int
	if err := meta.QueryRow(ctx, "SELECT count(*) FROM pgfleet.shards WHERE table_name = 'public.ddl_t'").Scan(&shards); err != nil {
		t.Fatal(err)
	}
	for _, s := range cl.Servers {
		var n int
		if err := connect(t, s.Addr()).QueryRow(ctx, "SELECT count(*) FROM pg_indexes WHERE indexname LIKE 'ddl_t_v_idx_%'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		indexed += n
	}
	if shards != 4 || indexed != 4 {
		t.Errorf("%d of %d shards have the new index", indexed, shards)
	}
	// A DDL failing on one shard changes none: a NOT NULL on a column one
	// shard holds a NULL in.
	exec(t, c, "ALTER TABLE ddl_t ADD COLUMN maybe int", simple)
	exec(t, c, "UPDATE ddl_t SET maybe = 1 WHERE id = 1")
	exec(t, c, "UPDATE ddl_t SET maybe = 1 WHERE id = 2")
	if _, err := c.Exec(ctx, "ALTER TABLE ddl_t ALTER COLUMN maybe SET NOT NULL", simple); sqlState(err) != "23502" ||
		!strings.Contains(err.Error(), "shard") {
		t.Errorf("failing DDL: %v, want 23502 naming the shard", err)
	}
	exec(t, c, "INSERT INTO ddl_t (id, v) VALUES (4, 40)") // maybe stays nullable everywhere
	exec(t, c, "TRUNCATE ddl_t", simple)
	if err := c.QueryRow(ctx, "SELECT v FROM ddl_t WHERE id = 1").Scan(new(int)); !errors.Is(err, pgx.ErrNoRows) {
		t.Errorf("after TRUNCATE: %v", err)
	}
	exec(t, c, "DROP TABLE ddl_t", simple)
	if err := meta.QueryRow(ctx, "SELECT count(*) FROM pgfleet.shards WHERE table_name = 'public.ddl_t'").Scan(&shards); err != nil || shards != 0 {
		t.Errorf("after DROP TABLE %d shards left in the catalog (%v)", shards, err)
	}
}

// testTable creates table (columns as in CREATE TABLE) through the
// coordinator c, runs distribute on it, and at cleanup undistributes and
// drops it.
func testTable(t testing.TB, c *pgx.Conn, table, columns, distribute string) {
	t.Helper()
	simple := pgx.QueryExecModeSimpleProtocol
	exec(t, c, "DROP TABLE IF EXISTS "+table)
	exec(t, c, "CREATE TABLE "+table+" "+columns)
	exec(t, c, distribute, simple)
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = c.Exec(ctx, "SELECT undistribute_table('"+table+"')", simple)
		_, _ = c.Exec(ctx, "DROP TABLE IF EXISTS "+table, simple)
	})
}
