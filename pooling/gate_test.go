package pooling_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/internal/pgtest"
	"github.com/pgfleet/pgfleet/pooling"
)

// TestGate: pools to one worker (two databases here) share a gate's cap:
// together they never hold more connections than it allows, as the worker
// counts them; a pool at the cap takes an idle connection of the other
// (closing it) rather than wait; a lowered cap closes idle connections at
// once (in the background) and busy ones when released; Fence closes the busy ones under their
// holders and admits none.
func TestGate(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, cl.Servers[0].URL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	_, _ = admin.Exec(ctx, "CREATE DATABASE gate_b")
	onWorker := func() int {
		t.Helper()
		var n int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname IN ('postgres', 'gate_b') AND pid <> pg_backend_pid() AND backend_type = 'client backend' AND application_name = ''").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	base := onWorker()
	g := pooling.NewGate(3)
	mk := func(db string) *pooling.Pool {
		return pooling.NewPool(pooling.Config{Addr: cl.Servers[0].Addr(), Database: db, User: "postgres",
			// (A waiter's slot frees after a close, which waits up to 200 ms
			// for the worker; 300 ms was too short on a loaded machine.)
			Size: 8, AcquireTimeout: 2 * time.Second, Gate: g}, nil)
	}
	pa, pb := mk("postgres"), mk("gate_b")
	defer pa.Close()
	defer pb.Close()
	var held []*pooling.ServerConn
	for i := 0; i < 3; i++ {
		c, err := pa.Acquire(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	if n := onWorker() - base; n != 3 || g.Open() != 3 {
		t.Fatalf("after 3 checkouts: %d connections on the worker, gate counts %d; want 3", n, g.Open())
	}
	// The other pool is at the cap: it waits, then fails with 53300
	// naming the share.
	_, err = pb.Acquire(ctx, 0)
	var pe *pgerr.Error
	if !errors.As(err, &pe) || pe.Code != pgerr.TooManyConnections || !strings.Contains(pe.Message, "share") {
		t.Fatalf("checkout over the gate's cap: %v, want 53300 about the share", err)
	}
	// An idle connection of the first pool makes room: closed, and the
	// second pool opens its own.
	pa.Release(held[2])
	held = held[:2]
	cb, err := pb.Acquire(ctx, 0)
	if err != nil {
		t.Fatalf("checkout with an idle connection in the other pool: %v", err)
	}
	if n := onWorker() - base; n != 3 {
		t.Errorf("after taking the other pool's idle slot: %d connections, want 3", n)
	}
	// A waiter is served when a slot frees in the other pool.
	got := make(chan error, 1)
	go func() {
		c, err := pb.Acquire(ctx, 0)
		if err == nil {
			pb.Release(c)
		}
		got <- err
	}()
	time.Sleep(50 * time.Millisecond)
	held[1].MarkBroken()
	pa.Release(held[1])
	held = held[:1]
	if err := <-got; err != nil {
		t.Errorf("waiter after a slot freed in the other pool: %v", err)
	}
	// Lowered to 1: idle connections go at once, busy ones on release.
	g.SetCap(1)
	for deadline := time.Now().Add(2 * time.Second); onWorker()-base > 2 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond) // closed in the background
	}
	if n := onWorker() - base; n != 2 {
		t.Errorf("after lowering the cap to 1 with 2 busy: %d connections, want 2 (the idle one closed)", n)
	}
	pb.Release(cb)
	for deadline := time.Now().Add(2 * time.Second); g.Open() > 1 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond) // the idle one is closed in the background
	}
	if n := onWorker() - base; n != 1 || g.Open() != 1 {
		t.Errorf("after releasing one over the cap: %d connections, gate %d; want 1", n, g.Open())
	}
	// Raised again: pools may open more.
	g.SetCap(2)
	c2, err := pb.Acquire(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Fence: every connection closed, the busy ones under their holders.
	g.Fence()
	if err := held[0].Exec("SELECT 1", time.Now().Add(time.Second), nil); err == nil {
		t.Error("a busy connection still answers after Fence")
	}
	if err := c2.Exec("SELECT 1", time.Now().Add(time.Second), nil); err == nil {
		t.Error("a busy connection of the other pool still answers after Fence")
	}
	pa.Release(held[0])
	pb.Release(c2)
	deadline := time.Now().Add(5 * time.Second)
	for onWorker() != base && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := onWorker() - base; n != 0 || g.Open() != 0 {
		t.Errorf("after Fence: %d connections on the worker, gate %d; want 0", n, g.Open())
	}
	if _, err := pa.Acquire(ctx, 0); !errors.As(err, &pe) || pe.Code != pgerr.TooManyConnections {
		t.Errorf("checkout after Fence: %v, want 53300", err)
	}
}
