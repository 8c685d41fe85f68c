package pooling

import (
	"slices"
	"strings"
)

// Custom settings a connection's backend has defined.
//
// PostgreSQL defines a custom setting that no loaded module claims (a
// placeholder: app.tenant) in a backend at its first SET there, and keeps
// it until the backend ends: RESET, RESET ALL, DISCARD ALL and a ROLLBACK
// of the SET leave it defined, with an empty value. A backend that never
// saw the name does not have it: current_setting('app.tenant', true) is
// NULL there and SHOW app.tenant fails with 42704, where the other gives
// ''. So a connection on which one client defined a name must not serve a
// client whose session has not: ServerConn.Defines holds the names defined
// on the connection, and AcquireFor hands out only a connection whose
// names are all defined in the asking session.
//
// A name set is its names with ASCII letters in lower case (PostgreSQL
// compares setting names so), in order, each followed by NUL; "" is the
// empty set.

// AddDefine returns the name set defs with name in it.
func AddDefine(defs, name string) string {
	name = lowerASCII(name)
	if name == "" || strings.IndexByte(name, 0) >= 0 || hasDefine(defs, name) {
		return defs
	}
	names := append(strings.Split(strings.TrimSuffix(defs, "\x00"), "\x00"), name)
	if defs == "" {
		names = names[1:]
	}
	slices.Sort(names)
	return strings.Join(names, "\x00") + "\x00"
}

// DefinesUnion returns the name set of the names of a and of b (AnyDefines
// if either is).
func DefinesUnion(a, b string) string {
	if DefinesWithin(b, a) {
		return a
	}
	if b == AnyDefines {
		return b
	}
	for b != "" {
		i := strings.IndexByte(b, 0)
		if i < 0 {
			break
		}
		a, b = AddDefine(a, b[:i]), b[i+1:]
	}
	return a
}

// DefinesWithin reports whether every name of the set defs is in the set of.
func DefinesWithin(defs, of string) bool {
	if defs == "" || defs == of || of == AnyDefines {
		return true
	}
	for defs != "" {
		i := strings.IndexByte(defs, 0)
		if i < 0 || !hasDefine(of, defs[:i]) {
			return false
		}
		defs = defs[i+1:]
	}
	return true
}

// hasDefine reports whether name is in the set defs.
func hasDefine(defs, name string) bool {
	for defs != "" {
		i := strings.IndexByte(defs, 0)
		if i < 0 {
			return false
		}
		if defs[:i] == name {
			return true
		}
		defs = defs[i+1:]
	}
	return false
}

// lowerASCII is s with its ASCII letters in lower case.
func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if b[j] >= 'A' && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}
