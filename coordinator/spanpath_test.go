package coordinator_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestSearchPathSetOnceSpanning: a SET LOCAL search_path made once a block
// spans both workers names another schema's table first: a statement
// naming the table without its schema never reads the distributed table
// (the names were resolved on the parked connection to the default node,
// which had not run the SET: the distributed table's row where PostgreSQL
// reads the other schema's), in either order of the workers.
func TestSearchPathSetOnceSpanning(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	ctx := context.Background()
	setup := connect(t, srv.Addr())
	k1, k2 := spanningTable(t, setup, "spp_acc")
	for _, s := range []string{
		"DROP SCHEMA IF EXISTS spp_other CASCADE",
		"CREATE SCHEMA spp_other",
		"CREATE TABLE spp_other.spp_acc (aid bigint, n int)",
		"INSERT INTO spp_other.spp_acc SELECT g, -1 FROM generate_series(1, 100) g",
	} {
		exec(t, setup, s)
	}
	t.Cleanup(func() { _, _ = setup.Exec(context.Background(), "DROP SCHEMA IF EXISTS spp_other CASCADE") })
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		for _, order := range [][2]int{{k1, k2}, {k2, k1}} {
			c := connect(t, srv.Addr())
			exec(t, c, "BEGIN", mode)
			for _, k := range order {
				if got := queryString(t, c, "SELECT n::text FROM spp_acc WHERE aid = $1", mode, k); got != "100" {
					t.Fatalf("%v: before the SET: %s", mode, got)
				}
			}
			exec(t, c, "SET LOCAL search_path = spp_other, public", mode)
			for _, k := range []int{order[1], order[0]} {
				var n int
				err := c.QueryRow(ctx, "SELECT n FROM spp_acc WHERE aid = $1", mode, k).Scan(&n)
				if err == nil && n != -1 || err != nil && sqlState(err) != "0A000" {
					t.Errorf("%v %v: key %d after SET LOCAL search_path: n = %d, %v; want spp_other's -1 or 0A000", mode, order, k, n, err)
				}
				if err != nil {
					break // (the block failed)
				}
			}
			exec(t, c, "ROLLBACK", mode)
			c.Close(ctx)
		}
	}
}
