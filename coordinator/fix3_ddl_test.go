package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/internal/pgcluster"
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
				"DROP DOMAIN IF EXISTS od_pos", "DROP TYPE IF EXISTS od_mood, od_mood2", "DROP SCHEMA IF EXISTS od_s, od_s2, od_e, od_e2, od_e3"} {
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

	// Inside a transaction block: on every worker, in the transaction:
	// ROLLBACK undoes it everywhere, COMMIT keeps it everywhere, an error
	// on any worker (shard rows against a new domain constraint) fails
	// the transaction.
	onEvery := func(q string) []string { return onEveryWorker(t, cl, q) }
	exec(t, c, "BEGIN", simple)
	exec(t, c, "CREATE OR REPLACE FUNCTION od_f() RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT 3'", simple)
	if got := queryString(t, c, "SELECT od_f()::text"); got != "3" {
		t.Errorf("od_f() in the transaction that replaced it: %s, want 3", got)
	}
	exec(t, c, "ROLLBACK", simple)
	if got := onEvery("SELECT od_f()::text"); slices.ContainsFunc(got, func(v string) bool { return v != "1" }) {
		t.Errorf("od_f() on the workers after ROLLBACK: %v, want 1 everywhere", got)
	}
	exec(t, c, "BEGIN", simple)
	exec(t, c, "ALTER DOMAIN od_pos ADD CONSTRAINT pos CHECK (VALUE > 0)", simple)
	exec(t, c, "COMMIT", simple)
	if got := onEvery("SELECT count(*)::text FROM pg_constraint WHERE conname = 'pos'"); slices.ContainsFunc(got, func(v string) bool { return v != "1" }) {
		t.Errorf("the domain constraint on the workers after COMMIT: %v, want it everywhere", got)
	}
	exec(t, c, "BEGIN", simple)
	if _, err := c.Exec(ctx, "ALTER DOMAIN od_pos ADD CONSTRAINT big CHECK (VALUE > 4)", simple); sqlState(err) != "23514" {
		t.Errorf("ALTER DOMAIN against shard rows in a transaction block: %v, want 23514", err)
	}
	if st := c.PgConn().TxStatus(); st != 'E' {
		t.Errorf("status after the failed ALTER DOMAIN: %c, want E", st)
	}
	exec(t, c, "ROLLBACK", simple)
	if got := onEvery("SELECT count(*)::text FROM pg_constraint WHERE conname = 'big'"); slices.ContainsFunc(got, func(v string) bool { return v != "0" }) {
		t.Errorf("the failed constraint on the workers: %v, want none", got)
	}
	exec(t, c, "ALTER DOMAIN od_pos DROP CONSTRAINT pos", simple)
	// A function made in a transaction block leaves the transaction's
	// settings as they were on every worker (check_function_bodies was
	// left off on the others, and multi-shard queries were refused after
	// it as after a SET; adversary).
	exec(t, c, "BEGIN", simple)
	exec(t, c, "CREATE FUNCTION od_f9() RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT 2'", simple)
	if got := queryString(t, c, "SELECT count(*)::text FROM od_t"); got != "8" {
		t.Errorf("a multi-shard count after CREATE FUNCTION in the transaction: %s, want 8", got)
	}
	if got := queryString(t, c, "SELECT string_agg(DISTINCT current_setting('check_function_bodies'), ',') FROM od_t"); got != "on" {
		t.Errorf("check_function_bodies on the shards' workers in the transaction: %s, want on", got)
	}
	exec(t, c, "COMMIT", simple)
	if got := onEvery("SELECT (to_regprocedure('od_f9()') IS NOT NULL)::text"); slices.ContainsFunc(got, func(v string) bool { return v != "true" }) {
		t.Errorf("the function made in a transaction, on the workers: %v", got)
	}
	exec(t, c, "DROP FUNCTION od_f9()", simple)
	// A type made and changed in one transaction block (pgx's
	// TestLoadCompositeType; migrations), then rolled back: gone everywhere.
	exec(t, c, "BEGIN", simple)
	exec(t, c, "CREATE TYPE od_comp AS (a int, b int)", simple)
	exec(t, c, "ALTER TYPE od_comp DROP ATTRIBUTE a", simple)
	if got := queryString(t, c, "SELECT count(*)::text FROM pg_attribute WHERE attrelid = 'od_comp'::regclass AND attnum > 0 AND NOT attisdropped"); got != "1" {
		t.Errorf("attributes of the changed type in its transaction: %s, want 1", got)
	}
	exec(t, c, "ROLLBACK", simple)
	if got := onEvery("SELECT (to_regtype('od_comp') IS NULL)::text"); slices.ContainsFunc(got, func(v string) bool { return v != "true" }) {
		t.Errorf("the rolled-back type on the workers: %v, want gone everywhere", got)
	}

	// In a batch: one statement at a time in the batch's transaction,
	// each change on every worker; an error undoes the batch everywhere.
	exec(t, c, "SELECT 1; ALTER TYPE od_mood RENAME VALUE 'b' TO 'x'; ALTER TYPE od_mood ADD VALUE 'y'", simple)
	if got := onEvery("SELECT string_agg(enumlabel, ',' ORDER BY enumsortorder) FROM pg_enum WHERE enumtypid = 'od_mood'::regtype"); slices.ContainsFunc(got, func(v string) bool { return v != "a,x,y" }) {
		t.Errorf("od_mood's labels on the workers after a batch: %v, want a,x,y everywhere", got)
	}
	if _, err := c.Exec(ctx, "ALTER TYPE od_mood RENAME VALUE 'x' TO 'b'; SELECT 1/0", simple); sqlState(err) != "22012" {
		t.Errorf("a batch failing after ALTER TYPE: %v, want 22012", err)
	}
	exec(t, c, "ALTER TYPE od_mood RENAME VALUE 'x' TO 'b'; SELECT 1", simple)
	if got := onEvery("SELECT string_agg(enumlabel, ',' ORDER BY enumsortorder) FROM pg_enum WHERE enumtypid = 'od_mood'::regtype"); slices.ContainsFunc(got, func(v string) bool { return v != "a,b,y" }) {
		t.Errorf("od_mood's labels on the workers after the batches: %v, want a,b,y everywhere", got)
	}
	exec(t, c, "CREATE SCHEMA od_e3; SELECT 1", simple)

	// With the extended protocol: every worker too (bridge.go).
	if err := c.PgConn().ExecParams(ctx, "CREATE OR REPLACE FUNCTION od_f() RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT 3'",
		nil, nil, nil, nil).Read().Err; err != nil {
		t.Errorf("CREATE OR REPLACE FUNCTION with the extended protocol: %v", err)
	}
	if got := onEvery("SELECT od_f()::text"); slices.ContainsFunc(got, func(v string) bool { return v != "3" }) {
		t.Errorf("od_f() on the workers after CREATE OR REPLACE over the extended protocol: %v, want 3 everywhere", got)
	}
	exec(t, c, "CREATE OR REPLACE FUNCTION od_f() RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT 1'", simple)

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
		if got := queryString(t, w, "SELECT string_agg(enumlabel, ',' ORDER BY enumsortorder) FROM pg_enum WHERE enumtypid = 'od_mood2'::regtype"); got != "a,c,y" {
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

	// DROP ... CASCADE of what nothing depends on drops it everywhere, in
	// a block too (migration tools' down steps); of what a table depends
	// on: 0A000 naming the dependents, and nothing dropped anywhere.
	exec(t, c, "CREATE TYPE od_unused AS ENUM ('u')", simple)
	exec(t, c, "CREATE FUNCTION od_g() RETURNS int LANGUAGE sql AS 'SELECT 1'", simple)
	exec(t, c, "DROP TYPE od_unused CASCADE", simple)
	exec(t, c, "BEGIN", simple)
	exec(t, c, "DROP FUNCTION IF EXISTS od_g CASCADE", simple)
	exec(t, c, "COMMIT", simple)
	exec(t, c, "DROP FUNCTION IF EXISTS od_missing CASCADE", simple)
	_, err := c.Exec(ctx, "DROP DOMAIN od_pos CASCADE", simple)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "0A000" || !strings.Contains(pe.Detail, "od_t") {
		t.Errorf("DROP DOMAIN ... CASCADE of a distributed table's column type: %+v, want 0A000 with a detail naming od_t", err)
	}
	if pe != nil && strings.Contains(pe.Detail, "od_t_") {
		t.Errorf("DROP DOMAIN ... CASCADE: the detail names shards: %q", pe.Detail)
	}
	// Without CASCADE: PostgreSQL's own 2BP01.
	if _, err := c.Exec(ctx, "DROP DOMAIN od_pos", simple); sqlState(err) != "2BP01" {
		t.Errorf("DROP DOMAIN of a column's type: %v, want 2BP01", err)
	}
	// DROP TABLE ... CASCADE of a distributed table: dropped everywhere
	// when nothing depends on it; 0A000 naming the view that does.
	testTable(t, c, "od_drop", "(id int PRIMARY KEY)", "SELECT create_distributed_table('od_drop', 'id', shard_count => 4)")
	home := connect(t, cl.Servers[0].Addr()) // (pgfleet refuses such a view itself)
	exec(t, home, "CREATE VIEW od_drop_v AS SELECT id FROM od_drop", simple)
	_, err = c.Exec(ctx, "DROP TABLE od_drop CASCADE", simple)
	if !errors.As(err, &pe) || pe.Code != "0A000" || !strings.Contains(pe.Detail, "od_drop_v") {
		t.Errorf("DROP TABLE ... CASCADE with a view on it: %+v, want 0A000 naming the view", err)
	}
	exec(t, home, "DROP VIEW od_drop_v", simple)
	exec(t, c, "DROP TABLE od_drop CASCADE", simple)
	for _, s := range cl.Servers {
		if got := queryString(t, connect(t, s.Addr()), "SELECT count(*)::text FROM pg_class WHERE relname LIKE 'od_drop%'"); got != "0" {
			t.Errorf("on %s after DROP TABLE ... CASCADE: %s relations left", s.Addr(), got)
		}
	}
	for _, s := range cl.Servers {
		w := connect(t, s.Addr())
		if got := queryString(t, w, "SELECT count(*)::text FROM pg_type WHERE typname IN ('od_unused', 'od_pos')"); got != "1" {
			t.Errorf("on %s after the drops: %s of od_unused and od_pos, want od_pos only", s.Addr(), got)
		}
		if got := queryString(t, w, "SELECT count(*)::text FROM pg_proc WHERE proname = 'od_g'"); got != "0" {
			t.Errorf("od_g on %s after DROP FUNCTION ... CASCADE: %s", s.Addr(), got)
		}
	}

	// DROP SCHEMA ... CASCADE: on every worker too (it reached the first
	// one only, leaving the schema's types on the others); refused when an
	// object outside the schema depends on what it holds.
	exec(t, c, "CREATE SCHEMA od_zx", simple)
	exec(t, c, "CREATE TYPE od_zx.e AS ENUM ('a')", simple)
	exec(t, c, "CREATE TABLE od_zx.l (k od_zx.e)", simple)
	exec(t, c, "CREATE TABLE od_outside (k od_zx.e)", simple)
	if _, err := c.Exec(ctx, "DROP SCHEMA od_zx CASCADE", simple); sqlState(err) != "0A000" {
		t.Errorf("DROP SCHEMA ... CASCADE of a schema whose type a table outside uses: %v, want 0A000", err)
	}
	exec(t, c, "DROP TABLE od_outside", simple)
	exec(t, c, "DROP SCHEMA od_zx CASCADE", simple)
	for _, s := range cl.Servers {
		if got := queryString(t, connect(t, s.Addr()), "SELECT count(*)::text FROM pg_namespace WHERE nspname = 'od_zx'"); got != "0" {
			t.Errorf("schema od_zx left on %s", s.Addr())
		}
	}

	// Refused: renaming a schema with a distributed table.
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

// TestHiddenReadsRefused: statements that would read a distributed table's
// empty copy on the default node through a way the text hides are refused
// with 0A000: a function body naming the table with Unicode escapes,
// ts_stat and ts_rewrite with a query, schema_to_xml, a row-level security
// policy naming the table (made before or after distribution).
func TestHiddenReadsRefused(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	c := connect(t, srv.Addr())
	for _, q := range []string{"DROP TABLE IF EXISTS hr_pl, hr_pl2", "DROP FUNCTION IF EXISTS hr_ff(), hr_ff2()"} {
		exec(t, c, q, simple)
	}
	testTable(t, c, "q7", "(id int PRIMARY KEY, t text)", "SELECT create_distributed_table('q7', 'id', shard_count => 4)")
	exec(t, c, "INSERT INTO q7 (id, t) VALUES (1, 'a b'), (2, 'b c'), (3, 'c d')", simple)
	exec(t, c, "CREATE TABLE hr_pl (a int)", simple)
	exec(t, c, "CREATE TABLE hr_pl2 (a int)", simple)
	t.Cleanup(func() {
		_, _ = c.Exec(ctx, "DROP TABLE IF EXISTS hr_pl, hr_pl2", simple)
		_, _ = c.Exec(ctx, "DROP FUNCTION IF EXISTS hr_ff(), hr_ff2()", simple)
	})
	for _, q := range []string{
		`CREATE FUNCTION hr_ff() RETURNS bigint LANGUAGE sql AS $$ SELECT count(*) FROM U&"\0071\0037" $$`,
		`CREATE FUNCTION hr_ff2() RETURNS bigint LANGUAGE sql AS $$ SELECT count(*) FROM U&"!0071!0037" UESCAPE '!' $$`,
		`SELECT count(*) FROM ts_stat('SELECT to_tsvector(t) FROM q7')`,
		`SELECT ts_rewrite('a & b'::tsquery, 'SELECT ''a''::tsquery, ''c''::tsquery FROM q7')`,
		`SELECT schema_to_xml('public', true, false, '')`,
		`SELECT database_to_xml(true, false, '')`,
		`CREATE POLICY hr_p ON hr_pl USING (a IN (SELECT id FROM q7))`,
	} {
		if _, err := c.Exec(ctx, q, simple); sqlState(err) != "0A000" {
			t.Errorf("%s: %v, want 0A000", q, err)
		}
	}
	// A policy made before distribution.
	testTable(t, c, "q7p", "(id int PRIMARY KEY)", "SELECT 1")
	exec(t, c, "CREATE POLICY hr_p2 ON hr_pl2 USING (a IN (SELECT id FROM q7p))", simple)
	if _, err := c.Exec(ctx, "SELECT create_distributed_table('q7p', 'id')", simple); sqlState(err) != "0A000" {
		t.Errorf("distributing a table a policy uses: %v, want 0A000", err)
	}
	exec(t, c, "DROP POLICY hr_p2 ON hr_pl2", simple)
	// A function with U& in its body, made before distribution.
	testTable(t, c, "q7f", "(id int PRIMARY KEY)", "SELECT 1")
	exec(t, c, `CREATE FUNCTION hr_ff() RETURNS bigint LANGUAGE sql AS $$ SELECT count(*) FROM U&"\0071\0037\0066" $$`, simple)
	if _, err := c.Exec(ctx, "SELECT create_distributed_table('q7f', 'id')", simple); sqlState(err) != "0A000" {
		t.Errorf("distributing a table a function may name with U&: %v, want 0A000", err)
	}
	exec(t, c, "DROP FUNCTION hr_ff()", simple)
	// Still allowed: a plain function, ts_stat on a local table.
	exec(t, c, "CREATE FUNCTION hr_ff() RETURNS bigint LANGUAGE sql AS $$ SELECT count(*) FROM hr_pl $$", simple)
	if got := queryString(t, c, "SELECT count(*)::text FROM ts_stat('SELECT to_tsvector(a::text) FROM hr_pl')"); got != "0" {
		t.Errorf("ts_stat on a local table: %s", got)
	}
}

// TestSessionStateHiddenInUserCode: setseed(), SET seed and temporary
// functions and types made by user code keep the server connection with
// the session: a later client sees none of it.
func TestSessionStateHiddenInUserCode(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(1))
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	w := connect(t, cl.Servers[0].Addr())
	exec(t, w, "SELECT setseed(0.5)", simple)
	first := queryString(t, w, "SELECT random()::text")
	for _, q := range []string{"SELECT setseed(0.5)", "SET seed = 0.5", "SET seed TO 0.5; SELECT 1"} {
		a := connect(t, srv.Addr())
		exec(t, a, q, simple)
		a.Close(ctx)
		b := connect(t, srv.Addr())
		if got := queryString(t, b, "SELECT random()::text"); got == first {
			t.Errorf("after %q in another session, random() continued its sequence: %s", q, got)
		}
		b.Close(ctx)
	}
	for _, q := range []string{
		`DO $$ BEGIN EXECUTE 'CREATE FUNCTION pg_temp.st_tf() RETURNS int LANGUAGE sql AS ''SELECT 1'''; END $$`,
		`DO $$ BEGIN EXECUTE 'CREATE TYPE pg_temp.st_ttyp AS (a int)'; END $$`,
	} {
		a := connect(t, srv.Addr())
		exec(t, a, q, simple)
		a.Close(ctx)
		b := connect(t, srv.Addr())
		if got := queryString(t, b, "SELECT (SELECT count(*) FROM pg_proc WHERE proname = 'st_tf' AND pronamespace = pg_my_temp_schema()) + "+
			"(SELECT count(*) FROM pg_type WHERE typname = 'st_ttyp' AND typnamespace = pg_my_temp_schema())"); got != "0" {
			t.Errorf("after %q in another session, a fresh client sees %s temporary objects", q, got)
		}
		b.Close(ctx)
	}
}

// TestUndistributeLockWaitBounded: undistribute_table waiting for a lock a
// worker's transaction holds on one shard (as concurrent writes spanning
// workers do, waiting in turn on its locks elsewhere) fails with 55P03
// after a bounded wait, changing nothing, instead of waiting forever; it
// succeeds once the lock is gone.
func TestUndistributeLockWaitBounded(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	c := connect(t, srv.Addr())
	testTable(t, c, "ul_t", "(id int PRIMARY KEY)", "SELECT create_distributed_table('ul_t', 'id', shard_count => 4)")
	for id := 1; id <= 40; id++ {
		exec(t, c, "INSERT INTO ul_t (id) VALUES ($1)", id)
	}
	meta := connect(t, cl.Servers[0].Addr())
	var shard int64
	var addr string
	if err := meta.QueryRow(ctx, `SELECT s.shardid, n.host || ':' || n.port FROM pgfleet.shards s JOIN pgfleet.placements p USING (shardid)
		JOIN pgfleet.nodes n USING (nodeid) WHERE s.table_name = 'public.ul_t' ORDER BY s.shardid DESC LIMIT 1`).Scan(&shard, &addr); err != nil {
		t.Fatal(err)
	}
	holder := connect(t, addr)
	exec(t, holder, "BEGIN", simple)
	exec(t, holder, fmt.Sprintf("LOCK TABLE pgfleet_shards.ul_t_%d IN ROW EXCLUSIVE MODE", shard), simple)
	_, err := c.Exec(ctx, "SELECT undistribute_table('ul_t')", simple)
	exec(t, holder, "ROLLBACK", simple)
	if sqlState(err) != "55P03" {
		t.Fatalf("undistribute_table while a shard is locked: %v, want 55P03", err)
	}
	if got := queryString(t, c, "SELECT count(*)::text FROM ul_t"); got != "40" {
		t.Errorf("rows after the failed undistribute_table: %s, want 40", got)
	}
	exec(t, c, "SELECT undistribute_table('ul_t')", simple)
	if got := queryString(t, c, "SELECT count(*)::text FROM ul_t"); got != "40" {
		t.Errorf("rows after undistribute_table: %s, want 40", got)
	}
}

// TestViewsChangingSessionState: reading a view that calls set_config(),
// an advisory lock function or a user function that changes settings (or
// a view over such a view) keeps the server connection with the session,
// in both protocols: a later client sees none of it.
func TestViewsChangingSessionState(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(1))
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	setup := connect(t, srv.Addr())
	for _, q := range []string{
		"DROP VIEW IF EXISTS vs_sv2, vs_sv, vs_av, vs_fv",
		"DROP FUNCTION IF EXISTS vs_f()",
		"CREATE VIEW vs_sv AS SELECT set_config('search_path', 'pg_catalog', false) AS s",
		"CREATE VIEW vs_sv2 AS SELECT * FROM vs_sv",
		"CREATE VIEW vs_av AS SELECT pg_advisory_lock(4242)::text AS l",
		"CREATE FUNCTION vs_f() RETURNS int LANGUAGE plpgsql AS $$ BEGIN PERFORM set_config('DateStyle', 'SQL, DMY', false); RETURN 1; END $$",
		"CREATE VIEW vs_fv AS SELECT vs_f() AS f",
	} {
		exec(t, setup, q, simple)
	}
	setup.Close(ctx)
	t.Cleanup(func() {
		c := connect(t, srv.Addr())
		_, _ = c.Exec(ctx, "DROP VIEW IF EXISTS vs_sv2, vs_sv, vs_av, vs_fv", simple)
		_, _ = c.Exec(ctx, "DROP FUNCTION IF EXISTS vs_f()", simple)
	})
	check := `SELECT current_setting('search_path') || ' ' || current_setting('DateStyle') || ' ' ||
		(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid())`
	b := connect(t, srv.Addr())
	want := queryString(t, b, check, simple)
	b.Close(ctx)
	for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeCacheStatement} {
		for _, q := range []string{"SELECT * FROM vs_sv", "SELECT * FROM vs_sv2", "SELECT * FROM vs_av", "SELECT * FROM vs_fv"} {
			a := connect(t, srv.Addr())
			if _, err := a.Exec(ctx, q, mode); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			a.Close(ctx)
			b := connect(t, srv.Addr())
			if got := queryString(t, b, check, simple); got != want {
				t.Errorf("after %q (mode %v) in another session, a fresh client has %q, want %q", q, mode, got, want)
			}
			b.Close(ctx)
		}
	}
}

