package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestSearchPathFindsPublic: with a search_path other than public, a
// distributed table named without its schema is read where PostgreSQL
// finds it: in public when no schema before it has a relation of that
// name (SET search_path = nothere, public: psycopg's and postgres.js's
// smoke checks got 0A000); another schema's table of that name is not
// read as the distributed one (0A000, as before).
func TestSearchPathFindsPublic(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	c := connect(t, srv.Addr())
	testTable(t, c, "sp_d", "(id int PRIMARY KEY, v int)", "SELECT create_distributed_table('sp_d', 'id', shard_count => 4)")
	exec(t, c, "INSERT INTO sp_d SELECT g, g FROM generate_series(1, 20) g", simple)
	exec(t, c, "DROP SCHEMA IF EXISTS sp_other CASCADE", simple)
	exec(t, c, "CREATE SCHEMA sp_other", simple)
	exec(t, c, "CREATE TABLE sp_other.sp_d (id int, v int)", simple)
	t.Cleanup(func() { _, _ = c.Exec(context.Background(), "DROP SCHEMA IF EXISTS sp_other CASCADE", simple) })

	for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeCacheStatement} {
		s := connect(t, srv.Addr())
		exec(t, s, "SET search_path = nothere, public", simple)
		var n int
		if err := s.QueryRow(ctx, "SELECT count(*) FROM sp_d WHERE id > $1", mode, 5).Scan(&n); err != nil || n != 15 {
			t.Errorf("%v: search_path nothere, public: %d, %v; want 15", mode, n, err)
		}
		if err := s.QueryRow(ctx, "SELECT v FROM sp_d WHERE id = $1", mode, 7).Scan(&n); err != nil || n != 7 {
			t.Errorf("%v: routed read under search_path nothere, public: %d, %v", mode, n, err)
		}
		exec(t, s, "SET search_path = sp_other, public", simple)
		if err := s.QueryRow(ctx, "SELECT count(*) FROM sp_d", mode).Scan(&n); sqlState(err) != "0A000" {
			t.Errorf("%v: search_path with another sp_d first: %d, %v; want 0A000 (PostgreSQL reads sp_other.sp_d)", mode, n, err)
		}
		s.Close(ctx)
	}

	// The default search_path ("$user", public) with a schema of the
	// role's name holding a table of that name: PostgreSQL reads that one.
	exec(t, c, "DROP SCHEMA IF EXISTS postgres CASCADE", simple)
	exec(t, c, "CREATE SCHEMA postgres", simple)
	exec(t, c, "CREATE TABLE postgres.sp_d (id int)", simple)
	s := connect(t, srv.Addr())
	var n int
	if err := s.QueryRow(ctx, "SELECT count(*) FROM sp_d", simple).Scan(&n); sqlState(err) != "0A000" {
		t.Errorf("default search_path with a schema postgres holding sp_d: %d, %v; want 0A000", n, err)
	}
	exec(t, c, "DROP TABLE postgres.sp_d", simple)
	exec(t, c, "DROP SCHEMA postgres", simple)
	if err := s.QueryRow(ctx, "SELECT count(*) FROM sp_d", simple).Scan(&n); err != nil || n != 20 {
		t.Errorf("default search_path, schema postgres dropped: %d, %v; want 20", n, err)
	}

	// A search_path the role sets (ALTER ROLE ... SET) counts as the
	// session's own.
	for _, w := range cl.Servers {
		wc := connect(t, w.Addr())
		exec(t, wc, "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'sp_alice') THEN CREATE ROLE sp_alice LOGIN SUPERUSER; END IF; END $$", simple)
		exec(t, wc, "ALTER ROLE sp_alice SET search_path = sp_other, public", simple)
	}
	a, err := pgx.Connect(ctx, "postgres://sp_alice@"+srv.Addr()+"/postgres?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	if err := a.QueryRow(ctx, "SELECT count(*) FROM sp_d", simple).Scan(&n); sqlState(err) != "0A000" {
		t.Errorf("role search_path sp_other, public (sp_other.sp_d exists): %d, %v; want 0A000", n, err)
	}
	// (Another role: a pooled connection keeps the role's settings of
	// when it was opened, as PgBouncer's.)
	for _, w := range cl.Servers {
		wc := connect(t, w.Addr())
		exec(t, wc, "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'sp_bob') THEN CREATE ROLE sp_bob LOGIN SUPERUSER; END IF; END $$", simple)
		exec(t, wc, "ALTER ROLE sp_bob SET search_path = nothere, public", simple)
	}
	a2, err := pgx.Connect(ctx, "postgres://sp_bob@"+srv.Addr()+"/postgres?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close(ctx)
	if err := a2.QueryRow(ctx, "SELECT count(*) FROM sp_d", simple).Scan(&n); err != nil || n != 20 {
		t.Errorf("role search_path nothere, public: %d, %v; want 20", n, err)
	}
}

