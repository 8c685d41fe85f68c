package planner

import (
	"strings"
	"testing"

	pg_query "github.com/pganalyze/pg_query_go/v5"
)

// TestIndirectionParentheses: subscripts and fields of expressions that
// need parentheses keep them in the shards' statements (pg_query's
// deparser dropped them: (ARRAY['z','y'])[1] became a syntax error).
func TestIndirectionParentheses(t *testing.T) {
	cat := testCatalog()
	for _, q := range []string{
		"SELECT (ARRAY['z','y'])[1] FROM accounts WHERE aid = 1",
		"SELECT (ARRAY['z','y'])[1], abalance FROM accounts",
		"SELECT aid FROM accounts WHERE bid = (ARRAY[1, 2])[2]",
		"SELECT ('{1,2,3}'::int[])[2:3], (CASE WHEN aid > 0 THEN ARRAY[aid] END)[1] FROM accounts WHERE aid = 3",
		"SELECT (COALESCE(NULL, ARRAY[aid]))[1], (ROW(aid, 2)).f1 FROM accounts WHERE aid = 3",
		"SELECT ('{\"a\": 1}'::jsonb)['a'] FROM accounts WHERE aid = 4",
	} {
		p, err := Build(q, cat)
		if err != nil {
			t.Errorf("%s: %v", q, err)
			continue
		}
		for _, sql := range p.ShardSQL() {
			if _, err := pg_query.Parse(sql); err != nil {
				t.Errorf("%s: shard statement %s: %v", q, sql, err)
			}
		}
		if strings.Contains(q, "(ARRAY['z','y'])[1]") && !strings.Contains(p.ShardSQL()[0], "(ARRAY['z', 'y'])[1]") {
			t.Errorf("%s: shard statement %s", q, p.ShardSQL()[0])
		}
	}
}
