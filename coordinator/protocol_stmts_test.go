package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// protoClient speaks the protocol message by message over a hijacked
// connection, so that statement and portal names are the test's own.
type protoClient struct {
	t    *testing.T
	name string
	conn net.Conn
	fe   *pgproto3.Frontend
}

func protoDial(t *testing.T, addr, name string) *protoClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pc, err := pgconn.Connect(ctx, pgtest.URL(addr))
	if err != nil {
		t.Fatalf("connect %s: %v", addr, err)
	}
	hc, err := pc.Hijack()
	if err != nil {
		t.Fatal(err)
	}
	c := &protoClient{t: t, name: name, conn: hc.Conn, fe: hc.Frontend}
	t.Cleanup(func() {
		c.fe.Send(&pgproto3.Terminate{})
		_ = c.fe.Flush()
		c.conn.Close()
	})
	return c
}

// protoResult is what a batch answered: the first column of every row, in
// order, and the SQLSTATE of its error ("" if none).
type protoResult struct {
	rows []string
	code string
}

func (r protoResult) String() string {
	if r.code != "" {
		return fmt.Sprintf("rows %q, error %s", r.rows, r.code)
	}
	return fmt.Sprintf("rows %q", r.rows)
}

// batch sends msgs and a Sync and reads the answers up to ReadyForQuery.
func (c *protoClient) batch(msgs ...pgproto3.FrontendMessage) protoResult {
	c.t.Helper()
	for _, m := range msgs {
		c.fe.Send(m)
	}
	c.fe.Send(&pgproto3.Sync{})
	_ = c.conn.SetDeadline(time.Now().Add(protoReceiveTimeout))
	if err := c.fe.Flush(); err != nil {
		c.t.Fatalf("%s: send: %v", c.name, err)
	}
	var r protoResult
	for {
		msg, err := c.fe.Receive()
		if err != nil {
			c.t.Fatalf("%s: receive: %v (answers so far: %v)", c.name, protoErrText(err), r)
		}
		switch m := msg.(type) {
		case *pgproto3.DataRow:
			r.rows = append(r.rows, string(m.Values[0]))
		case *pgproto3.ErrorResponse:
			if r.code == "" {
				r.code = m.Code
			}
		case *pgproto3.ReadyForQuery:
			return r
		}
	}
}

func (c *protoClient) simple(sql string) protoResult {
	c.t.Helper()
	c.fe.Send(&pgproto3.Query{String: sql})
	_ = c.conn.SetDeadline(time.Now().Add(protoReceiveTimeout))
	if err := c.fe.Flush(); err != nil {
		c.t.Fatalf("%s: send: %v", c.name, err)
	}
	var r protoResult
	for {
		msg, err := c.fe.Receive()
		if err != nil {
			c.t.Fatalf("%s: receive: %v", c.name, protoErrText(err))
		}
		switch m := msg.(type) {
		case *pgproto3.DataRow:
			r.rows = append(r.rows, string(m.Values[0]))
		case *pgproto3.ErrorResponse:
			if r.code == "" {
				r.code = m.Code
			}
		case *pgproto3.ReadyForQuery:
			return r
		}
	}
}

func (c *protoClient) prepare(name, sql string) protoResult {
	c.t.Helper()
	return c.batch(&pgproto3.Parse{Name: name, Query: sql})
}

func (c *protoClient) exec(stmt, arg string) protoResult {
	c.t.Helper()
	return c.batch(protoBind("", stmt, arg), &pgproto3.Execute{})
}

func (c *protoClient) closeStmt(name string) protoResult {
	c.t.Helper()
	return c.batch(&pgproto3.Close{ObjectType: 'S', Name: name})
}

func protoBind(portal, stmt, arg string) *pgproto3.Bind {
	return &pgproto3.Bind{DestinationPortal: portal, PreparedStatement: stmt, Parameters: [][]byte{[]byte(arg)}}
}

// expect checks a result: rows and, if code is not "", the error.
func (c *protoClient) expect(what string, got protoResult, code string, rows ...string) {
	c.t.Helper()
	if got.code != code || !slices.Equal(got.rows, rows) {
		want := protoResult{rows: rows, code: code}
		c.t.Errorf("%s: %s: got %v, want %v", c.name, what, got, want)
	}
}

