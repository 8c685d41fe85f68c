package coordinator_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestDropTableInTransactionBlock: DROP TABLE of distributed and reference
// tables inside a transaction block, as migration tools and psycopg2's
// implicit blocks send it. COMMIT removes them everywhere at once (the
// shells, every worker's shards, the catalog); ROLLBACK keeps them with
// their rows; within the block the tables are gone (42P01), and a table of
// the same name made again there is the plain table it is, before and
// after the COMMIT. Refused (0A000): distributing such a table in the same
// block, and a DROP after a SAVEPOINT, since a ROLLBACK TO would bring the
// table back on the workers only. Both protocols.
func TestDropTableInTransactionBlock(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	setup := func() {
		t.Helper()
		exec(t, c, "DROP TABLE IF EXISTS dt_a, dt_b, dt_r", simple)
		exec(t, c, "CREATE TABLE dt_a (id int PRIMARY KEY, v text)")
		exec(t, c, "CREATE TABLE dt_b (id int PRIMARY KEY, w text)")
		exec(t, c, "CREATE TABLE dt_r (id int PRIMARY KEY, name text)")
		exec(t, c, "SELECT create_distributed_table('dt_a', 'id', shard_count => 4)", simple)
		exec(t, c, "SELECT create_distributed_table('dt_b', 'id', colocate_with => 'dt_a')", simple)
		exec(t, c, "SELECT create_reference_table('dt_r')", simple)
		exec(t, c, "INSERT INTO dt_a SELECT g, 'a' || g FROM generate_series(1, 40) g", simple)
		exec(t, c, "INSERT INTO dt_b SELECT g, 'b' || g FROM generate_series(1, 40) g", simple)
		exec(t, c, "INSERT INTO dt_r VALUES (1, 'one'), (2, 'two')", simple)
	}
	exec(t, c, "CREATE SCHEMA IF NOT EXISTS dt_s", simple)
	t.Cleanup(func() {
		_, _ = c.Exec(context.Background(), "DROP TABLE IF EXISTS dt_a, dt_b, dt_r, dt_s.dt_a", simple)
		_, _ = c.Exec(context.Background(), "DROP SCHEMA IF EXISTS dt_s", simple)
	})
	// shards counts the shard tables of table on every worker.
	shards := func(table string) int {
		t.Helper()
		n := 0
		for _, s := range cl.Servers {
			w := connect(t, s.Addr())
			var k int
			if err := w.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_tables
				WHERE schemaname = 'pgfleet_shards' AND tablename ~ ('^' || $1 || '_[0-9]+$')`, table).Scan(&k); err != nil {
				t.Fatal(err)
			}
			n += k
			_ = w.Close(ctx)
		}
		return n
	}
	catalogued := func(table string) string {
		t.Helper()
		return queryString(t, c, "SELECT count(*)::text FROM citus_tables WHERE table_name::text = $1", table)
	}

	for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeExec} {
		setup()
		// Rolled back: everything stays.
		exec(t, c, "BEGIN", mode)
		exec(t, c, "INSERT INTO dt_a VALUES (41, 'a41')", mode)
		exec(t, c, "DROP TABLE dt_a, dt_r", mode)
		exec(t, c, "ROLLBACK", mode)
		if got := queryString(t, c, "SELECT count(*)::text || '/' || sum(id)::text FROM dt_a"); got != "40/820" {
			t.Errorf("%v: dt_a after a rolled back DROP TABLE: %s, want 40/820", mode, got)
		}
		if got := queryString(t, c, "SELECT string_agg(name, ',' ORDER BY id) FROM dt_r"); got != "one,two" {
			t.Errorf("%v: dt_r after a rolled back DROP TABLE: %s", mode, got)
		}
		if n := shards("dt_a"); n != 4 {
			t.Errorf("%v: dt_a's shards after a rolled back DROP TABLE: %d, want 4", mode, n)
		}

		// After a SAVEPOINT: refused, the block failed.
		exec(t, c, "BEGIN", mode)
		exec(t, c, "SAVEPOINT s", mode)
		if _, err := c.Exec(ctx, "DROP TABLE dt_b", mode); sqlState(err) != "0A000" {
			t.Errorf("%v: DROP TABLE after a SAVEPOINT: %v, want 0A000", mode, err)
		}
		exec(t, c, "ROLLBACK", mode)

		// Committed, with a write on both workers and the same DROP TABLE
		// IF EXISTS twice; a plain table of the same name made after it.
		exec(t, c, "BEGIN", mode)
		exec(t, c, "UPDATE dt_b SET w = 'x' WHERE id IN (1, 2, 3, 4, 5, 6, 7, 8)", mode)
		exec(t, c, "DROP TABLE IF EXISTS dt_a, dt_r", mode)
		// The block sees the tables gone, as PostgreSQL's would.
		if _, err := c.Exec(ctx, "SELECT count(*) FROM dt_a", mode); sqlState(err) != "42P01" {
			t.Errorf("%v: reading a table dropped in the block: %v, want 42P01", mode, err)
		}
		exec(t, c, "ROLLBACK", mode)
		// Dropped and made again as a plain table in one block (a
		// migration's, psycopg2's); distributing the new one there waits
		// for the COMMIT.
		exec(t, c, "BEGIN", mode)
		exec(t, c, "UPDATE dt_b SET w = 'x' WHERE id IN (1, 2, 3, 4, 5, 6, 7, 8)", mode)
		exec(t, c, "DROP TABLE IF EXISTS dt_a, dt_r", mode)
		exec(t, c, "DROP TABLE IF EXISTS dt_a", mode)
		exec(t, c, "CREATE TABLE dt_a (k int, note text)", mode)
		exec(t, c, "INSERT INTO dt_a VALUES (1, 'plain')", mode)
		if got := queryString(t, c, "SELECT string_agg(note, ',') FROM dt_a"); got != "plain" {
			t.Errorf("%v: the plain dt_a in the block: %q", mode, got)
		}
		if got := queryString(t, c, "SELECT count(*)::text FROM dt_a JOIN dt_b ON dt_b.id = dt_a.k", simple); got != "1" {
			t.Errorf("%v: the plain dt_a joined with dt_b in the block: %s, want 1", mode, got)
		}
		// A view over the plain one is a view over a plain table.
		exec(t, c, "CREATE VIEW dt_av AS SELECT note FROM dt_a", mode)
		if got := queryString(t, c, "SELECT string_agg(note, ',') FROM dt_av"); got != "plain" {
			t.Errorf("%v: a view over the plain dt_a in the block: %q", mode, got)
		}
		exec(t, c, "DROP VIEW dt_av", mode)
		// Another schema's table of that name may be distributed there.
		exec(t, c, "CREATE TABLE dt_s.dt_a (k int PRIMARY KEY)", mode)
		exec(t, c, "SELECT create_distributed_table('dt_s.dt_a', 'k', shard_count => 2)", simple)
		exec(t, c, "SAVEPOINT s", mode)
		if _, err := c.Exec(ctx, "SELECT create_distributed_table('dt_a', 'k')", simple); sqlState(err) != "0A000" {
			t.Errorf("%v: distributing a table of a dropped name in the block: %v, want 0A000", mode, err)
		}
		exec(t, c, "ROLLBACK TO SAVEPOINT s", mode)
		exec(t, c, "COMMIT", mode)
		if got := catalogued("dt_s.dt_a"); got != "1" {
			t.Errorf("%v: dt_s.dt_a in citus_tables: %s, want 1", mode, got)
		}
		exec(t, c, "DROP TABLE dt_s.dt_a", simple) // (its shards are dt_a_<id> too)
		for _, tb := range []string{"dt_a", "dt_r"} {
			if n := shards(tb); n != 0 {
				t.Errorf("%v: %s's shards after the COMMIT: %d, want 0", mode, tb, n)
			}
			if got := catalogued(tb); got != "0" {
				t.Errorf("%v: %s in citus_tables after the COMMIT: %s, want 0", mode, tb, got)
			}
		}
		if got := queryString(t, c, "SELECT count(*)::text || ' ' || string_agg(note, ',') FROM dt_a"); got != "1 plain" {
			t.Errorf("%v: the plain dt_a made in the block: %s, want 1 plain", mode, got)
		}
		if got := queryString(t, c, "SELECT count(*) FILTER (WHERE w = 'x')::text || '/' || count(*)::text FROM dt_b"); got != "8/40" {
			t.Errorf("%v: dt_b after the block: %s, want 8/40", mode, got)
		}
		if got := catalogued("dt_b"); got != "1" {
			t.Errorf("%v: dt_b in citus_tables: %s, want 1", mode, got)
		}
		// Another session of another coordinator... the same one here: a
		// new session sees the catalog without them at once.
		other := connect(t, srv.Addr())
		if _, err := other.Exec(ctx, "SELECT * FROM dt_r", simple); sqlState(err) != "42P01" {
			t.Errorf("%v: another session's read of the dropped reference table: %v, want 42P01", mode, err)
		}
		_ = other.Close(ctx)
		exec(t, c, "DROP TABLE dt_a", simple)
	}
	// No prepared transaction is left.
	for _, s := range cl.Servers {
		w := connect(t, s.Addr())
		if got := queryString(t, w, "SELECT count(*)::text FROM pg_prepared_xacts"); got != "0" {
			t.Errorf("worker %s: %s prepared transactions left", s.Addr(), got)
		}
		_ = w.Close(ctx)
	}
}
