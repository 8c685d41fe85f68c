package pooling_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
	"github.com/pgfleet/pgfleet/pooling"
)

// TestClosedIdleConnectionMarked: the worker ending an idle pooled
// connection (pg_terminate_backend: FATAL, then close) is seen by the
// watcher, and a checkout that trusts the watcher (a connection released
// just before) does not hand it out; the pool opens a new one. A
// connection in use that the worker ends is closed at its release.
func TestClosedIdleConnectionMarked(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pgtest.URL(cl.Servers[0].Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	terminate := func(pid uint32) {
		t.Helper()
		var ok bool
		if err := admin.QueryRow(ctx, "SELECT pg_terminate_backend($1, 5000)", int(pid)).Scan(&ok); err != nil || !ok {
			t.Fatalf("pg_terminate_backend(%d): %v, %v", pid, ok, err)
		}
	}
	waitMarked := func(c *pooling.ServerConn) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !pooling.HungUp(c); {
			if time.Now().After(deadline) {
				t.Fatalf("the watcher never saw backend %d close", c.PID)
			}
			time.Sleep(time.Millisecond)
		}
	}
	p := pooling.NewPool(pooling.Config{Addr: cl.Servers[0].Addr(), Database: "postgres", User: "postgres",
		Size: 1, AcquireTimeout: 2 * time.Second}, nil)
	defer p.Close()

	c, err := p.Acquire(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !pooling.Watched(c) {
		t.Fatal("a new connection is not watched for the worker's close")
	}
	if pooling.HungUp(c) {
		t.Fatal("a live connection is marked closed")
	}
	old := c.PID
	p.Release(c)
	terminate(old)
	waitMarked(c)
	pooling.UsedAt(c, time.Now()) // within the window where the watcher alone is trusted
	c, err = p.Acquire(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if c.PID == old {
		t.Fatalf("the connection the worker closed (backend %d) was handed out", old)
	}
	if err := c.Exec("SELECT 1", time.Now().Add(5*time.Second), nil); err != nil {
		t.Fatalf("the new connection: %v", err)
	}

	// Ended while in use: closed at release, not put back idle.
	old = c.PID
	terminate(old)
	waitMarked(c)
	p.Release(c)
	if open, _, _ := p.Stats(); open != 0 {
		t.Errorf("%d connections open after the closed one's release, want 0", open)
	}
	c, err = p.Acquire(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(c)
	if c.PID == old {
		t.Fatalf("backend %d, ended in use, was kept", old)
	}
}