// TestProtocolPreparedStatementsMultiplexed: two clients whose prepared
// statements share names but not texts (or texts but not names), on a
// coordinator with one or two server connections and a statement cache
// smaller than what a client prepares. The same steps run against
// PostgreSQL first, which shows what the answers must be.
func TestProtocolPreparedStatementsMultiplexed(t *testing.T) {
	cluster := pgtest.Shared(t)
	w := connect(t, cluster.Servers[0].Addr())
	exec(t, w, "CREATE OR REPLACE FUNCTION pst_prepared_count() RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM pg_prepared_statements'")
	t.Run("postgres", func(t *testing.T) {
		protoStmtScenario(t, cluster.Servers[0].Addr(), true, 0)
	})
	// (A pool of 3, not 2: with 2 workers the last connection of each
	// pool serves only sessions that hold another worker's.)
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("coordinator_pool%d", n), func(t *testing.T) {
			srv := pgtest.Coordinator(t, cluster, func(c *coordinator.Config) {
				c.PoolSize = n
				c.StmtCacheSize = 4
			})
			// With one server connection a client's transaction would make
			// the other wait for the pool.
			protoStmtScenario(t, srv.Addr(), n > 1, 4)
		})
	}
}

// cacheSize is the coordinator's statement cache per server connection, 0
// for PostgreSQL itself.
func protoStmtScenario(t *testing.T, addr string, concurrentTx bool, cacheSize int) {
	a, b := protoDial(t, addr, "client a"), protoDial(t, addr, "client b")

	// Same names, different texts; same text, different names.
	a.expect("prepare s1", a.prepare("s1", "select 'a1:' || $1::text"), "")
	b.expect("prepare s1", b.prepare("s1", "select 'b1:' || $1::text"), "")
	a.expect("prepare s2", a.prepare("s2", "select 'shared:' || $1::text"), "")
	b.expect("prepare s2", b.prepare("s2", "select 'shared:' || $1::text"), "")
	b.expect("prepare s3", b.prepare("s3", "select 'a1:' || $1::text"), "")
	for i := range 3 {
		x := fmt.Sprint(i)
		a.expect("exec s1", a.exec("s1", x), "", "a1:"+x)
		b.expect("exec s1", b.exec("s1", x), "", "b1:"+x)
		a.expect("exec s2", a.exec("s2", x), "", "shared:"+x)
		b.expect("exec s3", b.exec("s3", x), "", "a1:"+x)
		b.expect("exec s2", b.exec("s2", x), "", "shared:"+x)
	}
	// Interleaved within one batch each.
	a.expect("batch s1 s2 s1", a.batch(protoBind("", "s1", "x"), &pgproto3.Execute{},
		protoBind("", "s2", "y"), &pgproto3.Execute{}, protoBind("", "s1", "z"), &pgproto3.Execute{}),
		"", "a1:x", "shared:y", "a1:z")

	if concurrentTx {
		// Both clients in a transaction at once: each on its own server
		// connection, where its statements must be prepared.
		a.expect("begin", a.simple("begin"), "")
		a.expect("exec s1 in tx", a.exec("s1", "t"), "", "a1:t")
		b.expect("begin", b.simple("begin"), "")
		b.expect("exec s1 in tx", b.exec("s1", "t"), "", "b1:t")
		a.expect("exec s2 in tx", a.exec("s2", "t"), "", "shared:t")
		b.expect("exec s3 in tx", b.exec("s3", "t"), "", "a1:t")
		b.expect("commit", b.simple("commit"), "")
		a.expect("exec s1 in tx", a.exec("s1", "u"), "", "a1:u")
		a.expect("commit", a.simple("commit"), "")
	}

	// Closing a statement in one client leaves the other's alone, also
	// the other's of the same text.
	a.expect("close s1", a.closeStmt("s1"), "")
	b.expect("exec s1 after a closed its s1", b.exec("s1", "c"), "", "b1:c")
	b.expect("exec s3 after a closed its s1 of the same text", b.exec("s3", "c"), "", "a1:c")
	a.expect("exec closed s1", a.exec("s1", "c"), "26000")
	a.expect("prepare s1 anew", a.prepare("s1", "select 'a1new:' || $1::text"), "")
	a.expect("exec new s1", a.exec("s1", "n"), "", "a1new:n")
	b.expect("exec s1", b.exec("s1", "n"), "", "b1:n")
	a.expect("prepare s3 (b's s3 exists)", a.prepare("s3", "select 'a3:' || $1::text"), "")
	a.expect("exec s3", a.exec("s3", "n"), "", "a3:n")
	b.expect("exec s3", b.exec("s3", "n"), "", "a1:n")

	// More statements than a server connection's cache holds (4).
	const many = 10
	text := func(i int) string { return fmt.Sprintf("select 'm%d:' || $1::text", i) }
	for i := range many {
		a.expect("prepare many", a.prepare(fmt.Sprintf("m%d", i), text(i)), "")
	}
	order := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 3, 7, 1, 9, 0}
	for k, i := range order {
		a.expect(fmt.Sprintf("exec m%d", i), a.exec(fmt.Sprintf("m%d", i), "r"), "", fmt.Sprintf("m%d:r", i))
		if k%5 == 0 {
			b.expect("exec s1 meanwhile", b.exec("s1", "r"), "", "b1:r")
		}
	}
	var msgs []pgproto3.FrontendMessage
	var want []string
	for i := range many {
		msgs = append(msgs, protoBind("", fmt.Sprintf("m%d", i), "b"), &pgproto3.Execute{})
		want = append(want, fmt.Sprintf("m%d:b", i))
	}
	a.expect("all of them in one batch", a.batch(msgs...), "", want...)
	if cacheSize > 0 {
		// The test is about eviction: check that there was some.
		// (pgfleet refuses pg_prepared_statements; a function reads the
		// worker connection's own view.)
		r := a.simple("select pst_prepared_count()")
		if n, err := strconv.Atoi(strings.Join(r.rows, "")); r.code != "" || err != nil || n > cacheSize {
			t.Errorf("statements prepared on a server connection: %v, want at most %d", r, cacheSize)
		}
	}

	// Portals bound from each of them, executed after all are bound: a
	// portal lives until its transaction ends.
	msgs, want = nil, nil
	for i := range many {
		msgs = append(msgs, protoBind(fmt.Sprintf("p%d", i), fmt.Sprintf("m%d", i), "p"))
	}
	for i := range many {
		msgs = append(msgs, &pgproto3.Execute{Portal: fmt.Sprintf("p%d", i)})
		want = append(want, fmt.Sprintf("m%d:p", i))
	}
	a.expect("portals of all of them in one batch", a.batch(msgs...), "", want...)

	// The same across batches of a transaction.
	a.expect("begin", a.simple("begin"), "")
	for i := range many {
		a.expect("bind portal", a.batch(protoBind(fmt.Sprintf("q%d", i), fmt.Sprintf("m%d", i), "q")), "")
	}
	for i := range many {
		a.expect(fmt.Sprintf("execute portal q%d", i), a.batch(&pgproto3.Execute{Portal: fmt.Sprintf("q%d", i)}),
			"", fmt.Sprintf("m%d:q", i))
	}
	a.expect("commit", a.simple("commit"), "")

	// The same text means different tables under different search_paths.
	a.expect("create schemas", a.simple("drop schema if exists proto_sa, proto_sb cascade; create schema proto_sa; create schema proto_sb; "+
		"create table proto_sa.t (v text); create table proto_sb.t (v text); "+
		"insert into proto_sa.t values ('in a'); insert into proto_sb.t values ('in b')"), "")
	a.expect("set search_path", a.simple("set search_path = proto_sa"), "")
	b.expect("set search_path", b.simple("set search_path = proto_sb"), "")
	a.expect("prepare t", a.prepare("t", "select v from t"), "")
	b.expect("prepare t", b.prepare("t", "select v from t"), "")
	execT := []pgproto3.FrontendMessage{&pgproto3.Bind{PreparedStatement: "t"}, &pgproto3.Execute{}}
	for range 3 {
		a.expect("exec t under search_path proto_sa", a.batch(execT...), "", "in a")
		b.expect("exec t under search_path proto_sb", b.batch(execT...), "", "in b")
	}
	a.expect("set search_path", a.simple("set search_path = proto_sb"), "")
	a.expect("exec t after changing search_path", a.batch(execT...), "", "in b")
	a.expect("reset search_path", a.simple("reset search_path"), "")
	b.expect("reset search_path", b.simple("reset search_path"), "")
	a.expect("drop schemas", a.simple("drop schema proto_sa, proto_sb cascade"), "")

	// DEALLOCATE ALL and DISCARD ALL drop only their own session's
	// statements.
	a.expect("deallocate all", a.simple("deallocate all"), "")
	a.expect("exec s2 after deallocate all", a.exec("s2", "d"), "26000")
	b.expect("exec s2 after a's deallocate all", b.exec("s2", "d"), "", "shared:d")
	a.expect("prepare s2 again", a.prepare("s2", "select 'shared:' || $1::text"), "")
	b.expect("discard all", b.simple("discard all"), "")
	b.expect("exec s1 after discard all", b.exec("s1", "d"), "26000")
	a.expect("exec s2 after b's discard all", a.exec("s2", "d"), "", "shared:d")
	b.expect("prepare s1 again", b.prepare("s1", "select 'b1again:' || $1::text"), "")
	b.expect("exec s1", b.exec("s1", "d"), "", "b1again:d")
	a.expect("exec s2", a.exec("s2", "e"), "", "shared:e")
}

