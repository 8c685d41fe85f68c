package coordinator

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
	"github.com/pgfleet/pgfleet/pooling"
)

// Distributed deadlocks. Each worker's PostgreSQL breaks the cycles of
// lock waits among its own backends (40P01 after deadlock_timeout), but
// not one that runs through two workers: a transaction block waiting for
// a row on worker 1 that a second block holds, which waits on worker 2
// for a row the first holds, would wait for good. The coordinator looks
// for such cycles among its own sessions' transactions over several
// workers, every DeadlockCheck (default 1 s):
//
//   - each worker involved is asked which backends wait for a lock and for
//     which backends (pg_blocking_pids, the same relation PostgreSQL's own
//     detector reads);
//   - a backend of a session's transaction stands for that transaction,
//     any other backend for itself, and an edge goes from each waiter to
//     each backend blocking it, labelled with its worker;
//   - a strongly connected set of those that holds a session's transaction
//     and has edges on two workers or more is a distributed deadlock; the
//     youngest transaction in it (the last to take in a second worker) is
//     the victim, as Citus picks it;
//   - only a victim found on two checks in a row, in the same transaction,
//     is canceled (a cancel request to its waiting backends, under the
//     session's cancel lock, so that they are still its own), and the
//     session tells its client 40P01 "deadlock detected" where the worker
//     said 57014: the transaction block is failed, as PostgreSQL's victim's.
//
// Transactions of other coordinators (and direct clients) are backends
// like any other: a cycle through them is seen only where it closes on
// this coordinator's own transactions; otherwise lock_timeout breaks it.

const defaultDeadlockCheck = time.Second

// txnWorkers is what a session publishes of a transaction while it spans
// several workers: when it took in the second one, and its backends there.
// A session publishes its transaction block's (txw) and, apart, those of a
// statement that runs on connections lent to it on every worker (wrw: a
// multi-shard write outside a block, create_distributed_table and the
// like), which are transactions of their own on the workers.
type txnWorkers struct {
	id       int64 // the fleet's name for it, with the coordinator's
	since    time.Time
	backends []dlBackend
	// aside: the last backend holds the session's advisory locks, set
	// aside (advisorylock.go): a cycle through it and the session's
	// statement on one worker is PostgreSQL's to see but not to break.
	aside bool
}

// txnIDs numbers published transactions.
var txnIDs atomic.Int64

// dlBackend is one worker backend of a published transaction.
type dlBackend struct {
	addr   string
	pid    uint32
	secret []byte
}

// publishTxn publishes the session's transaction over several workers
// (or that it has none). It runs on the session's goroutine, under
// cancelMu, before any of its connections goes back to a pool, so that a
// detector holding cancelMu and seeing the same publication knows the
// connections are still the session's.
func (ss *session) publishTxn() {
	aside := ss.lock.sc != nil
	if len(ss.parked) == 0 && !aside || ss.sc == nil {
		if ss.txw.Load() != nil {
			ss.txw.Store(nil)
			ss.dlVictim.Store(false)
		}
		return
	}
	n := len(ss.parked) + 1
	if aside {
		n++
	}
	old := ss.txw.Load()
	if !aside && old != nil && !old.aside && len(old.backends) == n {
		// The same connections, another one current (joinWorker adds one,
		// unjoin takes the last back): nothing to publish.
		return
	}
	w := &txnWorkers{since: time.Now().Truncate(time.Microsecond), backends: make([]dlBackend, 0, n), aside: aside}
	if old != nil {
		w.id, w.since = old.id, old.since
	} else {
		w.id = txnIDs.Add(1)
	}
	w.backends = append(w.backends, dlBackend{addr: ss.sc.Addr, pid: ss.sc.PID, secret: ss.sc.Secret})
	for _, p := range ss.parked {
		w.backends = append(w.backends, dlBackend{addr: p.sc.Addr, pid: p.sc.PID, secret: p.sc.Secret})
	}
	if aside {
		l := ss.lock.sc
		w.backends = append(w.backends, dlBackend{addr: l.Addr, pid: l.PID, secret: l.Secret})
	}
	ss.txw.Store(w)
}

