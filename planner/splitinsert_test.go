package planner

import (
	"slices"
	"testing"
)

// TestSplitInsertParams: a shard's part of a multi-row INSERT over the
// extended protocol keeps the parameters its rows and the rest of the
// statement use, renumbered in order, and says which of the client's each
// one is.
func TestSplitInsertParams(t *testing.T) {
	cat := testCatalog()
	cases := []struct {
		sql    string
		rows   []int
		want   string
		params []int
	}{
		{"INSERT INTO accounts (aid, abalance) VALUES ($1, $2), ($3, $4), ($5, $6)", []int{1},
			"INSERT INTO accounts_102008 AS accounts (aid, abalance) VALUES ($1, $2)", []int{3, 4}},
		{"INSERT INTO accounts (aid, abalance) VALUES ($1, $2), ($3, $4), ($5, $6)", []int{0, 2},
			"INSERT INTO accounts_102008 AS accounts (aid, abalance) VALUES ($1, $2), ($3, $4)", []int{1, 2, 5, 6}},
		{"INSERT INTO accounts (aid, abalance) VALUES ($2, $1), ($3, $1) ON CONFLICT (aid) DO UPDATE SET abalance = $4 RETURNING $5::int", []int{1},
			"INSERT INTO accounts_102008 AS accounts (aid, abalance) VALUES ($2, $1) ON CONFLICT (aid) DO UPDATE SET abalance = $3 RETURNING $4::int", []int{1, 3, 4, 5}},
		{"INSERT INTO accounts (aid, abalance) VALUES ($1, 7), (2, 8)", []int{1},
			"INSERT INTO accounts_102008 AS accounts (aid, abalance) VALUES (2, 8)", nil},
	}
	for _, c := range cases {
		p, err := Build(c.sql, cat)
		x, ok := p.Root.(*InsertSplit)
		if err != nil || !ok {
			t.Fatalf("%s: %v %v", c.sql, p, err)
		}
		sql, params, err := x.SplitInsertParams(0, c.rows)
		if err != nil {
			t.Fatalf("%s: %v", c.sql, err)
		}
		if !slices.Equal(params, c.params) {
			t.Errorf("%s rows %v: parameters %v, want %v", c.sql, c.rows, params, c.params)
		}
		if c.want != "" && sql != c.want {
			t.Errorf("%s rows %v:\n got %s\nwant %s", c.sql, c.rows, sql, c.want)
		}
	}
}