// TestDeallocateExtended: DEALLOCATE of a protocol-level statement sent over
// the extended protocol (psycopg 3 deallocates the statements its cache
// evicts so) drops the session's statement, as in the simple protocol; it
// got 26000 from the worker, where the statement does not live under its
// name, and the name stayed taken (42P05 on preparing it again).
func TestDeallocateExtended(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	pc := connect(t, srv.Addr()).PgConn()
	code := func(err error) string {
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			return pe.Code
		}
		if err != nil {
			return err.Error()
		}
		return ""
	}
	run := func(sql string) (string, string) {
		r := pc.ExecParams(ctx, sql, nil, nil, nil, nil).Read()
		return r.CommandTag.String(), code(r.Err)
	}
	execPrepared := func(name string) (string, string) {
		r := pc.ExecPrepared(ctx, name, [][]byte{[]byte("d")}, nil, nil).Read()
		if r.Err != nil || len(r.Rows) != 1 {
			return "", code(r.Err)
		}
		return string(r.Rows[0][0]), ""
	}
	if _, err := pc.Prepare(ctx, "_pg3_1", "SELECT 'x:' || $1::text", nil); err != nil {
		t.Fatal(err)
	}
	if v, c := execPrepared("_pg3_1"); v != "x:d" {
		t.Fatalf("prepared statement = %q %s", v, c)
	}
	if tag, c := run("DEALLOCATE _pg3_1"); tag != "DEALLOCATE" || c != "" {
		t.Errorf("extended DEALLOCATE = %q %s, want tag DEALLOCATE", tag, c)
	}
	if _, c := execPrepared("_pg3_1"); c != "26000" {
		t.Errorf("executing the deallocated statement: %q, want 26000", c)
	}
	if _, err := pc.Prepare(ctx, "_pg3_1", "SELECT 'y:' || $1::text", nil); err != nil {
		t.Fatalf("preparing the name again: %v", err)
	}
	if v, _ := execPrepared("_pg3_1"); v != "y:d" {
		t.Errorf("the statement prepared again = %q, want y:d", v)
	}
	if _, c := run("DEALLOCATE PREPARE nosuch"); c != "26000" {
		t.Errorf("DEALLOCATE of a missing statement: %q, want 26000", c)
	}
	// Described as PostgreSQL describes it: no parameters, no result.
	sd, err := pc.Prepare(ctx, "", "DEALLOCATE _pg3_1", nil)
	if err != nil || len(sd.ParamOIDs) != 0 || len(sd.Fields) != 0 {
		t.Errorf("describing a DEALLOCATE: %+v, %v", sd, err)
	}
	// In a failed transaction block: 25P02, nothing dropped.
	if _, c := run("BEGIN"); c != "" {
		t.Fatal(c)
	}
	if _, c := run("SELECT 1/0"); c != "22012" {
		t.Fatalf("SELECT 1/0: %s", c)
	}
	if _, c := run("DEALLOCATE _pg3_1"); c != "25P02" {
		t.Errorf("DEALLOCATE in a failed transaction: %q, want 25P02", c)
	}
	if _, c := run("ROLLBACK"); c != "" {
		t.Fatal(c)
	}
	if v, c := execPrepared("_pg3_1"); v != "y:d" {
		t.Errorf("statement after a refused DEALLOCATE = %q %s, want y:d", v, c)
	}
	// After a statement that fails in the same pipeline: skipped, as
	// PostgreSQL skips it, nothing dropped.
	batch := &pgconn.Batch{}
	batch.ExecParams("SELECT 1/0", nil, nil, nil, nil)
	batch.ExecParams("DEALLOCATE _pg3_1", nil, nil, nil, nil)
	if _, err := pc.ExecBatch(ctx, batch).ReadAll(); code(err) != "22012" {
		t.Errorf("pipeline of SELECT 1/0 and DEALLOCATE: %v, want 22012", err)
	}
	if v, c := execPrepared("_pg3_1"); v != "y:d" {
		t.Errorf("statement after a pipeline whose DEALLOCATE was skipped = %q %s, want y:d", v, c)
	}
	// Inside a transaction block it works and is not undone by ROLLBACK,
	// as on PostgreSQL.
	run("BEGIN")
	if tag, c := run("DEALLOCATE _pg3_1"); tag != "DEALLOCATE" || c != "" {
		t.Errorf("DEALLOCATE in a transaction block = %q %s", tag, c)
	}
	run("ROLLBACK")
	if _, c := execPrepared("_pg3_1"); c != "26000" {
		t.Errorf("statement after DEALLOCATE and ROLLBACK: %q, want 26000", c)
	}
}

