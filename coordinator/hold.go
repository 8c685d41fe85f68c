package coordinator

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/planner"
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
// source: it may hold locks there that the move waits for, and its
// transaction keeps its statements where its earlier ones ran (the move
// waits for the transaction to end before the source's shards go). A
// statement waits at most holdMaxWait in all, so that a wait that closes
// a cycle (the move waits for a transaction that waits for a row a held
// session changed) ends.
//
// Holds are an optimisation of latency, not the fence: a coordinator cut
// off from the fleet, or a statement that passed the check a moment
// before the hold came, meets the source's lock and the drop as before.

// holdPrefix begins a hold's fence key ("\x00hold w <ids> <tables>",
// r for a hold of reads too); a table's name cannot begin with a NUL.
const holdPrefix = "\x00hold "

// holdLease is how long a hold lasts unless renewed (the mover renews it
// every holdLease/3, see leaseFleet).
const holdLease = 10 * time.Second

// holdMaxWait bounds a statement's wait for holds.
const holdMaxWait = 5 * time.Second

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
// tables, whether it holds reads too (else only statements that write or
// lock rows), until when it lasts, and done, closed when it is lifted.
type hold struct {
	ids    []int64
	tables []string
	reads  bool
	until  time.Time
	done   chan struct{}
}

// holdKey is the fence key of a hold of shard ids of tables.
func holdKey(ids []int64, tables []string, reads bool) string {
	var b strings.Builder
	b.WriteString(holdPrefix)
	if reads {
		b.WriteString("r ")
	} else {
		b.WriteString("w ")
	}
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(id, 10))
	}
	b.WriteByte(' ')
	b.WriteString(strings.Join(tables, ","))
	return b.String()
}

// parseHoldKey reads a holdKey (ok false for any other key).
func parseHoldKey(key string) (h *hold, ok bool) {
	rest, found := strings.CutPrefix(key, holdPrefix)
	if !found {
		return nil, false
	}
	mode, rest, _ := strings.Cut(rest, " ")
	idText, tableText, found := strings.Cut(rest, " ")
	if mode != "r" && mode != "w" || !found || idText == "" || tableText == "" {
		return nil, false
	}
	h = &hold{reads: mode == "r", tables: strings.Split(tableText, ",")}
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
func (s *Server) hold(key string, token uint64, lease time.Duration) {
	x, ok := parseHoldKey(key)
	if !ok {
		return
	}
	h := &s.holds
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.by == nil {
		h.by = map[uint64]*hold{}
	}
	if old := h.by[token]; old != nil {
		old.until = time.Now().Add(lease)
		return
	}
	x.until, x.done = time.Now().Add(lease), make(chan struct{})
	h.by[token] = x
	h.n.Store(int32(len(h.by)))
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

// holding is the hold, not lapsed, that keeps a statement (a read only if
// readOnly) on shard id (id > 0) or on any shard of tables (id 0) from a
// session whose transaction reached the shards touched and the tables
// touchedAll: when it ends (done closed) or lapses (until); ok false when
// there is none.
func (s *Server) holding(readOnly bool, id int64, tables []string, touched []int64, touchedAll []string) (done <-chan struct{}, until time.Time, ok bool) {
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
		if readOnly && !x.reads {
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
func (ss *session) awaitHold(readOnly bool, id int64, tables []string) (bool, error) {
	s := ss.srv
	if s.holds.n.Load() == 0 {
		return false, nil
	}
	done, until, held := s.holding(readOnly, id, tables, ss.touched, ss.touchedAll)
	if !held {
		return false, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ss.waitCancel.Store(&cancel)
	defer ss.waitCancel.Store(nil)
	began := time.Now()
	limit := time.NewTimer(holdMaxWait)
	defer limit.Stop()
	for held {
		lapse := time.NewTimer(time.Until(until))
		select {
		case <-done:
		case <-lapse.C:
		case <-limit.C:
			held = false
		case <-ctx.Done():
			lapse.Stop()
			return true, pgerr.New(pgerr.QueryCanceled, "canceling statement due to user request")
		}
		lapse.Stop()
		if held {
			done, until, held = s.holding(readOnly, id, tables, ss.touched, ss.touchedAll)
		}
	}
	s.metrics.holdWaits.Inc()
	s.metrics.holdSeconds.Add(time.Since(began).Seconds())
	if s.stopping.Load() || ss.terminated.Load() {
		return true, adminShutdown()
	}
	return true, nil
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
func (ss *session) routeHeld(p *planner.Plan, hash int32) (target, error) {
	tgt, err := ss.srv.route(p, hash, ss.heldNode(), ss.pid)
	if err != nil || tgt.shard == 0 {
		return tgt, err
	}
	waited, err := ss.awaitHold(p.ReadOnly, tgt.shard, nil)
	if err != nil {
		return target{}, err
	}
	if waited {
		if tgt, err = ss.srv.route(p, hash, ss.heldNode(), ss.pid); err != nil {
			return tgt, err
		}
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
	waited, err := ss.awaitHold(p.ReadOnly, 0, p.Tables)
	if err == nil {
		ss.touch(0, p.Tables)
	}
	return waited, err
}

// holdGroup holds shard group ids of tables on this coordinator and every
// member of the fleet, for a move's cut-over (shards.MoveConfig.Hold):
// the statements that write or lock its rows, or (reads) every statement.
// release lifts it: after the move committed (done), each coordinator
// first reads the catalog the move left.
func (s *Server) holdGroup(ctx context.Context, ids []int64, tables []string, reads bool) (release func(done bool), err error) {
	release, _, err = s.leaseFleet(ctx, holdKey(ids, tables, reads), holdLease, holdGrace)
	return release, err
}
