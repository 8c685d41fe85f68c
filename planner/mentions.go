package planner

import (
	"strings"
	"sync/atomic"

	"github.com/pgfleet/pgfleet/metadata"
)

// MentionsTable reports whether sql may name one of the catalog's tables
// (by relation name, ignoring case); false means planning can be skipped.
// It errs towards true: a statement it passes over runs unplanned on the
// default node, whose tables of the catalog's names are empty shells.
//
// It runs for every simple-protocol statement, so it looks each word of
// the text up in the catalog's names (one pass over the text, whatever the
// number of tables; it used to search the text for each name, 100 µs a
// statement with 1,000 tables). A word is a run of ASCII letters, digits
// and underscores: PostgreSQL's identifiers split at least there (they
// also take $ and bytes past ASCII, so a name run into those is still
// found, erring towards true), and a catalog name is one such word in
// lower case (else every statement plans); a word is cut to 63 bytes, as
// PostgreSQL cuts an identifier. A name can hide from a text scan in a
// Unicode-escaped identifier (U&"\0074x1"), so any U& plans; and, not
// handled, in a single-byte server encoding whose locale lowers a letter
// past ASCII to an ASCII one (LATIN5 tr_TR: İTEMS is items), which
// pg_query does not lower either.
func MentionsTable(sql string, cat *metadata.Snapshot) bool {
	if len(cat.Tables) == 0 {
		return false
	}
	if ContainsFold(sql, "u&") {
		return true
	}
	w := wordsOf(cat)
	if w.odd {
		return true
	}
	var buf [64]byte // NAMEDATALEN
	for i := 0; i < len(sql); {
		if !wordByte(sql[i]) {
			i++
			continue
		}
		j := i + 1
		for j < len(sql) && wordByte(sql[j]) {
			j++
		}
		// PostgreSQL cuts an identifier to 63 bytes (NAMEDATALEN - 1).
		if n := min(j-i, len(buf)-1); n <= w.longest {
			for k := range n {
				c := sql[i+k]
				if c >= 'A' && c <= 'Z' {
					c += 'a' - 'A'
				}
				buf[k] = c
			}
			if _, ok := w.names[string(buf[:n])]; ok {
				return true
			}
		}
		i = j
	}
	return false
}

// oneWord: name is lower-case and a word of MentionsTable's.
func oneWord(name string) bool {
	if name == "" || len(name) > 63 {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !wordByte(c) || c >= 'A' && c <= 'Z' {
			return false
		}
	}
	return true
}

func wordByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// tableWords are a catalog snapshot's relation names, for MentionsTable.
type tableWords struct {
	cat     *metadata.Snapshot
	tables  int
	names   map[string]struct{}
	longest int
	odd     bool // a name that is not lower-case ASCII
}

// lastWords: the names of the last snapshot asked about (the coordinator's
// current one; a snapshot is replaced, not changed, when the catalog is).
var lastWords atomic.Pointer[tableWords]

func wordsOf(cat *metadata.Snapshot) *tableWords {
	if w := lastWords.Load(); w != nil && w.cat == cat && w.tables == len(cat.Tables) {
		return w
	}
	w := &tableWords{cat: cat, tables: len(cat.Tables), names: make(map[string]struct{}, len(cat.Tables))}
	for name := range cat.Tables {
		rel := name[strings.IndexByte(name, '.')+1:]
		if !oneWord(rel) {
			w.odd = true // a quoted name of other characters: plan to be sure
		}
		w.names[rel] = struct{}{}
		w.longest = max(w.longest, len(rel))
	}
	lastWords.Store(w)
	return w
}
