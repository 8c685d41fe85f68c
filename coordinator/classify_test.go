package coordinator

import (
	"reflect"
	"strings"
	"testing"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		sql  string
		pin  string
		ops  []paramOp
		stmt int
	}{
		{sql: "SELECT 1", stmt: 1},
		{sql: "", stmt: 0},
		{sql: " -- only a comment\n", stmt: 0},
		{sql: "SET work_mem = '8MB'", stmt: 1, ops: []paramOp{{kind: opSet, name: "work_mem", sql: "SET work_mem = '8MB'"}}},
		{sql: "set Search_Path to a, b;", stmt: 1, ops: []paramOp{{kind: opSet, name: "search_path", sql: "set Search_Path to a, b"}}},
		{sql: "SET SESSION statement_timeout = 5", stmt: 1, ops: []paramOp{{kind: opSet, name: "statement_timeout", sql: "SET SESSION statement_timeout = 5"}}},
		{sql: "set session characteristics as transaction read only, isolation level repeatable read", stmt: 1, ops: []paramOp{{kind: opSet,
			name: "default_transaction_isolation", sql: "SET default_transaction_isolation = 'repeatable read'",
			more: []paramOp{{kind: opSet, name: "default_transaction_read_only", sql: "SET default_transaction_read_only = 'on'"}}}}},
		{sql: "SET SESSION CHARACTERISTICS AS TRANSACTION NOT DEFERRABLE", stmt: 1, ops: []paramOp{{kind: opSet,
			name: "default_transaction_deferrable", sql: "SET default_transaction_deferrable = 'off'"}}},
		{sql: "SET TIME ZONE 'UTC'", stmt: 1, ops: []paramOp{{kind: opSet, name: "timezone", sql: "SET TIME ZONE 'UTC'"}}},
		{sql: "SET NAMES 'UTF8'", stmt: 1, ops: []paramOp{{kind: opSet, name: "client_encoding", sql: "SET NAMES 'UTF8'"}}},
		{sql: "SET LOCAL work_mem = '1MB'", stmt: 1, ops: []paramOp{{kind: opNone, name: "work_mem", tagText: "SET"}}},
		{sql: "SET LOCAL search_path = s", stmt: 1, ops: []paramOp{{kind: opNone, name: "search_path", tagText: "SET"}}},
		{sql: "SET LOCAL SCHEMA 's'", stmt: 1, ops: []paramOp{{kind: opNone, name: "search_path", tagText: "SET"}}},
		{sql: "SET SESSION SCHEMA 's'", stmt: 1, ops: []paramOp{{kind: opSet, name: "search_path", sql: "SET SESSION SCHEMA 's'"}}},
		{sql: "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", stmt: 1, ops: []paramOp{{kind: opNone, tagText: "SET"}}},
		{sql: "SET ROLE bob", stmt: 1, pin: "SET ROLE", ops: []paramOp{{kind: opNone, tagText: "SET"}}},
		{sql: "SET CONSTRAINTS ALL DEFERRED; SET work_mem = '1MB'", stmt: 2, ops: []paramOp{{kind: opNone, tagText: "SET CONSTRAINTS"},
			{kind: opSet, name: "work_mem", sql: "SET work_mem = '1MB'"}}},
		{sql: "RESET work_mem", stmt: 1, ops: []paramOp{{kind: opReset, name: "work_mem"}}},
		{sql: "RESET Custom.X", stmt: 1, ops: []paramOp{{kind: opReset, name: "custom.x"}}},
		{sql: `RESET "custom" . /* c */ "Y"`, stmt: 1, ops: []paramOp{{kind: opReset, name: "custom.y"}}},
		{sql: "SET custom.x = 42", stmt: 1, ops: []paramOp{{kind: opSet, name: "custom.x", sql: "SET custom.x = 42"}}},
		{sql: "SET SESSION custom.x TO 4", stmt: 1, ops: []paramOp{{kind: opSet, name: "custom.x", sql: "SET SESSION custom.x TO 4"}}},
		{sql: "SET SESSION TIME ZONE 'UTC'", stmt: 1, ops: []paramOp{{kind: opSet, name: "timezone", sql: "SET SESSION TIME ZONE 'UTC'"}}},
		{sql: "SET datestyle TO DEFAULT", stmt: 1, ops: []paramOp{{kind: opSetDefault, name: "datestyle"}}},
		{sql: "set custom.x=default", stmt: 1, ops: []paramOp{{kind: opSetDefault, name: "custom.x"}}},
		{sql: "SET TIME ZONE LOCAL", stmt: 1, ops: []paramOp{{kind: opSetDefault, name: "timezone"}}},
		{sql: "SET search_path = a, default", stmt: 1, ops: []paramOp{{kind: opSet, name: "search_path", sql: "SET search_path = a, default"}}},
		{sql: "SET x.y TO 'DEFAULT'", stmt: 1, ops: []paramOp{{kind: opSet, name: "x.y", sql: "SET x.y TO 'DEFAULT'"}}},
		{sql: "LOAD 'auto_explain'", stmt: 1, pin: "LOAD", ops: []paramOp{{kind: opNone, tagText: "LOAD"}}},
		{sql: "RESET ALL", stmt: 1, ops: []paramOp{{kind: opResetAll}}},
		{sql: "DISCARD ALL", stmt: 1, ops: []paramOp{{kind: opDiscardAll}}},
		{sql: "DISCARD PLANS", stmt: 1},
		{sql: "DEALLOCATE s1", stmt: 1, ops: []paramOp{{kind: opDeallocate, name: "s1"}}},
		{sql: `DEALLOCATE PREPARE "MyStmt"`, stmt: 1, ops: []paramOp{{kind: opDeallocate, name: "MyStmt"}}},
		{sql: "deallocate all", stmt: 1, ops: []paramOp{{kind: opDeallocAll}}},
		{sql: "LISTEN chan", stmt: 1, pin: "LISTEN"},
		{sql: "PREPARE p AS SELECT 1", stmt: 1, pin: "SQL PREPARE"},
		{sql: "CREATE TEMP TABLE x (a int)", stmt: 1, pin: "temporary object"},
		{sql: "create global temporary table x (a int)", stmt: 1, pin: "temporary object"},
		{sql: "CREATE TABLE temp (a int)", stmt: 1},
		{sql: "SELECT * INTO TEMP t FROM x", stmt: 1, pin: "temporary object"},
		{sql: "DECLARE c CURSOR WITH HOLD FOR SELECT 1", stmt: 1, pin: "DECLARE ... WITH HOLD"},
		{sql: "DECLARE c CURSOR FOR SELECT 1", stmt: 1},
		{sql: "SELECT pg_advisory_lock(1)", stmt: 1, pin: "session advisory lock"},
		{sql: "SELECT pg_advisory_xact_lock(1)", stmt: 1},
		{sql: "SELECT pg_catalog.set_config('search_path', '', false)", stmt: 1, pin: "set_config()"},
		// Keywords inside strings, comments and dollar quotes do not count.
		{sql: "SELECT 'SET x = 1; LISTEN y'", stmt: 1},
		{sql: "SELECT 1 /* ; LISTEN x; /* nested */ */", stmt: 1},
		{sql: "SELECT $$ ; LISTEN x $$, $1", stmt: 1},
		{sql: "SELECT $tag$ ; pg_advisory_lock( $tag$", stmt: 1},
		{sql: `SELECT E'it\'s; LISTEN x'`, stmt: 1},
		{sql: `SELECT "pg_advisory_lock"`, stmt: 1},
		{sql: "BEGIN; SET work_mem='2MB'; SET LOCAL x.y = 1; COMMIT", stmt: 4, ops: []paramOp{
			{kind: opSet, name: "work_mem", sql: "SET work_mem='2MB'"}, {kind: opPlaceholder, name: "x.y"}}},
		{sql: "CREATE FUNCTION f() RETURNS void AS $$ BEGIN PERFORM 1; END $$ LANGUAGE plpgsql; SELECT 1", stmt: 2},
		// Quoting and schemas do not hide session effects (issue 8, class 13).
		{sql: `SELECT "set_config"('search_path', 'x', false)`, stmt: 1, pin: "set_config()"},
		{sql: `SELECT pg_catalog."set_config" ('a', 'x', false)`, stmt: 1, pin: "set_config()"},
		{sql: `SELECT pg_catalog."set_config" ('a.b', 'x', false)`, stmt: 1}, // (a custom setting: adopted)
		// A view stores its query; a materialized view runs it.
		{sql: "CREATE OR REPLACE VIEW v AS SELECT set_config('search_path', 'x', false)", stmt: 1},
		{sql: "CREATE MATERIALIZED VIEW m AS SELECT set_config('search_path', 'x', false)", stmt: 1, pin: "set_config()"},
		{sql: `SET "role" = 'bob'`, stmt: 1, pin: "SET ROLE", ops: []paramOp{{kind: opNone, tagText: "SET"}}},
		{sql: `SET SESSION ROLE bob`, stmt: 1, pin: "SET ROLE", ops: []paramOp{{kind: opNone, tagText: "SET"}}},
		{sql: `set session_authorization = 'bob'`, stmt: 1, pin: "SET ROLE", ops: []paramOp{{kind: opNone, tagText: "SET"}}},
		{sql: `SET "Session_Authorization" TO bob`, stmt: 1, pin: "SET ROLE", ops: []paramOp{{kind: opNone, tagText: "SET"}}},
		{sql: "CREATE TABLE pg_temp.t (a int)", stmt: 1, pin: "temporary object"},
		{sql: `create unlogged table "pg_temp".t (a int)`, stmt: 1, pin: "temporary object"},
		{sql: "CREATE VIEW pg_temp_3.v AS SELECT 1", stmt: 1, pin: "temporary object"},
		{sql: "SELECT 1 INTO pg_temp.t", stmt: 1, pin: "temporary object"},
		// Adversary round 5: attribute notation, temporary objects past the
		// first words, and a search_path that puts new objects in pg_temp.
		{sql: `SELECT (42::bigint)."pg_advisory_lock"`, stmt: 1, pin: "session advisory lock"},
		{sql: `SELECT (42::bigint) . /* c */ "pg_try_advisory_lock"`, stmt: 1, pin: "session advisory lock"},
		{sql: "SELECT a, b, c, d, e, f, g, h, i, j, k, l INTO TEMP t FROM x", stmt: 1, pin: "temporary object"},
		{sql: "SELECT a, b, c, d, e, f, g, h, i, j, k, l INTO pg_temp . t FROM x", stmt: 1, pin: "temporary object"},
		{sql: "SELECT 1 INTO LOCAL TEMP t", stmt: 1, pin: "temporary object"},
		{sql: "SELECT 1 INTO TEMPORARY TABLE t", stmt: 1, pin: "temporary object"},
		{sql: "EXPLAIN ANALYZE CREATE TEMP TABLE t AS SELECT 1", stmt: 1, pin: "temporary object"},
		{sql: "EXPLAIN (ANALYZE, BUFFERS, TIMING, SUMMARY, COSTS false) CREATE TABLE pg_temp.t AS SELECT 1", stmt: 1, pin: "temporary object"},
		{sql: "SELECT temp, temporary FROM readings", stmt: 1},
		{sql: "INSERT INTO readings (temp) VALUES (1)", stmt: 1},
		{sql: "SELECT 1 AS temp", stmt: 1},
		{sql: "SELECT pg_temp_x FROM t", stmt: 1},
		{sql: "SET search_path = pg_temp, public", stmt: 1, pin: "search_path naming pg_temp",
			ops: []paramOp{{kind: opSet, name: "search_path", sql: "SET search_path = pg_temp, public"}}},
		{sql: `SET LOCAL search_path TO nosuch, "pg_temp"`, stmt: 1, pin: "search_path naming pg_temp",
			ops: []paramOp{{kind: opNone, name: "search_path", tagText: "SET"}}},
		{sql: "SET search_path = app, public", stmt: 1, ops: []paramOp{{kind: opSet, name: "search_path", sql: "SET search_path = app, public"}}},
		// Adversary round 6: quoted and U& spellings, pg_temp_N, a table
		// named temp.
		{sql: `select 1 as a into "pg_temp".lt1`, stmt: 1, pin: "temporary object"},
		{sql: "select 1 into pg_temp_6.t", stmt: 1, pin: "temporary object"},
		{sql: `select 1 as a into U&"pg\005Ftemp".ut`, stmt: 1, pin: "temporary object"},
		{sql: `explain analyze create table "pg_temp".lt2 as select 1 as a`, stmt: 1, pin: "temporary object"},
		{sql: `set search_path = E'pg\x5ftemp', public`, stmt: 1, pin: "search_path naming pg_temp",
			ops: []paramOp{{kind: opSet, name: "search_path", sql: `set search_path = E'pg\x5ftemp', public`}}},
		{sql: "insert into temp values (1)", stmt: 1},
		{sql: "SELECT 'meh'::pg_temp.tt_mood", stmt: 1},
		{sql: "EXPLAIN ANALYZE CREATE TABLE IF NOT EXISTS pg_temp.t AS SELECT 1", stmt: 1, pin: "temporary object"},
		{sql: "MERGE INTO temp t USING s ON true WHEN MATCHED THEN DO NOTHING", stmt: 1},
		{sql: `select (42::bigint).U&"pg\005Fadvisory_lock"`, stmt: 1, pin: "session advisory lock"},
		{sql: `select U&"set\0073eed"(0.5)`, stmt: 1, pin: "setseed()"},
		{sql: `select U&"d!0061t" UESCAPE '!'`, stmt: 1},
		{sql: `select U&"pg!005fadvisory!005flock" UESCAPE '!' (1)`, stmt: 1, pin: "session advisory lock"},
		{sql: `select U&"set\0073eed" UESCAPE '\' (0.5)`, stmt: 1, pin: "setseed()"},
		{sql: `select U&'pg_advisory_lock'`, stmt: 1},
		// set_config of a literal custom name runs as user code does (the
		// state read reads it; the session adopts it); any other pins.
		{sql: "SELECT set_config('app.tenant', $1, false)", stmt: 1},
		{sql: "SELECT set_config( /* c */ 'app.tenant' , '5', true), set_config('work_mem', '8MB', false)", stmt: 1, pin: "set_config()"},
		{sql: "SELECT set_config($1, '5', false)", stmt: 1, pin: "set_config()"},
		{sql: "SELECT set_config(E'app.x', '5', false)", stmt: 1, pin: "set_config()"},
		{sql: "SELECT set_config('app.x' || '', '5', false)", stmt: 1, pin: "set_config()"},
	}
	for _, tc := range []struct {
		sql    string
		verify bool
	}{
		{"SELECT 1", false},
		{"SELECT count(*), lower(v), coalesce(a, b) FROM t WHERE x IN (1, 2)", false},
		{"INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP)", false},
		{"UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2", false},
		{"SELECT v::numeric(10, 2), x::varchar(4) FROM t", false},
		{"DO $$ BEGIN PERFORM set_config('search_path', 'x', false); END $$", true},
		{"SELECT pg_catalog.set_config('app.tenant', '5', false)", true},
		{"do 'begin null; end'", true},
		{"CALL p(1)", true},
		{"SELECT my_func(1)", true},
		{"SELECT public.my_func (1)", true},
		{`SELECT "MyFunc"(1)`, true},
		{"SELECT 1; SELECT f()", true},
		{"UPDATE pg_settings SET setting = '5MB' WHERE name = 'work_mem'", true},
		{`update "pg_settings" set setting = '5MB' where name = 'work_mem'`, true},
		{"SELECT 1 FROM pg_catalog.PG_SETTINGS", true},
		{"SELECT pg_settings_x FROM t", false},
		{"SELECT query_to_xml('select f' || 'x()', true, false, '')", true},
		{"SELECT * FROM ts_stat('select v from t')", true},
		// A schema named like a keyword is not a column list's table; a
		// qualified table's column list is not a call; attribute notation
		// of a built-in that runs SQL text is one.
		{"SELECT type.crosstab('select 1')", true},
		{"SELECT on.f(1)", true},
		{"INSERT INTO public.t (a, b) VALUES (1, 2)", false},
		{`INSERT INTO "Sch"."T" (a) VALUES (1)`, false},
		{"SELECT ('select v from t'::text).ts_stat", true},
		{`SELECT ('select v from t'::text)."ts_stat"`, true},
		{"SELECT t.ts FROM t", false},
	} {
		if got := classify(tc.sql).verify; got != tc.verify {
			t.Errorf("classify(%q).verify = %v, want %v", tc.sql, got, tc.verify)
		}
	}
	if n := testing.AllocsPerRun(100, func() {
		classify("INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP)")
		classify("SELECT count(*), lower(v) FROM t WHERE x IN (1, 2)")
	}); n != 0 {
		t.Errorf("classify allocates %v times for ordinary statements", n)
	}
	for _, tc := range cases {
		c := classify(tc.sql)
		for i := range c.ops {
			c.ops[i].text = "" // (checked below)
		}
		if c.pin != tc.pin || c.count != tc.stmt || !reflect.DeepEqual(c.ops, tc.ops) {
			t.Errorf("classify(%q) = pin %q, %d statements, ops %+v; want pin %q, %d, %+v",
				tc.sql, c.pin, c.count, c.ops, tc.pin, tc.stmt, tc.ops)
		}
	}
	// A SET or RESET statement's text, set again on a worker a
	// transaction takes in (txLog).
	for sql, want := range map[string]string{
		"SET LOCAL app.tenant = '7'; SELECT 1":         "SET LOCAL app.tenant = '7'",
		"reset work_mem":                               "reset work_mem",
		"SET TRANSACTION ISOLATION LEVEL SERIALIZABLE": "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE",
		"SELECT 1; RESET ALL":                          "RESET ALL",
		"SET CONSTRAINTS ALL DEFERRED":                 "SET CONSTRAINTS ALL DEFERRED",
	} {
		if c := classify(sql); len(c.ops) != 1 || c.ops[0].text != want {
			t.Errorf("classify(%q): ops %+v, want one with text %q", sql, c.ops, want)
		}
	}
	// (A snapshot is the worker's own: the block then takes in no other.)
	if c := classify("SET TRANSACTION SNAPSHOT '00000003-0000001B-1'"); len(c.ops) != 1 || c.ops[0].text != "" {
		t.Errorf("SET TRANSACTION SNAPSHOT: ops %+v, want one without text", c.ops)
	}
}

