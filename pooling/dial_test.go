package pooling_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/internal/pgtest"
	"github.com/pgfleet/pgfleet/pooling"
)

// TestDialWorkerShuttingDown: a worker in smart shutdown refuses new
// connections with 57P03 while its sessions go on. The pool reports that as
// 08001 (cannot connect to the worker), not as the worker's 57P03, which a
// client would take for its own server shutting down.
func TestDialWorkerShuttingDown(t *testing.T) {
	cl := pgtest.Start(t, 1)
	w := cl.Servers[0]
	ctx := context.Background()
	held, err := pgx.Connect(ctx, w.URL())
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(w.Pid(), syscall.SIGTERM); err != nil { // smart shutdown: waits for held
		t.Fatal(err)
	}
	defer func() { _ = held.Close(ctx) }()
	p := pooling.NewPool(pooling.Config{Addr: w.Addr(), Database: "postgres", User: "postgres", Size: 2}, nil)
	defer p.Close()
	var pe *pgerr.Error
	for i := 0; ; i++ {
		_, err = p.Acquire(ctx, 0)
		if errors.As(err, &pe) && pe.Code == pgerr.SQLClientUnableToConnect {
			break
		}
		if i > 100 || err == nil && i > 0 {
			t.Fatalf("checkout from a worker shutting down: %v, want SQLSTATE %s", err, pgerr.SQLClientUnableToConnect)
		}
		time.Sleep(20 * time.Millisecond) // the postmaster takes the signal
	}
	t.Logf("checkout: %v", err)
}