// TestStatementsAfterDDL: a client's new prepared statement after a table
// changed gets a fresh plan, as on PostgreSQL, even when the worker
// connection serving it prepared the same text for another session before
// the change (the worker answered 0A000 "cached plan must not change
// result type": pgx's TestStmtCacheInvalidationTx and ...TypesChange).
// A statement the client itself prepared before the change still gets
// 0A000, as on PostgreSQL.
func TestStatementsAfterDDL(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(1))
	ctx := context.Background()
	a := connect(t, srv.Addr())
	b := connect(t, srv.Addr())
	create := func(cols, vals string) {
		exec(t, a, "DROP TABLE IF EXISTS sd_cols")
		exec(t, a, "CREATE TABLE sd_cols ("+cols+")")
		exec(t, a, "INSERT INTO sd_cols VALUES "+vals)
	}
	t.Cleanup(func() { _, _ = a.Exec(context.Background(), "DROP TABLE IF EXISTS sd_cols") })
	const q = "SELECT * FROM sd_cols WHERE id = $1"
	const alter = "ALTER TABLE sd_cols DROP COLUMN f1"
	// a prepares the query and the ALTER on the one pooled connection.
	create("id int PRIMARY KEY, f1 int, f2 int", "(1, 2, 3)")
	var x, y, z int
	if err := a.QueryRow(ctx, q, 1).Scan(&x, &y, &z); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Exec(ctx, alter); err != nil {
		t.Fatal(err)
	}
	// The table made again with another shape: b, new to both
	// statements, gets fresh plans, in and out of a transaction block.
	create("id int PRIMARY KEY, f1 int, f2 int, f3 int", "(1, 2, 3, 4)")
	var w int
	if err := b.QueryRow(ctx, q, 1).Scan(&x, &y, &z, &w); err != nil {
		t.Errorf("b's new statement after the table was made again: %v", err)
	}
	create("id int PRIMARY KEY, f1 int, f2 int", "(1, 2, 3)")
	tx, err := b.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, alter); err != nil {
		t.Errorf("b's ALTER in a transaction block, a's before: %v", err)
	}
	// b's own statement, prepared before its ALTER: 0A000 as on PostgreSQL.
	rows, _ := tx.Query(ctx, q, 1)
	rows.Close()
	if sqlState(rows.Err()) != "0A000" {
		t.Errorf("b's statement prepared before its own ALTER: %v, want 0A000", rows.Err())
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.QueryRow(ctx, q, 1).Scan(&x, &y, &z); err != nil {
		t.Errorf("b's statement after ROLLBACK: %v", err)
	}
	// a's statement, prepared before the table changed shape: 0A000 once
	// (pgx then prepares it again), then the new rows.
	create("id int PRIMARY KEY, f2 int, f3 int, f4 int", "(1, 2, 3, 4)")
	if err := a.QueryRow(ctx, q, 1).Scan(&x, &y, &z); sqlState(err) != "0A000" {
		t.Errorf("a's statement after the table changed shape: %v, want 0A000", err)
	}
	if err := a.QueryRow(ctx, q, 1).Scan(&x, &y, &z, &w); err != nil {
		t.Errorf("a's statement prepared again: %v", err)
	}

	// The table made again by statements in lower case, in the simple
	// protocol (not taken for DDL, the epoch did not move; adversary): a
	// new client's statement gets the new shape.
	const q2 = "SELECT * FROM sd_cols2"
	exec(t, a, "DROP TABLE IF EXISTS sd_cols2; CREATE TABLE sd_cols2 (a int, b text); INSERT INTO sd_cols2 VALUES (1, 'x')")
	t.Cleanup(func() { _, _ = a.Exec(context.Background(), "DROP TABLE IF EXISTS sd_cols2") })
	first := connect(t, srv.Addr())
	var n int
	var txt string
	if err := first.QueryRow(ctx, q2).Scan(&n, &txt); err != nil {
		t.Fatal(err)
	}
	exec(t, a, "drop table sd_cols2") // lower case: was not taken for DDL
	exec(t, a, "create table sd_cols2 (z text, a int, y int)")
	exec(t, a, "insert into sd_cols2 values ('q', 1, 2)")
	var m int
	if err := connect(t, srv.Addr()).QueryRow(ctx, q2).Scan(&txt, &n, &m); err != nil || txt != "q" {
		t.Errorf("a new client's statement after a string of DDL: %q %v", txt, err)
	}
}
