package coordinator_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestOnePhaseCommit: a transaction over two workers that wrote on at most
// one of them commits without two-phase commit (no decision is recorded,
// nothing is prepared) and with the writer's outcome; two writers, or
// SERIALIZABLE, still take two-phase commit.
func TestOnePhaseCommit(t *testing.T) {
	cl := pgtest.Start(t, 2)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	exec(t, c, "CREATE TABLE op_t (id int, v int, UNIQUE (id) DEFERRABLE INITIALLY DEFERRED)", simple)
	exec(t, c, "SELECT create_distributed_table('op_t', 'id', shard_count => 2)", simple)
	exec(t, c, "INSERT INTO op_t SELECT g, 0 FROM generate_series(1, 20) g", simple)
	// An id on each worker.
	var ids [2]int
	for i := range cl.Servers {
		w := connect(t, cl.Servers[i].Addr())
		shard := queryString(t, w, "SELECT tablename::text FROM pg_tables WHERE schemaname = 'pgfleet_shards' AND tablename LIKE 'op\\_t\\_%'")
		n, err := strconv.Atoi(queryString(t, w, "SELECT min(id)::text FROM pgfleet_shards."+shard))
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = n
	}
	meta := connect(t, cl.Servers[0].Addr())
	// (Checked on another session: the last case pins c to its
	// connection, which keeps the cursor.)
	chk := connect(t, srv.Addr())
	// Decisions: in the metadata database, or commit records on a worker.
	decisions := func() int {
		n, _ := strconv.Atoi(queryString(t, meta, "SELECT count(*)::text FROM pgfleet.transaction_decisions"))
		for i := range cl.Servers {
			w := connect(t, cl.Servers[i].Addr())
			if queryString(t, w, "SELECT (pg_catalog.to_regclass('pgfleet_txn.commits') IS NOT NULL)::text") == "true" {
				k, _ := strconv.Atoi(queryString(t, w, "SELECT count(*)::text FROM pgfleet_txn.commits"))
				n += k
			}
		}
		return n
	}
	prepared := func() string {
		out := ""
		for i := range cl.Servers {
			out += queryString(t, connect(t, cl.Servers[i].Addr()), "SELECT count(*)::text FROM pg_prepared_xacts")
		}
		return out
	}
	// A holdable cursor a function declares runs its query at COMMIT.
	exec(t, c, `CREATE FUNCTION op_hc(int) RETURNS int LANGUAGE plpgsql AS
		$$ BEGIN EXECUTE 'DECLARE op_c CURSOR WITH HOLD FOR SELECT 1 / (g - 2) FROM generate_series(1, 3) g'; RETURN $1; END $$`, simple)
	exec(t, c, `CREATE FUNCTION op_hc1(int) RETURNS int LANGUAGE plpgsql AS
		$$ BEGIN EXECUTE 'DECLARE op_c1 CURSOR WITH HOLD FOR SELECT 1'; RETURN $1; END $$`, simple)
	a, b := strconv.Itoa(ids[0]), strconv.Itoa(ids[1])
	run := func(stmts ...string) error {
		for _, s := range stmts {
			if _, err := c.Exec(ctx, s, simple); err != nil {
				_, _ = c.Exec(ctx, "ROLLBACK", simple)
				return err
			}
		}
		return nil
	}
	for _, tc := range []struct {
		name     string
		stmts    []string
		twoPhase bool
		state    string // the COMMIT's SQLSTATE
		v        string // v of a and b after
	}{
		{"read one, write the other", []string{"BEGIN", "SELECT v FROM op_t WHERE id = " + a, "UPDATE op_t SET v = 1 WHERE id = " + b, "COMMIT"}, false, "", "0 1"},
		{"read both", []string{"BEGIN", "SELECT v FROM op_t WHERE id = " + a, "SELECT v FROM op_t WHERE id = " + b, "COMMIT"}, false, "", "0 1"},
		{"write both", []string{"BEGIN", "UPDATE op_t SET v = 2 WHERE id = " + a, "UPDATE op_t SET v = 2 WHERE id = " + b, "COMMIT"}, true, "", "2 2"},
		{"serializable", []string{"BEGIN ISOLATION LEVEL SERIALIZABLE", "SELECT v FROM op_t WHERE id = " + a, "UPDATE op_t SET v = 3 WHERE id = " + b, "COMMIT"}, true, "", "2 3"},
		{"the writer's deferred constraint fails", []string{"BEGIN", "SELECT v FROM op_t WHERE id = " + a,
			"UPDATE op_t SET v = 9 WHERE id = " + b, "INSERT INTO op_t VALUES (" + b + ", 9)", "COMMIT"}, false, "23505", "2 3"},
		{"the writer's transaction failed", []string{"BEGIN", "SELECT v FROM op_t WHERE id = " + a,
			"UPDATE op_t SET v = 9 WHERE id = " + b, "SELECT 1 / 0 FROM op_t WHERE id = " + b, "COMMIT"}, false, "22012", "2 3"},
		// PostgreSQL fails the COMMIT (22012); after the writer's commit
		// that could not be undone: refused, nothing committed.
		{"a reader's holdable cursor", []string{"BEGIN", "UPDATE op_t SET v = 9 WHERE id = " + b,
			"SELECT op_hc(id) FROM op_t WHERE id = " + a, "COMMIT"}, false, "0A000", "2 3"},
		// With no writer there is nothing to keep: one phase, as before.
		{"a holdable cursor, no writer", []string{"BEGIN", "SELECT v FROM op_t WHERE id = " + b,
			"SELECT op_hc1(id) FROM op_t WHERE id = " + a, "COMMIT"}, false, "", "2 3"},
	} {
		before := decisions()
		err := run(tc.stmts...)
		if got := sqlState(err); got != tc.state {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.state)
		}
		if got := decisions() > before; got != tc.twoPhase {
			t.Errorf("%s: two-phase commit %v, want %v", tc.name, got, tc.twoPhase)
		}
		if got := queryString(t, chk, "SELECT string_agg(v::text, ' ' ORDER BY id = "+b+") FROM op_t WHERE id IN ("+a+", "+b+")"); got != tc.v {
			t.Errorf("%s: v %q, want %q", tc.name, got, tc.v)
		}
		if got := prepared(); got != "00" {
			t.Errorf("%s: prepared transactions left %s", tc.name, got)
		}
		if got := queryString(t, chk, "SELECT count(*)::text FROM op_t"); got != "20" {
			t.Errorf("%s: %s rows, want 20", tc.name, got)
		}
	}
	// The holdable cursor the function declared in the block over both
	// workers is there after its COMMIT, as on PostgreSQL (the session
	// keeps the connection that holds it).
	if got := queryString(t, c, "FETCH op_c1"); got != "1" {
		t.Errorf("FETCH op_c1 after the block: %q, want 1", got)
	}
}
