package planner

import (
	"errors"
	"reflect"
	"strconv"
	"testing"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
)

// TestSequenceInserts: what Build says of writes to tables with sequence
// columns, and the statements WithSequenceValues and WithSequenceParams
// make of an INSERT that leaves them to their sequence.
func TestSequenceInserts(t *testing.T) {
	cat := testCatalog()
	cat.Tables["public.accounts"].Sequences = []metadata.SeqColumn{{Column: "aid", Sequence: 501}}
	cat.Tables["public.orders"].Sequences = []metadata.SeqColumn{{Column: "n", Identity: 'a', Sequence: 502}}
	cat.Tables["public.branches"].Sequences = []metadata.SeqColumn{{Column: "bid", Identity: 'd', Sequence: 503}}
	for _, tc := range []struct {
		sql     string
		need    []SeqNeed // a SequencesNeeded
		code    string    // else an error's SQLSTATE ("" for a plan)
		columns bool      // a ColumnsNeeded
		values  []string  // WithSequenceValues' statement with values 11, 12, ...
		params  string    // WithSequenceParams' statement after the client's parameters
	}{
		{sql: "INSERT INTO accounts (abalance) VALUES (1), (2)", need: []SeqNeed{{Column: "aid", Sequence: 501, Rows: []int{0, 1}}},
			values: []string{"INSERT INTO accounts (abalance, aid) OVERRIDING SYSTEM VALUE VALUES (1, 11), (2, 12)"}},
		{sql: "INSERT INTO accounts (aid, abalance) VALUES (DEFAULT, $1), (5, $2)", need: []SeqNeed{{Column: "aid", Sequence: 501, Rows: []int{0}}},
			values: []string{"INSERT INTO accounts (aid, abalance) OVERRIDING SYSTEM VALUE VALUES (11, $1), (5, $2)"},
			params: "INSERT INTO accounts (aid, abalance) OVERRIDING SYSTEM VALUE VALUES ($3, $1), (5, $2)"},
		{sql: "INSERT INTO accounts (aid, abalance) VALUES (5, 1)"},
		{sql: "INSERT INTO accounts DEFAULT VALUES", need: []SeqNeed{{Column: "aid", Sequence: 501, Rows: []int{0}}},
			values: []string{"INSERT INTO accounts (aid) OVERRIDING SYSTEM VALUE VALUES (11)"}},
		{sql: "INSERT INTO accounts VALUES (DEFAULT, 1)", columns: true},
		{sql: "INSERT INTO branches VALUES (DEFAULT, 1)", columns: true},
		{sql: "INSERT INTO branches (bid, bbalance) OVERRIDING USER VALUE VALUES (7, 1)", need: []SeqNeed{{Column: "bid", Sequence: 503, Rows: []int{0}}},
			values: []string{"INSERT INTO branches (bid, bbalance) OVERRIDING SYSTEM VALUE VALUES (11, 1)"}},
		{sql: "INSERT INTO branches (bid, bbalance) VALUES (7, 1)"},
		{sql: "INSERT INTO orders (id, n) VALUES ('a', 1)", code: "428C9"},
		{sql: "INSERT INTO orders (id, n) OVERRIDING SYSTEM VALUE VALUES ('a', 1)"},
		{sql: "INSERT INTO orders (id) VALUES ('a')", need: []SeqNeed{{Column: "n", Sequence: 502, Rows: []int{0}}},
			values: []string{"INSERT INTO orders (id, n) OVERRIDING SYSTEM VALUE VALUES ('a', 11)"}},
		{sql: "UPDATE orders SET n = 5 WHERE id = 'a'", code: "428C9"},
		{sql: "UPDATE accounts SET aid = DEFAULT WHERE abalance = 0", code: pgerr.FeatureNotSupported},
		{sql: "UPDATE accounts SET abalance = 1 WHERE aid = 1"},
		{sql: "INSERT INTO accounts (abalance) SELECT abalance FROM accounts", code: pgerr.FeatureNotSupported},
		{sql: "INSERT INTO accounts SELECT * FROM accounts", code: pgerr.FeatureNotSupported},
		{sql: "INSERT INTO accounts (aid, abalance) VALUES (1, 1) ON CONFLICT (aid) DO UPDATE SET aid = DEFAULT", code: pgerr.FeatureNotSupported},
		{sql: "COPY accounts (abalance) FROM STDIN"},
		{sql: "COPY accounts FROM STDIN"},
		{sql: "EXPLAIN INSERT INTO accounts (abalance) VALUES (1)", code: pgerr.FeatureNotSupported},
		{sql: "INSERT INTO accounts (aid, abalance) VALUES (1)", code: pgerr.SyntaxError},
		{sql: "INSERT INTO accounts (abalance) VALUES (1, 2), (3)", code: pgerr.SyntaxError},
		{sql: "UPDATE accounts SET (aid, abalance) = (DEFAULT, 1)", code: pgerr.FeatureNotSupported},
		{sql: "UPDATE orders SET (n, id) = (DEFAULT, 'a')", code: pgerr.FeatureNotSupported},
		{sql: "UPDATE orders SET (n, id) = (SELECT 1, 'a')", code: "428C9"},
		{sql: "INSERT INTO branches (bid, bbalance) OVERRIDING USER VALUE SELECT 1, 2", code: pgerr.FeatureNotSupported},
		// nextval('name') as a row's value is drawn; other sequence calls
		// are refused.
		{sql: "INSERT INTO accounts (aid, abalance) VALUES (5, nextval('s')), (6, 2), (7, nextval('s'))", need: []SeqNeed{{Column: "abalance", Name: "s", Rows: []int{0, 2}}},
			values: []string{"INSERT INTO accounts (aid, abalance) OVERRIDING SYSTEM VALUE VALUES (5, 11), (6, 2), (7, 12)"},
			params: "INSERT INTO accounts (aid, abalance) OVERRIDING SYSTEM VALUE VALUES (5, $1), (6, 2), (7, $2)"},
		{sql: "INSERT INTO accounts (abalance) VALUES (pg_catalog.nextval('public.s'::regclass))",
			need:   []SeqNeed{{Column: "aid", Sequence: 501, Rows: []int{0}}, {Column: "abalance", Name: "public.s", Rows: []int{0}}},
			values: []string{"INSERT INTO accounts (abalance, aid) OVERRIDING SYSTEM VALUE VALUES (12, 11)"}},
		{sql: "INSERT INTO accounts (aid, abalance) VALUES (nextval('s'), $1)", need: []SeqNeed{{Column: "aid", Name: "s", Rows: []int{0}}},
			values: []string{"INSERT INTO accounts (aid, abalance) OVERRIDING SYSTEM VALUE VALUES (11, $1)"},
			params: "INSERT INTO accounts (aid, abalance) OVERRIDING SYSTEM VALUE VALUES ($2, $1)"},
		{sql: "INSERT INTO branches VALUES (1, nextval('s'))", columns: true},
		{sql: "INSERT INTO accounts (aid, abalance) VALUES (1, nextval('s') + 1)", code: pgerr.FeatureNotSupported},
		{sql: "INSERT INTO accounts (aid, abalance) VALUES (1, nextval(s))", code: pgerr.FeatureNotSupported},
		{sql: "INSERT INTO accounts (aid, abalance) SELECT 1, nextval('s')", code: pgerr.FeatureNotSupported},
		{sql: "SELECT nextval('s') FROM accounts", code: pgerr.FeatureNotSupported},
		{sql: "SELECT * FROM accounts WHERE aid = currval('s')", code: pgerr.FeatureNotSupported},
		{sql: "UPDATE accounts SET abalance = nextval('s') WHERE aid = 1", code: pgerr.FeatureNotSupported},
		{sql: "DELETE FROM accounts WHERE aid = lastval()", code: pgerr.FeatureNotSupported},
		{sql: "SELECT setval('s', 5) FROM accounts", code: pgerr.FeatureNotSupported},
	} {
		_, err := Build(tc.sql, cat)
		var sn *SequencesNeeded
		var cn *ColumnsNeeded
		switch {
		case tc.need != nil:
			if !errors.As(err, &sn) || !reflect.DeepEqual(sn.Need, tc.need) {
				t.Errorf("%s: %v, want sequences needed %v", tc.sql, err, tc.need)
				continue
			}
			var vals [][]string
			n := 11
			for _, x := range tc.need {
				var v []string
				for range x.Rows {
					v = append(v, strconv.Itoa(n))
					n++
				}
				vals = append(vals, v)
			}
			got, err := WithSequenceValues(tc.sql, sn.Need, vals)
			if err != nil || got != tc.values[0] {
				t.Errorf("%s: with values %q, %v; want %q", tc.sql, got, err, tc.values[0])
			}
			if tc.params != "" {
				got, err := WithSequenceParams(tc.sql, sn.Need, MaxParam(tc.sql))
				if err != nil || got != tc.params {
					t.Errorf("%s: with parameters %q, %v; want %q", tc.sql, got, err, tc.params)
				}
			}
		case tc.columns:
			if !errors.As(err, &cn) {
				t.Errorf("%s: %v, want columns needed", tc.sql, err)
			}
		case tc.code != "":
			if pe := pgerr.Flatten(err); err == nil || pe.Code != tc.code || errors.As(err, &sn) || errors.As(err, &cn) {
				t.Errorf("%s: %v, want SQLSTATE %s", tc.sql, err, tc.code)
			}
		default:
			if err != nil {
				t.Errorf("%s: %v, want a plan", tc.sql, err)
			}
		}
	}
}

