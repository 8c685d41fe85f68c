package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgcluster"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestPrivilegesFollowTable: a distributed or reference table's shards
// take its owner and privileges, so each role reads and writes it through
// the coordinator as PostgreSQL would let it: the owner whose table a
// superuser distributed (it got 42501 on the shards, which the superuser
// owned), a role granted SELECT and a column's UPDATE before the table was
// distributed, GRANT and REVOKE afterwards (named, and ALL TABLES IN
// SCHEMA), and after a shard moved. Refusals name the table, not a shard.
func TestPrivilegesFollowTable(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	for _, s := range cl.Servers {
		w := connect(t, s.Addr())
		for _, r := range []string{"gp_alice", "gp_bob", "gp_team"} {
			exec(t, w, "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '"+r+"') THEN CREATE ROLE "+r+" LOGIN; END IF; END $$")
		}
		t.Cleanup(func() {
			for _, q := range []string{"DROP OWNED BY gp_alice, gp_bob, gp_team", "DROP ROLE IF EXISTS gp_team", "DROP ROLE IF EXISTS gp_alice", "DROP ROLE IF EXISTS gp_bob"} {
				_, _ = w.Exec(context.Background(), q)
			}
		})
	}
	as := func(role string) *pgx.Conn {
		t.Helper()
		c, err := pgx.Connect(ctx, "postgres://"+role+"@"+srv.Addr()+"/postgres?sslmode=disable")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		return c
	}
	su := connect(t, srv.Addr())
	cleanup := func() {
		for _, q := range []string{"SELECT undistribute_table('gp_t')", "DROP TABLE IF EXISTS gp_t",
			"SELECT undistribute_table('gp_r')", "DROP TABLE IF EXISTS gp_r",
			"SELECT undistribute_table('gp_s.gpt')", "DROP TABLE IF EXISTS gp_s.gpt", "DROP SCHEMA IF EXISTS gp_s", "DROP SCHEMA IF EXISTS gp_ds CASCADE",
			"SELECT undistribute_table('gp_x.gpt')", "DROP TABLE IF EXISTS gp_x.gpt", "DROP SCHEMA IF EXISTS gp_x",
			"REVOKE CREATE ON SCHEMA public FROM gp_alice"} {
			_, _ = su.Exec(context.Background(), q, simple)
		}
	}
	cleanup()
	t.Cleanup(cleanup)
	exec(t, su, "GRANT CREATE ON SCHEMA public TO gp_alice", simple)
	alice, bob := as("gp_alice"), as("gp_bob")
	for _, q := range []string{
		"CREATE TABLE gp_t (id int PRIMARY KEY, v text, secret text)",
		"GRANT SELECT ON gp_t TO gp_bob",
		"GRANT UPDATE (v) ON gp_t TO gp_bob",
		"CREATE TABLE gp_r (id int PRIMARY KEY, n text)",
		"GRANT SELECT ON gp_r TO PUBLIC",
	} {
		exec(t, alice, q, simple)
	}
	// The superuser distributes alice's tables.
	// (Not colocated: the shard moved below would move other tests' too.)
	exec(t, su, "SELECT create_distributed_table('gp_t', 'id', shard_count => 4, colocate_with => 'none')", simple)
	exec(t, su, "SELECT create_reference_table('gp_r')", simple)

	count := func(c *pgx.Conn, sql string) (int, error) {
		var n int
		err := c.QueryRow(ctx, sql, simple).Scan(&n)
		return n, err
	}
	want := func(who string, c *pgx.Conn, sql string, n int) {
		t.Helper()
		got, err := count(c, sql)
		if err != nil || got != n {
			t.Errorf("%s: %s = %d, %v; want %d", who, sql, got, err, n)
		}
	}
	// denied: sql fails with 42501 naming table (as PostgreSQL does:
	// without its schema), not a shard.
	denied := func(who string, c *pgx.Conn, sql, table string) {
		t.Helper()
		_, err := c.Exec(ctx, sql, simple)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "42501" || pe.Message != "permission denied for table "+table {
			t.Errorf("%s: %s: %v, want 42501 permission denied for table %s", who, sql, err, table)
		}
	}

	// The owner, and what the grants made before distributing allow.
	exec(t, alice, "INSERT INTO gp_t SELECT g, 'v' || g, 's' FROM generate_series(1, 10) g", simple)
	exec(t, alice, "INSERT INTO gp_r VALUES (1, 'one'), (2, 'two')", simple)
	want("alice", alice, "SELECT count(*) FROM gp_t", 10)
	want("bob", bob, "SELECT count(*) FROM gp_t", 10)
	want("bob", bob, "SELECT count(*) FROM gp_t WHERE id = 3", 1)
	want("bob", bob, "SELECT count(*) FROM gp_r", 2)
	exec(t, bob, "UPDATE gp_t SET v = 'b' WHERE id = 3", simple)
	denied("bob", bob, "UPDATE gp_t SET secret = 'b' WHERE id = 3", "gp_t")
	denied("bob", bob, "DELETE FROM gp_t WHERE id = 3", "gp_t")
	denied("bob", bob, "INSERT INTO gp_r VALUES (3, 'three')", "gp_r")

	// REVOKE and GRANT afterwards reach the shards.
	exec(t, alice, "REVOKE SELECT ON gp_t FROM gp_bob", simple)
	denied("bob", bob, "SELECT count(*) FROM gp_t", "gp_t")
	denied("bob", bob, "SELECT count(*) FROM gp_t WHERE id = 3", "gp_t")
	// A name without its schema that the session's search_path finds
	// elsewhere is not the distributed table (an adversary's GRANT
	// reached public.gp_t's shards, and an ALTER TABLE added a column to
	// them, for gp_ds.gp_t): refused, as a statement's is.
	for _, q := range []string{"CREATE SCHEMA gp_ds", "CREATE TABLE gp_ds.gp_t (id int)", "SET search_path = gp_ds, public"} {
		exec(t, su, q, simple)
	}
	for _, q := range []string{"GRANT SELECT ON gp_t TO gp_bob", "ALTER TABLE gp_t ADD COLUMN zz int", "CREATE INDEX ON gp_t (id)"} {
		if _, err := su.Exec(ctx, q, simple); sqlState(err) != "0A000" {
			t.Errorf("with search_path gp_ds, public: %s: %v, want 0A000", q, err)
		}
	}
	exec(t, su, "RESET search_path", simple)
	exec(t, su, "DROP SCHEMA gp_ds CASCADE", simple)
	denied("bob", bob, "SELECT count(*) FROM gp_t", "gp_t")
	if got := queryString(t, su, "SELECT count(*)::text FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'gp_t'"); got != "3" {
		t.Errorf("public.gp_t has %s columns, want 3", got)
	}
	exec(t, alice, "GRANT SELECT, DELETE ON gp_t TO gp_bob", simple)
	exec(t, alice, "REVOKE SELECT ON gp_r FROM PUBLIC", simple)
	denied("bob", bob, "SELECT count(*) FROM gp_r", "gp_r")
	exec(t, bob, "DELETE FROM gp_t WHERE id = 10", simple)
	want("bob", bob, "SELECT count(*) FROM gp_t", 9)

	// A grant option would be recorded as bob's on the table: refused.
	if _, err := alice.Exec(ctx, "GRANT SELECT ON gp_t TO gp_bob WITH GRANT OPTION", simple); sqlState(err) != "0A000" {
		t.Errorf("GRANT ... WITH GRANT OPTION: %v, want 0A000", err)
	}

	// ALL TABLES IN SCHEMA, and the schema's USAGE. A shard lives in the
	// shards' schema, so the workers never check the table's: privileges
	// of other roles are refused while not every role may use it (an
	// adversary read a table through a schema it had no USAGE on).
	for _, q := range []string{"CREATE SCHEMA gp_s", "CREATE TABLE gp_s.gpt (id int PRIMARY KEY)",
		"SELECT create_distributed_table('gp_s.gpt', 'id', shard_count => 2)", "INSERT INTO gp_s.gpt VALUES (1), (2), (3)"} {
		exec(t, su, q, simple)
	}
	refused := func(c *pgx.Conn, sql string) {
		t.Helper()
		if _, err := c.Exec(ctx, sql, simple); sqlState(err) != "0A000" {
			t.Errorf("%s: %v, want 0A000", sql, err)
		}
	}
	refused(su, "GRANT SELECT ON ALL TABLES IN SCHEMA gp_s TO gp_bob")
	refused(su, "GRANT SELECT ON gp_s.gpt TO PUBLIC")
	denied("bob", bob, "SELECT count(*) FROM gp_s.gpt", "gpt")
	exec(t, su, "GRANT USAGE ON SCHEMA gp_s TO PUBLIC", simple)
	exec(t, su, "GRANT SELECT ON ALL TABLES IN SCHEMA gp_s TO gp_bob", simple)
	want("bob", bob, "SELECT count(*) FROM gp_s.gpt", 3)
	refused(su, "REVOKE USAGE ON SCHEMA gp_s FROM PUBLIC")
	refused(su, "REVOKE USAGE ON SCHEMA gp_s FROM gp_alice CASCADE")
	refused(su, "REVOKE ALL ON SCHEMA gp_s FROM gp_bob, PUBLIC")
	exec(t, su, "REVOKE CREATE ON SCHEMA gp_s FROM PUBLIC", simple)
	want("bob", bob, "SELECT count(*) FROM gp_s.gpt WHERE id = 2", 1)
	exec(t, su, "REVOKE ALL ON ALL TABLES IN SCHEMA gp_s FROM gp_bob", simple)
	denied("bob", bob, "SELECT count(*) FROM gp_s.gpt WHERE id = 2", "gpt")
	// A table granted to others in such a schema is not distributed.
	for _, q := range []string{"CREATE SCHEMA gp_x", "CREATE TABLE gp_x.gpt (id int PRIMARY KEY)", "GRANT SELECT ON gp_x.gpt TO gp_bob"} {
		exec(t, su, q, simple)
	}
	refused(su, "SELECT create_distributed_table('gp_x.gpt', 'id')")
	exec(t, su, "REVOKE SELECT ON gp_x.gpt FROM gp_bob", simple)
	exec(t, su, "SELECT create_distributed_table('gp_x.gpt', 'id', shard_count => 2)", simple)

	// Membership granted and revoked through a coordinator holds on every
	// worker (revoked on the first only, a member kept reading the shards
	// on the others).
	exec(t, alice, "REVOKE ALL ON gp_t FROM gp_bob", simple)
	exec(t, alice, "GRANT SELECT ON gp_t TO gp_team", simple)
	denied("bob", bob, "SELECT count(*) FROM gp_t", "gp_t")
	exec(t, su, "GRANT gp_team TO gp_bob", simple)
	want("bob, a member", bob, "SELECT count(*) FROM gp_t", 9)
	exec(t, su, "REVOKE gp_team FROM gp_bob", simple)
	denied("bob, no more a member", bob, "SELECT count(*) FROM gp_t", "gp_t")
	for id := 1; id <= 9; id++ {
		denied("bob, no more a member", bob, fmt.Sprintf("SELECT count(*) FROM gp_t WHERE id = %d", id), "gp_t")
	}
	exec(t, alice, "REVOKE ALL ON gp_t FROM gp_team", simple)
	exec(t, alice, "GRANT SELECT, DELETE, UPDATE (v) ON gp_t TO gp_bob", simple)

	// A moved shard keeps them (the copy is made from the shard).
	moveFirstShard(t, su, cl, "gp_t")
	want("bob after a move", bob, "SELECT count(*) FROM gp_t", 9)
	exec(t, bob, "UPDATE gp_t SET v = 'm'", simple)
	denied("bob after a move", bob, "UPDATE gp_t SET secret = 'm'", "gp_t")
	want("alice after a move", alice, "SELECT count(*) FROM gp_t WHERE v = 'm'", 9)
}

