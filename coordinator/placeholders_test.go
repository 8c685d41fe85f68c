package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// A custom setting (app.tenant) that one client defined with SET stays
// defined in the worker's backend after the client is gone: RESET ALL
// leaves it, with an empty value. The next client on that server
// connection must see what a fresh PostgreSQL session shows: no such
// setting (current_setting(name, true) NULL, SHOW 42704), not an empty
// string. Each case runs its statements on a client, disconnects it and
// asks the next one, with a pool of one connection; the client's own
// session keeps PostgreSQL's answers, checked against the worker.
func TestPlaceholderStaysWithItsClient(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	srv := pgtest.Coordinator(t, cl, poolSize(1))
	direct := connect(t, cl.Servers[0].Addr())

	// read is what a client sees of the setting: its value, "<null>", or
	// the SQLSTATE of SHOW's error.
	read := func(t *testing.T, c *pgx.Conn, name string, mode pgx.QueryExecMode) (value, show string) {
		t.Helper()
		var v *string
		if err := c.QueryRow(ctx, "SELECT current_setting($1, true)", mode, name).Scan(&v); err != nil {
			t.Fatalf("current_setting(%q, true): %v", name, err)
		}
		value = "<null>"
		if v != nil {
			value = "'" + *v + "'"
		}
		var s string
		if err := c.QueryRow(ctx, "SHOW "+name, simple).Scan(&s); err != nil {
			show = sqlState(err)
		} else {
			show = "'" + s + "'"
		}
		return value, show
	}

	for i, tc := range []struct {
		name string
		qs   []string // the first client's statements, name app.<name>
	}{
		{"session SET", []string{"SET app.%s = '7'"}},
		{"SET then RESET", []string{"SET app.%s = '7'", "RESET app.%s"}},
		{"RESET ALL", []string{"SET app.%s = '7'", "RESET ALL"}},
		{"DISCARD ALL", []string{"SET app.%s = '7'", "DISCARD ALL"}},
		{"SET LOCAL committed", []string{"BEGIN", "SET LOCAL app.%s = '7'", "COMMIT"}},
		{"SET rolled back", []string{"BEGIN", "SET app.%s = '7'", "ROLLBACK"}},
		{"SET in a failed block", []string{"BEGIN", "SET app.%s = '7'", "SELECT 1/0", "ROLLBACK"}},
		{"SET TO DEFAULT", []string{"SET app.%s TO DEFAULT"}},
		{"left in an open block", []string{"BEGIN", "SET LOCAL app.%s = '7'"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("app.ph%d", i)
			a := connect(t, srv.Addr())
			for _, q := range tc.qs {
				q = strings.ReplaceAll(q, "app.%s", name)
				if _, err := a.Exec(ctx, q, simple); err != nil && q != "SELECT 1/0" {
					t.Fatalf("%q: %v", q, err)
				}
			}
			// The client's own session first, as PostgreSQL's after the
			// same statements (in a block left open: after its ROLLBACK).
			if tc.name == "left in an open block" {
				exec(t, a, "ROLLBACK", simple)
				exec(t, direct, "BEGIN", simple)
				exec(t, direct, "SET LOCAL "+name+" = '7'", simple)
				exec(t, direct, "ROLLBACK", simple)
			} else {
				for _, q := range tc.qs {
					_, _ = direct.Exec(ctx, strings.ReplaceAll(q, "app.%s", name), simple)
				}
			}
			wantV, wantS := read(t, direct, name, simple)
			if v, s := read(t, a, name, simple); v != wantV || s != wantS {
				t.Errorf("the client itself: current_setting %s, SHOW %s; PostgreSQL: %s, %s", v, s, wantV, wantS)
			}
			if tc.name == "left in an open block" {
				exec(t, a, "BEGIN", simple)
				exec(t, a, "SET LOCAL "+name+" = '8'", simple)
			}
			if err := a.Close(ctx); err != nil {
				t.Fatal(err)
			}
			for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeExec} {
				b := connect(t, srv.Addr())
				if v, s := read(t, b, name, mode); v != "<null>" || s != "42704" {
					t.Errorf("the next client (%v): current_setting %s, SHOW %s; want <null>, 42704 as in a fresh session", mode, v, s)
				}
				_ = b.Close(ctx)
			}
		})
	}

	// A client whose statement only sets the name cannot tell whether
	// the connection had it: it takes the same connection (no new
	// backend), in either protocol and as the first statement of a block,
	// and reads its own value.
	pid := func(c *pgx.Conn) string { return queryString(t, c, "SELECT pg_backend_pid()::text", simple) }
	a0 := connect(t, srv.Addr())
	exec(t, a0, "SET app.reuse = '1'", simple)
	was := pid(a0)
	_ = a0.Close(ctx)
	for i, qs := range [][]string{{"SET app.reuse = '2'"}, {"BEGIN", "SET LOCAL app.reuse = '2'"}, {"RESET app.reuse", "SET app.reuse = '2'"}} {
		for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeExec} {
			c := connect(t, srv.Addr())
			for _, q := range qs {
				if _, err := c.Exec(ctx, q, mode); err != nil {
					t.Fatalf("%q: %v", q, err)
				}
			}
			if got := queryString(t, c, "SELECT current_setting('app.reuse')", simple); got != "2" {
				t.Errorf("case %d (%v): the client's own value reads %q, want 2", i, mode, got)
			}
			if now := pid(c); now != was {
				t.Errorf("case %d (%v): %v took a new backend (%s, was %s)", i, mode, qs, now, was)
			}
			_ = c.Close(ctx)
		}
	}

	// A client that defined the name keeps getting its value, and one
	// that did not, when every pooled connection defines it, still gets
	// served.
	a := connect(t, srv.Addr())
	exec(t, a, "SET app.kept = 'x'", simple)
	for i := 0; i < 3; i++ {
		if got := queryString(t, a, "SELECT current_setting('app.kept')"); got != "x" {
			t.Fatalf("the client's own setting reads %q, want x", got)
		}
	}
	b := connect(t, srv.Addr())
	var n int
	if err := b.QueryRow(ctx, "SELECT count(*) FROM pg_settings WHERE name = 'app.kept'").Scan(&n); err != nil {
		t.Fatalf("a client without the setting, its own one connection held by nobody: %v", err)
	}
	if got := queryString(t, a, "SELECT current_setting('app.kept')"); got != "x" {
		t.Fatalf("after another client's statement the setting reads %q, want x", got)
	}
}

