package planner

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkBuildInsertRows plans an INSERT of 1,000 rows of text literals
// with casts, the statement an INSERT ... SELECT that does not push down
// becomes on the coordinator. Compare it with BenchmarkBuildPointSelect to
// see what a row costs against a whole short statement.
func BenchmarkBuildInsertRows(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("INSERT INTO orders (id, note, amount) VALUES ")
	for i := range 1000 {
		if i > 0 {
			sb.WriteString(", ")
		}
		fmt.Fprintf(&sb, "('order%d'::text, 'note %d'::text, '%d.5'::numeric)", i, i, i)
	}
	benchBuild(b, sb.String())
}

// BenchmarkBuildPointSelect plans a point select by distribution column.
func BenchmarkBuildPointSelect(b *testing.B) {
	benchBuild(b, "SELECT abalance FROM accounts WHERE aid = 42")
}

func benchBuild(b *testing.B, sql string) {
	cat := testCatalog()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Build(sql, cat); err != nil {
			b.Fatal(err)
		}
	}
}
