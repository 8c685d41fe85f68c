package pooling_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgtest"
	"github.com/pgfleet/pgfleet/pooling"
)

// TestLendPgx: a pooled connection lent to pgx is the same backend, runs
// pgx's queries with arguments, goes back to its pool idle (a transaction
// left open rolled back) and is handed out again; closed by pgx or lost to a
// deadline it frees its slot; a connection in a transaction is not lent;
// a second connection pgx opens through the same configuration is taken
// from the pool too.
func TestLendPgx(t *testing.T) {
	cl := pgtest.Shared(t)
	p := pooling.NewPool(pooling.Config{Addr: cl.Servers[0].Addr(), Database: "postgres", User: "postgres",
		Size: 2, AcquireTimeout: 300 * time.Millisecond}, nil)
	defer p.Close()
	ctx := context.Background()
	var lent atomic.Int32
	done := func(*pooling.ServerConn) { lent.Add(-1) }
	take := func() (*pooling.ServerConn, error) {
		sc, err := p.Acquire(ctx, 0)
		if err == nil {
			lent.Add(1)
		}
		return sc, err
	}
	stats := func(wantOpen, wantBusy int) {
		t.Helper()
		if open, busy, _ := p.Stats(); open != wantOpen || busy != wantBusy {
			t.Fatalf("pool: %d open, %d busy; want %d, %d", open, busy, wantOpen, wantBusy)
		}
		if n := lent.Load(); n != 0 && wantBusy == 0 {
			t.Fatalf("%d connections still counted as lent", n)
		}
	}

	sc, err := take()
	if err != nil {
		t.Fatal(err)
	}
	pid := sc.PID
	c, err := pooling.LendPgx(ctx, sc, take, done)
	if err != nil {
		t.Fatal(err)
	}
	var got uint32
	var sum int
	if err := c.QueryRow(ctx, "SELECT pg_backend_pid(), $1::int + $2", 40, 2).Scan(&got, &sum); err != nil {
		t.Fatal(err)
	}
	if got != pid || sum != 42 {
		t.Fatalf("lent connection: backend %d, sum %d; want backend %d, 42", got, sum, pid)
	}
	if _, err := c.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "CREATE TABLE lend_rolled_back (x int)"); err != nil {
		t.Fatal(err)
	}
	pooling.Reclaim(ctx, c.PgConn())
	stats(1, 0)
	again, err := p.Acquire(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := again.Query("SELECT pg_backend_pid()::text, to_regclass('lend_rolled_back') IS NULL", time.Now().Add(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0][0] != strconv.FormatUint(uint64(pid), 10) || rows[0][1] != "t" {
		t.Fatalf("connection after Reclaim: %v; want backend %d with the transaction rolled back", rows, pid)
	}

	// A connection in a transaction is not lent; it goes back broken.
	if err := again.Exec("BEGIN", time.Now().Add(5*time.Second), nil); err != nil {
		t.Fatal(err)
	}
	lent.Add(1)
	if _, err := pooling.LendPgx(ctx, again, take, done); err == nil {
		t.Fatal("a connection in a transaction block was lent")
	}
	stats(0, 0)

	// pgx closing it, and a deadline that cuts a query off, free the slot.
	for _, cut := range []bool{false, true} {
		sc, err := take()
		if err != nil {
			t.Fatal(err)
		}
		c, err := pooling.LendPgx(ctx, sc, take, done)
		if err != nil {
			t.Fatal(err)
		}
		if cut {
			qctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			_, err := c.Exec(qctx, "SELECT pg_sleep(30)")
			cancel()
			if err == nil {
				t.Fatal("pg_sleep(30) finished within 200 ms")
			}
			pooling.Reclaim(ctx, c.PgConn())
		} else {
			_ = c.Close(ctx)
		}
		stats(0, 0)
	}

	// A second connection through the same configuration (what a two-phase
	// commit does for a lost one) is lent from the pool as well. Its take
	// is slow, as a checkout that waits is: pgconn starts its background
	// reader while the startup write is under way, and that read gets the
	// handshake (it once waited on the worker forever).
	slow := func() (*pooling.ServerConn, error) {
		time.Sleep(100 * time.Millisecond)
		return take()
	}
	sc, err = take()
	if err != nil {
		t.Fatal(err)
	}
	c, err = pooling.LendPgx(ctx, sc, slow, done)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	c2, err := pgx.ConnectConfig(cctx, c.Config())
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	stats(2, 2)
	if _, err := c2.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	// The pool is full: a third is refused with the pool's error, not
	// dialled beside it.
	_, err = pgx.ConnectConfig(ctx, c.Config())
	var pe *pgconn.ConnectError
	if err == nil || !errors.As(err, &pe) {
		t.Fatalf("a third connection over a pool of 2: %v, want a connect error", err)
	}
	pooling.Reclaim(ctx, c2.PgConn())
	pooling.Reclaim(ctx, c.PgConn())
	stats(2, 0)
}
