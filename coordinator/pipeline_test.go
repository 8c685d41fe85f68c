package coordinator_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/internal/pgcluster"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// batchRun runs stmts as one pgx Batch (one pipeline, one Sync) and
// returns, per statement, its rows and command tag or its SQLSTATE, then
// the batch's own error.
func batchRun(c *pgx.Conn, stmts []string) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
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
	plainURL := strings.Replace(pgtest.URL(cl.Servers[1].Addr()), "/postgres?", "/ploracle?", 1)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec, pgx.QueryExecModeDescribeExec} {
		c := connMode(t, pgtest.URL(srv.Addr()), mode)
		o := connMode(t, plainURL, mode)
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
		c := connMode(t, pgtest.URL(srv.Addr()), mode)
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

// pipeRaw sends msgs as they are (no Sync added) and reads until the
// zs-th ReadyForQuery: the answers as short strings ("row v", "error
// CODE", "Z status", "C tag", "s" for PortalSuspended).
func pipeRaw(t *testing.T, c *protoClient, zs int, msgs ...pgproto3.FrontendMessage) []string {
	t.Helper()
	sendRaw(t, c, msgs...)
	return answers(t, c, zs, func(msg pgproto3.BackendMessage) (string, bool) {
		switch m := msg.(type) {
		case *pgproto3.DataRow:
			return "row " + string(m.Values[0]), true
		case *pgproto3.ErrorResponse:
			return "error " + m.Code, true
		case *pgproto3.CommandComplete:
			return "C " + string(m.CommandTag), true
		case *pgproto3.PortalSuspended:
			return "s", true
		case *pgproto3.ReadyForQuery:
			return "Z " + string(m.TxStatus), true
		}
		return "", false
	})
}

// answers reads c's answers up to the zs-th ReadyForQuery and names each
// that name keeps (ok).
func answers(t *testing.T, c *protoClient, zs int, name func(pgproto3.BackendMessage) (s string, ok bool)) []string {
	t.Helper()
	var out []string
	for zs > 0 {
		msg, err := c.fe.Receive()
		if err != nil {
			t.Fatalf("receive: %v (answers so far: %q)", err, out)
		}
		if _, ok := msg.(*pgproto3.ReadyForQuery); ok {
			zs--
		}
		if s, ok := name(msg); ok {
			out = append(out, s)
		}
	}
	return out
}

// sendRaw sends msgs as they are, with a 20 s deadline for them and the
// answers.
func sendRaw(t *testing.T, c *protoClient, msgs ...pgproto3.FrontendMessage) {
	t.Helper()
	for _, m := range msgs {
		c.fe.Send(m)
	}
	_ = c.conn.SetDeadline(time.Now().Add(20 * time.Second))
	if err := c.fe.Flush(); err != nil {
		t.Fatalf("send: %v", err)
	}
}

// TestPipelineAcrossWorkersEdges: what an adversary found in pipelines over
// several workers. A SET before the pipeline goes to a second worker holds
// there too (set again after its BEGIN); a SET, or a statement the
// coordinator refuses, after the pipeline went to a second worker: the refusal and ReadyForQuery idle,
// nothing kept (both hung, a prepared transaction left on a worker); a
// simple Query in the middle of such a pipeline: refused, the pipeline's
// writes before it rolled back, what follows runs (the session was left
// in a transaction block); a named portal bound before the pipeline moved
// on is still there; a Parse and Close of one name skipped after an error
// leave no statement (26000, as PostgreSQL); pg_notify() in a statement on
// a shard: 0A000 (its notification was lost on the shard's worker).
func TestPipelineAcrossWorkersEdges(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	setup := connect(t, srv.Addr())
	testTable(t, setup, "pe_d", "(k int PRIMARY KEY, v text)", "SELECT create_distributed_table('pe_d', 'k', shard_count => 4)")
	// Keys 1 to 8 fall on both workers (4 shards over 2).
	rows := func() string {
		return queryString(t, setup, "SELECT coalesce(string_agg(k::text, ',' ORDER BY k), '') FROM pe_d")
	}
	many := func(from, to int) []string {
		var s []string
		for k := from; k <= to; k++ {
			s = append(s, fmt.Sprintf("INSERT INTO pe_d VALUES (%d, 'p')", k))
		}
		return s
	}

	c := connect(t, srv.Addr())
	res := batchRun(c, append(append([]string{"SET statement_timeout = 1234"}, many(1, 8)...),
		"SELECT current_setting('statement_timeout') || count(*) FROM pe_d WHERE k = 8"))
	if strings.Contains(strings.Join(res, " "), "error") || res[len(res)-1] != "[1234ms1]; SELECT 1" {
		t.Errorf("a SET, then rows on both workers, in one pipeline: %q, want all done and 1234ms on the second worker", res)
	}
	if got := rows(); got != "1,2,3,4,5,6,7,8" {
		t.Errorf("a SET, then rows on both workers, in one pipeline: rows kept %s, want 1 to 8", got)
	}
	if got := queryString(t, c, "SHOW statement_timeout"); got != "1234ms" {
		t.Errorf("a SET in a pipeline: the session afterwards: statement_timeout %s", got)
	}
	exec(t, c, "RESET statement_timeout")
	// Rows on both workers, a SET, then rows on both again: the SET holds
	// on the worker the pipeline comes back to (it was refused, the
	// pipeline rolled back).
	exec(t, setup, "TRUNCATE pe_d")
	stmts := append(append(many(1, 8), "SET statement_timeout = 1234"), many(9, 16)...)
	for k := 1; k <= 8; k++ {
		stmts = append(stmts, fmt.Sprintf("SELECT current_setting('statement_timeout') FROM pe_d WHERE k = %d", k))
	}
	res = batchRun(c, stmts)
	if j := strings.Join(res, " "); strings.Contains(j, "error") || strings.Count(j, "[1234ms];") != 8 {
		t.Errorf("rows on both workers, a SET, rows on both again: %q, want all done and 1234ms on both workers", res)
	}
	if got := rows(); got != "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16" {
		t.Errorf("rows on both workers, a SET, rows on both again: rows kept %s, want 1 to 16", got)
	}
	if got := queryString(t, c, "SHOW statement_timeout"); got != "1234ms" {
		t.Errorf("a SET in a pipeline over both workers: the session afterwards: statement_timeout %s", got)
	}
	exec(t, c, "RESET statement_timeout")
	for _, stmts := range [][]string{
		{"INSERT INTO pe_d (k, v) VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd'), (5, 'e'), (6, 'f')", "UPDATE pe_d SET v = now()::text RETURNING k"},
		{"INSERT INTO pe_d (k, v) VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd'), (5, 'e'), (6, 'f')", "SAVEPOINT a"},
	} {
		exec(t, setup, "TRUNCATE pe_d")
		res := batchRun(c, stmts)
		if !strings.Contains(strings.Join(res, " "), "error") {
			t.Errorf("%q: %q, want an error", stmts, res)
		}
		if st := c.PgConn().TxStatus(); st != 'I' {
			t.Errorf("%q: status %c, want I", stmts, st)
		}
		if got := rows(); got != "" {
			t.Errorf("%q: rows kept %s, want none", stmts, got)
		}
		if got := queryString(t, c, "SELECT count(*)::text FROM pe_d"); got != "0" {
			t.Errorf("%q: the session afterwards: %s", stmts, got)
		}
	}
	// A multi-shard UPDATE ... RETURNING after a multi-row INSERT over both
	// workers, in one pipeline: PostgreSQL's answer, all kept.
	exec(t, setup, "TRUNCATE pe_d")
	res = batchRun(c, []string{"INSERT INTO pe_d (k, v) VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd'), (5, 'e'), (6, 'f')", "UPDATE pe_d SET v = v || '!' RETURNING k"})
	if got := strings.Join(res, " "); strings.Contains(got, "error") || !strings.Contains(got, "UPDATE 6") {
		t.Errorf("INSERT then UPDATE ... RETURNING in a pipeline: %q", res)
	}
	if got := queryString(t, setup, "SELECT string_agg(k || v, ',' ORDER BY k) FROM pe_d"); got != "1a!,2b!,3c!,4d!,5e!,6f!" {
		t.Errorf("after the pipeline: %s", got)
	}
	if got := queryString(t, setup, "SELECT count(*)::text FROM pg_prepared_xacts"); got != "0" {
		t.Errorf("prepared transactions left: %s", got)
	}

	exec(t, setup, "TRUNCATE pe_d")
	p := protoDial(t, srv.Addr(), "raw")
	ins := func(k int) []pgproto3.FrontendMessage {
		return []pgproto3.FrontendMessage{&pgproto3.Parse{Query: fmt.Sprintf("INSERT INTO pe_d VALUES (%d, 'r')", k)}, &pgproto3.Bind{}, &pgproto3.Execute{}}
	}
	var msgs []pgproto3.FrontendMessage
	for k := 1; k <= 6; k++ {
		msgs = append(msgs, ins(k)...)
	}
	msgs = append(msgs, &pgproto3.Query{String: "SELECT 1"})
	msgs = append(msgs, ins(30)...)
	msgs = append(msgs, &pgproto3.Sync{})
	got := pipeRaw(t, p, 2, msgs...)
	if strings.Join(got, " ") != "C INSERT 0 1 C INSERT 0 1 C INSERT 0 1 C INSERT 0 1 C INSERT 0 1 C INSERT 0 1 error 0A000 Z I C INSERT 0 1 Z I" {
		t.Errorf("a Query inside a pipeline over several workers: %q", got)
	}
	if got := rows(); got != "30" {
		t.Errorf("rows after it: %s, want the statement after the Query's only", got)
	}
	exec(t, setup, "TRUNCATE pe_d")

	// A named portal bound, then the pipeline moves on, then the portal.
	got = pipeRaw(t, p, 0, // the rest of this pipeline follows
		&pgproto3.Parse{Name: "pe_s1", Query: "SELECT g FROM generate_series(1, 3) g, pe_d WHERE pe_d.k = 1 ORDER BY g"},
		&pgproto3.Parse{Query: "INSERT INTO pe_d VALUES (1, 'q')"}, &pgproto3.Bind{}, &pgproto3.Execute{},
		&pgproto3.Bind{DestinationPortal: "pe_p1", PreparedStatement: "pe_s1"}, &pgproto3.Execute{Portal: "pe_p1", MaxRows: 1})
	_ = got
	var tail []pgproto3.FrontendMessage
	for k := 2; k <= 8; k++ {
		tail = append(tail, ins(k)...)
	}
	tail = append(tail, &pgproto3.Execute{Portal: "pe_p1", MaxRows: 1}, &pgproto3.Sync{})
	got = pipeRaw(t, p, 1, tail...)
	if !slices.Contains(got, "row 2") || slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "error") }) {
		t.Errorf("a named portal after the pipeline moved to another worker: %q, want its next row", got)
	}
	if got := rows(); got != "1,2,3,4,5,6,7,8" {
		t.Errorf("rows after the pipeline with a portal: %s", got)
	}

	// Parse and Close of one name, skipped after an error.
	got = pipeRaw(t, p, 1, &pgproto3.Parse{Query: "SELECT 1/0"}, &pgproto3.Bind{}, &pgproto3.Execute{},
		&pgproto3.Parse{Name: "pe_s3", Query: "SELECT 3"}, &pgproto3.Close{ObjectType: 'S', Name: "pe_s3"}, &pgproto3.Sync{})
	if strings.Join(got, " ") != "error 22012 Z I" {
		t.Errorf("skipped Parse and Close: %q", got)
	}
	got = pipeRaw(t, p, 1, &pgproto3.Bind{PreparedStatement: "pe_s3"}, &pgproto3.Execute{}, &pgproto3.Sync{})
	if strings.Join(got, " ") != "error 26000 Z I" {
		t.Errorf("the statement whose Parse was skipped: %q, want 26000", got)
	}

	// pg_notify() on a shard's worker.
	if _, err := c.Exec(ctx, "SELECT pg_notify('pe_ch', v) FROM pe_d WHERE k = 2"); sqlState(err) != "0A000" {
		t.Errorf("pg_notify() in a routed statement: %v, want 0A000", err)
	}
	if _, err := c.Exec(ctx, "SELECT pg_notify('pe_ch', 'x')"); err != nil {
		t.Errorf("pg_notify() on its own: %v", err)
	}
}

