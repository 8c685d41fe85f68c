package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestWorkerConnectionsBounded: 60 clients through a coordinator with a pool
// of 4 run autocommit reference-table writes, multi-row INSERTs over several
// shards, COPY into a distributed table and DDL (on a catalog table and on
// functions), which open connections to every worker per statement, while a
// sampler counts the clients' user's connections on each worker every
// 100 ms: never more than the pool's 4. Every statement succeeds or fails
// with a clean, retryable error with a hint, and every write that succeeded
// is there, on every copy, and no other.
func TestWorkerConnectionsBounded(t *testing.T) {
	cl := pgtest.Shared(t)
	const pool, rounds = 4, 4
	clients := 60
	if n, err := strconv.Atoi(os.Getenv("PGFLEET_BOUND_CLIENTS")); err == nil && n > 0 {
		clients = n // PGFLEET_BOUND_CLIENTS=300 for issue 9's figure
	}
	srv := pgtest.Coordinator(t, cl, poolSize(pool))
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	var workers []*pgx.Conn
	for _, s := range cl.Servers {
		w := connect(t, s.Addr())
		exec(t, w, "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'wcb_user') THEN CREATE ROLE wcb_user LOGIN SUPERUSER; END IF; END $$", simple)
		workers = append(workers, w)
	}
	admin := connect(t, srv.Addr())
	drop := func() {
		for _, q := range []string{"SELECT undistribute_table('wcb_ref')", "SELECT undistribute_table('wcb_dist')",
			"DROP TABLE IF EXISTS wcb_ref, wcb_dist"} {
			_, _ = admin.Exec(ctx, q, simple)
		}
		for i := 0; i < clients; i++ {
			_, _ = admin.Exec(ctx, fmt.Sprintf("DROP FUNCTION IF EXISTS wcb_f%d()", i), simple)
		}
	}
	drop()
	t.Cleanup(drop)
	for _, q := range []string{
		"CREATE TABLE wcb_ref (id int PRIMARY KEY, v int)",
		"CREATE TABLE wcb_dist (id int PRIMARY KEY, v int)",
		"SELECT create_reference_table('wcb_ref')",
		"SELECT create_distributed_table('wcb_dist', 'id', shard_count => 8)",
	} {
		exec(t, admin, q, simple)
	}

	stopSampler := connSampler(t, workers, "wcb_user", 100*time.Millisecond)

	// The clients. Each write's rows are recorded as committed or not.
	url := "postgres://wcb_user@" + srv.Addr() + "/postgres?sslmode=disable"
	var mu sync.Mutex
	refOK, distOK := map[int]bool{}, map[int]bool{}
	codes := map[string]int{}
	var run sync.WaitGroup
	for i := 0; i < clients; i++ {
		run.Add(1)
		go func() {
			defer run.Done()
			c, err := pgx.Connect(ctx, url)
			if err != nil {
				// Startup checks the database out on a worker: under this
				// load it may find no connection in time (53300).
				mu.Lock()
				defer mu.Unlock()
				codes["connect "+sqlState(err)]++
				if sqlState(err) != "53300" {
					t.Errorf("client %d: %v", i, err)
				}
				return
			}
			defer c.Close(ctx)
			for r := 0; r < rounds; r++ {
				id := (i*rounds + r) * 10
				var err error
				var ref, dist []int
				switch (i + r) % 4 {
				case 0:
					_, err = c.Exec(ctx, fmt.Sprintf("INSERT INTO wcb_ref VALUES (%d, %d)", id, r), simple)
					ref = []int{id}
				case 1:
					_, err = c.Exec(ctx, fmt.Sprintf("INSERT INTO wcb_dist (id, v) VALUES (%d, 1), (%d, 1), (%d, 1), (%d, 1)", id, id+1, id+2, id+3), simple)
					dist = []int{id, id + 1, id + 2, id + 3}
				case 2:
					var b strings.Builder
					for k := 4; k < 9; k++ {
						fmt.Fprintf(&b, "%d\t%d\n", id+k, r)
						dist = append(dist, id+k)
					}
					_, err = c.PgConn().CopyFrom(ctx, strings.NewReader(b.String()), "COPY wcb_dist (id, v) FROM STDIN")
				case 3:
					if r%2 == 0 {
						_, err = c.Exec(ctx, fmt.Sprintf("CREATE OR REPLACE FUNCTION wcb_f%d() RETURNS int LANGUAGE sql AS 'SELECT %d'", i, r), simple)
					} else {
						_, err = c.Exec(ctx, fmt.Sprintf("CREATE INDEX wcb_ref_v%d ON wcb_ref (v)", i), simple)
					}
				}
				mu.Lock()
				for _, k := range ref {
					refOK[k] = err == nil
				}
				for _, k := range dist {
					distOK[k] = err == nil
				}
				if err != nil {
					var pe *pgconn.PgError
					switch {
					case !errors.As(err, &pe):
						t.Errorf("client %d: %v", i, err)
					case pe.Hint == "" || !strings.Contains(" 53300 57014 55P03 40001 40P01 ", " "+pe.Code+" "):
						t.Errorf("client %d: %s %s (hint %q), want success or a retryable error with a hint", i, pe.Code, pe.Message, pe.Hint)
					}
					codes[sqlState(err)]++
				}
				mu.Unlock()
			}
		}()
	}
	run.Wait()
	most, samples := stopSampler()
	t.Logf("%d samples; most connections of the clients' user: worker 1 %d, worker 2 %d; errors by SQLSTATE %v",
		samples, most[0], most[1], codes)
	for i, n := range most {
		if n > pool {
			t.Errorf("worker %d had %d connections of the clients' user, more than the pool's %d", i+1, n, pool)
		}
	}

	// Nothing lost, nothing extra, the copies identical.
	check := func(table string, ok map[int]bool) {
		rows, err := admin.Query(ctx, "SELECT id FROM "+table, simple)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			t.Fatal(err)
		}
		have := map[int]bool{}
		for _, id := range ids {
			have[int(id)] = true
			if !ok[int(id)] {
				t.Errorf("%s: row %d is there, its statement failed", table, id)
			}
		}
		for id, committed := range ok {
			if committed && !have[id] {
				t.Errorf("%s: row %d is missing, its statement succeeded", table, id)
			}
		}
	}
	check("wcb_ref", refOK)
	check("wcb_dist", distOK)
	var shard string
	meta := connect(t, cl.Servers[0].Addr())
	if err := meta.QueryRow(ctx, "SELECT shardid::text FROM pgfleet.shards WHERE table_name = 'public.wcb_ref'").Scan(&shard); err != nil {
		t.Fatal(err)
	}
	refCopies(t, workers, "pgfleet_shards.wcb_ref_"+shard, "after")
}

// connSampler counts, every period, the connections of user on each
// worker (pg_stat_activity) and keeps the most seen; stop ends it and
// returns them with the number of samples taken.
func connSampler(t *testing.T, workers []*pgx.Conn, user string, period time.Duration) (stop func() (most []int32, samples int32)) {
	ctx := context.Background()
	done := make(chan struct{})
	most := make([]atomic.Int32, len(workers))
	var n atomic.Int32
	var wg sync.WaitGroup
	for i, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(period)
			defer tick.Stop()
			for {
				var c int32
				if err := w.QueryRow(ctx, "SELECT count(*)::int FROM pg_stat_activity WHERE usename = $1", pgx.QueryExecModeSimpleProtocol, user).Scan(&c); err != nil {
					t.Error(err)
					return
				}
				n.Add(1)
				if c > most[i].Load() {
					most[i].Store(c)
				}
				select {
				case <-done:
					return
				case <-tick.C:
				}
			}
		}()
	}
	return func() ([]int32, int32) {
		close(done)
		wg.Wait()
		out := make([]int32, len(most))
		for i := range most {
			out[i] = most[i].Load()
		}
		return out, n.Load()
	}
}
