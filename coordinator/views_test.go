package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// Views, materialized views, functions and DO blocks run on the default
// node, where a distributed table is an empty local table: pgfleet refuses
// to make them over a distributed or reference table, and refuses to
// distribute a table that views or functions already use, so no client
// silently gets the empty table's answer (class 10 of issue 8).
func TestViewsAndFunctionsOverDistributedTables(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	c := connect(t, srv.Addr())
	var vals []string
	for i := 1; i <= 10; i++ {
		vals = append(vals, fmt.Sprintf("(%d, %d)", i, i*10))
	}
	testTable(t, c, "v10_d", "(id int PRIMARY KEY, v int)", "SELECT create_distributed_table('v10_d', 'id', shard_count => 4)")
	testTable(t, c, "v10_r", "(id int PRIMARY KEY, v int)", "SELECT create_reference_table('v10_r')")
	exec(t, c, "INSERT INTO v10_d (id, v) VALUES "+strings.Join(vals, ", "), simple)
	exec(t, c, "INSERT INTO v10_r (id, v) VALUES "+strings.Join(vals, ", "), simple)
	cleanup := func(qs ...string) {
		t.Cleanup(func() {
			for _, q := range qs {
				_, _ = c.Exec(ctx, q, simple)
			}
		})
	}
	cleanup("DROP VIEW IF EXISTS v10_view", "DROP MATERIALIZED VIEW IF EXISTS v10_mv", "DROP FUNCTION IF EXISTS v10_f(int)",
		"DROP FUNCTION IF EXISTS v10_g(int)", "DROP PROCEDURE IF EXISTS v10_p()")

	for _, q := range []string{
		"CREATE VIEW v10_view AS SELECT count(*) FROM v10_d",
		"CREATE OR REPLACE TEMP VIEW v10_view AS SELECT * FROM public.v10_d",
		"CREATE VIEW v10_view AS SELECT * FROM v10_r",
		"CREATE MATERIALIZED VIEW v10_mv AS SELECT * FROM v10_d",
		"CREATE FUNCTION v10_f(k int) RETURNS int LANGUAGE sql AS 'SELECT v FROM v10_d WHERE id = k'",
		"CREATE FUNCTION v10_g(k int) RETURNS int LANGUAGE plpgsql AS $$ BEGIN RETURN (SELECT v FROM \"v10_d\" WHERE id = k); END $$",
		"CREATE FUNCTION v10_f(k int) RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT v FROM v10_d WHERE id = k; END",
		"CREATE PROCEDURE v10_p() LANGUAGE sql AS $$ DELETE FROM v10_r $$",
		"DO $$ BEGIN IF (SELECT count(*) FROM v10_d) = 0 THEN RAISE EXCEPTION 'empty'; END IF; END $$",
		"SELECT query_to_xml('SELECT count(*) FROM v10_d', false, false, '')",
		"SELECT pg_catalog.table_to_xml('public.v10_r', false, false, '')",
	} {
		for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeExec} {
			if _, err := c.Exec(ctx, q, mode); sqlState(err) != "0A000" {
				t.Errorf("%s (%v): %v, want 0A000", q, mode, err)
			}
		}
	}
	// Over ordinary tables they work as before.
	exec(t, c, "DROP TABLE IF EXISTS v10_l CASCADE", simple)
	exec(t, c, "CREATE TABLE v10_l (id int PRIMARY KEY, v int)", simple)
	exec(t, c, "INSERT INTO v10_l (id, v) VALUES "+strings.Join(vals, ", "), simple)
	cleanup("DROP TABLE IF EXISTS v10_l CASCADE", "DROP FUNCTION IF EXISTS v10_lf(int)")
	exec(t, c, "CREATE VIEW v10_lview AS SELECT count(*) AS n FROM v10_l", simple)
	if got := queryString(t, c, "SELECT n::text FROM v10_lview"); got != "10" {
		t.Fatalf("view over a local table: %s", got)
	}
	// A table that a view uses is not distributed: the view would read
	// the empty local table afterwards.
	if _, err := c.Exec(ctx, "SELECT create_distributed_table('v10_l', 'id')", simple); sqlState(err) != "0A000" {
		t.Errorf("distributing a table a view uses: %v, want 0A000", err)
	}
	if got := queryString(t, c, "SELECT n::text FROM v10_lview"); got != "10" {
		t.Errorf("the view after the refused distribution: %s", got)
	}
	exec(t, c, "DROP VIEW v10_lview", simple)
	// Nor one that a function names.
	exec(t, c, "CREATE FUNCTION v10_lf(k int) RETURNS int LANGUAGE sql AS 'SELECT v FROM v10_l WHERE id = k'", simple)
	for _, f := range []string{"create_distributed_table('v10_l', 'id')", "create_reference_table('v10_l')"} {
		if _, err := c.Exec(ctx, "SELECT "+f, simple); sqlState(err) != "0A000" {
			t.Errorf("%s with a function naming the table: %v, want 0A000", f, err)
		}
	}
	if got := queryString(t, c, "SELECT v10_lf(2)::text"); got != "20" {
		t.Errorf("v10_lf(2) = %s", got)
	}
	exec(t, c, "DROP FUNCTION v10_lf(int)", simple)
	// Functions that only have the name as a parameter, a variable, or
	// in a comment or a message do not read it (they kept it from being
	// distributed).
	exec(t, c, "CREATE FUNCTION v10_lp(v10_l int) RETURNS int LANGUAGE sql AS 'SELECT v10_l + 1 -- not v10_l the table'", simple)
	exec(t, c, `CREATE FUNCTION v10_lq(n int) RETURNS int LANGUAGE plpgsql AS $$ DECLARE v10_l int := n;
		BEGIN RAISE NOTICE 'v10_l %', v10_l; RETURN v10_l * 2; END $$`, simple)
	t.Cleanup(func() {
		_, _ = c.Exec(context.Background(), "DROP FUNCTION IF EXISTS v10_lp(int), v10_lq(int)", simple)
	})
	exec(t, c, "SELECT create_distributed_table('v10_l', 'id')", simple)
	exec(t, c, "SELECT undistribute_table('v10_l')", simple)
}

