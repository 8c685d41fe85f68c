package coordinator

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgfleet/pgfleet/executor"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
	"github.com/pgfleet/pgfleet/planner"
	"github.com/pgfleet/pgfleet/pooling"
)

// Holds keep statements off a shard group while a move cuts it over.
// During the cut-over the source's shards are locked and then dropped; a
// statement that reaches them then fails with 40001 once the move
// commits, which a request outside a transaction block survives
// (replay.go) but a statement inside one does not. So before it locks the
// source, the mover holds the group on every coordinator of the fleet
// (the fence messages of fence.go, with a key that names shards, not a
// table, and waiting for each member to confirm): a statement that would
// reach one of the group's shards waits at its coordinator until the move
// has ended and the coordinator has the catalog it left (or the hold's
// lease ran out), then is routed as that catalog says.
//
// A session whose transaction already reached the group goes on to the
// source: it holds locks there that the move waits for (the move's lock
// is the drop's, ACCESS EXCLUSIVE, so the transaction's later statements
// are let in ahead of it), and its transaction keeps its statements where
// its earlier ones ran. A wait that closes a cycle (the move waits for a
// transaction that waits for a row a held session changed) ends when the
// move's lock wait times out (10 s: the move fails and lifts its hold);
// holdMaxWait bounds a wait in any case.
//
// Holds are an optimisation of latency, not the fence: a coordinator cut
// off from the fleet, or a statement that passed the check a moment
// before the hold came, meets the source's lock and the drop as before.

// holdPrefix begins a hold's fence key ("\x00hold <ids> <tables>": ids
// between commas, tables between NULs); a table's name cannot begin with a
// NUL.
const holdPrefix = "\x00hold "

// isHold reports whether a fence key is a hold's.
func isHold(key string) bool { return strings.HasPrefix(key, holdPrefix) }

// holdLease is how long a hold lasts unless renewed (the mover renews it
// every holdLease/3, see leaseFleet).
const holdLease = 10 * time.Second

// holdMaxWait bounds a statement's wait for holds: a block_writes move
// holds its group for its whole copy, as PostgreSQL's lock would.
const holdMaxWait = 2 * time.Minute

// holdGrace is how long a mover waits after every member confirmed its
// hold before it locks the source: a statement routed just before the
// hold came is given a moment to reach the worker and run.
const holdGrace = 20 * time.Millisecond

// holds are the shard groups held on this coordinator, by their movers'
// tokens.
type holds struct {
	mu sync.Mutex
	by map[uint64]*hold
	n  atomic.Int32 // len(by): the fast path reads only this
}

// hold is one mover's hold of a shard group: its shard ids (sorted) and
// tables, until when it lasts, and done, closed when it is lifted.
type hold struct {
	ids    []int64
	tables []string
	until  time.Time
	done   chan struct{}
}

// holdKey is the fence key of a hold of shard ids of tables.
func holdKey(ids []int64, tables []string) string {
	var b strings.Builder
	b.WriteString(holdPrefix)
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(id, 10))
	}
	b.WriteByte(' ')
	b.WriteString(strings.Join(tables, "\x00")) // (a name may hold commas and spaces, not a NUL)
	return b.String()
}

// parseHoldKey reads a holdKey (ok false for any other key).
func parseHoldKey(key string) (h *hold, ok bool) {
	rest, found := strings.CutPrefix(key, holdPrefix)
	if !found {
		return nil, false
	}
	idText, tableText, found := strings.Cut(rest, " ")
	if !found || idText == "" || tableText == "" {
		return nil, false
	}
	h = &hold{tables: strings.Split(tableText, "\x00")}
	for _, f := range strings.Split(idText, ",") {
		id, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, false
		}
		h.ids = append(h.ids, id)
	}
	slices.Sort(h.ids)
	return h, true
}

