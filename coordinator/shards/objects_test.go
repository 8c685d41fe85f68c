package shards

import "testing"

func TestObjectDDL(t *testing.T) {
	cases := []struct{ sql, other string }{
		{"CREATE TYPE mood AS ENUM ('a', 'b')", "DO $pgfleet$ BEGIN CREATE TYPE mood AS ENUM ('a', 'b'); EXCEPTION WHEN duplicate_object OR duplicate_schema THEN NULL; END $pgfleet$"},
		{"ALTER TYPE mood ADD VALUE 'c' BEFORE 'a'", "ALTER TYPE mood ADD VALUE IF NOT EXISTS 'c' BEFORE 'a'"},
		{"CREATE SCHEMA s", "CREATE SCHEMA IF NOT EXISTS s"},
		{"DROP TYPE mood", "DROP TYPE IF EXISTS mood"},
		{"DROP FUNCTION f(int)", "SET LOCAL check_function_bodies = off; DO $pgfleet$ BEGIN DROP FUNCTION IF EXISTS f(int); EXCEPTION WHEN OTHERS THEN NULL; END $pgfleet$"},
		// Not propagated: CASCADE, schema elements, several statements,
		// other DDL.
		{"DROP TYPE mood CASCADE", ""},
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
