package difftest

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
)

// settings are a session's GUCs, applied identically on both sides.
type settings map[string]string

var settingChoices = map[string][]string{
	"TimeZone":                      {"UTC", "America/New_York", "Asia/Kolkata", "Pacific/Chatham", "Europe/Berlin", "Australia/Lord_Howe", "<+0530>-05:30"},
	"DateStyle":                     {"ISO, MDY", "ISO, DMY", "SQL, DMY", "SQL, MDY", "Postgres, MDY", "Postgres, DMY", "German, DMY", "ISO, YMD", "YMD", "DMY", "ISO", "SQL"},
	"IntervalStyle":                 {"postgres", "postgres_verbose", "sql_standard", "iso_8601"},
	"search_path":                   {"public", `"$user", public`, "dt_other, public", "public, dt_other"},
	"client_encoding":               {"UTF8", "LATIN1"},
	"standard_conforming_strings":   {"on", "off"},
	"extra_float_digits":            {"0", "1", "3", "-2"},
	"default_transaction_read_only": {"off", "on"},
}

// settingFeature names the feature a non-default choice needs, where one
// does (see features.go).
func settingFeature(name, val string) string {
	switch {
	case name == "client_encoding" && val == "LATIN1":
		return featLatin1
	case name == "standard_conforming_strings" && val == "off":
		return featSCSOff
	case name == "default_transaction_read_only" && val == "on":
		return featReadOnly
	case name == "DateStyle" && !strings.Contains(val, ","):
		return featDateStylePart
	}
	return ""
}

// genSettings draws a session's settings; each setting is left at its
// default half of the time.
func genSettings(r *rand.Rand, f features) settings {
	s := settings{}
	for _, name := range sortedKeys(settingChoices) {
		if r.IntN(2) == 0 {
			continue
		}
		c := settingChoices[name]
		v := c[r.IntN(len(c))]
		if feat := settingFeature(name, v); feat != "" && !f.on(feat) {
			continue
		}
		s[name] = v
	}
	return s
}

func (s settings) latin1() bool { return s["client_encoding"] == "LATIN1" }
func (s settings) scs() bool    { return s["standard_conforming_strings"] != "off" }

// setSQL is the SET statement for one setting.
func setSQL(name, val string) string {
	if name == "search_path" { // a list: a quoted string would be one schema
		return fmt.Sprintf("SET %s TO %s", name, val)
	}
	return fmt.Sprintf("SET %s TO %s", name, quoteLit(val, true))
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
