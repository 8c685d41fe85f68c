package planner

import (
	"fmt"
	"strings"
	"testing"
)

// TestRenderGather: the statement run over gathered rows, for one table
// and for several (each use reads its table's rows, after its separator).
func TestRenderGather(t *testing.T) {
	cat := testCatalog()
	for _, c := range []struct {
		query        string
		types, names []string
		colls        []map[string]string
		casts        []string // columns that come as text: their types
		keys         [][]int  // the tables' primary keys
		want         string   // the rendered statement, or the error's text
	}{
		{
			// Grouped by a table's primary key, the statement groups by
			// the other columns of it that it names too (PostgreSQL's
			// functional dependency; over unnest there is no key), json
			// excepted; a table not grouped by its whole key is left.
			query: "SELECT a.aid, a.bid, upper(a.t), count(o.id), (SELECT max(x.aid) FROM accounts x WHERE x.bid = a.abalance) FROM accounts a " +
				"LEFT JOIN orders o ON o.id = a.aid::text GROUP BY a.aid, o.aid HAVING a.j IS NOT NULL ORDER BY o.note",
			types: []string{"bool", "int8", "int4", "text", "int4", "json", "bool", "text", "int4", "text"},
			names: []string{"?gather 1", "aid", "bid", "t", "abalance", "j", "?gather 2", "id", "aid", "note"},
			colls: []map[string]string{nil, nil}, keys: [][]int{{1}, {1, 2}},
			want: "SELECT a.aid, a.bid, upper(a.t), count(o.id), (SELECT max(x.aid) FROM (SELECT c2, c3, c4, c5, c6 FROM unnest($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) " +
				"u(c1, c2, c3, c4, c5, c6, c7, c8, c9, c10) WHERE c1) x(aid, bid, t, abalance, j) WHERE x.bid = a.abalance) " +
				"FROM (SELECT c2, c3, c4, c5, c6 FROM unnest($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) u(c1, c2, c3, c4, c5, c6, c7, c8, c9, c10) WHERE c1) a(aid, bid, t, abalance, j) " +
				"LEFT JOIN (SELECT c8, c9, c10 FROM unnest($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) u(c1, c2, c3, c4, c5, c6, c7, c8, c9, c10) WHERE c7) o(id, aid, note) ON o.id = a.aid::text " +
				"GROUP BY a.aid, o.aid, a.bid, a.t, a.abalance HAVING a.j IS NOT NULL ORDER BY o.note",
		},
		{
			// One table, its columns unqualified.
			query: "SELECT aid, count(DISTINCT aid) FROM accounts GROUP BY bid ORDER BY abalance",
			types: []string{"int8", "int4", "int4"}, names: []string{"aid", "bid", "abalance"},
			colls: []map[string]string{nil}, keys: [][]int{{2}},
			want: "SELECT aid, count(DISTINCT aid) FROM unnest($1, $2, $3) accounts(aid, bid, abalance) GROUP BY bid, accounts.aid, accounts.abalance ORDER BY abalance",
		},
		{
			query: "SELECT a.*, count(DISTINCT a.bid) FROM accounts a GROUP BY a.aid, ROLLUP (a.bid)",
			types: []string{"int8", "int4"}, names: []string{"aid", "bid"},
			colls: []map[string]string{nil}, keys: [][]int{{1}},
			want: "SELECT a.*, count(DISTINCT a.bid) FROM unnest($1, $2) a(aid, bid) GROUP BY a.aid, ROLLUP (a.bid)",
		},
		{
			// a.* names every column.
			query: "SELECT a.*, count(DISTINCT a.bid) FROM accounts a GROUP BY a.bid",
			types: []string{"int8", "int4"}, names: []string{"aid", "bid"},
			colls: []map[string]string{nil}, keys: [][]int{{2}},
			want: "SELECT a.*, count(DISTINCT a.bid) FROM unnest($1, $2) a(aid, bid) GROUP BY a.bid, a.aid",
		},
		{
			query: "SELECT count(DISTINCT abalance) FROM accounts WHERE bid > $1",
			types: []string{"int8", "int4"}, names: []string{"aid", "abalance"},
			colls: []map[string]string{nil},
			want:  "SELECT count(DISTINCT abalance) FROM unnest($1, $2) accounts(aid, abalance) WHERE bid > $3",
		},
		{
			query: "SELECT count(DISTINCT t) FROM accounts a(x)",
			types: []string{"int8", "text"}, names: []string{"aid", "t"},
			colls: []map[string]string{{"t": `pg_catalog."C"`}},
			want:  `SELECT count(DISTINCT t) FROM (SELECT c1, c2 COLLATE pg_catalog."C" FROM unnest($1, $2) u(c1, c2)) a(x, t)`,
		},
		{
			query: "SELECT a.aid, o.id FROM accounts a JOIN orders o ON o.id = a.aid::text WHERE o.id <> $1",
			types: []string{"bool", "int8", "bool", "text", "int4"},
			names: []string{"?gather 1", "aid", "?gather 2", "id", "aid"},
			colls: []map[string]string{nil, {"id": `pg_catalog."C"`}},
			want: `SELECT a.aid, o.id FROM (SELECT c2 FROM unnest($1, $2, $3, $4, $5) u(c1, c2, c3, c4, c5) WHERE c1) a(aid) ` +
				`JOIN (SELECT c4 COLLATE pg_catalog."C", c5 FROM unnest($1, $2, $3, $4, $5) u(c1, c2, c3, c4, c5) WHERE c3) o(id, aid) ON o.id = a.aid::text WHERE o.id <> $6`,
		},
		{
			// Columns that come as text are cast back to their types.
			query: "SELECT count(DISTINCT abalance) FROM accounts WHERE bid > $1",
			types: []string{"int8", "text", "text"}, names: []string{"aid", "abalance", "tags"},
			colls: []map[string]string{{"tags": `pg_catalog."C"`}}, casts: []string{"", "public.mood", "character varying(5)[]"},
			want: `SELECT count(DISTINCT abalance) FROM (SELECT c1, c2::public.mood, c3::varchar(5)[] COLLATE pg_catalog."C" FROM unnest($1, $2, $3) u(c1, c2, c3)) accounts(aid, abalance, tags) WHERE bid > $4`,
		},
		{
			query: "SELECT a.aid, o.id FROM accounts a JOIN orders o ON o.id = a.aid::text",
			types: []string{"bool", "int8", "bool", "text", "text"},
			names: []string{"?gather 1", "aid", "?gather 2", "id", "aid"},
			colls: []map[string]string{nil, nil}, casts: []string{"", "", "", "", "int[]"},
			want: `SELECT a.aid, o.id FROM (SELECT c2 FROM unnest($1, $2, $3, $4, $5) u(c1, c2, c3, c4, c5) WHERE c1) a(aid) ` +
				`JOIN (SELECT c4, c5::int[] FROM unnest($1, $2, $3, $4, $5) u(c1, c2, c3, c4, c5) WHERE c3) o(id, aid) ON o.id = a.aid::text`,
		},
		{
			query: "SELECT * FROM accounts a JOIN orders o ON o.id = a.aid::text",
			types: []string{"bool", "int8", "bool", "bool", "text"},
			names: []string{"?gather 1", "aid", "?gather 2", "?gather 3", "id"},
			colls: []map[string]string{nil, nil},
			want:  "a column of public.accounts, public.orders is named like the coordinator's gathering separators",
		},
		{
			query: "SELECT * FROM accounts a JOIN orders o ON o.id = a.aid::text",
			types: []string{"int8", "text"}, names: []string{"aid", "id"},
			colls: []map[string]string{nil, nil},
			want:  "a column of public.accounts, public.orders is named like",
		},
	} {
		p, err := Build(c.query, cat)
		if err != nil {
			t.Fatalf("%s: %v", c.query, err)
		}
		m := mergeOf(p)
		if m == nil || !m.Gather {
			t.Fatalf("%s: not gathered", c.query)
		}
		got, err := m.RenderGather(c.types, c.names, c.colls, c.casts, c.keys)
		if err != nil {
			got = err.Error()
			if !strings.Contains(got, c.want) {
				t.Errorf("%s:\n got error %s\nwant %s", c.query, got, c.want)
			}
			continue
		}
		if got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.query, got, c.want)
		}
	}
}