func TestSessionParamsKey(t *testing.T) {
	p := newSessionParams(map[string]string{"application_name": "psql", "DateStyle": "ISO, MDY"})
	base := p.key
	if base != `RESET ALL;SELECT pg_catalog.set_config('DateStyle', 'ISO, MDY', false);SELECT pg_catalog.set_config('application_name', 'psql', false)` {
		t.Fatalf("startup key %q", base)
	}
	p.apply(paramOp{kind: opSet, name: "work_mem", sql: "SET work_mem='1MB'"})
	p.apply(paramOp{kind: opSet, name: "work_mem", sql: "SET work_mem='2MB'"})
	if want := base + ";SET work_mem='2MB'"; p.key != want {
		t.Errorf("key %q, want %q", p.key, want)
	}
	p.apply(paramOp{kind: opReset, name: "work_mem"})
	if p.key != base {
		t.Errorf("after RESET key %q, want %q", p.key, base)
	}
	if q := newSessionParams(nil); q.key != "" {
		t.Errorf("empty session key %q", q.key)
	}
}

func TestStartupOptions(t *testing.T) {
	got, err := startupParams(map[string]string{"user": "u", "database": "d",
		"options": `-c geqo=off --search-path=a\ b -cwork_mem=5MB`, "application_name": "x"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"geqo": "off", "search_path": "a b", "work_mem": "5MB", "application_name": "x"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if _, err := startupParams(map[string]string{"options": "-X"}); err == nil {
		t.Error("unsupported option accepted")
	}
}

func BenchmarkClassifySelect(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		classify("SELECT abalance FROM pgbench_accounts WHERE aid = 48213;")
	}
}

func TestPublicPath(t *testing.T) {
	cases := map[string]bool{
		`SET search_path TO public`:                  true,
		`SET search_path = "$user", public`:          true,
		`set search_path to default`:                 true,
		`SET "search_path" = '"$user", public'`:      true,
		`SET search_path TO app, public`:             false,
		`SET "search_path" = 'tenant1'`:              false,
		`SET search_path TO pg_catalog, public, x_y`: false,
	}
	for sql, want := range cases {
		if got := publicPath(sql); got != want {
			t.Errorf("publicPath(%q) = %v, want %v", sql, got, want)
		}
	}
}

// TestClassifyTxnEnd: every spelling of COMMIT and ROLLBACK, with or
// without AND [NO] CHAIN, is a transaction end; savepoints, prepared
// transactions and anything with other tokens are not.
func TestClassifyTxnEnd(t *testing.T) {
	cases := []struct {
		sql   string
		txn   string
		chain bool
	}{
		{"COMMIT", "commit", false},
		{"commit work", "commit", false},
		{"END TRANSACTION", "commit", false},
		{"COMMIT AND CHAIN", "commit", true},
		{"commit work and chain;", "commit", true},
		{"/* x */ End -- y\n transaction AND\tCHAIN", "commit", true},
		{"COMMIT AND NO CHAIN", "commit", false},
		{"ROLLBACK", "rollback", false},
		{"abort and chain", "rollback", true},
		{"ROLLBACK TRANSACTION AND NO CHAIN", "rollback", false},
		{"ROLLBACK WORK AND CHAIN", "rollback", true},
		{"ROLLBACK TO s1", "", false},
		{"ROLLBACK TRANSACTION TO SAVEPOINT s1", "", false},
		{"COMMIT PREPARED 'x'", "", false},
		{"ROLLBACK PREPARED 'x'", "", false},
		{"COMMIT AND", "", false},
		{"COMMIT CHAIN", "", false},
		{"COMMIT 1", "", false},
		{"COMMIT AND CHAIN x", "", false},
		{`COMMIT "AND" CHAIN`, "", false},
		{"BEGIN", "begin", false},
		// BEGIN is answered by the coordinator only when PostgreSQL would
		// accept it; otherwise a worker says what is wrong.
		{"begin;", "begin", false},
		{"BEGIN WORK", "begin", false},
		{"start transaction", "begin", false},
		{"begin isolation level serializable read write deferrable", "begin", false},
		{"BEGIN TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY, NOT DEFERRABLE", "begin", false},
		{"START TRANSACTION READ ONLY,ISOLATION LEVEL READ UNCOMMITTED", "begin", false},
		{"/* c */ BEGIN -- x\n ISOLATION /* y */ LEVEL READ COMMITTED", "begin", false},
		{"begin isolation level nonsense", "", false},
		{"begin garbage", "", false},
		{"START", "", false},
		{"BEGIN , READ ONLY", "", false},
		{"BEGIN READ ONLY,", "", false},
		{"BEGIN READ ONLY READ WRITE", "", false},
		{"BEGIN ISOLATION LEVEL SERIALIZABLE, ISOLATION LEVEL READ COMMITTED", "", false},
		{"BEGIN ISOLATION LEVEL", "", false},
		{"BEGIN READ", "", false},
		{`BEGIN "READ" ONLY`, "", false},
		{"BEGIN /* unterminated", "", false},
	}
	for _, tc := range cases {
		c := classify(tc.sql)
		if c.txn != tc.txn || c.chain != tc.chain {
			t.Errorf("classify(%q): txn %q chain %v; want %q %v", tc.sql, c.txn, c.chain, tc.txn, tc.chain)
		}
	}
}

// TestClassifySequenceState: calls of currval and lastval are seen in any
// spelling; only statements that cannot call a function are quiet.
func TestClassifySequenceState(t *testing.T) {
	cases := []struct {
		sql      string
		seqFn    string
		quiet    bool
		seqReset bool
	}{
		{"SELECT currval('s')", "currval", false, false},
		{"select pg_catalog.LastVal()", "lastval", false, false},
		{`SELECT "currval"('s')`, "currval", false, false},
		{"SELECT 'currval'", "", false, false},
		{"SELECT nextval('s')", "", false, false},
		{"INSERT INTO t DEFAULT VALUES", "", false, false},
		{"SET work_mem = '1MB'; SHOW work_mem", "", true, false},
		{"BEGIN", "", true, false},
		{"DISCARD SEQUENCES", "", true, true},
		{"discard all", "", true, true},
		{"DISCARD SEQUENCES; SELECT 1", "", false, false},
	}
	for _, tc := range cases {
		c := classify(tc.sql)
		if c.seqFn != tc.seqFn || c.quiet != tc.quiet || c.seqReset != tc.seqReset {
			t.Errorf("classify(%q): seqFn %q quiet %v seqReset %v; want %q %v %v", tc.sql, c.seqFn, c.quiet, c.seqReset, tc.seqFn, tc.quiet, tc.seqReset)
		}
	}
}

func TestBeginHasModes(t *testing.T) {
	for sql, want := range map[string]bool{
		"BEGIN": false, "begin work;": false, "START TRANSACTION": false, "/* x */ BEGIN TRANSACTION": false,
		"BEGIN ISOLATION LEVEL SERIALIZABLE": true, "begin read only": true, "START TRANSACTION DEFERRABLE": true,
		"BEGIN TRANSACTION READ WRITE": true,
	} {
		if got := beginHasModes(sql); got != want {
			t.Errorf("beginHasModes(%q) = %v, want %v", sql, got, want)
		}
	}
}

// TestClassifyDDLAnyCase: DDL and transaction ends are seen in any case
// ("drop table t" was not taken for DDL: statements prepared before it
// were used after it; adversary).
func TestClassifyDDLAnyCase(t *testing.T) {
	for _, sql := range []string{"drop table t", "Create Type x AS ENUM ('a')", "alter table t add column c int", "comment on table t is 'x'", "grant select on t to u"} {
		if c := classify(sql); !c.ddl {
			t.Errorf("classify(%q).ddl = false", sql)
		}
	}
	for _, sql := range []string{"rollback to s", "commit prepared 'x'", "end", "abort"} {
		if c := classify(sql); !c.endLike {
			t.Errorf("classify(%q).endLike = false", sql)
		}
	}
	if c := classify("select 1"); c.ddl || c.endLike {
		t.Errorf("classify(select 1) = %+v", c)
	}
}

// BenchmarkMentionedTable is the per-statement cost of the user-code check
// (stateviews.go) when the catalog has names to look for: a simple-protocol
// statement is scanned each time it runs.
func BenchmarkMentionedTable(b *testing.B) {
	names := map[string]string{"audit_log": "audit_log", "set_updated_at": "set_updated_at", "mood": "mood"}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if mentionedTable("UPDATE pgbench_accounts SET abalance = abalance + 4123 WHERE aid = 48213;", names) != "" {
			b.Fatal("found")
		}
	}
}

