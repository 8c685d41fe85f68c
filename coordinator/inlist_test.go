package coordinator

import (
	"fmt"
	"strings"
	"testing"
)

func TestCollapseLists(t *testing.T) {
	list := func(n int, quote bool) string {
		items := make([]string, n)
		for i := range items {
			items[i] = fmt.Sprint(i)
			if quote {
				items[i] = "'" + items[i] + "'"
			}
		}
		return strings.Join(items, ",")
	}
	cases := []struct {
		sql, norm string
		lits      int
	}{
		{"SELECT * FROM t WHERE a = 5 AND id IN (" + list(100, false) + ") AND b = 'x'", "SELECT * FROM t WHERE a = $1 AND id IN ($2) AND b = $3", 3},
		{"SELECT * FROM t WHERE id NOT in(" + list(64, true) + ")", "SELECT * FROM t WHERE id NOT in($1)", 1},
		// Short lists, lists of other things and text that only looks
		// like a list stay.
		{"SELECT * FROM t WHERE id IN (" + list(63, false) + ")", "", 63},
		{"SELECT * FROM t WHERE id IN (" + list(70, false) + ", 1 + 2)", "", 72},
		{"SELECT E'in (' || 'x' FROM t WHERE v IN (SELECT 1)", "", 2},
		{"SELECT * FROM t WHERE t IN (" + list(70, false) + ", 'now')", "", 71},
	}
	for _, c := range cases {
		norm, lits, ok := liftLiterals(c.sql)
		if !ok {
			t.Fatalf("%.60s: not lifted", c.sql)
		}
		got, glits := collapseLists(norm, lits)
		want := c.norm
		if want == "" {
			want = norm
		}
		if got != want || len(glits) != c.lits {
			t.Errorf("%.80s:\n got %.80s (%d literals)\nwant %.80s (%d)", c.sql, got, len(glits), want, c.lits)
			continue
		}
		if back, ok := spliceLiterals(got, glits); !ok || strings.ReplaceAll(back, " ", "") != strings.ReplaceAll(c.sql, " ", "") {
			t.Errorf("%.80s: spliced back as %.80s (%v)", c.sql, back, ok)
		}
	}
}