// TestWithColumns: an INSERT without a column list gets the table's first
// columns, as many as its rows have.
func TestWithColumns(t *testing.T) {
	cols := []string{"aid", "bid", "abalance", "filler"}
	for _, c := range []struct{ sql, want string }{
		{"INSERT INTO accounts VALUES (1, 2)", "INSERT INTO accounts (aid, bid) VALUES (1, 2)"},
		{"INSERT INTO accounts AS a VALUES ($1, 2, 3), (4, 5, DEFAULT) ON CONFLICT (aid) DO UPDATE SET bid = excluded.bid RETURNING a.*",
			"INSERT INTO accounts AS a (aid, bid, abalance) VALUES ($1, 2, 3), (4, 5, DEFAULT) ON CONFLICT (aid) DO UPDATE SET bid = excluded.bid RETURNING a.*"},
		{"INSERT INTO accounts VALUES (1), (2, 3)", "INSERT INTO accounts (aid, bid) VALUES (1), (2, 3)"},
		{"INSERT INTO public.accounts VALUES (1, 2, 3, 'x', 5)", "INSERT INTO public.accounts (aid, bid, abalance, filler) VALUES (1, 2, 3, 'x', 5)"},
	} {
		got, err := WithColumns(c.sql, cols)
		if err != nil || got != c.want {
			t.Errorf("%s:\n got %s, %v\nwant %s", c.sql, got, err, c.want)
		}
		if _, err := Build(got, testCatalog()); err != nil && strings.Contains(err.Error(), "column list") {
			t.Errorf("%s: still needs its columns: %v", got, err)
		}
	}
	for _, sql := range []string{"INSERT INTO accounts (aid) VALUES (1)", "INSERT INTO accounts SELECT 1", "SELECT 1"} {
		if _, err := WithColumns(sql, cols); err == nil {
			t.Errorf("%s: no error", sql)
		}
	}
}

