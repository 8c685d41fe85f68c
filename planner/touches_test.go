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

func TestAdvisoryUnlockOnly(t *testing.T) {
	for sql, want := range map[string]bool{
		"SELECT pg_advisory_unlock(1)":                                          true,
		"select pg_catalog.pg_advisory_unlock($1)":                              true,
		"SELECT pg_advisory_unlock(1, 2), pg_advisory_unlock_shared(3::bigint)": true,
		"SELECT pg_advisory_unlock_all()":                                       true,
		"SELECT pg_advisory_unlock(1) AS released":                              true,
		"SELECT pg_advisory_lock(1)":                                            false,
		"SELECT pg_try_advisory_lock(1)":                                        false,
		"SELECT pg_advisory_unlock(id) FROM t":                                  false,
		"SELECT * FROM pg_advisory_unlock(1)":                                   false,
		"SELECT pg_advisory_unlock((SELECT max(id) FROM t))":                    false,
		"SELECT pg_advisory_unlock(current_setting('app.k')::bigint)":           false,
		"SELECT pg_advisory_unlock(1), now()":                                   false,
		"SELECT pg_advisory_unlock(1); SELECT 1":                                false,
		"SELECT pg_advisory_unlock(1) INTO x":                                   false,
		"WITH a AS (SELECT 1) SELECT pg_advisory_unlock(1)":                     false,
		"SELECT pg_advisory_unlock(1) WHERE true":                               false,
		"SELECT pg_advisory_unlock(1) UNION SELECT true":                        false,
		"VALUES (pg_advisory_unlock(1))":                                        false,
		"SELECT 1":                                                              false,
		"SELECT public.pg_advisory_unlock(1)":                                   false,
	} {
		if got := AdvisoryUnlockOnly(sql); got != want {
			t.Errorf("AdvisoryUnlockOnly(%q) = %v, want %v", sql, got, want)
		}
	}
}
