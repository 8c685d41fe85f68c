package coordinator_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestReferenceWriteTakesInWorker: a transaction that runs on one worker
// and then writes a reference table takes the other worker in with the
// write (its BEGIN sent ahead of it, one round trip). In both protocols
// the transaction's mode reaches the worker taken in, the write commits
// or rolls back with the transaction on every copy, and a write that
// fails there fails the transaction as PostgreSQL's does.
func TestReferenceWriteTakesInWorker(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	testTable(t, c, "jp_dist", "(id int PRIMARY KEY, v int)", "SELECT create_distributed_table('jp_dist', 'id', shard_count => 2)")
	testTable(t, c, "jp_ref", "(id int PRIMARY KEY, n int)", "SELECT create_reference_table('jp_ref')")
	exec(t, c, "INSERT INTO jp_dist SELECT g, 0 FROM generate_series(1, 20) g", simple)
	exec(t, c, "INSERT INTO jp_ref SELECT g, 0 FROM generate_series(1, 3) g", simple)
	// A key on each worker (the shard's server port).
	keys := map[string]int{}
	for k := 1; k <= 20 && len(keys) < 2; k++ {
		keys[queryString(t, c, "SELECT inet_server_port()::text FROM jp_dist WHERE id = $1", k)] = k
	}
	if len(keys) != 2 {
		t.Fatalf("keys by worker: %v", keys)
	}
	var on []int
	for _, k := range keys {
		on = append(on, k)
	}
	refCopies := func() []string {
		var out []string
		for _, s := range cl.Servers {
			shard := queryString(t, connect(t, cl.Servers[0].Addr()), "SELECT shardid::text FROM pgfleet.shards WHERE table_name = 'public.jp_ref'")
			out = append(out, queryString(t, connect(t, s.Addr()), "SELECT string_agg(id || ':' || n, ',' ORDER BY id) FROM pgfleet_shards.jp_ref_"+shard))
		}
		return out
	}
	for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeCacheStatement} {
		for _, first := range on { // the transaction starts on each worker in turn
			tx, err := c.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "UPDATE jp_dist SET v = v + 1 WHERE id = $1", mode, first); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "UPDATE jp_ref SET n = n + 1 WHERE id = 1", mode); err != nil {
				t.Fatalf("%v: reference write taking in the other worker: %v", mode, err)
			}
			for _, k := range on {
				var iso string
				if err := tx.QueryRow(ctx, "SELECT current_setting('transaction_isolation') FROM jp_dist WHERE id = $1", mode, k).Scan(&iso); err != nil {
					t.Fatal(err)
				}
				if iso != "repeatable read" {
					t.Errorf("%v: transaction_isolation on the worker of key %d: %s", mode, k, iso)
				}
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatalf("%v: commit: %v", mode, err)
			}

			// A write that fails on the worker taken in.
			before := refCopies()
			tx, err = c.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "UPDATE jp_dist SET v = v + 100 WHERE id = $1", mode, first); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "UPDATE jp_ref SET id = 2 WHERE id = 1", mode); sqlState(err) != "23505" {
				t.Errorf("%v: duplicate key on the worker taken in: %v, want 23505", mode, err)
			}
			if _, err := tx.Exec(ctx, "SELECT 1", mode); sqlState(err) != "25P02" {
				t.Errorf("%v: statement after the failure: %v, want 25P02", mode, err)
			}
			_ = tx.Rollback(ctx)
			if after := refCopies(); after[0] != before[0] || after[1] != before[1] {
				t.Errorf("%v: reference copies after the rolled back transaction: %v, before %v", mode, after, before)
			}
		}
	}
	copies := refCopies()
	if copies[0] != "1:4,2:0,3:0" || copies[1] != copies[0] {
		t.Errorf("reference copies: %v, want 1:4,2:0,3:0 on both", copies)
	}
	if got := queryString(t, c, "SELECT sum(v)::text FROM jp_dist"); got != "4" {
		t.Errorf("distributed rows' sum: %s, want 4 (the failed transactions rolled back)", got)
	}
	for _, s := range cl.Servers {
		if got := queryString(t, connect(t, s.Addr()), "SELECT count(*)::text FROM pg_prepared_xacts"); got != "0" {
			t.Errorf("%s: %s prepared transactions left", s.Addr(), got)
		}
	}
}
