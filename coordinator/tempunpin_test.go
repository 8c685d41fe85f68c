package coordinator_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestTempObjectsGoneUnpins: a session pinned by temporary objects alone
// is unpinned once its connection has none left (DROP, DISCARD TEMP,
// DISCARD ALL, a block's ON COMMIT DROP or ROLLBACK): multi-shard reads
// run again, as on PostgreSQL (a Django connection kept open that once
// used a temporary table refused them until it reconnected; adversary
// 152). While one is left, or after user code ran, it stays pinned.
func TestTempObjectsGoneUnpins(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	ctx := context.Background()
	setup := connect(t, srv.Addr())
	spanningTable(t, setup, "tu_acc")
	exec(t, setup, `CREATE OR REPLACE FUNCTION tu_fset() RETURNS text LANGUAGE plpgsql AS $$ DECLARE k text := 'app.tu'; BEGIN RETURN set_config(k, 'x', false); END $$`)
	t.Cleanup(func() { _, _ = setup.Exec(context.Background(), "DROP FUNCTION IF EXISTS tu_fset()") })
	count := "SELECT count(*) FROM tu_acc"
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		for _, end := range [][]string{
			{"DROP TABLE tu_tmp"},
			{"DISCARD TEMP"},
			{"DISCARD ALL"},
			{"BEGIN", "CREATE TEMP TABLE tu_tmp2 (v int) ON COMMIT DROP", "COMMIT"},
			{"BEGIN", "CREATE TEMP TABLE tu_tmp2 (v int)", "ROLLBACK"},
		} {
			c := connect(t, srv.Addr())
			exec(t, c, "CREATE TEMP TABLE tu_tmp (v int)", mode)
			exec(t, c, "INSERT INTO tu_tmp VALUES (1)", mode)
			if _, err := c.Exec(ctx, count, mode); sqlState(err) != "0A000" {
				t.Errorf("%v %q: a multi-shard read while a temporary table is left: %v, want 0A000", mode, end, err)
			}
			if end[0] == "BEGIN" {
				exec(t, c, "DROP TABLE tu_tmp", mode)
			}
			for _, s := range end {
				exec(t, c, s, mode)
			}
			if got := queryString(t, c, count, mode); got != "100" {
				t.Errorf("%v %q: a multi-shard read after: %s, want 100", mode, end, got)
			}
			if got := queryString(t, c, "SELECT (to_regclass('pg_temp.tu_tmp') IS NULL)::text", mode); got != "true" {
				t.Errorf("%v %q: the temporary table is still there: %s", mode, end, got)
			}
			c.Close(ctx)
		}
		// Two made, one dropped: still pinned. User code ran: still
		// pinned after the drop.
		c := connect(t, srv.Addr())
		exec(t, c, "CREATE TEMP TABLE tu_a (v int)", mode)
		exec(t, c, "CREATE TEMP TABLE tu_b (v int)", mode)
		exec(t, c, "DROP TABLE tu_a", mode)
		if _, err := c.Exec(ctx, count, mode); sqlState(err) != "0A000" {
			t.Errorf("%v: one temporary table left: %v, want 0A000", mode, err)
		}
		exec(t, c, "SELECT tu_fset()", mode)
		exec(t, c, "DROP TABLE tu_b", mode)
		if _, err := c.Exec(ctx, count, mode); sqlState(err) != "0A000" {
			t.Errorf("%v: after user code changed a setting the session does not follow: %v, want 0A000", mode, err)
		}
		c.Close(ctx)
	}
}
