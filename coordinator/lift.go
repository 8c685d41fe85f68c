package coordinator

import (
	"strconv"
	"strings"
)

// literal is a constant lifted out of a simple-protocol statement.
type literal struct {
	token string // as written, quotes included
	value string // its value (string literals unquoted)
	// list: an IN list's items as written, "1, 2, 3" (collapseLists),
	// not one value.
	list bool
}

// liftLiterals replaces the numeric and plain string literals of sql with
// $1, $2, ... so that statements differing only in their constants share
// one plan. It is a light scan, not a parse: string literals right after a
// word (typed literals such as date '2020-01-01'), numbers right after BY
// (ORDER BY 1 names a column) and escape or dollar quoted strings stay in
// place. ok is false when nothing was lifted.
func liftLiterals(sql string) (norm string, lits []literal, ok bool) {
	if strings.Contains(sql, ").") {
		// Field selection, (x).f: a constant there, (0).a, would be
		// deparsed as $1.a and spliced back as 0.a, which does not parse.
		return "", nil, false
	}
	var b strings.Builder
	last := 0
	prevWord := false // the last significant character ends a word
	afterBy := false  // that word is BY
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case commentEnd(sql, i) > i:
			i = commentEnd(sql, i)
			continue
		case c == '$':
			if i+1 < len(sql) && sql[i+1] >= '0' && sql[i+1] <= '9' {
				return "", nil, false // a statement with parameters already
			}
			lx := lexer{s: sql, i: i}
			lx.dollarQuote()
			if lx.i == i+1 {
				// A lone $ (no valid statement has one): a literal after
				// it would lift to $$1, which starts a dollar quote.
				return "", nil, false
			}
			i = lx.i
			prevWord, afterBy = false, false
			continue
		case c == '"':
			lx := lexer{s: sql, i: i}
			lx.skipQuoted('"', false)
			i = lx.i
			prevWord, afterBy = true, false
			continue
		case c == '\'':
			lx := lexer{s: sql, i: i}
			escaped := escapePrefix(sql, i)
			lx.skipQuoted('\'', escaped)
			if continued(sql, lx.i) {
				// 'a' <newline> 'b' is one literal 'ab' in PostgreSQL (also
				// across -- comments): not lifted, the text is planned as is.
				return "", nil, false
			}
			// U&'...' is a string with Unicode escapes: lifted, the U& would
			// be left as the column u and the operator &.
			unicode := i >= 2 && sql[i-1] == '&' && (sql[i-2]|0x20) == 'u' && (i < 3 || !isIdentChar(sql[i-3]))
			if !prevWord && !escaped && !unicode && lx.i-i >= 2 && sql[lx.i-1] == '\'' {
				tok := sql[i:lx.i]
				lits = append(lits, literal{token: tok, value: strings.ReplaceAll(tok[1:len(tok)-1], "''", "'")})
				b.WriteString(sql[last:i])
				b.WriteString("$" + strconv.Itoa(len(lits)))
				last = lx.i
			}
			i = lx.i
			prevWord, afterBy = false, false
			continue
		case c >= '0' && c <= '9' && !afterBy:
			j := i
			for j < len(sql) && (sql[j] >= '0' && sql[j] <= '9' || sql[j] == '.' || sql[j] == '_') {
				j++
			}
			if j < len(sql) && (sql[j] == 'e' || sql[j] == 'E') {
				k := j + 1
				if k < len(sql) && (sql[k] == '+' || sql[k] == '-') {
					k++
				}
				if k < len(sql) && sql[k] >= '0' && sql[k] <= '9' {
					for j = k; j < len(sql) && sql[j] >= '0' && sql[j] <= '9'; j++ {
					}
				}
			}
			if j < len(sql) && isIdentChar(sql[j]) || strings.IndexByte(sql[i:j], '_') >= 0 {
				return "", nil, false // 0x1F, 1abc, 1_000: not a plain number
			}
			tok := sql[i:j]
			lits = append(lits, literal{token: tok, value: tok})
			b.WriteString(sql[last:i])
			b.WriteString("$" + strconv.Itoa(len(lits)))
			last = j
			i = j
			prevWord, afterBy = false, false
			continue
		case isIdentChar(c):
			start := i
			for i < len(sql) && isIdentChar(sql[i]) {
				i++
			}
			prevWord = true
			afterBy = i-start == 2 && (sql[start]|0x20) == 'b' && (sql[start+1]|0x20) == 'y'
			continue
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
		default:
			prevWord, afterBy = false, false
		}
		i++
	}
	if len(lits) == 0 {
		return "", nil, false
	}
	b.WriteString(sql[last:])
	return b.String(), lits, true
}

