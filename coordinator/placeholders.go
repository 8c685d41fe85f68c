package coordinator

import (
	"strings"
)

// Custom settings user code defines without a value.
//
// A function calling set_config('app.tenant', v, true) sets the name for
// its transaction only; once the transaction ends the backend keeps the
// name defined with an empty value, as it does for any placeholder. The
// state read (stateNamesOf) sees that as a change (NULL before, '' after),
// and pinning every session of a workload that sets its tenant per
// transaction would keep a connection per client. A change that only
// defines names, empty, is taken into the session instead: its settings
// get the placeholder (SET name TO DEFAULT on every connection it uses, as
// PostgreSQL's session has it) and the connection the name (its Defines),
// so no client without it is served there.

// definedOnly compares the settings column of a state read (now) with the
// snapshot's (base), read for the custom names of the array literal names
// (stateNamesOf's): it returns the names that went from undefined (NULL)
// to defined and empty (an empty string), and ok when nothing else of the column
// changed. A column it cannot read is a change (ok false).
func definedOnly(now, base string, names string) (defined []string, ok bool) {
	list := strings.Split(strings.Trim(names, "{}"), ",")
	if names == "{}" {
		list = nil
	}
	for i, n := range list {
		list[i] = strings.Trim(n, `"`)
	}
	nowHead, nowVals, ok1 := splitCustoms(now, len(list))
	baseHead, baseVals, ok2 := splitCustoms(base, len(list))
	if !ok1 || !ok2 || nowHead != baseHead {
		return nil, false
	}
	for i := range list {
		switch b, n := baseVals[i], nowVals[i]; {
		case b == nil && n == nil, b != nil && n != nil && *b == *n:
		case b == nil && n != nil && *n == "":
			defined = append(defined, list[i])
		default:
			return nil, false
		}
	}
	return defined, true
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
