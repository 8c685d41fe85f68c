package coordinator

import (
	"strconv"
	"strings"

	"github.com/pgfleet/pgfleet/planner"
)

// minCollapse is the length from which a lifted IN list is planned as one
// placeholder.
const minCollapse = 64

// collapseLists turns every IN list of at least minCollapse lifted
// literals, "IN ($5, $6, ..., $100004)", into "IN ($5)" whose one literal is
// the whole list as the client wrote its items ("1, 2, ..., 100000"), and
// renumbers the placeholders after it. The planner then parses, walks,
// copies and deparses one item instead of 100,000 (10 s and most of a
// gigabyte for such a list), and splicing puts the list back. An IN list
// never pins a statement to a shard, so the plan is the same.
// Lists holding a date/time word ('now', ...) stay as they are, for the
// reference-write check that reads each literal.
func collapseLists(norm string, lits []literal) (string, []literal) {
	if len(lits) < minCollapse {
		return norm, lits
	}
	var b strings.Builder
	b.Grow(len(norm))
	out := make([]literal, 0, 16)
	last, want := 0, 1 // copied up to; the placeholder expected next
	for i := 0; i < len(norm); {
		switch c := norm[i]; {
		case c == '\'':
			lx := lexer{s: norm, i: i}
			lx.skipQuoted('\'', escapePrefix(norm, i))
			i = lx.i
		case c == '"':
			lx := lexer{s: norm, i: i}
			lx.skipQuoted('"', false)
			i = lx.i
		case commentEnd(norm, i) > i:
			i = commentEnd(norm, i)
		case c == '$' && i+1 < len(norm) && norm[i+1] >= '1' && norm[i+1] <= '9':
			k, j := placeholder(norm, i)
			if k != want || k > len(lits) {
				return norm, lits // not the lifted numbering: leave it alone
			}
			n, end := 1, j
			if afterIn(norm, i) {
				n, end = listRun(norm, i, k, len(lits))
			}
			b.WriteString(norm[last:i])
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(len(out) + 1))
			if n >= minCollapse && !hasTimeWord(lits[k-1:k-1+n]) {
				var tok strings.Builder
				for x, l := range lits[k-1 : k-1+n] {
					if x > 0 {
						tok.WriteString(", ")
					}
					tok.WriteString(l.token)
				}
				out = append(out, literal{token: tok.String(), list: true})
				want, i, last = k+n, end, end
				continue
			}
			out = append(out, lits[k-1])
			want, i, last = k+1, j, j
		case c == '$':
			lx := lexer{s: norm, i: i}
			lx.dollarQuote()
			i = lx.i
		default:
			i++
		}
	}
	if want != len(lits)+1 {
		return norm, lits
	}
	b.WriteString(norm[last:])
	return b.String(), out
}

// placeholder reads "$k" at i and returns k and the index after it.
func placeholder(s string, i int) (int, int) {
	j := i + 1
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	k, err := strconv.Atoi(s[i+1 : j])
	if err != nil {
		return -1, j
	}
	return k, j
}

// afterIn reports whether the placeholder at i is the first item of an IN
// list: "IN (" before it, spaces aside.
func afterIn(s string, i int) bool {
	j := i - 1
	for j >= 0 && isSpace(s[j]) {
		j--
	}
	if j < 0 || s[j] != '(' {
		return false
	}
	j--
	for j >= 0 && isSpace(s[j]) {
		j--
	}
	return j >= 1 && (s[j]|0x20) == 'n' && (s[j-1]|0x20) == 'i' && (j < 2 || !isIdentChar(s[j-2]))
}

// listRun counts the placeholders $k, $k+1, ... separated by commas from i
// up to the closing parenthesis, and returns the index after the last one;
// 0 when the list holds anything else.
func listRun(s string, i, k, max int) (n, end int) {
	for {
		got, j := placeholder(s, i)
		if got != k+n || got > max {
			return 0, i
		}
		n++
		end = j
		for j < len(s) && isSpace(s[j]) {
			j++
		}
		switch {
		case j < len(s) && s[j] == ')':
			return n, end
		case j < len(s) && s[j] == ',':
			j++
			for j < len(s) && isSpace(s[j]) {
				j++
			}
			if j >= len(s) || s[j] != '$' {
				return 0, i
			}
			i = j
		default:
			return 0, i
		}
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' }

func hasTimeWord(lits []literal) bool {
	for _, l := range lits {
		if len(l.value) <= 12 && planner.TimeWord(l.value) {
			return true
		}
	}
	return false
}
