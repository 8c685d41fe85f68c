package coordinator_test

import (
	"context"
	"fmt"
	"os"
	osexec "os/exec"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// BenchmarkTPCBClientsOverPool measures how throughput degrades when clients
// outnumber the pool: pgbench tpcb-like across 2 workers (accounts and
// history distributed, tellers and branches reference tables, so every
// transaction spans both workers) with clients = pool size, then 4 × pool
// size, alternating, each run PGFLEET_TPCB_SECONDS long (default 20),
// PGFLEET_TPCB_RUNS times (default 2); pool PGFLEET_TPCB_POOL (default 8),
// scale PGFLEET_TPCB_SCALE (default 8). It reports the median TPS of each
// and their ratio, and fails if a client aborted. Run it with
//
//	go test -run '^$' -bench TPCBClientsOverPool -benchtime 1x ./coordinator/
func BenchmarkTPCBClientsOverPool(b *testing.B) {
	env := func(k string, def int) int {
		if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
			return v
		}
		return def
	}
	pool, runs, secs, scale := env("PGFLEET_TPCB_POOL", 8), env("PGFLEET_TPCB_RUNS", 2),
		env("PGFLEET_TPCB_SECONDS", 20), env("PGFLEET_TPCB_SCALE", 8)
	pgbench, err := osexec.LookPath("pgbench")
	if err != nil {
		b.Skip("pgbench not found")
	}
	cl := pgtest.Shared(b)
	srv := pgtest.Coordinator(b, cl, func(c *coordinator.Config) { c.PoolSize, c.PoolTimeout = pool, 5*time.Second })
	url := pgtest.URL(srv.Addr())
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(ctx)
	simple := pgx.QueryExecModeSimpleProtocol
	drop := func() {
		for _, tb := range []string{"pgbench_accounts", "pgbench_history", "pgbench_branches", "pgbench_tellers"} {
			_, _ = c.Exec(ctx, "SELECT undistribute_table('"+tb+"')", simple)
		}
		_, _ = c.Exec(ctx, "DROP TABLE IF EXISTS pgbench_accounts, pgbench_branches, pgbench_tellers, pgbench_history", simple)
	}
	drop()
	defer drop()
	if out, err := osexec.Command(pgbench, "-i", "-q", "-I", "dtGp", "-s", strconv.Itoa(scale), url).CombinedOutput(); err != nil {
		b.Fatalf("pgbench -i: %v\n%s", err, out)
	}
	for _, q := range []string{
		"SELECT create_distributed_table('pgbench_accounts', 'aid', shard_count => 8)",
		"SELECT create_distributed_table('pgbench_history', 'aid', shard_count => 8)",
		"SELECT create_reference_table('pgbench_branches')",
		"SELECT create_reference_table('pgbench_tellers')",
	} {
		if _, err := c.Exec(ctx, q, simple); err != nil {
			b.Fatalf("%s: %v", q, err)
		}
	}
	tpsRe := regexp.MustCompile(`tps = ([0-9.]+) \(without`)
	failedRe := regexp.MustCompile(`number of failed transactions: (\d+)`)
	abortRe := regexp.MustCompile(`(?i)client \d+ aborted`)
	tps := map[int][]float64{}
	b.ResetTimer()
	for r := 0; r < runs; r++ {
		for _, clients := range []int{pool, 4 * pool} {
			cmd := osexec.Command(pgbench, "-n", "-M", "extended", "-c", strconv.Itoa(clients), "-j", "2",
				"-T", strconv.Itoa(secs), url)
			out, err := cmd.CombinedOutput()
			m := tpsRe.FindSubmatch(out)
			if err != nil || m == nil || abortRe.Match(out) {
				b.Fatalf("pgbench -c %d: %v\n%s", clients, err, out)
			}
			if f := failedRe.FindSubmatch(out); f != nil && string(f[1]) != "0" {
				b.Errorf("pgbench -c %d: %s failed transactions", clients, f[1])
			}
			v, _ := strconv.ParseFloat(string(m[1]), 64)
			tps[clients] = append(tps[clients], v)
			b.Logf("run %d, pool %d, %d clients: %.1f TPS", r+1, pool, clients, v)
		}
	}
	med := func(v []float64) float64 {
		v = slices.Clone(v)
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	one, four := med(tps[pool]), med(tps[4*pool])
	b.ReportMetric(one, "tps-1x")
	b.ReportMetric(four, "tps-4x")
	b.ReportMetric(four/one, "ratio")
	b.Log(fmt.Sprintf("pool %d, scale %d, %d s runs: median TPS %.1f at %d clients, %.1f at %d clients (ratio %.2f)",
		pool, scale, secs, one, pool, four, 4*pool, four/one))
}
