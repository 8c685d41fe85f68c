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
	} {
		before := decisions()
		err := run(tc.stmts...)
		if got := sqlState(err); got != tc.state {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.state)
		}
		if got := decisions() > before; got != tc.twoPhase {
			t.Errorf("%s: two-phase commit %v, want %v", tc.name, got, tc.twoPhase)
		}
		if got := queryString(t, c, "SELECT string_agg(v::text, ' ' ORDER BY id = "+b+") FROM op_t WHERE id IN ("+a+", "+b+")"); got != tc.v {
			t.Errorf("%s: v %q, want %q", tc.name, got, tc.v)
		}
		if got := prepared(); got != "00" {
			t.Errorf("%s: prepared transactions left %s", tc.name, got)
		}
		if got := queryString(t, c, "SELECT count(*)::text FROM op_t"); got != "20" {
			t.Errorf("%s: %s rows, want 20", tc.name, got)
		}
	}
}

// TestReadersNotPrepared: a transaction that wrote on two workers and only
// read on a third prepares the writers alone; the reader commits beside
// them. A reader that holds a row lock or an advisory lock, or the default
// node (where NOTIFY runs), is prepared as before, and an advisory lock is
// held until the writers commit. A failed PREPARE still commits nothing.
func TestReadersNotPrepared(t *testing.T) {
	cl := pgtest.Start(t, 3)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	exec(t, c, "CREATE TABLE rp_t (id int, v int, UNIQUE (id) DEFERRABLE INITIALLY DEFERRED)", simple)
	exec(t, c, "SELECT create_distributed_table('rp_t', 'id', shard_count => 3)", simple)
	exec(t, c, "INSERT INTO rp_t SELECT g, 0 FROM generate_series(1, 30) g", simple)
	var ids [3]string // an id on each worker; the first is the default node
	workers := make([]*pgx.Conn, 3)
	for i := range cl.Servers {
		workers[i] = connect(t, cl.Servers[i].Addr())
		shard := queryString(t, workers[i], "SELECT tablename::text FROM pg_tables WHERE schemaname = 'pgfleet_shards' AND tablename LIKE 'rp\\_t\\_%'")
		ids[i] = queryString(t, workers[i], "SELECT min(id)::text FROM pgfleet_shards."+shard)
	}
	// The first commit over workers makes the commit records table.
	exec(t, c, "BEGIN")
	exec(t, c, "UPDATE rp_t SET v = v WHERE id = "+ids[1])
	exec(t, c, "UPDATE rp_t SET v = v WHERE id = "+ids[2])
	exec(t, c, "COMMIT")

	var atDecision []string // per worker: its prepared parts, and whether lock 42 was free
	srv.SetDecideHooks(nil, func(base string) {
		atDecision = atDecision[:0]
		for _, w := range workers {
			atDecision = append(atDecision, queryString(t, w, "SELECT count(*)::text FROM pg_prepared_xacts WHERE starts_with(gid, $1)", base+"_")+
				" "+queryString(t, w, "SELECT pg_try_advisory_xact_lock(42)::text"))
		}
	})
	defer srv.SetDecideHooks(nil, nil)
	read := func(i int) string { return "SELECT v FROM rp_t WHERE id = " + ids[i] }
	write := func(i int, v int) string { return "UPDATE rp_t SET v = " + strconv.Itoa(v) + " WHERE id = " + ids[i] }
	for _, tc := range []struct {
		name  string
		stmts []string
		want  [3]string // at the decision, per worker: parts prepared, lock 42 free
		v     string    // v of the three ids after
	}{
		{"a plain reader", []string{write(0, 1), write(1, 1), read(2)}, [3]string{"1 true", "0 true", "0 true"}, "1 1 0"},
		{"a reader with a row lock", []string{write(0, 2), write(1, 2), read(2) + " FOR UPDATE"}, [3]string{"1 true", "0 true", "1 true"}, "2 2 0"},
		{"a reader with an advisory lock", []string{write(0, 3), write(1, 3), "SELECT pg_advisory_xact_lock(42), v FROM rp_t WHERE id = " + ids[2]},
			[3]string{"1 true", "0 true", "1 false"}, "3 3 0"},
		{"the default node reads", []string{read(0), write(1, 4), write(2, 4)}, [3]string{"1 true", "0 true", "0 true"}, "3 4 4"},
	} {
		atDecision = nil
		exec(t, c, "BEGIN")
		for _, s := range tc.stmts {
			exec(t, c, s)
		}
		exec(t, c, "COMMIT")
		if tc.name == "the default node reads" {
			// The second worker keeps the record; the third is prepared.
			tc.want[2] = "1 true"
		}
		if len(atDecision) != 3 || [3]string(atDecision) != tc.want {
			t.Errorf("%s: at the commit decision (prepared parts, lock free) per worker %q, want %q", tc.name, atDecision, tc.want)
		}
		if got := queryString(t, c, "SELECT string_agg(v::text, ' ' ORDER BY array_position(ARRAY["+ids[0]+", "+ids[1]+", "+ids[2]+"], id)) FROM rp_t WHERE id IN ("+ids[0]+", "+ids[1]+", "+ids[2]+")"); got != tc.v {
			t.Errorf("%s: v %q, want %q", tc.name, got, tc.v)
		}
	}
	// A writer's PREPARE fails (its deferred constraint): nothing commits,
	// the reader included, and nothing stays prepared.
	exec(t, c, "BEGIN")
	exec(t, c, write(0, 9))
	exec(t, c, "INSERT INTO rp_t VALUES ("+ids[0]+", 9)")
	exec(t, c, write(1, 9))
	exec(t, c, read(2))
	if _, err := c.Exec(ctx, "COMMIT", simple); sqlState(err) != "23505" {
		t.Errorf("COMMIT with a deferred duplicate: %s %v, want 23505", sqlState(err), err)
	}
	if got := queryString(t, c, "SELECT count(*)::text || ' ' || sum(v)::text FROM rp_t"); got != "30 11" {
		t.Errorf("after the failed commit: rows and sum %q, want \"30 11\"", got)
	}
	for i, w := range workers {
		if got := queryString(t, w, "SELECT count(*)::text FROM pg_prepared_xacts"); got != "0" {
			t.Errorf("worker %d: %s prepared transactions left", i+1, got)
		}
	}
}
