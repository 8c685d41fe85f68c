package coordinator_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// User code that runs with no call in the statement's text (a trigger, a
// column default, a domain's CHECK, a cast's or an operator's function, a
// foreign key's cascade into a table with a trigger, a partition's
// trigger, a function shadowing a built-in's name or called in attribute
// notation, pg_settings' UPDATE rule) changes the session state of the
// pooled connection it runs on: the change stays with its client, and no
// other client of the same role sees it (adversary, issue 13's stop 43).
func TestImplicitUserCodeStateStaysWithItsClient(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(3))
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	a := connect(t, srv.Addr())
	// objects runs make through the coordinator and drop (dependents
	// first) when the test ends, reporting a drop that fails.
	objects := func(t *testing.T, make, drop []string) {
		t.Helper()
		for _, q := range make {
			exec(t, a, q, simple)
		}
		t.Cleanup(func() {
			c := connect(t, srv.Addr())
			for _, q := range drop {
				if _, err := c.Exec(ctx, q, simple); err != nil {
					t.Errorf("cleanup: %s: %v", q, err)
				}
			}
		})
	}
	drop := []string{ // (dependents first: pgfleet refuses a CASCADE that drops others)
		"DROP FUNCTION IF EXISTS iso14_attr(iso14_plain)",
		"DROP TABLE IF EXISTS iso14_trg, iso14_def, iso14_dom_t, iso14_fkc, iso14_fkp, iso14_part, iso14_plain, iso14_ix, iso14_st, iso14_bt",
		`DROP TABLE IF EXISTS "iso14 my tab", iso14_t$x, "iso14_Äb", iso14_lllllllllllllllllllllllllllllllllllllllllllllllllllllllll`,
		"DROP OPERATOR IF EXISTS ~~ (int, int)",
		"DROP FUNCTION IF EXISTS iso14_like(int, int)",
		"DROP FUNCTION IF EXISTS iso14_lock(int)",
		"DROP FUNCTION IF EXISTS iso14_benign()",
		"DROP CAST IF EXISTS (int AS iso14_mood)",
		"DROP OPERATOR IF EXISTS === (int, int)",
		"DROP DOMAIN IF EXISTS iso14_dom",
		"DROP DOMAIN IF EXISTS iso14_domd",
		"DROP FUNCTION IF EXISTS iso14_sp(int)",
		"DROP FUNCTION IF EXISTS iso14_spd(int)",
		"DROP FUNCTION IF EXISTS iso14_setd(int)",
		"DROP FUNCTION IF EXISTS iso14_trgf()",
		"DROP FUNCTION IF EXISTS iso14_deff()",
		"DROP FUNCTION IF EXISTS iso14_castf(int)",
		"DROP FUNCTION IF EXISTS iso14_opf(int, int)",
		"DROP FUNCTION IF EXISTS public.length(int)",
		"DROP TYPE IF EXISTS iso14_mood",
	}
	objects(t, drop, drop) // (what an earlier run left, then what this one makes)
	// What the user code changes: search_path, and an advisory lock of
	// its backend's own (never waited for).
	const sp = "PERFORM set_config('search_path', 'iso14_schema', false); PERFORM pg_try_advisory_lock(pg_backend_pid());"
	// Over distributed and reference tables, the setting only: user code
	// taking advisory locks is refused there (TestAdvisoryLocksInUserCode).
	const spd = "PERFORM set_config('search_path', 'iso14_schema', false);"
	const long = "iso14_llllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllll" // 70 bytes: PostgreSQL keeps 63
	for _, q := range []string{
		"CREATE FUNCTION iso14_sp(int) RETURNS bool LANGUAGE plpgsql AS $$ BEGIN " + sp + " RETURN true; END $$",
		"CREATE FUNCTION iso14_trgf() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN " + sp + " RETURN COALESCE(NEW, OLD); END $$",
		"CREATE FUNCTION iso14_deff() RETURNS int LANGUAGE plpgsql AS $$ BEGIN " + spd + " RETURN 1; END $$",
		"CREATE FUNCTION iso14_spd(int) RETURNS bool LANGUAGE plpgsql AS $$ BEGIN " + spd + " RETURN true; END $$",
		"CREATE FUNCTION iso14_setd(int) RETURNS int LANGUAGE plpgsql IMMUTABLE AS $$ BEGIN PERFORM set_config('work_mem', '4321kB', false); RETURN $1; END $$",
		"CREATE TYPE iso14_mood AS ENUM ('calm')",
		"CREATE FUNCTION iso14_castf(int) RETURNS iso14_mood LANGUAGE plpgsql AS $$ BEGIN " + sp + " RETURN 'calm'; END $$",
		"CREATE CAST (int AS iso14_mood) WITH FUNCTION iso14_castf(int)",
		"CREATE FUNCTION iso14_opf(int, int) RETURNS bool LANGUAGE plpgsql AS $$ BEGIN " + sp + " RETURN true; END $$",
		"CREATE OPERATOR === (LEFTARG = int, RIGHTARG = int, FUNCTION = iso14_opf)",
		"CREATE FUNCTION public.length(int) RETURNS int LANGUAGE plpgsql AS $$ BEGIN " + sp + " RETURN 1; END $$",
		"CREATE DOMAIN iso14_dom AS int CHECK (iso14_sp(VALUE))",
		"CREATE DOMAIN iso14_domd AS int CHECK (iso14_spd(VALUE))",
		"CREATE TABLE iso14_dom_t (v iso14_dom)",
		"CREATE TABLE iso14_trg (id int PRIMARY KEY)",
		"CREATE TRIGGER iso14_t BEFORE INSERT ON iso14_trg FOR EACH ROW EXECUTE FUNCTION iso14_trgf()",
		"CREATE TABLE iso14_def (id int, v int DEFAULT iso14_deff())",
		"CREATE TABLE iso14_fkp (id int PRIMARY KEY)",
		"CREATE TABLE iso14_fkc (id int REFERENCES iso14_fkp ON DELETE CASCADE)",
		"CREATE TRIGGER iso14_t BEFORE DELETE ON iso14_fkc FOR EACH ROW EXECUTE FUNCTION iso14_trgf()",
		"INSERT INTO iso14_fkp SELECT g FROM generate_series(1, 4) g",
		"INSERT INTO iso14_fkc SELECT g FROM generate_series(1, 4) g",
		"CREATE TABLE iso14_part (id int) PARTITION BY RANGE (id)",
		"CREATE TABLE iso14_part_1 PARTITION OF iso14_part FOR VALUES FROM (0) TO (100)",
		"CREATE TRIGGER iso14_t BEFORE INSERT ON iso14_part_1 FOR EACH ROW EXECUTE FUNCTION iso14_trgf()",
		"CREATE TABLE iso14_plain (id int)",
		"INSERT INTO iso14_plain VALUES (1)",
		"CREATE FUNCTION iso14_attr(iso14_plain) RETURNS int LANGUAGE plpgsql AS $$ BEGIN " + sp + " RETURN 1; END $$",
		`CREATE TABLE "iso14 my tab" (id int)`,
		`CREATE TRIGGER iso14_t BEFORE INSERT ON "iso14 my tab" FOR EACH ROW EXECUTE FUNCTION iso14_trgf()`,
		"CREATE TABLE iso14_t$x (id int)",
		"CREATE TRIGGER iso14_t BEFORE INSERT ON iso14_t$x FOR EACH ROW EXECUTE FUNCTION iso14_trgf()",
		"CREATE TABLE " + long + " (id int)",
		"CREATE TRIGGER iso14_t BEFORE INSERT ON " + long + " FOR EACH ROW EXECUTE FUNCTION iso14_trgf()",
		`CREATE TABLE "iso14_Äb" (id int)`,
		`CREATE TRIGGER iso14_t BEFORE INSERT ON "iso14_Äb" FOR EACH ROW EXECUTE FUNCTION iso14_trgf()`,
		"CREATE FUNCTION iso14_lock(int) RETURNS int LANGUAGE plpgsql IMMUTABLE AS $$ BEGIN PERFORM pg_try_advisory_lock(pg_backend_pid()); RETURN $1; END $$",
		"CREATE TABLE iso14_ix (a int, b int)",
		"CREATE INDEX iso14_ix_i ON iso14_ix ((iso14_lock(a)))",
		"CREATE TABLE iso14_st (a int, b int)",
		"CREATE STATISTICS iso14_st_s ON (iso14_lock(a)), b FROM iso14_st",
		"CREATE FUNCTION iso14_benign() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$",
		"CREATE TABLE iso14_bt (id int)",
		"CREATE TRIGGER iso14_t BEFORE INSERT ON iso14_bt FOR EACH ROW EXECUTE FUNCTION iso14_benign()",
	} {
		exec(t, a, q, simple)
	}
	// (These run user code, which pins the client that runs them.)
	for _, q := range []string{
		"INSERT INTO iso14_ix SELECT g, g FROM generate_series(1, 10) g",
		"INSERT INTO iso14_st SELECT g, g FROM generate_series(1, 10) g",
	} {
		c := connect(t, srv.Addr())
		exec(t, c, q, simple)
		_ = c.Close(ctx)
	}
	testTable(t, a, "iso14_dist", "(id int PRIMARY KEY, v int DEFAULT iso14_deff())", "SELECT create_distributed_table('iso14_dist', 'id', shard_count => 4)")
	testTable(t, a, "iso14_ref", "(id int PRIMARY KEY, v iso14_domd)", "SELECT create_reference_table('iso14_ref')")
	testTable(t, a, "iso14_dist2", "(id int PRIMARY KEY, v iso14_domd)", "SELECT create_distributed_table('iso14_dist2', 'id', shard_count => 4)")
	state := func(t *testing.T, c *pgx.Conn) string {
		t.Helper()
		return sessionState(t, c) + " locks " + queryString(t, c,
			"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()", simple)
	}
	clean := state(t, connect(t, srv.Addr()))
	extended := pgx.QueryExecModeCacheStatement
	var checkSeq func(t *testing.T, stmts []string, mode pgx.QueryExecMode, own bool)
	// check runs sql on a client, and checks that no other client sees what
	// it changed, and that the client itself sees it (own; user code that
	// ran on several workers' connections changed theirs, which are
	// closed after it, as with a multi-shard statement calling a user
	// function).
	check := func(t *testing.T, sql string, mode pgx.QueryExecMode, own bool) {
		t.Helper()
		checkSeq(t, []string{sql}, mode, own)
	}
	checkSeq = func(t *testing.T, stmts []string, mode pgx.QueryExecMode, own bool) {
		t.Helper()
		a := connect(t, srv.Addr())
		defer a.Close(ctx) // (a pinned client holds a connection)
		b := connect(t, srv.Addr())
		for _, sql := range stmts {
			if bad, ok := strings.CutPrefix(sql, "!"); ok { // (expected to fail)
				if _, err := a.Exec(ctx, bad, mode); err == nil {
					t.Fatalf("%s: no error", bad)
				}
				continue
			}
			if strings.HasPrefix(sql, "COPY") {
				if _, err := a.PgConn().CopyFrom(ctx, strings.NewReader("10\n11\n"), sql); err != nil {
					t.Fatalf("%s: %v", sql, err)
				}
			} else if _, err := a.Exec(ctx, sql, mode); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
		sql := strings.Join(stmts, "; ")
		mine := state(t, a)
		if own && mine == clean {
			t.Fatalf("%s changed nothing the test can see: %q", sql, mine)
		}
		for j := 0; j < 4; j++ {
			if got := state(t, b); got != clean {
				t.Fatalf("another client sees %q after %s, want %q", got, sql, clean)
			}
			if got := state(t, connect(t, srv.Addr())); got != clean {
				t.Fatalf("a new client sees %q after %s, want %q", got, sql, clean)
			}
			if got := state(t, a); got != mine {
				t.Fatalf("the client's own state went from %q to %q", mine, got)
			}
		}
	}
	for _, tc := range []struct {
		name  string
		sql   string
		mode  pgx.QueryExecMode
		other bool // the user code ran on other workers' connections
	}{
		{"trigger", "INSERT INTO iso14_trg VALUES (1)", simple, false},
		{"trigger, extended", "INSERT INTO iso14_trg VALUES (2)", extended, false},
		{"column default", "INSERT INTO iso14_def (id) VALUES (1)", simple, false},
		{"column default, extended", "INSERT INTO iso14_def (id) VALUES (2)", extended, false},
		{"domain CHECK", "INSERT INTO iso14_dom_t VALUES (1)", simple, false},
		{"domain CHECK in a cast", "SELECT 1::iso14_dom", extended, false},
		{"cast", "SELECT 1::iso14_mood", simple, false},
		{"operator", "SELECT 1 === 2", simple, false},
		{"operator, extended", "SELECT 1 === 2", extended, false},
		{"cascade into a table with a trigger", "DELETE FROM iso14_fkp WHERE id = 1", simple, false},
		{"cascade, extended", "DELETE FROM iso14_fkp WHERE id = 2", extended, false},
		{"partition's trigger", "INSERT INTO iso14_part VALUES (1)", simple, false},
		{"function shadowing a built-in", "SELECT length(5)", simple, false},
		{"attribute notation", "SELECT p.iso14_attr FROM iso14_plain p", simple, false},
		{"distributed table's column default", "INSERT INTO iso14_dist (id) VALUES (1)", simple, false},
		{"distributed table's column default, extended", "INSERT INTO iso14_dist (id) VALUES (2)", extended, false},
		{"reference table's domain CHECK", "INSERT INTO iso14_ref VALUES (1, 1)", simple, true},
		{"reference table's domain CHECK, extended", "INSERT INTO iso14_ref VALUES (2, 2)", extended, true},
		{"distributed table's domain CHECK, several shards", "INSERT INTO iso14_dist2 VALUES (1, 1), (2, 2), (3, 3), (4, 4), (5, 5)", simple, true},
		{"distributed table's domain CHECK, several shards, extended", "INSERT INTO iso14_dist2 VALUES (6, 6), (7, 7), (8, 8), (9, 9)", extended, true},
		{"COPY into a table with a trigger", "COPY iso14_trg FROM STDIN", simple, false},
		{"quoted name with a space", `INSERT INTO "iso14 my tab" VALUES (1)`, simple, false},
		{"quoted name with a space, extended", `INSERT INTO "iso14 my tab" VALUES (2)`, extended, false},
		{"name with $", "INSERT INTO iso14_t$x VALUES (1)", simple, false},
		{"name cut to 63 bytes", "INSERT INTO " + long + " VALUES (1)", simple, false},
		{"name with a non-ASCII capital", `INSERT INTO "iso14_Äb" VALUES (1)`, simple, false},
		// (The function's name hidden in an escape: a text built at run
		// time is refused while the fleet has distributed tables.)
		{"query_to_xml", `SELECT query_to_xml(E'SELECT iso14\x5fsp(1)', true, false, '')`, simple, false},
		{"ANALYZE of every table", "ANALYZE", simple, true}, // (every worker's tables: on connections of its own)
		{"ANALYZE of extended statistics", "ANALYZE iso14_st", simple, false},
		{"pg_settings", "UPDATE pg_settings SET setting = 'iso14_schema' WHERE name = 'search_path'", simple, false},
	} {
		t.Run(tc.name, func(t *testing.T) { check(t, tc.sql, tc.mode, !tc.other) })
	}
	// An operator the grammar uses unwritten (LIKE's ~~): with one of the
	// user's, every statement is verified.
	t.Run("LIKE's operator", func(t *testing.T) {
		exec(t, a, "CREATE FUNCTION iso14_like(int, int) RETURNS bool LANGUAGE plpgsql AS $$ BEGIN "+sp+" RETURN true; END $$", simple)
		exec(t, a, "CREATE OPERATOR ~~ (LEFTARG = int, RIGHTARG = int, FUNCTION = iso14_like)", simple)
		check(t, "SELECT 1 LIKE 2", simple, true)
		exec(t, a, "DROP OPERATOR ~~ (int, int)", simple)
	})
	// User code queued in a block that runs later: a deferred trigger at
	// SET CONSTRAINTS or COMMIT, a cursor's query at FETCH, with a SET in
	// between (adversary round 2); a transaction's advisory lock beside
	// the session one a function takes.
	t.Run("queued user code", func(t *testing.T) {
		objects(t, []string{
			"CREATE TABLE iso14_dt (a int)",
			"CREATE CONSTRAINT TRIGGER iso14_t AFTER INSERT ON iso14_dt DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION iso14_trgf()",
			"CREATE VIEW iso14_lv AS SELECT iso14_sp(g) AS x FROM generate_series(1, 2) g",
			"CREATE FUNCTION iso14_lk5() RETURNS int LANGUAGE sql AS 'SELECT 1 FROM (SELECT pg_advisory_lock(1415)) s'",
		}, []string{"DROP VIEW IF EXISTS iso14_lv", "DROP TABLE IF EXISTS iso14_dt", "DROP FUNCTION IF EXISTS iso14_lk5()"})
		for _, stmts := range [][]string{
			{"BEGIN", "INSERT INTO iso14_dt VALUES (1)", "SET CONSTRAINTS ALL IMMEDIATE", "COMMIT"},
			{"BEGIN", "INSERT INTO iso14_dt VALUES (2)", "SET application_name = 'iso14'", "COMMIT"},
			{"BEGIN", "DECLARE iso14_c CURSOR FOR SELECT * FROM iso14_lv", "SET application_name = 'iso14'", "FETCH ALL FROM iso14_c", "COMMIT"},
			{"BEGIN", "SELECT pg_advisory_xact_lock(1414)", "SELECT iso14_lock(1)", "COMMIT"},
			// (One query string: the SET's comparison would come before
			// the COMMIT's trigger; adversary round 3.)
			{"BEGIN", "INSERT INTO iso14_dt VALUES (3)", "SET work_mem = '5MB'; COMMIT"},
			{"BEGIN", "INSERT INTO iso14_dt VALUES (4)", "RESET work_mem; COMMIT"},
			// A SET that fails after user code: the block ends with no
			// other snapshot.
			{"BEGIN", "SELECT pg_advisory_xact_lock(1415)", "SELECT iso14_lk5()", "!SET work_mem = 'bogus'", "ROLLBACK"},
		} {
			checkSeq(t, stmts, simple, true)
		}
		// User code in a block's coordinator-run write over several
		// workers, which takes no snapshot: the block's connections are
		// closed, not pooled (adversary round 3). (Rows on every shard,
		// so that it runs on the default node's connections, which the
		// check reads.)
		exec(t, a, "INSERT INTO iso14_dist (id, v) SELECT g, g FROM generate_series(100, 131) g", simple)
		checkSeq(t, []string{"BEGIN", "UPDATE iso14_dist SET v = iso14_setd(v)", "COMMIT"}, simple, false)
		checkSeq(t, []string{"BEGIN", "UPDATE iso14_dist SET v = iso14_setd(v)", "COMMIT"}, extended, false)
	})
	// A default operator class of a built-in type that had none, whose
	// functions are the user's: DISTINCT uses it unwritten.
	t.Run("default operator class of a built-in type", func(t *testing.T) {
		objects(t, []string{
			"CREATE FUNCTION iso14_jeq(json, json) RETURNS bool LANGUAGE plpgsql IMMUTABLE AS $$ BEGIN " + sp + " RETURN $1::text = $2::text; END $$",
			"CREATE FUNCTION iso14_jhash(json) RETURNS int LANGUAGE plpgsql IMMUTABLE AS $$ BEGIN " + sp + " RETURN hashtext($1::text); END $$",
			"CREATE OPERATOR ==== (LEFTARG = json, RIGHTARG = json, FUNCTION = iso14_jeq, HASHES)",
			"CREATE OPERATOR CLASS iso14_json_ops DEFAULT FOR TYPE json USING hash AS OPERATOR 1 ====, FUNCTION 1 iso14_jhash(json)",
			"CREATE TABLE iso14_jt (j json)",
			"INSERT INTO iso14_jt VALUES ('1'), ('1'), ('2')",
		}, []string{"DROP TABLE IF EXISTS iso14_jt", "DROP OPERATOR CLASS IF EXISTS iso14_json_ops USING hash",
			"DROP OPERATOR FAMILY IF EXISTS iso14_json_ops USING hash", "DROP OPERATOR IF EXISTS ==== (json, json)",
			"DROP FUNCTION IF EXISTS iso14_jeq(json, json)", "DROP FUNCTION IF EXISTS iso14_jhash(json)"})
		check(t, "SELECT DISTINCT j::text FROM (SELECT j FROM iso14_jt GROUP BY j) s", simple, true)
	})
	// Made by a DO block in a transaction block: the set read before it
	// committed (by the SELECT after it) is read again at its end.
	t.Run("trigger made by a DO block in a transaction", func(t *testing.T) {
		exec(t, a, "CREATE TABLE iso14_plain2 (id int)", simple)
		t.Cleanup(func() { _, _ = connect(t, srv.Addr()).Exec(ctx, "DROP TABLE IF EXISTS iso14_plain2", simple) })
		exec(t, a, "BEGIN", simple)
		exec(t, a, "DO $$ BEGIN CREATE TRIGGER iso14_t BEFORE INSERT ON iso14_plain2 FOR EACH ROW EXECUTE FUNCTION iso14_trgf(); END $$", simple)
		exec(t, a, "SELECT 1", simple)
		exec(t, a, "COMMIT", simple)
		check(t, "INSERT INTO iso14_plain2 VALUES (1)", simple, true)
	})
	// A trigger that changes nothing, then a SET, in one block: the SET
	// is the client's own, followed as any SET is; the session is not
	// pinned (with a pool of 2, one connection for clients holding no
	// other, a pinned idle session would leave none).
	t.Run("trigger then SET in a block", func(t *testing.T) {
		small := pgtest.Coordinator(t, cl, poolSize(2))
		c1 := connect(t, small.Addr())
		for _, q := range []string{"BEGIN", "INSERT INTO iso14_bt VALUES (1)", "SET work_mem = '8MB'", "COMMIT"} {
			exec(t, c1, q, simple)
		}
		c2 := connect(t, small.Addr())
		if got := queryString(t, c2, "SHOW work_mem", simple); got != "4MB" {
			t.Fatalf("another client's work_mem: %s", got)
		}
		if got := queryString(t, c1, "SHOW work_mem", simple); got != "8MB" {
			t.Fatalf("the client's own work_mem after its SET: %s", got)
		}
	})
	// Functions whose bodies change no session state themselves are left
	// out (harmlessBody), but not when what they call or write runs code
	// that does: a table with such a trigger, a user function, one
	// through another; nor one whose SET is not UPDATE's.
	t.Run("trigger functions that look harmless", func(t *testing.T) {
		objects(t, []string{
			"CREATE FUNCTION iso14_hw() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO iso14_trg VALUES (NEW.id + 1000); RETURN NEW; END $$",
			"CREATE FUNCTION iso14_hc() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM iso14_sp(1); RETURN NEW; END $$",
			"CREATE FUNCTION iso14_mid() RETURNS int LANGUAGE sql AS 'SELECT 1 WHERE iso14_sp(1)'",
			"CREATE FUNCTION iso14_hh() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM iso14_mid(); RETURN NEW; END $$",
			"CREATE FUNCTION iso14_hs() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF TG_OP = 'INSERT' THEN SET search_path = iso14_schema; END IF; RETURN NEW; END $$",
			"CREATE FUNCTION iso14_hu() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN UPDATE iso14_hcount SET n = n + 1; RETURN NEW; END $$",
			"CREATE TABLE iso14_hcount (n int)",
			"INSERT INTO iso14_hcount VALUES (0)",
			"CREATE TABLE iso14_hwt (id int)", "CREATE TRIGGER iso14_t BEFORE INSERT ON iso14_hwt FOR EACH ROW EXECUTE FUNCTION iso14_hw()",
			"CREATE TABLE iso14_hct (id int)", "CREATE TRIGGER iso14_t BEFORE INSERT ON iso14_hct FOR EACH ROW EXECUTE FUNCTION iso14_hc()",
			"CREATE TABLE iso14_hht (id int)", "CREATE TRIGGER iso14_t BEFORE INSERT ON iso14_hht FOR EACH ROW EXECUTE FUNCTION iso14_hh()",
			"CREATE TABLE iso14_hst (id int)", "CREATE TRIGGER iso14_t BEFORE INSERT ON iso14_hst FOR EACH ROW EXECUTE FUNCTION iso14_hs()",
			"CREATE TABLE iso14_hut (id int)", "CREATE TRIGGER iso14_t BEFORE INSERT ON iso14_hut FOR EACH ROW EXECUTE FUNCTION iso14_hu()",
		}, []string{"DROP TABLE IF EXISTS iso14_hwt, iso14_hct, iso14_hht, iso14_hst, iso14_hut, iso14_hcount",
			"DROP FUNCTION IF EXISTS iso14_hw()", "DROP FUNCTION IF EXISTS iso14_hc()", "DROP FUNCTION IF EXISTS iso14_hh()",
			"DROP FUNCTION IF EXISTS iso14_mid()", "DROP FUNCTION IF EXISTS iso14_hs()", "DROP FUNCTION IF EXISTS iso14_hu()"})
		// (Adversary round 2.)
		objects(t, []string{
			"CREATE FUNCTION iso14_hcm() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN\n -- update the timestamp\n SET search_path = iso14_schema;\n RETURN NEW; END $$",
			"CREATE TABLE iso14_hcmt (id int)", "CREATE TRIGGER iso14_t BEFORE INSERT ON iso14_hcmt FOR EACH ROW EXECUTE FUNCTION iso14_hcm()",
			"CREATE VIEW iso14_myset AS SELECT name, setting FROM pg_settings",
			"CREATE TABLE iso14_hrl (id int)",
			"CREATE RULE iso14_r AS ON INSERT TO iso14_hrl DO ALSO UPDATE pg_settings SET setting = 'iso14_schema' WHERE name = 'search_path'",
			"CREATE FUNCTION iso14_hvw() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN UPDATE iso14_myset SET setting = 'iso14_schema' WHERE name = 'search_path'; RETURN NEW; END $$",
			"CREATE TABLE iso14_hvwt (id int)", "CREATE TRIGGER iso14_t BEFORE INSERT ON iso14_hvwt FOR EACH ROW EXECUTE FUNCTION iso14_hvw()",
			"CREATE FUNCTION information_schema.iso14_isf() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN " + sp + " RETURN NEW; END $$",
			"CREATE TABLE iso14_ist (id int)", "CREATE TRIGGER iso14_t BEFORE INSERT ON iso14_ist FOR EACH ROW EXECUTE FUNCTION information_schema.iso14_isf()",
			// (Round 3: a composite type over a domain; a SQL
			// function that makes a temporary table by its own
			// search_path.)
			"CREATE TYPE iso14_comp AS (a iso14_dom)",
			"CREATE TABLE iso14_compt (id int, c iso14_comp)",
			"CREATE FUNCTION iso14_mkt() RETURNS int LANGUAGE sql SET search_path = pg_temp AS $$ SELECT 1 AS a INTO iso14_leak; SELECT 7 $$",
			"CREATE TABLE iso14_mktt (id int, d int DEFAULT iso14_mkt())",
		}, []string{"DROP TABLE IF EXISTS iso14_hcmt, iso14_hrl, iso14_hvwt, iso14_ist, iso14_compt, iso14_mktt", "DROP TYPE IF EXISTS iso14_comp",
			"DROP FUNCTION IF EXISTS iso14_mkt()", "DROP VIEW IF EXISTS iso14_myset",
			"DROP FUNCTION IF EXISTS iso14_hcm()", "DROP FUNCTION IF EXISTS iso14_hvw()", "DROP FUNCTION IF EXISTS information_schema.iso14_isf()"})
		check(t, "INSERT INTO iso14_hcmt VALUES (1)", simple, true)
		check(t, "UPDATE iso14_myset SET setting = 'iso14_schema' WHERE name = 'search_path'", simple, true)
		check(t, "INSERT INTO iso14_hrl VALUES (1)", simple, true)
		check(t, "INSERT INTO iso14_hvwt VALUES (1)", extended, true)
		check(t, "INSERT INTO iso14_ist VALUES (1)", simple, true)
		check(t, "INSERT INTO iso14_compt VALUES (1, ROW(5))", simple, true)
		// (Round 5: an extension's function that runs SQL given as
		// text, called from a body that otherwise looks harmless.)
		objects(t, []string{
			"CREATE EXTENSION IF NOT EXISTS tablefunc",
			`CREATE FUNCTION iso14_ct() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM * FROM crosstab('SELECT ''a''::text, ''b''::text, set_' || 'config(''search_path'', ''iso14_schema'', false)') AS t(r text, b text); RETURN NEW; END $$`,
			"CREATE TABLE iso14_ctt (id int)", "CREATE TRIGGER iso14_t BEFORE INSERT ON iso14_ctt FOR EACH ROW EXECUTE FUNCTION iso14_ct()",
		}, []string{"DROP TABLE IF EXISTS iso14_ctt", "DROP FUNCTION IF EXISTS iso14_ct()", "DROP EXTENSION IF EXISTS tablefunc"})
		check(t, "INSERT INTO iso14_ctt VALUES (1)", simple, true)
		check(t, "INSERT INTO iso14_mktt (id) VALUES (1)", simple, true)
		check(t, "INSERT INTO iso14_hwt VALUES (1)", simple, true)
		check(t, "INSERT INTO iso14_hct VALUES (1)", extended, true)
		check(t, "INSERT INTO iso14_hht VALUES (1)", simple, true)
		check(t, "INSERT INTO iso14_hst VALUES (1)", simple, true)
		// (Harmless: its table is not checked, and its writes land.)
		for i := 0; i < 3; i++ {
			exec(t, a, "INSERT INTO iso14_hut VALUES (1)", simple)
		}
		if got := queryString(t, a, "SELECT n FROM iso14_hcount", simple); got != "3" {
			t.Fatalf("the harmless trigger's count: %s", got)
		}
	})
	// An extension's trigger function runs SQL of its own: refint's
	// check_foreign_key deletes from the table its arguments name, whose
	// user trigger then runs (adversary round 5: the closure trusted
	// extension functions, and the DELETE was not checked).
	t.Run("extension trigger", func(t *testing.T) {
		objects(t, []string{
			"CREATE EXTENSION IF NOT EXISTS refint",
			"CREATE TABLE iso14_rpk (id int PRIMARY KEY)",
			"CREATE TABLE iso14_rfk (pid int)",
			"CREATE TRIGGER iso14_t BEFORE DELETE ON iso14_rfk FOR EACH ROW EXECUTE FUNCTION iso14_trgf()",
			"CREATE TRIGGER iso14_r BEFORE DELETE OR UPDATE ON iso14_rpk FOR EACH ROW EXECUTE FUNCTION check_foreign_key(1, 'cascade', 'id', 'iso14_rfk', 'pid')",
			"INSERT INTO iso14_rpk SELECT g FROM generate_series(1, 4) g",
			"INSERT INTO iso14_rfk SELECT g FROM generate_series(1, 4) g",
		}, []string{"DROP TABLE IF EXISTS iso14_rpk, iso14_rfk", "DROP EXTENSION IF EXISTS refint"})
		check(t, "DELETE FROM iso14_rpk WHERE id = 1", simple, true)
		check(t, "DELETE FROM iso14_rpk WHERE id = 2", extended, true)
	})
	// An event trigger: the statements that fire one (DDL, SELECT INTO)
	// are verified; the rest need not be (TestFiresEventTriggers).
	t.Run("event trigger", func(t *testing.T) {
		objects(t, []string{
			"CREATE FUNCTION iso14_evf() RETURNS event_trigger LANGUAGE plpgsql AS $$ BEGIN " + sp + " END $$",
			"CREATE EVENT TRIGGER iso14_evt ON ddl_command_end EXECUTE FUNCTION iso14_evf()",
		}, []string{"DROP EVENT TRIGGER IF EXISTS iso14_evt", "DROP TABLE IF EXISTS iso14_ev1, iso14_ev2, iso14_ev3, iso14_ev4", "DROP FUNCTION IF EXISTS iso14_evf()"})
		check(t, "CREATE TABLE iso14_ev1 (a int)", simple, true)
		check(t, "CREATE TABLE iso14_ev2 (a int)", extended, true)
		check(t, "SELECT 1 AS a INTO iso14_ev3", simple, true)
		check(t, "SELECT 1 AS insert INTO iso14_ev4", simple, true) // (a label; adversary round 2)
		exec(t, a, "INSERT INTO iso14_ev1 VALUES (1)", simple)
		if got := queryString(t, a, "SELECT count(*) FROM iso14_ev1", simple); got != "1" {
			t.Fatalf("rows: %s", got)
		}
	})
	// A trigger made by a DO block through this coordinator, with no DDL
	// statement after it: the next INSERT is verified all the same.
	t.Run("trigger made by a DO block", func(t *testing.T) {
		exec(t, a, "DO $$ BEGIN CREATE TRIGGER iso14_t BEFORE INSERT ON iso14_plain FOR EACH ROW EXECUTE FUNCTION iso14_trgf(); END $$", simple)
		check(t, "INSERT INTO iso14_plain VALUES (2)", simple, true)
	})
}