// TestSearchPathInTransaction: a search_path changed inside a transaction
// block (SET, SET LOCAL, SET SCHEMA, set_config()), in a multi-statement
// query or by set_config() outside one, is the one names resolve by: a
// distributed table's name that PostgreSQL would take as another schema's
// table is read and written there, or refused (0A000), never taken as
// public's (an adversary round read and wrote public.spt_d).
func TestSearchPathInTransaction(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	cached := pgx.QueryExecModeCacheStatement
	c := connect(t, srv.Addr())
	testTable(t, c, "spt_d", "(id int PRIMARY KEY, v text)", "SELECT create_distributed_table('spt_d', 'id', shard_count => 4)")
	exec(t, c, "INSERT INTO spt_d VALUES (1, 'public')", simple)
	exec(t, c, "DROP SCHEMA IF EXISTS spt_s CASCADE", simple)
	exec(t, c, "CREATE SCHEMA spt_s", simple)
	exec(t, c, "CREATE TABLE spt_s.spt_d (id int, v text)", simple)
	exec(t, c, "INSERT INTO spt_s.spt_d VALUES (1, 's')", simple)
	t.Cleanup(func() { _, _ = c.Exec(context.Background(), "DROP SCHEMA IF EXISTS spt_s, spt_s2 CASCADE", simple) })

	type step struct {
		sql  string
		mode pgx.QueryExecMode
	}
	read := func(m pgx.QueryExecMode) step { return step{"SELECT v FROM spt_d WHERE id = 1", m} }
	count := func(m pgx.QueryExecMode) step { return step{"SELECT count(*)::text || min(v) FROM spt_d", m} }
	for _, tc := range []struct {
		name  string
		steps []step // the last is the probe
		want  string // the probe's answer on PostgreSQL ("" for a write)
	}{
		{"SET LOCAL", []step{{"BEGIN", simple}, {"SET LOCAL search_path TO spt_s", simple}, read(simple)}, "s"},
		{"SET LOCAL extended", []step{{"BEGIN", simple}, {"SET LOCAL search_path TO spt_s", simple}, read(cached)}, "s"},
		{"SET LOCAL scatter", []step{{"BEGIN", simple}, {"SET LOCAL search_path TO spt_s", simple}, count(simple)}, "1s"},
		{"SET LOCAL scatter extended", []step{{"BEGIN", simple}, {"SET LOCAL search_path TO spt_s", simple}, count(cached)}, "1s"},
		{"SET in block", []step{{"BEGIN", simple}, {"SET search_path TO spt_s", simple}, read(simple)}, "s"},
		{"SET in block extended", []step{{"BEGIN", simple}, {"SET search_path = spt_s", cached}, read(cached)}, "s"},
		{"SET SCHEMA in block", []step{{"BEGIN", simple}, {"SET SCHEMA 'spt_s'", simple}, read(simple)}, "s"},
		{"after a write", []step{{"BEGIN", simple}, {"UPDATE spt_d SET v = 'public' WHERE id = 1", simple}, {"SET LOCAL search_path TO spt_s", simple}, read(simple)}, "s"},
		{"set_config local", []step{{"BEGIN", simple}, {"SELECT set_config('search_path', 'spt_s', true)", simple}, read(simple)}, "s"},
		{"set_config", []step{{"SELECT set_config('search_path', 'spt_s', false)", simple}, read(simple)}, "s"},
		{"set_config extended", []step{{"SELECT set_config('search_path', 'spt_s', false)", cached}, read(cached)}, "s"},
		{"one query", []step{{"SET search_path TO spt_s; SELECT v FROM spt_d WHERE id = 1", simple}}, "s"},
		{"one query, SET LOCAL", []step{{"BEGIN; SET LOCAL search_path TO spt_s; SELECT v FROM spt_d WHERE id = 1", simple}}, "s"},
		{"prepared before", []step{read(cached), {"BEGIN", simple}, {"SET LOCAL search_path TO spt_s", simple}, read(cached)}, "s"},
		{"prepared before, SET", []step{read(cached), {"SET search_path TO spt_s", simple}, read(cached)}, "s"},
		{"SET LOCAL then write", []step{{"BEGIN", simple}, {"SET LOCAL search_path TO spt_s", simple}, {"INSERT INTO spt_d VALUES (2, 'x')", simple}}, ""},
		{"SET LOCAL then write extended", []step{{"BEGIN", simple}, {"SET LOCAL search_path TO spt_s", simple}, {"UPDATE spt_d SET v = 'x' WHERE id = 1", cached}}, ""},
		{"TRUNCATE", []step{{"BEGIN", simple}, {"SET LOCAL search_path TO spt_s", simple}, {"TRUNCATE spt_d", simple}}, ""},
		{"DELETE", []step{{"BEGIN", simple}, {"SET LOCAL search_path TO spt_s", simple}, {"DELETE FROM spt_d", simple}}, ""},
		{"INSERT SELECT", []step{{"BEGIN", simple}, {"SET LOCAL search_path TO spt_s", simple}, {"INSERT INTO spt_d SELECT id + 10, v FROM spt_d", simple}}, ""},
		{"COPY", []step{{"BEGIN", simple}, {"SET LOCAL search_path TO spt_s", simple}, {"COPY spt_d FROM PROGRAM 'echo 3,c' (FORMAT csv)", simple}}, ""},
		{"ALTER TABLE", []step{{"BEGIN", simple}, {"SET LOCAL search_path TO spt_s", simple}, {"ALTER TABLE spt_d ADD COLUMN w int", simple}}, ""},
		{"CREATE INDEX", []step{{"BEGIN", simple}, {"SET LOCAL search_path TO spt_s", simple}, {"CREATE INDEX spt_d_v ON spt_d (v)", simple}}, ""},
		{"set_config then ALTER TABLE", []step{{"SELECT set_config('search_path', 'spt_s', false)", simple}, {"ALTER TABLE spt_d ADD COLUMN w int", simple}}, ""},
		{"set_config then TRUNCATE", []step{{"SELECT set_config('search_path', 'spt_s', false)", simple}, {"TRUNCATE spt_d", simple}}, ""},
		{"set_config then CREATE INDEX", []step{{"SELECT set_config('search_path', 'spt_s', false)", simple}, {"CREATE INDEX spt_d_v ON spt_d (v)", simple}}, ""},
		{"set_config then COPY", []step{{"SELECT set_config('search_path', 'spt_s', false)", simple}, {"COPY spt_d FROM STDIN (FORMAT csv)", simple}}, ""},
		{"one query ALTER TABLE", []step{{"SET search_path TO spt_s; ALTER TABLE spt_d ADD COLUMN w int", simple}}, ""},
		{"one query TRUNCATE", []step{{"SET search_path TO spt_s; TRUNCATE spt_d", simple}}, ""},
		{"SET then scatter write", []step{{"BEGIN", simple}, {"SET search_path TO spt_s", simple}, {"UPDATE spt_d SET v = 'x'", simple}}, ""},
		// Back to public: read as public's.
		{"after COMMIT of SET LOCAL", []step{{"BEGIN", simple}, {"SET LOCAL search_path TO spt_s", simple}, {"COMMIT", simple}, read(simple)}, "public"},
		{"after ROLLBACK of SET", []step{{"BEGIN", simple}, {"SET search_path TO spt_s", simple}, {"ROLLBACK", simple}, read(cached)}, "public"},
		{"SET LOCAL to a path finding public", []step{{"BEGIN", simple}, {"SET LOCAL search_path TO nothere, public", simple}, read(simple)}, "public"},
		{"CREATE TABLE after SET LOCAL", []step{{"BEGIN", simple}, {"SET LOCAL search_path TO spt_s2, public", simple}, {"CREATE SCHEMA spt_s2", simple}, {"CREATE TABLE spt_d (id int, v text)", simple}}, ""},
		{"SET back in block", []step{{"BEGIN", simple}, {"SET LOCAL search_path TO spt_s", simple}, {"SET LOCAL search_path TO public", simple}, read(simple)}, "public"},
	} {
		s := connect(t, srv.Addr())
		var got string
		var err error
		for i, st := range tc.steps {
			if i < len(tc.steps)-1 {
				if _, err := s.Exec(ctx, st.sql, st.mode); err != nil {
					t.Fatalf("%s: %s: %v", tc.name, st.sql, err)
				}
				continue
			}
			switch {
			case strings.Contains(st.sql, "FROM STDIN"):
				_, err = s.PgConn().CopyFrom(ctx, strings.NewReader("3,c\n"), st.sql)
			case tc.want == "":
				_, err = s.Exec(ctx, st.sql, st.mode)
			case strings.Contains(st.sql, ";"):
				// The last statement's answer.
				var res []*pgconn.Result
				res, err = s.PgConn().Exec(ctx, st.sql).ReadAll()
				if err == nil {
					last := res[len(res)-1]
					if len(last.Rows) != 1 {
						t.Fatalf("%s: %d rows", tc.name, len(last.Rows))
					}
					got = string(last.Rows[0][0])
				}
			default:
				err = s.QueryRow(ctx, st.sql, st.mode).Scan(&got)
			}
		}
		t.Logf("%s: %q %v", tc.name, got, err)
		switch {
		case err != nil && sqlState(err) != "0A000":
			t.Errorf("%s: %v, want %q or 0A000", tc.name, err, tc.want)
		case err == nil && got != tc.want:
			t.Errorf("%s: got %q, want %q (or 0A000)", tc.name, got, tc.want)
		}
		if tc.want == "" && err == nil {
			exec(t, s, "COMMIT", simple)
		}
		s.Close(ctx)
		// Nothing was written to public's table, whatever the answer.
		if v := queryString(t, c, "SELECT string_agg(id || v, ',' ORDER BY id) FROM public.spt_d"); v != "1public" {
			t.Fatalf("%s: public.spt_d holds %s, want 1public", tc.name, v)
		}
		if n := queryString(t, c, "SELECT count(*)::text FROM pg_indexes WHERE indexname LIKE 'spt_d_v%'"); n != "0" && tc.name != "CREATE INDEX" {
			t.Errorf("%s: %s indexes spt_d_v", tc.name, n)
		}
		rows, err := c.Query(ctx, "SELECT * FROM public.spt_d", simple)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(rows.FieldDescriptions()); n != 2 {
			t.Errorf("%s: public.spt_d has %d columns, want 2", tc.name, n)
		}
		rows.Close()
		exec(t, c, "ALTER TABLE spt_s.spt_d DROP COLUMN IF EXISTS w", simple)
		exec(t, c, "DROP INDEX IF EXISTS spt_s.spt_d_v", simple)
		exec(t, c, "DELETE FROM spt_s.spt_d WHERE id <> 1", simple)
		exec(t, c, "INSERT INTO spt_s.spt_d SELECT 1, 's' WHERE NOT EXISTS (SELECT FROM spt_s.spt_d)", simple)
		exec(t, c, "UPDATE spt_s.spt_d SET v = 's'", simple)
	}
}

