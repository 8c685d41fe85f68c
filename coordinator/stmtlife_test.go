package coordinator_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestStatementOutlivesMissingShard: a prepared statement whose shard
// statement a worker cannot prepare for a while (its shard table missing,
// as during a move) fails while it is missing and works again after, as a
// PostgreSQL statement does when its table goes and comes back. Found by
// an adversary: a statement prepared before its table was distributed lost
// the client's statement at the first such failure, and every later Bind
// got 26000 for good.
func TestStatementOutlivesMissingShard(t *testing.T) {
	cl := pgtest.Shared(t)
	a := pgtest.Coordinator(t, cl, nil)
	b := pgtest.Coordinator(t, cl, poolSize(16))
	ctx := context.Background()
	ca := connect(t, a.Addr())
	testTable(t, ca, "sl_t", "(id int PRIMARY KEY, v int)", "SELECT create_distributed_table('sl_t', 'id')")
	exec(t, ca, "INSERT INTO sl_t SELECT g, g FROM generate_series(1, 100) g", pgx.QueryExecModeSimpleProtocol)
	sameCatalog(t, b, a)
	c := connect(t, b.Addr())
	const upd = "UPDATE sl_t SET v = $2 WHERE id = $1"
	for id := 10; id < 14; id++ {
		if _, err := c.Exec(ctx, upd, id, id); err != nil { // pgx prepares and caches it
			t.Fatal(err)
		}
	}
	// The second worker's shards go away for a while.
	w := connect(t, cl.Servers[1].Addr())
	rows, err := w.Query(ctx, "SELECT tablename FROM pg_tables WHERE tablename ~ '^sl_t_[0-9]+$'")
	if err != nil {
		t.Fatal(err)
	}
	shards, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(shards) == 0 {
		t.Fatalf("shards on the second worker: %v, %v", shards, err)
	}
	for _, s := range shards {
		exec(t, w, "ALTER TABLE pgfleet_shards."+s+" RENAME TO "+s+"_away")
	}
	failed := 0
	for id := 10; id < 20; id++ {
		if _, err := c.Exec(ctx, upd, id, id); err != nil {
			if code := sqlState(err); code != "42P01" && code != "40001" {
				t.Fatalf("id %d while its shard is away: %v, want 42P01 or 40001", id, err)
			}
			failed++
		}
	}
	if failed == 0 {
		t.Fatal("no statement reached a missing shard")
	}
	for _, s := range shards {
		exec(t, w, "ALTER TABLE pgfleet_shards."+s+"_away RENAME TO "+s)
	}
	for id := 10; id < 20; id++ {
		if _, err := c.Exec(ctx, upd, id, id); err != nil {
			t.Fatalf("id %d after the shards came back: %v (26000: the client's statement was lost)", id, err)
		}
	}
}

// TestTxnBeganBeforeDistribution: a REPEATABLE READ transaction whose
// snapshot predates a table's distribution gets 40001 for statements on
// it (its snapshot would not see the rows in their shards: an adversary
// saw routed reads find no row), keeps working on tables that did not
// move, and a new transaction sees every row. After the table is
// distributed anew (undistributed and distributed again), only shards on
// the worker where the transaction took its snapshot are refused; on
// another worker its first statement takes a snapshot that sees the rows
// (snapshotCheck).
func TestTxnBeganBeforeDistribution(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	c, x := connect(t, srv.Addr()), connect(t, srv.Addr())
	testTable(t, c, "tb_other", "(id int PRIMARY KEY, v int)", "SELECT create_distributed_table('tb_other', 'id', shard_count => 4)")
	exec(t, c, "INSERT INTO tb_other SELECT g, g FROM generate_series(1, 20) g", simple)
	_, _ = c.Exec(ctx, "SELECT undistribute_table('tb_rr')", simple)
	exec(t, c, "DROP TABLE IF EXISTS tb_rr", simple)
	exec(t, c, "CREATE TABLE tb_rr (id int PRIMARY KEY, v int)", simple)
	t.Cleanup(func() {
		_, _ = c.Exec(context.Background(), "SELECT undistribute_table('tb_rr')", simple)
		_, _ = c.Exec(context.Background(), "DROP TABLE IF EXISTS tb_rr", simple)
	})
	exec(t, c, "INSERT INTO tb_rr SELECT g, g FROM generate_series(1, 20) g", simple)
	w := connect(t, cl.Servers[0].Addr())
	portOf := func(id int) int {
		t.Helper()
		var port int
		if err := w.QueryRow(ctx, `SELECT n.port FROM pgfleet.shards s JOIN pgfleet.placements p USING (shardid) JOIN pgfleet.nodes n USING (nodeid)
			WHERE s.table_name = 'public.tb_rr' AND hashint4($1) BETWEEN s.min_hash AND s.max_hash`, id).Scan(&port); err != nil {
			t.Fatal(err)
		}
		return port
	}
	var txPort int // the worker of the transaction's snapshot
	snapshot := func() {
		t.Helper()
		exec(t, x, "BEGIN ISOLATION LEVEL REPEATABLE READ", simple)
		if err := x.QueryRow(ctx, "SELECT inet_server_port()", simple).Scan(&txPort); err != nil {
			t.Fatal(err)
		}
	}
	refused, read := 0, 0
	for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeCacheStatement} {
		snapshot()
		exec(t, c, "SELECT create_distributed_table('tb_rr', 'id', shard_count => 4)", simple)
		for id := 1; id <= 20; id++ {
			var v int
			err := x.QueryRow(ctx, "SELECT v FROM tb_rr WHERE id = $1", mode, id).Scan(&v)
			switch {
			case id == 1 || portOf(id) == txPort:
				if sqlState(err) != "40001" {
					t.Fatalf("mode %v, id %d in a transaction older than the distribution: %d, %v; want 40001", mode, id, v, err)
				}
				refused++
			case err != nil || v != id:
				t.Fatalf("mode %v, id %d in a transaction older than the distribution, on a worker it had not reached: %d, %v; want %d", mode, id, v, err, id)
			default:
				read++
			}
			exec(t, x, "ROLLBACK", simple)
			snapshot()
			// A new transaction sees the row; a table that did not move
			// is read as before.
			if err := x.QueryRow(ctx, "SELECT v FROM tb_rr WHERE id = $1", mode, id).Scan(&v); err != nil || v != id {
				t.Fatalf("mode %v, id %d in a new transaction: %d, %v", mode, id, v, err)
			}
			if err := x.QueryRow(ctx, "SELECT v FROM tb_other WHERE id = $1", mode, id).Scan(&v); err != nil || v != id {
				t.Fatalf("mode %v, id %d of a table that did not move: %d, %v", mode, id, v, err)
			}
			exec(t, x, "COMMIT", simple)
			if id < 20 {
				snapshot()
				exec(t, c, "SELECT undistribute_table('tb_rr')", simple)
				exec(t, c, "SELECT create_distributed_table('tb_rr', 'id', shard_count => 4)", simple)
			}
		}
		exec(t, c, "SELECT undistribute_table('tb_rr')", simple)
	}
	if refused < 3 || read == 0 {
		t.Errorf("%d statements refused and %d read: want both kinds", refused, read)
	}
}

// sameCatalog waits until b holds a's catalog: coordinators without gossip
// reload it by polling (every 500 ms), and until then b sends statements on
// a table a just distributed to its empty table on the default node (writes
// get 40001 there).
func sameCatalog(t *testing.T, b, a *coordinator.Server) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for b.CatalogVersion() < a.CatalogVersion() {
		if time.Now().After(deadline) {
			t.Fatal("the second coordinator did not load the catalog")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
