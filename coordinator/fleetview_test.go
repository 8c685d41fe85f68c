package coordinator_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestPreparedXactsFleetWide: pg_prepared_xacts through the coordinator
// lists the client's prepared transactions on every worker, as a
// transaction manager's recovery scan needs (JDBC's recover(); before, the
// default worker's only, and the ids prepared elsewhere were never found),
// in every protocol, in a block and in a cursor; the coordinator's own ids
// are not listed; a statement that would read the view otherwise than in a
// SELECT of its own is refused.
func TestPreparedXactsFleetWide(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	simple := pgx.QueryExecModeSimpleProtocol
	ctx := context.Background()
	c := connect(t, srv.Addr())
	testTable(t, c, "fvx_t", "(k int PRIMARY KEY, v int)", "SELECT create_distributed_table('fvx_t', 'k', shard_count => 4)")
	exec(t, c, "INSERT INTO fvx_t SELECT g, 0 FROM generate_series(1, 40) g", simple)
	exec(t, c, "DROP TABLE IF EXISTS fvx_local", simple)
	exec(t, c, "CREATE TABLE fvx_local (gid text)", simple) // the default worker's
	t.Cleanup(func() {
		rollbackPrepared(t, cl, "fvx")
		rollbackPrepared(t, cl, "pgfleet_fvx")
		_, _ = c.Exec(ctx, "DROP TABLE IF EXISTS fvx_local", simple)
	})
	near, far := keysOn(t, cl.Servers[0].Addr(), "fvx_t", "k"), keysOn(t, cl.Servers[1].Addr(), "fvx_t", "k")
	if len(near) < 2 || len(far) < 2 {
		t.Fatalf("keys on the workers: %v and %v", near, far)
	}
	// Two ids prepared on each worker, through the coordinator.
	var want []string
	for _, k := range []string{near[0], near[1], far[0], far[1]} {
		s := connect(t, srv.Addr())
		gid := "fvx_" + k
		for _, q := range []string{"BEGIN", "UPDATE fvx_t SET v = v + 1 WHERE k = " + k, "PREPARE TRANSACTION '" + gid + "'"} {
			exec(t, s, q, simple)
		}
		want = append(want, gid)
	}
	slices.Sort(want)
	// One of the coordinator's own ids, which the view leaves out.
	w2 := connect(t, cl.Servers[1].Addr())
	exec(t, w2, "BEGIN", simple)
	exec(t, w2, "PREPARE TRANSACTION 'pgfleet_fvx_own'", simple)

	// What each worker's own view says, the coordinator's ids left out:
	// the rows the fleet's view must have.
	const cols = "transaction::text || ' ' || gid || ' ' || extract(epoch from prepared)::text || ' ' || owner || ' ' || database"
	var direct []string
	for _, s := range cl.Servers {
		direct = append(direct, queryStrings(t, connect(t, s.Addr()), "SELECT "+cols+" FROM pg_prepared_xacts WHERE gid LIKE 'fvx%' ORDER BY 1")...)
	}
	slices.Sort(direct)
	if len(direct) != len(want) {
		t.Fatalf("the workers list %v", direct)
	}

	modes := map[string]pgx.QueryExecMode{"simple": simple, "extended": pgx.QueryExecModeExec, "prepared": pgx.QueryExecModeCacheStatement}
	for name, mode := range modes {
		got := func(q string, args ...any) []string {
			t.Helper()
			rows, err := c.Query(ctx, q, append([]any{mode}, args...)...)
			if err != nil {
				t.Fatalf("%s: %s: %v", name, q, err)
			}
			out, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatalf("%s: %s: %v", name, q, err)
			}
			return out
		}
		// JDBC's recovery scan, as it sends it.
		all := got("SELECT gid FROM pg_prepared_xacts where database = current_database()")
		var ours []string
		for _, g := range all {
			if strings.HasPrefix(g, "pgfleet_") {
				t.Errorf("%s: the view lists the coordinator's id %s", name, g)
			}
			if strings.HasPrefix(g, "fvx_") {
				ours = append(ours, g)
			}
		}
		slices.Sort(ours)
		if !slices.Equal(ours, want) {
			t.Errorf("%s: recovery scan found %v, want %v", name, ours, want)
		}
		if g := got("SELECT " + cols + " FROM pg_catalog.pg_prepared_xacts p WHERE p.gid LIKE 'fvx%' ORDER BY 1"); !slices.Equal(g, direct) {
			t.Errorf("%s: rows %v, the workers' %v", name, g, direct)
		}
		if g := got("SELECT count(*)::text FROM pg_prepared_xacts WHERE gid LIKE $1", "fvx\\_%"); !slices.Equal(g, []string{"4"}) {
			t.Errorf("%s: count with a parameter: %v", name, g)
		}
		if g := got("WITH x AS (SELECT gid FROM pg_prepared_xacts) SELECT string_agg(gid, ',' ORDER BY gid) FROM x WHERE gid LIKE 'fvx\\_%'"); !slices.Equal(g, []string{strings.Join(want, ",")}) {
			t.Errorf("%s: in a CTE: %v", name, g)
		}
		for _, q := range []string{
			"SELECT pg_catalog.pg_prepared_xacts.gid FROM pg_catalog.pg_prepared_xacts WHERE gid LIKE 'fvx\\_%' ORDER BY 1",
			`SELECT gid FROM pg_catalog.U&"pg\005fprepared_xacts" WHERE gid LIKE 'fvx\_%' ORDER BY 1`,
		} {
			if g := got(q); !slices.Equal(g, want) {
				t.Errorf("%s: %s: %v, want %v", name, q, g, want)
			}
		}
		// In a block, beside a write.
		tx, err := c.BeginTx(ctx, pgx.TxOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "UPDATE fvx_t SET v = v WHERE k = "+near[2], mode); err != nil {
			t.Fatal(err)
		}
		rows, err := tx.Query(ctx, "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'fvx\\_%' ORDER BY gid", mode)
		if err != nil {
			t.Fatal(err)
		}
		inBlock, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || !slices.Equal(inBlock, want) {
			t.Errorf("%s: in a block: %v (%v), want %v", name, inBlock, err, want)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// A cursor over the view.
	exec(t, c, "BEGIN", simple)
	exec(t, c, "DECLARE fvx_c CURSOR FOR SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'fvx\\_%' ORDER BY gid", simple)
	if g := queryStrings(t, c, "FETCH ALL FROM fvx_c"); !slices.Equal(g, want) {
		t.Errorf("cursor: %v, want %v", g, want)
	}
	exec(t, c, "COMMIT", simple)

	// A session pinned to its worker connection (a temporary table) runs
	// no multi-shard query: refused, not answered from one worker.
	pin := connect(t, srv.Addr())
	exec(t, pin, "CREATE TEMP TABLE fvx_tmp (a int)", simple)
	for name, mode := range modes {
		rows, err := pin.Query(ctx, "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'fvx\\_%' ORDER BY gid", mode)
		if err == nil {
			var g []string
			g, err = pgx.CollectRows(rows, pgx.RowTo[string])
			if err == nil && !slices.Equal(g, want) {
				t.Errorf("%s: pinned session: %v, want %v", name, g, want)
			}
		}
		if err != nil && sqlState(err) != "0A000" {
			t.Errorf("%s: pinned session: %v", name, err)
		}
	}

	// Refused, where the answer would be the default worker's only.
	for _, q := range []string{
		"INSERT INTO fvx_local SELECT gid FROM pg_prepared_xacts",
		"SELECT gid FROM pg_prepared_xacts; SELECT 1",
		"SELECT * FROM pg_prepared_xact()",
		"SELECT gid FROM postgres.pg_catalog.pg_prepared_xacts",
		"SELECT p.gid, t.v FROM pg_prepared_xacts p JOIN fvx_t t ON t.k::text = p.gid",
	} {
		for name, mode := range modes {
			if name != "simple" && strings.Contains(q, ";") {
				continue
			}
			_, err := c.Exec(ctx, q, mode)
			if sqlState(err) != "0A000" {
				t.Errorf("%s: %s: %v, want 0A000", name, q, err)
			}
		}
	}
	if g := queryStrings(t, c, "SELECT count(*) FROM fvx_local"); !slices.Equal(g, []string{"0"}) {
		t.Errorf("fvx_local has %v rows", g)
	}

	// What a transaction manager does next: commit each id found, from
	// one session; every row prepared is then committed.
	for _, g := range queryStrings(t, c, "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'fvx\\_%'") {
		exec(t, c, "COMMIT PREPARED '"+g+"'", simple)
	}
	keys := []int{}
	for _, k := range []string{near[0], near[1], far[0], far[1]} {
		n, _ := strconv.Atoi(k)
		keys = append(keys, n)
	}
	slices.Sort(keys)
	if g, w := queryStrings(t, c, "SELECT k FROM fvx_t WHERE v = 1 ORDER BY k"), fmt.Sprint(keys); fmt.Sprint(g) != w {
		t.Errorf("committed rows %v, want %s", g, w)
	}
	exec(t, w2, "ROLLBACK PREPARED 'pgfleet_fvx_own'", simple)
}