// continued reports whether a string literal ending at i is followed by
// another one with only white space and comments between: in PostgreSQL
// the two are one literal when a newline separates them. Any such pair
// stops lifting, whatever the separator, so no literal is misread.
func continued(sql string, i int) bool {
	for i < len(sql) {
		if i = skipBlanks(sql, i); i < len(sql) && sql[i] == '\v' { // (conservative: not PostgreSQL 15's whitespace)
			i++
			continue
		}
		return i < len(sql) && sql[i] == '\''
	}
	return false
}

// escapePrefix reports whether the quote at i starts an escape string: an
// E (or e) that is a token of its own, not the end of a word like ESCAPE.
func escapePrefix(sql string, i int) bool {
	return i > 0 && (sql[i-1] == 'e' || sql[i-1] == 'E') && (i < 2 || !isIdentChar(sql[i-2]))
}

// spliceLiterals puts lifted literals back into a rewritten statement in
// place of its $n placeholders, as the client wrote them. ok is false if
// the placeholders do not match the literals one for one.
func spliceLiterals(sql string, lits []literal) (out string, ok bool) {
	out, used := spliceFrom(sql, lits, 1)
	return out, used == len(lits)
}

// spliceFrom puts literals back in place of $first, $first+1, ... (other
// placeholders stay) and counts the placeholders it replaced.
func spliceFrom(sql string, lits []literal, first int) (string, int) {
	used := 0
	var b strings.Builder
	b.Grow(len(sql) + 16)
	last := 0
	for i := 0; i < len(sql); {
		switch c := sql[i]; {
		case c == '\'':
			lx := lexer{s: sql, i: i}
			lx.skipQuoted('\'', escapePrefix(sql, i))
			i = lx.i
		case c == '"':
			lx := lexer{s: sql, i: i}
			lx.skipQuoted('"', false)
			i = lx.i
		case c == '$' && i+1 < len(sql) && sql[i+1] >= '1' && sql[i+1] <= '9':
			j := i + 1
			for j < len(sql) && sql[j] >= '0' && sql[j] <= '9' {
				j++
			}
			k, _ := strconv.Atoi(sql[i+1 : j])
			if k >= first && k < first+len(lits) {
				b.WriteString(sql[last:i])
				b.WriteString(lits[k-first].token)
				last = j
				used++
			}
			i = j
		case c == '$':
			lx := lexer{s: sql, i: i}
			lx.dollarQuote()
			i = lx.i
		case isIdentStart(c):
			// An identifier may hold $: a$1 is a name, not a placeholder.
			for i < len(sql) && isIdentChar(sql[i]) {
				i++
			}
		default:
			i++
		}
	}
	b.WriteString(sql[last:])
	return b.String(), used
}

// escapeStrings rewrites a statement written under
// standard_conforming_strings = off, where a backslash in a plain '...'
// string escapes, into one that means the same under either setting: each
// plain string holding a backslash becomes an escape string E'...'. The
// planner (which parses with the setting on) then reads the values the
// worker reads.
func escapeStrings(sql string) string {
	var b strings.Builder
	last := 0
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case commentEnd(sql, i) > i:
			i = commentEnd(sql, i)
		case c == '$':
			lx := lexer{s: sql, i: i}
			lx.dollarQuote()
			i = lx.i
		case c == '"':
			lx := lexer{s: sql, i: i}
			lx.skipQuoted('"', false)
			i = lx.i
		case c == '\'':
			lx := lexer{s: sql, i: i}
			lx.skipQuoted('\'', true)
			if !(i > 0 && isIdentChar(sql[i-1])) && strings.IndexByte(sql[i:lx.i], '\\') >= 0 {
				b.WriteString(sql[last:i])
				b.WriteByte('E')
				last = i
			}
			i = lx.i
		case isIdentChar(c):
			for i < len(sql) && isIdentChar(sql[i]) {
				i++
			}
		default:
			i++
		}
	}
	if last == 0 {
		return sql
	}
	b.WriteString(sql[last:])
	return b.String()
}
