package coordinator_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// scatterModes are the ways a client sends a query: the simple protocol
// (constants in the text), unnamed statements (pgx's exec mode, like
// pgbench -M extended) and named prepared statements (like -M prepared).
var scatterModes = []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec, pgx.QueryExecModeCacheStatement}

// scatterResult is a result as a client sees it: the columns' names and
// types, and the rows' raw values.
type scatterResult struct {
	cols []string
	rows []string
}

func scatterQuery(ctx context.Context, c *pgx.Conn, mode pgx.QueryExecMode, sql string, args []any) (scatterResult, error) {
	var res scatterResult
	rows, err := c.Query(ctx, sql, append([]any{mode}, args...)...)
	if err != nil {
		return res, err
	}
	defer rows.Close()
	for _, f := range rows.FieldDescriptions() {
		res.cols = append(res.cols, fmt.Sprintf("%s:%d:%d:%d:%d", f.Name, f.DataTypeOID, f.DataTypeSize, f.TypeModifier, f.Format))
	}
	for rows.Next() {
		var vals []string
		for _, v := range rows.RawValues() {
			if v == nil {
				vals = append(vals, "NULL")
			} else {
				vals = append(vals, hex.EncodeToString(v))
			}
		}
		res.rows = append(res.rows, strings.Join(vals, "|"))
	}
	return res, rows.Err()
}

