package coordinator_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestOwnNamesBeforeFunctionSettings: a statement calling a function that
// changes settings pgfleet cannot follow (set_config of a name held in a
// variable) names its tables as PostgreSQL parses it, before the function
// runs: an unqualified distributed table is routed under the settings
// before the statement (it was refused, 0A000, "may have changed earlier in
// this pipeline"). After it, a name the function's search_path gives to
// another schema's table is never read as the distributed one.
func TestOwnNamesBeforeFunctionSettings(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	ctx := context.Background()
	setup := connect(t, srv.Addr())
	k1, _ := spanningTable(t, setup, "nb_acc")
	for _, s := range []string{
		`DROP SCHEMA IF EXISTS nb_other CASCADE`,
		`CREATE SCHEMA nb_other`,
		`CREATE TABLE nb_other.nb_acc (aid bigint PRIMARY KEY, n int)`,
		`INSERT INTO nb_other.nb_acc VALUES (1, -1), (2, -1)`,
		`CREATE OR REPLACE FUNCTION nb_wm(x bigint) RETURNS bigint LANGUAGE plpgsql AS $$
		 DECLARE k text := 'work_mem'; BEGIN PERFORM set_config(k, '8MB', false); RETURN x; END $$`,
		`CREATE OR REPLACE FUNCTION nb_sp(x bigint) RETURNS bigint LANGUAGE plpgsql AS $$
		 DECLARE k text := 'search_path'; BEGIN PERFORM set_config(k, 'nb_other, public', false); RETURN x; END $$`,
	} {
		exec(t, setup, s)
	}
	t.Cleanup(func() {
		for _, s := range []string{`DROP FUNCTION IF EXISTS nb_wm(bigint)`, `DROP FUNCTION IF EXISTS nb_sp(bigint)`, `DROP SCHEMA IF EXISTS nb_other CASCADE`} {
			_, _ = setup.Exec(context.Background(), s)
		}
	})
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		c := connect(t, srv.Addr())
		var got, n int64
		if err := c.QueryRow(ctx, "SELECT nb_wm(aid), n FROM nb_acc WHERE aid = $1", mode, k1).Scan(&got, &n); err != nil {
			t.Fatalf("%v: a routed read calling a function that sets work_mem: %v", mode, err)
		}
		if got != int64(k1) || n != 100 {
			t.Errorf("%v: read %d, %d; want %d, 100", mode, got, n, k1)
		}
		var wm string
		if err := c.QueryRow(ctx, "SHOW work_mem", mode).Scan(&wm); err != nil || wm != "8MB" {
			t.Errorf("%v: work_mem after it: %q, %v; want 8MB", mode, wm, err)
		}
		c.Close(ctx)

		c = connect(t, srv.Addr())
		if err := c.QueryRow(ctx, "SELECT nb_sp(aid), n FROM nb_acc WHERE aid = $1", mode, k1).Scan(&got, &n); err != nil {
			t.Fatalf("%v: a routed read calling a function that sets search_path: %v", mode, err)
		}
		if n != 100 {
			t.Errorf("%v: read n = %d, want the distributed table's 100 (the name resolves before the function runs)", mode, n)
		}
		// Now nb_acc is nb_other's: its row, or a refusal, never public's.
		err := c.QueryRow(ctx, "SELECT n FROM nb_acc WHERE aid = $1", mode, k1).Scan(&n)
		if err == nil && n != -1 || err != nil && sqlState(err) != "0A000" {
			t.Errorf("%v: read after the function set search_path: n = %d, %v; want nb_other's -1 or 0A000", mode, n, err)
		}
		c.Close(ctx)
	}
}