// publishWrites publishes (under cancelMu, as nodeConns sets
// writeConns) the connections lent to the session on several workers, or
// withdraws them (nil).
func (ss *session) publishWrites(conns map[int32]*pgx.Conn) {
	if len(conns) < 2 {
		ss.wrw.Store(nil)
		return
	}
	w := &txnWorkers{id: txnIDs.Add(1), since: time.Now().Truncate(time.Microsecond)}
	for node, c := range conns {
		pc := c.PgConn()
		w.backends = append(w.backends, dlBackend{addr: ss.srv.nodeAddr(node), pid: pc.PID(), secret: pc.SecretKey()})
	}
	ss.wrw.Store(w)
}

// unpublishTxn says the session's transaction no longer holds connections
// on several workers, before they go back to their pools.
func (ss *session) unpublishTxn() {
	ss.cancelMu.Lock()
	ss.txw.Store(nil)
	if ss.wrw.Load() == nil {
		ss.dlVictim.Store(false)
	}
	ss.cancelMu.Unlock()
}

// victimBody is a worker's ErrorResponse body as the client is told it:
// the 57014 of the detector's cancel is the deadlock's 40P01.
func (ss *session) victimBody(body []byte) []byte {
	if ss.dlVictim.Load() && errCode(body) == pgerr.QueryCanceled && ss.dlVictim.Swap(false) {
		er := deadlockError()
		b, _ := er.Encode(nil)
		return b[5:]
	}
	return body
}

// victimErr is victimBody for a decoded error.
func (ss *session) victimErr(er *pgproto3.ErrorResponse) {
	if ss.dlVictim.Load() && er.Code == pgerr.QueryCanceled && ss.dlVictim.Swap(false) {
		*er = *deadlockError()
	}
}

// deadlockError is what the victim's client is told.
func deadlockError() *pgproto3.ErrorResponse {
	e := pgerr.New(pgerr.DeadlockDetected, "deadlock detected").WithHint("Retry the transaction.")
	e.Detail = "This transaction waited for a lock on one worker held by a transaction that waited for a lock this one held on another worker; pgfleet canceled this one."
	return pgerr.Flatten(e)
}

// dlTxn is a vertex of the wait-for graph that stands for a transaction
// over several workers: one of this coordinator's (local), or one another
// coordinator shared (coord, id).
type dlTxn struct {
	since time.Time
	coord string
	id    int64
	local *txnWorkers
}

// younger orders victims: the later start, then the greater name.
func (t *dlTxn) younger(u *dlTxn) bool {
	if !t.since.Equal(u.since) {
		return t.since.After(u.since)
	}
	if t.coord != u.coord {
		return t.coord > u.coord
	}
	return t.id > u.id
}

// dlNode is a vertex of the wait-for graph: a transaction, or a backend of
// none known.
type dlNode struct {
	tx   *dlTxn
	addr string
	pid  uint32
}

// dlEdge is a wait on one worker, of backend from for backend to (pids
// there).
type dlEdge struct {
	to       dlNode
	addr     string
	from, at uint32
}

// deadlockLoop checks for distributed deadlocks until stop closes.
func (s *Server) deadlockLoop(stop <-chan struct{}) {
	t := time.NewTicker(s.cfg.DeadlockCheck)
	defer t.Stop()
	d := &detector{s: s, conns: map[string]*pgx.Conn{}, name: leaseName(s.ln.Addr().String())}
	defer d.stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			d.check()
		}
	}
}

// detector is deadlockLoop's state: connections to the workers it asks
// (held while transactions over several workers exist), whether it shares
// transactions in the metadata database now, and last check's victim.
type detector struct {
	s       *Server
	name    string // the coordinator's, in pgfleet.fleet_txns
	conns   map[string]*pgx.Conn
	shared  bool
	pending map[*txnWorkers]bool // victims found at the last check
}

func (d *detector) stop() {
	d.closeConns()
	d.share(nil)
}

func (d *detector) closeConns() {
	for addr, c := range d.conns {
		_ = c.Close(context.Background())
		delete(d.conns, addr)
	}
}