// TestWriteToDroppedShardIsRetryable: a coordinator whose catalog lags
// behind undistribute_table routes statements to shards that no longer
// exist. A multi-shard read gets 40001 (retry), not 42P01, and the retry
// reads the table; a write outside a transaction block is run again by
// the coordinator itself (replay.go) and lands in the table.
func TestWriteToDroppedShardIsRetryable(t *testing.T) {
	cl := pgtest.Shared(t)
	a := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	ca := connect(t, a.Addr())
	testTable(t, ca, "ws13", "(id int PRIMARY KEY, v text)", "SELECT create_distributed_table('ws13', 'id', shard_count => 4)")
	b := pgtest.Coordinator(t, cl, func(c *coordinator.Config) { c.CatalogPoll = time.Hour })
	r := pgtest.Coordinator(t, cl, func(c *coordinator.Config) { c.CatalogPoll = time.Hour })
	cb := connect(t, b.Addr())
	cr := connect(t, r.Addr())
	for id := 1; id <= 4; id++ {
		exec(t, cb, "INSERT INTO ws13 (id, v) VALUES ($1, 'b')", id)
	}
	if got := queryString(t, cr, "SELECT count(*)::text FROM ws13"); got != "4" {
		t.Fatalf("rows before: %s", got)
	}
	exec(t, ca, "SELECT undistribute_table('ws13')", simple)
	// A multi-shard read through a lagging coordinator.
	if _, err := cr.Exec(ctx, "SELECT count(*) FROM ws13", simple); sqlState(err) != "40001" {
		t.Errorf("multi-shard read through the lagging coordinator: %v, want 40001", err)
	}
	if got := queryString(t, cr, "SELECT count(*)::text FROM ws13"); got != "4" {
		t.Errorf("rows read on retry: %s, want 4", got)
	}
	for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeCacheStatement} {
		id := 10
		if mode == simple {
			id = 11
		}
		if _, err := cb.Exec(ctx, "INSERT INTO ws13 (id, v) VALUES ($1, 'late')", mode, id); err != nil {
			t.Errorf("write through the lagging coordinator (mode %v): %v, want it run again on the table", mode, err)
		}
	}
	if got := queryString(t, ca, "SELECT count(*)::text FROM ws13"); got != "6" {
		t.Errorf("rows: %s, want 6", got)
	}
}

