package coordinator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestLeaseLockHolderFrozen: a coordinator frozen in the middle of a lease
// renewal holds the lease lock in an open transaction. The others must
// keep renewing (the server ends a lease connection idle in a transaction
// past a fifth of the lease), or every lease lapses and every coordinator
// closes its connections: found by TestFleetSIGKILL, whose SIGSTOP landed
// in a renewal (no coordinator held a live lease for 30 s).
func TestLeaseLockHolderFrozen(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := context.Background()
	w0 := connect(t, cl.Servers[0].Addr())
	_, _ = w0.Exec(ctx, "DROP DATABASE IF EXISTS lease_lock WITH (FORCE)")
	exec(t, w0, "CREATE DATABASE lease_lock")
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), pgtest.URL(cl.Servers[0].Addr()))
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS lease_lock WITH (FORCE)")
			c.Close(context.Background())
		}
	})
	meta := fmt.Sprintf("postgres://postgres@%s/lease_lock?sslmode=disable", cl.Servers[0].Addr())
	start := func() *coordinator.Server {
		return pgtest.Coordinator(t, cl, func(c *coordinator.Config) {
			c.MetadataURL = meta
			c.WorkerConnections, c.LeaseTTL = 10, 2*time.Second
		})
	}
	a, b := start(), start()
	mc, err := pgx.Connect(ctx, meta)
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close(ctx)
	live := func() int {
		var n int
		if err := mc.QueryRow(ctx, "SELECT count(*) FROM pgfleet.coordinators WHERE expires > now()").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	deadline := time.Now().Add(10 * time.Second)
	for live() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d live leases, want 2", live())
		}
		time.Sleep(50 * time.Millisecond)
	}
	end, err := a.FreezeInRenewal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer end()
	// Three lease lengths: without the server ending the frozen
	// transaction, both leases lapse within one.
	for end := time.Now().Add(6 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if n := live(); n != 2 {
			t.Fatalf("%d live leases while a renewal's transaction was left open, want 2 (b: share %d)", n, b.Share(cl.Servers[0].Addr()))
		}
	}
}
