package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// script runs statements in order, each through the simple protocol or the
// extended one, and returns one line per statement: the first column of
// its first row (rows' text), "E" and the SQLSTATE, or "ok"; then the
// transaction status.
func script(t *testing.T, c *pgx.Conn, extended bool, stmts ...string) string {
	t.Helper()
	ctx := context.Background()
	mode := pgx.QueryExecModeSimpleProtocol
	if extended {
		mode = pgx.QueryExecModeExec
	}
	var out []string
	for _, sql := range stmts {
		rows, err := c.Query(ctx, sql, mode)
		line := "ok"
		if err == nil {
			for rows.Next() {
				if line == "ok" {
					line = string(rows.RawValues()[0])
				}
			}
			rows.Close()
			err = rows.Err()
		}
		if err != nil {
			line = "E" + sqlState(err)
		}
		out = append(out, line)
	}
	return strings.Join(out, "|") + "|" + string(c.PgConn().TxStatus())
}

// TestSavepointSettings: SETs in a transaction follow its savepoints as on
// PostgreSQL (ROLLBACK TO undoes only what came after the savepoint,
// RELEASE keeps it, a failed transaction comes back), also on the next
// pooled connection; a plain PostgreSQL server answers the same.
func TestSavepointSettings(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(2))
	scripts := [][]string{
		{"BEGIN", "SET DateStyle = 'ISO, DMY'", "SAVEPOINT s", "ROLLBACK TO SAVEPOINT s", "COMMIT", "SHOW DateStyle", "SELECT '03/01/2020'::date::text"},
		{"BEGIN", "SAVEPOINT s", "SET DateStyle = 'SQL, DMY'", "ROLLBACK TO s", "COMMIT", "SHOW DateStyle"},
		{"BEGIN", "SET work_mem = '7MB'", "SAVEPOINT a", "SET work_mem = '8MB'", "SAVEPOINT b", "SET work_mem = '9MB'",
			"RELEASE b", "SHOW work_mem", "ROLLBACK TO a", "SHOW work_mem", "COMMIT", "SHOW work_mem"},
		{"BEGIN", "SET work_mem = '6MB'", "SAVEPOINT a", "SET work_mem = '5MB'", "SELECT 1/0", "SHOW work_mem", "ROLLBACK TO a", "COMMIT", "SHOW work_mem"},
		{"BEGIN", "SAVEPOINT \"A b\"", "SET work_mem = '3MB'", "SAVEPOINT a", "SET work_mem = '2MB'", "RELEASE SAVEPOINT a", "ROLLBACK WORK TO SAVEPOINT \"A b\"", "COMMIT", "SHOW work_mem"},
		{"BEGIN", "SET work_mem = '12MB'", "SAVEPOINT a", "SET LOCAL work_mem = '13MB'", "SHOW work_mem", "ROLLBACK TO a", "SHOW work_mem", "COMMIT", "SHOW work_mem"},
		{"BEGIN", "SAVEPOINT a", "SET fix2.x = 'on'", "ROLLBACK TO a", "COMMIT", "SHOW fix2.x"},
		{"BEGIN", "SET work_mem = '14MB'", "SAVEPOINT a", "SAVEPOINT a", "SET work_mem = '15MB'", "ROLLBACK TO a", "RELEASE a", "ROLLBACK TO a", "COMMIT", "SHOW work_mem"},
		{"BEGIN", "SET work_mem = '16MB'", "SAVEPOINT a", "ROLLBACK", "SHOW work_mem"},
		{"BEGIN", "SET work_mem = '21MB'; SAVEPOINT a; SET work_mem = '22MB'; ROLLBACK TO a; SAVEPOINT b", "SET work_mem = '23MB'", "ROLLBACK TO b", "COMMIT", "SHOW work_mem"},
	}
	for _, extended := range []bool{false, true} {
		for i, s := range scripts {
			c := connect(t, srv.Addr())
			o := connect(t, cl.Servers[0].Addr())
			// Another client using the pool in between, so that the
			// session's next statements may run on another connection.
			other := connect(t, srv.Addr())
			got := script(t, c, extended, s...)
			exec(t, other, "SELECT 1")
			got += "/" + script(t, c, extended, s[len(s)-1])
			want := script(t, o, extended, s...)
			want += "/" + script(t, o, extended, s[len(s)-1])
			if got != want {
				t.Errorf("extended %v, script %d %q:\n got %s\nwant %s", extended, i, s, got, want)
			}
			c.Close(context.Background())
			o.Close(context.Background())
			other.Close(context.Background())
		}
	}
}

