package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// batchRun runs stmts as one pgx Batch (one pipeline, one Sync) and
// returns, per statement, its rows and command tag or its SQLSTATE, then
// the batch's own error.
func batchRun(c *pgx.Conn, stmts []string) []string {
	ctx := context.Background()
	b := &pgx.Batch{}
	for _, s := range stmts {
		b.Queue(s)
	}
	br := c.SendBatch(ctx, b)
	var out []string
	for range stmts {
		rows, err := br.Query()
		if err != nil {
			out = append(out, "error "+sqlState(err))
			continue
		}
		var sb strings.Builder
		for rows.Next() {
			vals, _ := rows.Values()
			fmt.Fprintf(&sb, "%v;", vals)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			out = append(out, "error "+sqlState(err))
			continue
		}
		out = append(out, sb.String()+" "+rows.CommandTag().String())
	}
	if err := br.Close(); err != nil {
		out = append(out, "close "+sqlState(err))
	}
	return out
}

// TestPipelineAcrossWorkers: a pipeline (pgx Batch: many statements, one
// Sync) whose statements need several workers runs as on PostgreSQL: one
// implicit transaction outside a transaction block, all or nothing (an
// error anywhere keeps none of its writes), every statement seeing the
// writes before it, in each of pgx's execution modes; inside a client's
// transaction block it goes on to other workers too; a pipeline with its
// own BEGIN and COMMIT commits across workers. These pipelines got 0A000
// ("this batch already runs on worker ...").
func TestPipelineAcrossWorkers(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	plain := oracleDB(t, cl.Servers[1].Addr(), "ploracle")
	setup := connect(t, srv.Addr())
	testTable(t, setup, "pl_d", "(k int PRIMARY KEY, v text)", "SELECT create_distributed_table('pl_d', 'k', shard_count => 4)")
	testTable(t, setup, "pl_r", "(id int PRIMARY KEY, name text)", "SELECT create_reference_table('pl_r')")
	exec(t, plain, "DROP TABLE IF EXISTS pl_d, pl_r")
	exec(t, plain, "CREATE TABLE pl_d (k int PRIMARY KEY, v text)")
	exec(t, plain, "CREATE TABLE pl_r (id int PRIMARY KEY, name text)")
	reset := func() {
		for _, c := range []*pgx.Conn{setup, plain} {
			exec(t, c, "TRUNCATE pl_d, pl_r")
			exec(t, c, "INSERT INTO pl_d SELECT g, 's' || g FROM generate_series(1, 8) g")
			exec(t, c, "INSERT INTO pl_r VALUES (1, 'one'), (2, 'two')")
		}
	}

	contents := func(c *pgx.Conn) string {
		var s string
		if err := c.QueryRow(ctx, "SELECT coalesce(string_agg(k || '=' || v, ',' ORDER BY k), '') || ' / ' || "+
			"(SELECT coalesce(string_agg(id || '=' || name, ',' ORDER BY id), '') FROM pl_r) FROM pl_d").Scan(&s); err != nil {
			t.Fatalf("reading pl_d: %v", err)
		}
		return s
	}
	values := func(from, to int, tag string) string {
		var vals []string
		for k := from; k <= to; k++ {
			vals = append(vals, fmt.Sprintf("(%d, '%s%d')", k, tag, k))
		}
		return strings.Join(vals, ", ")
	}
	inserts := func(from, to int, tag string) []string {
		var s []string
		for k := from; k <= to; k++ {
			s = append(s, fmt.Sprintf("INSERT INTO pl_d VALUES (%d, '%s%d')", k, tag, k))
		}
		return s
	}
	scenarios := []struct {
		name  string
		stmts []string
	}{
		{"inserts on every shard, then reads of them", append(inserts(11, 18, "a"),
			"SELECT k, v FROM pl_d WHERE k = 3", "SELECT count(*) FROM pl_d", "SELECT k, v FROM pl_d ORDER BY k")},
		{"updates back and forth between workers", []string{
			"UPDATE pl_d SET v = v || 'u' WHERE k = 1", "UPDATE pl_d SET v = v || 'u' WHERE k = 2",
			"UPDATE pl_d SET v = v || 'u' WHERE k = 3", "UPDATE pl_d SET v = v || 'u' WHERE k = 1",
			"SELECT v FROM pl_d WHERE k = 1", "DELETE FROM pl_d WHERE k = 4 RETURNING v", "SELECT count(*) FROM pl_d"}},
		{"an error after writes on several workers keeps none", append(inserts(100, 105, "b"),
			"INSERT INTO pl_d VALUES (2, 'dup')", "INSERT INTO pl_d VALUES (106, 'c')")},
		{"an error first keeps none", append([]string{"INSERT INTO pl_d VALUES (5, 'dup')"}, inserts(110, 115, "d")...)},
		{"a statement error after a read", []string{"SELECT count(*) FROM pl_d", "INSERT INTO pl_d VALUES (120, 'e')",
			"SELECT 1/0", "INSERT INTO pl_d VALUES (121, 'e')"}},
		{"a multi-shard write and a multi-row insert", []string{"INSERT INTO pl_d VALUES (130, 'f')",
			"UPDATE pl_d SET v = v || 'm' WHERE v LIKE 'a%'", "INSERT INTO pl_d VALUES " + values(131, 136, "g"),
			"SELECT count(*) FROM pl_d WHERE v LIKE '%m'"}},
		{"a multi-shard write first, then more", []string{"UPDATE pl_d SET v = v || 'x' WHERE k > 2",
			"INSERT INTO pl_d VALUES (160, 'j')", "SELECT k, v FROM pl_d ORDER BY k"}},
		{"a multi-shard write first, then an error", []string{"DELETE FROM pl_d WHERE k > 4",
			"INSERT INTO pl_d VALUES (161, 'k')", "INSERT INTO pl_d VALUES (1, 'dup')"}},
		{"reference-table writes among others", []string{"INSERT INTO pl_d VALUES (170, 'l')",
			"INSERT INTO pl_r VALUES (3, 'three')", "UPDATE pl_r SET name = name || '!' WHERE id = 1",
			"SELECT d.k, r.name FROM pl_d d JOIN pl_r r ON r.id = d.k ORDER BY d.k", "INSERT INTO pl_d VALUES (171, 'l')"}},
		{"a reference-table write first, then an error", []string{"INSERT INTO pl_r VALUES (4, 'four')",
			"INSERT INTO pl_d VALUES (172, 'm')", "INSERT INTO pl_r VALUES (1, 'dup')"}},
		{"BEGIN and COMMIT in the pipeline", append(append([]string{"BEGIN"}, inserts(140, 145, "h")...), "COMMIT")},
		{"BEGIN, an error, COMMIT", append(append([]string{"BEGIN"}, inserts(150, 155, "i")...),
			"INSERT INTO pl_d VALUES (1, 'dup')", "COMMIT")},
	}
	connMode := func(url string, mode pgx.QueryExecMode) *pgx.Conn {
		cfg, err := pgx.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		cfg.DefaultQueryExecMode = mode
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		return c
	}
	plainURL := strings.Replace(pgtest.URL(cl.Servers[1].Addr()), "/postgres?", "/ploracle?", 1)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec, pgx.QueryExecModeDescribeExec} {
		c := connMode(pgtest.URL(srv.Addr()), mode)
		o := connMode(plainURL, mode)
		for _, sc := range scenarios {
			reset()
			got := batchRun(c, sc.stmts)
			want := batchRun(o, sc.stmts)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("mode %v, %s:\n got  %q\n want %q", mode, sc.name, got, want)
			}
			if g, w := contents(setup), contents(plain); g != w {
				t.Errorf("mode %v, %s: table after the pipeline\n got  %s\n want %s", mode, sc.name, g, w)
			}
			// The session goes on as PostgreSQL's: idle, usable.
			if g, w := c.PgConn().TxStatus(), o.PgConn().TxStatus(); g != w {
				t.Errorf("mode %v, %s: transaction status %c, PostgreSQL %c", mode, sc.name, g, w)
			}
			if c.PgConn().TxStatus() != 'I' {
				// A failed pipeline's COMMIT was skipped: the block is
				// still open, failed, as on PostgreSQL.
				exec(t, c, "ROLLBACK")
				exec(t, o, "ROLLBACK")
			}
			if g, w := contents(c), contents(o); g != w {
				t.Errorf("mode %v, %s: table read on the same session\n got  %s\n want %s", mode, sc.name, g, w)
			}
		}
	}

	// Inside a client's transaction block: the pipeline goes on to other
	// workers, its error fails the block, ROLLBACK undoes it all.
	reset()
	for _, conn := range []*pgx.Conn{connect(t, srv.Addr()), plain} {
		exec(t, conn, "BEGIN")
		if res := batchRun(conn, inserts(31, 38, "t")); strings.Contains(strings.Join(res, ""), "error") {
			t.Fatalf("pipeline in a transaction block: %q", res)
		}
		exec(t, conn, "COMMIT")
		exec(t, conn, "BEGIN")
		res := batchRun(conn, append(inserts(20, 27, "r"), "INSERT INTO pl_d VALUES (3, 'dup')"))
		if !strings.Contains(strings.Join(res, ""), "23505") {
			t.Errorf("pipeline with a duplicate in a transaction block: %q", res)
		}
		if st := conn.PgConn().TxStatus(); st != 'E' {
			t.Errorf("status after the failed pipeline in a transaction block: %c", st)
		}
		exec(t, conn, "ROLLBACK")
	}
	if g, w := contents(setup), contents(plain); g != w {
		t.Errorf("after pipelines in transaction blocks\n got  %s\n want %s", g, w)
	}
}