// A custom setting user code sets for the session (an RLS tenant set by a
// function) stays the client's, as in PostgreSQL: the client keeps reading
// its value on later statements, and the next client does not have the
// setting. The state read did not read names only the function's body
// shows: at the next checkout the client's value was gone (an empty
// string) and the placeholder stayed for the next client.
func TestFunctionSetPlaceholderStaysWithItsClient(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	srv := pgtest.Coordinator(t, cl, poolSize(1))
	setup := connect(t, srv.Addr())
	for _, q := range []string{
		`CREATE OR REPLACE FUNCTION fph_set_config(t int) RETURNS void LANGUAGE plpgsql AS $$
		 BEGIN PERFORM set_config('app.fph_a', t::text, false); END $$`,
		`CREATE OR REPLACE FUNCTION fph_set(t int) RETURNS void LANGUAGE plpgsql AS $$
		 BEGIN SET app.fph_b = 7; END $$`,
		`CREATE OR REPLACE FUNCTION fph_format(t int) RETURNS void LANGUAGE plpgsql AS $$
		 BEGIN EXECUTE format('SET app.fph_c = %L', t); END $$`,
		`CREATE OR REPLACE FUNCTION fph_sql(t int) RETURNS text LANGUAGE sql AS
		 $$ SELECT set_config('app.fph_d', t::text, false) $$`,
		`CREATE OR REPLACE FUNCTION fph_odd(t int) RETURNS void LANGUAGE plpgsql AS $$
		 BEGIN PERFORM set_config('app.fph_ténant', t::text, false); PERFORM set_config('app.fph_t$1', t::text, false);
		 PERFORM set_config('myapplication.current_tenant_identifier_for_row_level_security_fph', t::text, false); END $$`,
		// (Names built at run time: the session pins.)
		`CREATE OR REPLACE FUNCTION fph_dyn(t int) RETURNS void LANGUAGE plpgsql AS $$
		 BEGIN PERFORM set_config('app.' || 'fph_g', t::text, false); END $$`,
		`CREATE OR REPLACE FUNCTION fph_any(n text, v text) RETURNS void LANGUAGE plpgsql AS $$
		 BEGIN PERFORM set_config(n, v, false); END $$`,
		`CREATE OR REPLACE FUNCTION fph_setfmt(s text, v text) RETURNS void LANGUAGE plpgsql AS $$
		 BEGIN EXECUTE format('SET app.%s = %L', s, v); END $$`,
		`CREATE OR REPLACE FUNCTION fph_uesc() RETURNS void LANGUAGE plpgsql AS $$
		 BEGIN SET U&"app.fph_\006c" = 13; END $$`,
		// (Adversary round 14.)
		`CREATE OR REPLACE FUNCTION fph_cmt(n text) RETURNS void LANGUAGE plpgsql AS $$
		 BEGIN
		 -- update the setting
		 EXECUTE 'SET ' || n || ' = ''three'''; END $$`,
		`CREATE OR REPLACE FUNCTION fph_concat(s text) RETURNS void LANGUAGE plpgsql AS $$
		 BEGIN EXECUTE concat('SET app.fph_n', s, ' = 1'); END $$`,
		`CREATE OR REPLACE FUNCTION fph_space() RETURNS void LANGUAGE plpgsql AS $$
		 BEGIN SET app . fph_o = 'gone'; END $$`,
		`CREATE OR REPLACE FUNCTION fph_split() RETURNS void LANGUAGE plpgsql AS $$
		 BEGIN EXECUTE 'SET app' || '.fph_p = ''sp'''; END $$`,
		`CREATE TABLE IF NOT EXISTS fph_cmds (q text)`,
		`TRUNCATE fph_cmds`,
		`INSERT INTO fph_cmds VALUES ('SET app.fph_q = ''tq''')`,
		`CREATE OR REPLACE FUNCTION fph_tab() RETURNS void LANGUAGE plpgsql AS $$
		 BEGIN EXECUTE (SELECT q FROM fph_cmds LIMIT 1); END $$`,
		`CREATE OR REPLACE VIEW fph_v AS SELECT set_config('app.fph_r', 'vr', false) AS s`,
		`CREATE OR REPLACE FUNCTION fph_do() RETURNS void LANGUAGE plpgsql AS $$
		 BEGIN DO 'BEGIN PERFORM set_config(''app.'' || ''fph_s'', ''ds'', false); END'; END $$`,
		// (Adversary round 16.)
		`CREATE OR REPLACE FUNCTION fph_u(n text) RETURNS text LANGUAGE sql AS $$ SELECT U&"set\005fconfig"(n, 'vu', false) $$`,
		`CREATE OR REPLACE FUNCTION fph_fmtcall(n text) RETURNS text LANGUAGE plpgsql AS $$ DECLARE r text; BEGIN
		 EXECUTE format('SELECT %I(%L, ''vf'', false)', 'set_config', n) INTO r; RETURN r; END $$`,
		`CREATE OR REPLACE FUNCTION fph_fcat(n text) RETURNS text LANGUAGE plpgsql AS $$ DECLARE r text; BEGIN
		 EXECUTE format('SELECT set_con' || 'fig(%L, ''vfc'', false)', n) INTO r; RETURN r; END $$`,
		`CREATE OR REPLACE FUNCTION fph_cf(n text) RETURNS text LANGUAGE plpgsql AS $$ BEGIN
		 CREATE OR REPLACE FUNCTION fph_g(m text) RETURNS text LANGUAGE sql AS 'SELECT set_config(m, ''vc'', false)';
		 RETURN fph_g(n); END $$`,
		// (SQL text from its caller: a Bind's parameter names it.)
		`CREATE OR REPLACE FUNCTION fph_exec(q text) RETURNS void LANGUAGE plpgsql AS $$
		 BEGIN EXECUTE q; END $$`,
		`CREATE TABLE IF NOT EXISTS fph_log (a int)`,
		`CREATE OR REPLACE FUNCTION fph_trig() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN PERFORM set_config('app.fph_e', NEW.a::text, false); RETURN NEW; END $$`,
		`DROP TRIGGER IF EXISTS fph_t ON fph_log`,
		`CREATE TRIGGER fph_t BEFORE INSERT ON fph_log FOR EACH ROW EXECUTE FUNCTION fph_trig()`,
	} {
		exec(t, setup, q, simple)
	}
	// (Its functions' words read as table names, and a body with a U&
	// name as naming any table: left in the shared cluster, they refused
	// create_distributed_table in later tests, of a table s say.)
	defer func() {
		exec(t, setup, "DROP TABLE fph_log, fph_cmds", simple)
		exec(t, setup, "DROP VIEW fph_v", simple)
		exec(t, setup, "DROP FUNCTION fph_set_config(int), fph_set(int), fph_format(int), fph_sql(int), fph_odd(int), "+
			"fph_trig(), fph_dyn(int), fph_any(text, text), fph_setfmt(text, text), fph_uesc(), fph_cmt(text), "+
			"fph_concat(text), fph_space(), fph_split(), fph_tab(), fph_exec(text), fph_do(), fph_u(text), fph_fmtcall(text), "+
			"fph_fcat(text), fph_cf(text), fph_g(text)", simple)
		_ = setup.Close(ctx)
	}()
	for _, tc := range []struct {
		call, name, want string
		args             []any
	}{
		{"SELECT fph_set_config(5)", "app.fph_a", "5", nil},
		{"SELECT fph_set(5)", "app.fph_b", "7", nil},
		{"SELECT fph_format(6)", "app.fph_c", "6", nil},
		{"SELECT fph_sql(8)", "app.fph_d", "8", nil},
		{"INSERT INTO fph_log VALUES (9)", "app.fph_e", "9", nil},
		{"SELECT fph_odd(3)", "app.fph_ténant", "3", nil},
		{"SELECT fph_odd(3)", "app.fph_t$1", "3", nil},
		{"SELECT fph_odd(3)", "myapplication.current_tenant_identifier_for_row_level_security_fph", "3", nil},
		// (A DO block whose qualified names pass what the state read
		// reads, before its SET: the session keeps its connection.)
		{"DO $$ BEGIN PERFORM " + strings.Repeat("x.c, ", 300) + "1 FROM (SELECT 1 AS c) x; SET app.fph_f = 'v5'; END $$", "app.fph_f", "v5", nil},
		{"SELECT fph_dyn(4)", "app.fph_g", "4", nil},
		{"SELECT fph_any('app.' || 'fph_h', '2')", "app.fph_h", "2", nil},
		{"SELECT fph_setfmt('fph_i', 'x')", "app.fph_i", "x", nil},
		{"SELECT fph_uesc()", "app.fph_l", "13", nil},
		{"SELECT fph_cmt('app.' || 'fph_m')", "app.fph_m", "three", nil},
		{"SELECT fph_concat('')", "app.fph_n", "1", nil},
		{"SELECT fph_space()", "app.fph_o", "gone", nil},
		{"SELECT fph_split()", "app.fph_p", "sp", nil},
		{"SELECT fph_tab()", "app.fph_q", "tq", nil},
		{"SELECT s FROM fph_v", "app.fph_r", "vr", nil},
		{"SELECT fph_do()", "app.fph_s", "ds", nil},
		{"SELECT fph_u('app.' || 'fph_t')", "app.fph_t", "vu", nil},
		{"SELECT fph_fmtcall('app.' || 'fph_w')", "app.fph_w", "vf", nil},
		{"SELECT fph_fcat('app.' || 'fph_x')", "app.fph_x", "vfc", nil},
		{"SELECT fph_cf('app.' || 'fph_y')", "app.fph_y", "vc", nil},
		{"SELECT fph_exec($1)", "app.fph_j", "11", []any{"SET app.fph_j = '11'"}},
		{"DO $$ BEGIN PERFORM set_config('app.' || 'fph_k', '12', false); END $$", "app.fph_k", "12", nil},
	} {
		for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeExec} {
			a := connect(t, srv.Addr())
			if _, err := a.Exec(ctx, tc.call, append([]any{mode}, tc.args...)...); err != nil {
				t.Fatalf("%s: %v", tc.call, err)
			}
			for i := 0; i < 2; i++ {
				if got := queryString(t, a, "SELECT coalesce(current_setting('"+tc.name+"', true), '<null>')", simple); got != tc.want {
					t.Errorf("%s (%v): the client then reads %s = %q, want %q", tc.call, mode, tc.name, got, tc.want)
				}
			}
			_ = a.Close(ctx)
			if got := nextRead(t, srv.Addr(), "SELECT coalesce(current_setting('"+tc.name+"', true), '<null>')"); got != "<null>" {
				t.Errorf("%s (%v): the next client reads %s = %q, want <null> as in a fresh session", tc.call, mode, tc.name, got)
			}
		}
	}
}

