package coordinator

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/planner"
	"github.com/pgfleet/pgfleet/pooling"
)

// Idle-in-transaction timeouts.
//
// A session's idle_in_transaction_session_timeout (its SET, startup
// options, or the worker's default) is applied on its server connections
// like any setting, so in a transaction on one worker the worker enforces
// it, as PostgreSQL does: the client gets FATAL 25P03 (at its next
// statement: drain) and the transaction is rolled back. A transaction no
// worker has seen yet is timed by the coordinator (idleLimit).
//
// In a transaction over several workers, the connections parked while the
// client works on another worker are idle in transaction to their
// backends, which would end them (and so the transaction) although the
// client never paused. So the first time a transaction takes in a second
// worker, the coordinator reads the setting on the transaction's
// connection and turns the timer off on it and on every connection it
// takes in (set_config(..., true): for the transaction only), and enforces
// the value itself on the client connection while the transaction lasts,
// reading it again after a statement that may change it (noteIdleChange).
// The read costs one round trip on that path only, and none when the
// setting is known to be 0: the session never set it and the pool's
// default was read as 0 before. The coordinator's timer, as PostgreSQL's,
// runs only once ReadyForQuery is sent (run). Gaps: SHOW in such a
// transaction gives 0; a change undone by ROLLBACK TO, an error or the end
// of a function's SET clause leaves the worker at the coordinator's own 0,
// which is then read as the value (the session is not ended where
// PostgreSQL would end it).
//
// Config.IdleInTransactionTimeout is the coordinator's own bound, for every
// session, enforced the same way.

// idleOffSQL reads idle_in_transaction_session_timeout and turns it off for
// the current transaction.
const idleOffSQL = "SELECT pg_catalog.current_setting('idle_in_transaction_session_timeout'), " +
	"pg_catalog.set_config('idle_in_transaction_session_timeout', '0', true)"

// idleDefaults records the pools whose connections, with no SET of the
// setting, were seen with idle_in_transaction_session_timeout 0.
type idleDefaults struct{ zero sync.Map } // *pooling.Pool -> struct{}

// idleZeroKnown reports whether the session's connections from pool are
// known to have the timer off.
func (ss *session) idleZeroKnown(pool *pooling.Pool) bool {
	if planner.ContainsFold(ss.params.key, "idle_in_transaction") {
		return false
	}
	_, ok := ss.srv.idleZero.zero.Load(pool)
	return ok
}

// noteIdleSetting takes the value idleOffSQL read on a connection of pool.
func (ss *session) noteIdleSetting(pool *pooling.Pool, rows [][]string) {
	if len(rows) == 0 || len(rows[0]) == 0 {
		return
	}
	v := rows[0][0]
	if v == "0" {
		if !planner.ContainsFold(ss.params.key, "idle_in_transaction") {
			ss.srv.idleZero.zero.Store(pool, struct{}{})
		}
		return
	}
	ss.idleOff = true
	if d := pgDuration(v); d > 0 && (ss.idleTimeout == 0 || d < ss.idleTimeout) {
		ss.idleTimeout = d
	}
}

// idleTimerOff turns the timer off on the transaction's connection c before
// the transaction first takes in another worker.
func (ss *session) idleTimerOff(c txConn) error {
	if err := idleFatal(c.sc); err != nil {
		return err // the worker's idle-in-transaction timeout ended it
	}
	if ss.idleZeroKnown(c.pool) {
		return nil
	}
	rows, err := c.sc.Query(idleOffSQL, time.Now().Add(c.pool.Config().ResetTimeout))
	if err != nil {
		return err
	}
	ss.noteIdleSetting(c.pool, rows)
	return nil
}

// idleLimit is how long the session may wait for its client inside a
// transaction (0: no limit).
func (ss *session) idleLimit() time.Duration {
	d := ss.srv.cfg.IdleInTransactionTimeout
	if ss.idleTimeout > 0 && (d == 0 || ss.idleTimeout < d) {
		d = ss.idleTimeout
	}
	if t := ss.params.idleTxn; t > 0 && ss.sc == nil && len(ss.parked) == 0 && (d == 0 || t < d) {
		// A transaction no worker has seen yet (its BEGIN waits for its
		// first statement) has no backend to time it: the coordinator
		// does, with the session's value where its SET or startup packet
		// says it exactly. Once a worker has the transaction, that
		// worker's value counts (a SET LOCAL may have changed it), and
		// the worker's FATAL 25P03 reaches the client at its next
		// statement (drain).
		d = t
	}
	return d
}

