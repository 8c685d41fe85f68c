package pooling_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/internal/pgtest"
	"github.com/pgfleet/pgfleet/pooling"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestPoolBoundsAndReset(t *testing.T) {
	cl := pgtest.Shared(t)
	p := pooling.NewPool(pooling.Config{Addr: cl.Servers[0].Addr(), Database: "postgres", User: "postgres",
		Size: 2, AcquireTimeout: 200 * time.Millisecond}, nil)
	defer p.Close()
	ctx := context.Background()
	a, err := p.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A third checkout waits, then fails with a typed, client-ready error.
	start := time.Now()
	_, err = p.Acquire(ctx)
	var pe *pgerr.Error
	if !errors.As(err, &pe) || pe.Code != pgerr.TooManyConnections {
		t.Fatalf("third checkout: %v, want SQLSTATE %s", err, pgerr.TooManyConnections)
	}
	if d := time.Since(start); d < 150*time.Millisecond || d > 2*time.Second {
		t.Errorf("timed out after %v, configured 200ms", d)
	}
	// A connection released inside a transaction is rolled back first.
	if err := a.Exec("BEGIN; CREATE TABLE pool_reset_t (a int)", time.Now().Add(time.Second), nil); err != nil {
		t.Fatal(err)
	}
	if a.TxStatus != 'T' {
		t.Fatalf("status %q after BEGIN", a.TxStatus)
	}
	p.Release(a)
	c, err := p.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c.TxStatus != 'I' {
		t.Errorf("reused connection in status %q", c.TxStatus)
	}
	if err := c.Exec("SELECT * FROM pool_reset_t", time.Now().Add(time.Second), nil); err == nil {
		t.Error("table created in the abandoned transaction exists")
	}
	// A broken connection is closed and its slot freed.
	c.MarkBroken()
	p.Release(c)
	p.Release(b)
	for i := 0; i < 2; i++ {
		x, err := p.Acquire(ctx)
		if err != nil {
			t.Fatalf("after release: %v", err)
		}
		defer p.Release(x)
	}
}
