package coordinator

import (
	"reflect"
	"testing"
)

func TestLiftLiterals(t *testing.T) {
	cases := []struct {
		sql, norm string
		values    []string
	}{
		{"SELECT abalance FROM pgbench_accounts WHERE aid = 48213;", "SELECT abalance FROM pgbench_accounts WHERE aid = $1;", []string{"48213"}},
		{"UPDATE t SET v = 'it''s' WHERE id = -7", "UPDATE t SET v = $1 WHERE id = -$2", []string{"it's", "7"}},
		{"SELECT * FROM t WHERE d = date '2020-01-01' AND x = 1.5e3", "SELECT * FROM t WHERE d = date '2020-01-01' AND x = $1", []string{"1.5e3"}},
		{"SELECT * FROM t1 WHERE c = E'a\\'b' AND k = 2 -- 3\n", "SELECT * FROM t1 WHERE c = E'a\\'b' AND k = $1 -- 3\n", []string{"2"}},
		{`SELECT "col1" FROM "T2" WHERE $$x$$ = 'y' /* 9 */`, `SELECT "col1" FROM "T2" WHERE $$x$$ = $1 /* 9 */`, []string{"y"}},
		{"INSERT INTO t (a, b) VALUES (1, 'x')", "INSERT INTO t (a, b) VALUES ($1, $2)", []string{"1", "x"}},
		{`UPDATE t SET v='c' WHERE v LIKE 'v%' ESCAPE'\' AND aid = 7`, `UPDATE t SET v=$1 WHERE v LIKE 'v%' ESCAPE'\' AND aid = $2`, []string{"c", "7"}},
		// Numbers after keywords are lifted, but not after BY (ORDER BY 1
		// names a column).
		{"SELECT a FROM t WHERE k BETWEEN 5 AND 5 + 999 ORDER BY 1 LIMIT 10", "SELECT a FROM t WHERE k BETWEEN $1 AND $2 + $3 ORDER BY 1 LIMIT $4", []string{"5", "5", "999", "10"}},
		{"SELECT a FROM t GROUP by 1, 2", "SELECT a FROM t GROUP by 1, $1", []string{"2"}},
	}
	for _, c := range cases {
		norm, lits, ok := liftLiterals(c.sql)
		if !ok {
			t.Errorf("liftLiterals(%q) lifted nothing", c.sql)
			continue
		}
		var vals []string
		for _, l := range lits {
			vals = append(vals, l.value)
		}
		if norm != c.norm || !reflect.DeepEqual(vals, c.values) {
			t.Errorf("liftLiterals(%q) = %q %q, want %q %q", c.sql, norm, vals, c.norm, c.values)
		}
		if back, ok := spliceLiterals(norm, lits); back != c.sql || !ok {
			t.Errorf("splice(lift(%q)) = %q", c.sql, back)
		}
	}
	for _, sql := range []string{"SELECT now()", "SELECT $1", "SELECT 0x1F", "SELECT * FROM t WHERE v = '"} {
		if _, _, ok := liftLiterals(sql); ok {
			t.Errorf("liftLiterals(%q) lifted something", sql)
		}
	}
}
