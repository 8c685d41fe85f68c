package coordinator

import (
	"context"
	"crypto/rand"
	"encoding/binary"
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
// that may name it, with 40001, until the mover says the move is done
// (fleet.Unfence; the member reloads the catalog first) or given up, or
// until the fence's lease runs out (the mover renews it while the move
// runs; a mover that died leaves a fence that lapses). Each fence has a
// token of its mover's: two movers of one table (one of which fails on
// the other's work) lift only their own. A member that does not confirm
// in time stops the move before it starts.

// fenceLease is how long a fence holds unless renewed; the mover renews it
// every fenceLease/3.
const fenceLease = 30 * time.Second

// fenceGrace is how long a mover waits after every member confirmed its
// fence before the rows move.
const fenceGrace = 100 * time.Millisecond

// fences are the tables fenced on this coordinator, by relation name
// (lower case), each with its movers' tokens and their leases' ends.
type fences struct {
	mu    sync.Mutex
	until map[string]map[uint64]time.Time
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

// fence refuses statements that may name table for lease (token: the
// mover's); a hold's key (hold.go) holds its shard group instead, and a new
// hold returns the wait for the statements already past its check.
func (s *Server) fence(table string, token uint64, lease time.Duration) (wait func()) {
	if isHold(table) {
		return s.hold(table, token, lease)
	}
	f := &s.fences
	rel := relName(table)
	f.mu.Lock()
	if f.until == nil {
		f.until = map[string]map[uint64]time.Time{}
	}
	if f.until[rel] == nil {
		f.until[rel] = map[uint64]time.Time{}
	}
	f.until[rel][token] = time.Now().Add(lease)
	f.n.Store(int32(len(f.until)))
	f.mu.Unlock()
	return nil
}

// unfence lifts the fence token of table (or the hold of that key).
func (s *Server) unfence(table string, token uint64) {
	if isHold(table) {
		s.unhold(token)
		return
	}
	f := &s.fences
	rel := relName(table)
	f.mu.Lock()
	if m := f.until[rel]; m != nil {
		delete(m, token)
		if len(m) == 0 {
			delete(f.until, rel)
		}
	}
	f.n.Store(int32(len(f.until)))
	f.mu.Unlock()
}

// unfenced is a member's word that a fence is over: after a move that
// committed, once this coordinator has the new catalog (if it cannot read
// it, the fence stays until its lease lapses: the poll reloads by then).
// A hold is lifted even then: its statements meet the source's drop and
// 40001, as without holds, rather than wait for the lease.
func (s *Server) unfenced(table string, token uint64, done bool) {
	go func() {
		if done && s.reloadCatalog(context.Background()) != nil && !isHold(table) {
			return
		}
		s.unfence(table, token)
	}()
}

// fencedIn refuses a statement to run on the default node that may name
// a fenced table (by its text: errs towards refusing).
func (s *Server) fencedIn(sql string) error { return s.fencedInExcept(sql, nil) }

// fencedInExcept is fencedIn, passing the fences whose tokens are all in
// own (the session's own block, which will move the table's rows at its
// COMMIT and reads and writes it where it is until then).
func (s *Server) fencedInExcept(sql string, own map[uint64]bool) error {
	f := &s.fences
	if f.n.Load() == 0 {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	for rel, tokens := range f.until {
		for token, until := range tokens {
			if now.After(until) {
				delete(tokens, token)
			}
		}
		if len(tokens) == 0 {
			delete(f.until, rel)
			f.n.Store(int32(len(f.until)))
			continue
		}
		mine := own != nil
		for token := range tokens {
			mine = mine && own[token]
		}
		if mine {
			continue
		}
		if containsWordFold(sql, rel) || planner.ContainsFold(sql, "u&") || !ascii([]byte(sql)) && containsWordFold(strings.ToLower(sql), rel) {
			return pgerr.New("40001", "table %s is being distributed through a coordinator of the fleet", rel).
				WithHint("Retry the statement: it runs on the table's new placement once the move is done (milliseconds after it commits).")
		}
	}
	return nil
}

// A statement that is not ASCII is also matched lowered as the name is
// (strings.ToLower): a letter may lower to another number of bytes (the
// Kelvin sign to k), which the bytewise fold misses (found by an
// adversary).

// containsWordFold reports whether s contains word (lower case) ignoring
// ASCII case (planner.IndexFold), not as part of a longer identifier (a table named e is in
// "FROM e" and "public.e" and '"e"', not in "SELECT 1"; found by an
// adversary: every statement with an e was refused while e moved).
func containsWordFold(s, word string) bool {
	ident := func(c byte) bool {
		return c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
	}
	for from := 0; from+len(word) <= len(s); {
		i := planner.IndexFold(s[from:], word)
		if i < 0 {
			return false
		}
		i += from
		end := i + len(word)
		if (i == 0 || !ident(s[i-1])) && (end == len(s) || !ident(s[end])) {
			return true
		}
		from = i + 1
	}
	return false
}

// fenceFleet fences table here and on every other member of the fleet
// before its rows move; release ends it, after the move's catalog change
// is installed here (done) or after a move that failed.
func (s *Server) fenceFleet(ctx context.Context, table string) (release func(done bool), err error) {
	release, _, err = s.fenceFleetToken(ctx, table)
	return release, err
}

// fenceFleetToken is fenceFleet, with the fence's token (a session that
// holds a fence may pass it: ownFence).
func (s *Server) fenceFleetToken(ctx context.Context, table string) (release func(done bool), token uint64, err error) {
	return s.leaseFleet(ctx, table, fenceLease, fenceGrace)
}

// leaseFleet sets the fence (or hold) key here and on every other member
// of the fleet, waiting for each to confirm and then for grace, and renews
// it every lease/3 until release; release lifts it everywhere, on the
// members after they read the catalog when done.
func (s *Server) leaseFleet(ctx context.Context, key string, lease, grace time.Duration) (release func(done bool), token uint64, err error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	token = binary.BigEndian.Uint64(b[:])
	what := "fence table " + key
	if isHold(key) {
		what = "hold the shard group"
	}
	if wait := s.fence(key, token, lease); wait != nil {
		wait()
	}
	f := s.fleet.Load()
	if f != nil {
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = f.Fence(fctx, key, token, lease)
		cancel()
		if err != nil {
			s.unfence(key, token)
			f.Unfence(key, token, false)
			return nil, 0, pgerr.New("55000", "cannot %s on every coordinator of the fleet before moving its rows: %v; nothing changed", what, err).
				WithHint("Retry once every coordinator answers (one that died leaves the fleet after failure detection).")
		}
		// A statement that passed a member's check just before the fence
		// came may still be on its way to the worker (waiting for a
		// pooled connection, say): give it a moment to run where it is.
		// (Not a guarantee: see docs/architecture.md.)
		time.Sleep(grace)
	}
	// The lease is renewed here and on the members while the move (or
	// the transaction block that will move the rows) lasts.
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(lease / 3)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				s.fence(key, token, lease)
				if f != nil {
					rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
					_ = f.Fence(rctx, key, token, lease)
					rcancel()
				}
			}
		}
	}()
	var once sync.Once
	return func(done bool) {
		once.Do(func() {
			close(stop)
			if isHold(key) {
				// Here as on the members: lifted once the catalog is read.
				s.unfenced(key, token, done)
			} else {
				s.unfence(key, token)
			}
			if f != nil {
				f.Unfence(key, token, done)
			}
		})
	}, token, nil
}