// TestWritePipelineSentInParts: a pipeline whose first statement is a
// reference-table or multi-shard write, sent in parts (psycopg's
// executemany writes its pipeline as it goes: the write's Execute reached
// pgfleet before the next statement did), is one implicit transaction as
// on PostgreSQL: a later statement's error rolls the write back, and
// without one everything commits at the Sync. Before, the write committed
// on its own and the next statement got 0A000: half the batch kept.
func TestWritePipelineSentInParts(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	setup := connect(t, srv.Addr())
	testTable(t, setup, "wp_r", "(k int PRIMARY KEY, v text)", "SELECT create_reference_table('wp_r')")
	testTable(t, setup, "wp_d", "(k int PRIMARY KEY, v text)", "SELECT create_distributed_table('wp_d', 'k', shard_count => 4)")
	p := protoDial(t, srv.Addr(), "parts")
	write := func(sql string) []pgproto3.FrontendMessage {
		return []pgproto3.FrontendMessage{&pgproto3.Parse{Query: sql}, &pgproto3.Bind{}, &pgproto3.Execute{}}
	}
	for _, c := range []struct{ table, first string }{
		{"wp_r", "INSERT INTO wp_r VALUES (1, 'a')"},
		{"wp_d", "INSERT INTO wp_d VALUES (1, 'a'), (2, 'a'), (3, 'a'), (4, 'a')"},
		{"wp_d", "UPDATE wp_d SET v = 'b'"},
	} {
		for _, fails := range []bool{true, false} {
			exec(t, setup, "TRUNCATE "+c.table)
			if strings.HasPrefix(c.first, "UPDATE") {
				exec(t, setup, "INSERT INTO wp_d VALUES (1, 'a'), (2, 'a'), (3, 'a'), (4, 'a')")
			}
			before := queryString(t, setup, "SELECT coalesce(string_agg(k || v, ',' ORDER BY k), '') FROM "+c.table)
			got := pipeRaw(t, p, 0, write(c.first)...) // sent, no Sync yet
			time.Sleep(100 * time.Millisecond)
			second := "INSERT INTO " + c.table + " VALUES (10, 'z')"
			if fails {
				second = "INSERT INTO " + c.table + " VALUES (10, 'z'), (10, 'z')" // 23505
			}
			got = append(got, pipeRaw(t, p, 1, append(write(second), &pgproto3.Sync{})...)...)
			after := queryString(t, setup, "SELECT coalesce(string_agg(k || v, ',' ORDER BY k), '') FROM "+c.table)
			switch {
			case fails && (!slices.Contains(got, "error 23505") || after != before):
				t.Errorf("%s, then a failing statement, sent in parts: %q; rows %q, want 23505 and the rows before (%q)", c.first, got, after, before)
			case !fails && (slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "error") }) || !strings.Contains(after, "10z") || after == before+",10z"):
				t.Errorf("%s, then another statement, sent in parts: %q; rows %q, want both applied", c.first, got, after)
			}
			if got[len(got)-1] != "Z I" {
				t.Errorf("%s in parts: %q, want ReadyForQuery idle last", c.first, got)
			}
		}
	}
	if got := queryString(t, setup, "SELECT count(*)::text FROM pg_prepared_xacts"); got != "0" {
		t.Errorf("prepared transactions left: %s", got)
	}
}