// TestBeginSyntaxError: a BEGIN that PostgreSQL rejects gets PostgreSQL's
// error at once, in both protocols and in a pipeline, and the session stays
// outside a transaction block (the coordinator answered BEGIN to it, and
// the error came with the next statement, which it failed).
func TestBeginSyntaxError(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	for _, addr := range []string{srv.Addr(), cl.Servers[0].Addr()} {
		c := connect(t, addr)
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
			for _, q := range []string{"begin isolation level nonsense", "begin garbage", "BEGIN READ ONLY READ WRITE x"} {
				if _, err := c.Exec(ctx, q, mode); sqlState(err) != "42601" {
					t.Errorf("%s, %v: %q: %v, want 42601", addr, mode, q, err)
				}
				if st := c.PgConn().TxStatus(); st != 'I' {
					t.Errorf("%s, %v: status after %q: %c, want I", addr, mode, q, st)
				}
				if got := queryString(t, c, "SELECT 'ok'"); got != "ok" {
					t.Errorf("%s: statement after %q: %q", addr, q, got)
				}
			}
		}
		b := &pgx.Batch{}
		b.Queue("begin garbage")
		b.Queue("SELECT 1")
		if err := c.SendBatch(ctx, b).Close(); sqlState(err) != "42601" {
			t.Errorf("%s: batch starting with a bad BEGIN: %v, want 42601", addr, err)
		}
		if st := c.PgConn().TxStatus(); st != 'I' {
			t.Errorf("%s: status after the batch: %c, want I", addr, st)
		}
	}
}