// TestGatherFirstOnOneNode: the first statement of a gathering (which
// describes the result) reads, of each table, a shard on one node, also
// when tables that are not colocated have their first shards on different
// nodes (after a move); a table with no shard on that node is refused.
func TestGatherFirstOnOneNode(t *testing.T) {
	cat := testCatalog()
	orders := cat.Shards["public.orders"]
	orders[0].Nodes = []int32{2} // moved: accounts' shard 0 is on node 1
	p, err := Build("SELECT (SELECT count(*) FROM accounts), (SELECT count(*) FROM orders)", cat)
	if err != nil {
		t.Fatal(err)
	}
	first := p.ShardSQL()[0]
	acc0 := fmt.Sprintf("accounts_%d", cat.Shards["public.accounts"][0].ID)
	var onNode1 []string
	for _, sh := range orders {
		if sh.Nodes[0] == 1 {
			onNode1 = append(onNode1, fmt.Sprintf("orders_%d", sh.ID))
		}
	}
	if !strings.Contains(first, acc0) || !strings.Contains(first, onNode1[0]) {
		t.Errorf("first statement %q: want %s and %s, shards on node 1", first, acc0, onNode1[0])
	}
	for i := range orders {
		if orders[i].Nodes[0] == 1 {
			orders[i].Nodes = []int32{2}
		}
	}
	if _, err := Build("SELECT (SELECT count(*) FROM accounts), (SELECT count(*) FROM orders)", cat); err == nil || !strings.Contains(err.Error(), "has no shard on the worker") {
		t.Errorf("orders with no shard on node 1: %v, want a refusal", err)
	}
}
