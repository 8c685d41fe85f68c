package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgfleet/pgfleet/internal/pgcluster"
)

// TestRouterSmoke runs the harness end to end at the smallest size: real
// PostgreSQL workers, two coordinators sharing the clients, point-select and
// writes in two protocols, the half-peak open-loop pair, a URL target (a
// plain PostgreSQL server), and checks what a user reads in
// the report: every configuration ran without a failed transaction, the
// data check passed, and the JSON, Markdown and SVG files are there. It is a
// test of the tool, not a measurement.
func TestRouterSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and runs pgbench (about 40 s)")
	}
	bin, err := pgcluster.BinDir()
	if err == nil {
		_, err = findPgbench(bin)
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	exe := filepath.Join(t.TempDir(), "pgfleet")
	if out, err := exec.Command("go", "build", "-o", exe, "github.com/pgfleet/pgfleet/cmd/pgfleet").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// A plain PostgreSQL server as a target given by URL.
	dir, err := os.MkdirTemp("", "pgfleet-smoke-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	plain, err := pgcluster.Start(ctx, pgcluster.Options{Name: "plain", Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Stop()

	o := DefaultRouterOptions()
	o.Targets = []URLTarget{{Name: "plain", URL: "postgres://postgres@" + plain.Addr() + "/postgres?sslmode=disable"}}
	o.Scale, o.Clients, o.Jobs, o.Duration, o.Warmup, o.Runs = 1, 4, 2, 2*time.Second, time.Second, 1
	o.Shards, o.Coordinators = 4, []int{2}
	o.Modes, o.Workloads = []string{modePrepared, modeSimple}, []string{workloadPointSelect, workloadWrite}
	o.NoPgbouncer, o.Executable, o.OutDir = true, exe, t.TempDir()
	if d := os.Getenv("SMOKE_OUT"); d != "" {
		o.OutDir = d
	}
	var out, log bytes.Buffer
	o.Stdout, o.Stderr = &out, &log
	if err := RunRouter(ctx, o); err != nil {
		t.Fatalf("RunRouter: %v\nlog:\n%s", err, log.String())
	}

	var rep routerReport
	files := map[string]string{}
	ents, _ := os.ReadDir(o.OutDir)
	for _, e := range ents {
		files[filepath.Ext(e.Name())] = filepath.Join(o.OutDir, e.Name())
	}
	b, err := os.ReadFile(files[".json"])
	if err != nil {
		t.Fatalf("JSON report: %v (files %v)", err, files)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) > 0 {
		t.Errorf("problems: %q", rep.Problems)
	}
	// 2 workloads x 2 modes x (direct, pgfleet, plain by URL) + the
	// half-peak pair.
	if len(rep.Configs) != 14 {
		t.Errorf("%d configurations, want 14", len(rep.Configs))
	}
	if len(rep.URLTargets) != 1 || !rep.URLTargets[0].Loaded || rep.URLTargets[0].Distributed || rep.URLTargets[0].Error != "" {
		t.Errorf("URL target %+v: want loaded, not distributed (plain PostgreSQL)", rep.URLTargets)
	}
	for _, c := range rep.Configs {
		if c.Skipped != "" || c.Row == nil || !c.Row.OK || c.Row.Failed != 0 || c.Row.QPS <= 0 {
			t.Errorf("%s %s %s: skipped %q, row %+v", c.Label, c.Workload, c.Mode, c.Skipped, c.Row)
			continue
		}
		r := c.Runs[c.Median]
		if c.Target == targetPgfleet {
			if len(r.Relays) != 2 || len(r.Pgbench) != 4 || r.Summary.Clients != 4 { // 2 warm-up + 2 measured pgbench
				t.Errorf("%s: %d relays, %d pgbench commands, %d clients; want 2, 4, 4", c.Label, len(r.Relays), len(r.Pgbench), r.Summary.Clients)
			}
			if r.Memory.RelayPeakRSSKiB <= 0 || r.CPU.RelayPerQuery <= 0 {
				t.Errorf("%s: no coordinator memory or CPU figures: %+v %+v", c.Label, r.Memory, r.CPU)
			}
		}
		if len(r.CDF) == 0 {
			t.Errorf("%s %s: no latency distribution", c.Label, c.Mode)
		}
		if c.Target == targetURL("plain") {
			if len(r.Relays) != 0 || r.Memory.WorkerPeakPssKiB != 0 || r.CPU.WorkerMicros != 0 {
				t.Errorf("%s: figures for processes the tool does not own: %+v %+v", c.Label, r.Memory, r.CPU)
			}
		} else if r.Memory.WorkerPeakPssKiB <= 0 || r.CPU.WorkerPerQuery <= 0 {
			t.Errorf("%s %s: worker figures missing: %+v %+v", c.Label, c.Mode, r.Memory, r.CPU)
		}
	}
	if rep.HalfPeakRate <= 0 {
		t.Errorf("no half-peak rate")
	}
	// Two coordinators joined by gossip: what they send each other.
	if len(rep.Gossip) != 1 {
		t.Errorf("gossip measurements: %+v, want one (2 coordinators)", rep.Gossip)
	} else if g := rep.Gossip[0]; g.Error != "" || len(g.RestBps) != 2 || g.RestBps[0] <= 0 || g.RestBps[1] <= 0 ||
		g.Changes == 0 || g.ChangeBps[0] <= g.RestBps[0] || g.PropagationMs <= 0 {
		t.Errorf("gossip with 2 coordinators: %+v; want bytes sent by both at rest, more by the first during changes, a propagation time", g)
	}
	for _, d := range rep.Data {
		if d.RoutedAccounts != d.Naccounts || d.DirectAccounts != d.Naccounts || len(d.Problems) > 0 {
			t.Errorf("data check %+v", d)
		}
	}
	md, err := os.ReadFile(files[".md"])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Per core, beside the published runs", "## Peak memory", "## Gossip between coordinators", "p99 added at half of peak",
		filepath.Base(files[".svg"])} {
		if !strings.Contains(string(md), want) {
			t.Errorf("Markdown report lacks %q", want)
		}
	}
	svg, err := os.Open(files[".svg"])
	if err != nil {
		t.Fatal(err)
	}
	defer svg.Close()
	for d := xml.NewDecoder(svg); ; {
		if _, err := d.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("SVG chart: %v", err)
		}
	}
}