// share publishes the coordinator's transactions to the fleet (none:
// withdraws them, once).
func (d *detector) share(txns []metadata.FleetTxn) {
	st := d.s.store
	if st == nil || len(txns) == 0 && !d.shared {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := st.ShareTxns(ctx, d.name, txns); err != nil {
		d.s.log.Debug("deadlock check: sharing transactions", "err", err.Error())
		return
	}
	d.shared = len(txns) > 0
}

// check runs one search and cancels a victim of this coordinator's found
// twice in a row.
func (d *detector) check() {
	s := d.s
	// Published transactions, by their sessions: those that have spanned
	// their workers for an interval (a short one is left alone; a
	// deadlock does not end by itself).
	local := map[*txnWorkers]*session{}
	old := time.Now().Add(-s.cfg.DeadlockCheck)
	s.mu.Lock()
	for _, ss := range s.sessions {
		for _, w := range []*txnWorkers{ss.txw.Load(), ss.wrw.Load()} {
			if w != nil && w.since.Before(old) {
				local[w] = ss
			}
		}
	}
	s.mu.Unlock()
	if len(local) == 0 {
		clear(d.pending)
		d.closeConns()
		d.share(nil)
		return
	}
	var txns []*dlTxn
	var mine []metadata.FleetTxn
	for w := range local {
		txns = append(txns, &dlTxn{since: w.since, coord: d.name, id: w.id, local: w})
		ft := metadata.FleetTxn{Coordinator: d.name, Txn: w.id, Since: w.since}
		for _, b := range w.backends {
			ft.Addrs, ft.PIDs = append(ft.Addrs, b.addr), append(ft.PIDs, int32(b.pid))
		}
		mine = append(mine, ft)
	}
	// Other coordinators' transactions (as of their last checks) close
	// the cycles that run through them.
	d.share(mine)
	owner := map[dlNode]*dlTxn{} // a worker backend's transaction
	addrs := map[string]bool{}
	for _, t := range txns {
		for _, b := range t.local.backends {
			owner[dlNode{addr: b.addr, pid: b.pid}] = t
			addrs[b.addr] = true
		}
	}
	if s.store != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		others, err := s.store.FleetTxns(ctx, d.name, 3*s.cfg.DeadlockCheck+time.Second)
		cancel()
		if err != nil {
			s.log.Debug("deadlock check: reading the fleet's transactions", "err", err.Error())
		}
		for _, o := range others {
			t := &dlTxn{since: o.Since, coord: o.Coordinator, id: o.Txn}
			txns = append(txns, t)
			for i, a := range o.Addrs {
				if i < len(o.PIDs) {
					owner[dlNode{addr: a, pid: uint32(o.PIDs[i])}] = t
					addrs[a] = true
				}
			}
		}
	}
	aside := false
	for w := range local {
		aside = aside || w.aside
	}
	if len(txns) < 2 && !aside {
		// A cycle through two workers needs two transactions that span
		// them (or one whose session holds its advisory locks on a
		// connection of their own).
		clear(d.pending)
		return
	}
	node := func(addr string, pid uint32) dlNode {
		if t := owner[dlNode{addr: addr, pid: pid}]; t != nil {
			return dlNode{tx: t}
		}
		return dlNode{addr: addr, pid: pid}
	}
	graph := map[dlNode][]dlEdge{}
	waiting := map[dlNode]bool{} // backends that wait (addr, pid)
	for addr := range addrs {
		waits, err := d.waits(addr)
		if err != nil {
			s.log.Debug("deadlock check", "worker", addr, "err", err.Error())
			clear(d.pending)
			return
		}
		for pid, blockers := range waits {
			waiting[dlNode{addr: addr, pid: pid}] = true
			from := node(addr, pid)
			for _, b := range blockers {
				graph[from] = append(graph[from], dlEdge{to: node(addr, b), addr: addr, from: pid, at: b})
			}
		}
	}
	// One victim per deadlock (another coordinator's is left to it); one
	// found at the last check too is canceled, the others wait for the
	// next.
	found := map[*txnWorkers]bool{}
	for _, v := range distributedVictims(graph) {
		if w := v.local; w != nil {
			if d.pending[w] {
				d.cancel(local[w], w, waiting)
			} else {
				found[w] = true
			}
		}
	}
	d.pending = found
}