// hold holds a shard group for lease (token: the mover's), or renews it.
// A new hold returns wait: until the statements that passed a hold check
// before it are done (drainFlight).
func (s *Server) hold(key string, token uint64, lease time.Duration) (wait func()) {
	x, ok := parseHoldKey(key)
	if !ok {
		return nil
	}
	h := &s.holds
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.by == nil {
		h.by = map[uint64]*hold{}
	}
	if old := h.by[token]; old != nil {
		old.until = time.Now().Add(lease)
		return nil
	}
	x.until, x.done = time.Now().Add(lease), make(chan struct{})
	h.by[token] = x
	h.n.Store(int32(len(h.by)))
	return s.drainFlight
}

// Statements in flight. A statement checks for holds after routing, and
// then has work to do before it reaches a worker (a pooled connection to
// wait for, a multi-shard run's checks); a hold that came meanwhile would
// not keep it from the cut-over (found under load: 40001). So a session
// enters the flight before its check and leaves it when it next waits for
// its client (or waits at a hold), and a new hold, before it is
// confirmed, waits for the statements that entered before it: flight
// counts them by the parity of the epoch they entered in, and a hold
// advances the epoch and waits for the old parity's count to drop to zero
// (holdDrain at most: a long statement of another group delays the
// cut-over that much, not longer).
type flight struct {
	epoch atomic.Uint64
	n     [2]atomic.Int64
}

// holdDrain bounds a new hold's wait for the statements in flight.
const holdDrain = 2 * time.Second

// enterFlight enters the session's request into the flight (once): a hold
// that comes after it waits for it, or the check that follows sees the
// hold.
func (ss *session) enterFlight() {
	if ss.flightSlot != 0 {
		return
	}
	f := &ss.srv.flight
	for {
		e := f.epoch.Load()
		f.n[e&1].Add(1)
		if f.epoch.Load() == e {
			ss.flightSlot = int8(e&1) + 1
			return
		}
		f.n[e&1].Add(-1) // a hold advanced the epoch meanwhile: again
	}
}

// leaveFlight takes the session's request out of the flight.
func (ss *session) leaveFlight() {
	if ss.flightSlot != 0 {
		ss.srv.flight.n[ss.flightSlot-1].Add(-1)
		ss.flightSlot = 0
	}
}

// drainFlight advances the flight's epoch and waits until the statements
// that entered before are done, holdDrain at most.
func (s *Server) drainFlight() {
	old := (s.flight.epoch.Add(1) - 1) & 1
	for deadline := time.Now().Add(holdDrain); s.flight.n[old].Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
}

// unhold lifts the hold of token.
func (s *Server) unhold(token uint64) {
	h := &s.holds
	h.mu.Lock()
	defer h.mu.Unlock()
	if x := h.by[token]; x != nil {
		close(x.done)
		delete(h.by, token)
		h.n.Store(int32(len(h.by)))
	}
}

// holding is the hold, not lapsed, that keeps a statement on shard id (id
// > 0) or on any shard of tables (id 0) from a session whose transaction
// reached the shards touched and the tables touchedAll: when it ends (done
// closed) or lapses (until); ok false when there is none.
func (s *Server) holding(id int64, tables []string, touched []int64, touchedAll []string) (done <-chan struct{}, until time.Time, ok bool) {
	h := &s.holds
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	for token, x := range h.by {
		if now.After(x.until) {
			close(x.done)
			delete(h.by, token)
			h.n.Store(int32(len(h.by)))
			continue
		}
		if id > 0 {
			if _, ok := slices.BinarySearch(x.ids, id); !ok {
				continue
			}
		} else if !slices.ContainsFunc(tables, func(t string) bool { return slices.Contains(x.tables, t) }) {
			continue
		}
		if slices.ContainsFunc(touched, func(t int64) bool { _, ok := slices.BinarySearch(x.ids, t); return ok }) ||
			slices.ContainsFunc(touchedAll, func(t string) bool { return slices.Contains(x.tables, t) }) {
			continue // the transaction is there already: it goes on
		}
		return x.done, x.until, true
	}
	return nil, time.Time{}, false
}