// TestDescribeErrorSkipsBatch: a Describe of a statement fails on the
// worker that describes it (here a lock timeout on the shard it picked)
// and what follows in the same batch runs elsewhere: a Bind and Execute
// routed to another worker, a reference-table write, a multi-shard read.
// They are skipped to the Sync, as PostgreSQL skips them after an error:
// the client gets the one error, then ReadyForQuery, and nothing is
// written; in a transaction block too, where the block is then failed.
// Found by a shard-move stress test: the client got 40001 at the Describe,
// then BindComplete and "UPDATE 1" from the other worker, so a write
// reported failed had committed (and pgx closed the connection).
func TestDescribeErrorSkipsBatch(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	testTable(t, c, "de_t", "(id int PRIMARY KEY, v int NOT NULL)", "SELECT create_distributed_table('de_t', 'id', shard_count => 4)")
	testTable(t, c, "de_ref", "(k int PRIMARY KEY, v int NOT NULL)", "SELECT create_reference_table('de_ref')")
	exec(t, c, "INSERT INTO de_t SELECT g, 0 FROM generate_series(1, 40) g", simple)
	exec(t, c, "INSERT INTO de_ref VALUES (1, 0)", simple)
	// The statement is described on the table's first shard (by id);
	// every shard of the table on that worker gets locked, and the key
	// the Bind sends is on the other worker.
	port := queryString(t, c, `SELECT n.port::text FROM pgfleet.shards s JOIN pgfleet.placements p USING (shardid)
		JOIN pgfleet.nodes n USING (nodeid) WHERE s.table_name = 'public.de_t' ORDER BY s.shardid LIMIT 1`)
	var locked, other int
	for i, s := range cl.Servers {
		if fmt.Sprint(s.Port) == port {
			locked = i
		} else {
			other = i
		}
	}
	key := keysByWorker(t, c, "de_t", 40)[fmt.Sprint(cl.Servers[other].Port)]
	p := protoDial(t, srv.Addr(), "fleet")
	const update = "UPDATE de_t SET v = v + 1 WHERE id = $1"
	described := func(name string, then ...pgproto3.FrontendMessage) []pgproto3.FrontendMessage {
		return append([]pgproto3.FrontendMessage{&pgproto3.Parse{Name: name, Query: update},
			&pgproto3.Describe{ObjectType: 'S', Name: name}}, append(then, &pgproto3.Sync{})...)
	}
	bound := func(name string) []pgproto3.FrontendMessage {
		return described(name, &pgproto3.Bind{PreparedStatement: name, Parameters: [][]byte{[]byte(fmt.Sprint(key))}},
			&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{})
	}
	unnamed := func(sql string) []pgproto3.FrontendMessage {
		return []pgproto3.FrontendMessage{&pgproto3.Parse{Query: sql}, &pgproto3.Bind{}, &pgproto3.Execute{}}
	}
	refWrite := unnamed("UPDATE de_ref SET v = v + 1 WHERE k = 1")
	scatter := unnamed("SELECT count(*) FROM de_t")
	// Each once without the lock: the statements are known, so the next
	// Parses are answered without a worker and the Describe is the first
	// message a worker sees.
	for _, tc := range []struct {
		msgs []pgproto3.FrontendMessage
		want []string
	}{
		{bound("s0"), []string{"ParseComplete", "BindComplete", "C UPDATE 1", "Z I"}},
		{described("s1", refWrite...), []string{"ParseComplete", "ParseComplete", "BindComplete", "C UPDATE 1", "Z I"}},
		{described("s2", scatter...), []string{"ParseComplete", "ParseComplete", "BindComplete", "C SELECT 1", "Z I"}},
	} {
		if got := transcript(t, p, tc.msgs...); !slices.Equal(got, tc.want) {
			t.Fatalf("without the lock: %q, want %q", got, tc.want)
		}
	}
	locker := connect(t, cl.Servers[locked].Addr())
	exec(t, locker, "BEGIN")
	for _, tb := range queryStrings(t, locker, `SELECT 'pgfleet_shards.' || quote_ident(relname) FROM pg_class
		WHERE relnamespace = 'pgfleet_shards'::regnamespace AND relname LIKE 'de\_t\_%' AND relkind = 'r'`) {
		exec(t, locker, "LOCK TABLE "+tb+" IN ACCESS EXCLUSIVE MODE")
	}
	if got := transcript(t, p, &pgproto3.Query{String: "SET lock_timeout = '300ms'"}); !slices.Equal(got, []string{"C SET", "Z I"}) {
		t.Fatalf("SET lock_timeout: %q", got)
	}
	failed := func(got []string, status string) bool {
		return len(got) == 3 && got[0] == "ParseComplete" && strings.HasPrefix(got[1], "E 55P03 ") && got[2] == "Z "+status
	}
	for _, tc := range []struct {
		what string
		msgs []pgproto3.FrontendMessage
	}{{"a Bind routed to the other worker", bound("s3")}, {"a reference write", described("s4", refWrite...)},
		{"a multi-shard read", described("s5", scatter...)}} {
		if got := transcript(t, p, tc.msgs...); !failed(got, "I") {
			t.Errorf("%s after the failed Describe: %q, want ParseComplete, 55P03, ReadyForQuery idle", tc.what, got)
		}
	}
	transcript(t, p, &pgproto3.Query{String: "BEGIN"})
	if got := transcript(t, p, bound("s6")...); !failed(got, "E") {
		t.Errorf("in a block: %q, want ParseComplete, 55P03, ReadyForQuery failed", got)
	}
	if got := transcript(t, p, &pgproto3.Query{String: "ROLLBACK"}); !slices.Equal(got, []string{"C ROLLBACK", "Z I"}) {
		t.Errorf("ROLLBACK: %q", got)
	}
	exec(t, locker, "ROLLBACK")
	if v := queryString(t, c, "SELECT v::text FROM de_t WHERE id = $1", key); v != "1" {
		t.Errorf("row %d has v = %s after one update and two failed ones, want 1", key, v)
	}
	if v := queryString(t, c, "SELECT v::text FROM de_ref WHERE k = 1"); v != "1" {
		t.Errorf("the reference row has v = %s after one update and a failed one, want 1", v)
	}
	// The statement itself is sound: with the lock gone it updates.
	if got := transcript(t, p, bound("s7")...); !slices.Equal(got, []string{"ParseComplete", "BindComplete", "C UPDATE 1", "Z I"}) {
		t.Errorf("with the lock gone: %q", got)
	}
	if v := queryString(t, c, "SELECT v::text FROM de_t WHERE id = $1", key); v != "2" {
		t.Errorf("row %d has v = %s, want 2", key, v)
	}
}

