package coordinator_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestFunctionReadingLocalTableOverShards: a function that reads a local
// table (one only the default node has), called over a distributed
// table's rows, gives PostgreSQL's answer where the rows' shard is on the
// default node and 0A000 elsewhere, never 42P01 "relation does not exist"
// for a table that exists. Before, the worker's 42P01 reached the client
// (TestSequenceStateInUserCode met it after a shard move).
func TestFunctionReadingLocalTableOverShards(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	c := connect(t, srv.Addr())
	drop := "DROP FUNCTION IF EXISTS dfo_f(int); DROP FUNCTION IF EXISTS dfo_g(int); DROP FUNCTION IF EXISTS dfo_set(); DROP FUNCTION IF EXISTS dfo_lf(dfo_l); DROP FUNCTION IF EXISTS dfo_lb(bigint, dfo_l); DROP TABLE IF EXISTS dfo_l"
	exec(t, c, drop, simple)
	t.Cleanup(func() { _, _ = c.Exec(ctx, drop, simple) })
	testTable(t, c, "dfo_d", "(id int PRIMARY KEY)", "SELECT create_distributed_table('dfo_d', 'id', shard_count => 4)")
	exec(t, c, "INSERT INTO dfo_d SELECT generate_series(1, 20)", simple)
	exec(t, c, "CREATE TABLE dfo_l (k int, v text)", simple)
	exec(t, c, "INSERT INTO dfo_l SELECT k, 'v' || k FROM generate_series(1, 20) k", simple)
	exec(t, c, "CREATE FUNCTION dfo_f(int) RETURNS text LANGUAGE sql STABLE AS 'SELECT v FROM dfo_l WHERE k = $1'", simple)
	exec(t, c, "CREATE FUNCTION dfo_g(int) RETURNS text LANGUAGE plpgsql STABLE AS 'BEGIN RETURN (SELECT v FROM dfo_nowhere WHERE k = $1); END'", simple)
	exec(t, c, "CREATE FUNCTION dfo_set() RETURNS SETOF dfo_l LANGUAGE sql STABLE AS 'SELECT * FROM dfo_l'", simple)
	exec(t, c, "CREATE FUNCTION dfo_lf(dfo_l) RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT 1'", simple)
	exec(t, c, "CREATE FUNCTION dfo_lb(x bigint, r dfo_l DEFAULT NULL) RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT x::int'", simple)
	keys := keysByWorker(t, c, "dfo_d", 20)
	defaultPort := cl.Servers[0].Addr()[strings.LastIndexByte(cl.Servers[0].Addr(), ':')+1:]
	if _, ok := keys[defaultPort]; !ok {
		t.Fatalf("no key on the default node (port %s): %v", defaultPort, keys)
	}
	for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeExec, pgx.QueryExecModeCacheStatement} {
		for port, k := range keys {
			var got string
			err := c.QueryRow(ctx, "SELECT dfo_f(id) FROM dfo_d WHERE id = $1", mode, k).Scan(&got)
			switch {
			case port == defaultPort && (err != nil || got != "v"+strconv.Itoa(k)):
				t.Errorf("%v: key %d on the default node: %q, %v; want %q", mode, k, got, err, "v"+strconv.Itoa(k))
			case port != defaultPort && err == nil && got != "v"+strconv.Itoa(k):
				t.Errorf("%v: key %d on worker port %s: %q; want %q or 0A000", mode, k, port, got, "v"+strconv.Itoa(k))
			case port != defaultPort && err != nil && sqlState(err) != "0A000":
				t.Errorf("%v: key %d on worker port %s: %v; want its row or 0A000", mode, k, port, err)
			}
		}
		// Over every shard: the rows, or 0A000.
		rows, err := c.Query(ctx, "SELECT id, dfo_f(id) FROM dfo_d ORDER BY id", mode)
		n := 0
		if err == nil {
			for rows.Next() {
				var id int
				var v string
				if err := rows.Scan(&id, &v); err == nil && v != "v"+strconv.Itoa(id) {
					t.Errorf("%v: multi-shard row %d: %q", mode, id, v)
				}
				n++
			}
			err = rows.Err()
		}
		if err == nil && n != 20 || err != nil && sqlState(err) != "0A000" {
			t.Errorf("%v: multi-shard: %d rows, %v; want 20 rows or 0A000", mode, n, err)
		}
		// A relation that exists nowhere keeps PostgreSQL's 42P01
		// (adversary: it was 0A000 saying the default node had it).
		if _, err := c.Exec(ctx, "SELECT dfo_g(id) FROM dfo_d", mode); sqlState(err) != "42P01" {
			t.Errorf("%v: a function reading no relation at all over shards: %v, want 42P01", mode, err)
		}
		// A function call whose arguments no function takes stays
		// PostgreSQL's 42883 on every worker (adversary: 0A000 where
		// the shard was not on the default node).
		for _, k := range keys {
			for _, q := range []string{"SELECT length(id) FROM dfo_d WHERE id = $1", "SELECT dfo_lf(id) FROM dfo_d WHERE id = $1"} {
				if _, err := c.Exec(ctx, q, mode, k); sqlState(err) != "42883" {
					t.Errorf("%v: %s on key %d: %v, want 42883", mode, q, k, err)
				}
			}
		}
		// A default-node-only function the call fits by an implicit cast
		// and a default: its value or 0A000, not 42883 (adversary).
		for port, k := range keys {
			var got int
			err := c.QueryRow(ctx, "SELECT dfo_lb(id) FROM dfo_d WHERE id = $1", mode, k).Scan(&got)
			if err == nil && got != k || err != nil && sqlState(err) != "0A000" || err != nil && port == defaultPort {
				t.Errorf("%v: dfo_lb(integer) on key %d (port %s): %d, %v; want %d, or 0A000 off the default node", mode, k, port, got, err, k)
			}
		}
		// A function the default node has alone (its result is a local
		// table's row type): PostgreSQL's rows or 0A000, not 42883.
		rows, err = c.Query(ctx, "SELECT count(*) FROM dfo_set() s JOIN dfo_d d ON d.id = s.k", mode)
		if err == nil {
			for rows.Next() {
				var k int
				if err := rows.Scan(&k); err == nil && k != 20 {
					t.Errorf("%v: join with dfo_set(): %d, want 20", mode, k)
				}
			}
			err = rows.Err()
		}
		if err != nil && sqlState(err) != "0A000" {
			t.Errorf("%v: join with a default-node-only function: %v, want 20 or 0A000", mode, err)
		}
	}
}
