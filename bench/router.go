package bench

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgcluster"
)

// The pgbench scripts of the router benchmark, as shipped in bench/workloads.
//
//go:embed workloads/*.sql
var workloadFiles embed.FS

// Workloads of the router benchmark.
const (
	workloadPointSelect = "point-select" // workloads/point-select.sql: one account by aid, uniform
	workloadMix         = "citus-mix"    // hot.sql@80 uniform.sql@10 tellers.sql@5 branches.sql@5
)

// directDB is the database on the first worker holding the plain,
// undistributed pgbench tables that direct runs and PgBouncer use.
const directDB = "direct"

// RouterOptions configure RunRouter. Scale is that of both data sets.
type RouterOptions struct {
	Options
	Shards  int      // shard_count of pgbench_accounts
	Workers int      // PostgreSQL workers the shards are spread over
	Modes   []string // pgbench -M modes to run
}

// DefaultRouterOptions are the defaults of pgfleet bench router.
func DefaultRouterOptions() RouterOptions {
	return RouterOptions{Options: defaultOptions(), Shards: 32, Workers: 1,
		Modes: []string{modePrepared, modeExtended, modeSimple}}
}

func (o *RouterOptions) validate() error {
	if err := o.Options.validate(); err != nil {
		return err
	}
	switch {
	case o.Shards < 1:
		return errors.New("--shards must be at least 1")
	case o.Workers < 1 || o.Workers > 8:
		return errors.New("--workers must be between 1 and 8")
	}
	_, err := ParseModes(strings.Join(o.Modes, ","))
	return err
}