// oracleTables makes table (id int PRIMARY KEY, v int NOT NULL), hash
// distributed in 4 shards through srv, and table_plain on the first worker,
// both with rows 1 to 20 at v = 0; it returns pgx connections to the
// coordinator and the worker and raw protocol clients of each.
func oracleTables(t *testing.T, cl *pgcluster.Cluster, srv *coordinator.Server, table string) (c, direct *pgx.Conn, fleet, plain *protoClient) {
	t.Helper()
	simple := pgx.QueryExecModeSimpleProtocol
	c = connect(t, srv.Addr())
	testTable(t, c, table, "(id int PRIMARY KEY, v int NOT NULL)", "SELECT create_distributed_table('"+table+"', 'id', shard_count => 4)")
	exec(t, c, "INSERT INTO "+table+" SELECT g, 0 FROM generate_series(1, 20) g", simple)
	direct = connect(t, cl.Servers[0].Addr())
	plainTable(t, direct, table+"_plain", "(id int PRIMARY KEY, v int NOT NULL)")
	exec(t, direct, "INSERT INTO "+table+"_plain SELECT g, 0 FROM generate_series(1, 20) g", simple)
	return c, direct, protoDial(t, srv.Addr(), "fleet"), protoDial(t, cl.Servers[0].Addr(), "plain")
}

