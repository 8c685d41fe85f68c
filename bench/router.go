package bench

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgcluster"
)

// The pgbench scripts of the router benchmark, as shipped in bench/workloads.
//
//go:embed workloads/*.sql
var workloadFiles embed.FS

// Workloads of the router benchmark (bench/workloads).
const (
	workloadPointSelect = "point-select" // point-select.sql: one account by aid, uniform
	workloadMix         = "citus-mix"    // hot.sql@80 uniform.sql@10 tellers.sql@5 branches.sql@5
	workloadWrite       = "write"        // write.sql: one account's balance updated by aid
	workloadScatter     = "scatter"      // scatter.sql: GROUP BY aggregates over 1,000 accounts in every shard
	workloadTPCB        = "tpcb-like"    // pgbench's built-in: account, teller and branch updated in one transaction
)

// allWorkloads are the workloads in report order.
var allWorkloads = []string{workloadPointSelect, workloadMix, workloadWrite, workloadScatter, workloadTPCB}

// tpcbNote says how pgbench's tpcb-like runs through the fleet.
const tpcbNote = "pgbench's tpcb-like updates an account (distributed), a teller and a branch (reference tables, a copy on " +
	"every worker) and inserts into pgbench_history (distributed by aid) in one transaction, which commits on every worker " +
	"it touched with two-phase commit. Through the fleet it runs in every protocol mode on the same pools as the other " +
	"workloads: a transaction across workers holds a connection on each until COMMIT, and the pools keep their last " +
	"connections for transactions that already hold others, so clients beyond the pool wait their turn at the coordinator " +
	"(with 32 clients on 2 workers, pool 8 ran 864 TPS and one connection per client 657: fewer transactions at once " +
	"hold the branch rows' locks for less time)."

// directDB is the database on the first worker holding the plain,
// undistributed pgbench tables that direct runs and PgBouncer use.
const directDB = "direct"

// URLTarget is a system given by URL that the benchmark runs the workloads
// against beside its own cluster: a Citus coordinator, a Neki endpoint,
// plain PostgreSQL, another pgfleet.
type URLTarget struct {
	Name string
	URL  string
}

// ParseURLTarget reads name=URL.
func ParseURLTarget(s string) (URLTarget, error) {
	name, url, ok := strings.Cut(s, "=")
	name = strings.TrimSpace(name)
	if !ok || name == "" || strings.ContainsAny(name, " /|") || url == "" {
		return URLTarget{}, fmt.Errorf("--target %q: want name=postgres://user:password@host:port/db (a name without spaces, / or |)", s)
	}
	return URLTarget{Name: name, URL: url}, nil
}

// RouterOptions configure RunRouter. Scale is that of every data set.
type RouterOptions struct {
	Options
	Shards int // shard_count of pgbench_accounts
	// Workers and Coordinators are the fleet shapes: the first of each is
	// the main one, measured with every workload and mode beside the
	// references; every other combination (the scaling ladder) runs
	// point-select in the first mode.
	Workers      []int
	Coordinators []int
	// CoordinatorProcs is GOMAXPROCS of each coordinator; 0 leaves the
	// coordinator's default (--procs 0: from 1 up to every CPU, as the load
	// needs).
	CoordinatorProcs int
	Modes            []string // pgbench -M modes to run
	Workloads        []string // from allWorkloads
	// Rate runs every configuration open-loop at this many transactions per
	// second (pgbench -R); 0 runs closed-loop.
	Rate float64
	// HalfPeak adds open-loop runs of point-select, directly and through the
	// main fleet, at half of the fleet's closed-loop peak: the latency the
	// coordinator adds when it is not saturated.
	HalfPeak bool
	// Targets are systems given by URL, run with every workload and mode.
	Targets []URLTarget
	// LoadTargets loads (pgbench -i) and distributes the data set on each
	// URL target first; false uses what is there.
	LoadTargets bool
}

// DefaultRouterOptions are the defaults of pgfleet bench router.
func DefaultRouterOptions() RouterOptions {
	return RouterOptions{Options: defaultOptions(), Shards: 32, Workers: []int{1}, Coordinators: []int{1},
		Modes: []string{modePrepared, modeExtended, modeSimple}, Workloads: []string{workloadPointSelect, workloadMix},
		HalfPeak: true, LoadTargets: true}
}

func (o *RouterOptions) validate() error {
	if err := o.Options.validate(); err != nil {
		return err
	}
	switch {
	case o.Shards < 1:
		return errors.New("--shards must be at least 1")
	case len(o.Workers) == 0 || len(o.Coordinators) == 0:
		return errors.New("--workers and --coordinators need at least one count")
	case o.CoordinatorProcs < 0:
		return errors.New("--coordinator-procs must not be negative")
	case o.Rate < 0:
		return errors.New("--rate must not be negative")
	}
	for _, w := range o.Workers {
		if w < 1 || w > 8 {
			return errors.New("--workers must be between 1 and 8")
		}
	}
	for _, c := range o.Coordinators {
		if c < 1 || c > 8 || c > o.Clients {
			return errors.New("--coordinators must be between 1 and 8, and at most --clients")
		}
	}
	if _, err := ParseWorkloads(strings.Join(o.Workloads, ",")); err != nil {
		return err
	}
	_, err := ParseModes(strings.Join(o.Modes, ","))
	return err
}

// ParseModes reads a comma-separated list of pgbench query modes, in the
// order prepared, extended, simple, without duplicates.
func ParseModes(s string) ([]string, error) {
	return parseList("--modes", "pgbench query mode", s, []string{modePrepared, modeExtended, modeSimple})
}

