package difftest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestPreparedRefusedAtLaterExecution: a prepared statement the coordinator
// runs once and refuses (0A000) at its second execution has written on the
// fleet; the oracle must run that first execution too, or the two databases
// part (seeds 3 and 4 reported a lost write on the oracle's side). Plain
// PostgreSQL stands in for the coordinator: its refuse() raises 0A000 for
// key 2, the oracle's never does.
func TestPreparedRefusedAtLaterExecution(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := pgtest.Start(t, 2)
	conns := make([]*pgconn.PgConn, 2)
	for i, s := range c.Servers {
		conn, err := pgconn.Connect(ctx, pgtest.URL(s.Addr()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		conns[i] = conn
		raise := "RETURN true;"
		if i == 0 {
			raise = "IF k = 2 THEN RAISE EXCEPTION 'refused' USING ERRCODE = 'feature_not_supported'; END IF; RETURN true;"
		}
		if err := exec(ctx, conn, `CREATE TABLE t (k int PRIMARY KEY, v text);
			INSERT INTO t VALUES (1, 'old'), (2, 'old');
			CREATE FUNCTION refuse(k int) RETURNS bool LANGUAGE plpgsql AS $$ BEGIN `+raise+` END $$`); err != nil {
			t.Fatal(err)
		}
	}
	ru := &runner{
		cfg:   Config{MaxFailures: 1, Timeout: 20 * time.Second, Logf: t.Logf},
		st:    &Stats{Refusals: map[string]int{}, Errors: map[string]int{}, ErrorStmts: map[string]string{}, Families: map[string]int{}},
		g:     &gen{set: settings{}},
		coord: side{conn: conns[0], addr: c.Servers[0].Addr()}, oracle: side{conn: conns[1], addr: c.Servers[1].Addr()},
	}
	text := func(s string) param { return param{oid: 25, format: 1, val: value{s: s}} }
	ru.step(ctx, &stmt{family: "prepared", proto: preparedProto,
		sql:    "UPDATE t SET v = $1 WHERE k = $2::int AND refuse($2::int)",
		params: []param{text("new1"), text("1")},
		more:   [][]param{{text("new2"), text("2")}, {text("new3"), text("1")}}})
	if len(ru.st.Mismatches) > 0 {
		t.Fatalf("mismatch: %s", ru.st.Mismatches[0])
	}
	if n := ru.st.Refusals["prepared: refused"]; n != 1 {
		t.Errorf("refusals: %v, want one", ru.st.Refusals)
	}
	for i, conn := range conns {
		res, err := conn.Exec(ctx, "SELECT string_agg(k || '=' || v, ',' ORDER BY k) FROM t").ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		if got := string(res[0].Rows[0][0]); got != "1=new1,2=old" {
			t.Errorf("server %d (%s): rows %s, want 1=new1,2=old (the execution before the refusal, nothing after it)",
				i, []string{"coordinator", "oracle"}[i], got)
		}
	}
}
