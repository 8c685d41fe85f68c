package coordinator_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
	deadline := time.Now().Add(10 * time.Second)
	for b.CatalogVersion() != a.CatalogVersion() {
		if time.Now().After(deadline) {
			t.Fatal("the second coordinator did not load the catalog")
		}
		time.Sleep(10 * time.Millisecond)
	}
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
		exec(t, w, "ALTER TABLE "+s+" RENAME TO "+s+"_away")
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
		exec(t, w, "ALTER TABLE "+s+"_away RENAME TO "+s)
	}
	for id := 10; id < 20; id++ {
		if _, err := c.Exec(ctx, upd, id, id); err != nil {
			t.Fatalf("id %d after the shards came back: %v (26000: the client's statement was lost)", id, err)
		}
	}
}