// withTables is msgs with the statement texts of its Parse and Query
// messages passed through r (placeholders made one side's table names).
func withTables(msgs []pgproto3.FrontendMessage, r *strings.Replacer) []pgproto3.FrontendMessage {
	out := make([]pgproto3.FrontendMessage, 0, len(msgs))
	for _, m := range msgs {
		switch m := m.(type) {
		case *pgproto3.Parse:
			out = append(out, &pgproto3.Parse{Name: m.Name, Query: r.Replace(m.Query), ParameterOIDs: m.ParameterOIDs})
		case *pgproto3.Query:
			out = append(out, &pgproto3.Query{String: r.Replace(m.String)})
		default:
			out = append(out, m)
		}
	}
	return out
}

// TestQueryInsideExtendedBatch: a simple Query sent after extended-protocol
// statements, before their Sync, compared with the same messages sent to
// PostgreSQL on plain tables. After an error the Query is skipped, as are
// a bridged statement (DDL) and a reference write; in a transaction block
// the Query runs after the statements ahead of it and ROLLBACK undoes both.
// Outside a block after statements ran, a Query pgfleet runs itself (a
// reference write) is refused with 0A000 and the statements before it are
// rolled back, where PostgreSQL would commit both. Adversary finding: the
// Query ran first and committed whatever came before it, even an error or
// the client's ROLLBACK.
func TestQueryInsideExtendedBatch(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	testTable(t, c, "qx_t", "(id int PRIMARY KEY, v int NOT NULL)", "SELECT create_distributed_table('qx_t', 'id', shard_count => 4)")
	testTable(t, c, "qx_r", "(k int PRIMARY KEY, v int NOT NULL)", "SELECT create_reference_table('qx_r')")
	testTable(t, c, "qx_t2", "(id int PRIMARY KEY)", "SELECT create_distributed_table('qx_t2', 'id', colocate_with => 'qx_t')")
	direct := connect(t, cl.Servers[0].Addr())
	plainTable(t, direct, "qx_t_plain", "(id int PRIMARY KEY, v int NOT NULL)")
	plainTable(t, direct, "qx_r_plain", "(k int PRIMARY KEY, v int NOT NULL)")
	plainTable(t, direct, "qx_t2_plain", "(id int PRIMARY KEY)")
	for _, tb := range []string{"qx_t", "qx_t_plain"} {
		conn := c
		if strings.HasSuffix(tb, "_plain") {
			conn = direct
		}
		exec(t, conn, "INSERT INTO "+tb+" SELECT g, 0 FROM generate_series(1, 20) g", simple)
		exec(t, conn, "INSERT INTO "+strings.Replace(tb, "qx_t", "qx_r", 1)+" VALUES (1, 0)", simple)
	}
	fleet := protoDial(t, srv.Addr(), "fleet")
	plain := protoDial(t, cl.Servers[0].Addr(), "plain")
	// state is what a table holds: row 1 of both tables and whether
	// qx_t2 has the column c3.
	state := func(conn *pgx.Conn, suffix string) string {
		return queryString(t, conn, "SELECT v::text FROM qx_t"+suffix+" WHERE id = 1") + " " +
			queryString(t, conn, "SELECT v::text FROM qx_r"+suffix+" WHERE k = 1") + " " +
			queryString(t, conn, "SELECT count(*)::text FROM information_schema.columns WHERE table_name = 'qx_t2"+suffix+"' AND column_name = 'c3'")
	}
	dup := "INSERT INTO {T} VALUES (1, 5)"
	upd := "UPDATE {T} SET v = v + 1 WHERE id = 1"
	ref := "UPDATE {R} SET v = v + 1 WHERE k = 1"
	unnamed := func(sql string) []pgproto3.FrontendMessage {
		return []pgproto3.FrontendMessage{&pgproto3.Parse{Query: sql}, &pgproto3.Bind{}, &pgproto3.Execute{}}
	}
	type step struct {
		zs   int
		msgs []pgproto3.FrontendMessage
	}
	q := func(sql string) step { return step{1, []pgproto3.FrontendMessage{&pgproto3.Query{String: sql}}} }
	batch := func(zs int, parts ...[]pgproto3.FrontendMessage) step {
		var msgs []pgproto3.FrontendMessage
		for _, p := range parts {
			msgs = append(msgs, p...)
		}
		return step{zs, append(msgs, &pgproto3.Sync{})}
	}
	query := func(sql string) []pgproto3.FrontendMessage {
		return []pgproto3.FrontendMessage{&pgproto3.Query{String: sql}}
	}
	// names puts a side's tables for {T}, {R} and {T2} in msgs.
	names := func(msgs []pgproto3.FrontendMessage, suffix string) []pgproto3.FrontendMessage {
		return withTables(msgs, strings.NewReplacer("{T2}", "qx_t2"+suffix, "{T}", "qx_t"+suffix, "{R}", "qx_r"+suffix))
	}
	for _, tc := range []struct {
		what  string
		steps []step
	}{
		{"an error, then a reference write", []step{batch(1, unnamed(dup), query(ref))}},
		{"an error, then a multi-shard write", []step{batch(1, unnamed(dup), query("UPDATE {T} SET v = v + 1 WHERE id > 18"))}},
		{"in a block, then ROLLBACK", []step{q("BEGIN"), batch(2, unnamed(upd), query(ref)), q("ROLLBACK")}},
		{"in a block, an error first", []step{q("BEGIN"), batch(1, unnamed(dup), query(ref)), q("ROLLBACK")}},
		{"an error, then COPY", []step{batch(1, unnamed(dup), query("COPY {R} FROM STDIN"))}},
		{"in a block, an error, then a cursor's FETCH", []step{q("BEGIN"), q("DECLARE cur CURSOR FOR SELECT id FROM {T} ORDER BY id"),
			batch(1, unnamed(dup), unnamed("FETCH 2 FROM cur")), q("ROLLBACK")}},
		{"a FETCH in a failed block", []step{q("BEGIN"), q("DECLARE cur CURSOR FOR SELECT id FROM {T} ORDER BY id"), q("SELECT 1/0"),
			batch(1, unnamed("FETCH 2 FROM cur")), q("ROLLBACK")}},
		{"a failed Parse on the held worker, then DDL", []step{batch(1,
			[]pgproto3.FrontendMessage{&pgproto3.Parse{Name: "qa", Query: "SELECT v FROM {T} WHERE id = $1"}, &pgproto3.Describe{ObjectType: 'S', Name: "qa"},
				&pgproto3.Parse{Name: "qb", Query: "SELECT nosuchcol FROM {T} WHERE id = $1"}},
			unnamed("ALTER TABLE {T2} ADD COLUMN c3 int"))}},
	} {
		for _, st := range tc.steps {
			got := pipeRaw(t, fleet, st.zs, names(st.msgs, "")...)
			want := pipeRaw(t, plain, st.zs, names(st.msgs, "_plain")...)
			if !slices.Equal(got, want) {
				t.Errorf("%s: %q, PostgreSQL %q", tc.what, got, want)
			}
		}
		if got, want := state(c, ""), state(direct, "_plain"); got != want {
			t.Errorf("%s: row 1, the reference row, column c3: %s, PostgreSQL %s", tc.what, got, want)
		}
	}
	// Outside a block after a statement ran: refused, and the statement
	// rolled back.
	before := state(c, "")
	got := pipeRaw(t, fleet, 2, names(batch(2, unnamed(upd), query(ref)).msgs, "")...)
	if !slices.Equal(got, []string{"C UPDATE 1", "error 0A000", "Z I", "Z I"}) {
		t.Errorf("a reference write after a statement ran: %q, want the statement's answer, 0A000, ReadyForQuery twice", got)
	}
	if after := state(c, ""); after != before {
		t.Errorf("after the refusal: %s, want %s (nothing kept)", after, before)
	}
}