// TestDistributeTableNamedLikeGuardWords: a table whose name is a word of
// pgfleet's own guard function (s, from the quoted possessive in its
// hint) distributes (it was
// refused as named by a function).
func TestDistributeTableNamedLikeGuardWords(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	testTable(t, c, "s", "(id int PRIMARY KEY)", "SELECT create_distributed_table('s', 'id', shard_count => 2)")
	exec(t, c, "INSERT INTO s VALUES (1), (2), (3)", pgx.QueryExecModeSimpleProtocol)
	if got := queryString(t, c, "SELECT count(*)::text FROM s"); got != "3" {
		t.Errorf("rows of s: %s, want 3", got)
	}
}

// TestDistributeRefusedForFunctionsReadingIt: functions that read a table
// keep it from being distributed, however the body spells its name: a
// name ending in a character that is no word character ("fr!": it was
// never matched), a string with escapes (E'...\137...') or in two parts;
// a function in information_schema too. After distributing they would
// read its empty local copy (0 rows where PostgreSQL counts them).
func TestDistributeRefusedForFunctionsReadingIt(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	for _, tc := range []struct{ table, fn string }{
		{`"fr!"`, `CREATE FUNCTION fr_a() RETURNS bigint LANGUAGE sql AS $$ SELECT count(*) FROM "fr!" $$`},
		{"fr_gadgets", `CREATE FUNCTION fr_b() RETURNS xml LANGUAGE sql AS $$ SELECT query_to_xml(E'select count(*) from fr\137gadgets', true, false, '') $$`},
		{"fr_gadgets", "CREATE FUNCTION fr_c() RETURNS xml LANGUAGE sql AS $$ SELECT query_to_xml('select count(*) from fr_gad'\n'gets', true, false, '') $$"},
		{"fr_gadgets", `CREATE FUNCTION information_schema.fr_d() RETURNS bigint LANGUAGE sql AS $$ SELECT count(*) FROM public.fr_gadgets $$`},
	} {
		exec(t, c, "DROP TABLE IF EXISTS "+tc.table, simple)
		exec(t, c, "CREATE TABLE "+tc.table+" (id int PRIMARY KEY)", simple)
		exec(t, c, tc.fn, simple)
		name := strings.Fields(tc.fn)[2]
		name = name[:strings.IndexByte(name, '(')]
		if _, err := c.Exec(ctx, "SELECT create_distributed_table('"+strings.ReplaceAll(tc.table, "'", "''")+"', 'id')", simple); sqlState(err) != "0A000" {
			t.Errorf("%s, then distributing %s: %v, want 0A000", tc.fn, tc.table, err)
			_, _ = c.Exec(ctx, "SELECT undistribute_table('"+tc.table+"')", simple)
		}
		exec(t, c, "DROP FUNCTION "+name+"()", simple)
		exec(t, c, "DROP TABLE "+tc.table, simple)
	}
}

