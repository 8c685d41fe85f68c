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

func TestAdvisoryOnly(t *testing.T) {
	for sql, want := range map[string]bool{
		"SELECT pg_advisory_unlock(1)":                               true,
		"select pg_catalog.pg_advisory_lock($1)":                     true,
		"SELECT pg_try_advisory_lock(1, 2), now()":                   true,
		"SELECT pg_advisory_unlock_all()":                            true,
		"SELECT pg_advisory_lock(id) FROM t":                         false,
		"SELECT * FROM pg_advisory_lock(1)":                          false,
		"SELECT pg_advisory_lock((SELECT max(id) FROM t))":           false,
		"SELECT pg_advisory_lock(1), f()":                            false,
		"SELECT 1":                                                   false,
		"SELECT pg_advisory_lock(1); SELECT pg_advisory_unlock(1)":   false,
		"SELECT pg_advisory_lock('t'::regclass::oid::bigint)":        false,
		"SELECT pg_advisory_lock(1) INTO x":                          false,
		"WITH a AS (SELECT 1) SELECT pg_advisory_lock(1)":            false,
		"SELECT pg_advisory_lock(hashtext('x'))":                     false,
		"SELECT pg_advisory_lock(length('abc'))":                     true,
		"VALUES (pg_advisory_lock(1))":                               true,
		"SELECT pg_advisory_lock(1) WHERE EXISTS (SELECT FROM t)":    false,
		"SELECT pg_advisory_lock(1) FROM generate_series(1, 2) g":    false,
		"SELECT pg_advisory_xact_lock(1)":                            true,
		"EXPLAIN SELECT pg_advisory_lock(1)":                         false,
		"SELECT pg_advisory_lock(1) FOR UPDATE":                      true,
		"SELECT pg_advisory_lock(c) FROM (VALUES (1)) v(c)":          false,
		"SELECT pg_advisory_lock(1)::text || pg_backend_pid()::text": false,
	} {
		if got := AdvisoryOnly(sql); got != want {
			t.Errorf("AdvisoryOnly(%q) = %v, want %v", sql, got, want)
		}
	}
}