// TestDropTableCascadeInBlock: DROP TABLE ... CASCADE of a distributed
// table inside a transaction block runs there as DROP TABLE does (as
// RESTRICT: nothing depends on it), not refused as CONCURRENTLY would be
// (25001: its rewrite to RESTRICT was taken for one); rolled back, the
// table stays.
func TestDropTableCascadeInBlock(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	testTable(t, c, "dtc_t", "(id int PRIMARY KEY)", "SELECT create_distributed_table('dtc_t', 'id', shard_count => 2)")
	ctx := context.Background()
	for _, q := range []string{"DROP TABLE dtc_t CASCADE", "DROP TABLE IF EXISTS dtc_t CASCADE"} {
		tx, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, q); err != nil {
			t.Errorf("BEGIN; %s: %v", q, err)
		}
		_ = tx.Rollback(ctx)
	}
	if got := queryString(t, c, "SELECT count(*)::text FROM dtc_t"); got != "0" {
		t.Errorf("dtc_t after the rolled back drops: %s rows", got)
	}
}

// moveFirstShard moves table's first shard to the other of the cluster's
// two workers, through the coordinator c.
func moveFirstShard(t *testing.T, c *pgx.Conn, cl *pgcluster.Cluster, table string) {
	t.Helper()
	var shard int64
	var host string
	var port int
	if err := c.QueryRow(context.Background(), "SELECT shardid, nodename, nodeport FROM citus_shards WHERE table_name = $1::regclass ORDER BY shardid LIMIT 1",
		pgx.QueryExecModeSimpleProtocol, table).Scan(&shard, &host, &port); err != nil {
		t.Fatal(err)
	}
	to := cl.Servers[0]
	if to.Port == port {
		to = cl.Servers[1]
	}
	exec(t, c, fmt.Sprintf("SELECT citus_move_shard_placement(%d, '%s', %d, '%s', %d)", shard, host, port, to.Host, to.Port), pgx.QueryExecModeSimpleProtocol)
}
