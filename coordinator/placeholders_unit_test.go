package coordinator

import (
	"slices"
	"testing"
)

func TestParseTextArray(t *testing.T) {
	str := func(s string) *string { return &s }
	for _, tc := range []struct {
		in   string
		want []*string
		ok   bool
	}{
		{"{}", nil, true},
		{"{NULL}", []*string{nil}, true},
		{`{""}`, []*string{str("")}, true},
		{`{a,NULL,"",5}`, []*string{str("a"), nil, str(""), str("5")}, true},
		{`{"a b","x,y","q\"r","b\\s","NULL"}`, []*string{str("a b"), str("x,y"), str(`q"r`), str(`b\s`), str("NULL")}, true},
		{`{"} | {"}`, []*string{str("} | {")}, true},
		{"{a", nil, false}, {"a}", nil, false}, {"{a,}", nil, false}, {`{"a}`, nil, false}, {"{a}x", nil, false},
		{"{{a}}", nil, false}, {"", nil, false},
	} {
		got, ok := parseTextArray(tc.in)
		if ok != tc.ok || ok && !slices.EqualFunc(got, tc.want, func(a, b *string) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }) {
			t.Errorf("parseTextArray(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestCustomChanges(t *testing.T) {
	names := []string{"app.a", "app.b"}
	show := func(cs []customChange) string {
		out := ""
		for _, c := range cs {
			v := func(p *string) string {
				if p == nil {
					return "NULL"
				}
				return "'" + *p + "'"
			}
			out += c.name + ":" + v(c.was) + ">" + v(c.now) + " "
		}
		return out
	}
	for _, tc := range []struct {
		base, now    string
		want         string
		head, parsed bool
	}{
		{"{} | {NULL,NULL}", `{} | {"",NULL}`, "app.a:NULL>'' ", true, true},
		{"{} | {NULL,NULL}", `{} | {"",5}`, "app.a:NULL>'' app.b:NULL>'5' ", true, true},
		{`{} | {NULL,x}`, `{} | {NULL,x}`, "", true, true},
		{`{} | {x,NULL}`, `{} | {"",NULL}`, "app.a:'x'>'' ", true, true},
		{`{} | {x,NULL}`, `{} | {NULL,NULL}`, "app.a:'x'>NULL ", true, true},
		{"{work_mem=4MB} | {NULL,NULL}", `{} | {"",NULL}`, "app.a:NULL>'' ", false, true},
		{`{"a=x | {NULL,NULL}"} | {NULL,NULL}`, `{"a=x | {NULL,NULL}"} | {"a,b",NULL}`, "app.a:NULL>'a,b' ", true, true},
		{"{} | {NULL}", `{} | {""}`, "", false, false}, // not the names' count
		{"garbage", "garbage2", "", false, false},
	} {
		got, head, parsed := customChanges(tc.now, tc.base, names)
		if parsed != tc.parsed || parsed && (head != tc.head || show(got) != tc.want) {
			t.Errorf("customChanges(%q, %q) = %q, %v, %v; want %q, %v, %v", tc.now, tc.base, show(got), head, parsed, tc.want, tc.head, tc.parsed)
		}
	}
	if got, head, ok := customChanges("{} | {}", "{} | {}", nil); !ok || !head || got != nil {
		t.Errorf("no names: %v, %v, %v", got, head, ok)
	}
}

// TestRunTimeName: code that sets a custom setting by a name it builds
// at run time pins its session; a name written whole does not, nor does
// UPDATE's SET.
func TestRunTimeName(t *testing.T) {
	for _, tc := range []struct {
		code string
		want bool
	}{
		// Names written whole: the state read finds them.
		{`PERFORM set_config('app.tenant', t::text, false)`, false},
		{`SELECT pg_catalog.set_config('app.tenant', $1, true)`, false},
		{`PERFORM set_config( 'search_path', 'x', false)`, false},
		{`EXECUTE 'SELECT set_config(''app.tenant'', ''5'', false)'`, false},
		{`SET app.tenant = 7`, false},
		{`SET LOCAL app.tenant TO 7`, false},
		{`EXECUTE format('SET app.tenant = %L', t)`, false},
		{`EXECUTE 'SET app.tenant = ' || quote_literal(t)`, false},
		{`SET SESSION AUTHORIZATION DEFAULT`, false},
		{`UPDATE t SET a = 1`, false},
		{`EXECUTE 'UPDATE ' || quote_ident(tb) || ' SET ' || quote_ident(c) || ' = $1'`, false},
		{`EXECUTE format('UPDATE %I SET %I = %L', tb, c, v)`, false},
		{`INSERT INTO t VALUES (1) ON CONFLICT (a) DO UPDATE SET b = 2`, false},
		{`ALTER TABLE t ALTER COLUMN c SET DEFAULT 0`, false},
		{`-- set_config is called by the caller`, false},
		// Names built at run time.
		{`PERFORM set_config(name, v, false)`, true},
		{`PERFORM set_config($1, $2, false)`, true},
		{`PERFORM set_config('app.' || suffix, v, false)`, true},
		{`PERFORM set_config('app.t' || 'enant', v, false)`, true},
		{`PERFORM set_config(format('app.%s', s), v, false)`, true},
		{`EXECUTE 'SELECT set_config(' || quote_literal(n) || ', ''1'', false)'`, true},
		{`EXECUTE format('SELECT set_config(%L, %L, false)', n, v)`, true},
		{`EXECUTE 'SET ' || n || ' = 1'`, true},
		{`EXECUTE 'SET LOCAL ' || n || ' = 1'`, true},
		{`EXECUTE 'SET app.' || s || ' = 1'`, true},
		{`EXECUTE format('SET %s = %L', n, v)`, true},
		{`EXECUTE format('SET app.%s = %L', s, v)`, true},
		{`EXECUTE format('SET %I.%I = %L', a, b, v)`, true},
		{`UPDATE t SET a = 1; EXECUTE 'SET ' || n`, true},
		{`SET U&"app.t\0065nant" = 5`, true},
		{`SET u&"app.t\0065nant" = 5`, true},
		{`EXECUTE format('SET app.tenant TO %L', v)`, false},
		{`EXECUTE format('SET app . tenant = %L', v)`, false},
		{`EXECUTE format('SET app.%I = %L', s, v)`, true},
		{`EXECUTE 'SET app.' || quote_ident(s) || ' = 1'`, true},
		{`EXECUTE q`, true},
		{`EXECUTE (SELECT q FROM cmds WHERE id = 1)`, true},
		{`EXECUTE concat('SET app.w', s, ' = 1')`, true},
		{`EXECUTE replace('SET app.NAME = 1', 'NAME', s)`, true},
		{`EXECUTE 'RESET ' || n`, true},
		{`EXECUTE $q$SET app.$q$ || s || ' = 1'`, true},
		{`EXECUTE E'SET\tapp.' || s || ' = 1'`, true},
		{`PERFORM set_config('app.s'::text || s, 'seven', false)`, true},
		{`PERFORM "set_config"(n, 'eight', false)`, true},
		{"PERFORM set_config('app.c'\n'nine', 'nine', false)", true},
		{`EXECUTE 'SELECT set_config(''app.d'' ' || '|| ' || quote_literal(s) || ', ''ten'', false)'`, true},
		{`EXECUTE 'INSERT INTO ' || quote_ident(t) || ' VALUES ($1)' USING NEW`, false},
		{`EXECUTE format('INSERT INTO %I.%I SELECT $1.*', TG_TABLE_SCHEMA, TG_TABLE_NAME) USING NEW`, false},
		{`EXECUTE 'UPDATE ' || pg_catalog.quote_ident(sch) || '.' || quote_ident(tbl) || ' SET ' || quote_ident(col) || ' = $1' USING x`, false},
		{`RAISE NOTICE 'could not set %', x; msg := 'failed to set ' || x; RAISE NOTICE 'could not execute %', y`, false},
		{`-- update the setting
		  EXECUTE 'SET ' || n || ' = 1'`, true},
		{`PERFORM query_to_xml('select 1', true, false, '')`, false},
		{`PERFORM query_to_xml(q, true, false, '')`, true},
		{`DO 'BEGIN EXECUTE q; END'`, true},
		{`CREATE TRIGGER x AFTER INSERT ON t FOR EACH ROW EXECUTE FUNCTION f()`, false},
		{`ALTER TABLE t ENABLE TRIGGER x`, false},
		// (Adversary round 15: a DO block's body is code however quoted.)
		{`DO 'BEGIN PERFORM set_config((SELECT n FROM cfg)||''1'',''v'',false); END'; RETURN 1;`, true},
		{`EXECUTE 'DO ''BEGIN PERFORM set_config((SELECT n FROM cfg)||''''2'''',''''v'''',false); END'''`, true},
		{`EXECUTE 'DO ' || quote_literal(code)`, true},
		{`DO LANGUAGE plpgsql 'BEGIN EXECUTE q; END'`, true},
		{`DO E'BEGIN PERFORM 1; END'`, true},
		{`DO 'BEGIN PERFORM set_config(''app.x'', ''1'', false); END'`, false},
		{`INSERT INTO t VALUES (1) ON CONFLICT DO NOTHING`, false},
		{`EXECUTE format('SELECT count(*) FROM %I', tbl) INTO n`, false},
		{`EXECUTE format('%I %I = %L', a, b, 'v')`, true},
		{`EXECUTE quote_ident(a) || ' app.x = 1'`, true},
		// (Adversary round 16.)
		{`SELECT U&"set\005fconfig"(n, 'vu', false)`, true},
		{`EXECUTE format('SELECT %I(%L, ''vf'', false)', 'set_config', n) INTO r`, true},
		{`EXECUTE 'SELECT ' || quote_ident(fn) || '(' || quote_literal(n) || ', ''vqi'', false)' INTO r`, true},
		{`SELECT query_to_xml(format('SELECT %I(%L, ''vx'', false)', 'set_config', n), true, false, '')`, true},
		{`EXECUTE format('SELECT %I.%I(%L)', s, f, n)`, true},
		{`EXECUTE format('SELECT set_con' || 'fig(%L, ''vfc'', false)', n) INTO r`, true},
		{`CREATE OR REPLACE FUNCTION g_cf(m text) RETURNS text LANGUAGE sql AS 'SELECT 1'; RETURN g_cf(n);`, true},
		{`EXECUTE 'CREATE OR REPLACE FUNCTION g(m text) RETURNS text LANGUAGE sql AS ''SELECT 1'''`, true},
		{`SELECT database_to_xml(true, false, '')`, false},
		{`SELECT schema_to_xml(s, true, false, '')`, false},
		{`SELECT ts_rewrite('a & b'::tsquery, 'SELECT ''a''::tsquery, ''c''::tsquery FROM q7')`, false},
		{`SELECT ts_rewrite('a & b'::tsquery, q)`, true},
		{`SELECT ts_stat(q)`, true},
		{`EXECUTE format('INSERT INTO %I.%I (a) VALUES (%L)', s, t, v)`, false},
		{`EXECUTE format('INSERT INTO %I (a) SELECT %I(%L)', t, f, v)`, true},
		{`EXECUTE format('CREATE INDEX ON %I (a)', t)`, false},
		{`EXECUTE format('SELECT * FROM %I(%L)', f, v)`, true},
		{`CREATE TABLE x (a int)`, false},
		{`DO $$ BEGIN CREATE FUNCTION g() RETURNS int LANGUAGE sql AS 'SELECT 1'; END $$`, false},
		{`DO $$ BEGIN CREATE FUNCTION g(m text) RETURNS text LANGUAGE sql AS 'SELECT set_config(m, ''v'', false)'; END $$`, true},
		{`PERFORM set_config(U&'app.t\0065nant', '5', false)`, true},
	} {
		if got := runTimeName(tc.code); got != tc.want {
			t.Errorf("runTimeName(%q) = %v, want %v", tc.code, got, tc.want)
		}
	}
}
