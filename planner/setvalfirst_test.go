package planner

import (
	"errors"
	"testing"
)

// TestSetvalFirst: which SELECTs of setval() over a table run in two steps
// (the aggregates, then setval() with their row), and the statements they
// become; the others stay refused.
func TestSetvalFirst(t *testing.T) {
	cat := testCatalog()
	for _, c := range []struct{ sql, read, call string }{
		{`SELECT setval(pg_get_serial_sequence('"accounts"','aid'), coalesce(max("aid"), 1), max("aid") IS NOT null) FROM "accounts"`,
			`SELECT COALESCE(max(aid), 1), max(aid) IS NOT NULL FROM accounts`,
			`SELECT setval(pg_get_serial_sequence('"accounts"', 'aid'), pgfleet_v.c1, pgfleet_v.c2) FROM (ROWS) pgfleet_v(c1, c2)`},
		{`SELECT pg_catalog.setval('s', max(abalance) + 1) AS v FROM accounts WHERE bid = 3`,
			`SELECT max(abalance) + 1 FROM accounts WHERE bid = 3`,
			`SELECT pg_catalog.setval('s', pgfleet_v.c1) AS v FROM (ROWS) pgfleet_v(c1)`},
		{`SELECT setval('s', max(aid), NULL) FROM accounts`,
			`SELECT max(aid) FROM accounts`,
			`SELECT setval('s', pgfleet_v.c1, NULL) FROM (ROWS) pgfleet_v(c1)`},
		{`SELECT setval('s', 'on', max(aid) > 0) FROM accounts`,
			`SELECT max(aid) > 0 FROM accounts`,
			`SELECT setval('s', 'on', pgfleet_v.c1) FROM (ROWS) pgfleet_v(c1)`},
		{`SELECT setval('s', aid) FROM accounts`, "", ""},                             // a row each
		{`SELECT setval('s', max(aid)) FROM accounts GROUP BY bid`, "", ""},           // a row per group
		{`SELECT setval(aid::text, max(aid)) FROM accounts`, "", ""},                  // the sequence from a row
		{`SELECT setval('s', (SELECT max(aid) FROM accounts)) FROM accounts`, "", ""}, // a subquery
		{`SELECT setval('s', max(aid)), 1 FROM accounts`, "", ""},                     // two targets
		{`SELECT setval('s', max(aid)) FROM accounts LIMIT 1`, "", ""},
	} {
		_, err := Build(c.sql, cat)
		var vf *SetvalFirst
		if !errors.As(err, &vf) {
			if c.read != "" {
				t.Errorf("%s: %v, want it run in two steps", c.sql, err)
			} else if err == nil {
				t.Errorf("%s: planned, want a refusal", c.sql)
			}
			continue
		}
		if c.read == "" {
			t.Errorf("%s: run in two steps (%s), want a refusal", c.sql, vf.Read)
			continue
		}
		if vf.Read != c.read || vf.Call("ROWS") != c.call {
			t.Errorf("%s:\n read %s\n call %s\nwant\n read %s\n call %s", c.sql, vf.Read, vf.Call("ROWS"), c.read, c.call)
		}
	}
}
