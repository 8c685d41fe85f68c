package coordinator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// rawConnectDB is rawConnect to database db of the server at addr.
func rawConnectDB(t *testing.T, addr, db string) *rawConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pc, err := pgconn.Connect(ctx, strings.Replace(pgtest.URL(addr), "/postgres?", "/"+db+"?", 1))
	if err != nil {
		t.Fatal(err)
	}
	hc, err := pc.Hijack()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hc.Conn.Close() })
	return &rawConn{t: t, conn: hc.Conn, fe: hc.Frontend}
}

// TestMultiShardPortalInParts: a multi-shard SELECT's portal fetched in
// parts (Execute with a row limit: JDBC's fetch size inside a transaction
// block, node-postgres's pg-cursor outside one) gives the rows, the
// PortalSuspended and CommandComplete messages and the errors plain
// PostgreSQL gives, across Syncs in a transaction block.
func TestMultiShardPortalInParts(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	plain := oracleDB(t, cl.Servers[1].Addr(), "portal_oracle")
	for _, conn := range []*pgx.Conn{c, plain} {
		exec(t, conn, "DROP TABLE IF EXISTS pp_t")
		exec(t, conn, "CREATE TABLE pp_t (id int PRIMARY KEY, v text)")
	}
	t.Cleanup(func() { exec(t, plain, "DROP TABLE IF EXISTS pp_t") })
	testTable(t, c, "pp_t", "(id int PRIMARY KEY, v text)", "SELECT create_distributed_table('pp_t', 'id', shard_count => 4)")
	for _, conn := range []*pgx.Conn{c, plain} {
		exec(t, conn, "INSERT INTO pp_t SELECT i, 'v' || i FROM generate_series(1, 10) i", pgx.QueryExecModeSimpleProtocol)
	}
	got, want := rawConnect(t, srv.Addr()), rawConnectDB(t, cl.Servers[1].Addr(), "portal_oracle")
	type step struct {
		what string
		msgs []pgproto3.FrontendMessage
	}
	q := "SELECT id::text, v FROM pp_t ORDER BY id"
	qp := "SELECT id::text, v FROM pp_t WHERE id > $1 ORDER BY id"
	bind := func(portal, stmt string, args ...string) *pgproto3.Bind {
		var ps [][]byte
		for _, a := range args {
			ps = append(ps, []byte(a))
		}
		return &pgproto3.Bind{DestinationPortal: portal, PreparedStatement: stmt, Parameters: ps}
	}
	ex := func(portal string, n uint32) *pgproto3.Execute { return &pgproto3.Execute{Portal: portal, MaxRows: n} }
	steps := []step{
		// JDBC: a named portal in a transaction block, a Sync after each fetch.
		{"begin", []pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN"}}},
		{"first part", []pgproto3.FrontendMessage{&pgproto3.Parse{Name: "s1", Query: q}, bind("c1", "s1"),
			&pgproto3.Describe{ObjectType: 'P', Name: "c1"}, ex("c1", 4)}},
		{"second part", []pgproto3.FrontendMessage{ex("c1", 4)}},
		{"last part", []pgproto3.FrontendMessage{ex("c1", 4)}},
		{"after the end", []pgproto3.FrontendMessage{ex("c1", 4)}},
		{"parameters, parts that divide the rows", []pgproto3.FrontendMessage{&pgproto3.Parse{Name: "s2", Query: qp}, bind("c2", "s2", "2"), ex("c2", 4)}},
		{"c2 second", []pgproto3.FrontendMessage{ex("c2", 4)}},
		{"c2 end", []pgproto3.FrontendMessage{ex("c2", 4)}},
		{"two portals at once", []pgproto3.FrontendMessage{bind("c3", "s1"), bind("c4", "s2", "5"), ex("c3", 3), ex("c4", 2)}},
		{"the rest of both", []pgproto3.FrontendMessage{ex("c4", 0), ex("c3", 0)}},
		{"close", []pgproto3.FrontendMessage{bind("c5", "s1"), ex("c5", 2), &pgproto3.Close{ObjectType: 'P', Name: "c5"}}},
		{"closed", []pgproto3.FrontendMessage{ex("c5", 2)}},
		{"commit", []pgproto3.FrontendMessage{&pgproto3.Query{String: "COMMIT"}}},
		{"portal after commit", []pgproto3.FrontendMessage{ex("c1", 2)}},
		// pg-cursor: the unnamed portal outside a block, no Sync between parts.
		{"unnamed, one batch", []pgproto3.FrontendMessage{&pgproto3.Parse{Query: qp}, bind("", "", "3"), ex("", 3), ex("", 3), ex("", 0)}},
		{"unnamed, after Sync", []pgproto3.FrontendMessage{&pgproto3.Parse{Query: q}, bind("", ""), ex("", 3)}},
		{"gone after Sync outside a block", []pgproto3.FrontendMessage{ex("", 3)}},
		// A failed transaction.
		{"begin again", []pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN"}}},
		{"part, then an error", []pgproto3.FrontendMessage{bind("c6", "s1"), ex("c6", 5), &pgproto3.Parse{Query: "SELECT 1/0"}, bind("", ""), ex("", 0)}},
		{"in the failed transaction", []pgproto3.FrontendMessage{ex("c6", 5)}},
		{"rollback", []pgproto3.FrontendMessage{&pgproto3.Query{String: "ROLLBACK"}}},
		// From an adversary: portals run whole or only bound live across
		// Syncs in a block too (34000 failed the block, and COMMIT lost
		// its writes); a plain COMMIT ends them; ROLLBACK TO drops those
		// bound after the savepoint; a name in use gets 42P03; a simple
		// query drops the unnamed one; DDL of a table a suspended portal
		// reads gets 55006.
		{"begin 3", []pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN"}}},
		{"write, run whole", []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "INSERT INTO pp_t VALUES (100, 'x')"}, bind("", ""), ex("", 0),
			bind("w1", "s1"), ex("w1", 0), bind("w2", "s1")}},
		{"again after Sync", []pgproto3.FrontendMessage{ex("w1", 0), ex("w2", 2)}},
		{"name in use", []pgproto3.FrontendMessage{bind("w1", "s1")}},
		{"rollback to nothing", []pgproto3.FrontendMessage{&pgproto3.Query{String: "ROLLBACK"}}},
		{"begin 4", []pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN"}}},
		{"bind, savepoint, bind", []pgproto3.FrontendMessage{bind("v1", "s1"), ex("v1", 1)}},
		{"savepoint", []pgproto3.FrontendMessage{&pgproto3.Query{String: "SAVEPOINT sp"}}},
		{"bind after it", []pgproto3.FrontendMessage{bind("v2", "s1"), ex("v2", 1), bind("", "s1"), ex("", 1)}},
		{"a simple query drops the unnamed portal", []pgproto3.FrontendMessage{&pgproto3.Query{String: "SELECT 1"}}},
		{"unnamed gone", []pgproto3.FrontendMessage{ex("", 1)}},
		{"rollback to", []pgproto3.FrontendMessage{&pgproto3.Query{String: "ROLLBACK TO SAVEPOINT sp"}}},
		{"v2 gone, v1 not", []pgproto3.FrontendMessage{ex("v1", 1)}},
		{"v2", []pgproto3.FrontendMessage{ex("v2", 1)}},
		{"rollback to again", []pgproto3.FrontendMessage{&pgproto3.Query{String: "ROLLBACK TO SAVEPOINT sp"}}},
		{"DDL under a suspended portal", []pgproto3.FrontendMessage{&pgproto3.Query{String: "ALTER TABLE pp_t ADD COLUMN z int"}}},
		{"rollback to once more", []pgproto3.FrontendMessage{&pgproto3.Query{String: "ROLLBACK TO SAVEPOINT sp"}}},
		{"commit", []pgproto3.FrontendMessage{&pgproto3.Query{String: "COMMIT"}}},
		{"after a plain COMMIT", []pgproto3.FrontendMessage{ex("v1", 1)}},
		{"count", []pgproto3.FrontendMessage{&pgproto3.Query{String: "SELECT count(*) FROM pp_t"}}},
		// Outside a block: a routed statement's Parse and Describe before
		// the portal's first Execute (a hidden Sync on the worker ends
		// only the worker's transaction), and the portal gone after the
		// client's Sync.
		{"routed Describe, then parts", []pgproto3.FrontendMessage{bind("q1", "s1"),
			&pgproto3.Parse{Name: "r1", Query: "SELECT v FROM pp_t WHERE id = $1"}, &pgproto3.Describe{ObjectType: 'S', Name: "r1"},
			ex("q1", 2), ex("q1", 2), bind("", "r1", "3"), ex("", 0), ex("q1", 2)}},
		{"gone after the Sync", []pgproto3.FrontendMessage{ex("q1", 2)}},
		// Closing a statement leaves the portals made from it (as
		// PostgreSQL 15 does).
		{"begin 5", []pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN"}}},
		{"portal of s9", []pgproto3.FrontendMessage{&pgproto3.Parse{Name: "s9", Query: q}, bind("p9", "s9"), ex("p9", 2)}},
		{"close s9", []pgproto3.FrontendMessage{&pgproto3.Close{ObjectType: 'S', Name: "s9"}}},
		{"p9 after", []pgproto3.FrontendMessage{ex("p9", 2)}},
		{"end 5", []pgproto3.FrontendMessage{&pgproto3.Query{String: "ROLLBACK"}}},
	}
	for _, s := range steps {
		g, w := strings.Join(got.round(s.msgs...), ","), strings.Join(want.round(s.msgs...), ",")
		if g != w {
			t.Errorf("%s:\n got        %s\n PostgreSQL %s", s.what, g, w)
		}
	}
}