func TestMentionedTable(t *testing.T) {
	long := strings.Repeat("x", 70) // PostgreSQL keeps 63 bytes of it
	names := map[string]string{"audit_log": "public.audit_log", "mood": "mood", long[:63]: "long", "été": "été", "t$x": "t$x", "äb": "Äb"}
	for _, tc := range []struct {
		sql, want string
	}{
		{"SELECT 1", ""},
		{"INSERT INTO AUDIT_LOG VALUES (1)", "public.audit_log"},
		{`insert into public."audit_log" values (1)`, "public.audit_log"},
		{"SELECT 1::Mood", "mood"},
		{"SELECT 'mood'", "mood"}, // strings count (conservative)
		{"SELECT moody FROM t", ""},
		{`SELECT * FROM U&"\0061udit_log"`, "public.audit_log"},
		{"SELECT * FROM " + strings.ToUpper(long), "long"},
		{"SELECT * FROM " + long + "y", "long"},
		{"SELECT * FROM " + long[:62], ""},
		{"SELECT * FROM t$x", "t$x"},
		{"SELECT * FROM audit_log$1", "public.audit_log"}, // (its parts too)
		{`SELECT * FROM "Äb"`, "Äb"},
		{"SELECT * FROM ÉTÉ", "été"},
		{"SELECT * FROM été", "été"},
	} {
		if got := mentionedTable(tc.sql, names); got != tc.want {
			t.Errorf("mentionedTable(%q) = %q, want %q", tc.sql, got, tc.want)
		}
	}
}