// cancel cancels victim's waiting backends of transaction w, if w is
// still its transaction.
func (d *detector) cancel(victim *session, w *txnWorkers, waiting map[dlNode]bool) {
	victim.cancelMu.Lock()
	defer victim.cancelMu.Unlock()
	if victim.txw.Load() != w && victim.wrw.Load() != w {
		return // the transaction ended or changed meanwhile
	}
	victim.dlVictim.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, b := range w.backends {
		if waiting[dlNode{addr: b.addr, pid: b.pid}] {
			if err := pooling.SendCancel(ctx, b.addr, b.pid, b.secret); err != nil {
				d.s.log.Warn("canceling a distributed deadlock's victim", "worker", b.addr, "err", err.Error())
			}
		}
	}
	d.s.log.Info("distributed deadlock: canceled the youngest transaction", "session", victim.pid)
}

// waits asks the worker at addr which backends wait for a lock, and for
// which.
func (d *detector) waits(addr string) (map[uint32][]uint32, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c := d.conns[addr]
	if c == nil {
		var err error
		if c, err = d.s.directConn(ctx, addr); err != nil {
			return nil, err
		}
		d.conns[addr] = c
	}
	rows, err := c.Query(ctx, "SELECT pid, pg_catalog.pg_blocking_pids(pid) FROM pg_catalog.pg_stat_activity WHERE wait_event_type = 'Lock'")
	if err != nil {
		_ = c.Close(context.Background())
		delete(d.conns, addr)
		return nil, err
	}
	out := map[uint32][]uint32{}
	var pid int32
	var blockers []int32
	_, err = pgx.ForEachRow(rows, []any{&pid, &blockers}, func() error {
		for _, b := range blockers {
			out[uint32(pid)] = append(out[uint32(pid)], uint32(b))
		}
		return nil
	})
	return out, err
}

// distributedVictims are, for each strongly connected part of graph that
// has waits on two workers or more (a distributed deadlock), its youngest
// transaction.
func distributedVictims(graph map[dlNode][]dlEdge) []*dlTxn {
	var victims []*dlTxn
	for _, part := range stronglyConnected(graph) {
		if len(part) < 2 {
			continue
		}
		in := map[dlNode]bool{}
		for _, n := range part {
			in[n] = true
		}
		workers := map[string]bool{}
		ends := map[*dlTxn]map[dlNode]bool{} // the backends of a transaction the cycle passes
		end := func(t *dlTxn, addr string, pid uint32) {
			if t == nil {
				return
			}
			if ends[t] == nil {
				ends[t] = map[dlNode]bool{}
			}
			ends[t][dlNode{addr: addr, pid: pid}] = true
		}
		for _, n := range part {
			for _, e := range graph[n] {
				if in[e.to] {
					workers[e.addr] = true
					end(n.tx, e.addr, e.from)
					end(e.to.tx, e.addr, e.at)
				}
			}
		}
		split := false
		for _, b := range ends {
			split = split || len(b) > 1
		}
		if len(workers) < 2 && !split {
			// PostgreSQL's own detector breaks it: one worker, and no
			// transaction's two backends there (a session's own
			// statement and the connection holding its advisory locks
			// are one backend to PostgreSQL's client, not to it).
			continue
		}
		var victim *dlTxn
		for _, n := range part {
			if n.tx != nil && (victim == nil || n.tx.younger(victim)) {
				victim = n.tx
			}
		}
		if victim != nil {
			victims = append(victims, victim)
		}
	}
	return victims
}

// stronglyConnected is Tarjan's partition of graph's vertices.
func stronglyConnected(graph map[dlNode][]dlEdge) [][]dlNode {
	index := map[dlNode]int{}
	low := map[dlNode]int{}
	on := map[dlNode]bool{}
	var stack []dlNode
	var parts [][]dlNode
	next := 0
	var visit func(v dlNode)
	visit = func(v dlNode) {
		index[v], low[v] = next, next
		next++
		stack = append(stack, v)
		on[v] = true
		for _, e := range graph[v] {
			if _, seen := index[e.to]; !seen {
				visit(e.to)
				low[v] = min(low[v], low[e.to])
			} else if on[e.to] {
				low[v] = min(low[v], index[e.to])
			}
		}
		if low[v] == index[v] {
			var part []dlNode
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				on[w] = false
				part = append(part, w)
				if w == v {
					break
				}
			}
			parts = append(parts, part)
		}
	}
	for v := range graph {
		if _, seen := index[v]; !seen {
			visit(v)
		}
	}
	return parts
}
