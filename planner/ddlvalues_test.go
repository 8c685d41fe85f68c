package planner

import "testing"

func TestDDLValueChecks(t *testing.T) {
	for _, c := range []struct {
		sql  string
		n    int
		word bool
	}{
		{"alter table r add column c timestamptz default now()", 1, true},
		{"alter table r add column c2 text default pg_backend_pid()::text", 1, false},
		{"alter table r alter column n type text using (n+random())::text", 1, false},
		{"alter table r add column c int", 0, false},
		{"alter table r alter column n set default random()", 0, false},
		{"alter table r add column c timestamptz[] default '{now}'", 1, true},
	} {
		checks, w := DDLValueChecks(c.sql)
		t.Logf("%s -> %q %v", c.sql, checks, w)
		if len(checks) != c.n || w != c.word {
			t.Errorf("%s: got %d checks, word %v", c.sql, len(checks), w)
		}
	}
	for _, s := range []string{"update r4 set v = xmin::text where id = 2", "insert into r4 as x values (1) returning id",
		"with q as (select 1) delete from public.r4_1 where id in (select * from q)", "select * from r4 for update"} {
		out, verb, ret, ok := RefDigestSQL(s)
		t.Logf("%s -> %s %s %v %v", s, out, verb, ret, ok)
		if !ok {
			t.Errorf("%s: not ok", s)
		}
	}
	for _, s := range []string{"with x as (update r4 set v = 'a' returning id) select * from x",
		"with x as (delete from r4 returning *) insert into r4 select * from x",
		"merge into r4 using r5 on r4.id = r5.id when matched then delete"} {
		if _, _, _, ok := RefDigestSQL(s); ok {
			t.Errorf("%s: ok, want refused", s)
		}
	}
}
