package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// gossipResult is what a fleet of coordinators joined by gossip sends each
// other: bytes per coordinator per second at rest (no client, no catalog
// change: memberlist's probes and gossip) and while catalog changes are
// made through the first coordinator (each announced to the others), and
// how long the others took to hold each change.
type gossipResult struct {
	Coordinators  int       `json:"coordinators"`
	WindowSeconds float64   `json:"window_seconds"`
	RestBps       []float64 `json:"rest_bytes_per_second"`   // per coordinator
	ChangeBps     []float64 `json:"change_bytes_per_second"` // per coordinator
	Changes       int       `json:"catalog_changes"`
	ChangesPerSec float64   `json:"catalog_changes_per_second"`
	// PropagationMs is the mean, over the other coordinators, of the time
	// from the first announcing a change to each holding it.
	PropagationMs float64 `json:"propagation_ms"`
	Error         string  `json:"error,omitempty"`
}

// runGossip measures gossip for each coordinator count above one.
func (b *routerBench) runGossip(ctx context.Context) {
	for _, n := range b.o.Coordinators {
		if n < 2 {
			continue
		}
		b.logf("gossip between %d coordinators...", n)
		g := b.gossip(ctx, n)
		if g.Error != "" {
			b.rep.Problems = append(b.rep.Problems, fmt.Sprintf("gossip with %d coordinators: %s", n, g.Error))
		}
		b.rep.Gossip = append(b.rep.Gossip, g)
	}
}

func (b *routerBench) gossip(ctx context.Context, n int) gossipResult {
	window := min(max(b.o.Duration, 2*time.Second), 10*time.Second)
	g := gossipResult{Coordinators: n, WindowSeconds: window.Seconds()}
	chs, rrs, err := startCoordinators(ctx, b.exe, b.dir, b.workerAddrs(), b.o.PoolSize, n, b.o.CoordinatorProcs)
	defer func() {
		for i, ch := range chs {
			ch.Stop(syscall.SIGTERM, 10*time.Second)
			// Their warnings and errors are the run's problems too.
			if lines, total := logProblems(ch.LogPath, 5); total > 0 {
				b.rep.Problems = append(b.rep.Problems, fmt.Sprintf("gossip with %d coordinators: coordinator %s: %d warning/error lines in its log, first: %s",
					n, rrs[i].Addr, total, lines[0]))
			}
		}
	}()
	if err != nil {
		g.Error = err.Error()
		return g
	}
	// Every member sees the others.
	deadline := time.Now().Add(30 * time.Second)
	for _, rr := range rrs {
		for scrape(rr.Metrics, "pgfleet_fleet_members") != float64(n) {
			if time.Now().After(deadline) || ctx.Err() != nil {
				g.Error = fmt.Sprintf("coordinator %s does not see %d members", rr.Addr, n)
				return g
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	sent := func() []float64 {
		out := make([]float64, len(rrs))
		for i, rr := range rrs {
			out[i] = scrape(rr.Metrics, "pgfleet_gossip_bytes_sent_total")
		}
		return out
	}
	rate := func(before, after []float64, d time.Duration) []float64 {
		out := make([]float64, len(before))
		for i := range before {
			out[i] = (after[i] - before[i]) / d.Seconds()
		}
		return out
	}
	t0, s0 := time.Now(), sent()
	select {
	case <-ctx.Done():
		g.Error = ctx.Err().Error()
		return g
	case <-time.After(window):
	}
	g.RestBps = rate(s0, sent(), time.Since(t0))

	c, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", rrs[0].Addr))
	if err != nil {
		g.Error = err.Error()
		return g
	}
	defer c.Close(context.Background())
	simple := pgx.QueryExecModeSimpleProtocol
	t0, s0 = time.Now(), sent()
	for i := 0; time.Since(t0) < window; i++ {
		tb := fmt.Sprintf("bench_gossip_%d", i)
		for _, q := range []string{"CREATE TABLE " + tb + " (id int PRIMARY KEY)",
			"SELECT create_distributed_table('" + tb + "', 'id', shard_count => 4)",
			"SELECT undistribute_table('" + tb + "')", "DROP TABLE " + tb} {
			if _, err := c.Exec(ctx, q, simple); err != nil {
				g.Error = fmt.Sprintf("%s: %v", q, err)
				return g
			}
		}
		g.Changes += 2
	}
	d := time.Since(t0)
	g.ChangeBps = rate(s0, sent(), d)
	g.ChangesPerSec = float64(g.Changes) / d.Seconds()
	var sum, count float64
	for _, rr := range rrs[1:] {
		sum += scrape(rr.Metrics, "pgfleet_catalog_propagation_seconds_sum")
		count += scrape(rr.Metrics, "pgfleet_catalog_propagation_seconds_count")
	}
	if count > 0 {
		g.PropagationMs = 1000 * sum / count
	}
	return g
}

// scrape reads one unlabelled metric from a coordinator's /metrics (-1
// when it cannot).
func scrape(addr, name string) float64 {
	cl := http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				return f
			}
		}
	}
	return -1
}

// writeGossip writes the gossip measurements.
func writeGossip(sb *strings.Builder, gs []gossipResult) {
	if len(gs) == 0 {
		return
	}
	sb.WriteString("\n## Gossip between coordinators\n\n" +
		"Bytes each coordinator sends the others (memberlist's probes, gossip and state exchanges, and pgfleet's messages), " +
		"per second: at rest, and while catalog changes (create_distributed_table and undistribute_table of a small table) " +
		"are made through the first; propagation: from the first announcing a change to another holding it, the mean.\n\n" +
		"| coordinators | bytes/s each at rest | bytes/s each during changes | changes/s | propagation |\n|---:|---|---|---:|---:|\n")
	list := func(v []float64) string {
		var parts []string
		for _, x := range v {
			parts = append(parts, fmt.Sprintf("%.0f", x))
		}
		return strings.Join(parts, ", ")
	}
	for _, g := range gs {
		if g.Error != "" {
			fmt.Fprintf(sb, "| %d | failed: %s | | | |\n", g.Coordinators, g.Error)
			continue
		}
		fmt.Fprintf(sb, "| %d | %s | %s | %.1f | %.1f ms |\n", g.Coordinators, list(g.RestBps), list(g.ChangeBps), g.ChangesPerSec, g.PropagationMs)
	}
}