// idleSetting is the session's idle_in_transaction_session_timeout where
// its SET or its startup packet says it exactly, 0 when off or not known
// so (from the server's defaults, or in a form this does not read).
func idleSetting(p *sessionParams) time.Duration {
	if v, ok := p.value("idle_in_transaction_session_timeout"); ok {
		return exactDuration(v)
	}
	return 0
}

// exactDuration reads a millisecond setting's value as PostgreSQL does,
// for the forms it reads the same way: 0, or a decimal integer without a
// leading zero (PostgreSQL reads 010 as octal and 0x10 as hex) and an
// optional unit of ms, s, min, h or d. Anything else is 0: not known.
func exactDuration(v string) time.Duration {
	v = strings.TrimSpace(v)
	i := 0
	for i < len(v) && v[i] >= '0' && v[i] <= '9' {
		i++
	}
	if i == 0 || v[0] == '0' && len(v) > 1 {
		return 0
	}
	n, err := strconv.ParseInt(v[:i], 10, 32)
	if err != nil {
		return 0
	}
	unit, ok := map[string]time.Duration{"": time.Millisecond, "ms": time.Millisecond, "s": time.Second,
		"min": time.Minute, "h": time.Hour, "d": 24 * time.Hour}[strings.TrimSpace(v[i:])]
	if !ok {
		return 0
	}
	return time.Duration(n) * unit
}

// noteIdleChange notes a statement that may change the setting while the
// coordinator enforces it (idleOff): one naming it (SET, SET LOCAL, RESET,
// set_config), a RESET ALL, or one calling user code, which may call
// set_config. The value is then read again (recheckIdle) before the
// session next waits for its client: PostgreSQL times the transaction
// with the value in force when the backend goes idle (an adversary found
// a transaction over two workers that turned its own timeout off ended
// with 25P03 all the same).
func (ss *session) noteIdleChange(text string, cls *class) {
	if !ss.idleOff || ss.idleRecheck {
		return
	}
	if cls.verify || planner.ContainsFold(text, "idle_in_transaction") {
		ss.idleRecheck = true
		return
	}
	for _, op := range cls.ops {
		if op.kind == opResetAll {
			ss.idleRecheck = true
		}
	}
}

// recheckIdle reads the setting on the connection the transaction's last
// statement ran on, turns the timer off there again, and takes the value
// as the one to enforce. In a failed transaction nothing can be read, and
// the value stays.
func (ss *session) recheckIdle() {
	ss.idleRecheck = false
	if !ss.idleOff || ss.sc == nil || ss.sc.TxStatus != 'T' {
		return
	}
	rows, err := ss.sc.Query(idleOffSQL, time.Now().Add(ss.pool.Config().ResetTimeout))
	if err != nil || len(rows) != 1 || len(rows[0]) == 0 {
		return // a lost connection is found by the next statement
	}
	ss.idleTimeout = pgDuration(rows[0][0])
}

func idleInTransactionTimeout() error {
	return pgerr.Fatal(pgerr.IdleInTransactionTimeout, "terminating connection due to idle-in-transaction timeout")
}

// pgDuration reads a time setting as current_setting() gives it: a number
// and a unit (ms, s, min, h, d; none: ms). 0 when it cannot.
func pgDuration(v string) time.Duration {
	i := 0
	for i < len(v) && (v[i] >= '0' && v[i] <= '9') {
		i++
	}
	n, err := strconv.ParseInt(v[:i], 10, 64)
	if err != nil {
		return 0
	}
	unit := map[string]time.Duration{"": time.Millisecond, "ms": time.Millisecond, "s": time.Second,
		"min": time.Minute, "h": time.Hour, "d": 24 * time.Hour}[strings.TrimSpace(v[i:])]
	return time.Duration(n) * unit
}
