package coordinator_test

import (
	"net"
	"runtime"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestIdleSessionStack: a session waiting for its client, after a query,
// keeps a goroutine stack the runtime shrinks to 4 KiB: it waits with
// little on the stack (wire.Reader.Wait, run's work in frames of its
// own). An idle client once cost an 8 KiB stack, half its memory on the
// coordinator (pgfleet bench idle measures the whole).
func TestIdleSessionStack(t *testing.T) {
	cl := pgtest.Shared(t)
	// Sessions keep their goroutines here (as in a transaction block, or
	// on a platform without epoll): the stack they wait with is measured.
	srv := pgtest.Coordinator(t, cl, func(c *coordinator.Config) { c.IdleSleep = -1 })
	const n = 200
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fe := pgproto3.NewFrontend(c, c)
		fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber,
			Parameters: map[string]string{"user": "postgres", "database": "postgres"}})
		for _, q := range []string{"SELECT 1", ""} {
			if err := fe.Flush(); err != nil {
				t.Fatal(err)
			}
			for {
				m, err := fe.Receive()
				if err != nil {
					t.Fatal(err)
				}
				if e, ok := m.(*pgproto3.ErrorResponse); ok {
					t.Fatalf("client %d: %s", i, e.Message)
				}
				if _, ok := m.(*pgproto3.ReadyForQuery); ok {
					break
				}
			}
			if q != "" {
				fe.Send(&pgproto3.Query{String: q})
			}
		}
	}
	// Each collection halves a stack that uses under a quarter of it.
	for range 4 {
		runtime.GC()
	}
	runtime.ReadMemStats(&after)
	perClient := (int64(after.StackInuse) - int64(before.StackInuse)) / n
	t.Logf("goroutine stack per idle client: %d B", perClient)
	if perClient > 4096+512 {
		t.Errorf("an idle client's session keeps %d B of goroutine stack, want 4 KiB (its wait is deeper than the runtime shrinks)", perClient)
	}
}
