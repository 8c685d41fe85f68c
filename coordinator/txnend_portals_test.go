package coordinator_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestPortalsEndWithTransaction: a COMMIT, ROLLBACK or ROLLBACK TO earlier
// in the same pipeline, and COMMIT AND CHAIN as a query, end the portals
// and cursors the coordinator keeps for multi-shard reads as PostgreSQL
// ends its own (they gave rows where PostgreSQL says 34000), a WITH HOLD
// cursor survives a COMMIT in the pipeline (it was dropped: 34000), and
// Describe of such a portal or cursor in a failed block is 25P02 (it gave
// the row description). Message for message beside a plain table
// (adversary round 3 of the rows-first bridge).
func TestPortalsEndWithTransaction(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	p := connect(t, cl.Servers[1].Addr())
	testTable(t, c, "pe_t", "(k int PRIMARY KEY, v int)", "SELECT create_distributed_table('pe_t', 'k', shard_count => 8)")
	testTable(t, c, "pe_du", "(k int, x int, UNIQUE (k) DEFERRABLE INITIALLY DEFERRED)", "SELECT create_distributed_table('pe_du', 'k', shard_count => 4)")
	exec(t, c, "INSERT INTO pe_t (k) SELECT generate_series(1, 6)")
	exec(t, p, "DROP TABLE IF EXISTS pe_plain, pe_du_plain")
	exec(t, p, "CREATE TABLE pe_plain (k int PRIMARY KEY, v int)")
	exec(t, p, "CREATE TABLE pe_du_plain (k int, x int, UNIQUE (k) DEFERRABLE INITIALLY DEFERRED)")
	exec(t, p, "INSERT INTO pe_plain (k) SELECT generate_series(1, 6)")
	t.Cleanup(func() { exec(t, connect(t, cl.Servers[1].Addr()), "DROP TABLE IF EXISTS pe_plain, pe_du_plain") })
	fleet := protoDial(t, srv.Addr(), "pgfleet")
	oracle := protoDial(t, cl.Servers[1].Addr(), "postgres")

	q := func(sql string) pgproto3.FrontendMessage { return &pgproto3.Query{String: sql} }
	write := func(portal string) []pgproto3.FrontendMessage { // a multi-shard write's portal
		return []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "UPDATE {t} SET v = 1 WHERE k IN (1, 2) RETURNING k"},
			&pgproto3.Bind{DestinationPortal: portal}}
	}
	exe1 := func(portal string) pgproto3.FrontendMessage { return &pgproto3.Execute{Portal: portal, MaxRows: 1} }
	read := func(portal string) []pgproto3.FrontendMessage { // a multi-shard read's portal
		return []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "SELECT k FROM {t} ORDER BY k"},
			&pgproto3.Bind{DestinationPortal: portal}}
	}
	run := func(sql string) []pgproto3.FrontendMessage { // parse, bind, execute in the unnamed portal
		return []pgproto3.FrontendMessage{&pgproto3.Parse{Query: sql}, &pgproto3.Bind{}, &pgproto3.Execute{}}
	}
	exe := func(portal string) pgproto3.FrontendMessage { return &pgproto3.Execute{Portal: portal} }
	desc := func(portal string) pgproto3.FrontendMessage { return &pgproto3.Describe{ObjectType: 'P', Name: portal} }
	cat := func(parts ...any) []pgproto3.FrontendMessage {
		var out []pgproto3.FrontendMessage
		for _, x := range parts {
			switch v := x.(type) {
			case pgproto3.FrontendMessage:
				out = append(out, v)
			case []pgproto3.FrontendMessage:
				out = append(out, v...)
			}
		}
		if _, ok := out[len(out)-1].(*pgproto3.Query); ok {
			return out
		}
		return append(out, &pgproto3.Sync{})
	}
	steps := []struct {
		what string
		msgs []pgproto3.FrontendMessage
	}{
		{"BEGIN", cat(q("BEGIN"))},
		{"a portal, then COMMIT before its Execute", cat(read("p1"), run("COMMIT"), exe("p1"))},
		{"BEGIN", cat(q("BEGIN"))},
		{"a portal, then ROLLBACK before its Execute", cat(read("p1"), run("ROLLBACK"), exe("p1"))},
		{"BEGIN; SAVEPOINT", cat(q("BEGIN"), q("SAVEPOINT s"))},
		{"a portal, then ROLLBACK TO before its Execute", cat(read("p1"), run("ROLLBACK TO SAVEPOINT s"), exe("p1"), desc("p1"))},
		{"a portal before the savepoint survives ROLLBACK TO", cat(read("p2"))},
		{"", cat(q("SAVEPOINT s2"))},
		{"", cat(run("ROLLBACK TO SAVEPOINT s2"), exe("p2"))},
		{"", cat(q("ROLLBACK"))},
		{"a cursor, then COMMIT before its FETCH", cat(q("BEGIN"), q("DECLARE c CURSOR FOR SELECT k FROM {t} ORDER BY k"))},
		{"", cat(run("COMMIT"), run("FETCH 2 FROM c"))},
		{"a WITH HOLD cursor, then COMMIT before its FETCH", cat(q("BEGIN"), q("DECLARE h CURSOR WITH HOLD FOR SELECT k FROM {t} ORDER BY k"))},
		{"", cat(run("COMMIT"), run("FETCH 2 FROM h"))},
		{"", cat(run("FETCH 2 FROM h"))},
		{"", cat(run("CLOSE h"))},
		{"a WITH HOLD cursor, then ROLLBACK before its FETCH", cat(q("BEGIN"), q("DECLARE h CURSOR WITH HOLD FOR SELECT k FROM {t} ORDER BY k"))},
		{"", cat(run("ROLLBACK"), run("FETCH 2 FROM h"))},
		{"a portal, then COMMIT AND CHAIN as a query", cat(q("BEGIN"), read("p3"))},
		{"", cat(q("COMMIT AND CHAIN"))},
		{"", cat(exe("p3"))},
		{"", cat(q("ROLLBACK"))},
		{"Describe of a portal and a cursor in a failed block", cat(q("BEGIN"), q("DECLARE d CURSOR FOR SELECT k FROM {t} ORDER BY k"), read("p4"))},
		{"", cat(q("SELECT 1/0"))},
		{"", cat(desc("p4"))},
		{"", cat(desc("d"))},
		{"", cat(q("ROLLBACK"))},
		{"after COMMIT in the pipeline, a new portal runs", cat(q("BEGIN"))},
		{"", cat(run("COMMIT"), read("p5"), exe("p5"))},
		// Adversary round 4: portals bound after a SAVEPOINT of the same
		// pipeline end at its ROLLBACK TO (a write portal ran and its
		// block committed).
		{"a read portal bound after a SAVEPOINT in the pipeline", cat(q("BEGIN"), q("UPDATE {t} SET v = 7 WHERE k = 2"))},
		{"", cat(run("SAVEPOINT a"), read("p6"), exe1("p6"), run("ROLLBACK TO a"), exe1("p6"))},
		{"", cat(q("COMMIT"))},
		{"a write portal bound after a SAVEPOINT in the pipeline", cat(q("BEGIN"))},
		{"", cat(run("SAVEPOINT a"), write("pw"), run("ROLLBACK TO a"), exe("pw"))},
		{"", cat(q("COMMIT"))},
		// Outside a block: COMMIT or ROLLBACK in the pipeline ends them.
		{"a write portal, COMMIT outside a block", cat(write("pw"), run("COMMIT"), exe("pw"))},
		{"a read portal, ROLLBACK outside a block", cat(read("p7"), exe1("p7"), run("ROLLBACK"), exe1("p7"))},
		{"", cat(q("SELECT count(*) FROM {t} WHERE v IS NOT NULL"))},
		// A WITH HOLD cursor of a block whose COMMIT fails goes with it.
		{"a WITH HOLD cursor, COMMIT fails", cat(q("BEGIN"), q("INSERT INTO {du} VALUES (1, 1), (1, 2)"),
			q("DECLARE hc CURSOR WITH HOLD FOR SELECT k, x FROM {du} ORDER BY x"))},
		{"", cat(q("COMMIT"))},
		{"", cat(q("FETCH ALL FROM hc"))},
		// One kept by a COMMIT at the end of a string of several.
		{"a WITH HOLD cursor, COMMIT in a string", cat(q("BEGIN"), q("DECLARE hs CURSOR WITH HOLD FOR SELECT k FROM {t} ORDER BY k"))},
		{"", cat(q("UPDATE {t} SET v = 9 WHERE k = 3; COMMIT"))},
		{"", cat(q("FETCH 2 FROM hs"))},
		{"", cat(q("CLOSE hs"))},
		{"", cat(q("SELECT string_agg(k || ':' || coalesce(v, 0), ',' ORDER BY k) FROM {t}"))},
	}
	for i, s := range steps {
		var got [2][]string
		for j, side := range []struct {
			c *protoClient
			r *strings.Replacer
		}{{fleet, strings.NewReplacer("{t}", "pe_t", "{du}", "pe_du")}, {oracle, strings.NewReplacer("{t}", "pe_plain", "{du}", "pe_du_plain")}} {
			msgs := make([]pgproto3.FrontendMessage, len(s.msgs))
			for k, m := range s.msgs {
				switch v := m.(type) {
				case *pgproto3.Query:
					m = &pgproto3.Query{String: side.r.Replace(v.String)}
				case *pgproto3.Parse:
					m = &pgproto3.Parse{Name: v.Name, Query: side.r.Replace(v.Query)}
				}
				msgs[k] = m
			}
			zs := 0 // a ReadyForQuery for each Query and Sync
			for _, m := range msgs {
				switch m.(type) {
				case *pgproto3.Query, *pgproto3.Sync:
					zs++
				}
			}
			got[j] = pipeRaw(t, side.c, zs, msgs...)
		}
		if fmt.Sprint(got[0]) != fmt.Sprint(got[1]) {
			t.Errorf("step %d (%s):\n got %q\nPostgreSQL %q", i, s.what, got[0], got[1])
		}
	}
}