// ParseModes reads a comma-separated list of pgbench query modes, in the
// order prepared, extended, simple, without duplicates.
func ParseModes(s string) ([]string, error) {
	seen := map[string]bool{}
	for _, m := range strings.Split(s, ",") {
		m = strings.TrimSpace(m)
		switch m {
		case "":
		case modePrepared, modeExtended, modeSimple:
			seen[m] = true
		default:
			return nil, fmt.Errorf("--modes: unknown pgbench query mode %q (want prepared, extended or simple)", m)
		}
	}
	var out []string
	for _, m := range []string{modePrepared, modeExtended, modeSimple} {
		if seen[m] {
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("--modes: no query mode given")
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

// routerConfig is one row of the router report.
type routerConfig struct {
	Target, Workload, Mode string
}

// routerConfigs are the configurations in report order: for each workload
// direct and the coordinator in every mode, and for point-select PgBouncer
// session (prepared) and transaction (extended) mode.
func routerConfigs(modes []string) []routerConfig {
	var out []routerConfig
	for _, w := range []string{workloadPointSelect, workloadMix} {
		for _, t := range []string{targetDirect, targetPgfleet} {
			for _, m := range modes {
				out = append(out, routerConfig{t, w, m})
			}
		}
		if w != workloadPointSelect {
			continue
		}
		for _, m := range modes {
			if ref := pgbouncerReference(m); ref != "" {
				out = append(out, routerConfig{ref, w, m})
			}
		}
	}
	return out
}

// routerLabel names a target in the router report.
func routerLabel(target string, o RouterOptions, sessionPool int) string {
	switch target {
	case targetPgfleet:
		if o.Workers > 1 {
			return fmt.Sprintf("pgfleet router (%d workers, %d shards, pool %d)", o.Workers, o.Shards, o.PoolSize)
		}
		return fmt.Sprintf("pgfleet router (%d shards, pool %d)", o.Shards, o.PoolSize)
	case targetBouncerSess:
		return fmt.Sprintf("PgBouncer session (pool %d)", sessionPool)
	case targetBouncerTx:
		return fmt.Sprintf("PgBouncer transaction (pool %d)", o.PoolSize)
	}
	return "direct (db " + directDB + ")"
}

// routerReport is the router benchmark's JSON report.
type routerReport struct {
	Tool             string          `json:"tool"`
	StartedAt        time.Time       `json:"started_at"`
	FinishedAt       time.Time       `json:"finished_at"`
	Interrupted      bool            `json:"interrupted,omitempty"`
	Error            string          `json:"error,omitempty"`
	Options          routerRepOpts   `json:"options"`
	Versions         versions        `json:"versions"`
	Machine          machine         `json:"machine"`
	Workers          []workerInfo    `json:"workers"`
	Commands         []commandRecord `json:"setup_commands"`
	SetupCoordinator *relayRun       `json:"setup_coordinator,omitempty"` // the coordinator pgbench -i and the distribution ran through
	Data             dataCheck       `json:"data"`
	Configs          []*configResult `json:"configs"`
	Targets          []targetCheck   `json:"targets"`
	Notes            []string        `json:"notes,omitempty"`
	Problems         []string        `json:"problems,omitempty"`
	MarkdownOut      string          `json:"markdown_file,omitempty"`
}

type routerRepOpts struct {
	Scale           int      `json:"scale"`
	Naccounts       int64    `json:"naccounts"`
	Clients         int      `json:"clients"`
	Jobs            int      `json:"jobs"`
	DurationSeconds int      `json:"duration_seconds"`
	Runs            int      `json:"runs"`
	PoolSize        int      `json:"pool_size"`
	SessionPoolSize int      `json:"pgbouncer_session_pool_size"`
	Shards          int      `json:"shards"`
	Workers         int      `json:"workers"`
	Modes           []string `json:"modes"`
	KeepGoing       bool     `json:"keep_going"`
	Executable      string   `json:"pgfleet_executable"`
	Workloads       []string `json:"workloads"` // pgbench arguments of each workload
}

// dataCheck is what the set-up found on the workers, read directly (the
// coordinator does not run count(*) over a distributed table).
type dataCheck struct {
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

// routerBench is one RunRouter invocation.
type routerBench struct {
	*base
	o         RouterOptions
	rep       *routerReport
	scripts   string // directory of the pgbench scripts
	workers   []*pgcluster.Server
	routedErr string // why the routed data is not usable, "" when it is
	// logStart is where each worker's log stood once it was ready: lines
	// before (pgcluster's readiness probe meeting "the database system is
	// starting up") are not the benchmark's problems.
	logStart []int64
}

// RunRouter runs the router benchmark: it starts o.Workers PostgreSQL
// workers, loads pgbench's tables plainly into database "direct" on the first
// one and, through a pgfleet coordinator, into database "postgres" where it
// distributes pgbench_accounts by aid over o.Shards shards; then it runs
// routed point queries (point-select.sql and the Citus mix) directly against
// "direct", through the coordinator, and point-select through PgBouncer. It
// prints a Markdown table with the targets and writes it, with a JSON
// file of every figure, to o.OutDir. It stops everything it started before it
// returns, also when ctx is cancelled.
func RunRouter(ctx context.Context, o RouterOptions) error {
	if err := o.validate(); err != nil {
		return err
	}
	o.Modes, _ = ParseModes(strings.Join(o.Modes, ","))
	bb, err := newBase(o.Options, "pgfleet-bench-router-")
	if err != nil {
		return err
	}
	b := &routerBench{base: bb, o: o, scripts: filepath.Join(bb.dir, "workloads")}
	b.rep = &routerReport{Tool: "pgfleet bench router", StartedAt: time.Now(),
		Options: routerRepOpts{Scale: o.Scale, Naccounts: naccounts(o.Scale), Clients: o.Clients, Jobs: o.Jobs,
			DurationSeconds: durationSeconds(o.Duration), Runs: o.Runs, PoolSize: o.PoolSize,
			SessionPoolSize: o.sessionPoolSize(), Shards: o.Shards, Workers: o.Workers, Modes: o.Modes,
			KeepGoing: o.KeepGoing, Executable: b.exe},
		Versions: b.versions(), Machine: readMachine(b.hz), Data: dataCheck{Naccounts: naccounts(o.Scale)}}
	for _, w := range []string{workloadPointSelect, workloadMix} {
		b.rep.Options.Workloads = append(b.rep.Options.Workloads,
			w+": "+strings.Join(workloadArgs(w, "workloads", o.Scale), " "))
	}
	return runBenchmark(ctx, b)
}

func (b *routerBench) cleanup() {
	b.stopRelay()
	for i, w := range b.workers {
		w.Stop()
		if i < len(b.rep.Workers) {
			b.rep.Workers[i].Log, b.rep.Workers[i].NLog = logProblemsFrom(w.LogFile, b.logStart[i], 10)
		}
	}
	b.workers = nil
	b.removeDir()
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

	for i := 1; i <= o.Workers; i++ {
		name := fmt.Sprintf("worker%d", i)
		b.logf("starting PostgreSQL %s...", name)
		w, err := pgcluster.Start(ctx, pgcluster.Options{Name: name, Dir: b.dir})
		if err != nil {
			return fmt.Errorf("starting PostgreSQL %s: %w", name, err)
		}
		b.workers = append(b.workers, w)
		var size int64
		if st, err := os.Stat(w.LogFile); err == nil {
			size = st.Size()
		}
		b.logStart = append(b.logStart, size)
		b.rep.Workers = append(b.rep.Workers, workerInfo{Name: name, Addr: w.Addr(), Pid: w.Pid(), DataDir: w.DataDir,
			LogFile: w.LogFile, Command: procCmdline(w.Pid())})
	}
	if err := b.loadDirect(ctx); err != nil {
		return err
	}
	if err := b.loadRouted(ctx); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		b.routedErr = err.Error()
		b.logf("routed data set-up failed, coordinator rows skipped: %v", err)
	}
	if err := b.checkData(ctx); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// The check could not run: say so, and run the coordinator anyway.
		b.rep.Data.Problems = append(b.rep.Data.Problems, "data check failed: "+err.Error())
	} else if d := b.rep.Data; b.routedErr == "" && (d.RoutedAccounts != d.Naccounts || d.Shards != o.Shards) {
		b.routedErr = fmt.Sprintf("the shards hold %d accounts in %d shards, want %d in %d", d.RoutedAccounts, d.Shards, d.Naccounts, o.Shards)
	}

	for _, c := range routerConfigs(o.Modes) {
		cr := &configResult{relayConfig: relayConfig{Target: c.Target, Mode: c.Mode}, Workload: c.Workload,
			Label: routerLabel(c.Target, o, o.sessionPoolSize()), Median: -1, Runs: []runResult{}}
		switch {
		case isBouncer(c.Target) && b.bouncer == "":
			cr.Skipped = "PgBouncer not available"
		case c.Target == targetPgfleet && b.routedErr != "":
			cr.Skipped = "routed data set-up failed: " + b.routedErr
		}
		b.rep.Configs = append(b.rep.Configs, cr)
	}
	if b.bouncer != "" && o.PoolSize < o.Clients {
		b.rep.Notes = append(b.rep.Notes, fmt.Sprintf("PgBouncer session mode runs with pool_size %d (one server "+
			"connection per client), not %d, as in bench relay; transaction mode and the coordinator use %d.",
			o.sessionPoolSize(), o.PoolSize, o.PoolSize))
	}
	return b.runAll(ctx, o.Options, b.rep.Configs, b.runOne)
}

// runOne runs pgbench once for one configuration.
func (b *routerBench) runOne(ctx context.Context, cr *configResult, run int) runResult {
	o := b.o
	w1 := b.workers[0]
	spec := b.spec(o.Options, cr, run)
	spec.Host, spec.Port, spec.Database, spec.Script = w1.Host, w1.Port, directDB, workloadArgs(cr.Workload, b.scripts, o.Scale)
	for _, w := range b.workers {
		spec.Workers = append(spec.Workers, &workerProc{Name: w.Name, Pid: w.Pid()})
	}
	switch cr.Target {
	case targetPgfleet:
		spec.Database = "postgres"
		spec.StartRelay = func(ctx context.Context) (*child, *relayRun, error) {
			return startCoordinator(ctx, b.exe, b.dir, b.workerAddrs(), o.PoolSize)
		}
	case targetBouncerSess, targetBouncerTx:
		bc := o.bouncerFor(cr.Target, w1.Port, []string{directDB})
		spec.StartRelay = func(ctx context.Context) (*child, *relayRun, error) {
			return startBouncer(ctx, b.bouncer, b.dir, b.cred, bc)
		}
	}
	return measureRun(ctx, spec)
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
	}
}

// loadRouted runs pgbench -i through a coordinator, distributes the tables
// with the simple protocol and reads a few rows back through the coordinator
// in every protocol; then it vacuums and analyses the workers' databases so
// the shard tables start as pgbench -i leaves the direct ones.
func (b *routerBench) loadRouted(ctx context.Context) (err error) {
	o := b.o
	b.logf("starting a coordinator for the set-up...")
	coord, rr, err := startCoordinator(ctx, b.exe, b.dir, b.workerAddrs(), o.PoolSize)
	if err != nil {
		return fmt.Errorf("starting the coordinator: %w", err)
	}
	b.cur = coord
	b.rep.SetupCoordinator = rr
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
			if db == directDB && w != b.workers[0] {
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
				b.rep.Data.Problems = append(b.rep.Data.Problems, fmt.Sprintf("read through the coordinator, %s: %s with %d: %d rows, want 1%s",
					m.name, x.sql, x.arg, rc.Rows, prefixed("; error: ", rc.Error)))
			}
			b.rep.Data.Reads = append(b.rep.Data.Reads, rc)
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
func (b *routerBench) checkData(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	d := &b.rep.Data
	w1 := b.workers[0]
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

// countRows counts the rows of tables (public.<name(t)>) in a worker's
// postgres database.
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
		if err := c.QueryRow(ctx, "SELECT count(*) FROM public."+pgx.Identifier{name(t)}.Sanitize()).Scan(&out[i]); err != nil {
			return nil, fmt.Errorf("counting %s on %s: %w", name(t), w.Name, err)
		}
	}
	return out, nil
}
