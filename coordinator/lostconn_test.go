package coordinator_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// terminate ends a worker backend as pg_terminate_backend does (the backend
// sends FATAL 57P01 and closes), waiting until it is gone.
func terminate(t *testing.T, admin *pgx.Conn, pid string) {
	t.Helper()
	if got := queryString(t, admin, "SELECT pg_terminate_backend($1::int, 5000)::text", pid); got != "true" {
		t.Fatalf("pg_terminate_backend(%s) = %s", pid, got)
	}
}

// TestDeadPooledConnection: a pooled worker connection killed right after
// its last use (pg_terminate_backend, well within 100 ms) is never handed
// to a statement: the next statement of the same session, and that of a
// session with other settings (whose checkout first applies them), run on
// a new connection. Before, the first got the worker's FATAL 57P01 relayed
// (the client's session ended) and the second XX000 "internal error".
func TestDeadPooledConnection(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(1))
	admin := connect(t, cl.Servers[0].Addr())
	a := connect(t, srv.Addr())
	b := connect(t, srv.Addr())
	exec(t, b, "SET work_mem = '7MB'")
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		pid := queryString(t, a, "SELECT pg_backend_pid()", mode)
		terminate(t, admin, pid)
		if got := queryString(t, a, "SELECT 1", mode); got != "1" {
			t.Errorf("%v: same session after its connection died: %q", mode, got)
		}

		pid = queryString(t, a, "SELECT pg_backend_pid()", mode)
		terminate(t, admin, pid)
		// b's settings differ from a's: its checkout applies them first.
		if got := queryString(t, b, "SHOW work_mem", mode); got != "7MB" {
			t.Errorf("%v: other session after the connection died: %q", mode, got)
		}
	}
}

// TestWorkerConnectionKilledMidStatement: a worker backend terminated while
// it runs a client's statement. Outside a transaction the statement fails
// with 08006 (its outcome unknown) and the session goes on; inside one the
// session ends with 08006. The worker's FATAL 57P01 is never relayed as if
// the client's own server were shutting down.
func TestWorkerConnectionKilledMidStatement(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(2))
	admin := connect(t, cl.Servers[0].Addr())
	ctx := context.Background()

	// killDuring runs sql on c while the worker backend with pid is
	// terminated, and returns sql's error.
	killDuring := func(c *pgx.Conn, pid, sql string, mode pgx.QueryExecMode) error {
		t.Helper()
		done := make(chan error, 1)
		go func() {
			_, err := c.Exec(ctx, sql, mode)
			done <- err
		}()
		// Wait until the statement runs on the worker.
		for i := 0; ; i++ {
			if queryString(t, admin, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1::int AND state = 'active'", pid) == "1" {
				break
			}
			if i > 500 {
				t.Fatal("the statement never ran on the worker")
			}
			time.Sleep(10 * time.Millisecond)
		}
		terminate(t, admin, pid)
		return <-done
	}

	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		c := connect(t, srv.Addr())
		// Outside a transaction: 08006, and the session survives.
		pid := queryString(t, c, "SELECT pg_backend_pid()", mode)
		err := killDuring(c, pid, "SELECT pg_sleep(30)", mode)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "08006" || pe.Severity != "ERROR" {
			t.Errorf("%v: statement on a killed connection: %v, want ERROR 08006", mode, err)
		}
		if got := queryString(t, c, "SELECT 1", mode); got != "1" {
			t.Errorf("%v: the session after the lost statement: %q", mode, got)
		}

		// Inside a transaction: the transaction fails with 08006.
		exec(t, c, "BEGIN", mode)
		pid = queryString(t, c, "SELECT pg_backend_pid()", mode)
		err = killDuring(c, pid, "SELECT pg_sleep(30)", mode)
		if !errors.As(err, &pe) || pe.Code != "08006" {
			t.Errorf("%v: statement in a transaction on a killed connection: %v, want 08006", mode, err)
		}
		_ = c.Close(ctx)
	}
}

// TestTerminateOwnBackend: a statement that terminates its own backend
// (pg_terminate_backend(pg_backend_pid()), pgx's
// TestBeginTxFatalErrorKillsConn) ends the client's session with
// PostgreSQL's FATAL 57P01, in both protocols, inside a transaction block
// too; other sessions go on.
func TestTerminateOwnBackend(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(2))
	ctx := context.Background()
	other := connect(t, srv.Addr())
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		for _, inBlock := range []bool{false, true} {
			c := connect(t, srv.Addr())
			if inBlock {
				exec(t, c, "BEGIN", mode)
			}
			_, err := c.Exec(ctx, "SELECT pg_terminate_backend(pg_backend_pid())", mode)
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "57P01" || pe.Severity != "FATAL" {
				t.Errorf("%v (block %v): terminating its own backend: %v, want FATAL 57P01", mode, inBlock, err)
			}
			if _, err := c.Exec(ctx, "SELECT 1", mode); err == nil || !c.IsClosed() {
				t.Errorf("%v (block %v): the session after terminating its own backend: %v, closed %v; want it ended", mode, inBlock, err, c.IsClosed())
			}
			if got := queryString(t, other, "SELECT 1", mode); got != "1" {
				t.Errorf("another session: %q", got)
			}
		}
	}
}