// With an event trigger enabled, the statements that fire one (PostgreSQL
// 15's firing matrix) get the session-state check; the rest do not pay
// for it.
func TestFiresEventTriggers(t *testing.T) {
	for _, c := range []struct {
		sql  string
		want bool
	}{
		{"CREATE TABLE t (a int)", true},
		{"create temp table t as select 1", true},
		{"ALTER TABLE t ADD b int", true},
		{"DROP TABLE t", true},
		{"COMMENT ON TABLE t IS 'x'", true},
		{"GRANT SELECT ON t TO public", true},
		{"REVOKE SELECT ON t FROM public", true},
		{"SECURITY LABEL ON TABLE t IS 'x'", true},
		{"IMPORT FOREIGN SCHEMA s FROM SERVER f INTO p", true},
		{"REFRESH MATERIALIZED VIEW mv", true},
		{"SELECT 1 AS a INTO TEMP t2", true},
		{"SELECT * INTO t2 FROM t", true},
		{"INSERT INTO t VALUES (1); Drop TABLE t", true},
		{"INSERT /* c */ INTO t VALUES (1)", true}, // (conservative)
		{"SELECT 1", false},
		{"INSERT INTO t VALUES (1)", false},
		{"insert into t select * from u", false},
		{"MERGE INTO t USING u ON t.a = u.a WHEN MATCHED THEN DELETE", false},
		{"UPDATE t SET a = 1 WHERE b = 2", false},
		{"DELETE FROM t", false},
		{"TRUNCATE t", false},
		{"VACUUM t", false},
		{"COPY t FROM STDIN", false},
		{"SELECT created_at, dropped FROM t", false},
		{"SELECT 1 AS insert INTO et1", true},
		{"SELECT s.merge INTO et1 FROM s", true},
		{"WITH x AS (SELECT 1) INSERT INTO t SELECT * FROM x", true}, // (conservative)
		{"INSERT INTO t VALUES (1); SELECT 1 AS insert INTO u", true},
		{"SELECT 1; INSERT INTO t VALUES (1)", true}, // (conservative)
		{"SELECT ';insert' INTO t", true},
		{`SELECT 1 AS "x;insert" INTO t`, true},
		{"SELECT 1 /*;insert*/ INTO t", true},
		{"SELECT $a$x$a$INTO ety", true},
	} {
		if got := firesEventTriggers(c.sql); got != c.want {
			t.Errorf("firesEventTriggers(%q) = %v, want %v", c.sql, got, c.want)
		}
	}
}

