package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestPoolOfTwoDuringCitusFunctions: under a pool of 2, two clients each
// run the statements that once dialled every worker per statement
// (create_distributed_table of a table holding rows, which moves them onto
// the shards; COPY; ALTER TABLE and CREATE INDEX on the shards;
// create_reference_table; a multi-row INSERT and a multi-shard UPDATE over
// every shard; undistribute_table), while a sampler counts the clients'
// user's connections on each worker every 10 ms: never more than 2. A
// statement that finds no connection in time (53300, with a hint) is
// retried; every one ends, and the rows are all there.
func TestPoolOfTwoDuringCitusFunctions(t *testing.T) {
	cl := pgtest.Shared(t)
	const pool = 2
	srv := pgtest.Coordinator(t, cl, poolSize(pool))
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	var workers []*pgx.Conn
	for _, s := range cl.Servers {
		w := connect(t, s.Addr())
		exec(t, w, "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'p2_user') THEN CREATE ROLE p2_user LOGIN SUPERUSER; END IF; END $$", simple)
		workers = append(workers, w)
	}
	admin := connect(t, srv.Addr())
	const clients = 2
	drop := func() {
		for i := 0; i < clients; i++ {
			for _, q := range []string{
				fmt.Sprintf("SELECT undistribute_table('p2_dist%d')", i),
				fmt.Sprintf("SELECT undistribute_table('p2_ref%d')", i),
				fmt.Sprintf("DROP TABLE IF EXISTS p2_dist%d, p2_ref%d", i, i),
			} {
				_, _ = admin.Exec(ctx, q, simple)
			}
		}
	}
	drop()
	t.Cleanup(drop)

	stopSampler := connSampler(t, workers, "p2_user", 10*time.Millisecond)

	url := "postgres://p2_user@" + srv.Addr() + "/postgres?sslmode=disable"
	var run sync.WaitGroup
	var retried atomic.Int32
	for i := 0; i < clients; i++ {
		run.Add(1)
		go func() {
			defer run.Done()
			c, err := pgx.Connect(ctx, url)
			if err != nil {
				t.Errorf("client %d: %v", i, err)
				return
			}
			defer c.Close(ctx)
			do := func(q string) bool {
				for try := 0; ; try++ {
					_, err := c.Exec(ctx, q, simple)
					if err == nil {
						return true
					}
					var pe *pgconn.PgError
					if errors.As(err, &pe) && pe.Code == "53300" && pe.Hint != "" && try < 20 {
						retried.Add(1)
						time.Sleep(50 * time.Millisecond)
						continue
					}
					t.Errorf("client %d: %s: %v", i, q, err)
					return false
				}
			}
			var rows strings.Builder
			for k := 5000; k < 5100; k++ {
				fmt.Fprintf(&rows, "%d\tcopied %d\n", k, k)
			}
			d, r := fmt.Sprintf("p2_dist%d", i), fmt.Sprintf("p2_ref%d", i)
			for _, q := range []string{
				"CREATE TABLE " + d + " (id int PRIMARY KEY, v text)",
				"INSERT INTO " + d + " SELECT g, 'before ' || g FROM generate_series(1, 3000) g",
				"SELECT create_distributed_table('" + d + "', 'id', shard_count => 8)",
				"CREATE TABLE " + r + " (id int PRIMARY KEY, v text)",
				"INSERT INTO " + r + " SELECT g, 'ref ' || g FROM generate_series(1, 500) g",
				"SELECT create_reference_table('" + r + "')",
				"ALTER TABLE " + d + " ADD COLUMN w int",
				"CREATE INDEX ON " + d + " (v)",
				"INSERT INTO " + d + " (id, v) VALUES (4001, 'a'), (4002, 'b'), (4003, 'c'), (4004, 'd'), (4005, 'e'), (4006, 'f')",
				"UPDATE " + d + " SET w = id % 7",
				"INSERT INTO " + r + " VALUES (501, 'five hundred and one')",
			} {
				if !do(q) {
					return
				}
			}
			for try := 0; ; try++ {
				_, err := c.PgConn().CopyFrom(ctx, strings.NewReader(rows.String()), "COPY "+d+" (id, v) FROM STDIN")
				var pe *pgconn.PgError
				if err != nil && errors.As(err, &pe) && pe.Code == "53300" && try < 20 {
					retried.Add(1)
					time.Sleep(50 * time.Millisecond)
					continue
				}
				if err != nil {
					t.Errorf("client %d: COPY: %v", i, err)
					return
				}
				break
			}
			var n, w int
			if err := c.QueryRow(ctx, "SELECT count(*), count(w) FROM "+d, simple).Scan(&n, &w); err != nil {
				t.Errorf("client %d: %v", i, err)
				return
			}
			if n != 3106 || w != 3006 {
				t.Errorf("client %d: %s holds %d rows, %d with w set; want 3106 and 3006", i, d, n, w)
			}
			if err := c.QueryRow(ctx, "SELECT count(*) FROM "+r, simple).Scan(&n); err != nil || n != 501 {
				t.Errorf("client %d: %s holds %d rows (%v), want 501", i, r, n, err)
			}
			do("SELECT undistribute_table('" + d + "')")
		}()
	}
	run.Wait()
	most, samples := stopSampler()
	t.Logf("%d samples; most connections of the clients' user: worker 1 %d, worker 2 %d; %d retries after 53300",
		samples, most[0], most[1], retried.Load())
	if samples < 10 {
		t.Fatalf("only %d samples: the sampler did not watch the statements", samples)
	}
	if most[0] == 0 && most[1] == 0 {
		t.Fatal("the sampler never saw a connection of the clients' user: it counts the wrong thing")
	}
	for i, n := range most {
		if n > pool {
			t.Errorf("worker %d had %d connections of the clients' user, more than the pool's %d", i+1, n, pool)
		}
	}
	// undistribute_table brought the rows back to one table.
	var n int
	if err := admin.QueryRow(ctx, "SELECT (SELECT count(*) FROM p2_dist0) + (SELECT count(*) FROM p2_dist1)", simple).Scan(&n); err != nil || n != 2*3106 {
		t.Errorf("after undistribute_table: %d rows (%v), want %d", n, err, 2*3106)
	}
}
