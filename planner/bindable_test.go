package planner

import (
	"fmt"
	"testing"

	pg_query "github.com/pganalyze/pg_query_go/v5"
)

// TestBindable: which worker statements may take a simple-protocol
// statement's constants as bound parameters: every parameter compared
// with a column, a column's operand, a LIMIT or OFFSET, or a sum of two
// of them there; nothing PostgreSQL would fold from constants alone.
func TestBindable(t *testing.T) {
	for _, tc := range []struct {
		sql  string
		want string // "-": not bindable; else the sums
	}{
		{"SELECT g, count(*) FROM t WHERE aid BETWEEN $1 AND $2 + $3 GROUP BY g", "[{2 3 43}]"},
		{"SELECT count(*) FROM t WHERE s > $1 AND v IN ($3, $4)", "[]"},
		{"SELECT count(*) FROM t WHERE $1 < v AND v IS DISTINCT FROM $2 AND v = ANY($3)", "[]"},
		{"SELECT v + $1 FROM t ORDER BY v LIMIT $2 OFFSET $3", "[]"},
		{"SELECT v FROM t ORDER BY v LIMIT $1 - $2", "[{1 2 45}]"},
		{"SELECT count(*) FROM t WHERE v NOT BETWEEN $1 AND $2", "[]"},
		{"SELECT count(*) FROM t", "[]"},
		// Constants alone, folded by PostgreSQL when it plans.
		{"SELECT count(*) FROM t WHERE v = $1 / $2", "-"},
		{"SELECT count(*) FROM t WHERE v = $1 * $2", "-"},
		{"SELECT count(*) FROM t WHERE v = -$1", "-"},
		{"SELECT count(*) FROM t WHERE v = $1 + $2 + $3", "-"},
		{"SELECT count(*) FROM t WHERE v = abs($1)", "-"},
		{"SELECT count(*) FROM t WHERE v = CASE WHEN $1 > 0 THEN 1 END", "-"},
		{"SELECT count(*) FROM t WHERE $1 = $2", "-"},
		{"SELECT $1, count(*) FROM t", "-"},
		{"SELECT count(*) FROM t WHERE v::varchar(3) = $1::varchar(3)", "-"},
		// A cast is a function PostgreSQL folds: 40000::int2 fails the text.
		{"SELECT count(*) FROM t WHERE v < $1::int2", "-"},
		{"SELECT count(*) FROM t WHERE v IN ($1::int2, $2)", "-"},
		{"SELECT count(*) FROM t WHERE v + $1 = $2", "-"},
		{"SELECT count(*) FROM t WHERE s LIKE $1", "-"},
		{"SELECT count(*) FROM t WHERE (v, g) = ($1, $2)", "-"},
		{"SELECT count(*) FROM t WHERE v = $1 COLLATE \"C\"", "-"},
		{"SELECT count(*) FROM t HAVING count(*) > $1", "-"},
	} {
		tree, err := pg_query.Parse(tc.sql)
		if err != nil {
			t.Fatal(err)
		}
		b := bindable(tree.Stmts[0].Stmt)
		got := "-"
		if b != nil {
			got = fmt.Sprint(b.Sums)
			if b.Sums == nil {
				got = "[]"
			}
		}
		if got != tc.want {
			t.Errorf("%s: bindable %s, want %s", tc.sql, got, tc.want)
		}
	}
}