// Adversary round 10's cases around placeholders: SET ... FROM CURRENT
// reads the connection's value, an extended-protocol batch whose first
// statement is a SET goes on past it, a DO block's dynamic SET, and
// pgfleet's own pgfleet.internal.
func TestPlaceholderCornerCases(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	srv := pgtest.Coordinator(t, cl, poolSize(1))
	direct := connect(t, cl.Servers[0].Addr())
	leave := func(qs ...string) {
		t.Helper()
		a := connect(t, srv.Addr())
		for _, q := range qs {
			exec(t, a, q, simple)
		}
		_ = a.Close(ctx)
	}
	value := func(c *pgx.Conn, name string) string {
		t.Helper()
		return queryString(t, c, "SELECT coalesce(current_setting('"+name+"', true), '<null>')", simple)
	}

	// SET FROM CURRENT as the next client's first statement: 42704 in a
	// fresh session, which has no such setting.
	leave("SET app.cc_fc = '1'")
	b := connect(t, srv.Addr())
	if _, err := b.Exec(ctx, "SET app.cc_fc FROM CURRENT", simple); sqlState(err) != "42704" {
		t.Errorf("the next client's SET app.cc_fc FROM CURRENT: %v, want 42704 as in a fresh session", err)
	}
	_ = b.Close(ctx)
	// A client's own SET FROM CURRENT keeps its value, on every later
	// statement (it pins: the value is the connection's).
	c := connect(t, srv.Addr())
	for _, q := range []string{"SET app.cc_keep = 'v'", "BEGIN", "SET LOCAL app.cc_keep = 'w'", "SET app.cc_keep FROM CURRENT", "COMMIT"} {
		exec(t, c, q, simple)
		exec(t, direct, q, simple)
	}
	for i := 0; i < 2; i++ {
		if got, want := value(c, "app.cc_keep"), value(direct, "app.cc_keep"); got != want {
			t.Errorf("after SET FROM CURRENT the client reads %q, PostgreSQL %q", got, want)
		}
	}
	_ = c.Close(ctx)

	// An extended batch: Parse of a SET, then a read of the name before
	// the SET runs, on the next client.
	leave("SET app.cc_batch = 'secret'")
	b = connect(t, srv.Addr())
	pl := b.PgConn().StartPipeline(ctx)
	pl.SendPrepare("cc_s1", "SET app.cc_batch = '2'", nil)
	pl.SendQueryParams("SELECT coalesce(current_setting('app.cc_batch', true), '<null>')", nil, nil, nil, nil)
	var got string
	if rows := pipelineRows(t, pl); len(rows) == 1 {
		got = rows[0]
	}
	if got != "<null>" {
		t.Errorf("a batch that parses a SET, then reads the name: %q, want <null> as in a fresh session", got)
	}
	_ = b.Close(ctx)

	// A SET and a statement prepared before it ran, in one pipeline: the
	// statement reads the same after the SET (a custom setting changes no
	// constant's reading), as in PostgreSQL.
	for _, c := range []*pgx.Conn{connect(t, srv.Addr()), direct} {
		pl := c.PgConn().StartPipeline(ctx)
		pl.SendPrepare("cc_p1", "SET app.cc_pipe = '2'", nil)
		pl.SendPrepare("cc_p2", "SELECT coalesce(current_setting('app.cc_pipe', true), '<null>'), '<a/>'::xml::text", nil)
		pl.SendQueryPrepared("cc_p1", nil, nil, nil)
		pl.SendQueryPrepared("cc_p2", nil, nil, nil)
		rows := pipelineRows(t, pl)
		if len(rows) != 1 || rows[0] != "2" {
			t.Errorf("SET then a statement prepared before it, one pipeline: %q, want [2]", rows)
		}
		exec(t, c, "DEALLOCATE ALL", simple)
		exec(t, c, "RESET app.cc_pipe", simple)
	}

	// A DO block's dynamic SET: the client keeps its value, the next one
	// has none.
	c = connect(t, srv.Addr())
	exec(t, c, `DO $$ BEGIN EXECUTE 'SET app.cc_do = ''5'''; END $$`, simple)
	if got := value(c, "app.cc_do"); got != "5" {
		t.Errorf("after a DO block's EXECUTE 'SET app.cc_do = ...' the client reads %q, want 5", got)
	}
	_ = c.Close(ctx)
	b = connect(t, srv.Addr())
	if got := value(b, "app.cc_do"); got != "<null>" {
		t.Errorf("the next client reads app.cc_do = %q, want <null>", got)
	}
	_ = b.Close(ctx)

	// pgfleet.internal, which pgfleet's DDL sets on worker connections,
	// reads the same for every client, before and after such DDL.
	b = connect(t, srv.Addr())
	before := value(b, "pgfleet.internal")
	_ = b.Close(ctx)
	leave("CREATE TABLE cc_dist (id int PRIMARY KEY, v int)", "SELECT create_distributed_table('cc_dist', 'id')",
		"ALTER TABLE cc_dist ADD COLUMN w int", "INSERT INTO cc_dist VALUES (1, 1, 1)")
	t.Cleanup(func() { _, _ = direct.Exec(ctx, "DROP TABLE IF EXISTS cc_dist CASCADE", simple) })
	b = connect(t, srv.Addr())
	if after := value(b, "pgfleet.internal"); after != before {
		t.Errorf("after another client's DDL pgfleet.internal reads %q, before %q", after, before)
	}
	exec(t, b, "DROP TABLE cc_dist", simple)
	_ = b.Close(ctx)
}