// TestFailedTransactionEverywhere: in a transaction over two workers, after
// a statement failed on one worker, a portal open on the other and
// statements for it get 25P02 with status E, as on PostgreSQL, and COMMIT
// rolls back on both.
func TestFailedTransactionEverywhere(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(8))
	c := connect(t, srv.Addr())
	k1, k2 := spanningTable(t, c, "fe_acc")
	a1, a2 := fmt.Sprint(k1), fmt.Sprint(k2)
	rows := "SELECT g::text FROM fe_acc, generate_series(1, 7) g WHERE aid = $1 ORDER BY g"

	// The oracle: one plain PostgreSQL server.
	o := rawConnect(t, cl.Servers[0].Addr())
	o.round(&pgproto3.Query{String: "CREATE TEMP TABLE fe_o (aid bigint, n int CHECK (n >= 0)); INSERT INTO fe_o VALUES (1, 100), (2, 100)"})
	run := func(r *rawConn, table, first, other string) string {
		var out []string
		add := func(got []string) { out = append(out, strings.Join(got, ",")) }
		add(r.round(&pgproto3.Query{String: "BEGIN"}))
		add(r.round(exe("UPDATE "+table+" SET n = n + 1 WHERE aid = $1", first)...))
		add(r.round(
			&pgproto3.Parse{Name: "fe", Query: strings.Replace(rows, "fe_acc", table, 1)},
			&pgproto3.Bind{DestinationPortal: "p", PreparedStatement: "fe", Parameters: [][]byte{[]byte(first)}},
			&pgproto3.Execute{Portal: "p", MaxRows: 2}))
		add(r.round(exe("UPDATE "+table+" SET n = n - 1000 WHERE aid = $1", other)...))
		add(r.round(&pgproto3.Execute{Portal: "p", MaxRows: 2}))
		add(r.round(&pgproto3.Describe{ObjectType: 'P', Name: "p"}))
		add(r.round(&pgproto3.Close{ObjectType: 'P', Name: "p"}, &pgproto3.Execute{Portal: "p"}))
		add(r.round(exe("SELECT n::text FROM "+table+" WHERE aid = $1", first)...))
		add(r.round(&pgproto3.Query{String: "SELECT n::text FROM " + table + " WHERE aid = " + first}))
		add(r.round(&pgproto3.Parse{Name: "fe2", Query: "SELECT n FROM " + table + " WHERE aid = $1"}, &pgproto3.Describe{ObjectType: 'S', Name: "fe2"}))
		add(r.round(&pgproto3.Bind{PreparedStatement: "fe2", Parameters: [][]byte{[]byte(other)}}, &pgproto3.Execute{}))
		add(r.round(&pgproto3.Query{String: "SELECT count(*)::text FROM " + table}))
		add(r.round(exe("SELECT count(*)::text FROM " + table)...))
		add(r.round(&pgproto3.Query{String: "COMMIT"}))
		add(r.round(&pgproto3.Query{String: "SELECT n::text FROM " + table + " WHERE aid = " + first}))
		add(r.round(&pgproto3.Close{ObjectType: 'S', Name: "fe"}))
		return strings.Join(out, " | ")
	}
	want := run(o, "fe_o", "1", "2")
	r := rawConnect(t, srv.Addr())
	for _, keys := range [][2]string{{a1, a2}, {a2, a1}} {
		if got := run(r, "fe_acc", keys[0], keys[1]); got != want {
			t.Errorf("portal on worker of %s, failure on the other:\n got %s\nwant %s", keys[0], got, want)
		}
	}
}