// TestMultiShardSelect compares multi-shard queries through the
// coordinator with the same queries on unsharded copies of the tables,
// directly on a worker: same columns (names, types, type modifiers,
// formats), same rows, in the same order where ORDER BY fixes it; and
// checks what is refused with 0A000.
func TestMultiShardSelect(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	direct := connect(t, cl.Servers[0].Addr())
	simple := pgx.QueryExecModeSimpleProtocol

	const schema = `
CREATE TABLE %[1]s_acc (aid bigint PRIMARY KEY, bid int NOT NULL, abalance int, filler text, n numeric(10,2),
	f float8, r real, flag bool, d date, v varchar(10), tags int[], cname text COLLATE "C");
CREATE TABLE %[1]s_hist (aid bigint NOT NULL, delta int);
CREATE TABLE %[1]s_br (bid int PRIMARY KEY, bname text);
CREATE TABLE %[1]s_other (id bigint PRIMARY KEY, bid int);
INSERT INTO %[1]s_acc SELECT g, g %% 7 + 1, CASE WHEN g %% 11 = 0 THEN NULL ELSE (g * 37) %% 1000 - 300 END,
	CASE WHEN g %% 13 = 0 THEN NULL ELSE 'f' || lpad(((g * 7919) %% 1000)::text, 4, '0') END,
	CASE WHEN g %% 5 = 0 THEN NULL ELSE round(g / 7.0, 2) END, g / 3.0, g / 4.0, g %% 3 <> 0,
	DATE '2024-01-01' + g %% 9, 'v' || g %% 17, ARRAY[g, g + 1], 'c' || g
	FROM generate_series(1, 400) g;
INSERT INTO %[1]s_hist SELECT g %% 400 + 1, (g * 13) %% 50 - 20 FROM generate_series(1, 900) g;
INSERT INTO %[1]s_br SELECT g, 'branch ' || chr(64 + g) FROM generate_series(1, 7) g;
INSERT INTO %[1]s_other SELECT g, g %% 7 + 1 FROM generate_series(1, 50) g;`
	rename := twinTables(t, c, direct, "sg", schema, []string{"acc", "hist", "br", "other"}, []string{
		"SELECT create_distributed_table('sg_acc', 'aid', shard_count => 8)",
		"SELECT create_distributed_table('sg_hist', 'aid', colocate_with => 'sg_acc')",
		"SELECT create_reference_table('sg_br')",
		"SELECT create_distributed_table('sg_other', 'id', shard_count => 3)",
	})

	cases := []struct {
		sql     string
		args    []any
		ordered bool // ORDER BY fixes the order of every row
	}{
		{sql: "SELECT aid, bid, abalance FROM {acc} WHERE abalance > $1", args: []any{100}},
		{sql: "SELECT * FROM {acc}"},
		{sql: "SELECT count(*) FROM {acc} WHERE aid = 1 OR aid = 2"},
		{sql: "SELECT aid, filler FROM {acc} ORDER BY aid LIMIT 10 OFFSET 5", ordered: true},
		{sql: "SELECT aid FROM {acc} ORDER BY abalance DESC NULLS LAST, aid LIMIT $1", args: []any{7}, ordered: true},
		{sql: "SELECT aid * 2 AS x FROM {acc} ORDER BY x DESC LIMIT 4", ordered: true},
		{sql: "SELECT aid FROM {acc} ORDER BY abalance * 2, aid LIMIT 6 OFFSET 1", ordered: true},
		{sql: "SELECT aid FROM {acc} ORDER BY 1 DESC LIMIT 3", ordered: true},
		{sql: "SELECT * FROM {acc} ORDER BY aid DESC LIMIT 3", ordered: true},
		{sql: "SELECT filler, aid FROM {acc} WHERE filler IS NOT NULL ORDER BY filler DESC, aid LIMIT 5", ordered: true},
		{sql: "SELECT aid, v FROM {acc} ORDER BY v, aid LIMIT 10", ordered: true},
		{sql: "SELECT aid, filler FROM {acc} ORDER BY filler COLLATE \"C\", aid LIMIT 5", ordered: true},
		{sql: "SELECT count(*), count(abalance), sum(abalance), avg(abalance), min(filler), max(d), bool_and(flag), bool_or(flag), " +
			"sum(n), avg(n), min(n), max(f), min(v) FROM {acc}"},
		{sql: "SELECT sum(aid), avg(aid), min(f), max(r), sum(bid::int2), avg(bid::int2) FROM {acc} WHERE aid < $1", args: []any{300}},
		{sql: "SELECT sum(f)::numeric(20,6), avg(f)::numeric(20,6), pg_typeof(sum(f))::text, pg_typeof(avg(f))::text, pg_typeof(sum(r))::text FROM {acc}"},
		{sql: "SELECT bid, count(*), sum(abalance), avg(abalance) FROM {acc} WHERE aid BETWEEN $1 AND $2 + 99 GROUP BY bid ORDER BY bid", args: []any{50, 50}, ordered: true},
		{sql: "SELECT bid, count(*) AS c FROM {acc} GROUP BY bid HAVING count(*) > $1 ORDER BY c DESC, bid", args: []any{50}, ordered: true},
		{sql: "SELECT bid % 3 AS m, sum(abalance) / count(*), max(abalance) - min(abalance) FROM {acc} GROUP BY bid % 3 ORDER BY 1", ordered: true},
		{sql: "SELECT bid, avg(n), sum(n) FROM {acc} GROUP BY bid ORDER BY bid", ordered: true},
		{sql: "SELECT DISTINCT bid FROM {acc} ORDER BY bid", ordered: true},
		{sql: "SELECT DISTINCT d, flag FROM {acc}"},
		{sql: "SELECT DISTINCT ON (bid) bid, aid, abalance FROM {acc} ORDER BY bid, abalance DESC NULLS LAST, aid", ordered: true},
		{sql: "SELECT a.aid, h.delta, b.bname FROM {acc} a JOIN {hist} h ON a.aid = h.aid JOIN {br} b ON b.bid = a.bid WHERE h.delta > 25"},
		{sql: "SELECT b.bname, count(*), sum(h.delta) FROM {acc} a JOIN {hist} h ON h.aid = a.aid JOIN {br} b ON b.bid = a.bid GROUP BY b.bname ORDER BY b.bname", ordered: true},
		{sql: "SELECT aid, count(*), string_agg(delta::text, ',' ORDER BY delta) FROM {hist} GROUP BY aid ORDER BY aid LIMIT 20", ordered: true},
		{sql: "SELECT a.aid, b.bname FROM {acc} a LEFT JOIN {br} b ON b.bid = a.bid + 5 WHERE a.aid < 30"},
		{sql: "SELECT count(*) FROM {acc} WHERE false"},
		{sql: "SELECT bid, count(*) FROM {acc} WHERE false GROUP BY bid"},
		{sql: "SELECT max(abalance), avg(abalance), sum(abalance), count(abalance) FROM {acc} WHERE abalance IS NULL"},
		{sql: "SELECT count(*) FILTER (WHERE flag), every(flag), bit_or(bid), bit_and(bid), bit_xor(bid) FROM {acc}"},
		{sql: "SELECT d, count(*) FROM {acc} GROUP BY d ORDER BY d NULLS FIRST", ordered: true},
		{sql: "SELECT 1 AS one, 'x' AS x, count(*) FROM {acc}"},
		{sql: "SELECT count(*) FROM {acc} HAVING count(*) > 1000"},
		{sql: "SELECT bid FROM {acc} GROUP BY bid HAVING sum(abalance) > 0 ORDER BY sum(abalance) DESC, bid LIMIT 3 OFFSET 1", ordered: true},
		{sql: "SELECT aid, tags, cname FROM {acc} WHERE aid % 50 = 0"},
		{sql: "SELECT tags, aid, cname FROM {acc} ORDER BY aid DESC LIMIT 4", ordered: true},
		{sql: "SELECT DISTINCT ON (bid) tags, bid FROM {acc} ORDER BY bid, aid", ordered: true},
		{sql: "SELECT lower(filler) FROM {acc} WHERE aid < $1", args: []any{20}},
		{sql: "SELECT aid FROM {acc} WHERE bid = ANY($1) ORDER BY aid LIMIT 5", args: []any{[]int32{2, 3}}, ordered: true},
		// Gathered (the table has an int[] column, which goes as text).
		{sql: "SELECT count(DISTINCT bid) FROM {acc}"},
		{sql: "SELECT bid, string_agg(filler, ',' ORDER BY filler) FROM {acc} GROUP BY bid"},
		{sql: "SELECT array_agg(aid ORDER BY aid) FROM {acc}"},
		{sql: "SELECT aid, rank() OVER (ORDER BY abalance, aid) FROM {acc}"},
		{sql: "SELECT * FROM {acc} a JOIN {other} o ON a.aid = o.id"},
		{sql: "SELECT count(*), sum(h.delta) FROM {acc} a JOIN {hist} h ON a.bid = h.delta"},
		{sql: "SELECT DISTINCT aid FROM (SELECT aid FROM {acc} ORDER BY aid LIMIT $1 OFFSET 390) s", args: []any{5}},
		{sql: "SELECT * FROM {br} b LEFT JOIN {acc} a ON a.bid = b.bid"},
		// A merge cannot sort by an array or a "C" column: gathered.
		{sql: "SELECT tags FROM {acc} ORDER BY tags LIMIT 3", ordered: true},
		{sql: "SELECT cname FROM {acc} ORDER BY cname LIMIT 3", ordered: true},
		{sql: "SELECT * FROM {br} WHERE bid IN (SELECT bid FROM {acc})"},
		{sql: "SELECT bid, count(*) FROM {acc} GROUP BY ROLLUP (bid)"},
	}
	for _, tc := range cases {
		sqlC, sqlD := rename(tc.sql)
		for _, mode := range scatterModes {
			for round := 0; round < 2; round++ { // the second run uses cached plans and statements
				got, err := scatterQuery(ctx, c, mode, sqlC, tc.args)
				if err != nil {
					t.Errorf("%s (%v): %v", tc.sql, mode, err)
					break
				}
				want, err := scatterQuery(ctx, direct, mode, sqlD, tc.args)
				if err != nil {
					t.Fatalf("%s on PostgreSQL (%v): %v", tc.sql, mode, err)
				}
				sameResult(t, fmt.Sprintf("%s (%v)", tc.sql, mode), got, want, tc.ordered)
				if len(want.rows) == 0 && !strings.Contains(tc.sql, "false") && !strings.Contains(tc.sql, "1000") {
					t.Errorf("%s: no rows to compare", tc.sql)
				}
			}
		}
	}

	// LIMIT without ORDER BY: any rows of the table, as many as asked.
	for _, mode := range scatterModes {
		got, err := scatterQuery(ctx, c, mode, "SELECT aid FROM sg_acc LIMIT $1 OFFSET 390", []any{7})
		if err != nil || len(got.rows) != 7 {
			t.Errorf("LIMIT 7 OFFSET 390 (%v): %d rows, %v", mode, len(got.rows), err)
		}
		got, err = scatterQuery(ctx, c, mode, "SELECT aid FROM sg_acc LIMIT 3", nil)
		if err != nil || len(got.rows) != 3 {
			t.Errorf("LIMIT 3 (%v): %d rows, %v", mode, len(got.rows), err)
		}
		if _, err := scatterQuery(ctx, c, mode, "SELECT aid FROM sg_acc LIMIT $1", []any{-1}); sqlState(err) != "2201W" {
			t.Errorf("negative LIMIT (%v): %v, want 2201W", mode, err)
		}
	}

	// What cannot run exactly across shards is refused, in every protocol.
	for _, q := range []string{
		"SELECT * FROM sg_acc WHERE abalance > 0 FOR UPDATE",
		"SELECT avg(r) FROM sg_acc",
		"EXPLAIN ANALYZE SELECT count(*) FROM sg_acc",
		"WITH b AS (SELECT 1 AS bid) UPDATE sg_acc SET abalance = 0 WHERE bid IN (SELECT bid FROM b)",
	} {
		for _, mode := range scatterModes {
			if _, err := scatterQuery(ctx, c, mode, q, nil); sqlState(err) != "0A000" {
				t.Errorf("%s (%v): %v, want 0A000", q, mode, err)
			}
		}
	}
	// PostgreSQL rejects this itself: its answer (42803), not the refusal.
	for _, mode := range scatterModes {
		if _, err := scatterQuery(ctx, c, mode, "SELECT bid, abalance, count(*) FROM sg_acc GROUP BY bid", nil); sqlState(err) != "42803" {
			t.Errorf("GROUP BY without abalance (%v): %v, want 42803", mode, err)
		}
	}
	if got := queryString(t, c, "SELECT 'still usable'"); got != "still usable" {
		t.Error(got)
	}

	// An aggregate the planner does not know is found in the catalog.
	for _, s := range cl.Servers {
		exec(t, connect(t, s.Addr()), "CREATE OR REPLACE AGGREGATE sg_total(int) (sfunc = int4pl, stype = int)", simple)
	}
	t.Cleanup(func() {
		for _, s := range cl.Servers {
			_, _ = connect(t, s.Addr()).Exec(ctx, "DROP AGGREGATE IF EXISTS sg_total(int)", simple)
		}
	})
	for _, mode := range scatterModes {
		if _, err := scatterQuery(ctx, c, mode, "SELECT sg_total(bid) FROM sg_acc", nil); sqlState(err) != "0A000" {
			t.Errorf("user-defined aggregate (%v): %v, want 0A000", mode, err)
		}
	}

	// Workers' errors come back with their SQLSTATE.
	for _, mode := range scatterModes {
		if _, err := scatterQuery(ctx, c, mode, "SELECT aid / (bid - bid) FROM sg_acc", nil); sqlState(err) != "22012" {
			t.Errorf("division by zero on the shards (%v): %v, want 22012", mode, err)
		}
		if _, err := scatterQuery(ctx, c, mode, "SELECT count(nope) FROM sg_acc", nil); sqlState(err) != "42703" {
			t.Errorf("unknown column (%v): %v, want 42703", mode, err)
		}
	}

	// Inside a transaction block (READ COMMITTED): it runs, and the
	// transaction goes on (scatter_txn_test.go has the details).
	for _, mode := range scatterModes {
		tx, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "UPDATE sg_acc SET abalance = abalance WHERE aid = 1", mode); err != nil {
			t.Fatal(err)
		}
		if got, err := scatterQuery(ctx, tx.Conn(), mode, "SELECT count(*)::text FROM sg_acc", nil); err != nil || len(got.rows) != 1 || got.rows[0] != hex.EncodeToString([]byte("400")) {
			t.Errorf("multi-shard query in a transaction (%v): %v, %v, want 400", mode, got.rows, err)
		}
		if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
			t.Errorf("after the multi-shard query the transaction (%v): %v", mode, err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Errorf("ROLLBACK (%v): %v", mode, err)
		}
	}

	// A pipeline: Parse, Describe, Bind, Execute of a multi-shard and a
	// routed statement, one Sync.
	pl := c.PgConn().StartPipeline(ctx)
	pl.SendPrepare("sg_pipe", "SELECT count(*) FROM sg_acc WHERE bid = $1", nil)
	pl.SendQueryPrepared("sg_pipe", [][]byte{[]byte("3")}, nil, nil)
	pl.SendQueryParams("SELECT filler FROM sg_acc WHERE aid = $1", [][]byte{[]byte("7")}, nil, nil, nil)
	if err := pl.Sync(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		r, err := pl.GetResults()
		if err != nil {
			t.Fatal(err)
		}
		if r == nil {
			break
		}
		if rr, ok := r.(*pgconn.ResultReader); ok {
			res := rr.Read()
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			for _, row := range res.Rows {
				got = append(got, string(row[0]))
			}
		}
		if _, ok := r.(*pgconn.PipelineSync); ok {
			break
		}
	}
	if err := pl.Close(); err != nil {
		t.Fatal(err)
	}
	if want := []string{queryString(t, direct, "SELECT count(*)::text FROM sgp_acc WHERE bid = 3"),
		queryString(t, direct, "SELECT filler FROM sgp_acc WHERE aid = 7")}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("pipeline: %v, want %v", got, want)
	}

	// A cancel request stops a long multi-shard query.
	cancelStops(t, c, func() error {
		_, err := c.Exec(ctx, "SELECT count(*) FROM sg_acc WHERE pg_sleep(0.5) IS NOT NULL", simple)
		return err
	}, "SELECT count(*)::text FROM sg_acc", "400")
}