// noteTxnStart keeps the catalog as it was when the session's transaction
// block ran its first statement (before that statement: the catalog may
// only be older than the statement's snapshot, never newer).
func (ss *session) noteTxnStart() {
	switch {
	case !ss.inTxn():
		ss.txSnap = nil
	case ss.txSnap == nil:
		ss.txSnap = ss.srv.catalog.Load()
	}
}

// txnCatalogCheck refuses, in a transaction block, a statement on a table
// whose rows moved (distributed, made a reference table) after the block's
// first statement: under REPEATABLE READ or SERIALIZABLE its snapshot
// would not see the rows in their new place, where PostgreSQL's would see
// them in the table (found by an adversary: single-row reads found no
// row). Under READ COMMITTED it would; it is refused there too, as the
// coordinator does not know the level for sure, and 40001 is safe to retry.
func (ss *session) txnCatalogCheck(p *planner.Plan) error {
	old := ss.txSnap
	if old == nil || p.Kind() == planner.KindDefault {
		return nil
	}
	cur := ss.srv.catalog.Load()
	if cur == old || cur.Version == old.Version {
		return nil
	}
	for _, t := range p.Tables {
		// A distributed table's shards that moved, split or were made
		// anew since are snapshotCheck's (a split of the first shard
		// is not a distribution).
		now, then := cur.Shards[t], old.Shards[t]
		tb := cur.Tables[t]
		if len(now) > 0 && (len(then) == 0 || tb != nil && tb.Kind == metadata.Reference && then[0].ID != now[0].ID) {
			return pgerr.New("40001", "table %s was distributed after this transaction began; its rows are not where the transaction's snapshot would see them", t).
				WithHint("Retry the transaction.")
		}
	}
	return nil
}