// TestChainTakesInWorkers: after ROLLBACK AND CHAIN of a transaction that
// made a SET, and after COMMIT AND CHAIN of a failed transaction, the new
// transaction takes in another worker, with PostgreSQL's settings and
// characteristics, and commits on both.
func TestChainTakesInWorkers(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(8))
	c := connect(t, srv.Addr())
	k1, k2 := spanningTable(t, c, "cw_acc")
	for _, extended := range []bool{false, true} {
		r := txnRunner{t: t, c: c, extended: extended}
		r.must("BEGIN")
		r.must("UPDATE cw_acc SET n = n + 1 WHERE aid = $1", k1)
		r.must("SET work_mem = '9MB'")
		r.must("ROLLBACK AND CHAIN")
		r.must("UPDATE cw_acc SET n = n + 1 WHERE aid = $1", k1)
		if _, err := r.run("UPDATE cw_acc SET n = n + 1 WHERE aid = $1", k2); err != nil {
			t.Errorf("%s: second worker after ROLLBACK AND CHAIN of a SET: %v", r.name(), err)
		}
		if got := queryString(t, c, "SHOW work_mem", pgx.QueryExecModeSimpleProtocol); got == "9MB" {
			t.Errorf("%s: rolled-back SET seen: %s", r.name(), got)
		}
		r.must("COMMIT")

		r.must("BEGIN ISOLATION LEVEL REPEATABLE READ")
		r.must("UPDATE cw_acc SET n = n + 1 WHERE aid = $1", k1)
		if _, err := r.run("UPDATE cw_acc SET n = n - 1000 WHERE aid = $1", k1); sqlState(err) != "23514" {
			t.Fatalf("%s: check violation: %v", r.name(), err)
		}
		if tag := r.must("COMMIT AND CHAIN"); tag != "ROLLBACK" {
			t.Errorf("%s: COMMIT AND CHAIN of a failed transaction: %s", r.name(), tag)
		}
		r.must("UPDATE cw_acc SET n = n + 1 WHERE aid = $1", k1)
		if _, err := r.run("UPDATE cw_acc SET n = n + 1 WHERE aid = $1", k2); err != nil {
			t.Errorf("%s: second worker after COMMIT AND CHAIN of a failed transaction: %v", r.name(), err)
		}
		if got := queryString(t, c, "SHOW transaction_isolation", pgx.QueryExecModeSimpleProtocol); got != "read committed" {
			t.Errorf("%s: isolation %q, want read committed (PostgreSQL 15 after a chain from a failed transaction)", r.name(), got)
		}
		r.must("COMMIT")
	}
	for k, want := range map[int]string{k1: "104", k2: "104"} {
		if got := queryString(t, c, "SELECT n::text FROM cw_acc WHERE aid = $1", pgx.QueryExecModeSimpleProtocol, k); got != want {
			t.Errorf("n(%d) = %s, want %s", k, got, want)
		}
	}
}

// TestLocalTablesInRemoteTransaction: in a transaction held on a worker
// that is not the default node, statements on tables and sequences pgfleet
// does not distribute run on the default node, taken into the
// transaction (they commit or roll back with it), or are refused with
// 0A000 when it cannot be taken in; never 42P01.
func TestLocalTablesInRemoteTransaction(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(8))
	ctx := context.Background()
	c := connect(t, srv.Addr())
	k1, k2 := spanningTable(t, c, "lr_acc")
	simple := pgx.QueryExecModeSimpleProtocol
	drop := func() { _, _ = c.Exec(ctx, "DROP TABLE IF EXISTS lr_loc; DROP SEQUENCE IF EXISTS lr_sq", simple) }
	drop()
	t.Cleanup(drop)
	exec(t, c, "CREATE TABLE lr_loc (a int)", simple)
	exec(t, c, "INSERT INTO lr_loc VALUES (7)", simple)
	exec(t, c, "CREATE SEQUENCE lr_sq", simple)
	// The key on the worker that is not the default node.
	far := k1
	if workerOfAid(t, c, "lr_acc", k1) == cl.Servers[0].Addr() {
		far = k2
	}
	if workerOfAid(t, c, "lr_acc", far) == cl.Servers[0].Addr() {
		t.Fatal("no key off the default node")
	}
	count := func() string {
		return queryString(t, c, "SELECT count(*)::text FROM lr_loc", simple)
	}
	for _, extended := range []bool{false, true} {
		q := fmt.Sprintf("SELECT n::text FROM lr_acc WHERE aid = %d", far)
		got := script(t, c, extended, "BEGIN", q, "SELECT 1", "SHOW work_mem", "SELECT a::text FROM lr_loc",
			"SELECT (nextval('lr_sq') > 0)::text", "INSERT INTO lr_loc VALUES (8)", q, "COMMIT")
		if want := "ok|100|1|4MB|7|true|ok|100|ok|I"; got != want {
			t.Errorf("extended %v: got %s, want %s", extended, got, want)
		}
		if n := count(); n != "2" {
			t.Errorf("extended %v: after COMMIT %s rows, want 2", extended, n)
		}
		got = script(t, c, extended, "BEGIN", q, "INSERT INTO lr_loc VALUES (9)", "ROLLBACK")
		if want := "ok|100|ok|ok|I"; got != want {
			t.Errorf("extended %v: got %s, want %s", extended, got, want)
		}
		if n := count(); n != "2" {
			t.Errorf("extended %v: after ROLLBACK %s rows, want 2", extended, n)
		}
		// A SET in the transaction holds on the default node taken in
		// after it (it was refused).
		got = script(t, c, extended, "BEGIN", q, "SET LOCAL work_mem = '5MB'", "SELECT current_setting('work_mem') || a::text FROM lr_loc", "ROLLBACK")
		if want := "ok|100|ok|5MB7|ok|I"; got != want {
			t.Errorf("extended %v: after a SET: got %s, want %s", extended, got, want)
		}
		exec(t, c, "DELETE FROM lr_loc WHERE a <> 7", simple)
	}
}

