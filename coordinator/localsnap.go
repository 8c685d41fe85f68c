package coordinator

import (
	"strings"

	"github.com/pgfleet/pgfleet/executor"
)

// A state snapshot taken in a transaction block after SET LOCAL (or a
// set_config(..., true), setlocal.go) shows the block's values of those
// settings, and SET LOCAL ROLE's current_user; after the block commits
// they are gone, so the comparison at release found a change and pinned
// the session for good although the user code changed nothing
// (PostgREST's RPC: a function called after set_config('role', ...,
// true); `BEGIN; SET LOCAL work_mem = '8MB'; SELECT f(); COMMIT`).
// localsAfterCommit takes those settings out of the comparison only where
// their values now are what the session's own are: the connection is
// asked, in a transaction rolled back, for its state with each of them set
// to the session's value (its SET, its startup value, or the default),
// and a setting user code changed for the session still differs.

// snapTxn notes, as a snapshot is taken, whether it is taken in a
// transaction block (stateTxn) and what the block's SET LOCALs had set by
// then (stateLocals).
func (ss *session) snapTxn() {
	ss.stateTxn = ss.sc.TxStatus == 'T'
	ss.stateLocals = ss.stateLocals[:0]
	if ss.stateTxn {
		ss.stateLocals = ss.blockLocals(ss.stateLocals)
	}
}

// blockLocals appends the names the block's SET LOCALs set so far (txLog:
// SET LOCAL name, SET LOCAL ROLE, set_config(name, value, true)), custom
// ones left out (the state read reads those by name, placeholders.go).
func (ss *session) blockLocals(names []string) []string {
	for _, op := range ss.txLog {
		if op.kind == opNone && op.name != "" && !custom(op.name) && !slicesContains(names, op.name) {
			names = append(names, op.name)
		}
	}
	return names
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// localRestore is the SQL that sets a setting back to the session's own
// value, in the transaction localsAfterCommit rolls back: ROLE to the
// session's (a session that SET ROLE is pinned), a setting to the
// session's SET or startup value, or to its default.
func (ss *session) localRestore(name string) string {
	if name == "role" {
		return "RESET ROLE"
	}
	if set, ok := ss.params.set[name]; ok {
		return set
	}
	if v, ok := ss.params.startupVal[name]; ok {
		return setSQL(name, v)
	}
	return "RESET " + quoteIdent(name)
}

// localsAfterCommit returns the state read rows (the connection's state
// after the block committed) with the settings the block had SET LOCAL
// when the snapshot was taken given the snapshot's values, when the
// connection holds the session's own values for them now; rows unchanged
// otherwise (the comparison then finds the change, as before).
func (ss *session) localsAfterCommit(rows [][]*string, base [][]byte) [][]*string {
	if len(rows) != 1 || len(rows[0]) != 2 || rows[0][0] == nil || rows[0][1] == nil || base[0] == nil || base[1] == nil {
		return rows
	}
	var q strings.Builder
	q.WriteString("BEGIN")
	role := false
	for _, n := range ss.stateLocals {
		role = role || n == "role"
		q.WriteString("\n; " + ss.localRestore(n))
	}
	q.WriteString("\n; " + stateText(ss.stateNames) + "\n; ROLLBACK")
	sc := ss.sc
	restored, err := executor.QueryText(sc, q.String())
	if err != nil {
		if sc.TxStatus != 'I' {
			if _, err := executor.QueryText(sc, "ROLLBACK"); err != nil {
				sc.MarkBroken()
			}
		}
		return rows
	}
	if len(restored) == 0 || len(restored[len(restored)-1]) != 2 {
		return rows
	}
	b := restored[len(restored)-1]
	now, snap := *rows[0][0], string(base[0])
	if b[0] == nil || *b[0] != now {
		return rows // (user code set the role for the session)
	}
	if role {
		// current_user is the first field: the snapshot's is the SET
		// LOCAL ROLE's.
		i, j := strings.Index(now, " | "), strings.Index(snap, " | ")
		if i < 0 || j < 0 || now[i:] != snap[j:] {
			return rows
		}
		now = snap
	}
	// The settings: each one the SET LOCALs set must be now what it is
	// under the session's values; the others as in the snapshot.
	if b[1] == nil {
		return rows
	}
	nowHead, _, ok1 := splitCustoms(*rows[0][1], len(ss.stateNames))
	snapHead, _, ok2 := splitCustoms(string(base[1]), len(ss.stateNames))
	bHead, _, ok3 := splitCustoms(*b[1], len(ss.stateNames))
	if !ok1 || !ok2 || !ok3 {
		return rows
	}
	nowSet, okA := settingsMap(nowHead)
	snapSet, okS := settingsMap(snapHead)
	bSet, okB := settingsMap(bHead)
	if !okA || !okS || !okB {
		return rows
	}
	for _, n := range ss.stateLocals {
		if v, w := nowSet[n], bSet[n]; (v == nil) != (w == nil) || v != nil && *v != *w {
			return rows // (changed for the session since)
		}
		delete(nowSet, n)
		delete(snapSet, n)
	}
	if len(nowSet) != len(snapSet) {
		return rows
	}
	for n, v := range nowSet {
		if w, ok := snapSet[n]; !ok || *w != *v {
			return rows
		}
	}
	settings := snapHead + (*rows[0][1])[len(nowHead):]
	return [][]*string{{&now, &settings}}
}

// settingsMap reads the state read's settings head (pg_settings' name=value
// of the session's settings, as a text array) by name.
func settingsMap(head string) (map[string]*string, bool) {
	vals, ok := parseTextArray(head)
	if !ok {
		return nil, false
	}
	m := make(map[string]*string, len(vals))
	for _, v := range vals {
		if v == nil {
			return nil, false
		}
		name, _, _ := strings.Cut(*v, "=")
		m[strings.ToLower(name)] = v // (DateStyle, TimeZone: names are followed in lower case)
	}
	return m, true
}
