package coordinator

import (
	"regexp"
	"strings"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/planner"
)

// PostgreSQL reads a prepared statement's constants once, under the
// settings of its Parse: '01/02/2020'::date stays January 2nd when the
// statement is executed after SET DateStyle = DMY. (It parses the text again
// when search_path changed, under the settings of that moment.) pgfleet
// prepares statements on server connections when it needs them, under the
// session's settings then; so a Bind of a statement whose reading settings
// changed since it was read is refused (0A000) when the change could give
// one of its constants another value: a date/time setting and a constant
// with a digit or a word like 'now', client_encoding and non-ASCII text,
// standard_conforming_strings and a backslash, and so on. Other statements
// are read the same under either settings.

// readGroups are the settings that change how PostgreSQL reads a
// statement's constants at parse time, by what they affect: those the
// server reports (ParameterStatus) are followed by their reported values,
// which set_config() and functions cannot hide; the others (rarely set) by
// the session's SET statements.
var readGroups = [...][]string{
	grpTime:   {"timezone_abbreviations", "lc_monetary"},
	grpZone:   nil,
	grpEnc:    nil,
	grpEscape: {"backslash_quote"},
	grpArray:  {"array_nulls"},
	grpXML:    {"xmloption"},
	grpNull:   {"transform_null_equals"},
}

// reportedRead are the reported settings that read constants, with their
// group.
var reportedRead = [...]struct {
	name  string
	group int
}{
	{"DateStyle", grpTime}, {"TimeZone", grpZone}, {"IntervalStyle", grpTime},
	{"client_encoding", grpEnc}, {"standard_conforming_strings", grpEscape},
}

const (
	grpTime = iota
	grpZone // TimeZone alone: constants that name their own offset are read the same
	grpEnc
	grpEscape
	grpArray
	grpXML
	grpNull
	nGroups
)

// readKey is the reading settings of a statement's parse: the session's
// (and its transaction's) SETs of each readGroups group and of search_path,
// the reported values of reportedRead, and while a statement that may have
// changed them is unanswered, the count of such statements. (SET LOCAL and
// set_config() of the unreported settings are not followed.)
type readKey struct {
	groups [nGroups]string
	rep    [len(reportedRead)]string
	path   string
	gen    uint64
}

// readKeys computes the groups' keys from a session's SETs.
func readKeys(set map[string]string) (k [nGroups]string) {
	for g, names := range readGroups {
		k[g] = settingsKey(set, names)
	}
	return k
}

// settingsKey is the SET statements of names in set, in names' order.
func settingsKey(set map[string]string, names []string) string {
	var b strings.Builder
	for _, n := range names {
		if s, ok := set[n]; ok {
			b.WriteString(s)
			b.WriteByte(0)
		}
	}
	return b.String()
}

// readKeyNow is the session's reading settings now.
func (ss *session) readKeyNow() readKey {
	k := readKey{groups: ss.params.readKeys, rep: ss.reported, path: ss.params.set["search_path"]}
	if ss.settingsDirty && ss.setGen != ss.setSeen && ss.unanswered() {
		// A statement that changes settings may still be unanswered: its
		// ParameterStatus has not arrived. (Not one answered before this
		// batch: a Parse after SET LOCAL and Sync was refused at its
		// Bind, adversary finding.)
		k.gen = ss.setGen
	}
	for _, op := range ss.pending {
		switch op.kind {
		case opResetAll, opDiscardAll:
			for g := range k.groups {
				k.groups[g] += "\x00RESET ALL"
			}
			k.path += "\x00RESET ALL"
		default:
			if op.name == "search_path" {
				k.path += "\x00" + op.sql
			}
			for g, names := range readGroups {
				if containsName(names, op.name) {
					k.groups[g] += "\x00" + op.sql
				}
			}
		}
	}
	return k
}

func containsName(list []string, n string) bool {
	for _, x := range list {
		if x == n {
			return true
		}
	}
	return false
}

// parsedAt is when the client prepared a statement: the settings that
// read its constants, and the server's DDL epoch and multi-shard cache
// generation (refreshStmt).
type parsedAt struct {
	key   readKey
	stamp descStamp
	// told: the client was given the multi-shard statement's
	// description (scatterDescribe); it is never given another.
	told bool
}

// parsedUnder refuses a Bind of client statement name (st) when settings
// that read its constants changed since PostgreSQL would have read them in
// a way that could give them other values.
func (ss *session) parsedUnder(name []byte, st *Statement) error {
	at, ok := ss.parsed[string(name)] // no allocation: a map index
	if !ok {
		return nil
	}
	then := at.key
	now := ss.readKeyNow()
	if then == now {
		return nil
	}
	if then.gen == now.gen && then.path != now.path {
		// PostgreSQL parses it again, under the settings of now.
		at.key = now
		ss.parsed[string(name)] = at
		return nil
	}
	var changed [nGroups]bool
	for g := range then.groups {
		changed[g] = then.gen != now.gen || then.groups[g] != now.groups[g]
	}
	for i, r := range reportedRead {
		if then.rep[i] != now.rep[i] {
			changed[r.group] = true
		}
	}
	for g := range changed {
		if changed[g] && readAffects(g, st.Query) {
			return pgerr.New(pgerr.FeatureNotSupported,
				"prepared statement %q was parsed under other settings (%s) than the session's now, which pgfleet cannot reproduce",
				name, groupNames(g)).
				WithHint("Prepare the statement again after changing these settings, or pass its values as parameters.")
		}
	}
	return nil
}

