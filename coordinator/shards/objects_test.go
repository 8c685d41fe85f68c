package shards

import "testing"

func TestObjectDDL(t *testing.T) {
	cases := []struct{ sql, other string }{
		{"CREATE TYPE mood AS ENUM ('a', 'b')", "DO $pgfleet$ BEGIN CREATE TYPE mood AS ENUM ('a', 'b'); EXCEPTION WHEN duplicate_object OR duplicate_schema THEN NULL; END $pgfleet$"},
		{"ALTER TYPE mood ADD VALUE 'c' BEFORE 'a'", "ALTER TYPE mood ADD VALUE IF NOT EXISTS 'c' BEFORE 'a'"},
		{"CREATE SCHEMA s", "CREATE SCHEMA IF NOT EXISTS s"},
		{"DROP TYPE mood", "DROP TYPE IF EXISTS mood"},
		{"DROP FUNCTION f(int)", "SET LOCAL check_function_bodies = off; DO $pgfleet$ BEGIN DROP FUNCTION IF EXISTS f(int); EXCEPTION WHEN OTHERS THEN NULL; END $pgfleet$"},
		// CASCADE in its RESTRICT form (CascadeAsRestrict).
		{"DROP TYPE mood CASCADE", "DROP TYPE IF EXISTS mood"},
		// Not propagated: schema elements, several statements, other DDL.
		{"CREATE SCHEMA s CREATE TABLE t (a int)", ""},
		{"CREATE TYPE a AS ENUM ('x'); CREATE TYPE b AS ENUM ('y')", ""},
		{"CREATE TABLE t (a int)", ""},
		{"DROP TABLE t", ""},
	}
	for _, c := range cases {
		got, ok := ObjectDDL(c.sql)
		if ok != (c.other != "") || got != c.other {
			t.Errorf("%s:\n got %q (%v)\nwant %q", c.sql, got, ok, c.other)
		}
	}
}

func TestCascadeAsRestrict(t *testing.T) {
	for sql, want := range map[string]string{
		"DROP FUNCTION IF EXISTS f CASCADE":       "DROP FUNCTION IF EXISTS f",
		"drop type a.mood, b cascade":             "DROP TYPE a.mood, b",
		"DROP FUNCTION f(int)":                    "",
		"DROP TABLE t CASCADE":                    "",
		"DROP SCHEMA s CASCADE":                   "",
		"DROP TYPE a CASCADE; DROP TYPE b":        "",
		"DROP EXTENSION IF EXISTS hstore CASCADE": "DROP EXTENSION IF EXISTS hstore",
	} {
		got, ok := CascadeAsRestrict(sql)
		if ok != (want != "") || got != want {
			t.Errorf("CascadeAsRestrict(%q) = %q, %v; want %q", sql, got, ok, want)
		}
	}
}