// A function that sets a custom setting for the transaction only
// (set_config(name, value, true), the RLS tenant of one transaction) leaves
// the name defined and empty, as PostgreSQL does: the client reads an empty string after
// it, the next client NULL, and the client is not pinned (with a pool of
// one, another client is served while it stays connected).
func TestFunctionLocalPlaceholderDoesNotPin(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	srv := pgtest.Coordinator(t, cl, func(c *coordinator.Config) { c.PoolSize, c.PoolTimeout = 1, 2*time.Second })
	setup := connect(t, srv.Addr())
	exec(t, setup, `CREATE OR REPLACE FUNCTION flp_tenant(t int) RETURNS text LANGUAGE plpgsql AS $$
		BEGIN PERFORM set_config('app.flp_tenant', t::text, true); RETURN current_setting('app.flp_tenant'); END $$`, simple)
	exec(t, setup, `CREATE OR REPLACE FUNCTION flp_session(t int) RETURNS text LANGUAGE plpgsql AS $$
		BEGIN PERFORM set_config('app.flp_session', t::text, false); RETURN t::text; END $$`, simple)
	exec(t, setup, "CREATE TABLE IF NOT EXISTS flp_dist (id int PRIMARY KEY)", simple)
	exec(t, setup, "SELECT create_distributed_table('flp_dist', 'id')", simple)
	exec(t, setup, "INSERT INTO flp_dist VALUES (1), (2), (3), (4), (5), (6), (7), (8), (9), (10), (11), (12), (13), (14), (15), (16), (17), (18), (19), (20)", simple)
	t.Cleanup(func() {
		c := connect(t, srv.Addr())
		// (The functions too: their bodies name t, which would keep a
		// later test's table t from being distributed.)
		for _, q := range []string{"DROP TABLE IF EXISTS flp_dist", "DROP FUNCTION IF EXISTS flp_tenant(int)", "DROP FUNCTION IF EXISTS flp_session(int)"} {
			_, _ = c.Exec(ctx, q, simple)
		}
	})
	_ = setup.Close(ctx)

	// A session-level value set by a function is the client's, as a SET:
	// it reads it on every statement, its multi-shard reads run, another
	// client is served while it stays connected and does not see it.
	a := connect(t, srv.Addr())
	exec(t, a, "SELECT flp_session(7)", simple)
	for i := 0; i < 2; i++ {
		if got := queryString(t, a, "SELECT current_setting('app.flp_session')", simple); got != "7" {
			t.Errorf("after flp_session(7) the client reads %q, want 7", got)
		}
		if got := queryString(t, a, "SELECT count(*)::text FROM flp_dist WHERE current_setting('app.flp_session') = '7'", simple); got != "20" {
			t.Errorf("a multi-shard read under the function's setting: %q rows, want 20", got)
		}
	}
	if got := nextRead(t, srv.Addr(), "SELECT coalesce(current_setting('app.flp_session', true), '<null>')"); got != "<null>" {
		t.Errorf("another client reads app.flp_session = %q, want <null>", got)
	}
	_ = a.Close(ctx)

	// In a transaction block, a multi-shard read after the function
	// changed the session on one worker's connection: PostgreSQL's count,
	// or 0A000, never a count the other workers read without the change.
	for _, fn := range []string{"flp_session(8)", "flp_tenant(8)"} {
		a = connect(t, srv.Addr())
		exec(t, a, "BEGIN", simple)
		exec(t, a, "SELECT "+fn, simple)
		var n string
		err := a.QueryRow(ctx, "SELECT count(*)::text FROM flp_dist WHERE coalesce(current_setting('app.flp_session', true), current_setting('app.flp_tenant', true)) = '8'", simple).Scan(&n)
		if err != nil && sqlState(err) != "0A000" || err == nil && n != "20" {
			t.Errorf("BEGIN; SELECT %s; a multi-shard read: %s rows, %v; want 20 or 0A000", fn, n, err)
		}
		_ = a.Close(ctx)
	}

	// Adversary round 12, each against the worker's own answer: a value a
	// function set, then a SET in the block, then ROLLBACK; a cursor's
	// function run at a FETCH after a SET; names written with dollar
	// quotes and quoted identifiers.
	setup = connect(t, srv.Addr())
	exec(t, setup, `CREATE OR REPLACE FUNCTION flp_setx(n text, v text) RETURNS text LANGUAGE sql AS $$ SELECT set_config(n, v, false) $$`, simple)
	exec(t, setup, `CREATE OR REPLACE FUNCTION flp_dq(v text) RETURNS text LANGUAGE plpgsql AS $f$ BEGIN RETURN set_config($q$app.flp_dq$q$, v, false); END $f$`, simple)
	_ = setup.Close(ctx)
	for i, qs := range [][]string{
		{"SET app.flp_session = '3'", "BEGIN", "SELECT flp_session(1)", "SET LOCAL statement_timeout = '5s'", "ROLLBACK"},
		{"BEGIN", "SELECT flp_session(2)", "SET LOCAL work_mem = '8MB'", "COMMIT"},
		{"BEGIN", "DECLARE flp_c CURSOR FOR SELECT flp_setx('app.flp_cur', g::text) FROM generate_series(1, 3) g", "SET app.flp_o = '1'", "FETCH 3 FROM flp_c", "COMMIT"},
		{"SET app.flp_cur = 'S0'", "BEGIN", "DECLARE flp_c CURSOR FOR SELECT flp_setx('app.flp_cur', g::text) FROM generate_series(1, 3) g", "FETCH 1 FROM flp_c", "SET app.flp_o = '1'", "FETCH 1 FROM flp_c", "ROLLBACK"},
		{"SELECT flp_dq('Q1')"},
		{`DO $$ BEGIN SET "app"."flp_qq" = 'v'; END $$`},
	} {
		a := connect(t, srv.Addr())
		d, err := pgx.Connect(ctx, pgtest.URL(cl.Servers[0].Addr()))
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range qs {
			_, errA := a.Exec(ctx, q, simple)
			_, errD := d.Exec(ctx, q, simple)
			if (errA == nil) != (errD == nil) {
				t.Fatalf("case %d, %q: %v; PostgreSQL: %v", i, q, errA, errD)
			}
		}
		const read = "SELECT concat_ws(',', coalesce(current_setting('app.flp_session', true), '<null>'), coalesce(current_setting('app.flp_cur', true), '<null>'), coalesce(current_setting('app.flp_dq', true), '<null>'), coalesce(current_setting('app.flp_qq', true), '<null>'))"
		want := queryString(t, d, read, simple)
		for k := 0; k < 2; k++ {
			if got := queryString(t, a, read, simple); got != want {
				t.Errorf("case %d %q: the client reads %s, PostgreSQL %s", i, qs, got, want)
			}
		}
		_ = d.Close(ctx)
		_ = a.Close(ctx)
		if got := nextRead(t, srv.Addr(), read); got != "<null>,<null>,<null>,<null>" {
			t.Errorf("case %d %q: the next client reads %s, want none", i, qs, got)
		}
	}

	// set_config of a custom name in the statement itself is the
	// session's SET too: read again, multi-shard reads run, another
	// client is served and does not see it; with a parameter (extended
	// protocol) and for the transaction only.
	a = connect(t, srv.Addr())
	exec(t, a, "SELECT set_config('app.flp_sc', '4', false)", simple)
	if _, err := a.Exec(ctx, "SELECT set_config('app.flp_sc2', $1, false)", "p9"); err != nil {
		t.Fatal(err)
	}
	exec(t, a, "BEGIN", simple)
	exec(t, a, "SELECT set_config('app.flp_sc3', 'L', true)", simple)
	exec(t, a, "COMMIT", simple)
	for i := 0; i < 2; i++ {
		if got := queryString(t, a, "SELECT concat_ws(',', current_setting('app.flp_sc'), current_setting('app.flp_sc2'), current_setting('app.flp_sc3'))", simple); got != "4,p9," {
			t.Errorf("after set_config in the statements the client reads %q, want 4,p9, (the local one empty)", got)
		}
		if got := queryString(t, a, "SELECT count(*)::text FROM flp_dist WHERE current_setting('app.flp_sc') = '4'", simple); got != "20" {
			t.Errorf("a multi-shard read after set_config: %q rows, want 20", got)
		}
	}
	// Per row of a distributed table: on one shard, the row's value; over
	// several, 0A000 (the shards' connections would keep it).
	exec(t, a, "SELECT set_config('app.flp_row', id::text, false) FROM flp_dist WHERE id = 3", simple)
	if got := queryString(t, a, "SELECT current_setting('app.flp_row')", simple); got != "3" {
		t.Errorf("set_config per row on one shard: the client reads %q, want 3", got)
	}
	if _, err := a.Exec(ctx, "SELECT set_config('app.flp_row', id::text, false) FROM flp_dist", simple); sqlState(err) != "0A000" {
		t.Errorf("set_config per row over every shard: %v, want 0A000", err)
	}
	if got := nextRead(t, srv.Addr(), "SELECT concat_ws(',', coalesce(current_setting('app.flp_sc', true), '<null>'), coalesce(current_setting('app.flp_sc3', true), '<null>'))"); got != "<null>,<null>" {
		t.Errorf("another client reads %q, want <null>,<null>", got)
	}
	_ = a.Close(ctx)

	// A transaction that calls it and rolls back leaves the name defined
	// and empty for the client, and nothing for the next.
	a = connect(t, srv.Addr())
	exec(t, a, "BEGIN", simple)
	exec(t, a, "SELECT flp_tenant(6)", simple)
	exec(t, a, "ROLLBACK", simple)
	if got := queryString(t, a, "SELECT coalesce(current_setting('app.flp_tenant', true), '<null>')", simple); got != "" {
		t.Errorf("after ROLLBACK the client reads %q, want '' as in PostgreSQL", got)
	}
	if got := nextRead(t, srv.Addr(), "SELECT coalesce(current_setting('app.flp_tenant', true), '<null>')"); got != "<null>" {
		t.Errorf("after another client's ROLLBACK a client reads %q, want <null>", got)
	}
	_ = a.Close(ctx)
	for _, block := range []bool{false, true} {
		a := connect(t, srv.Addr())
		if block {
			exec(t, a, "BEGIN", simple)
		}
		if got := queryString(t, a, "SELECT flp_tenant(5)", simple); got != "5" {
			t.Errorf("flp_tenant(5) returned %q", got)
		}
		if block {
			if got := queryString(t, a, "SELECT current_setting('app.flp_tenant')", simple); got != "5" {
				t.Errorf("in its block the client reads %q, want 5", got)
			}
			exec(t, a, "COMMIT", simple)
		}
		if got := queryString(t, a, "SELECT coalesce(current_setting('app.flp_tenant', true), '<null>')", simple); got != "" {
			t.Errorf("block %v: after its transaction the client reads %q, want '' as in PostgreSQL", block, got)
		}
		if got := nextRead(t, srv.Addr(), "SELECT coalesce(current_setting('app.flp_tenant', true), '<null>')"); got != "<null>" {
			t.Errorf("block %v: another client reads %q, want <null>", block, got)
		}
		_ = a.Close(ctx)
	}
}

// pipelineRows syncs pl, reads its results to the Sync and closes it: the
// first column of every row, an error failing the test.
func pipelineRows(t *testing.T, pl *pgconn.Pipeline) []string {
	t.Helper()
	if err := pl.Sync(); err != nil {
		t.Fatal(err)
	}
	var rows []string
	for {
		res, err := pl.GetResults()
		if err != nil {
			t.Fatalf("the pipeline: %v", err)
		}
		if res == nil {
			break
		}
		if rr, ok := res.(*pgconn.ResultReader); ok {
			r := rr.Read()
			if r.Err != nil {
				t.Fatalf("the pipeline: %v", r.Err)
			}
			for _, row := range r.Rows {
				rows = append(rows, string(row[0]))
			}
		}
		if _, ok := res.(*pgconn.PipelineSync); ok {
			break
		}
	}
	if err := pl.Close(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// nextRead connects a new client, reads one text value with sql (simple
// protocol) and disconnects it.
func nextRead(t *testing.T, addr, sql string) string {
	t.Helper()
	c := connect(t, addr)
	defer c.Close(context.Background())
	return queryString(t, c, sql, pgx.QueryExecModeSimpleProtocol)
}