// A function body is harmless only when no word of it can change session
// state; what it calls or writes is checked by name (stateViews).
func TestHarmlessBody(t *testing.T) {
	for _, c := range []struct {
		body string
		want bool
	}{
		{" BEGIN NEW.updated_at := now(); RETURN NEW; END ", true},
		{"BEGIN INSERT INTO audit VALUES (TG_OP, row_to_json(NEW)); RETURN NEW; END", true},
		{"BEGIN UPDATE counters SET n = n + 1 WHERE id = NEW.id; RETURN NEW; END", true},
		{`BEGIN UPDATE ONLY "Counters" AS c SET n = 1; RETURN NULL; END`, true},
		{"INSERT INTO t VALUES ($1) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v", true},
		{"SELECT $1 + 1", true},
		{"BEGIN SET search_path = x; RETURN 1; END", false},
		{"BEGIN IF TG_OP = 'UPDATE' THEN SET LOCAL work_mem = '1MB'; END IF; RETURN NEW; END", false},
		{"BEGIN UPDATE t SET a = 1; SET ROLE r; RETURN NEW; END", false},
		{"BEGIN IF update THEN SET ROLE r; END IF; RETURN NEW; END", false},
		{"BEGIN <<l>> SET search_path = x; END", false},
		{"BEGIN UPDATE t /* x */ SET a = 1; END", false}, // (conservative)
		{"BEGIN PERFORM set_config('search_path', 'x', false); RETURN NEW; END", false},
		{`BEGIN PERFORM pg_catalog."set_config"('a.b', 'x', false); END`, false},
		{"BEGIN PERFORM pg_advisory_lock(1); END", false},
		{"BEGIN PERFORM pg_try_advisory_xact_lock(1); END", false},
		{"BEGIN EXECUTE 'SET search_path = x'; END", false},
		{"BEGIN CREATE TEMP TABLE x (a int); END", false},
		{"BEGIN CREATE TABLE pg_temp.x (a int); END", false},
		{"BEGIN RESET ALL; END", false},
		{"BEGIN LISTEN ch; END", false},
		{"BEGIN PREPARE p AS SELECT 1; END", false},
		{"DECLARE c CURSOR WITH HOLD FOR SELECT 1", false},
		{"BEGIN CALL p(); END", false},
		{"BEGIN PERFORM query_to_xml('SELECT f()', true, false, ''); END", false},
		{"UPDATE pg_settings SET setting = 'x' WHERE name = 'work_mem'", false},
		{`BEGIN PERFORM U&"\0073et_config"('a.b', 'x', false); END`, false},
		{"BEGIN PERFORM dblink_connect('x'); END", false},
		{"BEGIN PERFORM setseed(0.5); END", false},
		{"BEGIN NEW.b := currval('s'); RETURN NEW; END", false},
		{"SELECT lastval()", false},
		{"SELECT pg_replication_origin_session_setup('o')", false},
		{"BEGIN NEW.id := nextval('s'); RETURN NEW; END", true},
		// (Adversary round 2: a comment's or a string's words are not
		// the code's.)
		{"BEGIN\n  -- update the timestamp\n  SET maintenance_work_mem = '7777kB';\n  NEW.updated_at := now(); RETURN NEW;\nEND", false},
		{"-- update check\n SET ROLE bob;\n SELECT x >= 0", false},
		{"BEGIN x := 'update'; SET search_path = a; END", false},
		{"BEGIN x := 'update' SET search_path = a; END", false},
		{"BEGIN /* update t */ SET search_path = a; END", false},
		{"DO $x$ BEGIN PERFORM 1; END $x$", false},
		{"BEGIN DO LANGUAGE plpgsql 'BEGIN PERFORM 1; END'; END", false},
		{"BEGIN x := 'it''s'; UPDATE t SET a = 1; RETURN NEW; END", true},
		{"BEGIN x := $q$ -- $q$; UPDATE t SET a = 1; RETURN NEW; END", true},
		{`BEGIN UPDATE "T" SET a = 1; RETURN NEW; END`, true},
		{"INSERT INTO t VALUES (1) ON CONFLICT DO NOTHING", true},
		{"BEGIN x := 'never ends; SET role r; END", false},
		// (Round 3: a backslash read both ways, a comment ended by \r.)
		{"BEGIN\n PERFORM '\\'; SET application_name = leaked_a; PERFORM '\\';\n RETURN NEW;\nEND;", false},
		{"BEGIN\n-- x\rSET work_mem = 7777;\nRETURN NEW;\nEND;", false},
		// (Round 4: any backslash; a continuation's string could end
		// where a reading does not expect.)
		{"BEGIN x := E'\\''; UPDATE t SET a = 1; RETURN NEW; END", false},
		{"BEGIN x := '\\d+'; UPDATE t SET a = 1; RETURN NEW; END", false},
		{"declare x text; begin\nx := E'a'\n'\\'';\nx := '\\'; SET work_mem = 7777; x := 'q';\nreturn new; end", false},
		{"begin analyze; return new; end", false},
		{"begin perform pg_import_system_collations(pg_my_temp_schema()); return new; end", false},
	} {
		if got := harmlessBody(c.body); got != c.want {
			t.Errorf("harmlessBody(%q) = %v, want %v", c.body, got, c.want)
		}
	}
}

