package coordinator_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestMaintenanceOnShards: VACUUM and ANALYZE of distributed and reference
// tables reach every shard on every worker, as one table's would (they
// were refused); a bare one reaches every worker; errors, tags and
// transaction blocks are PostgreSQL's.
func TestMaintenanceOnShards(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(8))
	ctx := context.Background()
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	accounts(t, c, "mnt_acc")
	drop := func() { _, _ = c.Exec(ctx, "DROP TABLE IF EXISTS mnt_ref", simple) }
	drop()
	t.Cleanup(drop)
	exec(t, c, "CREATE TABLE mnt_ref (id int PRIMARY KEY, v int)", simple)
	exec(t, c, "SELECT create_reference_table('mnt_ref')", simple)
	exec(t, c, "INSERT INTO mnt_ref SELECT g, g FROM generate_series(1, 10) g", simple)
	// A function that changes session state, anywhere in the database,
	// makes such commands verified; they run on connections of their own
	// and neither fail nor pin (adversary 147).
	exec(t, c, "CREATE OR REPLACE FUNCTION mnt_sc(text) RETURNS text LANGUAGE sql AS $$ SELECT set_config('app.x', $1, false) $$", simple)
	t.Cleanup(func() { _, _ = c.Exec(ctx, "DROP FUNCTION IF EXISTS mnt_sc(text)", simple) })
	k := keyOff(t, c, "mnt_acc", cl.Servers[0].Addr())
	workers := make([]*pgx.Conn, len(cl.Servers))
	for i, s := range cl.Servers {
		workers[i] = connectURL(t, pgtest.URL(s.Addr()))
	}
	// stamps is, on every worker, how many shard tables of the name have
	// had a vacuum (or an analyze) since the given moment, and how many
	// there are.
	stamps := func(name, col, since string) (done, all int) {
		t.Helper()
		for _, w := range workers {
			var d, a int
			if err := w.QueryRow(ctx, "SELECT count(*) FILTER (WHERE "+col+" >= $2::timestamptz), count(*) FROM pg_stat_user_tables WHERE relname ~ ('^' || $1 || '_[0-9]+$')",
				name, since).Scan(&d, &a); err != nil {
				t.Fatal(err)
			}
			done, all = done+d, all+a
		}
		return done, all
	}
	// run runs sql in mode; pgx sends a statement without arguments as a
	// simple query whatever the mode, so the extended protocol's is
	// pgconn's ExecParams (Parse, Bind, Execute, Sync).
	run := func(sql string, mode pgx.QueryExecMode) (string, error) {
		if mode == simple {
			tag, err := c.Exec(ctx, sql, mode)
			return tag.String(), err
		}
		r := c.PgConn().ExecParams(ctx, sql, nil, nil, nil, nil).Read()
		return r.CommandTag.String(), r.Err
	}
	for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeExec} {
		for _, tc := range []struct {
			sql, tag, col string
			tables        []string
		}{
			{"VACUUM mnt_acc", "VACUUM", "last_vacuum", []string{"mnt_acc"}},
			{"VACUUM (ANALYZE, VERBOSE) mnt_acc (n), mnt_ref", "VACUUM", "last_analyze", []string{"mnt_acc", "mnt_ref"}},
			{"ANALYZE mnt_acc", "ANALYZE", "last_analyze", []string{"mnt_acc"}},
			{"ANALYZE public.mnt_ref (v)", "ANALYZE", "last_analyze", []string{"mnt_ref"}},
			{"ANALYZE", "ANALYZE", "last_analyze", []string{"mnt_acc", "mnt_ref"}},
		} {
			since := queryString(t, workers[0], "SELECT clock_timestamp()::text")
			exec(t, c, "DELETE FROM mnt_acc WHERE aid > 95", simple)
			exec(t, c, "INSERT INTO mnt_acc SELECT g, 0 FROM generate_series(96, 100) g", simple)
			tag, err := run(tc.sql, mode)
			if err != nil || tag != tc.tag {
				t.Fatalf("%v: %s: %q, %v", mode, tc.sql, tag, err)
			}
			if _, err := c.Exec(ctx, "SELECT n FROM mnt_acc WHERE aid = $1", mode, k); err != nil {
				t.Fatalf("%v: a read on the second worker after %s: %v", mode, tc.sql, err)
			}
			for _, name := range tc.tables {
				done, all := stamps(name, tc.col, since)
				want := 4
				if name == "mnt_ref" {
					want = len(cl.Servers) // a copy on each worker
				}
				if all != want || done != all {
					t.Errorf("%v: %s: %s of %d of %d shard tables of %s on the workers; want all %d", mode, tc.sql, tc.col, done, all, name, want)
				}
			}
		}
		// PostgreSQL's errors.
		if _, err := run("ANALYZE mnt_acc (nosuch)", mode); sqlState(err) != "42703" {
			t.Errorf("%v: ANALYZE of a column that does not exist: %v, want 42703", mode, err)
		}
		exec(t, c, "BEGIN", mode)
		if _, err := run("VACUUM mnt_acc", mode); sqlState(err) != "25001" {
			t.Errorf("%v: VACUUM in a transaction block: %v, want 25001", mode, err)
		}
		exec(t, c, "ROLLBACK", mode)
		exec(t, c, "BEGIN", mode)
		if _, err := run("ANALYZE mnt_acc", mode); sqlState(err) != "0A000" {
			t.Errorf("%v: ANALYZE of a distributed table in a transaction block: %v, want 0A000", mode, err)
		}
		exec(t, c, "ROLLBACK", mode)
	}
	if got := queryString(t, c, "SELECT count(*)::text FROM mnt_acc"); got != "100" {
		t.Errorf("rows after the runs: %s, want 100", got)
	}
}
