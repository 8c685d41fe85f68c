package coordinator

import (
	"time"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/planner"
	"github.com/pgfleet/pgfleet/pooling"
)

// A session pinned by session advisory locks alone (pinClean: a migration
// tool's pg_advisory_lock, Rails' pg_try_advisory_lock) holds nothing on
// its connection but those locks: its settings are the session's, which
// every connection it checks out is given. Once it is idle, that
// connection is set aside (lockAside) and the session runs its statements
// as one that never locked, over every worker, in transaction blocks over
// several, DDL included; a statement calling an advisory lock function
// (or user code naming one) takes the connection back first (lockBack),
// as the one its locks are on, and the session is pinned by them until it
// is idle again. The locks end with the connection, closed when the
// session ends (lockEnd); a session whose connection was lost while set
// aside ends too (FATAL at its next request), as a PostgreSQL session
// whose backend was terminated does, so that its client never believes
// it holds a lock that went.

// lockAside sets the pinned connection, which holds session advisory
// locks, aside; false when it cannot be (a pool of one connection, which
// the session's next statement on that worker would wait for).
func (ss *session) lockAside() bool {
	if ss.pool.Config().Size < 2 || ss.lock.sc != nil {
		return false
	}
	if len(ss.spares) > 0 {
		ss.dropSpares()
	}
	if !asideReady(ss.sc, ss.pool) {
		return false
	}
	ss.cancelMu.Lock()
	ss.lock = txConn{node: ss.node, pool: ss.pool, sc: ss.sc}
	ss.cancelTarget.Store(nil)
	ss.sc = nil
	ss.cancelMu.Unlock()
	ss.resnap = false
	return true
}

// asideReady readies sc to wait aside, idle on the worker while the
// session works elsewhere: its idle_session_timeout, the session's or the
// role's, would end it (and the locks) where PostgreSQL's busy backend
// goes on (adversary 149). Off while aside; lockBack sets the session's
// settings again.
func asideReady(sc *pooling.ServerConn, pool *pooling.Pool) bool {
	if err := sc.Exec("SET idle_session_timeout = 0", time.Now().Add(pool.Config().ResetTimeout), nil); err != nil {
		return false
	}
	sc.ParamsKey = pooling.UnknownKey
	return true
}

// lockBack takes the connection set aside back before a statement that
// calls an advisory lock function (what names one, or DISCARD ALL: adv),
// or would pin the session (pin: a temporary table, SET ROLE, ...), runs:
// the locks it takes or releases are the ones there (a transaction lock taken
// elsewhere would wait for the session's own session lock), and a pinned
// session has one connection, as before. In a transaction block or batch
// already running on another connection a call of an advisory lock
// function is refused (0A000); a statement that pins pins that connection,
// the locks staying aside.
// The callers test ss.lock.sc first (their arguments are not free).
func (ss *session) lockBack(text string, simple, adv, discard, pin bool) error {
	if ss.lock.sc == nil || !adv && !discard && !pin {
		return nil
	}
	if ss.sc != nil || len(ss.parked) > 0 {
		if !adv && !discard {
			return nil
		}
		if ss.pinned != "" && len(ss.parked) == 0 && ss.sc.TxStatus == 'I' && !ss.inTxn() && ss.pendingBegin == "" &&
			ss.qhead == len(ss.queue) && !ss.needSync {
			// Pinned to another connection since the locks went aside
			// (a temporary table made in a block), between
			// transactions: DISCARD ALL releases the locks (their
			// connection closes) and runs on the pinned one, and a
			// simple Query of advisory unlock calls alone (constants,
			// parameters: it reads nothing of the pinned connection's,
			// no setting, and never waits) runs on theirs, and
			// lockSwapBack returns after it, its cycle ended. They
			// could not be released at all (adversary 149). Not
			// others: with the extended protocol the statements after
			// it in the batch would run there too, and a lock taken or
			// a setting read there would miss what set_config or user
			// code did on the pinned one (adversary 150: another key
			// locked, a lock_timeout ignored, a permanent table's rows
			// deleted where a temporary one shadowed it).
			if discard && simple {
				// (Released before the DISCARD ALL answers, as
				// PostgreSQL's: a closing backend lets them go a
				// moment later.)
				_ = ss.lock.sc.Exec("SELECT pg_catalog.pg_advisory_unlock_all()", time.Now().Add(ss.lock.pool.Config().ResetTimeout), nil)
				ss.lockEnd()
				return nil
			}
			if simple && adv && planner.AdvisoryUnlockOnly(text) {
				return ss.lockSwap()
			}
		}
		if ss.sc == nil || ss.sc.TxStatus != 'I' || ss.inTxn() || len(ss.parked) > 0 {
			return pgerr.New(pgerr.FeatureNotSupported,
				"advisory lock functions are not supported here: this session's advisory locks are held on another worker connection than this transaction's").
				WithHint("Call advisory lock functions outside the transaction block (a block that begins with one runs on that connection, its rows on one worker).")
		}
		if ss.pinned == "" {
			return pgerr.New(pgerr.FeatureNotSupported,
				"advisory lock functions are not supported in this pipeline: its statements run on another worker connection than this session's advisory locks").
				WithHint("Send the call in a batch of its own, after a Sync.")
		}
		return pgerr.New(pgerr.FeatureNotSupported,
			"this statement is not supported here: this session's advisory locks are held on another worker connection than the one it is pinned to (%s)", ss.pinned).
			WithHint("Release the locks in a simple query of its own (SELECT pg_advisory_unlock(...)), or with DISCARD ALL, or reconnect.")
	}
	l := ss.lock
	if err := ss.lockReady(l); err != nil {
		return err
	}
	ss.lock = txConn{}
	ss.hold(l)
	ss.pinned, ss.pinClean, ss.advisoryRan = pinAdvisory, true, true
	return nil
}