// awaitHold waits while shard id (id > 0), or any shard of tables (id 0),
// is held for the statement (see above), and reports whether it waited:
// the caller routes by the catalog again. A cancel request ends the wait
// with 57014.
func (ss *session) awaitHold(id int64, tables []string) (bool, error) {
	s := ss.srv
	ss.enterFlight()
	if s.holds.n.Load() == 0 {
		return false, nil
	}
	done, until, held := s.holding(id, tables, ss.touched, ss.touchedAll)
	if !held {
		return false, nil
	}
	// A held statement is not in flight: the next hold need not wait for
	// it (it is routed again after the wait).
	ss.leaveFlight()
	defer ss.enterFlight()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ss.waitCancel.Store(&cancel)
	defer ss.waitCancel.Store(nil)
	began := time.Now()
	// The session's statement_timeout or lock_timeout ends the wait as it
	// would end a wait for a lock (found by an adversary: a statement
	// with a 500 ms timeout waited out a 6.7 s cut-over).
	wait, timeout := ss.holdTimeout()
	limit := time.NewTimer(wait)
	defer limit.Stop()
	// Shutdown and pg_terminate_backend are looked for meanwhile.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for held {
		lapse := time.NewTimer(time.Until(until))
		select {
		case <-done:
		case <-lapse.C:
		case <-tick.C:
			if s.stopping.Load() || ss.terminated.Load() {
				lapse.Stop()
				return true, adminShutdown()
			}
			lapse.Stop()
			continue
		case <-limit.C:
			if timeout != nil {
				lapse.Stop()
				return true, timeout
			}
			held = false
		case <-ctx.Done():
			lapse.Stop()
			return true, pgerr.New(pgerr.QueryCanceled, "canceling statement due to user request")
		}
		lapse.Stop()
		if held {
			done, until, held = s.holding(id, tables, ss.touched, ss.touchedAll)
		}
	}
	s.metrics.holdWaits.Inc()
	s.metrics.holdSeconds.Add(time.Since(began).Seconds())
	if s.stopping.Load() || ss.terminated.Load() {
		return true, adminShutdown()
	}
	return true, nil
}

// holdTimeout is how long a statement may wait at a hold: the session's
// statement_timeout or lock_timeout, the smaller one set, with the error
// PostgreSQL gives when it ends a lock wait; else holdMaxWait (no error:
// the statement then goes on). The settings are read from the session's
// SET statements and startup options (not SET LOCAL, set_config or a
// role's defaults, which only the worker knows).
func (ss *session) holdTimeout() (time.Duration, error) {
	wait, timeout := holdMaxWait, error(nil)
	for _, name := range []string{"statement_timeout", "lock_timeout"} {
		v, ok := ss.params.value(name)
		if d := pgDuration(v); ok && d > 0 && d < wait {
			wait = d
			if name == "statement_timeout" {
				timeout = pgerr.New(pgerr.QueryCanceled, "canceling statement due to statement timeout")
			} else {
				timeout = pgerr.New("55P03", "canceling statement due to lock timeout")
			}
		}
	}
	return wait, timeout
}

// value is a setting's value as the session's SET (read by setValue) or
// its startup packet gives it, ok false when neither does.
func (p *sessionParams) value(name string) (string, bool) {
	if sql, set := p.set[name]; set {
		return setValue(sql, name)
	}
	v, ok := p.startupVal[name]
	return v, ok
}

// setValue is the value a SET statement of setting name gives ("SET
// statement_timeout = 500", "set lock_timeout to '1s'"), ok false when it
// cannot be read.
func setValue(sql, name string) (string, bool) {
	i := planner.IndexFold(sql, name)
	if i < 0 {
		return "", false
	}
	rest := strings.TrimSpace(sql[i+len(name):])
	switch {
	case strings.HasPrefix(rest, "="):
		rest = rest[1:]
	case len(rest) > 2 && strings.EqualFold(rest[:2], "to") && (rest[2] == ' ' || rest[2] == '\''):
		rest = rest[2:]
	default:
		return "", false
	}
	rest = strings.Trim(strings.TrimSpace(strings.TrimRight(rest, "; \t\n")), "'")
	return rest, rest != ""
}