// TestNamesResolveOnOwnConnection: where the session's own connection may
// resolve a name otherwise than a pooled one (a schema or table made in
// its transaction, a temporary table, a function's or DO block's SET
// LOCAL, SET LOCAL ROLE to a role with a schema of its name), a
// distributed table's unqualified name is read and written where
// PostgreSQL would, or refused; never taken as public's (an adversary
// round wrote public's table in each of these).
func TestNamesResolveOnOwnConnection(t *testing.T) {
	cl := pgtest.Start(t, 2)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	c := connect(t, srv.Addr())
	exec(t, c, "CREATE TABLE onr_d (id int PRIMARY KEY, v text)", simple)
	exec(t, c, "SELECT create_distributed_table('onr_d', 'id', shard_count => 4)", simple)
	exec(t, c, "INSERT INTO onr_d SELECT g, 'public' FROM generate_series(1, 4) g", simple)
	other := func(schema string) string {
		return "CREATE TABLE " + schema + ".onr_d (id int, v text); INSERT INTO " + schema + ".onr_d SELECT g, 'other' FROM generate_series(1, 4) g"
	}
	exec(t, c, "CREATE SCHEMA onr_s2; "+other("onr_s2"), simple)
	exec(t, c, "CREATE FUNCTION onr_setp() RETURNS void LANGUAGE plpgsql AS $$BEGIN PERFORM set_config('search_path', 'onr_s2', true); END$$", simple)
	for _, w := range cl.Servers {
		exec(t, connect(t, w.Addr()), "CREATE ROLE onr_alice SUPERUSER", simple)
	}
	exec(t, c, "CREATE SCHEMA onr_alice; "+other("onr_alice"), simple)
	for _, tc := range []struct {
		name  string
		setup []string
		txn   bool
	}{
		{"schema made in the transaction", []string{"CREATE SCHEMA onr_s", other("onr_s"), "SET LOCAL search_path = onr_s, public"}, true},
		{"$user schema made in the transaction", []string{"CREATE SCHEMA postgres", other("postgres")}, true},
		{"temporary table renamed", []string{"CREATE TEMP TABLE onr_x (id int, v text)", "INSERT INTO onr_x SELECT g, 'other' FROM generate_series(1, 4) g", "ALTER TABLE onr_x RENAME TO onr_d"}, false},
		{"function's SET LOCAL", []string{"SELECT onr_setp()"}, true},
		{"DO block's SET LOCAL", []string{"DO $$BEGIN SET LOCAL search_path = onr_s2; END$$"}, true},
		{"SET LOCAL ROLE", []string{"SET LOCAL ROLE onr_alice"}, true},
	} {
		s := connect(t, srv.Addr())
		if tc.txn {
			exec(t, s, "BEGIN", simple)
		}
		for _, q := range tc.setup {
			exec(t, s, q, simple)
		}
		for id := 1; id <= 4; id++ {
			var v string
			err := s.QueryRow(ctx, "SELECT v FROM onr_d WHERE id = $1", simple, id).Scan(&v)
			if code := sqlState(err); err != nil && code != "0A000" && code != "25P02" || err == nil && v != "other" {
				t.Errorf("%s: row %d: %q, %v; want other, or 0A000", tc.name, id, v, err)
			}
			_, err = s.Exec(ctx, "INSERT INTO onr_d VALUES ($1, 'w')", simple, id+100)
			if code := sqlState(err); err != nil && code != "0A000" && code != "25P02" {
				t.Errorf("%s: INSERT of row %d: %v, want success or 0A000", tc.name, id+100, err)
			}
		}
		if tc.txn {
			_, _ = s.Exec(ctx, "COMMIT", simple)
		}
		s.Close(ctx)
		if got := queryString(t, c, "SELECT string_agg(id || v, ',' ORDER BY id) FROM public.onr_d"); got != "1public,2public,3public,4public" {
			t.Errorf("%s: public.onr_d holds %s", tc.name, got)
			exec(t, c, "DELETE FROM public.onr_d WHERE id > 100", simple)
		}
		exec(t, c, "DROP SCHEMA IF EXISTS onr_s, postgres CASCADE", simple)
	}
}