// ParseWorkloads reads a comma-separated list of workloads, in report
// order, without duplicates.
func ParseWorkloads(s string) ([]string, error) {
	return parseList("--workloads", "workload", s, allWorkloads)
}

// parseList reads a comma-separated subset of known, in known's order.
func parseList(flag, what, s string, known []string) ([]string, error) {
	seen := map[string]bool{}
	for _, m := range strings.Split(s, ",") {
		m = strings.TrimSpace(m)
		if m == "" {
			continue
		}
		if !slices.Contains(known, m) {
			return nil, fmt.Errorf("%s: unknown %s %q (want %s)", flag, what, m, strings.Join(known, ", "))
		}
		seen[m] = true
	}
	var out []string
	for _, m := range known {
		if seen[m] {
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no %s given ", flag, what)
	}
	return out, nil
}

// ParseCounts reads a comma-separated list of counts ("1,2,4"), in the
// order given, without duplicates.
func ParseCounts(flag, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s: %q is not a positive count", flag, f)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// naccounts is the number of pgbench_accounts rows at a scale.
func naccounts(scale int) int64 { return 100000 * int64(scale) }

// workloadArgs are pgbench's script arguments for a workload, with the
// scripts in dir.
func workloadArgs(workload, dir string, scale int) []string {
	n := "naccounts=" + strconv.FormatInt(naccounts(scale), 10)
	switch workload {
	case workloadMix:
		return []string{"-f", filepath.Join(dir, "hot.sql") + "@80", "-f", filepath.Join(dir, "uniform.sql") + "@10",
			"-f", filepath.Join(dir, "tellers.sql") + "@5", "-f", filepath.Join(dir, "branches.sql") + "@5",
			"-D", n, "-D", "hot_pct=5"}
	case workloadWrite, workloadScatter:
		return []string{"-f", filepath.Join(dir, workload+".sql"), "-D", n}
	case workloadTPCB:
		return []string{"-b", "tpcb-like"}
	}
	return []string{"-f", filepath.Join(dir, "point-select.sql"), "-D", n}
}

// writeWorkloads writes the embedded pgbench scripts into dir.
func writeWorkloads(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ents, err := workloadFiles.ReadDir("workloads")
	if err != nil {
		return err
	}
	for _, e := range ents {
		b, err := workloadFiles.ReadFile("workloads/" + e.Name())
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// targetURL is the target name of a URL target.
func targetURL(name string) string { return "url:" + name }

// fleetShape is how many workers and coordinators a pgfleet configuration
// runs with.
type fleetShape struct{ Workers, Coordinators int }

func (f fleetShape) variant() string { return fmt.Sprintf("%dw %dc", f.Workers, f.Coordinators) }

// routerConfig is one row of the router report.
type routerConfig struct {
	Target, Workload, Mode string
	Shape                  fleetShape // pgfleet only
	Variant                string
	Rate                   float64
}

// mainConfigs are the configurations of the main shape, in report order:
// for each workload direct and the fleet in every mode, each URL target,
// and for point-select and the mix PgBouncer session (prepared) and
// transaction (extended) mode.
func mainConfigs(o RouterOptions) []routerConfig {
	shape := fleetShape{o.Workers[0], o.Coordinators[0]}
	var out []routerConfig
	for _, w := range o.Workloads {
		for _, m := range o.Modes {
			out = append(out, routerConfig{Target: targetDirect, Workload: w, Mode: m, Rate: o.Rate})
		}
		for _, m := range o.Modes {
			out = append(out, routerConfig{Target: targetPgfleet, Workload: w, Mode: m, Shape: shape, Rate: o.Rate})
		}
		for _, t := range o.Targets {
			for _, m := range o.Modes {
				out = append(out, routerConfig{Target: targetURL(t.Name), Workload: w, Mode: m, Rate: o.Rate})
			}
		}
		if o.NoPgbouncer || (w != workloadPointSelect && w != workloadMix) {
			continue
		}
		for _, m := range o.Modes {
			if ref := pgbouncerReference(m); ref != "" {
				out = append(out, routerConfig{Target: ref, Workload: w, Mode: m, Rate: o.Rate})
			}
		}
	}
	return out
}

// ladderConfigs are the fleet shapes with workers workers other than the
// main one: point-select in the first mode; and tpcb-like in every mode on
// the first coordinator count when the main shape has one worker (its
// target is across workers, against direct on one).
func ladderConfigs(o RouterOptions, workers int) []routerConfig {
	var out []routerConfig
	main := fleetShape{o.Workers[0], o.Coordinators[0]}
	for _, c := range o.Coordinators {
		shape := fleetShape{workers, c}
		if shape == main {
			continue
		}
		out = append(out, routerConfig{Target: targetPgfleet, Workload: workloadPointSelect, Mode: o.Modes[0],
			Shape: shape, Variant: shape.variant(), Rate: o.Rate})
	}
	if shape := (fleetShape{workers, o.Coordinators[0]}); main.Workers < 2 && workers >= 2 && slices.Contains(o.Workloads, workloadTPCB) {
		for _, m := range o.Modes {
			out = append(out, routerConfig{Target: targetPgfleet, Workload: workloadTPCB, Mode: m,
				Shape: shape, Variant: shape.variant(), Rate: o.Rate})
		}
	}
	return out
}

// routerLabel names a configuration in the router report.
func routerLabel(c routerConfig, o RouterOptions) string {
	rate := ""
	if c.Rate > 0 {
		rate = fmt.Sprintf(", open loop %.0f/s", c.Rate)
	}
	switch {
	case c.Target == targetPgfleet:
		procs := ""
		if o.CoordinatorProcs > 0 {
			procs = fmt.Sprintf(", GOMAXPROCS %d", o.CoordinatorProcs)
		}
		return fmt.Sprintf("pgfleet %dw %dc (%d shards, pool %d%s%s)", c.Shape.Workers,
			c.Shape.Coordinators, o.Shards, o.PoolSize, procs, rate)
	case c.Target == targetBouncerSess:
		return fmt.Sprintf("PgBouncer session (pool %d%s)", o.sessionPoolSize(), rate)
	case c.Target == targetBouncerTx:
		return fmt.Sprintf("PgBouncer transaction (pool %d%s)", o.PoolSize, rate)
	case strings.HasPrefix(c.Target, "url:"):
		return strings.TrimPrefix(c.Target, "url:") + " (by URL" + rate + ")"
	}
	return "direct (db " + directDB + rate + ")"
}

// routerReport is the router benchmark's JSON report.
type routerReport struct {
	Tool              string          `json:"tool"`
	StartedAt         time.Time       `json:"started_at"`
	FinishedAt        time.Time       `json:"finished_at"`
	Interrupted       bool            `json:"interrupted,omitempty"`
	Error             string          `json:"error,omitempty"`
	Options           routerRepOpts   `json:"options"`
	Versions          versions        `json:"versions"`
	Machine           machine         `json:"machine"`
	Workers           []workerInfo    `json:"workers"`
	Commands          []commandRecord `json:"setup_commands"`
	SetupCoordinators []*relayRun     `json:"setup_coordinators,omitempty"` // the coordinators pgbench -i and the distribution ran through, one per worker count
	Data              []*dataCheck    `json:"data"`                         // one per worker count
	URLTargets        []urlTargetInfo `json:"url_targets,omitempty"`
	HalfPeakRate      float64         `json:"half_peak_rate,omitempty"`
	Gossip            []gossipResult  `json:"gossip,omitempty"` // per coordinator count above one
	Configs           []*configResult `json:"configs"`
	Targets           []targetCheck   `json:"targets"`
	Notes             []string        `json:"notes,omitempty"`
	Problems          []string        `json:"problems,omitempty"`
	MarkdownOut       string          `json:"markdown_file,omitempty"`
}

type routerRepOpts struct {
	Scale            int      `json:"scale"`
	Naccounts        int64    `json:"naccounts"`
	Clients          int      `json:"clients"`
	Jobs             int      `json:"jobs"`
	DurationSeconds  int      `json:"duration_seconds"`
	WarmupSeconds    int      `json:"warmup_seconds"`
	Runs             int      `json:"runs"`
	PoolSize         int      `json:"pool_size"`
	SessionPoolSize  int      `json:"pgbouncer_session_pool_size"`
	Shards           int      `json:"shards"`
	Workers          []int    `json:"workers"`
	Coordinators     []int    `json:"coordinators"`
	CoordinatorProcs int      `json:"coordinator_gomaxprocs,omitempty"`
	Rate             float64  `json:"rate,omitempty"`
	HalfPeak         bool     `json:"half_peak"`
	Modes            []string `json:"modes"`
	KeepGoing        bool     `json:"keep_going"`
	Executable       string   `json:"pgfleet_executable"`
	Workloads        []string `json:"workloads"` // pgbench arguments of each workload
}

// dataCheck is what the set-up found on the workers, read directly (the
// coordinator does not run count(*) over a distributed table).
type dataCheck struct {
	Workers        int              `json:"workers"`                  // the phase's worker count
	Naccounts      int64            `json:"naccounts"`                // 100000 * scale
	DirectAccounts int64            `json:"direct_accounts"`          // count(*) in db direct
	ShellAccounts  int64            `json:"shell_accounts"`           // rows left in the shell table on worker 1
	Shards         int              `json:"shards"`                   // shards of pgbench_accounts in the catalog
	RoutedAccounts int64            `json:"routed_accounts"`          // rows over all shard tables
	PerWorker      []shardPlacement `json:"per_worker"`               //
	ReferenceRows  map[string]int64 `json:"reference_rows,omitempty"` // "worker1 pgbench_branches" -> rows
	Reads          []readCheck      `json:"reads_through_coordinator"`
	Problems       []string         `json:"problems,omitempty"`
}

type shardPlacement struct {
	Worker string `json:"worker"`
	Addr   string `json:"addr"`
	Shards int    `json:"shards"`
	Rows   int64  `json:"rows"`
}

// readCheck is one query sent through the coordinator during the set-up to
// see that routed reads find their row.
type readCheck struct {
	Protocol string `json:"protocol"` // pgx exec mode
	Query    string `json:"query"`
	Arg      int64  `json:"arg"`
	Rows     int    `json:"rows"`
	Error    string `json:"error,omitempty"`
}

// urlTargetInfo is what the benchmark did with a URL target.
type urlTargetInfo struct {
	Name        string `json:"name"`
	URL         string `json:"url"` // password hidden
	Loaded      bool   `json:"loaded"`
	Distributed bool   `json:"distributed"` // create_distributed_table ran
	Note        string `json:"note,omitempty"`
	Error       string `json:"error,omitempty"`
}

// routerBench is one RunRouter invocation.
type routerBench struct {
	*base
	o         RouterOptions
	rep       *routerReport
	scripts   string // directory of the pgbench scripts
	workers   []*pgcluster.Server
	data      *dataCheck // the current phase's
	routedErr string     // why the routed data is not usable, "" when it is
	// logStart is where each worker's log stood once it was ready: lines
	// before (pgcluster's readiness probe meeting "the database system is
	// starting up") are not the benchmark's problems.
	logStart []int64
	// urlErr: why a URL target's configurations are skipped.
	urlErr map[string]string
}

// RunRouter runs the router benchmark. For each worker count in o.Workers
// it starts that many PostgreSQL workers and, through a pgfleet coordinator,
// loads pgbench's tables into database "postgres", distributing
// pgbench_accounts by aid over o.Shards shards. With the first worker count
// it also loads the plain tables into database "direct" on the first worker
// and runs every workload and mode directly, through the main fleet shape,
// through PgBouncer and against each URL target, then the half-peak
// open-loop runs; with every count it runs the ladder's other shapes. It
// prints a Markdown table with the targets and writes it, with a
// JSON file of every figure and an SVG chart, to o.OutDir. It stops
// everything it started before it returns, also when ctx is cancelled.
func RunRouter(ctx context.Context, o RouterOptions) error {
	if err := o.validate(); err != nil {
		return err
	}
	o.Modes, _ = ParseModes(strings.Join(o.Modes, ","))
	o.Workloads, _ = ParseWorkloads(strings.Join(o.Workloads, ","))
	bb, err := newBase(o.Options, "pgfleet-bench-router-")
	if err != nil {
		return err
	}
	b := &routerBench{base: bb, o: o, scripts: filepath.Join(bb.dir, "workloads"), urlErr: map[string]string{}}
	b.rep = &routerReport{Tool: "pgfleet bench router", StartedAt: time.Now(),
		Options: routerRepOpts{Scale: o.Scale, Naccounts: naccounts(o.Scale), Clients: o.Clients, Jobs: o.Jobs,
			DurationSeconds: durationSeconds(o.Duration), WarmupSeconds: durationSeconds(o.Warmup), Runs: o.Runs, PoolSize: o.PoolSize,
			SessionPoolSize: o.sessionPoolSize(), Shards: o.Shards, Workers: o.Workers, Coordinators: o.Coordinators,
			CoordinatorProcs: o.CoordinatorProcs, Rate: o.Rate, HalfPeak: o.HalfPeak, Modes: o.Modes,
			KeepGoing: o.KeepGoing, Executable: b.exe},
		Versions: b.versions(), Machine: readMachine(b.hz)}
	for _, w := range o.Workloads {
		b.rep.Options.Workloads = append(b.rep.Options.Workloads,
			w+": "+strings.Join(workloadArgs(w, "workloads", o.Scale), " "))
	}
	if slices.Contains(o.Workloads, workloadTPCB) {
		b.rep.Notes = append(b.rep.Notes, tpcbNote)
	}
	return runBenchmark(ctx, b)
}

func (b *routerBench) cleanup() {
	b.stopRelay()
	b.stopWorkers()
	b.removeDir()
}

// stopWorkers stops the current phase's workers and records their logs'
// problems.
func (b *routerBench) stopWorkers() {
	first := len(b.rep.Workers) - len(b.workers)
	for i, w := range b.workers {
		// Read before the stop: what a fast shutdown logs (connections
		// and autovacuum workers ended by the administrator command) is
		// the harness's doing, not the run's.
		if wi := &b.rep.Workers[first+i]; first >= 0 {
			wi.Log, wi.NLog = logProblemsFrom(w.LogFile, b.logStart[i], 10)
		}
		w.Stop()
	}
	b.workers, b.logStart = nil, nil
}

func (b *routerBench) workerAddrs() []string {
	var out []string
	for _, w := range b.workers {
		out = append(out, w.Addr())
	}
	return out
}

func (b *routerBench) run(ctx context.Context) error {
	o := b.o
	if err := b.findBouncer(ctx, &b.rep.Commands, &b.rep.Notes, &b.rep.Versions); err != nil {
		return err
	}
	if err := writeWorkloads(b.scripts); err != nil {
		return fmt.Errorf("writing the pgbench scripts: %w", err)
	}
	if b.bouncer != "" && o.PoolSize < o.Clients {
		b.rep.Notes = append(b.rep.Notes, fmt.Sprintf("PgBouncer session mode runs with pool_size %d (one server "+
			"connection per client), not %d, as in bench relay; transaction mode and the coordinator use %d.",
			o.sessionPoolSize(), o.PoolSize, o.PoolSize))
	}
	for phase, nw := range o.Workers {
		if phase > 0 {
			b.stopWorkers()
		}
		if err := b.startPhase(ctx, phase, nw); err != nil {
			return err
		}
		var configs []routerConfig
		if phase == 0 {
			configs = mainConfigs(o)
			b.loadURLTargets(ctx)
		}
		configs = append(configs, ladderConfigs(o, nw)...)
		crs := b.addConfigs(configs)
		if err := b.runAll(ctx, o.Options, crs, b.runOne); err != nil {
			return err
		}
		if phase == 0 && o.HalfPeak {
			if err := b.runHalfPeak(ctx); err != nil {
				return err
			}
		}
		if phase == 0 && b.routedErr == "" {
			b.runGossip(ctx)
		}
	}
	return nil
}

// startPhase starts nw workers and loads the data sets on them.
func (b *routerBench) startPhase(ctx context.Context, phase, nw int) error {
	o := b.o
	b.routedErr = ""
	for i := 1; i <= nw; i++ {
		name := fmt.Sprintf("worker%d", i)
		b.logf("starting PostgreSQL %s (%d workers)...", name, nw)
		w, err := pgcluster.Start(ctx, pgcluster.Options{Name: fmt.Sprintf("%s-of-%d", name, nw), Dir: b.dir})
		if err != nil {
			return fmt.Errorf("starting PostgreSQL %s: %w", name, err)
		}
		w.Name = name
		b.workers = append(b.workers, w)
		var size int64
		if st, err := os.Stat(w.LogFile); err == nil {
			size = st.Size()
		}
		b.logStart = append(b.logStart, size)
		b.rep.Workers = append(b.rep.Workers, workerInfo{Name: name, Of: nw, Addr: w.Addr(), Pid: w.Pid(), DataDir: w.DataDir,
			LogFile: w.LogFile, Command: procCmdline(w.Pid())})
	}
	b.data = &dataCheck{Workers: nw, Naccounts: naccounts(o.Scale)}
	b.rep.Data = append(b.rep.Data, b.data)
	if phase == 0 {
		if err := b.loadDirect(ctx); err != nil {
			return err
		}
	}
	if err := b.loadRouted(ctx, phase == 0); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		b.routedErr = err.Error()
		b.logf("routed data set-up failed, coordinator rows skipped: %v", err)
	}
	if err := b.checkData(ctx, phase == 0); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// The check could not run: say so, and run the coordinator anyway.
		b.data.Problems = append(b.data.Problems, "data check failed: "+err.Error())
	} else if d := b.data; b.routedErr == "" && (d.RoutedAccounts != d.Naccounts || d.Shards != o.Shards) {
		b.routedErr = fmt.Sprintf("the shards hold %d accounts in %d shards, want %d in %d", d.RoutedAccounts, d.Shards, d.Naccounts, o.Shards)
	}
	return nil
}

// addConfigs adds configurations to the report, marking those that cannot
// run, and returns them.
func (b *routerBench) addConfigs(configs []routerConfig) []*configResult {
	var out []*configResult
	for _, c := range configs {
		cr := &configResult{relayConfig: relayConfig{Target: c.Target, Mode: c.Mode}, Workload: c.Workload,
			Label: routerLabel(c, b.o), Variant: c.Variant, Rate: c.Rate, Median: -1, Runs: []runResult{}}
		switch {
		case c.Target == targetPgfleet:
			cr.Workers, cr.Coordinators = c.Shape.Workers, c.Shape.Coordinators
		case c.Target == targetDirect || isBouncer(c.Target):
			cr.Workers = 1
		}
		switch {
		case isBouncer(c.Target) && b.bouncer == "":
			cr.Skipped = "PgBouncer not available"
		case c.Target == targetPgfleet && b.routedErr != "":
			cr.Skipped = "routed data set-up failed: " + b.routedErr
		case b.urlErr[c.Target] != "":
			cr.Skipped = b.urlErr[c.Target]
		}
		b.rep.Configs = append(b.rep.Configs, cr)
		out = append(out, cr)
	}
	return out
}

// runHalfPeak runs point-select in the first mode open-loop at half of the
// main fleet's closed-loop peak, directly, through the fleet and through
// PgBouncer, so that the latency the coordinator adds is seen below
// saturation and without coordinated omission, beside what a plain relay
// adds.
func (b *routerBench) runHalfPeak(ctx context.Context) error {
	o := b.o
	if o.Rate > 0 {
		return nil // every run is open-loop already
	}
	mode := o.Modes[0]
	var peak float64
	for _, cr := range b.rep.Configs {
		if cr.Target == targetPgfleet && cr.Workload == workloadPointSelect && cr.Mode == mode && cr.Variant == "" {
			if m := medianRun(cr.Runs); m >= 0 {
				peak = cr.Runs[m].Summary.TPS
			}
		}
	}
	if peak <= 0 {
		b.rep.Notes = append(b.rep.Notes, "half-peak runs skipped: no successful closed-loop point-select run through the fleet")
		return nil
	}
	rate := math.Round(peak / 2)
	b.rep.HalfPeakRate = rate
	variant := fmt.Sprintf("rate %.0f", rate)
	shape := fleetShape{o.Workers[0], o.Coordinators[0]}
	configs := []routerConfig{
		{Target: targetDirect, Workload: workloadPointSelect, Mode: mode, Variant: variant, Rate: rate},
		{Target: targetPgfleet, Workload: workloadPointSelect, Mode: mode, Shape: shape, Variant: variant, Rate: rate},
	}
	// PgBouncer at the same rate shows what any relay hop adds on this
	// machine.
	if ref := pgbouncerReference(mode); ref != "" && !o.NoPgbouncer {
		configs = append(configs, routerConfig{Target: ref, Workload: workloadPointSelect, Mode: mode, Variant: variant, Rate: rate})
	}
	crs := b.addConfigs(configs)
	return b.runAll(ctx, o.Options, crs, b.runOne)
}

// runOne runs pgbench once for one configuration.
func (b *routerBench) runOne(ctx context.Context, cr *configResult, run int) runResult {
	o := b.o
	w1 := b.workers[0]
	spec := b.spec(o.Options, cr, run)
	spec.Rate = cr.Rate
	spec.Conn, spec.Database, spec.Script = hostConn(w1.Host, w1.Port, directDB), directDB, workloadArgs(cr.Workload, b.scripts, o.Scale)
	for _, w := range b.workers {
		spec.Workers = append(spec.Workers, &workerProc{Name: w.Name, Pid: w.Pid()})
	}
	switch {
	case cr.Target == targetPgfleet:
		spec.Database = "postgres"
		spec.StartRelays = func(ctx context.Context) ([]*child, []*relayRun, error) {
			return startCoordinators(ctx, b.exe, b.dir, b.workerAddrs(), o.PoolSize, cr.Coordinators, o.CoordinatorProcs)
		}
	case isBouncer(cr.Target):
		bc := o.bouncerFor(cr.Target, w1.Port, []string{directDB})
		spec.StartRelays = func(ctx context.Context) ([]*child, []*relayRun, error) {
			return one(startBouncer(ctx, b.bouncer, b.dir, b.cred, bc))
		}
	case strings.HasPrefix(cr.Target, "url:"):
		spec.Workers = nil // not this tool's processes: no CPU figures
		spec.Conn = []string{b.urlOf(cr.Target)}
	}
	return measureRun(ctx, spec)
}

// urlOf is the URL of a URL target.
func (b *routerBench) urlOf(target string) string {
	for _, t := range b.o.Targets {
		if targetURL(t.Name) == target {
			return t.URL
		}
	}
	return ""
}

// loadURLTargets loads and distributes pgbench's data set on each URL
// target (when o.LoadTargets): pgbench -i through the URL, then the Citus
// functions; a target without them (plain PostgreSQL) keeps local tables.
func (b *routerBench) loadURLTargets(ctx context.Context) {
	for _, t := range b.o.Targets {
		info := urlTargetInfo{Name: t.Name, URL: redactURL(t.URL)}
		if err := b.loadURLTarget(ctx, t, &info); err != nil {
			info.Error = err.Error()
			b.urlErr[targetURL(t.Name)] = "loading the data set failed: " + trunc(err.Error(), 200)
			b.logf("target %s: %v", t.Name, err)
		}
		b.rep.URLTargets = append(b.rep.URLTargets, info)
	}
}

func (b *routerBench) loadURLTarget(ctx context.Context, t URLTarget, info *urlTargetInfo) error {
	cctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	c, err := pgx.Connect(cctx, t.URL)
	if err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	defer c.Close(context.Background())
	if !b.o.LoadTargets {
		var n int64
		if err := c.QueryRow(cctx, "SELECT count(*) FROM pgbench_accounts", pgx.QueryExecModeSimpleProtocol).Scan(&n); err != nil {
			return fmt.Errorf("--load-targets=false, but counting pgbench_accounts failed: %w", err)
		}
		if n != naccounts(b.o.Scale) {
			return fmt.Errorf("--load-targets=false, but pgbench_accounts has %d rows, want %d (scale %d)", n, naccounts(b.o.Scale), b.o.Scale)
		}
		info.Note = "data set already there, not reloaded"
		return nil
	}
	argv := []string{b.pgbench, "-i", "-q", "-s", strconv.Itoa(b.o.Scale), t.URL}
	b.logf("target %s: pgbench -i -q -s %d", t.Name, b.o.Scale)
	rec, out, err := runPgbenchSimple(ctx, argv, 15*time.Minute)
	rec.What, rec.Argv = "pgbench init, target "+t.Name, redactArgv(rec.Argv)
	b.rep.Commands = append(b.rep.Commands, rec)
	if err != nil {
		return fmt.Errorf("pgbench -i: %w\n%s", err, trunc(out, 2000))
	}
	info.Loaded = true
	for i, q := range distributeStatements(b.o.Shards) {
		err := b.exec(cctx, c, "distribute, target "+t.Name, q, q, pgx.QueryExecModeSimpleProtocol)
		var pe *pgconn.PgError
		if i == 0 && errors.As(err, &pe) && pe.Code == "42883" {
			info.Note = "no create_distributed_table (plain PostgreSQL): the tables stay local"
			rec := &b.rep.Commands[len(b.rep.Commands)-1]
			rec.Exit, rec.Error = "42883 (undefined function): taken as plain PostgreSQL", ""
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
		info.Distributed = true
	}
	if !info.Distributed {
		// Analyse for the planner; Citus and pgfleet do not take VACUUM of
		// distributed tables through the coordinator everywhere.
		return b.exec(cctx, c, "maintenance, target "+t.Name, "VACUUM (ANALYZE)", "VACUUM (ANALYZE)", pgx.QueryExecModeSimpleProtocol)
	}
	return nil
}

// redactURL hides the password in a postgres:// URL or a key=value
// connection string.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
			return u.String()
		}
		return s
	}
	if i := strings.Index(s, "password="); i >= 0 {
		j := strings.IndexByte(s[i:], ' ')
		if j < 0 {
			j = len(s) - i
		}
		return s[:i] + "password=xxxxx" + s[i+j:]
	}
	return s
}

