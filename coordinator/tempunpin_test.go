package coordinator_test

import (
	"context"
	"testing"
	"time"

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
		// Temporary objects that are not relations keep it pinned
		// (adversary 156: an operator family in pg_temp unpinned it, and
		// the next client of the connection saw it); gone, it is not.
		for _, obj := range [][2]string{
			{"CREATE OPERATOR FAMILY pg_temp.tu_fam USING btree", "DROP OPERATOR FAMILY pg_temp.tu_fam USING btree"},
			{"CREATE CONVERSION pg_temp.tu_conv FOR 'LATIN1' TO 'UTF8' FROM iso8859_1_to_utf8", "DROP CONVERSION pg_temp.tu_conv"},
		} {
			c := connect(t, srv.Addr())
			exec(t, c, obj[0], mode)
			exec(t, c, "CREATE TEMP TABLE tu_x (v int)", mode)
			exec(t, c, "DROP TABLE tu_x", mode)
			if _, err := c.Exec(ctx, count, mode); sqlState(err) != "0A000" {
				t.Errorf("%v: %s left: %v, want 0A000", mode, obj[0], err)
			}
			exec(t, c, obj[1], mode)
			if got := queryString(t, c, count, mode); got != "100" {
				t.Errorf("%v: after %s: %s, want 100", mode, obj[1], got)
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

// TestRefusedTempObjectInBlock: a temporary function or view over a
// distributed table, refused in a transaction block (0A000), pins nothing:
// the block's ROLLBACK ends it and multi-shard reads run after (adversary
// 154: ROLLBACK and every statement after got 25P02 until reconnect, and a
// temporary table made in a block rolled back kept the session pinned).
func TestRefusedTempObjectInBlock(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	ctx := context.Background()
	setup := connect(t, srv.Addr())
	spanningTable(t, setup, "rt_acc")
	for _, extended := range []bool{false, true} {
		for _, s := range []string{
			"CREATE FUNCTION pg_temp.rt_f() RETURNS bigint AS $$ SELECT count(*) FROM rt_acc $$ LANGUAGE sql",
			"CREATE TEMP VIEW rt_v AS SELECT * FROM rt_acc",
			"CREATE TEMP TABLE rt_t (v int)",
		} {
			c := connect(t, srv.Addr())
			r := txnRunner{t: t, c: c, extended: extended}
			r.must("BEGIN")
			if _, err := r.run(s); err != nil && sqlState(err) != "0A000" {
				t.Errorf("%s: %s: %v, want it run or 0A000", r.name(), s, err)
			}
			if _, err := r.run("ROLLBACK"); err != nil {
				t.Errorf("%s: %s: ROLLBACK: %v", r.name(), s, err)
			}
			if got := queryString(t, c, "SELECT count(*)::text FROM rt_acc"); got != "100" {
				t.Errorf("%s: %s: a multi-shard read after the block: %s, want 100", r.name(), s, got)
			}
			c.Close(ctx)
		}
	}
}

// TestUnlistenUnpins: a session pinned by LISTEN (and temporary objects)
// alone is unpinned once its connection listens to no channel and holds
// no temporary object: multi-shard reads run again, as on PostgreSQL
// (adversary 154: after UNLISTEN * they were refused until reconnect).
func TestUnlistenUnpins(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	ctx := context.Background()
	setup := connect(t, srv.Addr())
	spanningTable(t, setup, "ul_acc")
	count := "SELECT count(*) FROM ul_acc"
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		c := connect(t, srv.Addr())
		exec(t, c, "LISTEN ul_a", mode)
		exec(t, c, "LISTEN ul_b", mode)
		exec(t, c, "CREATE TEMP TABLE ul_t (v int)", mode)
		for _, s := range []string{"UNLISTEN ul_a", "DROP TABLE ul_t"} {
			exec(t, c, s, mode)
			if _, err := c.Exec(ctx, count, mode); sqlState(err) != "0A000" {
				t.Errorf("%v: after %s, still listening to ul_b: %v, want 0A000", mode, s, err)
			}
		}
		// Still pinned: a notification reaches it.
		exec(t, setup, "NOTIFY ul_b, 'hi'")
		exec(t, c, "SELECT 1", mode)
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		n, err := c.WaitForNotification(wctx)
		cancel()
		if err != nil || n.Channel != "ul_b" || n.Payload != "hi" {
			t.Errorf("%v: notification: %+v, %v", mode, n, err)
		}
		exec(t, c, "UNLISTEN *", mode)
		if got := queryString(t, c, count, mode); got != "100" {
			t.Errorf("%v: after UNLISTEN *: %s, want 100", mode, got)
		}
		c.Close(ctx)
	}
}
