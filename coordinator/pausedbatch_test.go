package coordinator_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestPausedBatchLargeResult: a client that pauses between a large
// query's Execute and its Sync gets the whole result. The coordinator
// sends the Execute on when the client pauses, so the worker's rows fill
// the coordinator's socket buffers before the Sync goes out; a relay that
// then waited for new bytes from the worker (rather than reading what
// waits) would wait for good, the worker blocked on its send (adversary
// 158 against a reverted change: every such session hung and kept its
// worker connection).
func TestPausedBatchLargeResult(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(2))
	r := rawConnect(t, srv.Addr())
	const rows = 20000 // 1 kB each: 20 MB, far past the socket buffers
	for round := 0; round < 3; round++ {
		r.send(20*time.Second, exe("SELECT repeat('x', 1000) FROM generate_series(1, 20000)")...)
		time.Sleep(500 * time.Millisecond) // the client pauses mid-batch
		r.send(20*time.Second, &pgproto3.Sync{})
		got := r.answers()
		n := 0
		for _, a := range got {
			if len(a) == 1000 {
				n++
			}
		}
		if n != rows || len(got) < 2 || got[len(got)-2] != "C SELECT 20000" || got[len(got)-1] != "ZI" {
			tail := got
			if len(tail) > 3 {
				tail = tail[len(tail)-3:]
			}
			t.Fatalf("round %d: %d rows of %d, ending %q", round, n, rows, tail)
		}
	}
	// The session and the pool are still usable.
	r.expect("after", r.round(exe("SELECT 'ok'")...), "ok,C SELECT 1,ZI")
}
