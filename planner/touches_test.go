package planner

import "testing"

func TestTouchesNothing(t *testing.T) {
	for sql, want := range map[string]bool{
		"SELECT 1":                            true,
		"SELECT 1 + 2, 'a' || 'b'":            true,
		"SET work_mem = '8MB'":                true,
		"SHOW work_mem":                       true,
		"SAVEPOINT s; RELEASE s":              true,
		"COMMIT":                              true,
		"VALUES (1), (2)":                     true,
		"SELECT syntax error (":               true,
		"SELECT a FROM loc":                   false,
		"SELECT nextval('sq')":                false,
		"SELECT 'loc'::regclass":              false,
		"SELECT 1; SELECT a FROM loc":         false,
		"INSERT INTO loc VALUES (1)":          false,
		"CREATE TABLE x (a int)":              false,
		"SELECT (SELECT count(*) FROM x)":     false,
		"SELECT * FROM generate_series(1, 2)": false,
		"SELECT 1 INTO t":                     false,
		"DO $$ BEGIN END $$":                  false,
	} {
		if got := TouchesNothing(sql); got != want {
			t.Errorf("TouchesNothing(%q) = %v, want %v", sql, got, want)
		}
	}
}