// cancelStops runs query in the background, sends a cancel request on c
// while it runs, and checks that it ends with 57014 and that the session
// then answers check with want.
func cancelStops(t *testing.T, c *pgx.Conn, query func() error, check, want string) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- query() }()
	time.Sleep(300 * time.Millisecond)
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.PgConn().CancelRequest(cctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if sqlState(err) != "57014" {
			t.Errorf("canceled multi-shard query: %v, want 57014", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("cancel did not stop the multi-shard query")
	}
	if got := queryString(t, c, check); got != want {
		t.Errorf("after cancel: %s, want %s", got, want)
	}
}

// TestScatterPgbench runs the benchmark's scatter workload through the
// coordinator with pgbench in its three protocol modes.
func TestScatterPgbench(t *testing.T) {
	pgbench, url, c := pgbenchTables(t, "SELECT create_distributed_table('pgbench_accounts', 'aid', shard_count => 8)")
	ctx := context.Background()
	script := filepath.Join(t.TempDir(), "scatter.sql")
	if err := os.WriteFile(script, []byte(`\set lo random(1, :naccounts - 1000)
SELECT bid, count(*), sum(abalance), avg(abalance) FROM pgbench_accounts WHERE aid BETWEEN :lo AND :lo + 999 GROUP BY bid ORDER BY bid;
`), 0o644); err != nil {
		t.Fatal(err)
	}
	failed := regexp.MustCompile(`number of failed transactions: (\d+)`)
	done := regexp.MustCompile(`number of transactions actually processed: (\d+)`)
	tps := regexp.MustCompile(`tps = ([0-9.]+)`)
	for _, mode := range []string{"simple", "extended", "prepared"} {
		out, err := osexec.Command(pgbench, "-n", "-M", mode, "-c", "4", "-j", "2", "-T", "2", "-D", "naccounts=100000",
			"-f", script, url).CombinedOutput()
		if err != nil {
			t.Errorf("pgbench -M %s: %v\n%s", mode, err, out)
			continue
		}
		f, d := failed.FindSubmatch(out), done.FindSubmatch(out)
		if d == nil || string(d[1]) == "0" || (f != nil && string(f[1]) != "0") {
			t.Errorf("pgbench -M %s:\n%s", mode, out)
		}
		if m := tps.FindSubmatch(out); m != nil {
			t.Logf("scatter workload, pgbench -M %s, 4 clients: %s tps", mode, m[1])
		}
	}
	// Accounts 99500..100000 are in branch 1 with balance 0 (pgbench -i).
	// A multi-shard query in a subquery gathers the table (100,000 rows).
	var branches, accounts int64
	if err := c.QueryRow(ctx, "SELECT count(*), sum(n) FROM (SELECT bid, count(*) AS n FROM pgbench_accounts GROUP BY bid) x").Scan(&branches, &accounts); err != nil ||
		branches != 1 || accounts != 100000 {
		t.Errorf("multi-shard query in a subquery: %d branches, %d accounts, %v; want 1, 100000", branches, accounts, err)
	}
	for _, mode := range scatterModes {
		var bid int32
		var n, sum int64
		var avg float64
		err := c.QueryRow(ctx, "SELECT bid, count(*), sum(abalance), avg(abalance) FROM pgbench_accounts WHERE aid BETWEEN $1 AND $1 + 999 GROUP BY bid ORDER BY bid",
			mode, 99500).Scan(&bid, &n, &sum, &avg)
		if err != nil || bid != 1 || n != 501 || sum != 0 || avg != 0 {
			t.Errorf("scatter query (%v): %d %d %d %v, %v", mode, bid, n, sum, avg, err)
		}
	}
}

// twinTables makes a test's tables twice: through the coordinator c with
// prefix p (then distributed by the statements in distribute) and
// unsharded, directly on a worker, with prefix p+"p"; schema is a format
// whose %[1]s is the prefix, tables the names after the prefix. Both sets
// are dropped first and at cleanup. rename maps "{name}" in a statement to
// each set's table.
func twinTables(t *testing.T, c, direct *pgx.Conn, p, schema string, tables, distribute []string) (rename func(string) (string, string)) {
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	drop := func(conn *pgx.Conn, prefix string) {
		var names []string
		for _, tb := range tables {
			_, _ = conn.Exec(ctx, "SELECT undistribute_table('"+prefix+"_"+tb+"')", simple)
			names = append(names, prefix+"_"+tb)
		}
		_, _ = conn.Exec(ctx, "DROP TABLE IF EXISTS "+strings.Join(names, ", "), simple)
	}
	drop(c, p)
	drop(direct, p+"p")
	exec(t, c, fmt.Sprintf(schema, p), simple)
	exec(t, direct, fmt.Sprintf(schema, p+"p"), simple)
	for _, q := range distribute {
		exec(t, c, q, simple)
	}
	t.Cleanup(func() {
		drop(c, p)
		drop(direct, p+"p")
	})
	return func(sql string) (string, string) {
		return strings.NewReplacer("{", p+"_", "}", "").Replace(sql), strings.NewReplacer("{", p+"p_", "}", "").Replace(sql)
	}
}

// pgbenchTables loads pgbench's tables at scale 1 through a coordinator
// (pool 8) and runs distribute through it; they are dropped first and at
// cleanup. It returns pgbench, the coordinator's URL and a connection to it.
func pgbenchTables(t *testing.T, distribute ...string) (pgbench, url string, c *pgx.Conn) {
	return pgbenchTablesPool(t, 8, distribute...)
}

// pgbenchTablesPool is pgbenchTables through a coordinator with the given
// pool size.
func pgbenchTablesPool(t *testing.T, pool int, distribute ...string) (pgbench, url string, c *pgx.Conn) {
	pgbench, err := osexec.LookPath("pgbench")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("pgbench not found under CI")
		}
		t.Skip("pgbench not found")
	}
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(pool))
	ctx := context.Background()
	c = connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	url = pgtest.URL(srv.Addr())
	drop := func() {
		for _, tb := range []string{"pgbench_accounts", "pgbench_history", "pgbench_branches", "pgbench_tellers"} {
			_, _ = c.Exec(ctx, "SELECT undistribute_table('"+tb+"')", simple)
		}
		_, _ = c.Exec(ctx, "DROP TABLE IF EXISTS pgbench_accounts, pgbench_branches, pgbench_tellers, pgbench_history", simple)
	}
	drop()
	t.Cleanup(drop)
	if out, err := osexec.Command(pgbench, "-i", "-q", "-I", "dtGp", "-s", "1", url).CombinedOutput(); err != nil {
		t.Fatalf("pgbench -i: %v\n%s", err, out)
	}
	for _, q := range distribute {
		exec(t, c, q, simple)
	}
	return pgbench, url, c
}

// sameResult compares a coordinator's result with PostgreSQL's: the same
// columns, and the same rows, in the same order when ordered.
func sameResult(t *testing.T, what string, got, want scatterResult, ordered bool) {
	t.Helper()
	if !ordered {
		sort.Strings(got.rows)
		sort.Strings(want.rows)
	}
	if strings.Join(got.cols, ",") != strings.Join(want.cols, ",") {
		t.Errorf("%s: columns\n got %v\nwant %v", what, got.cols, want.cols)
	}
	if strings.Join(got.rows, "\n") != strings.Join(want.rows, "\n") {
		t.Errorf("%s: %d rows, want %d\n got %.400v\nwant %.400v", what, len(got.rows), len(want.rows), got.rows, want.rows)
	}
}