// TestStatementOutlivesFailedBatch: a statement the client parsed (and
// was told so) before any worker prepared its text lives on after a batch
// in which an earlier message failed and its Bind was skipped, named or
// unnamed, as PostgreSQL's statements outlive a failed batch; the same
// messages on a plain table are the oracle. Adversary finding: the next
// Bind got 26000, and parsing the name again succeeded where PostgreSQL
// answers 42P05.
func TestStatementOutlivesFailedBatch(t *testing.T) {
	cl := pgtest.Shared(t)
	c, direct, fleet, plain := oracleTables(t, cl, pgtest.Coordinator(t, cl, nil), "so_t")
	arg := func(v string) [][]byte { return [][]byte{[]byte(v)} }
	for _, name := range []string{"s1", ""} {
		// A text no worker has prepared yet (the name is in it).
		update := "UPDATE so_t SET v = v + 1 WHERE id = $1 /* " + name + " */"
		steps := [][]pgproto3.FrontendMessage{
			{&pgproto3.Parse{Name: name, Query: update}, &pgproto3.Sync{}},
			{&pgproto3.Parse{Name: "dup", Query: "INSERT INTO so_t VALUES (1, 5)"}, &pgproto3.Bind{PreparedStatement: "dup"}, &pgproto3.Execute{},
				&pgproto3.Bind{PreparedStatement: name, Parameters: arg("1")}, &pgproto3.Execute{}, &pgproto3.Sync{}},
			{&pgproto3.Bind{PreparedStatement: name, Parameters: arg("2")}, &pgproto3.Execute{}, &pgproto3.Sync{}},
			{&pgproto3.Close{ObjectType: 'S', Name: "dup"}, &pgproto3.Sync{}},
		}
		if name != "" {
			steps = append(steps, []pgproto3.FrontendMessage{&pgproto3.Parse{Name: name, Query: update}, &pgproto3.Sync{}})
		}
		for i, msgs := range steps {
			got, want := pipeRaw(t, fleet, 1, msgs...), pipeRaw(t, plain, 1, withTables(msgs, strings.NewReplacer("so_t", "so_t_plain"))...)
			if !slices.Equal(got, want) {
				t.Errorf("statement %q, step %d: %q, PostgreSQL %q", name, i, got, want)
			}
		}
	}
	if got, want := queryString(t, c, "SELECT string_agg(v::text, ',' ORDER BY id) FROM so_t"),
		queryString(t, direct, "SELECT string_agg(v::text, ',' ORDER BY id) FROM so_t_plain"); got != want {
		t.Errorf("rows %s, PostgreSQL %s", got, want)
	}
}