// TestSequenceStateInUserCode: currval() and lastval() called in a user
// function never give another client's value: "not yet defined" as on
// PostgreSQL before the session called nextval, 0A000 after.
func TestSequenceStateInUserCode(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(1))
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	admin := connect(t, srv.Addr())
	drop := func() {
		_, _ = admin.Exec(ctx, "DROP FUNCTION IF EXISTS su_cv(); DROP FUNCTION IF EXISTS su_lv(); DROP SEQUENCE IF EXISTS su_sq", simple)
	}
	drop()
	t.Cleanup(drop)
	exec(t, admin, "CREATE SEQUENCE su_sq", simple)
	testTable(t, admin, "su_d", "(id int PRIMARY KEY)", "SELECT create_distributed_table('su_d', 'id', shard_count => 4)")
	exec(t, admin, "INSERT INTO su_d (id) VALUES (1), (2), (3), (4), (5), (6)", simple)
	exec(t, admin, "CREATE FUNCTION su_cv() RETURNS bigint LANGUAGE sql AS 'SELECT currval(''su_sq'')'", simple)
	exec(t, admin, "CREATE FUNCTION su_lv() RETURNS bigint LANGUAGE plpgsql AS 'BEGIN RETURN lastval(); END'", simple)
	exec(t, admin, "CREATE FUNCTION su_raise() RETURNS int LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION 'mine' USING ERRCODE = '55000'; END$$", simple)
	oracle := connect(t, cl.Servers[0].Addr())
	for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeExec, pgx.QueryExecModeCacheStatement} {
		other := connect(t, srv.Addr())
		var v int64
		if err := other.QueryRow(ctx, "SELECT nextval('su_sq')", mode).Scan(&v); err != nil {
			t.Fatal(err)
		}
		other.Close(ctx)
		var c *pgx.Conn
		for _, fn := range []string{"su_cv", "su_lv"} {
			c = connect(t, srv.Addr()) // a fresh session
			var got int64
			err := c.QueryRow(ctx, "SELECT "+fn+"()", mode).Scan(&got)
			if _, oerr := oracle.Exec(ctx, "DISCARD SEQUENCES"); oerr != nil {
				t.Fatal(oerr)
			}
			var og int64
			oerr := oracle.QueryRow(ctx, "SELECT "+fn+"()").Scan(&og)
			if sqlState(err) != "55000" || sqlState(oerr) != "55000" {
				t.Errorf("%v fresh session %s(): %d, %v (oracle %v); want 55000", mode, fn, got, err, oerr)
			}
		}
		var n int64
		if err := c.QueryRow(ctx, "SELECT nextval('su_sq')", mode).Scan(&n); err != nil {
			t.Fatal(err)
		}
		// Another client's nextval on the one pooled connection.
		other = connect(t, srv.Addr())
		if err := other.QueryRow(ctx, "SELECT nextval('su_sq')", mode).Scan(&v); err != nil {
			t.Fatal(err)
		}
		other.Close(ctx)
		for _, fn := range []string{"su_cv", "su_lv"} {
			var got int64
			err := c.QueryRow(ctx, "SELECT "+fn+"()", mode).Scan(&got)
			if err == nil && got != n || err != nil && sqlState(err) != "0A000" {
				t.Errorf("%v after nextval %d (another client's %d): %s() = %d, %v; want %d or 0A000", mode, n, v, fn, got, err, n)
			}
		}
		// Over several shards (each shard's connection).
		for _, fn := range []string{"su_cv", "su_lv"} {
			rows, err := c.Query(ctx, "SELECT "+fn+"() FROM su_d", mode)
			if err == nil {
				for rows.Next() {
					var g int64
					if err := rows.Scan(&g); err == nil && g != n {
						t.Errorf("%v multi-shard after nextval %d (another client's %d): %s() = %d", mode, n, v, fn, g)
					}
				}
				err = rows.Err()
			}
			if err != nil && sqlState(err) != "0A000" {
				t.Errorf("%v multi-shard after nextval: %s(): %v; want %d or 0A000", mode, fn, err, n)
			}
		}
		// Another 55000 user code raises after nextval is its own answer,
		// not the currval refusal (found by running plpgsql.sql).
		for _, sql := range []string{"SELECT su_raise()", "DO $$ BEGIN RAISE EXCEPTION 'mine' USING ERRCODE = '55000'; END $$"} {
			_, err := c.Exec(ctx, sql, mode)
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "55000" || pe.Message != "mine" {
				t.Errorf("%v after nextval: %s: %v, want PostgreSQL's 55000 \"mine\"", mode, sql, err)
			}
		}
		// nextval and currval in the same call of user code: its own value.
		var a, b int64
		if err := c.QueryRow(ctx, "SELECT nextval('su_sq'), su_cv()", mode).Scan(&a, &b); err != nil || a != b {
			t.Errorf("%v: nextval and su_cv() in one statement: %d, %d, %v", mode, a, b, err)
		}
		c.Close(ctx)
	}
}

