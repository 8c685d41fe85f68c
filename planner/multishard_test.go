package planner

import (
	"errors"
	"strings"
	"testing"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"github.com/pgfleet/pgfleet/internal/pgerr"
)

// TestMergeRender renders merge statements for concrete partial column
// types: the combined aggregates keep the original aggregate's type.
func TestMergeRender(t *testing.T) {
	cat := testCatalog()
	cases := []struct {
		query string
		types []string
		want  string // the merge statement, or the error's text
	}{
		{"SELECT bid, count(*), sum(abalance), avg(abalance) FROM accounts GROUP BY bid ORDER BY bid",
			[]string{"int4", "int8", "int8", "int8"},
			"SELECT c1, sum(c2)::bigint, sum(c3)::bigint, sum(c3) / (NULLIF(sum(c4), 0)) FROM unnest($1, $2, $3, $4) p(c1, c2, c3, c4) GROUP BY c1 ORDER BY 1"},
		{"SELECT sum(aid), avg(aid) FROM accounts",
			[]string{"numeric", "int8"},
			"SELECT sum(c1), sum(c1) / (NULLIF(sum(c2), 0)) FROM unnest($1, $2) p(c1, c2)"},
		{"SELECT avg(f) FROM accounts",
			[]string{"float8", "int8"},
			"SELECT sum(c1) / (NULLIF(sum(c2), 0))::double precision FROM unnest($1, $2) p(c1, c2)"},
		{"SELECT avg(r) FROM accounts", []string{"float4", "int8"}, "avg of real values over several shards is not supported"},
		{"SELECT aid FROM accounts WHERE abalance > $1 ORDER BY abalance DESC LIMIT $2 OFFSET $3",
			[]string{"int8", "int4"},
			// The statement's parameters follow the arrays in their order:
			// LIMIT's $2 becomes $3, OFFSET's $3 becomes $4 (Params says so).
			"SELECT r FROM unnest($1, $2) p(r, c2) ORDER BY c2 DESC LIMIT $3 OFFSET $4"},
		{"SELECT * FROM accounts ORDER BY abalance LIMIT 5",
			[]string{"int8", "int4", "int4", "text", "int4"},
			"SELECT r FROM unnest($1, $2) p(r, c5) ORDER BY c5 LIMIT 5"},
		{"SELECT DISTINCT * FROM accounts",
			[]string{"int8", "int4"},
			"SELECT DISTINCT c1, c2 FROM unnest($1, $2) p(c1, c2)"},
	}
	for _, c := range cases {
		p, err := Build(c.query, cat)
		if err != nil {
			t.Fatalf("%s: %v", c.query, err)
		}
		got, err := p.Scatter().Merge.Render(c.types)
		if err != nil {
			got = err.Error()
		}
		if !strings.HasPrefix(got, c.want) {
			t.Errorf("%s with %v:\n got %s\nwant %s", c.query, c.types, got, c.want)
		}
	}
}

func TestFigureColname(t *testing.T) {
	for q, want := range map[string]string{
		"SELECT a.b FROM t":                    "b",
		"SELECT count(*) FROM t":               "count",
		"SELECT x::int FROM t":                 "x",
		"SELECT 1::int8 FROM t":                "int8",
		"SELECT 1 FROM t":                      "?column?",
		"SELECT coalesce(a, b) FROM t":         "coalesce",
		"SELECT CASE WHEN a THEN b END":        "case",
		"SELECT (SELECT max(x) FROM u) FROM t": "max",
		"SELECT current_date":                  "current_date",
		"SELECT NULLIF(a, b)":                  "nullif",
		"SELECT (a).f FROM t":                  "f",
		"SELECT a[1] FROM t":                   "a",
		"SELECT ARRAY[1]":                      "array",
		"SELECT EXISTS (SELECT 1)":             "exists",
	} {
		tree, err := parseOne(q)
		if err != nil {
			t.Fatal(err)
		}
		if got := FigureColname(tree.GetSelectStmt().TargetList[0].GetResTarget().Val); got != want {
			t.Errorf("%s: %q, want %q", q, got, want)
		}
	}
}

func parseOne(q string) (*pg_query.Node, error) {
	tree, err := pg_query.Parse(q)
	if err != nil {
		return nil, err
	}
	return tree.Stmts[0].Stmt, nil
}

// TestMultiShardRefused: shapes that a multi-shard plan would answer
// wrongly are refused with 0A000.
func TestMultiShardRefused(t *testing.T) {
	cat := testCatalog()
	// What no merge of per-shard results answers runs whole over the
	// gathered rows (gather.go).
	for _, q := range []string{
		// A self-join not on the distribution column.
		"SELECT count(*) FROM accounts a JOIN accounts b ON a.bid = b.bid",
		"SELECT count(*) FROM accounts a, accounts b WHERE a.aid = b.bid",
		// SQL/JSON aggregates (PostgreSQL 16) are not FuncCalls.
		"SELECT JSON_ARRAYAGG(abalance) FROM accounts",
		"SELECT bid, JSON_OBJECTAGG(bid : abalance) FROM accounts GROUP BY bid",
		"SELECT bid FROM accounts GROUP BY bid ORDER BY (SELECT JSON_ARRAYAGG(bid))",
		"SELECT aid FROM accounts ORDER BY aid LIMIT (SELECT 1 FROM branches)",
		// Evaluated once, in the merge, not by each worker.
		"SELECT DISTINCT now() FROM accounts",
		"SELECT aid, current_timestamp FROM accounts",
		"SELECT count(*) FROM accounts GROUP BY statement_timestamp()",
		// The collation stays: VALUES is in the merge as written.
		"SELECT v.c FROM accounts JOIN (VALUES ('a' COLLATE \"C\", 1)) v(c, k) ON v.k = bid ORDER BY v.c LIMIT 3",
	} {
		p, err := Build(q, cat)
		if err != nil || p.Scatter() == nil || !p.Scatter().Merge.Gather {
			t.Errorf("%s: %+v, %v; want a gathering plan", q, p, err)
		}
	}
	for _, q := range []string{
		"SELECT count(*) FROM accounts a JOIN accounts b ON a.aid = b.aid WHERE a.bid = b.bid",
		"SELECT now(), count(*) FROM accounts WHERE abalance < 0",
		"SELECT a.aid, count(*) FROM accounts a LEFT JOIN accounts b ON b.aid = a.aid GROUP BY a.aid",
	} {
		if p, err := Build(q, cat); err != nil || p.Kind() != KindMultiShard {
			t.Errorf("%s: %v", q, err)
		}
	}
}

// TestMultiShardPositionErrors: a position out of the select list is
// PostgreSQL's 42P10 with its message, naming the clause (adversary 142).
func TestMultiShardPositionErrors(t *testing.T) {
	cat := testCatalog()
	for q, want := range map[string]string{
		"SELECT aid FROM accounts ORDER BY 3":         "ORDER BY position 3 is not in select list",
		"SELECT aid FROM accounts ORDER BY 0 LIMIT 1": "ORDER BY position 0 is not in select list",
		"SELECT DISTINCT ON (2) aid FROM accounts":    "DISTINCT ON position 2 is not in select list",
	} {
		_, err := Build(q, cat)
		var pe *pgerr.Error
		if !errors.As(err, &pe) || pe.Code != "42P10" || pe.Message != want {
			t.Errorf("%s: %v; want 42P10 %q", q, err, want)
		}
	}
}