// touch notes that the session's transaction reached shard id, or (id 0)
// every shard of tables; the notes are forgotten when the session is
// outside a transaction again (serve).
func (ss *session) touch(id int64, tables []string) {
	if id > 0 {
		if !slices.Contains(ss.touched, id) {
			ss.touched = append(ss.touched, id)
		}
		return
	}
	for _, t := range tables {
		if !slices.Contains(ss.touchedAll, t) {
			ss.touchedAll = append(ss.touchedAll, t)
		}
	}
}

// routeHeld routes a plan (Server.route), first waiting while a cut-over
// holds its shard; the session's transaction is noted as reaching it.
// After a wait the plan may be of another shard count (a split): replan
// makes it again from the catalog and gives its hash.
func (ss *session) routeHeld(p *planner.Plan, hash int32, replan func() (*planner.Plan, int32, error)) (target, error) {
	tgt, err := ss.srv.route(p, hash, ss.heldNode(), ss.pid)
	if err != nil || tgt.shard == 0 {
		return tgt, err
	}
	waited, err := ss.awaitHold(tgt.shard, nil)
	if err != nil {
		return target{}, err
	}
	if waited {
		tgt, err = ss.srv.route(p, hash, ss.heldNode(), ss.pid)
		if err == errCatalogMoved {
			if p, hash, err = replan(); err == nil {
				tgt, err = ss.srv.route(p, hash, ss.heldNode(), ss.pid)
			}
		}
		if err != nil {
			return target{}, err
		}
	}
	if err := ss.snapshotCheck([]string{p.DistTable()}, tgt.shard); err != nil {
		return target{}, err
	}
	ss.touch(tgt.shard, nil)
	return tgt, nil
}

// awaitShards waits, before a statement over several shards of
// distributed tables (a multi-shard read or write, a multi-row INSERT,
// COPY) reaches any, while a cut-over holds one of them, and reports
// whether it waited (the caller plans again: such a plan names the nodes);
// the session's transaction is noted as reaching every shard of its
// tables.
func (ss *session) awaitShards(p *planner.Plan) (bool, error) {
	switch p.Root.(type) {
	case *planner.Scatter, *planner.MultiShardWrite, *planner.InsertSplit, *planner.CopyIn, *planner.CopyOut:
	default:
		return false, nil
	}
	waited, err := ss.awaitHold(0, p.Tables)
	if err != nil || p.ReadOnly {
		// A multi-shard read in a block runs under READ COMMITTED (see
		// txnCheck) on connections beside the transaction's, and leaves
		// no lock to note (found by an adversary: a later statement of the
		// block went on to the source and met the drop).
		return waited, err
	}
	if err := ss.snapshotCheck(p.Tables, 0); err != nil {
		return waited, err
	}
	ss.touch(0, p.Tables)
	return waited, nil
}

// touchMark is how much of session.touched and touchedAll a savepoint
// found.
type touchMark struct {
	name       string
	touched    int
	touchedAll int
}