// TestSetConfigInDoBlock: a setting changed by set_config() in a DO block
// stays with its client (not another's), applies to the client's later
// statements on every worker (distribution values computed under it
// included), or those are refused with 0A000.
func TestSetConfigInDoBlock(t *testing.T) {
	cl := pgtest.Shared(t)
	// (Pool sizes: with 2 workers the last connection of each pool serves
	// only sessions that hold another worker's (pooling.Pool's classes);
	// the pinned sessions here hold connections for good.)
	srv := pgtest.Coordinator(t, cl, poolSize(3))
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	admin := connect(t, srv.Addr())
	drop := func() {
		_, _ = admin.Exec(ctx, "SELECT undistribute_table('dc_t')", simple)
		_, _ = admin.Exec(ctx, "DROP TABLE IF EXISTS dc_t", simple)
	}
	drop()
	t.Cleanup(drop)
	exec(t, admin, "CREATE TABLE dc_t (id text PRIMARY KEY, v text)", simple)
	exec(t, admin, "SELECT create_distributed_table('dc_t', 'id', shard_count => 4)", simple)
	for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeExec} {
		c := connect(t, srv.Addr())
		exec(t, c, "DO $$ BEGIN PERFORM set_config('IntervalStyle', 'sql_standard', false); END $$", mode)
		other := connect(t, srv.Addr())
		if got := queryString(t, other, "SHOW IntervalStyle", mode); got != "postgres" {
			t.Errorf("%v: another client sees IntervalStyle %q", mode, got)
		}
		other.Close(ctx)
		for d := 1; d <= 6; d++ {
			id := fmt.Sprintf("%d 0:00:00", d)
			_, err := c.Exec(ctx, fmt.Sprintf("INSERT INTO dc_t (id, v) VALUES ('%d days'::interval::text, 'x')", d), mode)
			if err != nil {
				if sqlState(err) != "0A000" {
					t.Errorf("%v: insert: %v", mode, err)
				}
				continue
			}
			var n int
			if err := c.QueryRow(ctx, "SELECT count(*) FROM dc_t WHERE id = $1", mode, id).Scan(&n); err != nil && sqlState(err) != "0A000" || err == nil && n != 1 {
				t.Errorf("%v: row %q: %d, %v", mode, id, n, err)
			}
			if got := queryString(t, c, "SHOW IntervalStyle", mode); got != "sql_standard" {
				t.Errorf("%v: own IntervalStyle %q", mode, got)
			}
		}
		c.Close(ctx)
		exec(t, admin, "TRUNCATE dc_t", simple)
	}
}