// TestSkippedParseDoesNotPin: a Parse of a statement that would pin the
// session to its worker connection (set_config(), CREATE TEMP TABLE),
// skipped after an earlier message of the batch failed on the worker,
// pins nothing, as PostgreSQL made nothing: in a block the client's
// ROLLBACK ends it, and outside one statements still reach every worker.
// The same messages on PostgreSQL are the oracle. Adversary finding: the
// session stayed pinned, and in a block that had not reached a worker
// every later statement, ROLLBACK included, got 25P02.
func TestSkippedParseDoesNotPin(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	testTable(t, c, "pp_t", "(id int PRIMARY KEY, v int NOT NULL)", "SELECT create_distributed_table('pp_t', 'id', shard_count => 4)")
	exec(t, c, "INSERT INTO pp_t SELECT g, 0 FROM generate_series(1, 20) g", pgx.QueryExecModeSimpleProtocol)
	keys := keysByWorker(t, c, "pp_t", 20)
	fleet := protoDial(t, srv.Addr(), "fleet")
	plain := protoDial(t, cl.Servers[0].Addr(), "plain")
	q := func(sql string) []pgproto3.FrontendMessage {
		return []pgproto3.FrontendMessage{&pgproto3.Query{String: sql}}
	}
	failed := func(pinning string) []pgproto3.FrontendMessage {
		return []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "SELECT * FROM pp_nosuch_table"}, &pgproto3.Parse{Query: pinning}, &pgproto3.Sync{}}
	}
	// notPinned checks a statement for each worker runs.
	notPinned := func(after string) {
		t.Helper()
		for _, k := range keys {
			if got := pipeRaw(t, fleet, 1, q(fmt.Sprintf("UPDATE pp_t SET v = v + 1 WHERE id = %d", k))...); !slices.Equal(got, []string{"C UPDATE 1", "Z I"}) {
				t.Errorf("%s: update of key %d: %q", after, k, got)
			}
		}
	}
	for _, pinning := range []string{"SELECT set_config('application_name', 'pp', false)", "CREATE TEMP TABLE pp_tmp (a int)"} {
		for _, msgs := range [][]pgproto3.FrontendMessage{q("BEGIN"), failed(pinning), q("ROLLBACK"), q("SELECT 1"), failed(pinning), q("SELECT 2")} {
			if got, want := pipeRaw(t, fleet, 1, msgs...), pipeRaw(t, plain, 1, msgs...); !slices.Equal(got, want) {
				t.Errorf("%s: %q, PostgreSQL %q", pinning, got, want)
			}
		}
		notPinned(pinning)
	}
	// A pinning Parse the coordinator refuses itself (it cannot tell
	// what the multi-shard read would see once the statement changed the
	// session) pins nothing either; in a block, ROLLBACK ends it.
	refused := []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "SELECT set_config('application_name', count(*)::text, false) FROM pp_t"},
		&pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{}}
	for _, block := range []bool{false, true} {
		if block {
			pipeRaw(t, fleet, 1, q("BEGIN")...)
		}
		if got := pipeRaw(t, fleet, 1, refused...); len(got) != 2 || !strings.HasPrefix(got[0], "error ") {
			t.Errorf("the refused Parse (block %v): %q, want an error and ReadyForQuery", block, got)
		}
		if block {
			if got := pipeRaw(t, fleet, 1, q("ROLLBACK")...); !slices.Equal(got, []string{"C ROLLBACK", "Z I"}) {
				t.Errorf("ROLLBACK after the refused Parse: %q", got)
			}
		}
		notPinned(fmt.Sprintf("the refused Parse (block %v)", block))
	}
}

