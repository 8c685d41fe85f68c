package coordinator

import (
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/wire"
)

// A session's startup settings are SETs on a server connection, so a RESET
// there goes to the server's default; PostgreSQL resets to the value the
// session started with. After a cycle in which such a RESET (RESET x, SET
// x TO DEFAULT, RESET ALL, DISCARD ALL) succeeded, the startup values are
// set again on the held connection before the client sees the cycle end.
// A statement after such a RESET in the same cycle would run with the
// server's default: refused.
//
// LOAD can turn a custom placeholder into an extension's setting, which
// drops or changes its value: the custom settings are read back from the
// server after it, so that other connections get what this one has.

var errResetNotLast = errMultiRefused("a statement after RESET of a setting from the connection's startup packet in the same query or pipeline is not supported",
	"Send RESET (or RESET ALL, DISCARD ALL, SET ... TO DEFAULT) as a query of its own, or Sync after it.")

// resetsStartup reports whether a statement of class c resets a setting
// the session's startup packet gave.
func (ss *session) resetsStartup(c *class) bool {
	if len(ss.params.startupVal) == 0 {
		return false
	}
	for _, op := range c.ops {
		switch op.kind {
		case opResetAll, opDiscardAll:
			return true
		case opReset, opSetDefault:
			if _, ok := ss.params.startupVal[op.name]; ok {
				return true
			}
		case opNone:
			if _, ok := ss.params.startupVal[op.name]; ok && op.dflt {
				return true
			}
		}
	}
	return false
}

// noteParamFix follows a session change as its CommandComplete arrives.
func (ss *session) noteParamFix(op paramOp) {
	switch op.kind {
	case opSet:
		if i := slicesIndex(ss.paramFix, op.name); i >= 0 {
			ss.paramFix = append(ss.paramFix[:i], ss.paramFix[i+1:]...)
		}
	case opReset, opSetDefault:
		if _, ok := ss.params.startupVal[op.name]; ok && slicesIndex(ss.paramFix, op.name) < 0 {
			ss.paramFix = append(ss.paramFix, op.name)
		}
	case opResetAll, opDiscardAll:
		ss.paramFix = ss.paramFix[:0]
		for name := range ss.params.startupVal {
			ss.paramFix = append(ss.paramFix, name)
		}
		sort.Strings(ss.paramFix)
	case opNone:
		if op.tagText == "LOAD" {
			ss.loadFix = true
		}
		if _, ok := ss.params.startupVal[op.name]; ok && op.dflt && slicesIndex(ss.paramFixLocal, op.name) < 0 {
			// SET LOCAL x TO DEFAULT: the startup value, for the
			// transaction (adversary round 15: the server's default).
			ss.paramFixLocal = append(ss.paramFixLocal, op.name)
		}
	}
}

func slicesIndex(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// fixParams runs at the end of a cycle (see above).
func (ss *session) fixParams() error {
	fix, local, load := ss.paramFix, ss.paramFixLocal, ss.loadFix
	ss.paramFix, ss.paramFixLocal, ss.loadFix = ss.paramFix[:0], ss.paramFixLocal[:0], false
	sc := ss.sc
	if sc == nil || sc.TxStatus == 'E' {
		return nil
	}
	deadline := time.Now().Add(ss.pool.Config().ResetTimeout)
	if len(fix)+len(local) > 0 {
		var b strings.Builder
		for _, name := range fix {
			b.WriteString(setSQL(name, ss.params.startupVal[name]) + ";")
		}
		for _, name := range local {
			b.WriteString(setLocalSQL(name, ss.params.startupVal[name]) + ";")
		}
		if err := sc.Exec(b.String(), deadline, ss.statusBeforeReady); err != nil {
			var pe *pgconn.PgError
			if !errors.As(err, &pe) {
				return ss.lostServer(err)
			}
			// The startup value was accepted when the session began.
			sc.MarkBroken()
			ss.srv.log.Warn("setting startup values again after RESET", "worker", sc.Addr, "err", err)
		}
	}
	if load && sc.TxStatus == 'I' {
		ss.readBackCustom()
	}
	return nil
}

// statusBeforeReady relays a ParameterStatus of a statement pgfleet ran
// after the cycle, ahead of the cycle's ReadyForQuery when that is still
// unsent.
func (ss *session) statusBeforeReady(body []byte) {
	if ss.sc != nil {
		// The held connection's report is the session's again
		// (client_encoding put back after RESET ALL).
		ss.noteStrings(ss.sc)
	}
	if !ss.ready {
		return
	}
	n := len(ss.out)
	if n >= 6 && ss.out[n-6] == 'Z' && ss.out[n-5] == 0 && ss.out[n-4] == 0 && ss.out[n-3] == 0 && ss.out[n-2] == 5 {
		z := [6]byte(ss.out[n-6:])
		ss.out = wire.AppendFrame(ss.out[:n-6], 'S', body)
		ss.out = append(ss.out, z[:]...)
		return
	}
	ss.out = wire.AppendFrame(ss.out, 'S', body)
}

// readBackCustom records the custom settings as the held connection has
// them after LOAD.
func (ss *session) readBackCustom() {
	var names []string
	for name := range ss.params.set {
		if custom(name) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return
	}
	sort.Strings(names)
	lits := make([]string, len(names))
	for i, n := range names {
		lits[i] = quoteLiteral(n)
	}
	q := "SELECT pg_catalog.current_setting(n, true) IS NULL, pg_catalog.current_setting(n, true) FROM unnest(ARRAY[" +
		strings.Join(lits, ", ") + "]::text[]) WITH ORDINALITY AS u(n, i) ORDER BY i"
	rows, err := ss.sc.Query(q, time.Now().Add(ss.pool.Config().ResetTimeout))
	if err != nil || len(rows) != len(names) {
		ss.sc.ParamsKey = "\x00unknown"
		ss.srv.log.Warn("reading custom settings back after LOAD", "worker", ss.sc.Addr, "err", err)
		return
	}
	for i, name := range names {
		if rows[i][0] == "t" {
			delete(ss.params.set, name)
		} else {
			ss.params.set[name] = setSQL(name, rows[i][1])
		}
	}
	ss.params.rebuild()
	ss.sc.ParamsKey = ss.params.key
}
