package coordinator_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestObjectDDLEveryWorkerOrRefused: DDL on functions, types, domains and
// schemas reaches every worker (ALTER DOMAIN, ALTER TYPE ... RENAME,
// CREATE OR REPLACE FUNCTION, ALTER FUNCTION, COMMENT ON, GRANT) or is
// refused with 0A000: inside a transaction block, DROP ... CASCADE, ALTER
// SCHEMA ... RENAME of a schema holding a distributed table.
func TestObjectDDLEveryWorkerOrRefused(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	c := connect(t, srv.Addr())
	cleanup := func() {
		for _, s := range cl.Servers {
			w := connect(t, s.Addr())
			for _, q := range []string{"DROP TABLE IF EXISTS od_t, od_s2.t, od_s.t", "DROP FUNCTION IF EXISTS od_f(), od_f2()",
				"DROP DOMAIN IF EXISTS od_pos", "DROP TYPE IF EXISTS od_mood, od_mood2", "DROP SCHEMA IF EXISTS od_s, od_s2, od_e, od_e2"} {
				_, _ = w.Exec(ctx, q)
			}
		}
	}
	cleanup()
	t.Cleanup(func() {
		_, _ = c.Exec(ctx, "SELECT undistribute_table('od_t')", simple)
		_, _ = c.Exec(ctx, "SELECT undistribute_table('od_s.t')", simple)
		cleanup()
	})
	exec(t, c, "CREATE DOMAIN od_pos AS int", simple)
	exec(t, c, "CREATE TYPE od_mood AS ENUM ('a', 'b')", simple)
	exec(t, c, "CREATE FUNCTION od_f() RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT 1'", simple)
	testTable(t, c, "od_t", "(id int PRIMARY KEY, p od_pos, m od_mood)", "SELECT create_distributed_table('od_t', 'id', shard_count => 4)")
	for id := 1; id <= 8; id++ {
		exec(t, c, "INSERT INTO od_t (id, p, m) VALUES ($1, $2, 'a')", id, id)
	}

	// Inside a transaction block: refused, nothing changed.
	exec(t, c, "BEGIN", simple)
	if _, err := c.Exec(ctx, "CREATE OR REPLACE FUNCTION od_f() RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT 3'", simple); sqlState(err) != "0A000" {
		t.Errorf("CREATE OR REPLACE FUNCTION in a transaction block: %v, want 0A000", err)
	}
	exec(t, c, "ROLLBACK", simple)
	exec(t, c, "BEGIN", simple)
	if _, err := c.Exec(ctx, "ALTER DOMAIN od_pos ADD CONSTRAINT pos CHECK (VALUE > 0)", simple); sqlState(err) != "0A000" {
		t.Errorf("ALTER DOMAIN in a transaction block: %v, want 0A000", err)
	}
	exec(t, c, "ROLLBACK", simple)

	// Outside: every worker.
	exec(t, c, "CREATE OR REPLACE FUNCTION od_f() RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT 3'", simple)
	for id := 1; id <= 8; id++ {
		if got := queryString(t, c, "SELECT od_f()::text FROM od_t WHERE id = $1", id); got != "3" {
			t.Errorf("od_f() on row %d: %s, want 3", id, got)
		}
	}
	exec(t, c, "ALTER DOMAIN od_pos ADD CONSTRAINT pos CHECK (VALUE > 0)", simple)
	exec(t, c, "ALTER DOMAIN od_pos SET NOT NULL", simple)
	for id := 10; id <= 17; id++ {
		if _, err := c.Exec(ctx, "INSERT INTO od_t (id, p, m) VALUES ($1, -1, 'a')", id); sqlState(err) != "23514" {
			t.Errorf("row %d violating the domain's new CHECK: %v, want 23514", id, err)
		}
		if _, err := c.Exec(ctx, "INSERT INTO od_t (id, p, m) VALUES ($1, NULL, 'a')", id); sqlState(err) != "23502" {
			t.Errorf("row %d violating the domain's NOT NULL: %v, want 23502", id, err)
		}
	}
	// A constraint some shard's rows violate fails everywhere.
	if _, err := c.Exec(ctx, "ALTER DOMAIN od_pos ADD CONSTRAINT small CHECK (VALUE < 5)", simple); sqlState(err) != "23514" {
		t.Errorf("ALTER DOMAIN ADD CONSTRAINT violated by shard rows: %v, want 23514", err)
	}
	exec(t, c, "ALTER TYPE od_mood RENAME TO od_mood2", simple)
	exec(t, c, "ALTER TYPE od_mood2 RENAME VALUE 'b' TO 'c'", simple)
	exec(t, c, "ALTER FUNCTION od_f() RENAME TO od_f2", simple)
	exec(t, c, "COMMENT ON FUNCTION od_f2() IS 'three'", simple)
	exec(t, c, "REVOKE EXECUTE ON FUNCTION od_f2() FROM PUBLIC", simple)
	exec(t, c, "CREATE SCHEMA od_e", simple)
	exec(t, c, "ALTER SCHEMA od_e RENAME TO od_e2", simple)
	for _, s := range cl.Servers {
		w := connect(t, s.Addr())
		if got := queryString(t, w, "SELECT count(*)::text FROM pg_type WHERE typname = 'od_mood2'"); got != "1" {
			t.Errorf("od_mood2 on %s: %s", s.Addr(), got)
		}
		if got := queryString(t, w, "SELECT string_agg(enumlabel, ',' ORDER BY enumsortorder) FROM pg_enum WHERE enumtypid = 'od_mood2'::regtype"); got != "a,c" {
			t.Errorf("od_mood2 labels on %s: %s", s.Addr(), got)
		}
		if got := queryString(t, w, "SELECT coalesce(obj_description('od_f2()'::regprocedure, 'pg_proc'), '') || ' ' || has_function_privilege('public', 'od_f2()', 'EXECUTE')::text"); got != "three false" {
			t.Errorf("od_f2 on %s: %s", s.Addr(), got)
		}
		if got := queryString(t, w, "SELECT count(*)::text FROM pg_namespace WHERE nspname = 'od_e2'"); got != "1" {
			t.Errorf("schema od_e2 on %s: %s", s.Addr(), got)
		}
	}
	if got := queryString(t, c, "SELECT count(*)::text FROM od_t WHERE m = 'a'::od_mood2 AND od_f2() = 3"); got != "8" {
		t.Errorf("rows after the renames: %s, want 8", got)
	}

	// Refused: DROP ... CASCADE, renaming a schema with a distributed table.
	if _, err := c.Exec(ctx, "DROP DOMAIN od_pos CASCADE", simple); sqlState(err) != "0A000" {
		t.Errorf("DROP DOMAIN ... CASCADE: %v, want 0A000", err)
	}
	exec(t, c, "CREATE SCHEMA od_s", simple)
	testTable(t, c, "od_s.t", "(id int PRIMARY KEY)", "SELECT create_distributed_table('od_s.t', 'id', shard_count => 4)")
	exec(t, c, "INSERT INTO od_s.t (id) VALUES (1), (2), (3)", simple)
	if _, err := c.Exec(ctx, "ALTER SCHEMA od_s RENAME TO od_s2", simple); sqlState(err) != "0A000" {
		t.Errorf("ALTER SCHEMA ... RENAME with a distributed table: %v, want 0A000", err)
	}
	if got := queryString(t, c, "SELECT count(*)::text FROM od_s.t"); got != "3" {
		t.Errorf("od_s.t: %s rows, want 3", got)
	}
}
