package planner

import (
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/pgfleet/pgfleet/internal/pgerr"
)

// TestSubqueryFirst: an UPDATE or DELETE whose IN/ANY/ALL subqueries over
// distributed tables do not pin to its shard runs them first, and WithRows
// puts their rows (or, with none, a typed empty SELECT) in their places;
// those whose subqueries cannot run alone stay refusals.
func TestSubqueryFirst(t *testing.T) {
	cat := testCatalog()
	const rowsSQL = "SELECT * FROM (VALUES (1::int8), (NULL::int8)) pgfleet_rows"
	for _, tc := range []struct {
		sql     string
		selects []string // nil: a refusal that is not a SubqueryFirst
		with    string   // With: the first subquery's rows, the others' none
	}{
		{sql: "UPDATE accounts SET abalance = 0 WHERE aid IN (SELECT o.id::int8 FROM orders o JOIN history h ON h.aid = o.id::int8 WHERE o.id > 'k')",
			selects: []string{"SELECT o.id::int8 FROM orders o JOIN history h ON h.aid = o.id::int8 WHERE o.id > 'k'"},
			with:    "UPDATE accounts SET abalance = 0 WHERE aid IN (SELECT * FROM (VALUES (1::int8), (NULL::int8)) pgfleet_rows)"},
		{sql: "DELETE FROM accounts a WHERE a.bid = 3 AND a.aid NOT IN (SELECT aid FROM history) OR a.abalance > ALL (SELECT aid FROM history WHERE aid < 0)",
			selects: []string{"SELECT aid FROM history", "SELECT aid FROM history WHERE aid < 0"},
			with:    "DELETE FROM accounts a WHERE ((a.bid = 3) AND (NOT (a.aid IN (SELECT * FROM (VALUES (1::int8), (NULL::int8)) pgfleet_rows)))) OR (a.abalance > ALL (SELECT NULL::int8 WHERE false))"},
		{sql: "UPDATE history SET delta = 1 WHERE aid = ANY (SELECT aid FROM accounts WHERE bid IN (SELECT bid FROM branches))",
			selects: []string{"SELECT aid FROM accounts WHERE bid IN (SELECT bid FROM branches)"},
			with:    "UPDATE history SET delta = 1 WHERE aid = ANY (SELECT * FROM (VALUES (1::int8), (NULL::int8)) pgfleet_rows)"},
		// Correlated (a qualified reference to the outer table): refused.
		{sql: "UPDATE accounts a SET abalance = 0 WHERE aid IN (SELECT o.id::int8 FROM orders o WHERE o.id = a.filler)"},
		{sql: "DELETE FROM accounts WHERE aid IN (SELECT aid FROM history WHERE history.delta = accounts.abalance)"},
		// Scalar subqueries, in SET and WHERE; EXISTS runs as LIMIT 1.
		{sql: "UPDATE accounts SET abalance = (SELECT max(delta) FROM history) WHERE aid IN (SELECT aid FROM history)",
			selects: []string{"SELECT max(delta) FROM history", "SELECT aid FROM history"},
			with:    "UPDATE accounts SET abalance = (SELECT * FROM (VALUES (1::int8), (NULL::int8)) pgfleet_rows) WHERE aid IN (SELECT NULL::int8 WHERE false)"},
		{sql: "DELETE FROM accounts WHERE abalance > (SELECT avg(delta) FROM history) AND EXISTS (SELECT 1 FROM orders)",
			selects: []string{"SELECT avg(delta) FROM history", "SELECT 1 FROM orders LIMIT 1"},
			with:    "DELETE FROM accounts WHERE (abalance > (SELECT * FROM (VALUES (1::int8), (NULL::int8)) pgfleet_rows)) AND EXISTS (SELECT NULL::int8 WHERE false)"},
		// EXISTS: a plain one runs as written with LIMIT 1 (analysed as
		// PostgreSQL analyses it); one whose select list, ORDER BY or
		// DISTINCT holds more than columns and constants, or that groups,
		// does not run first (adversaries: EXISTS (SELECT max(1/(x-x))
		// ...), (SELECT x + 'abc' ...) wrote where PostgreSQL failed).
		{sql: "UPDATE accounts SET abalance = 0 WHERE EXISTS (SELECT 1 AS a FROM orders o WHERE o.id > 'k' ORDER BY o.id LIMIT 1)",
			selects: []string{"SELECT 1 AS a FROM orders o WHERE o.id > 'k' ORDER BY o.id LIMIT 1"},
			with:    "UPDATE accounts SET abalance = 0 WHERE EXISTS (SELECT * FROM (VALUES (1::int8), (NULL::int8)) pgfleet_rows)"},
		{sql: "UPDATE accounts SET abalance = 0 WHERE EXISTS (SELECT max(1 / (aid - aid)) FROM history)"},
		{sql: "UPDATE accounts SET abalance = 0 WHERE EXISTS (SELECT aid FROM history GROUP BY aid)"},
		{sql: "DELETE FROM accounts WHERE EXISTS (SELECT 1 FROM history WHERE false ORDER BY count(*))"},
		{sql: "DELETE FROM accounts WHERE EXISTS (SELECT DISTINCT ON (count(*)) 1 FROM history)"},
		{sql: "UPDATE accounts SET abalance = 0 WHERE EXISTS (SELECT aid FROM history ORDER BY generate_series(1, 0))"},
		{sql: "UPDATE accounts SET abalance = 0 WHERE EXISTS (SELECT aid + 'abc' FROM history)"},
		{sql: "UPDATE accounts SET abalance = 0 WHERE EXISTS (SELECT 'abc'::int FROM history)"},
		{sql: "UPDATE accounts SET abalance = 0 WHERE EXISTS (SELECT 1 FROM history ORDER BY aid USING <<<)"},
		{sql: "UPDATE accounts SET abalance = 0 WHERE EXISTS (SELECT aid FROM history LIMIT 0)"},
		{sql: "UPDATE accounts SET abalance = 0 WHERE EXISTS (SELECT aid FROM history UNION SELECT 1)"},
		// Inside COPY or EXPLAIN: refused (adversary: COPY (UPDATE ...
		// RETURNING) TO STDOUT wrote and answered as an UPDATE).
		{sql: "COPY (UPDATE accounts SET abalance = 0 WHERE aid IN (SELECT aid FROM history) RETURNING aid) TO STDOUT"},
		{sql: "EXPLAIN DELETE FROM accounts WHERE aid IN (SELECT aid FROM history)"},
		// A distributed table elsewhere below the statement: refused.
		{sql: "UPDATE accounts SET (abalance, bid) = (SELECT delta, 1 FROM history LIMIT 1)"},
		{sql: "UPDATE accounts SET abalance = 0 WHERE aid = ANY (ARRAY(SELECT aid FROM history))"},
		{sql: "WITH h AS (SELECT aid FROM history) UPDATE accounts SET abalance = 0 WHERE aid IN (SELECT aid FROM h)"},
		{sql: "UPDATE accounts SET abalance = 0 FROM (SELECT id FROM orders) o WHERE o.id::int8 = accounts.aid AND aid IN (SELECT aid FROM history)"},
	} {
		_, err := Build(tc.sql, cat)
		var qf *SubqueryFirst
		if tc.selects == nil {
			if errors.As(err, &qf) || pgerr.Flatten(err).Code != pgerr.FeatureNotSupported {
				t.Errorf("%s: %v, want a refusal", tc.sql, err)
			}
			continue
		}
		if !errors.As(err, &qf) || !reflect.DeepEqual(qf.Selects, tc.selects) {
			t.Errorf("%s: %#v (%v), want subqueries %q", tc.sql, qf, err, tc.selects)
			continue
		}
		all := []string{rowsSQL}
		for range tc.selects[1:] {
			all = append(all, "SELECT NULL::int8 WHERE false")
		}
		got, err := qf.With(all)
		if err != nil || got != tc.with {
			t.Errorf("%s: with rows %q, %v; want %q", tc.sql, got, err, tc.with)
		}
	}
}

