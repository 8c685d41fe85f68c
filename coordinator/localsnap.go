package coordinator

import (
	"errors"
	"maps"
	"slices"
	"strings"

	"github.com/pgfleet/pgfleet/executor"
)

// A state snapshot taken in a transaction block after SET LOCAL (or a
// set_config(..., true), setlocal.go) shows the block's values of those
// settings, and SET LOCAL ROLE's current_user, which the block's end drops.
// Compared as it was, the snapshot both pinned sessions whose user code
// changed nothing (every such block that called a function; PostgREST's
// RPC) and missed a function that made the SET LOCAL value the session's
// (set_config('work_mem', '8MB', false) after SET LOCAL work_mem = '8MB':
// the same value, which PostgreSQL keeps after COMMIT; adversary 164: a
// role dropped that way was the login user's again). localBase replaces
// those settings in the snapshot by what the connection shows for them
// under the session's own values (its SET, its startup value, else the
// default; RESET ROLE for the role), read in a transaction rolled back:
// the comparison then finds exactly what user code changed for the session.

// blockLocals appends the names the transaction's SET LOCALs set so far
// (txLog: SET LOCAL name, SET LOCAL ROLE, set_config(name, value, true);
// the log holds the SETs of the transaction, explicit or implicit, only).
// They are noted as a snapshot's row is read (stateLocals): in a pipeline
// the SET LOCALs before it are answered only then (adversary 164).
func (ss *session) blockLocals(names []string) []string {
	for _, op := range ss.txLog {
		// (Names in lower case: PostgreSQL's are; SET LOCAL "App.X"
		// is app.x, adversary 165.)
		if local := op.kind == opNone && op.name != "" || op.kind == opPlaceholder; local {
			if n := strings.ToLower(op.name); !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	return names
}

// oldGUCNames are PostgreSQL's old names of settings (guc.c's
// map_old_guc_names) and the settings they name.
var oldGUCNames = map[string]string{"sort_mem": "work_mem", "vacuum_mem": "maintenance_work_mem"}

// aliased reports whether a setting the transaction SET LOCAL is named
// otherwise in pg_settings, or the session set it under its other name
// (then which came last is not known here): SET LOCAL sort_mem is
// work_mem's row (adversary 165).
func (ss *session) aliased(name string) bool {
	if _, ok := oldGUCNames[name]; ok {
		return true
	}
	for old, n := range oldGUCNames {
		if n == name && (ss.params.set[old] != "" || ss.params.startupVal[old] != "") {
			return true
		}
	}
	return false
}

// localRestore is the SQL that sets a setting back to the session's own
// value, in the transaction localBase rolls back: ROLE to the
// session's (a session that SET ROLE is pinned), a setting to the
// session's SET or startup value, or to its default.
func (ss *session) localRestore(name string) string {
	if set, ok := ss.params.set[name]; ok {
		return set
	}
	if v, ok := ss.params.startupVal[name]; ok {
		return setSQL(name, v) // (a role too: options=-c role=alice; adversary 165)
	}
	if name == "role" {
		return "RESET ROLE"
	}
	return "RESET " + quoteIdent(name)
}

// stateFields is how many " | " a state read's first column has (its
// seven fields); a name holding one makes its fields unknown.
const stateFields = 6

// localBase returns the snapshot (base: stateHead's two columns) with the
// settings the transaction had SET LOCAL when it was taken, and the role,
// as the connection shows them under the session's own values (above);
// after a ROLLBACK (rolledBack) only the role, the settings not being
// compared then. ok false: the connection could not be asked (the caller
// counts the state as changed).
func (ss *session) localBase(base [][]byte, rolledBack bool) (out [][]byte, ok bool) {
	if base[0] == nil || base[1] == nil {
		return nil, false
	}
	var q strings.Builder
	q.WriteString("BEGIN")
	role := false
	for _, n := range ss.stateLocals {
		if ss.aliased(n) {
			return nil, false
		}
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
		return nil, false
	}
	if len(restored) == 0 || len(restored[len(restored)-1]) != 2 {
		return nil, false
	}
	b := restored[len(restored)-1]
	if b[0] == nil || b[1] == nil {
		return nil, false
	}
	first := string(base[0])
	if role {
		// current_user is the first field (and no name holds a " | ":
		// adversary 165's role "a | b" was cut in two).
		if strings.Count(*b[0], " | ") != stateFields || strings.Count(first, " | ") != stateFields {
			return nil, false
		}
		i, j := strings.Index(*b[0], " | "), strings.Index(first, " | ")
		first = (*b[0])[:i] + first[j:]
	}
	if rolledBack {
		return [][]byte{[]byte(first), base[1]}, true
	}
	names := ss.stateNames
	snapHead, snapVals, ok1 := splitCustoms(string(base[1]), len(names))
	bHead, bVals, ok2 := splitCustoms(*b[1], len(names))
	if !ok1 || !ok2 {
		return nil, false
	}
	snapSet, okS := settingsMap(snapHead)
	bSet, okB := settingsMap(bHead)
	if !okS || !okB {
		return nil, false
	}
	for _, n := range ss.stateLocals {
		if custom(n) {
			for k, m := range names {
				if strings.EqualFold(m, n) {
					snapVals[k] = bVals[k]
				}
			}
			// (An extension's setting, plpgsql.extra_warnings once the
			// module is loaded, is a pg_settings row too: adversary
			// 166's needless pin.)
		}
		delete(snapSet, n)
		if v, ok := bSet[n]; ok {
			snapSet[n] = v
		}
	}
	head := settingsText(snapSet)
	return [][]byte{[]byte(first), []byte(head + " | " + arrayText(snapVals))}, true
}

// settingsText writes a settings head (settingsMap's) in one form for
// equal sets: its entries sorted, each quoted.
func settingsText(m map[string]*string) string {
	vals := make([]*string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		vals = append(vals, m[k])
	}
	return arrayText(vals)
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

// errLocalsUnread: localBase could not read the connection (its state is
// counted as changed).
var errLocalsUnread = errors.New("the connection's state under the session's settings could not be read")

// localsCompared returns a state read's rows (the connection's state now)
// and the snapshot to compare them with, the snapshot's SET LOCALs
// replaced (localBase) and both settings columns in one form. known false:
// the connection could not be asked.
func (ss *session) localsCompared(rows [][]*string, base [][]byte, rolledBack bool) ([][]*string, [][]byte, bool) {
	if len(rows) != 1 || len(rows[0]) != 2 || rows[0][1] == nil {
		return rows, base, false
	}
	nb, ok := ss.localBase(base, rolledBack)
	if !ok {
		return rows, base, false
	}
	if rolledBack {
		return rows, nb, true // (the settings are not compared)
	}
	head, vals, ok := splitCustoms(*rows[0][1], len(ss.stateNames))
	if !ok {
		return rows, base, false
	}
	set, ok := settingsMap(head)
	if !ok {
		return rows, base, false
	}
	now := settingsText(set) + " | " + arrayText(vals)
	return [][]*string{{rows[0][0], &now}}, nb, true
}

// setsSession reports whether ops change the session's settings beyond the
// transaction (SET, RESET, RESET ALL, DISCARD ALL).
func setsSession(ops []paramOp) bool {
	for _, op := range ops {
		switch op.kind {
		case opSet, opReset, opResetAll, opSetDefault, opDiscardAll:
			return true
		}
	}
	return false
}
