package coordinator_test

import (
	"context"
	"testing"
)

// TestFix2Explore runs the adversary's cases against pgfleet and plain
// PostgreSQL.
func TestFix2Explore(t *testing.T) {
	e := newDistEnv(t)
	e.same("INSERT INTO {t}text (id, v) VALUES ('Abc', 'x'), ('b', 'y'), ('c', 'z')", nil, nil, nil)
	// 9
	e.same("SELECT v FROM {t}text WHERE id = 'A' -- c\n 'bc'", nil, nil, nil)
	e.same("SELECT v FROM {t}text WHERE id = 'A' /* c */\n 'bc'", nil, nil, nil)
	// 8
	if got := rawRun(e.c.PgConn(), `SELECT count(*) FROM U&"\0064v_text"`, nil, nil, nil); !(len(got.Rows) == 1 && got.Rows[0][0] == "1") {
		t.Errorf("U&: %+v", got)
	}
	// 7
	e.same("SET client_encoding = 'LATIN1'", nil, nil, nil)
	e.same("INSERT INTO {t}text (id, v) VALUES ('caf\xe9', 'l1')", nil, nil, nil)
	e.same("SELECT count(*) FROM {t}text WHERE v = E'caf\xe9'", nil, nil, nil)
	e.same("SELECT count(*) FROM {t}text WHERE id = E'caf\xe9'", nil, nil, nil)
	// 3
	e.same("INSERT INTO {t}text (id, v) VALUES ('\xe9a', 'm1'), ('\xe9b', 'm2'), ('\xe9c', 'm3'), ('q', 'm4')", nil, nil, nil)
	e.same("RESET client_encoding", nil, nil, nil)
	// 1
	e.refused("INSERT INTO {t}text (id, v) VALUES ('now'::timestamptz::text, 'a')")
	// 2
	for _, s := range []string{"BEGIN", "SELECT set_config('DateStyle','SQL, DMY', true)",
		"INSERT INTO {t}text (id,v) VALUES ('2020-01-03'::date::text,'r1')", "COMMIT",
		"SELECT v FROM {t}text WHERE id='03/01/2020'"} {
		e.same(s, nil, nil, nil)
	}
	e.same("SELECT set_config('DateStyle','SQL, DMY', false)", nil, nil, nil)
	e.same("INSERT INTO {t}text (id,v) VALUES ('2020-01-04'::date::text,'r2')", nil, nil, nil)
	e.same("SELECT v FROM {t}text WHERE id='04/01/2020'", nil, nil, nil)
	e.same("INSERT INTO {t}text (id,v) VALUES ('x1','r2')", nil, nil, nil)
	e.same("INSERT INTO {t}text (id,v) VALUES ('x2','r2')", nil, nil, nil)
	e.same("INSERT INTO {t}text (id,v) VALUES ('x3','r2')", nil, nil, nil)
	e.placed()
	_ = context.Background()
}