// TestSubqueryFirstCalls: what the subqueries call is listed for the
// coordinator's volatility check: functions, operators (those of x op ANY
// (SELECT ...) too) and the types they cast to.
func TestSubqueryFirstCalls(t *testing.T) {
	_, err := Build("DELETE FROM accounts WHERE aid IN (SELECT aid FROM history WHERE delta === ANY (SELECT bid FROM branches) AND f(delta, 2) AND delta::s.dom > 0 AND delta BETWEEN 1.0 AND 2.0 AND aid IN (SELECT a FROM v))", testCatalog())
	var qf *SubqueryFirst
	if !errors.As(err, &qf) {
		t.Fatalf("%v, want a SubqueryFirst", err)
	}
	if !slices.Contains(qf.Calls, "f/2") || !slices.Contains(qf.Ops, "===") || !slices.Contains(qf.Ops, ">=") || !slices.Contains(qf.Ops, "=") ||
		!slices.Contains(qf.Types, `"s"."dom"`) || !slices.Contains(qf.Rels, "v") {
		t.Errorf("calls %q, ops %q, types %q, rels %q; want f/2, ===, >= (BETWEEN), = (IN), \"s\".\"dom\" and v", qf.Calls, qf.Ops, qf.Types, qf.Rels)
	}
}
