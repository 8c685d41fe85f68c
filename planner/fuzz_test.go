package planner

import (
	"encoding/json"
	"strings"
	"testing"

	pg_query "github.com/pganalyze/pg_query_go/v5"
)

// FuzzBuild plans arbitrary SQL against the test catalog (run with
// scripts/fuzz; the golden queries are its seed corpus under
// testdata/fuzz/FuzzBuild). Planning must not panic, must give the same
// plan twice, and every statement a plan sends to a shard must be SQL
// PostgreSQL parses: one per shard for a router plan. The text helpers the
// coordinator calls on every statement must not panic either.
func FuzzBuild(f *testing.F) {
	for _, s := range []string{
		"SELECT abalance FROM accounts WHERE aid = 48213", "UPDATE accounts SET abalance = abalance + $1 WHERE aid = $2",
		"INSERT INTO accounts (aid, abalance) VALUES (1, 2), (3, 4), (5, 6)", "SELECT count(*), max(aid) FROM accounts",
		"SELECT * FROM orders WHERE id = 'x'::varchar(3)", "COPY accounts (aid, abalance) FROM STDIN WITH (FORMAT csv, HEADER, NULL 'n')",
		"SELECT * FROM branches b JOIN tellers t USING (bid) WHERE bid = 1", "EXPLAIN ANALYZE SELECT * FROM accounts WHERE aid = 1",
		"WITH x AS (DELETE FROM history WHERE aid = 3 RETURNING *) SELECT * FROM x", "SELECT citus_add_node('h', 5432)",
		"SELECT * FROM accounts a JOIN history h ON a.aid = h.aid WHERE a.aid = 5 ORDER BY 1 LIMIT 3",
		"SELECT aid, sum(delta) FROM history GROUP BY aid HAVING sum(delta) > 0 ORDER BY 2 DESC LIMIT 10",
		"SELECT bid, count(DISTINCT aid), rank() OVER (ORDER BY bid) FROM accounts a JOIN branches b USING (bid) GROUP BY bid",
		"SELECT aid FROM accounts x(a, b) WHERE a IN (SELECT aid FROM accounts WHERE abalance > $1) UNION SELECT 1",
	} {
		f.Add(s)
	}
	cat := testCatalog()
	f.Fuzz(func(t *testing.T, sql string) {
		if len(sql) > 4000 {
			return // the parser's cost, not the planner's
		}
		_ = TouchesNothing(sql)
		_ = MentionsFunction(sql)
		_ = MentionsTable(sql, cat)
		_, _ = DDLValueChecks(sql)
		_, _, _, _ = RefDigestSQL(sql)
		_ = TimeWord(sql)
		_, _ = ExprMutability(sql)
		p, err := Build(sql, cat)
		if err != nil {
			if p != nil {
				t.Fatalf("Build(%q) gave a plan and an error %v", sql, err)
			}
			return
		}
		if p == nil {
			t.Fatalf("Build(%q): no plan, no error", sql)
		}
		if p2, err2 := Build(sql, cat); err2 != nil || !samePlan(p, p2) {
			t.Fatalf("Build(%q) is not deterministic", sql)
		}
		if p.SyntaxError() {
			return
		}
		for i, s := range p.ShardSQL() {
			if strings.IndexByte(sql, 0) >= 0 {
				break
			}
			if _, err := pg_query.Parse(s); err != nil {
				t.Fatalf("Build(%q): shard statement %d does not parse: %v\n%s", sql, i, err, s)
			}
		}
		if r, ok := p.Root.(*Route); ok {
			if n := len(cat.Shards[r.Table]); n == 0 || len(r.ShardSQL) != n {
				t.Fatalf("Build(%q): router plan on %q with %d statements for %d shards", sql, r.Table, len(r.ShardSQL), n)
			}
			if r.Value == nil {
				t.Fatalf("Build(%q): router plan without a distribution value", sql)
			}
		}
		if m := mergeOf(p); m != nil && m.Gather && strings.IndexByte(sql, 0) < 0 {
			// The statement run over the gathered rows, plain and with a
			// collated column, parses (deparsing it must not crash).
			for _, coll := range []map[string]string{nil, {"c2": `pg_catalog."C"`}} {
				// Each gathered table with the same three columns (after
				// its separator when there are several).
				var types, names []string
				colls := make([]map[string]string, len(m.Tables))
				for k := range m.Tables {
					if len(m.Tables) > 1 {
						types, names = append(types, "bool"), append(names, GatherSeparator(k))
					}
					types, names = append(types, "int8", "text", "numeric"), append(names, "aid", "c2", "abalance")
					colls[k] = coll
				}
				s, err := m.RenderGather(types, names, colls, nil, nil)
				if err != nil {
					continue
				}
				if _, err := pg_query.Parse(s); err != nil {
					t.Fatalf("Build(%q): gathering statement does not parse: %v\n%s", sql, err, s)
				}
			}
		}
		if x, ok := p.Root.(*InsertSplit); ok && len(x.Rows) > 0 {
			rows := []int{len(x.Rows) - 1, 0}
			if s, err := x.SplitInsert(0, rows); err == nil {
				if _, err := pg_query.Parse(s); err != nil {
					t.Fatalf("Build(%q): split INSERT does not parse: %v\n%s", sql, err, s)
				}
			}
		}
	})
}

func mergeOf(p *Plan) *Merge {
	if p.Scatter() == nil {
		return nil
	}
	return p.Scatter().Merge
}

func samePlan(a, b *Plan) bool {
	ja, err1 := json.Marshal(flatten(a))
	jb, err2 := json.Marshal(flatten(b))
	if err1 != nil || err2 != nil || string(ja) != string(jb) || Format(a) != Format(b) || len(a.ShardSQL()) != len(b.ShardSQL()) {
		return false
	}
	for i := range a.ShardSQL() {
		if a.ShardSQL()[i] != b.ShardSQL()[i] {
			return false
		}
	}
	return true
}