// readAffects reports whether the settings of group g may change the value
// of one of sql's constants.
func readAffects(g int, sql string) bool {
	switch g {
	case grpEnc:
		return !ascii([]byte(sql))
	case grpEscape:
		return strings.IndexByte(sql, '\\') >= 0
	case grpNull:
		return planner.ContainsFold(sql, "null")
	}
	for _, c := range stringConstants(sql) {
		switch g {
		case grpTime:
			if timeLike(c) {
				return true
			}
		case grpZone:
			if timeLike(c) && !ownOffset(c) {
				return true
			}
		case grpArray:
			if strings.IndexByte(c, '{') >= 0 {
				return true
			}
		case grpXML:
			if strings.IndexByte(c, '<') >= 0 {
				return true
			}
		}
	}
	return false
}

// stringConstants are the contents of sql's string constants ('...',
// E'...', U&'...', $$...$$), as written.
func stringConstants(sql string) []string {
	var out []string
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case commentEnd(sql, i) > i:
			i = commentEnd(sql, i)
		case c == '"':
			lx := lexer{s: sql, i: i}
			lx.skipQuoted('"', false)
			i = lx.i
		case c == '\'':
			lx := lexer{s: sql, i: i}
			lx.skipQuoted('\'', escapePrefix(sql, i))
			out = append(out, sql[i:lx.i])
			i = lx.i
		case c == '$' && (i+1 >= len(sql) || sql[i+1] < '0' || sql[i+1] > '9'):
			lx := lexer{s: sql, i: i}
			lx.dollarQuote()
			if lx.i <= i {
				lx.i = i + 1
			}
			out = append(out, sql[i:lx.i])
			i = lx.i
		case isIdentChar(c):
			for i < len(sql) && isIdentChar(sql[i]) {
				i++
			}
		default:
			i++
		}
	}
	return out
}

// groupNames names group g's settings.
func groupNames(g int) string {
	names := append([]string(nil), readGroups[g]...)
	for _, r := range reportedRead {
		if r.group == g {
			names = append(names, r.name)
		}
	}
	return strings.Join(names, ", ")
}

// noteReported records the reported settings of a connection in the
// session's settings.
func (ss *session) noteReported(params map[string]string) {
	for i, r := range reportedRead {
		ss.reported[i] = params[r.name]
	}
}

// timeLike reports whether a string constant may be read differently under
// other DateStyle, TimeZone or IntervalStyle settings (or lc_monetary,
// timezone_abbreviations): it has two runs of digits with a separator
// between them (01/02/2020, 2020-01-01 00:00, 1-2, 1,000.00), a run of six
// or more (20200102, J2458851), or a word read as the current day or time.
func timeLike(c string) bool {
	for _, w := range []string{"now", "today", "tomorrow", "yesterday", "allballs"} {
		if planner.ContainsFold(c, w) {
			return true
		}
	}
	run, runs, sep := 0, 0, false
	for i := 0; i < len(c); i++ {
		switch ch := c[i]; {
		case ch >= '0' && ch <= '9':
			if run == 0 {
				if runs > 0 && sep {
					return true
				}
				runs++
			}
			run++
			if run >= 6 {
				return true
			}
		case strings.IndexByte(" -/.:,T", ch) >= 0 && run > 0 || sep && strings.IndexByte(" -/.:,T", ch) >= 0:
			run, sep = 0, true
		default:
			run, sep = 0, false
		}
	}
	return false
}

// ownOffset reports whether string constant c (quotes included) is one
// date and time, or one time, followed by its own UTC offset
// ('2024-07-01 00:00:00+00', '10:30-05:30', '2024-07-01T00:00Z'): the
// session's TimeZone does not change how PostgreSQL reads it.
func ownOffset(c string) bool {
	v := unquote(c)
	if strings.ContainsAny(v, "\\'") {
		return false // escapes: not worth reading
	}
	return ownOffsetRE.MatchString(v)
}

var ownOffsetRE = regexp.MustCompile(`(?i)^\s*(\d{4}-\d{2}-\d{2}[ T])?\d{1,2}:\d{2}(:\d{2}(\.\d{1,6})?)?\s*([+-]\d{1,2}(:?\d{2}){0,2}|z|utc|gmt)\s*$`)

// unquote is the text of a string constant as stringConstants gives it
// ('...', E'...', $tag$...$tag$), without its quotes.
func unquote(c string) string {
	if strings.HasPrefix(c, "$") {
		if i := strings.IndexByte(c[1:], '$'); i >= 0 {
			tag := c[:i+2]
			if len(c) >= 2*len(tag) && strings.HasSuffix(c, tag) {
				return c[len(tag) : len(c)-len(tag)]
			}
		}
		return c
	}
	c = strings.TrimLeft(c, "EeUu&")
	if len(c) >= 2 && c[0] == '\'' && c[len(c)-1] == '\'' {
		return c[1 : len(c)-1]
	}
	return c
}