// A SQL function's SELECT ... INTO makes a table, and a function whose own
// settings name pg_temp makes temporary ones (adversary round 3).
func TestUserFuncHarmless(t *testing.T) {
	for _, c := range []struct {
		f    userFunc
		want bool
	}{
		{userFunc{lang: "sql", body: "SELECT $1 > 0"}, true},
		{userFunc{lang: "sql", body: "SELECT 1 AS a INTO leak_tbl; SELECT 7"}, false},
		{userFunc{lang: "sql", body: "SELECT $a$x$a$INTO tmpx; SELECT 1"}, false},
		{userFunc{lang: "sql", body: "SELECT 1", config: "{search_path=pg_temp}"}, false},
		{userFunc{lang: "plpgsql", body: "BEGIN SELECT 1 INTO v; RETURN NEW; END"}, true},
		{userFunc{lang: "plpgsql", body: "BEGIN RETURN NEW; END", atomic: true}, false},
		{userFunc{lang: "c", body: "f"}, false},
	} {
		if got := c.f.harmless(); got != c.want {
			t.Errorf("%+v: harmless %v, want %v", c.f, got, c.want)
		}
	}
}

// TestUserFuncUnseen: a function changes state the state read cannot see
// when its body (strings and comments too) names one of unseenFuncs or
// LOADs a module, or its SET clause defines a placeholder.
func TestUserFuncUnseen(t *testing.T) {
	for _, c := range []struct {
		f    userFunc
		want bool
	}{
		{userFunc{lang: "plpgsql", body: "BEGIN PERFORM setseed(0.5); RETURN 1; END"}, true},
		{userFunc{lang: "plpgsql", body: "BEGIN EXECUTE 'SELECT SETSEED(0.5)'; RETURN 1; END"}, true},
		{userFunc{lang: "sql", body: "SELECT public.dblink_connect('c', 'dbname=x')"}, true},
		{userFunc{lang: "sql", body: "SELECT pg_catalog.pg_backup_start('x')"}, true},
		{userFunc{lang: "sql", body: "SELECT pg_replication_origin_session_setup('o')"}, true},
		{userFunc{lang: "sql", body: "SELECT * FROM pg_create_logical_replication_slot('s', 'p', true)"}, true},
		{userFunc{lang: "plpgsql", body: "BEGIN LOAD 'auto_explain'; END"}, true},
		{userFunc{lang: "sql", body: "SELECT 1", config: `{r6.x=on}`}, true},
		{userFunc{lang: "sql", body: "SELECT 1", config: `{"search_path=a, b.c",work_mem=1MB}`}, false},
		{userFunc{lang: "plpgsql", body: "BEGIN NEW.load := NEW.load + 1; RETURN NEW; END"}, false},
		{userFunc{lang: "sql", body: "SELECT random(), dblink_get_result('c'), seeded FROM t"}, false},
		// (The seed setting, set in a body or a SET clause; a column, a
		// value or a comment named seed or load is not one: adversary
		// round 8.)
		{userFunc{lang: "plpgsql", body: "BEGIN PERFORM set_config('seed', '0.5', false); END"}, true},
		{userFunc{lang: "plpgsql", body: "BEGIN PERFORM pg_catalog.set_config( 'seed', '0.5', false); END"}, true},
		{userFunc{lang: "plpgsql", body: "BEGIN SET LOCAL seed = 0.5; END"}, true},
		{userFunc{lang: "plpgsql", body: "BEGIN EXECUTE 'SET seed TO 0.5'; END"}, true},
		{userFunc{lang: "sql", body: "SELECT 1", config: "{seed=0.5}"}, true},
		{userFunc{lang: "plpgsql", body: "BEGIN NEW.seed := coalesce(NEW.seed, 0) + 1; RETURN NEW; END -- keep the seed stable"}, false},
		{userFunc{lang: "sql", body: "SELECT CASE WHEN k = 'load' THEN 1 END, seed FROM t"}, false},
		{userFunc{lang: "sql", body: "SELECT hstore('kind','load')"}, false},
		{userFunc{lang: "sql", body: "UPDATE t SET seed = 2; INSERT INTO t VALUES (1) ON CONFLICT (id) DO UPDATE SET seed = 3"}, false},
		{userFunc{lang: "plpgsql", body: "BEGIN IF x THEN SET seed = 0.5; END IF; END"}, true},
		// (Adversary round 6.)
		{userFunc{lang: "plpgsql", body: "BEGIN EXECUTE 'LOAD E''auto_explain'''; END"}, true},
		{userFunc{lang: "sql", body: `SELECT 1 FROM (SELECT U&"set\0073eed"(0.5)) s`}, true},
		{userFunc{lang: "plpgsql", body: "BEGIN RETURN 1; END", config: "{plpgsql.variable_conflict=use_column}"}, false},
		{userFunc{lang: "sql", body: "SELECT 'menu&1', a & b FROM t"}, false},
		{userFunc{lang: "sql", body: `SELECT count(*) FROM U&"\0071\0037"`}, false},
		{userFunc{lang: "sql", body: `SELECT count(*) FROM U&"!0071!0037" UESCAPE '!'`}, false},
		{userFunc{lang: "sql", body: `SELECT U&"set!0073eed" UESCAPE '!' (0.5)`}, true},
		{userFunc{lang: "sql", body: `SELECT U&"set\0073eed" UESCAPE 'x' (0.5)`}, false},
		{userFunc{lang: "sql", body: `SELECT U&"bad\zz"`}, true},
	} {
		if got := c.f.unseen(); got != c.want {
			t.Errorf("%+v: unseen %v, want %v", c.f, got, c.want)
		}
		if c.want && c.f.harmless() {
			t.Errorf("%+v: harmless, yet it changes state the read cannot see", c.f)
		}
	}
	for sql, refused := range map[string]bool{
		"DO $$ BEGIN EXECUTE 'DEALLOCATE pgfleet_1'; END $$":             true,
		"DO $$ BEGIN EXECUTE 'deallocate prepare PGFLEET_STATE'; END $$": true,
		"DO $$ BEGIN RAISE NOTICE 'pgfleet_2 migration done'; END $$":    false,
		"SELECT add_load(1), 'pgfleet_3' AS label":                       false,
	} {
		if got := classify(sql).reservedName; got != refused {
			t.Errorf("classify(%q).reservedName = %v, want %v", sql, got, refused)
		}
	}
	for sql, pin := range map[string]bool{
		"DO $$ BEGIN PERFORM setseed(0.5); END $$":                              true,
		"DO $$ BEGIN PERFORM 1; END $$":                                         false,
		"SELECT query_to_xml('SELECT setseed(0.5)', true, false, '')":           true,
		"SELECT query_to_xml('SELECT 1', true, false, '')":                      false,
		"SELECT 'setseed(0.5)'":                                                 false, // (a string, no code runs it)
		"DO $$ BEGIN EXECUTE 'LOAD ''auto_explain'''; END $$":                   true,
		"DO $$ BEGIN PERFORM dblink_connect('c', 'dbname=x'); END $$; SELECT 1": true,
		"DO $$ BEGIN SET LOCAL seed = 0.5; END $$":                              true,
		"SELECT digest('seed', 'sha256'), similarity('seed', 'seeds')":          false,
		"SELECT add_load(1) AS seed, hstore('kind', 'load')":                    false,
		"DO $$ BEGIN UPDATE g3 SET seed = 2; END $$":                            false,
	} {
		if got := classify(sql).pin == unseenPin; got != pin {
			t.Errorf("classify(%q) pins %v (%q), want %v", sql, got, classify(sql).pin, pin)
		}
	}
}
