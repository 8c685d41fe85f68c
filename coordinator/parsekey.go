package coordinator

import (
	"strings"

	"github.com/pgfleet/pgfleet/internal/pgerr"
)

// PostgreSQL reads a prepared statement's constants and names once, under
// the settings current at its Parse: '01/02/2020'::date is January 2nd
// under DateStyle MDY even when the statement is executed after SET
// DateStyle = DMY, and its tables are found by the search_path of the
// Parse. pgfleet prepares statements on server connections when it needs
// them, under the session's settings then; so a Bind of a statement whose
// reading settings changed since its Parse is refused (0A000) when the
// change could make the text mean something else: the names' settings
// changed, or the constants' settings changed and the text holds a string
// constant. Statements without either are exact under any settings.

// litSettings are the settings that change how PostgreSQL reads a
// statement's constants at parse time; nameSettings those that change how
// it resolves names or analyses expressions.
var (
	litSettings = []string{"datestyle", "timezone", "intervalstyle", "timezone_abbreviations",
		"standard_conforming_strings", "backslash_quote", "client_encoding", "lc_monetary",
		"array_nulls", "xmloption", "default_text_search_config"}
	nameSettings = []string{"search_path", "transform_null_equals"}
)

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

// readKey is the reading settings of a statement's Parse: the session's
// (and its transaction's) SETs of litSettings and nameSettings, and while
// statements whose effect pgfleet has not seen yet (or cannot see:
// set_config()) may have changed them, the count of such statements.
type readKey struct {
	lit, names string
	gen        uint64
}

// readKeyNow is the session's reading settings now.
func (ss *session) readKeyNow() readKey {
	k := readKey{lit: ss.params.litKey, names: ss.params.nameKey}
	if ss.settingsDirty || ss.settingsUnknown {
		k.gen = ss.setGen
	}
	for _, op := range ss.pending {
		switch op.kind {
		case opResetAll, opDiscardAll:
			k.lit += "\x00RESET ALL"
			k.names += "\x00RESET ALL"
		default:
			switch {
			case containsName(nameSettings, op.name):
				k.names += "\x00" + op.sql
			case containsName(litSettings, op.name):
				k.lit += "\x00" + op.sql
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

// parsedUnder refuses a Bind of client statement name (st) when the
// settings that read its text changed since its Parse in a way that could
// change what it means.
func (ss *session) parsedUnder(name string, st *Statement) error {
	then, ok := ss.parsed[name]
	if !ok {
		return nil
	}
	now := ss.readKeyNow()
	if then == now {
		return nil
	}
	if then.names == now.names && then.gen == now.gen && !hasStringConstant(st.Query) {
		return nil
	}
	return pgerr.New(pgerr.FeatureNotSupported,
		"prepared statement %q was parsed under other settings (DateStyle, TimeZone, search_path, ...) than the session's now, which pgfleet cannot reproduce", name).
		WithHint("Prepare the statement again after changing these settings, or pass its values as parameters.")
}

// hasStringConstant reports whether sql may hold a string constant (whose
// reading can depend on settings): a quote or a dollar quote.
func hasStringConstant(sql string) bool {
	if strings.IndexByte(sql, '\'') >= 0 {
		return true
	}
	for i := strings.IndexByte(sql, '$'); i >= 0 && i+1 < len(sql); {
		if c := sql[i+1]; c < '0' || c > '9' {
			return true
		}
		j := strings.IndexByte(sql[i+1:], '$')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return false
}
