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
	testTable(t, c, "pe_t", "(k int PRIMARY KEY)", "SELECT create_distributed_table('pe_t', 'k', shard_count => 8)")
	exec(t, c, "INSERT INTO pe_t SELECT generate_series(1, 6)")
	exec(t, p, "DROP TABLE IF EXISTS pe_plain")
	exec(t, p, "CREATE TABLE pe_plain (k int PRIMARY KEY)")
	exec(t, p, "INSERT INTO pe_plain SELECT generate_series(1, 6)")
	t.Cleanup(func() { exec(t, connect(t, cl.Servers[1].Addr()), "DROP TABLE IF EXISTS pe_plain") })
	fleet := protoDial(t, srv.Addr(), "pgfleet")
	oracle := protoDial(t, cl.Servers[1].Addr(), "postgres")

	q := func(sql string) pgproto3.FrontendMessage { return &pgproto3.Query{String: sql} }
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
	}
	for i, s := range steps {
		var got [2][]string
		for j, side := range []struct {
			c     *protoClient
			table string
		}{{fleet, "pe_t"}, {oracle, "pe_plain"}} {
			msgs := make([]pgproto3.FrontendMessage, len(s.msgs))
			for k, m := range s.msgs {
				switch v := m.(type) {
				case *pgproto3.Query:
					m = &pgproto3.Query{String: strings.ReplaceAll(v.String, "{t}", side.table)}
				case *pgproto3.Parse:
					m = &pgproto3.Parse{Name: v.Name, Query: strings.ReplaceAll(v.Query, "{t}", side.table)}
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
