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

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestSignalSessionByPID: pg_cancel_backend and pg_terminate_backend of
// the process ID a client was told (BackendKeyData: pgx's PgConn().PID())
// act on that client's session as PostgreSQL's act on a backend (pgx's
// TestFatalRxError, TestFatalTxError, pgconn's TestConnCheckConn): in both
// protocols, the ID a parameter or a constant; cancel cancels its
// statement; terminate ends it with FATAL 57P01, idle or running a
// statement; an ID of no session gets false and PostgreSQL's warning; a
// role without the privileges gets 42501.
func TestSignalSessionByPID(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	ctl := connect(t, srv.Addr())
	boolOf := func(sql string, mode pgx.QueryExecMode, args ...any) (bool, error) {
		var v bool
		err := ctl.QueryRow(ctx, sql, append([]any{mode}, args...)...).Scan(&v)
		return v, err
	}
	fatal := func(err error) bool {
		var pe *pgconn.PgError
		return errors.As(err, &pe) && pe.Code == "57P01" && pe.Severity == "FATAL"
	}
	for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec} {
		arg := func(pid uint32) (string, []any) {
			if mode == simple {
				return fmt.Sprint(pid), nil
			}
			return "$1", []any{pid}
		}
		// Cancel a running statement.
		c := connect(t, srv.Addr())
		pid := c.PgConn().PID()
		if pid < 1<<22 {
			t.Fatalf("session process ID %d below 2^22", pid)
		}
		done := make(chan error, 1)
		go func() {
			_, err := c.Exec(ctx, "SELECT pg_sleep(30)")
			done <- err
		}()
		time.Sleep(300 * time.Millisecond)
		a, args := arg(pid)
		if v, err := boolOf("SELECT pg_cancel_backend("+a+")", mode, args...); err != nil || !v {
			t.Errorf("%v: pg_cancel_backend: %v, %v", mode, v, err)
		}
		if err := <-done; sqlState(err) != "57014" {
			t.Errorf("%v: the cancelled statement: %v, want 57014", mode, err)
		}
		// Terminate an idle session: its next statement fails, it is closed.
		if v, err := boolOf("SELECT pg_terminate_backend("+a+")", mode, args...); err != nil || !v {
			t.Errorf("%v: pg_terminate_backend of an idle session: %v, %v", mode, v, err)
		}
		if err := c.QueryRow(ctx, "SELECT 1").Scan(new(int)); err == nil || !c.IsClosed() {
			t.Errorf("%v: the terminated session's next statement: %v (closed %v)", mode, err, c.IsClosed())
		}
		// Terminate a session running a statement: FATAL 57P01 is its answer.
		c = connect(t, srv.Addr())
		pid = c.PgConn().PID()
		go func() {
			var n int32
			var s string
			done <- c.QueryRow(ctx, "SELECT 1::int4, pg_sleep(30)::varchar").Scan(&n, &s)
		}()
		time.Sleep(300 * time.Millisecond)
		a, args = arg(pid)
		if v, err := boolOf("SELECT pg_terminate_backend("+a+", 5000)", mode, args...); err != nil || !v {
			t.Errorf("%v: pg_terminate_backend with a timeout of a busy session: %v, %v", mode, v, err)
		}
		if err := <-done; !fatal(err) || !c.IsClosed() {
			t.Errorf("%v: the terminated session's statement: %v (closed %v), want FATAL 57P01", mode, err, c.IsClosed())
		}
		// No such session.
		a, args = arg(1<<22 + 12345)
		if v, err := boolOf("SELECT pg_terminate_backend("+a+")", mode, args...); err != nil || v {
			t.Errorf("%v: pg_terminate_backend of no session: %v, %v, want false", mode, v, err)
		}
	}
	// Several by an array of IDs (pgxpool's and database/sql's idle
	// checks): a row per ID, every session ended.
	for k, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeCacheStatement, simple} {
		var victims []*pgx.Conn
		var pids []uint32
		for i := 0; i < 3; i++ {
			v := connect(t, srv.Addr())
			victims = append(victims, v)
			pids = append(pids, v.PgConn().PID())
		}
		var rows pgx.Rows
		var err error
		switch {
		case k == 2: // ARRAY[...] (adversary finding: it ran on a worker, which answered false)
			rows, err = ctl.Query(ctx, fmt.Sprintf("select pg_terminate_backend(n) from unnest(ARRAY[%d, %d, %d]) n", pids[0], pids[1], pids[2]), mode)
		case mode == simple:
			rows, err = ctl.Query(ctx, fmt.Sprintf("select pg_terminate_backend(n) from unnest('{%d,%d,%d}'::int[]) n", pids[0], pids[1], pids[2]), mode)
		default:
			rows, err = ctl.Query(ctx, "select pg_terminate_backend(n) from unnest($1::int[]) n", mode, pids)
		}
		var got []bool
		if err == nil {
			for rows.Next() {
				var v bool
				if err = rows.Scan(&v); err != nil {
					break
				}
				got = append(got, v)
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		if err != nil || fmt.Sprint(got) != "[true true true]" {
			t.Errorf("%v: pg_terminate_backend over unnest of three IDs: %v, %v", mode, got, err)
		}
		for i, v := range victims {
			if err := v.QueryRow(ctx, "SELECT 1").Scan(new(int)); err == nil || !v.IsClosed() {
				t.Errorf("%v: session %d after its termination: %v", mode, i, err)
			}
		}
	}
	// Several calls in one query string (adversary finding: the string
	// went to a worker, which answered false): each is answered as sent
	// alone, and each session ends; an ID of no session gets false.
	{
		a, b := connect(t, srv.Addr()), connect(t, srv.Addr())
		res, err := ctl.PgConn().Exec(ctx, fmt.Sprintf("SELECT pg_terminate_backend(%d); SELECT 1 AS one; SELECT pg_terminate_backend(%d) AS b; SELECT pg_cancel_backend(%d)",
			a.PgConn().PID(), b.PgConn().PID(), 1<<22+12345)).ReadAll()
		var got []string
		for _, r := range res {
			for _, row := range r.Rows {
				got = append(got, string(r.FieldDescriptions[0].Name)+"="+string(row[0]))
			}
		}
		if want := "[pg_terminate_backend=t one=1 b=t pg_cancel_backend=f]"; err != nil || fmt.Sprint(got) != want {
			t.Errorf("signals in a query string of several: %v, %v, want %s", got, err, want)
		}
		for i, v := range []*pgx.Conn{a, b} {
			if err := v.QueryRow(ctx, "SELECT 1").Scan(new(int)); err == nil || !v.IsClosed() {
				t.Errorf("session %d terminated in a query string of several: next statement %v", i, err)
			}
		}
	}
	// Its own statement cancelled, as PostgreSQL's backend takes its own
	// cancel (adversary finding: pgfleet answered t and went on): the
	// statement fails with 57014, and in a query string of several the
	// string stops and its implicit transaction is rolled back. A
	// negative timeout is PostgreSQL 15's 22003.
	{
		own := connect(t, srv.Addr())
		testTable(t, ctl, "sig_own", "(id int PRIMARY KEY)", "SELECT create_distributed_table('sig_own', 'id', shard_count => 4)")
		pid := own.PgConn().PID()
		for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeExec} {
			if _, err := own.Exec(ctx, "SELECT pg_cancel_backend($1)", mode, pid); sqlState(err) != "57014" {
				t.Errorf("%v: pg_cancel_backend of its own session: %v, want 57014", mode, err)
			}
		}
		_, err := own.PgConn().Exec(ctx, fmt.Sprintf("INSERT INTO sig_own VALUES (1); SELECT pg_cancel_backend(%d); INSERT INTO sig_own VALUES (2)", pid)).ReadAll()
		if sqlState(err) != "57014" {
			t.Errorf("pg_cancel_backend of its own session in a query string: %v, want 57014", err)
		}
		if got := queryString(t, ctl, "SELECT count(*)::text FROM sig_own"); got != "0" {
			t.Errorf("rows after the cancelled string: %s, want 0", got)
		}
		if _, err := ctl.Exec(ctx, fmt.Sprintf("SELECT pg_terminate_backend(%d, -1)", pid), simple); sqlState(err) != "22003" {
			t.Errorf("pg_terminate_backend with a negative timeout: %v, want 22003", err)
		}
	}
	// Pipelined with another statement before one Sync, outside a
	// transaction block: refused with 0A000, in words that name the call
	// (adversary finding: the refusal spoke of a statement run on every
	// worker), and the session named lives on.
	{
		v := connect(t, srv.Addr())
		b := &pgx.Batch{}
		b.Queue("SELECT 1")
		b.Queue("SELECT pg_terminate_backend($1)", v.PgConn().PID())
		br := ctl.SendBatch(ctx, b)
		_, _ = br.Exec()
		_, err := br.Exec()
		_ = br.Close()
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "0A000" || !strings.Contains(pe.Message, "pg_terminate_backend of a pgfleet session") {
			t.Errorf("pg_terminate_backend pipelined with another statement: %v, want 0A000 naming the call", err)
		}
		if err := v.QueryRow(ctx, "SELECT 1").Scan(new(int)); err != nil {
			t.Errorf("the session named by the refused call: %v", err)
		}
	}
	// Terminated in the middle of COPY FROM STDIN into a distributed table:
	// FATAL 57P01, nothing of it stored (it committed its rows).
	testTable(t, ctl, "sig_copy", "(id int PRIMARY KEY)", "SELECT create_distributed_table('sig_copy', 'id', shard_count => 4)")
	cp := connect(t, srv.Addr())
	copyDone := make(chan error, 1)
	go func() {
		i := 0
		_, err := cp.CopyFrom(ctx, pgx.Identifier{"sig_copy"}, []string{"id"}, pgx.CopyFromFunc(func() ([]any, error) {
			if i == 100 {
				return nil, nil
			}
			i++
			time.Sleep(10 * time.Millisecond)
			return []any{i}, nil
		}))
		copyDone <- err
	}()
	time.Sleep(300 * time.Millisecond)
	if _, err := ctl.Exec(ctx, "SELECT pg_terminate_backend($1)", cp.PgConn().PID()); err != nil {
		t.Errorf("pg_terminate_backend of a session in COPY: %v", err)
	}
	if err := <-copyDone; !fatal(err) {
		t.Errorf("the terminated session's COPY: %v, want FATAL 57P01", err)
	}
	if got := queryString(t, ctl, "SELECT count(*)::text FROM sig_copy"); got != "0" {
		t.Errorf("rows of the terminated COPY: %s, want 0", got)
	}
	// Session IDs and worker backends in one statement: refused, nothing signalled.
	if _, err := ctl.Exec(ctx, fmt.Sprintf("SELECT pg_terminate_backend(n) FROM unnest('{%d,1}'::int[]) n", ctl.PgConn().PID()), simple); sqlState(err) != "0A000" {
		t.Errorf("a session's ID and a worker backend's in one array: %v, want 0A000", err)
	}
	// Its own: the session ends.
	c := connect(t, srv.Addr())
	if _, err := c.Exec(ctx, "SELECT pg_terminate_backend($1)", c.PgConn().PID()); !fatal(err) {
		t.Errorf("pg_terminate_backend of its own session: %v, want FATAL 57P01", err)
	}
	// Privileges, as PostgreSQL's: a plain role cannot end a superuser's.
	for _, s := range cl.Servers {
		exec(t, connect(t, s.Addr()), "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'sig_user') THEN CREATE ROLE sig_user LOGIN; END IF; END $$", simple)
	}
	u, err := pgx.Connect(ctx, "postgres://sig_user@"+srv.Addr()+"/postgres?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close(ctx)
	var v bool
	if err := u.QueryRow(ctx, "SELECT pg_terminate_backend($1)", ctl.PgConn().PID()).Scan(&v); sqlState(err) != "42501" {
		t.Errorf("a plain role terminating a superuser's session: %v, %v; want 42501", v, err)
	}
	if err := ctl.QueryRow(ctx, "SELECT pg_terminate_backend($1)", u.PgConn().PID()).Scan(&v); err != nil || !v {
		t.Errorf("a superuser terminating a plain role's session: %v, %v", v, err)
	}
	if err := ctl.QueryRow(ctx, "SELECT 1").Scan(new(int)); err != nil {
		t.Errorf("the superuser's session afterwards: %v", err)
	}
}

// TestSignalPooledBackendRefused: a worker backend the coordinator's pool
// keeps runs every client's statements in turn, so the process ID a client
// reads with pg_backend_pid() is not its own for long. pg_cancel_backend
// and pg_terminate_backend of such an ID are refused (0A000), in both
// protocols (adversary: A's pg_backend_pid(), signalled later, cancelled B's
// statement on that connection, or ended it with 08006). A worker backend
// that is not a pooled one (a direct connection) is still signalled.
func TestSignalPooledBackendRefused(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(1))
	ctx := context.Background()
	a := connect(t, srv.Addr())
	var pooled uint32
	if err := a.QueryRow(ctx, "SELECT pg_backend_pid()", pgx.QueryExecModeSimpleProtocol).Scan(&pooled); err != nil {
		t.Fatal(err)
	}
	b := connect(t, srv.Addr())
	done := make(chan error, 1)
	go func() {
		_, err := b.Exec(ctx, "SELECT pg_sleep(1)", pgx.QueryExecModeSimpleProtocol)
		done <- err
	}()
	time.Sleep(200 * time.Millisecond)
	c := connect(t, srv.Addr())
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		for _, fn := range []string{"pg_cancel_backend", "pg_terminate_backend"} {
			var v bool
			err := c.QueryRow(ctx, "SELECT "+fn+"($1)", mode, pooled).Scan(&v)
			if sqlState(err) != "0A000" {
				t.Errorf("%v: %s of a pooled worker backend: %v %v, want 0A000", mode, fn, v, err)
			}
			// Forms the coordinator does not read, with the ID written in
			// them (adversary round 2).
			for _, q := range []string{"SELECT * FROM " + fn + "(%d)", "SELECT " + fn + "(%d + 0)", "SELECT " + fn + "(pid => %d)",
				"SELECT " + fn + "(x) FROM (VALUES (%d)) v(x)"} {
				sql := fmt.Sprintf(q, pooled)
				if _, err := c.Exec(ctx, sql, mode); sqlState(err) != "0A000" {
					t.Errorf("%v: %s: %v, want 0A000", mode, sql, err)
				}
			}
		}
	}
	if err := <-done; err != nil {
		t.Errorf("B's statement on that backend: %v, want it to finish", err)
	}
	// A backend of a direct connection to the worker is signalled there.
	direct := connect(t, cl.Servers[0].Addr())
	go func() {
		_, err := direct.Exec(ctx, "SELECT pg_sleep(30)")
		done <- err
	}()
	time.Sleep(200 * time.Millisecond)
	var v bool
	if err := c.QueryRow(ctx, "SELECT pg_cancel_backend($1)", direct.PgConn().PID()).Scan(&v); err != nil || !v {
		t.Errorf("pg_cancel_backend of a direct connection's backend: %v %v, want true", v, err)
	}
	if err := <-done; sqlState(err) != "57014" {
		t.Errorf("the direct connection's statement: %v, want 57014", err)
	}
}