// lockReady checks that the locks' connection l is alive and brings its
// settings up to the session's, before it serves a statement.
func (ss *session) lockReady(l txConn) error {
	if !l.sc.Alive() {
		return errLocksLost(l.sc.Addr)
	}
	if l.sc.ParamsKey != ss.params.key {
		if err := ss.applySettings(l.sc, l.pool); err != nil {
			return pgerr.Fatal(pgerr.ConnectionFailure, "cannot apply the session's settings on the worker connection holding its advisory locks: %v", err).
				WithHint("Reconnect: the session's advisory locks are released.")
		}
	}
	l.sc.Defines = pooling.DefinesUnion(l.sc.Defines, ss.params.defines)
	return nil
}

// hold makes c the session's connection, which a cancel request reaches.
func (ss *session) hold(c txConn) {
	ss.cancelMu.Lock()
	ss.pool, ss.node, ss.sc = c.pool, c.node, c.sc
	ss.cancelTarget.Store(ss.sc)
	ss.cancelMu.Unlock()
	ss.noteStrings(ss.sc)
}

// lockSwap puts the session's pinned connection aside (swapped) for a
// simple Query of advisory unlock calls alone and takes the locks'
// connection in its place.
func (ss *session) lockSwap() error {
	l := ss.lock
	if !l.sc.Alive() {
		return errLocksLost(l.sc.Addr)
	}
	// (Its settings stay: an unlock reads none, and bringing them up to
	// the session's would report values to the client that the pinned
	// connection may not have.)
	ss.cancelMu.Lock()
	ss.swapped, ss.lock = txConn{node: ss.node, pool: ss.pool, sc: ss.sc}, txConn{}
	ss.pool, ss.node, ss.sc = l.pool, l.node, l.sc
	ss.cancelTarget.Store(ss.sc)
	ss.cancelMu.Unlock()
	return nil
}

// lockSwapBack ends lockSwap once the session is idle: the locks'
// connection goes aside again, or back to its pool when it holds none
// now, and the pinned connection is the session's again.
func (ss *session) lockSwapBack() {
	if ss.swapped.sc == nil || ss.sc == nil || ss.sc.TxStatus != 'I' || ss.qhead < len(ss.queue) || ss.needSync {
		return
	}
	l := txConn{node: ss.node, pool: ss.pool, sc: ss.sc}
	held, ok := advisoryLocks(l.sc, l.pool)
	switch {
	case ok && !held:
		l.sc.MarkBroken() // (closed, not pooled: nothing of it is checked)
		l.pool.Release(l.sc)
	case ok && asideReady(l.sc, l.pool):
		ss.lock = l
	default:
		// (Lost, or not to be readied: aside all the same, where the
		// next request finds it dead and ends the session, or finds
		// it alive.)
		ss.lock = l
	}
	p := ss.swapped
	ss.swapped = txConn{}
	ss.hold(p)
	ss.cancelMu.Lock()
	ss.publishTxn() // (the locks' connection, if still aside, with the pinned one)
	ss.cancelMu.Unlock()
}

// lockEnd closes the connection set aside, and its locks with it, when
// the session ends (and the pinned one lockSwap put aside).
func (ss *session) lockEnd() {
	if p := ss.swapped.sc; p != nil {
		p.MarkBroken()
		ss.swapped.pool.Release(p)
		ss.swapped = txConn{}
	}
	if ss.lock.sc == nil {
		return
	}
	ss.lock.sc.MarkBroken()
	ss.lock.pool.Release(ss.lock.sc)
	ss.lock = txConn{}
}

// errLocksLost ends a session whose advisory locks went with their
// connection while it was set aside.
func errLocksLost(addr string) error {
	return pgerr.Fatal(pgerr.AdminShutdown, "terminating connection: the worker connection (%s) holding this session's advisory locks was closed, and the locks with it", addr).
		WithHint("Reconnect and take the locks again.")
}

// discardsAll reports whether cls has a DISCARD ALL, which releases the
// session's advisory locks.
func discardsAll(cls *class) bool {
	for _, op := range cls.ops {
		if op.kind == opDiscardAll {
			return true
		}
	}
	return false
}

// lockStateIn reports whether text reads the backend's own locks or
// identity (pg_locks, pg_backend_pid(): "do I hold the lock?"), which are
// the connection's set aside while it holds the session's advisory locks.
func lockStateIn(text string) bool {
	var buf [16]byte
	return !eachWord(text, func(w string) bool {
		if len(w) != len("PG_LOCKS") && len(w) != len("PG_BACKEND_PID") {
			return true
		}
		u := string(upperInto(buf[:], w))
		return u != "PG_LOCKS" && u != "PG_BACKEND_PID"
	})
}
