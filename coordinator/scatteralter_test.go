package coordinator_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestScatterAfterAlter: after an ALTER TABLE changes a column's type, a
// multi-shard statement of the extended protocol that the client prepares
// afterwards answers with the new type, as on PostgreSQL, on the
// connection that ran it before and on a new one; one the client prepared
// before fails with PostgreSQL's 0A000 (found by an adversary round: the
// first execution of each statement after the ALTER failed with 0A000,
// its description shared from before).
func TestScatterAfterAlter(t *testing.T) {
	cl := pgtest.Start(t, 2)
	addr := pgtest.Coordinator(t, cl, nil).Addr()
	alterElsewhere(t, cl, addr, addr, "sa", false, false)
}

// TestAlterThroughLaggingCoordinator: an ALTER TABLE sent through a
// coordinator that has not yet learnt (by gossip or its catalog poll) that
// the table was just distributed through another changes its shards too,
// not only the first worker's table (found while testing DDL through a
// second coordinator: the shards kept the old type).
func TestAlterThroughLaggingCoordinator(t *testing.T) {
	cl := pgtest.Start(t, 2)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	c2 := connect(t, pgtest.Coordinator(t, cl, nil).Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	exec(t, c2, "SELECT 1", simple) // c2's coordinator holds the catalog before the distribution
	exec(t, c, "CREATE TABLE la_t (id int PRIMARY KEY, k int); INSERT INTO la_t SELECT g, g FROM generate_series(1, 50) g", simple)
	exec(t, c, "SELECT create_distributed_table('la_t', 'id', shard_count => 4)", simple)
	t.Cleanup(func() { _, _ = c.Exec(ctx, "DROP TABLE IF EXISTS la_t", simple) })
	exec(t, c2, "ALTER TABLE la_t ALTER COLUMN k TYPE int8", simple)
	for i := range cl.Servers {
		w := connect(t, cl.Servers[i].Addr())
		for _, line := range queryStrings(t, w, "SELECT attrelid::regclass::text || ' ' || atttypid::regtype::text FROM pg_attribute WHERE attname = 'k' AND attrelid::regclass::text LIKE '%la_t%'") {
			if !strings.HasSuffix(line, " bigint") {
				t.Errorf("worker %d: %s, want bigint everywhere", i+1, line)
			}
		}
	}
	var sum int64
	if err := c.QueryRow(ctx, "SELECT sum(k) FROM la_t").Scan(&sum); err != nil || sum != 1275 {
		t.Errorf("sum(k) through the first coordinator: %d, %v; want 1275", sum, err)
	}
}