// TestQueryAfterCoordinatorAnswers: answers the coordinator made itself for
// extended-protocol messages before a simple Query in the same batch (a
// ParseComplete, a multi-shard write's CommandComplete in a block) reach
// the client before the Query's, in PostgreSQL's order; the same messages
// on plain tables are the oracle. Adversary finding: they came after the
// Query's ReadyForQuery when the coordinator answered the Query too.
func TestQueryAfterCoordinatorAnswers(t *testing.T) {
	cl := pgtest.Shared(t)
	c, direct, fleet, plain := oracleTables(t, cl, pgtest.Coordinator(t, cl, nil), "qo_t")
	// order sends msgs and names every answer up to the zs-th
	// ReadyForQuery.
	order := func(p *protoClient, zs int, msgs ...pgproto3.FrontendMessage) []string {
		sendRaw(t, p, msgs...)
		return answers(t, p, zs, func(m pgproto3.BackendMessage) (string, bool) {
			name := strings.TrimPrefix(fmt.Sprintf("%T", m), "*pgproto3.")
			switch m := m.(type) {
			case *pgproto3.CommandComplete:
				name += " " + string(m.CommandTag)
			case *pgproto3.ReadyForQuery:
				name += " " + string(m.TxStatus)
			case *pgproto3.ParameterStatus, *pgproto3.NoticeResponse:
				return "", false
			}
			return name, true
		})
	}
	for _, tc := range []struct {
		what  string
		steps [][]pgproto3.FrontendMessage
	}{
		{"a Parse, then BEGIN", [][]pgproto3.FrontendMessage{{&pgproto3.Parse{Name: "qo1", Query: "UPDATE {T} SET v = v + 1 WHERE id = $1"},
			&pgproto3.Query{String: "BEGIN"}, &pgproto3.Sync{}}, {&pgproto3.Query{String: "ROLLBACK"}}}},
		{"a multi-shard write in a block, then COMMIT", [][]pgproto3.FrontendMessage{{&pgproto3.Query{String: "BEGIN"}},
			{&pgproto3.Parse{Query: "UPDATE {T} SET v = v + 1"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Query{String: "COMMIT"}, &pgproto3.Sync{}}}},
	} {
		for _, msgs := range tc.steps {
			zs := 0 // a ReadyForQuery for each Query and Sync
			for _, m := range msgs {
				switch m.(type) {
				case *pgproto3.Query, *pgproto3.Sync:
					zs++
				}
			}
			got := order(fleet, zs, withTables(msgs, strings.NewReplacer("{T}", "qo_t"))...)
			want := order(plain, zs, withTables(msgs, strings.NewReplacer("{T}", "qo_t_plain"))...)
			if !slices.Equal(got, want) {
				t.Errorf("%s: %q, PostgreSQL %q", tc.what, got, want)
			}
		}
	}
	if got, want := queryString(t, c, "SELECT sum(v)::text FROM qo_t"), queryString(t, direct, "SELECT sum(v)::text FROM qo_t_plain"); got != want {
		t.Errorf("sum(v) %s, PostgreSQL %s", got, want)
	}
}

// TestStatementOutlivesTableChange: a statement parsed while its column
// existed, never run on a worker, fails at its Bind after the column is
// dropped, and runs again once it is back, as PostgreSQL's (the same
// messages on a plain table are the oracle). Adversary finding: the first
// failure dropped the statement (26000 for good), as if its Parse had
// failed.
func TestStatementOutlivesTableChange(t *testing.T) {
	cl := pgtest.Shared(t)
	_, _, fleet, plain := oracleTables(t, cl, pgtest.Coordinator(t, cl, nil), "sc_t")
	q := func(sql string) []pgproto3.FrontendMessage {
		return []pgproto3.FrontendMessage{&pgproto3.Query{String: sql}}
	}
	run := []pgproto3.FrontendMessage{&pgproto3.Bind{PreparedStatement: "sc1", Parameters: [][]byte{[]byte("1")}}, &pgproto3.Execute{}, &pgproto3.Sync{}}
	steps := [][]pgproto3.FrontendMessage{
		q("ALTER TABLE {T} ADD COLUMN w int"),
		{&pgproto3.Parse{Name: "sc1", Query: "SELECT w FROM {T} WHERE id = $1"}, &pgproto3.Sync{}},
		q("ALTER TABLE {T} DROP COLUMN w"), run, run,
		q("ALTER TABLE {T} ADD COLUMN w int"), run,
	}
	for i, msgs := range steps {
		side := func(table string) []pgproto3.FrontendMessage {
			return withTables(msgs, strings.NewReplacer("{T}", table))
		}
		if got, want := pipeRaw(t, fleet, 1, side("sc_t")...), pipeRaw(t, plain, 1, side("sc_t_plain")...); !slices.Equal(got, want) {
			t.Errorf("step %d: %q, PostgreSQL %q", i, got, want)
		}
	}
}
