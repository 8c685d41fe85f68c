package coordinator

import (
	"github.com/pgfleet/pgfleet/internal/pgerr"
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
	ss.cancelMu.Lock()
	ss.lock = txConn{node: ss.node, pool: ss.pool, sc: ss.sc}
	ss.cancelTarget.Store(nil)
	ss.sc = nil
	ss.cancelMu.Unlock()
	ss.resnap = false
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
func (ss *session) lockBack(adv, pin bool) error {
	if ss.lock.sc == nil || !adv && !pin {
		return nil
	}
	if ss.sc != nil || len(ss.parked) > 0 {
		if !adv {
			return nil
		}
		return pgerr.New(pgerr.FeatureNotSupported,
			"advisory lock functions are not supported here: this session's advisory locks are held on another worker connection than this transaction's").
			WithHint("Call advisory lock functions outside the transaction block, or as its first statement after BEGIN.")
	}
	l := ss.lock
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
	ss.cancelMu.Lock()
	ss.lock = txConn{}
	ss.pool, ss.node, ss.sc = l.pool, l.node, l.sc
	ss.cancelTarget.Store(ss.sc)
	ss.cancelMu.Unlock()
	ss.noteStrings(ss.sc)
	ss.pinned, ss.pinClean, ss.advisoryRan = pinAdvisory, true, true
	return nil
}

// lockEnd closes the connection set aside, and its locks with it, when
// the session ends.
func (ss *session) lockEnd() {
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