// TestSelectFirst: the INSERT ... SELECTs that do not push down run their
// SELECT first (with the INSERT's WITH), and InsertWithRows puts rows in
// the SELECT's place; those whose SELECT cannot run alone stay refusals.
func TestSelectFirst(t *testing.T) {
	cat := testCatalog()
	for _, tc := range []struct {
		sql, sel string // sel "": a refusal that is not a SelectFirst
		untyped  []string
		rows     string // InsertWithRows with rows (1, 'a'), (2, NULL)
	}{
		{sql: "INSERT INTO accounts (aid, abalance) SELECT bid, 0 FROM branches RETURNING aid",
			sel: "SELECT bid, 0 FROM branches", rows: "INSERT INTO accounts (aid, abalance) VALUES (1, 'a'), (2, NULL) RETURNING aid"},
		{sql: "WITH b AS (SELECT bid FROM branches) INSERT INTO tellers (tid, bid) SELECT bid, 'x' FROM b ON CONFLICT DO NOTHING",
			sel: "WITH b AS (SELECT bid FROM branches) SELECT bid, 'x' FROM b", untyped: []string{"", "'x'"},
			rows: "INSERT INTO tellers (tid, bid) VALUES (1, 'a'), (2, NULL) ON CONFLICT DO NOTHING"},
		{sql: "INSERT INTO accounts (aid, bid) SELECT aid, NULL FROM history ORDER BY aid LIMIT 3",
			sel: "SELECT aid, NULL FROM history ORDER BY aid LIMIT 3", untyped: []string{"", "NULL"}},
		{sql: "INSERT INTO accounts SELECT 'a' UNION SELECT 'b'", sel: "SELECT 'a' UNION SELECT 'b'"},
		{sql: "WITH d AS (DELETE FROM branches RETURNING bid) INSERT INTO accounts (aid) SELECT bid FROM d"},
		{sql: "WITH b AS (SELECT bid FROM branches) INSERT INTO tellers (tid) SELECT bid FROM b RETURNING (SELECT count(*) FROM b)"},
	} {
		_, err := Build(tc.sql, cat)
		var sf *SelectFirst
		if tc.sel == "" {
			if errors.As(err, &sf) || pgerr.Flatten(err).Code != pgerr.FeatureNotSupported {
				t.Errorf("%s: %v, want a refusal", tc.sql, err)
			}
			continue
		}
		if !errors.As(err, &sf) || sf.Select != tc.sel || !reflect.DeepEqual(sf.Untyped, tc.untyped) {
			t.Errorf("%s: %#v (%v), want SELECT %q untyped %q", tc.sql, sf, err, tc.sel, tc.untyped)
			continue
		}
		if tc.rows != "" {
			got, err := InsertWithRows(tc.sql, [][]string{{"1", "'a'"}, {"2", "NULL"}})
			if err != nil || got != tc.rows {
				t.Errorf("%s: with rows %q, %v; want %q", tc.sql, got, err, tc.rows)
			}
		}
	}
}