// TestExtensionsOnEveryWorker: CREATE, ALTER and DROP EXTENSION reach
// every worker (pgx's suite made hstore through a coordinator and found
// it on the first worker only), so a distributed table can use its types;
// inside a transaction block, ROLLBACK undoes it everywhere.
func TestExtensionsOnEveryWorker(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	onEvery := func(q string) []string { return onEveryWorker(t, cl, q) }
	has := "SELECT count(*)::text FROM pg_extension WHERE extname = 'citext'"
	exec(t, c, "DROP EXTENSION IF EXISTS citext", simple)
	t.Cleanup(func() {
		_, _ = c.Exec(context.Background(), "SELECT undistribute_table('ext_t')", simple)
		_, _ = c.Exec(context.Background(), "DROP TABLE IF EXISTS ext_t", simple)
		_, _ = c.Exec(context.Background(), "DROP EXTENSION IF EXISTS citext", simple)
	})
	exec(t, c, "BEGIN", simple)
	exec(t, c, "CREATE EXTENSION citext", simple)
	exec(t, c, "ROLLBACK", simple)
	if got := onEvery(has); slices.ContainsFunc(got, func(v string) bool { return v != "0" }) {
		t.Errorf("citext after a rolled-back CREATE EXTENSION: %v, want on no worker", got)
	}
	exec(t, c, "CREATE EXTENSION citext", simple)
	if got := onEvery(has); slices.ContainsFunc(got, func(v string) bool { return v != "1" }) {
		t.Errorf("citext after CREATE EXTENSION: %v, want on every worker", got)
	}
	exec(t, c, "CREATE TABLE ext_t (id int PRIMARY KEY, name citext)", simple)
	exec(t, c, "SELECT create_distributed_table('ext_t', 'id', shard_count => 4)", simple)
	exec(t, c, "INSERT INTO ext_t VALUES (1, 'Alice'), (2, 'BOB'), (3, 'carol'), (4, 'Dave')", simple)
	if got := queryString(t, c, "SELECT count(*)::text FROM ext_t WHERE name = 'bob' OR name = 'ALICE'"); got != "2" {
		t.Errorf("citext comparisons over the shards: %s rows, want 2", got)
	}
	if got := queryString(t, c, "SELECT name::text FROM ext_t WHERE id = 2 AND name = 'Bob'"); got != "BOB" {
		t.Errorf("citext comparison on one shard: %s, want BOB", got)
	}
	if _, err := c.Exec(context.Background(), "DROP EXTENSION citext CASCADE", simple); sqlState(err) != "0A000" {
		t.Errorf("DROP EXTENSION ... CASCADE: %v, want 0A000", err)
	}
}

// onEveryWorker is q's one value on each of the cluster's servers.
func onEveryWorker(t *testing.T, cl *pgcluster.Cluster, q string) []string {
	t.Helper()
	var got []string
	for _, s := range cl.Servers {
		got = append(got, queryString(t, connect(t, s.Addr()), q))
	}
	return got
}
