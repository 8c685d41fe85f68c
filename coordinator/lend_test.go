package coordinator_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestNoConnectionOutsidePools: with a pool of 2, a client's
// create_distributed_table, create_reference_table, COPY, multi-row INSERTs
// over several shards, reference-table writes, DDL on distributed tables
// and undistribute_table, ten rounds of them, open at most 2 connections
// per worker for the client's user, counted by the workers themselves
// (log_connections): the coordinator's own statements over several workers
// run on the pools' connections, none is dialled per statement. The rows
// are all there, on every copy.
func TestNoConnectionOutsidePools(t *testing.T) {
	cl := pgtest.Shared(t)
	const pool, rounds, user = 2, 10, "lend_user"
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	offsets := make([]int64, len(cl.Servers))
	for i, s := range cl.Servers {
		w := connect(t, s.Addr())
		exec(t, w, "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '"+user+"') THEN CREATE ROLE "+user+" LOGIN SUPERUSER; END IF; END $$", simple)
		exec(t, w, "ALTER SYSTEM SET log_connections = on", simple)
		exec(t, w, "SELECT pg_reload_conf()", simple)
		t.Cleanup(func() {
			_, _ = w.Exec(context.Background(), "ALTER SYSTEM RESET log_connections", simple)
			_, _ = w.Exec(context.Background(), "SELECT pg_reload_conf()", simple)
		})
		// The postmaster reads the file when it gets to the signal: new
		// backends have the setting once one of them shows it.
		deadline := time.Now().Add(10 * time.Second)
		for {
			c := connect(t, s.Addr())
			var on string
			if err := c.QueryRow(ctx, "SHOW log_connections", simple).Scan(&on); err != nil {
				t.Fatal(err)
			}
			_ = c.Close(ctx)
			if on == "on" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("log_connections not on after reload")
			}
			time.Sleep(50 * time.Millisecond)
		}
		fi, err := os.Stat(s.LogFile)
		if err != nil {
			t.Fatal(err)
		}
		offsets[i] = fi.Size()
	}

	srv := pgtest.Coordinator(t, cl, poolSize(pool))
	admin := connect(t, srv.Addr())
	drop := func() {
		for _, q := range []string{"DROP TABLE IF EXISTS lend_d, lend_r"} {
			_, _ = admin.Exec(ctx, q, simple)
		}
	}
	drop()
	t.Cleanup(drop)
	c, err := pgx.Connect(ctx, "postgres://"+user+"@"+srv.Addr()+"/postgres?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	want := 0
	for r := 0; r < rounds; r++ {
		for _, q := range []string{
			"CREATE TABLE lend_d (id int PRIMARY KEY, v text)",
			"SELECT create_distributed_table('lend_d', 'id', shard_count => 8)",
			"CREATE TABLE lend_r (id int PRIMARY KEY, v text)",
			"SELECT create_reference_table('lend_r')",
			"INSERT INTO lend_d VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd'), (5, 'e')",
			"INSERT INTO lend_r VALUES (1, 'a'), (2, 'b')",
			"UPDATE lend_r SET v = v || 'x'",
			"ALTER TABLE lend_d ADD COLUMN w int",
			"CREATE INDEX ON lend_d (v)",
		} {
			exec(t, c, q, simple)
		}
		_, err := c.PgConn().CopyFrom(ctx, strings.NewReader("10\tj\t1\n11\tk\t2\n12\tl\t3\n13\tm\t4\n"), "COPY lend_d FROM STDIN")
		if err != nil {
			t.Fatalf("COPY: %v", err)
		}
		want = 9
		var n int
		if err := c.QueryRow(ctx, "SELECT count(*) FROM lend_d", simple).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Fatalf("round %d: %d rows in lend_d, want %d", r, n, want)
		}
		var refs string
		if err := c.QueryRow(ctx, "SELECT string_agg(v, ',' ORDER BY id) FROM lend_r", simple).Scan(&refs); err != nil {
			t.Fatal(err)
		}
		if refs != "ax,bx" {
			t.Fatalf("round %d: lend_r has %q, want ax,bx", r, refs)
		}
		for _, q := range []string{"SELECT undistribute_table('lend_d')", "SELECT undistribute_table('lend_r')"} {
			exec(t, c, q, simple)
		}
		if err := c.QueryRow(ctx, "SELECT count(*) FROM lend_d", simple).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Fatalf("round %d: %d rows in lend_d after undistribute_table, want %d", r, n, want)
		}
		exec(t, c, "DROP TABLE lend_d, lend_r", simple)
	}

	for i, s := range cl.Servers {
		b, err := os.ReadFile(s.LogFile)
		if err != nil {
			t.Fatal(err)
		}
		n := strings.Count(string(b[offsets[i]:]), "connection authorized: user="+user+" ")
		t.Logf("worker %s: %d connections of %s opened", s.Addr(), n, user)
		if n < 1 || n > pool {
			t.Errorf("worker %s: %d connections of %s opened over %d rounds, want 1 to %d (the pool)", s.Addr(), n, user, rounds, pool)
		}
	}
}
