package coordinator

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
	"github.com/pgfleet/pgfleet/planner"
)

// Fences close the stale-read window of a fleet. create_distributed_table
// and create_reference_table move a table's rows out of the table on the
// default node; a coordinator that has not yet loaded the new catalog would
// read that emptied table and answer no rows. So before the move the
// coordinator that makes it fences the table on every member of the fleet
// (fleet.Fence, waiting for each to confirm): a member refuses statements
// that may name it, with 40001, until its catalog has the table (the
// move's own catalog change, pushed to it), until the move is given up
// (fleet.Unfence), or until the fence's lease runs out (the mover renews
// it while the move runs; a mover that died leaves a fence that lapses).
// A member that does not confirm in time stops the move before it starts.

// fenceLease is how long a fence holds unless renewed; the mover renews it
// every fenceLease/3.
const fenceLease = 30 * time.Second

// fences are the tables fenced on this coordinator, by relation name
// (lower case) with the end of their lease.
type fences struct {
	mu    sync.Mutex
	until map[string]time.Time
	n     atomic.Int32 // len(until): the fast path reads only this
}

// relName is a table as the Citus functions take it ("accounts",
// "public.accounts", "\"Accounts\"") as its relation name in lower case,
// which a statement naming the table contains, ignoring case.
func relName(table string) string {
	if i := strings.LastIndexByte(table, '.'); i >= 0 {
		table = table[i+1:]
	}
	return strings.ToLower(strings.Trim(table, `"`))
}

// fence refuses statements that may name table for lease.
func (s *Server) fence(table string, lease time.Duration) {
	f := &s.fences
	f.mu.Lock()
	if f.until == nil {
		f.until = map[string]time.Time{}
	}
	f.until[relName(table)] = time.Now().Add(lease)
	f.n.Store(int32(len(f.until)))
	f.mu.Unlock()
}

// unfence lifts table's fence.
func (s *Server) unfence(table string) {
	f := &s.fences
	f.mu.Lock()
	delete(f.until, relName(table))
	f.n.Store(int32(len(f.until)))
	f.mu.Unlock()
}

// liftFences lifts the fences of the tables snap has: their move is done.
func (s *Server) liftFences(snap *metadata.Snapshot) {
	f := &s.fences
	if f.n.Load() == 0 {
		return
	}
	f.mu.Lock()
	for _, t := range snap.Tables {
		delete(f.until, relName(t.Name))
	}
	f.n.Store(int32(len(f.until)))
	f.mu.Unlock()
}

// fencedIn refuses a statement to run on the default node that may name
// a fenced table (by its text: errs towards refusing).
func (s *Server) fencedIn(sql string) error {
	f := &s.fences
	if f.n.Load() == 0 {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	for rel, until := range f.until {
		if now.After(until) {
			delete(f.until, rel)
			f.n.Store(int32(len(f.until)))
			continue
		}
		if planner.ContainsFold(sql, rel) || planner.ContainsFold(sql, "u&") {
			return pgerr.New("40001", "table %s is being distributed through a coordinator of the fleet", rel).
				WithHint("Retry the statement: it runs on the table's new placement once this coordinator has the new catalog (milliseconds).")
		}
	}
	return nil
}

// fenceFleet fences table here and on every other member of the fleet
// before its rows move; release ends it: after a move that failed (done
// false) the fences are lifted at once, after one that succeeded they go
// as each coordinator loads the new catalog.
func (s *Server) fenceFleet(ctx context.Context, table string) (release func(done bool), err error) {
	s.fence(table, fenceLease)
	f := s.fleet.Load()
	if f == nil {
		return func(done bool) {
			if !done {
				s.unfence(table)
			}
		}, nil
	}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = f.Fence(fctx, table, fenceLease)
	cancel()
	if err != nil {
		s.unfence(table)
		f.Unfence(table)
		return nil, pgerr.New("55000", "cannot fence table %s on every coordinator of the fleet before moving its rows: %v; nothing changed", table, err).
			WithHint("Retry once every coordinator answers (one that died leaves the fleet after failure detection).")
	}
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(fenceLease / 3)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
				_ = f.Fence(rctx, table, fenceLease)
				rcancel()
			}
		}
	}()
	return func(done bool) {
		close(stop)
		if !done {
			s.unfence(table)
			f.Unfence(table)
		}
	}, nil
}