// workerConn connects to a worker's database directly.
func workerConn(ctx context.Context, w *pgcluster.Server, db string) (*pgx.Conn, error) {
	return pgx.Connect(ctx, fmt.Sprintf("host=%s port=%d user=postgres dbname=%s sslmode=disable connect_timeout=10", w.Host, w.Port, db))
}

// loadDirect creates database direct on the first worker and runs
// pgbench -i in it.
func (b *routerBench) loadDirect(ctx context.Context) error {
	w := b.workers[0]
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	c, err := workerConn(cctx, w, "postgres")
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", w.Name, err)
	}
	err = b.exec(cctx, c, "direct data", "CREATE DATABASE "+directDB+" (on "+w.Name+")", "CREATE DATABASE "+directDB)
	_ = c.Close(context.Background())
	if err != nil {
		return fmt.Errorf("CREATE DATABASE %s: %w", directDB, err)
	}
	if err := b.pgbenchInit(ctx, &b.rep.Commands, b.o.Scale, w.Host, strconv.Itoa(w.Port), directDB, "direct data", "pgbench init, direct"); err != nil {
		return fmt.Errorf("pgbench -i (direct): %w", err)
	}
	return nil
}

// distributeStatements distribute pgbench's tables as the demo and the Citus
// benchmark do.
func distributeStatements(shards int) []string {
	return []string{
		fmt.Sprintf("SELECT create_distributed_table('pgbench_accounts', 'aid', shard_count => %d)", shards),
		"SELECT create_reference_table('pgbench_branches')",
		"SELECT create_reference_table('pgbench_tellers')",
		"SELECT create_distributed_table('pgbench_history', 'aid', colocate_with => 'pgbench_accounts')",
	}
}

