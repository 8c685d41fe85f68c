package coordinator

import (
	"slices"
	"strings"

	"github.com/pgfleet/pgfleet/pooling"
)

// Custom settings user code sets.
//
// A function calling set_config('app.tenant', v, false) sets the name for
// the session; one calling set_config('app.tenant', v, true) for its
// transaction, after which the backend keeps the name defined and empty,
// as it does for any placeholder. The state read sees either (by name:
// stateNamesOf). Pinning the session would keep a connection per client of
// a workload that sets its tenant so, and refuse its multi-shard reads; so
// a change of custom settings only is taken into the session instead, as
// if the client had made it with SET (a value: set_config on every
// connection it uses next; defined and empty: the placeholder), and onto
// the connection (its Defines, so no client without the name is served
// there). The settings PostgreSQL lists (pg_settings) changed by user code
// still pin.

// customChange is a custom setting whose value differs between a state
// read's snapshot (was) and now (nil: not defined).
type customChange struct {
	name     string
	was, now *string
}

// customChanges compares the settings column of a state read (now) with
// the snapshot's (base), read for the custom names list
// (stateNamesOf's): the custom settings that differ, and whether the
// rest of the column (pg_settings' session settings) is the same. ok is
// false when a column cannot be read.
func customChanges(now, base string, list []string) (changes []customChange, sameHead, ok bool) {
	nowHead, nowVals, ok1 := splitCustoms(now, len(list))
	baseHead, baseVals, ok2 := splitCustoms(base, len(list))
	if !ok1 || !ok2 {
		return nil, false, false
	}
	for i := range list {
		if b, n := baseVals[i], nowVals[i]; (b == nil) != (n == nil) || b != nil && *b != *n {
			changes = append(changes, customChange{name: list[i], was: b, now: n})
		}
	}
	return changes, nowHead == baseHead, true
}

// adoptCustoms takes into the session the custom settings user code
// changed on its connection, between the snapshot's settings column (base)
// and now's, and reports whether nothing else changed that the session
// must keep the connection for. After a ROLLBACK of the snapshot's
// transaction (rolledBack) the snapshot may show a SET LOCAL that is gone
// (verifyRelease): only names it did not have defined are taken, and
// pg_settings' are not compared.
func (ss *session) adoptCustoms(now, base string, rolledBack bool) bool {
	changes, sameHead, ok := customChanges(now, base, ss.stateNames)
	if !ok || !sameHead && !rolledBack {
		return false
	}
	for _, c := range changes {
		switch {
		case c.now == nil:
			return false // (undefined again: not PostgreSQL's way)
		case rolledBack && c.was != nil:
			// (Undone with the transaction.)
		case *c.now == "" && c.was == nil:
			ss.params.apply(paramOp{kind: opPlaceholder, name: c.name})
		default:
			ss.params.apply(paramOp{kind: opSet, name: c.name, sql: setSQL(c.name, *c.now)})
		}
		if c.now != nil {
			ss.sc.Defines = pooling.AddDefine(ss.sc.Defines, c.name)
		}
	}
	return true
}

// splitCustoms splits a state read's settings column, "<settings> |
// <custom values>", into its head and the n values of its last array: the
// last " | {" from which the rest reads as an array of n.
func splitCustoms(col string, n int) (head string, vals []*string, ok bool) {
	for end := len(col); end > 0; {
		i := strings.LastIndex(col[:end], " | {")
		if i < 0 {
			return "", nil, false
		}
		if v, ok := parseTextArray(col[i+3:]); ok && len(v) == n {
			return col[:i], v, true
		}
		end = i
	}
	return "", nil, false
}

// parseTextArray reads PostgreSQL's text output of a one-dimensional
// text[]: {a,"b c",NULL,""}. ok is false unless s is exactly one.
func parseTextArray(s string) (vals []*string, ok bool) {
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return nil, false
	}
	if s == "{}" {
		return nil, true
	}
	i := 1
	for {
		var v string
		if s[i] == '"' {
			var b strings.Builder
			for i++; ; i++ {
				if i >= len(s) {
					return nil, false
				}
				if s[i] == '\\' && i+1 < len(s) {
					i++
				} else if s[i] == '"' {
					i++
					break
				}
				b.WriteByte(s[i])
			}
			v = b.String()
			vals = append(vals, &v)
		} else {
			j := i
			for j < len(s) && s[j] != ',' && s[j] != '}' && s[j] != '"' && s[j] != '{' {
				j++
			}
			if j == i || j >= len(s) {
				return nil, false
			}
			if v = s[i:j]; v == "NULL" {
				vals = append(vals, nil)
			} else {
				vals = append(vals, &v)
			}
			i = j
		}
		if i >= len(s) {
			return nil, false
		}
		switch s[i] {
		case ',':
			i++
		case '}':
			return vals, i == len(s)-1
		default:
			return nil, false
		}
		if i >= len(s) {
			return nil, false
		}
	}
}

// mergeNames returns the names of a and then those of b not in a (a new
// slice: a stays as it is).
func mergeNames(a, b []string) []string {
	out := slices.Clip(a)
	for _, n := range b {
		if !slices.Contains(a, n) {
			out = append(out, n)
		}
	}
	return out
}