// touchSavepoint keeps the transaction's reach in step with a savepoint
// statement: ROLLBACK TO lets go the locks taken since the savepoint, so
// the shards reached since are forgotten (a hold keeps them again; found
// by an adversary: the block went on to the source and met the drop),
// and those reached before it are kept (forgetting them stalled a move
// that waited for the block's lock while the block waited at the hold).
func (ss *session) touchSavepoint(o paramOp) {
	last := func() int {
		for i := len(ss.touchMarks) - 1; i >= 0; i-- {
			if ss.touchMarks[i].name == o.name {
				return i
			}
		}
		return -1
	}
	switch o.kind {
	case opSavepoint:
		ss.touchMarks = append(ss.touchMarks, touchMark{o.name, len(ss.touched), len(ss.touchedAll)})
	case opRelease:
		if i := last(); i >= 0 {
			ss.touchMarks = ss.touchMarks[:i]
		}
	case opRollbackTo:
		if i := last(); i >= 0 {
			m := ss.touchMarks[i]
			ss.touched, ss.touchedAll = ss.touched[:m.touched], ss.touchedAll[:m.touchedAll]
			ss.touchMarks = ss.touchMarks[:i+1] // the savepoint stays
		} else {
			ss.touched, ss.touchedAll = ss.touched[:0], ss.touchedAll[:0]
		}
	}
}

// holdFleet holds shard group ids of tables on this coordinator and every
// member of the fleet, for a move's or split's cut-over (shards.HoldFunc).
// release lifts it: after the change committed (done), each coordinator
// first reads the catalog it left.
func (s *Server) holdFleet(ctx context.Context, ids []int64, tables []string) (release func(done bool), err error) {
	release, _, err = s.leaseFleet(ctx, holdKey(ids, tables), holdLease, holdGrace)
	return release, err
}

// arrivedOn is where the shards of table (id: that shard only; 0: every
// shard) are in cur but were not in old, the catalog when the session's
// transaction block began: nodes a move or split brought them to.
func arrivedOn(old, cur *metadata.Snapshot, table string, id int64) []int32 {
	was := map[int64]int32{}
	for _, sh := range old.Shards[table] {
		if len(sh.Nodes) > 0 {
			was[sh.ID] = sh.Nodes[0]
		}
	}
	var nodes []int32
	for _, sh := range cur.Shards[table] {
		if id != 0 && sh.ID != id || len(sh.Nodes) == 0 {
			continue
		}
		if n, ok := was[sh.ID]; (!ok || n != sh.Nodes[0]) && !slices.Contains(nodes, sh.Nodes[0]) {
			nodes = append(nodes, sh.Nodes[0])
		}
	}
	return nodes
}

// snapshotCheck refuses, in a transaction block, a statement on shards
// that a move or split brought, since the block began, to a node the
// transaction already reached: under REPEATABLE READ or SERIALIZABLE its
// snapshot there was taken before the rows arrived and would not see them
// (found by an adversary: a read found no row, an UPDATE changed none,
// and the block committed). Under READ COMMITTED each statement reads
// anew; the worker says which level the transaction has.
func (ss *session) snapshotCheck(tables []string, id int64) error {
	old := ss.txSnap
	if old == nil || !ss.inTxn() {
		return nil
	}
	cur := ss.srv.catalog.Load()
	if cur == old || cur.Version == old.Version || len(ss.parked) == 0 && ss.sc == nil {
		return nil
	}
	for _, t := range tables {
		for _, n := range arrivedOn(old, cur, t, id) {
			var sc *pooling.ServerConn
			usable := true
			switch i := ss.parkedOn(n); {
			case ss.sc != nil && ss.node == n:
				sc = ss.sc
				usable = !ss.needSync && len(sc.Buf()) == 0
			case i >= 0:
				sc = ss.parked[i].sc
				usable = len(sc.Buf()) == 0
			}
			if sc == nil || sc.TxStatus == 'E' {
				continue // its first statement there, or a failed transaction (25P02 follows)
			}
			if usable {
				rows, err := executor.QueryText(sc, "SELECT pg_catalog.current_setting('transaction_isolation')")
				if err != nil {
					return err
				}
				if len(rows) == 1 && len(rows[0]) == 1 && rows[0][0] != nil && *rows[0][0] == "read committed" {
					continue
				}
			}
			return pgerr.New(pgerr.SerializationFailure, "a shard of %s came to worker %s after this transaction's snapshot there was taken; the snapshot does not see its rows", t, ss.srv.nodeAddr(n)).
				WithHint("Retry the transaction.")
		}
	}
	return nil
}