// loadRouted runs pgbench -i through a coordinator, distributes the tables
// with the simple protocol and reads a few rows back through the coordinator
// in every protocol; then it vacuums and analyses the workers' databases so
// the shard tables start as pgbench -i leaves the direct ones.
func (b *routerBench) loadRouted(ctx context.Context, withDirect bool) (err error) {
	o := b.o
	b.logf("starting a coordinator for the set-up...")
	coord, rr, err := startCoordinator(ctx, b.exe, b.dir, b.workerAddrs(), o.PoolSize)
	if err != nil {
		return fmt.Errorf("starting the coordinator: %w", err)
	}
	b.cur = coord
	b.rep.SetupCoordinators = append(b.rep.SetupCoordinators, rr)
	defer func() {
		rr.ExitedEarly = coord.Exited()
		rr.Killed = coord.Stop(syscall.SIGTERM, 10*time.Second)
		rr.Exit = coord.ExitStatus()
		rr.LogProblems, rr.ProblemCount = logProblems(coord.LogPath, 20)
		rr.LogTail = tailFile(coord.LogPath, 4096)
		b.cur = nil
	}()
	host, port, _ := strings.Cut(rr.Addr, ":")
	if err := b.pgbenchInit(ctx, &b.rep.Commands, o.Scale, host, port, "postgres", "routed data", "pgbench init, through the coordinator"); err != nil {
		return fmt.Errorf("pgbench -i through the coordinator: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	url := fmt.Sprintf("host=%s port=%s user=postgres dbname=postgres sslmode=disable connect_timeout=10", host, port)
	c, err := pgx.Connect(cctx, url)
	if err != nil {
		return fmt.Errorf("connecting to the coordinator: %w", err)
	}
	defer c.Close(context.Background())
	for _, q := range distributeStatements(o.Shards) {
		b.logf("routed data: %s", q)
		if err := b.exec(cctx, c, "distribute, through the coordinator", q, q, pgx.QueryExecModeSimpleProtocol); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	b.readChecks(cctx, c)

	for _, w := range b.workers {
		for _, db := range []string{"postgres", directDB} {
			if db == directDB && (w != b.workers[0] || !withDirect) {
				continue
			}
			if err := b.vacuum(cctx, w, db); err != nil {
				return err
			}
		}
	}
	return nil
}

// readChecks reads one account, teller and branch through the coordinator in
// each pgx protocol and records how many rows came back (one is right; the
// shell table the coordinator keeps on worker 1 is empty, so a statement not
// routed to a shard finds none).
func (b *routerBench) readChecks(ctx context.Context, c *pgx.Conn) {
	n := naccounts(b.o.Scale)
	type q struct {
		sql string
		arg int64
	}
	queries := []q{
		{"SELECT abalance FROM pgbench_accounts WHERE aid = $1", 1},
		{"SELECT abalance FROM pgbench_accounts WHERE aid = $1", n/2 + 1},
		{"SELECT abalance FROM pgbench_accounts WHERE aid = $1", n},
		{"SELECT tbalance FROM pgbench_tellers WHERE tid = $1", 1},
		{"SELECT bbalance FROM pgbench_branches WHERE bid = $1", 1},
	}
	modes := []struct {
		name string
		mode pgx.QueryExecMode
	}{
		{"prepared (named statement)", pgx.QueryExecModeCacheStatement},
		{"extended (unnamed statement)", pgx.QueryExecModeExec},
		{"simple", pgx.QueryExecModeSimpleProtocol},
	}
	for _, m := range modes {
		for _, x := range queries {
			rc := readCheck{Protocol: m.name, Query: x.sql, Arg: x.arg}
			rows, err := c.Query(ctx, x.sql, m.mode, x.arg)
			if err == nil {
				for rows.Next() {
					rc.Rows++
				}
				rows.Close()
				err = rows.Err()
			}
			if err != nil {
				rc.Error = err.Error()
			}
			if rc.Error != "" || rc.Rows != 1 {
				b.data.Problems = append(b.data.Problems, fmt.Sprintf("read through the coordinator, %s: %s with %d: %d rows, want 1%s",
					m.name, x.sql, x.arg, rc.Rows, prefixed("; error: ", rc.Error)))
			}
			b.data.Reads = append(b.data.Reads, rc)
		}
	}
}

func prefixed(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}

// exec runs q on c and records it as what, shown as shown.
func (b *routerBench) exec(ctx context.Context, c *pgx.Conn, what, shown, q string, args ...any) error {
	start := time.Now()
	_, err := c.Exec(ctx, q, args...)
	rec := commandRecord{What: what, Argv: []string{shown}, Seconds: time.Since(start).Seconds()}
	if err != nil {
		rec.Error = err.Error()
	}
	b.rep.Commands = append(b.rep.Commands, rec)
	return err
}

// vacuum runs VACUUM ANALYZE and CHECKPOINT in a worker's database.
func (b *routerBench) vacuum(ctx context.Context, w *pgcluster.Server, db string) error {
	c, err := workerConn(ctx, w, db)
	if err != nil {
		return fmt.Errorf("connecting to %s/%s: %w", w.Name, db, err)
	}
	defer c.Close(context.Background())
	for _, q := range []string{"VACUUM (ANALYZE)", "CHECKPOINT"} {
		if err := b.exec(ctx, c, "maintenance", q+" (on "+w.Name+"/"+db+")", q); err != nil {
			return fmt.Errorf("%s on %s/%s: %w", q, w.Name, db, err)
		}
	}
	return nil
}

// checkData counts the rows on the workers directly: direct's accounts, the
// shell table, and pgbench_accounts' shard tables per worker as the catalog
// (the citus_shards view on worker 1) places them.
func (b *routerBench) checkData(ctx context.Context, direct bool) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	d := b.data
	w1 := b.workers[0]
	if direct {
		dc, err := workerConn(ctx, w1, directDB)
		if err != nil {
			return fmt.Errorf("connecting to %s/%s: %w", w1.Name, directDB, err)
		}
		err = dc.QueryRow(ctx, "SELECT count(*) FROM pgbench_accounts").Scan(&d.DirectAccounts)
		_ = dc.Close(context.Background())
		if err != nil {
			return fmt.Errorf("counting %s's accounts: %w", directDB, err)
		}
		if d.DirectAccounts != d.Naccounts {
			d.Problems = append(d.Problems, fmt.Sprintf("db %s has %d accounts, want %d", directDB, d.DirectAccounts, d.Naccounts))
		}
	}
	if b.routedErr != "" {
		return nil
	}
	mc, err := workerConn(ctx, w1, "postgres")
	if err != nil {
		return fmt.Errorf("connecting to %s/postgres: %w", w1.Name, err)
	}
	defer mc.Close(context.Background())
	if err := mc.QueryRow(ctx, "SELECT count(*) FROM public.pgbench_accounts").Scan(&d.ShellAccounts); err != nil {
		return fmt.Errorf("counting the shell table's rows on %s: %w", w1.Name, err)
	}
	rows, err := mc.Query(ctx, `SELECT shard_name, nodeport, table_name::text FROM citus_shards
		WHERE table_name IN ('pgbench_accounts'::regclass, 'pgbench_branches'::regclass, 'pgbench_tellers'::regclass)
		ORDER BY shardid, nodeport`)
	if err != nil {
		return fmt.Errorf("reading citus_shards on %s: %w", w1.Name, err)
	}
	type placed struct {
		shard, table string
		port         int
	}
	var all []placed
	for rows.Next() {
		var p placed
		var port int64
		if err := rows.Scan(&p.shard, &port, &p.table); err != nil {
			rows.Close()
			return err
		}
		p.port = int(port)
		all = append(all, p)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading citus_shards on %s: %w", w1.Name, err)
	}
	shardIDs := map[string]bool{}
	for _, w := range b.workers {
		sp := shardPlacement{Worker: w.Name, Addr: w.Addr()}
		var tables []placed
		for _, p := range all {
			if p.port == w.Port {
				tables = append(tables, p)
			}
		}
		counts, err := countRows(ctx, w, tables, func(p placed) string { return p.shard })
		if err != nil {
			return err
		}
		for i, p := range tables {
			if p.table == "pgbench_accounts" {
				sp.Shards++
				sp.Rows += counts[i]
				shardIDs[p.shard] = true
				continue
			}
			if d.ReferenceRows == nil {
				d.ReferenceRows = map[string]int64{}
			}
			d.ReferenceRows[w.Name+" "+p.table] = counts[i]
		}
		d.RoutedAccounts += sp.Rows
		d.PerWorker = append(d.PerWorker, sp)
	}
	d.Shards = len(shardIDs)
	if d.ShellAccounts != 0 {
		d.Problems = append(d.Problems, fmt.Sprintf("the shell table pgbench_accounts on %s still has %d rows", w1.Name, d.ShellAccounts))
	}
	want := map[string]int64{"pgbench_branches": int64(b.o.Scale), "pgbench_tellers": 10 * int64(b.o.Scale)}
	for _, w := range b.workers {
		for t, n := range want {
			if got, ok := d.ReferenceRows[w.Name+" "+t]; !ok || got != n {
				d.Problems = append(d.Problems, fmt.Sprintf("reference table %s on %s: %d rows (placed: %v), want %d", t, w.Name, got, ok, n))
			}
		}
	}
	return nil
}

// countRows counts the rows of tables (name(t): schema.table, or a table
// in public) in a worker's postgres database.
func countRows[T any](ctx context.Context, w *pgcluster.Server, tables []T, name func(T) string) ([]int64, error) {
	if len(tables) == 0 {
		return nil, nil
	}
	c, err := workerConn(ctx, w, "postgres")
	if err != nil {
		return nil, fmt.Errorf("connecting to %s/postgres: %w", w.Name, err)
	}
	defer c.Close(context.Background())
	out := make([]int64, len(tables))
	for i, t := range tables {
		ident := pgx.Identifier{"public", name(t)}
		if schema, rel, ok := strings.Cut(name(t), "."); ok {
			ident = pgx.Identifier{schema, rel}
		}
		if err := c.QueryRow(ctx, "SELECT count(*) FROM "+ident.Sanitize()).Scan(&out[i]); err != nil {
			return nil, fmt.Errorf("counting %s on %s: %w", name(t), w.Name, err)
		}
	}
	return out, nil
}