// TestSQLTextBuiltAtRunTime: a built-in that runs a query, or reads a
// table, given as text is refused while the fleet has distributed tables
// when the text is not a constant or hides a table's name in escapes: it
// read the distributed table's empty copy on the default node (adversary:
// query_to_xml($1) with $1 = 'select count(*) from t' counted 0). A
// constant over a local table runs as before.
func TestSQLTextBuiltAtRunTime(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	c := connect(t, srv.Addr())
	testTable(t, c, "sqt_d", "(id int PRIMARY KEY, v int)", "SELECT create_distributed_table('sqt_d', 'id', shard_count => 4)")
	exec(t, c, "INSERT INTO sqt_d SELECT g, g FROM generate_series(1, 10) g", simple)
	exec(t, c, "DROP TABLE IF EXISTS sqt_l", simple)
	exec(t, c, "CREATE TABLE sqt_l (id int, d tsvector)", simple)
	exec(t, c, "INSERT INTO sqt_l SELECT g, to_tsvector('simple', 'a b') FROM generate_series(1, 7) g", simple)
	t.Cleanup(func() { _, _ = c.Exec(ctx, "DROP TABLE IF EXISTS sqt_l", simple) })
	oid := queryString(t, c, "SELECT 'sqt_d'::regclass::oid::text")
	modes := []pgx.QueryExecMode{simple, pgx.QueryExecModeExec, pgx.QueryExecModeCacheStatement}
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{"SELECT query_to_xml($1, true, true, '')::text", []any{"select count(*) from sqt_d"}},
		{"SELECT query_to_xml($1::text, true, true, '')::text", []any{"select count(*) from sqt_d"}},
		{`SELECT query_to_xml(E'select count(*) from sqt\x5fd', true, true, '')::text`, nil},
		{"SELECT query_to_xml('select count(*) from sqt' || chr(95) || 'd', true, true, '')::text", nil},
		{"SELECT table_to_xml(" + oid + "::regclass, true, false, '')::text", nil},
		{`SELECT table_to_xml(E'sqt\x5fd', true, false, '')::text`, nil},
		{"SELECT count(*)::text FROM ts_stat(format('SELECT d FROM %I', 'sqt_d'))", nil},
		{"SELECT query_to_xml(nulls => true, tableforest => true, targetns => '', query => 'select count(*) from ' || 'sqt_d')::text", nil},
		// (adversary, round 2:)
		{"SELECT query_to_xml('select query_to_xml(''select count(*) from sqt''||chr(95)||''d'', true, false, '''')', true, false, '')::text", nil},
		{"SELECT table_to_xml('" + oid + "', true, false, '')::text", nil},
		{"SELECT query_to_xml($1, true, false, '')::text, $2::int", []any{"select count(*) from sqt_d", nil}},
		{"SELECT table_to_xml($1::regclass, true, false, '')::text", []any{oid}},
		// (round 3: casts that cut the text, or read a table by OID)
		{"SELECT query_to_xml('select count(*) from sqt_dx'::varchar(26), true, false, '')::text", nil},
		{"SELECT query_to_xml($1::varchar(26), true, false, '')::text", []any{"select count(*) from sqt_dx"}},
		{"SELECT table_to_xml('+" + oid + "'::oid::regclass, true, false, '')::text", nil},
		{"SELECT table_to_xml($1::oid::regclass, true, false, '')::text", []any{"+" + oid}},
		{`SELECT query_to_xml(nulls => true, tableforest => true, targetns => '', query => E'select count(*) from sqt\x5fd')::text`, nil},
	} {
		for _, mode := range modes {
			if mode == simple && len(q.args) > 0 {
				continue // (pgx would splice the parameter: a constant)
			}
			rows, err := c.Query(ctx, q.sql, append([]any{mode}, q.args...)...)
			if err == nil {
				var got []string
				got, err = pgx.CollectRows(rows, pgx.RowTo[string])
				if err == nil {
					t.Errorf("%s (%v): answered %v, want 0A000", q.sql, mode, got)
					continue
				}
			}
			if sqlState(err) != "0A000" {
				t.Errorf("%s (%v): %v, want 0A000", q.sql, mode, err)
			}
		}
	}
	// SQL's PREPARE: its parameters are bound where pgfleet cannot see.
	if _, err := c.Exec(ctx, "PREPARE sqt_q(text) AS SELECT query_to_xml($1, true, true, '')", simple); sqlState(err) != "0A000" {
		t.Errorf("PREPARE of query_to_xml($1): %v, want 0A000", err)
	}
	// standard_conforming_strings off: a backslash in a constant.
	exec(t, c, "SET standard_conforming_strings = off", simple)
	if _, err := c.Exec(ctx, `SELECT query_to_xml('select count(*) from sqt\137d', true, true, '')`, simple); sqlState(err) != "0A000" {
		t.Errorf("with standard_conforming_strings off: %v, want 0A000", err)
	}
	exec(t, c, "RESET standard_conforming_strings", simple)
	// Over a local table, as constants or a parameter: PostgreSQL's answers
	// (another parameter that spells a distributed table's name is data).
	for _, mode := range modes[1:] {
		var got, other string
		err := c.QueryRow(ctx, "SELECT (xpath('//count/text()', query_to_xml($1, true, true, '')))[1]::text, $2::text", mode, "select count(*) from sqt_l", "sqt_d").Scan(&got, &other)
		if err != nil || got != "7" {
			t.Errorf("query_to_xml($1) over a local table beside $2 = 'sqt_d' (%v): %q, %v", mode, got, err)
		}
	}
	for _, q := range []struct{ sql, want string }{
		{"SELECT (xpath('//count/text()', query_to_xml('select count(*) from sqt_l', true, true, '')))[1]::text", "7"},
		{"SELECT nentry::text FROM ts_stat('SELECT d FROM sqt_l') WHERE word = 'a'", "7"},
		{"SELECT (xpath('//count/text()', query_to_xml('select count(*) from sqt_l'::text, true, true, '')))[1]::text", "7"},
		{"SELECT (xpath('count(//row)', table_to_xml('sqt_l'::regclass, true, false, '')))[1]::text", "7"},
		{"SELECT (xpath('//count/text()', query_to_xml(nulls => true, tableforest => true, targetns => '', query => 'select count(*) from sqt_l')))[1]::text", "7"},
	} {
		for _, mode := range modes {
			var got string
			if err := c.QueryRow(ctx, q.sql, mode).Scan(&got); err != nil || got != q.want {
				t.Errorf("%s (%v): %q, %v; want %s", q.sql, mode, got, err, q.want)
			}
		}
	}
}