// TestBatchBeginWithModes: a BEGIN with an isolation level and access mode
// sent in a pipeline before a statement the worker connection has not
// prepared yet takes effect (the statement's Parse went to the worker
// before the BEGIN, took a snapshot, and the BEGIN failed with 25001 "SET
// TRANSACTION ISOLATION LEVEL must be called before any query"; pgx's
// TestConnSendBatchBeginTxOptions, now and then).
func TestBatchBeginWithModes(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	for i, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeDescribeExec, pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe} {
		cfg, err := pgx.ParseConfig(pgtest.URL(srv.Addr()))
		if err != nil {
			t.Fatal(err)
		}
		cfg.DefaultQueryExecMode = mode
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		b := &pgx.Batch{}
		b.Queue("begin isolation level repeatable read read only")
		// A text no connection has prepared before.
		b.Queue(fmt.Sprintf("select current_setting('transaction_isolation'), current_setting('transaction_read_only'), %d", i))
		br := c.SendBatch(ctx, b)
		if _, err := br.Exec(); err != nil {
			t.Fatalf("%v: BEGIN: %v", mode, err)
		}
		var iso, ro string
		var n int
		if err := br.QueryRow().Scan(&iso, &ro, &n); err != nil {
			t.Fatalf("%v: %v", mode, err)
		}
		if err := br.Close(); err != nil {
			t.Fatal(err)
		}
		if iso != "repeatable read" || ro != "on" {
			t.Errorf("%v: transaction %q read only %q, want repeatable read, on", mode, iso, ro)
		}
		exec(t, c, "ROLLBACK")
	}
}