// TestDeferredBeginParseError: a Parse that fails in the first batch
// after BEGIN (which the coordinator defers) fails the transaction, as on
// PostgreSQL: later statements get 25P02, ROLLBACK TO 3B001, and nothing
// runs outside the transaction.
func TestDeferredBeginParseError(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(2))
	run := func(addr string) string {
		r := rawConnect(t, addr)
		var out []string
		add := func(got []string) { out = append(out, strings.Join(got, ",")) }
		add(r.round(&pgproto3.Query{String: "BEGIN"}))
		add(r.round(exe("SET work_mem = '21MB'; SAVEPOINT a")...))
		add(r.round(exe("SET work_mem = '23MB'")...))
		add(r.round(exe("ROLLBACK TO b")...))
		add(r.round(&pgproto3.Query{String: "ROLLBACK TO b"}))
		add(r.round(&pgproto3.Query{String: "COMMIT"}))
		add(r.round(&pgproto3.Query{String: "SHOW work_mem"}))
		return strings.Join(out, " | ")
	}
	if got, want := run(srv.Addr()), run(cl.Servers[0].Addr()); got != want {
		t.Errorf("\n got %s\nwant %s", got, want)
	}
}

// TestChainSetStaysWithClient: a SET committed by COMMIT AND CHAIN, in a
// transaction that then takes in another worker, is the client's on both
// workers and reaches no other client through the pooled connections.
func TestChainSetStaysWithClient(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(1))
	c := connect(t, srv.Addr())
	k1, k2 := spanningTable(t, c, "cs_acc")
	simple := pgx.QueryExecModeSimpleProtocol
	for _, extended := range []bool{false, true} {
		r := txnRunner{t: t, c: c, extended: extended}
		r.must("BEGIN")
		r.must("UPDATE cs_acc SET n = n + 1 WHERE aid = $1", k1)
		r.must("SET work_mem = '9MB'")
		r.must("COMMIT AND CHAIN")
		r.must("UPDATE cs_acc SET n = n + 1 WHERE aid = $1", k1)
		if _, err := r.run("UPDATE cs_acc SET n = n + 1 WHERE aid = $1", k2); err != nil {
			t.Fatalf("%s: second worker after COMMIT AND CHAIN of a SET: %v", r.name(), err)
		}
		r.must("COMMIT")
		other := connect(t, srv.Addr())
		for _, k := range []int{k1, k2} {
			if got := queryString(t, other, fmt.Sprintf("SELECT current_setting('work_mem') FROM cs_acc WHERE aid = %d", k), simple); got == "9MB" {
				t.Errorf("%s: another client's work_mem on the worker of %d: %q", r.name(), k, got)
			}
		}
		other.Close(context.Background())
		for _, k := range []int{k1, k2} {
			if got := queryString(t, c, fmt.Sprintf("SELECT current_setting('work_mem') FROM cs_acc WHERE aid = %d", k), simple); got != "9MB" {
				t.Errorf("%s: own work_mem on the worker of %d: %q", r.name(), k, got)
			}
		}
		exec(t, c, "RESET work_mem", simple)
	}
}

// TestSetConfigInDoBlockAcrossWorkers: in a transaction over two workers,
// a setting a DO block changed applies to the statements on both, or
// those on the other worker are refused with 0A000; never a statement
// that runs without it.
func TestSetConfigInDoBlockAcrossWorkers(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(8))
	c := connect(t, srv.Addr())
	k1, k2 := spanningTable(t, c, "dw_acc")
	q := "SELECT '2020-01-03'::date::text FROM dw_acc WHERE aid = $1"
	for _, extended := range []bool{false, true} {
		r := txnRunner{t: t, c: c, extended: extended}
		for _, order := range [][2]int{{k1, k2}, {k2, k1}} {
			r.must("BEGIN")
			r.must("UPDATE dw_acc SET n = n + 1 WHERE aid = $1", order[0])
			r.must("UPDATE dw_acc SET n = n + 1 WHERE aid = $1", order[1])
			r.must("DO $$ BEGIN PERFORM set_config('DateStyle', 'SQL, DMY', false); END $$")
			for _, k := range order {
				var got string
				err := c.QueryRow(context.Background(), q, k).Scan(&got)
				if err != nil && sqlState(err) != "0A000" && sqlState(err) != "25P02" || err == nil && got != "03/01/2020" {
					t.Errorf("%s: date on the worker of %d after set_config in DO: %q, %v", r.name(), k, got, err)
				}
			}
			r.run("ROLLBACK")
		}
	}
}