// TestSignalPooledBackendOfFleetRefused: a pooled worker backend of
// another coordinator sharing the metadata database (its recorded
// backends, with the connection budget on) is refused too: a client's
// pg_backend_pid() through one coordinator, signalled through the other,
// cancelled whichever client's statement ran on that connection
// (adversary).
func TestSignalPooledBackendOfFleetRefused(t *testing.T) {
	cl := pgtest.Shared(t)
	leased := func(c *coordinator.Config) { c.PoolSize, c.LeaseTTL = 1, 10*time.Second }
	one := pgtest.Coordinator(t, cl, leased)
	two := pgtest.Coordinator(t, cl, leased)
	ctx := context.Background()
	a := connect(t, one.Addr())
	var pooled uint32
	if err := a.QueryRow(ctx, "SELECT pg_backend_pid()", pgx.QueryExecModeSimpleProtocol).Scan(&pooled); err != nil {
		t.Fatal(err)
	}
	c := connect(t, two.Addr())
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		for _, q := range []string{"SELECT pg_cancel_backend(%d)", "SELECT pg_terminate_backend(%d + 0)"} {
			sql := fmt.Sprintf(q, pooled)
			if _, err := c.Exec(ctx, sql, mode); sqlState(err) != "0A000" {
				t.Errorf("%v: %s through the other coordinator: %v, want 0A000", mode, sql, err)
			}
		}
	}
	// The backend is still there for the first coordinator's clients.
	var again uint32
	if err := a.QueryRow(ctx, "SELECT pg_backend_pid()", pgx.QueryExecModeSimpleProtocol).Scan(&again); err != nil || again != pooled {
		t.Errorf("the pooled backend after the refused signals: %d, %v; want %d", again, err, pooled)
	}
}