// TestPathLookupFirstWorkerDown: with the first worker (where an
// unqualified table name is looked up under the session's search_path)
// out of reach, a statement naming a distributed table without its schema
// gets a connection error, which a client retries, not 0A000 saying the
// name resolves elsewhere (adversary: every client for a second or two
// after the first worker crashed); it runs again once the worker is back.
func TestPathLookupFirstWorkerDown(t *testing.T) {
	cl := pgtest.Start(t, 2)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	exec(t, c, "CREATE TABLE pl_t (k int PRIMARY KEY, v int)", simple)
	exec(t, c, "SELECT create_distributed_table('pl_t', 'k', shard_count => 4)", simple)
	exec(t, c, "INSERT INTO pl_t SELECT g, g FROM generate_series(1, 20) g", simple)
	far := keysOn(t, cl.Servers[1].Addr(), "pl_t", "k")
	if len(far) == 0 {
		t.Fatal("no row of pl_t on the second worker")
	}
	q := "SELECT v FROM pl_t WHERE k = " + far[0]
	if got := queryString(t, c, q+"::int"); got != far[0] {
		t.Fatalf("%s: %s", q, got)
	}
	cl.Servers[0].Stop()
	time.Sleep(2100 * time.Millisecond) // (the answers of the lookup are kept 2 s)
	for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeExec} {
		var v int
		err := c.QueryRow(context.Background(), q, mode).Scan(&v)
		if err != nil && !strings.HasPrefix(sqlState(err), "08") {
			t.Errorf("%s (%v) with the first worker down: %v, want it answered or an 08 error", q, mode, err)
		}
	}
	if err := cl.Servers[0].Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		var v int
		err := c.QueryRow(context.Background(), q, simple).Scan(&v)
		if err == nil && fmt.Sprint(v) == far[0] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s after the first worker came back: %v %v", q, v, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
