package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pgfleet/pgfleet/internal/pgcluster"
)

// RelayOptions configure RunRelay.
type RelayOptions struct {
	Options
}

// DefaultRelayOptions are the defaults of pgfleet bench relay.
func DefaultRelayOptions() RelayOptions { return RelayOptions{defaultOptions()} }

// Query modes of pgbench -M.
const (
	modePrepared = "prepared"
	modeExtended = "extended"
	modeSimple   = "simple"
)

// Targets pgbench connects to.
const (
	targetDirect      = "direct"
	targetPgfleet     = "pgfleet"
	targetBouncerSess = "pgbouncer-session"
	targetBouncerTx   = "pgbouncer-transaction"
)

// relayConfig is one row of the report.
type relayConfig struct {
	Target string `json:"target"` // direct, pgfleet, pgbouncer-session, pgbouncer-transaction
	Mode   string `json:"mode"`   // pgbench -M
}

func (c relayConfig) key() string { return configKey(c.Target, "", c.Mode, "") }

// configKey names a configuration: target/mode, or target/workload/mode
// when there is a workload (router benchmark), then /variant when there is
// one (another fleet shape, or an open-loop rate).
func configKey(target, workload, mode, variant string) string {
	k := target + "/" + mode
	if workload != "" {
		k = target + "/" + workload + "/" + mode
	}
	if variant != "" {
		k += "/" + variant
	}
	return k
}

func (c relayConfig) label(pool, sessionPool int) string {
	switch c.Target {
	case targetPgfleet:
		return fmt.Sprintf("pgfleet (pool %d)", pool)
	case targetBouncerSess:
		return fmt.Sprintf("PgBouncer session (pool %d)", sessionPool)
	case targetBouncerTx:
		return fmt.Sprintf("PgBouncer transaction (pool %d)", pool)
	}
	return "direct PostgreSQL"
}

// relayConfigs are the configurations in report order.
func relayConfigs() []relayConfig {
	return []relayConfig{
		{targetDirect, modePrepared}, {targetDirect, modeExtended}, {targetDirect, modeSimple},
		{targetPgfleet, modePrepared}, {targetPgfleet, modeExtended}, {targetPgfleet, modeSimple},
		{targetBouncerSess, modePrepared}, {targetBouncerTx, modeExtended},
	}
}

// commandRecord is a command the benchmark ran.
type commandRecord struct {
	What    string   `json:"what"`
	Argv    []string `json:"argv"`
	Env     []string `json:"env,omitempty"` // variables set for it (PG* variables are removed)
	User    string   `json:"os_user,omitempty"`
	Seconds float64  `json:"seconds,omitempty"`
	Exit    string   `json:"exit,omitempty"`
	Error   string   `json:"error,omitempty"`
}

// cpuFigures are one run's CPU measurements. Micros are CPU microseconds
// during the run (user+system); PerQuery divides them by the transactions
// pgbench completed (one query each with -S).
type cpuFigures struct {
	RelayBeforeTicks  uint64      `json:"relay_before_ticks,omitempty"` // utime+stime of the relay process
	RelayAfterTicks   uint64      `json:"relay_after_ticks,omitempty"`
	RelayMicros       float64     `json:"relay_us"`
	WorkerBefore      treeCPU     `json:"worker_before"` // postmaster, reaped and live children
	WorkerAfter       treeCPU     `json:"worker_after"`
	WorkerMicros      float64     `json:"worker_us"`
	BackendsLeft      int         `json:"backends_left"` // children of the run not reaped within 2 s
	PgbenchUserMicros float64     `json:"pgbench_user_us"`
	PgbenchSysMicros  float64     `json:"pgbench_sys_us"`
	PgbenchMicros     float64     `json:"pgbench_us"`
	PerWorker         []workerCPU `json:"per_worker,omitempty"` // when more than one worker is measured
	RelayPerQuery     float64     `json:"relay_us_per_query"`
	WorkerPerQuery    float64     `json:"worker_us_per_query"`
	PgbenchPerQuery   float64     `json:"pgbench_us_per_query"`
}

// runResult is everything about one pgbench run.
type runResult struct {
	Target       string          `json:"target"`
	Mode         string          `json:"mode"`
	Workload     string          `json:"workload,omitempty"` // router benchmark: point-select or citus-mix
	Run          int             `json:"run"`                // 1-based
	Rate         float64         `json:"rate,omitempty"`     // pgbench -R over all clients; 0 closed-loop
	StartedAt    time.Time       `json:"started_at"`
	WallSeconds  float64         `json:"wall_seconds"` // pgbench start to exit
	Pgbench      []commandRecord `json:"pgbench"`      // one per pgbench process (one per coordinator)
	ExitCode     int             `json:"pgbench_exit_code"`
	Stdout       string          `json:"pgbench_stdout"`
	Stderr       string          `json:"pgbench_stderr,omitempty"` // at most the last 4 KB
	Summary      pgbenchSummary  `json:"summary"`
	TxLog        *txLog          `json:"tx_log,omitempty"`
	Aborts       []clientAbort   `json:"aborted_clients,omitempty"` // the first few aborted clients, with what the log says of them
	Latency      latencyStats    `json:"latency"`                   // from the per-transaction logs
	CDF          []cdfPoint      `json:"latency_cdf,omitempty"`     // the latency distribution, from the same logs (median runs only)
	CPU          cpuFigures      `json:"cpu"`
	Memory       memFigures      `json:"memory"`
	Relays       []*relayRun     `json:"relays,omitempty"`
	Error        string          `json:"error,omitempty"`
	LoadAvgAfter string          `json:"loadavg_after,omitempty"`
}

// relayRun is the relay process of one run.
type relayRun struct {
	Command      commandRecord `json:"command"`
	Config       string        `json:"config,omitempty"` // pgbouncer.ini
	Pid          int           `json:"pid"`
	Addr         string        `json:"addr"`
	Metrics      string        `json:"metrics,omitempty"` // a coordinator's /metrics address
	Exit         string        `json:"exit"`
	Killed       bool          `json:"killed,omitempty"` // did not stop on SIGTERM within 10 s
	ExitedEarly  bool          `json:"exited_early,omitempty"`
	LogProblems  []string      `json:"log_problems,omitempty"` // warnings and errors from its log
	ProblemCount int           `json:"log_problem_count"`
	LogTail      string        `json:"log_tail,omitempty"`     // its log's last 2 KB
	PeakRSSKiB   int64         `json:"peak_rss_kib,omitempty"` // VmHWM at the end of the run
}

// memFigures are one run's peak memory figures, in KiB.
type memFigures struct {
	// RelayPeakRSSKiB sums the relays' peak resident sets (VmHWM).
	RelayPeakRSSKiB int64 `json:"relay_peak_rss_kib,omitempty"`
	// WorkerPeakPssKiB is the largest sum, over the samples taken once a
	// second, of the proportional set size of every worker process (shared
	// memory counted once overall, not once per backend).
	WorkerPeakPssKiB int64 `json:"worker_peak_pss_kib,omitempty"`
	// PgbenchMaxRSSKiB is the largest pgbench process's peak resident set.
	PgbenchMaxRSSKiB int64 `json:"pgbench_max_rss_kib,omitempty"`
}

// configResult is one configuration with all its runs.
type configResult struct {
	relayConfig
	Workload string `json:"workload,omitempty"` // router benchmark: point-select, citus-mix, ...
	Label    string `json:"label"`
	// Variant tells configurations of one target, workload and mode apart:
	// "" for the main one; a fleet shape of the ladder ("2w 3c") or an
	// open-loop rate ("rate 5000"). Rows compare with references of the
	// same variant.
	Variant      string      `json:"variant,omitempty"`
	Workers      int         `json:"workers,omitempty"`      // PostgreSQL workers holding the shards
	Coordinators int         `json:"coordinators,omitempty"` // coordinators pgbench's clients are split over
	Rate         float64     `json:"rate,omitempty"`         // pgbench -R, 0 closed-loop
	Runs         []runResult `json:"runs"`
	Median       int         `json:"median_run"` // index into Runs; -1 when no run succeeded
	Skipped      string      `json:"skipped,omitempty"`
	Row          *tableRow   `json:"row,omitempty"`
}

// relayReport is the JSON report.
type relayReport struct {
	Tool        string          `json:"tool"`
	StartedAt   time.Time       `json:"started_at"`
	FinishedAt  time.Time       `json:"finished_at"`
	Interrupted bool            `json:"interrupted,omitempty"`
	Error       string          `json:"error,omitempty"`
	Options     reportOptions   `json:"options"`
	Versions    versions        `json:"versions"`
	Machine     machine         `json:"machine"`
	Worker      workerInfo      `json:"worker"`
	Commands    []commandRecord `json:"setup_commands"`
	Configs     []*configResult `json:"configs"`
	Notes       []string        `json:"notes,omitempty"`
	Problems    []string        `json:"problems,omitempty"`
	MarkdownOut string          `json:"markdown_file,omitempty"`
}

type reportOptions struct {
	Scale           int    `json:"scale"`
	Clients         int    `json:"clients"`
	Jobs            int    `json:"jobs"`
	DurationSeconds int    `json:"duration_seconds"`
	WarmupSeconds   int    `json:"warmup_seconds"`
	Runs            int    `json:"runs"`
	PoolSize        int    `json:"pool_size"`
	KeepGoing       bool   `json:"keep_going"`
	Executable      string `json:"pgfleet_executable"`
}

type workerInfo struct {
	Name    string   `json:"name,omitempty"` // router benchmark: worker1, worker2, ...
	Of      int      `json:"of,omitempty"`   // router benchmark: of how many workers (the ladder's phase)
	Addr    string   `json:"addr"`
	Pid     int      `json:"postmaster_pid"`
	Command []string `json:"command"` // from /proc/<pid>/cmdline
	DataDir string   `json:"data_dir"`
	LogFile string   `json:"log_file"`
	Log     []string `json:"log_problems,omitempty"` // warning and error lines of its log (the first 10)
	NLog    int      `json:"log_problem_count"`
}

// relayBench is one RunRelay invocation.
type relayBench struct {
	*base
	o      RelayOptions
	rep    *relayReport
	worker *pgcluster.Server
}

// RunRelay runs the relay benchmark: it starts one PostgreSQL worker,
// initialises pgbench's tables once and runs pgbench -S against the worker
// directly, through a pgfleet coordinator process and through PgBouncer; it
// prints a Markdown table and writes it, with a JSON file of every figure, to
// o.OutDir. It stops everything it started before it returns, also when ctx
// is cancelled (Ctrl-C).
func RunRelay(ctx context.Context, o RelayOptions) error {
	if err := o.validate(); err != nil {
		return err
	}
	bb, err := newBase(o.Options, "pgfleet-bench-")
	if err != nil {
		return err
	}
	b := &relayBench{base: bb, o: o}
	b.rep = &relayReport{Tool: "pgfleet bench relay", StartedAt: time.Now(),
		Options: reportOptions{Scale: o.Scale, Clients: o.Clients, Jobs: o.Jobs, DurationSeconds: durationSeconds(o.Duration), WarmupSeconds: durationSeconds(o.Warmup),
			Runs: o.Runs, PoolSize: o.PoolSize, KeepGoing: o.KeepGoing, Executable: b.exe},
		Versions: b.versions(), Machine: readMachine(b.hz)}
	return runBenchmark(ctx, b)
}

func (b *relayBench) cleanup() {
	b.stopRelay()
	if b.worker != nil {
		b.worker.Stop()
		b.rep.Worker.Log, b.rep.Worker.NLog = logProblems(b.worker.LogFile, 10)
		b.worker = nil
	}
	b.removeDir()
}

func (b *relayBench) run(ctx context.Context) error {
	o := b.o
	// PgBouncer first: installing it can take a while and needs no server.
	if err := b.findBouncer(ctx, &b.rep.Commands, &b.rep.Notes, &b.rep.Versions); err != nil {
		return err
	}

	b.logf("starting PostgreSQL worker...")
	w, err := pgcluster.Start(ctx, pgcluster.Options{Name: "worker1", Dir: b.dir})
	if err != nil {
		return fmt.Errorf("starting the PostgreSQL worker: %w", err)
	}
	b.worker = w
	b.rep.Worker = workerInfo{Addr: w.Addr(), Pid: w.Pid(), DataDir: w.DataDir, LogFile: w.LogFile,
		Command: procCmdline(w.Pid())}

	if err := b.pgbenchInit(ctx, &b.rep.Commands, o.Scale, w.Host, strconv.Itoa(w.Port), "postgres", "initialising", "pgbench init"); err != nil {
		return fmt.Errorf("pgbench -i: %w", err)
	}

	configs := relayConfigs()
	for _, c := range configs {
		cr := &configResult{relayConfig: c, Label: c.label(o.PoolSize, o.sessionPoolSize()), Median: -1, Runs: []runResult{}}
		if isBouncer(c.Target) && b.bouncer == "" {
			cr.Skipped = "PgBouncer not available"
		}
		b.rep.Configs = append(b.rep.Configs, cr)
	}
	if b.bouncer != "" && o.PoolSize < o.Clients {
		b.rep.Notes = append(b.rep.Notes, fmt.Sprintf("PgBouncer session mode runs with pool_size %d (one server connection per client), "+
			"not %d: in session mode a client keeps its server connection until it disconnects, and pgbench prepares "+
			"statements synchronously, so with fewer server connections than clients a thread blocks on a client "+
			"that waits for a connection while its other clients hold theirs, and the run stalls until query_wait_timeout. "+
			"Transaction mode and the coordinator use %d.", o.sessionPoolSize(), o.PoolSize, o.PoolSize))
	}
	return b.runAll(ctx, o.Options, b.rep.Configs, b.runOne)
}

// runOne runs pgbench once against one configuration and measures it.
func (b *relayBench) runOne(ctx context.Context, cr *configResult, run int) runResult {
	o := b.o
	spec := b.spec(o.Options, cr, run)
	spec.Workers = []*workerProc{{Name: "worker1", Pid: b.worker.Pid()}}
	spec.Conn, spec.Database, spec.Script = hostConn(b.worker.Host, b.worker.Port, "postgres"), "postgres", []string{"-S"}
	switch {
	case cr.Target == targetPgfleet:
		spec.StartRelays = func(ctx context.Context) ([]*child, []*relayRun, error) {
			return startCoordinators(ctx, b.exe, b.dir, []string{b.worker.Addr()}, o.PoolSize, 1, 0)
		}
	case isBouncer(cr.Target):
		bc := o.bouncerFor(cr.Target, b.worker.Port, nil)
		spec.StartRelays = func(ctx context.Context) ([]*child, []*relayRun, error) {
			return one(startBouncer(ctx, b.bouncer, b.dir, b.cred, bc))
		}
	}
	return measureRun(ctx, spec)
}

// one is a single relay as a list.
func one(ch *child, rr *relayRun, err error) ([]*child, []*relayRun, error) {
	if err != nil {
		return nil, nil, err
	}
	return []*child{ch}, []*relayRun{rr}, nil
}

// startCoordinators starts n coordinators (startCoordinatorProcs), each
// with a metrics listener, and with more than one joined by gossip as a
// fleet; on an error it returns those it started, for the caller to stop.
func startCoordinators(ctx context.Context, exe, dir string, workers []string, pool, n, procs int) ([]*child, []*relayRun, error) {
	var chs []*child
	var rrs []*relayRun
	var env []string
	if procs > 0 {
		env = append(env, "GOMAXPROCS="+strconv.Itoa(procs))
	}
	join := ""
	for i := 0; i < n; i++ {
		var metrics, gossip string
		extra := func(int) ([]string, error) {
			mp, err := pgcluster.FreePort()
			if err != nil {
				return nil, err
			}
			metrics = fmt.Sprintf("127.0.0.1:%d", mp)
			// A long lease: on a machine the benchmark saturates, a
			// coordinator's renewals may lag for seconds, and the others
			// would revoke its lease and end its backends mid-run.
			args := []string{"--metrics-listen", metrics, "--lease", "60s"}
			if n > 1 {
				gp, err := pgcluster.FreePort()
				if err != nil {
					return nil, err
				}
				gossip = fmt.Sprintf("127.0.0.1:%d", gp)
				args = append(args, "--gossip", gossip)
				if join != "" {
					args = append(args, "--join", join)
				}
			}
			return args, nil
		}
		ch, rr, err := startCoordinatorWith(ctx, exe, dir, workers, pool, extra, env)
		if err != nil {
			return chs, rrs, fmt.Errorf("coordinator %d of %d: %w", i+1, n, err)
		}
		rr.Metrics = metrics
		if join == "" {
			join = gossip
		}
		chs, rrs = append(chs, ch), append(rrs, rr)
	}
	return chs, rrs, nil
}

// startCoordinator starts "pgfleet serve" in front of workers (the first is
// the default node and holds the catalog) on a free loopback port and waits
// until it answers a startup message. It tries up to three ports.
func startCoordinator(ctx context.Context, exe, dir string, workers []string, pool int) (*child, *relayRun, error) {
	return startCoordinatorProcs(ctx, exe, dir, workers, pool, 0)
}

// startCoordinatorProcs is startCoordinator with GOMAXPROCS=procs when procs
// is positive.
func startCoordinatorProcs(ctx context.Context, exe, dir string, workers []string, pool, procs int) (*child, *relayRun, error) {
	var env []string
	if procs > 0 {
		env = append(env, "GOMAXPROCS="+strconv.Itoa(procs))
	}
	return startCoordinatorWith(ctx, exe, dir, workers, pool, nil, env)
}

// startCoordinatorWith is startCoordinator with extra flags (given the
// coordinator's own port) and environment variables.
func startCoordinatorWith(ctx context.Context, exe, dir string, workers []string, pool int,
	extra func(port int) ([]string, error), env []string) (*child, *relayRun, error) {
	return onFreePort(ctx, func(port int) (*child, *relayRun, error) {
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		argv := []string{exe, "serve", "--listen", addr}
		for _, w := range workers {
			argv = append(argv, "--worker", w)
		}
		argv = append(argv, "--pool-size", strconv.Itoa(pool), "--log-level", "info")
		if extra != nil {
			more, err := extra(port)
			if err != nil {
				return nil, nil, err
			}
			argv = append(argv, more...)
		}
		rr := &relayRun{Addr: addr, Command: commandRecord{What: "pgfleet coordinator", Argv: argv, Env: env}}
		logPath := filepath.Join(dir, fmt.Sprintf("coordinator-%d.log", port))
		ch, err := startChild("pgfleet coordinator", argv, cleanEnv(env...), nil, logPath)
		if err == nil {
			if err = waitReady(ctx, ch, addr, 15*time.Second); err != nil {
				ch.Stop(syscall.SIGTERM, 5*time.Second)
			}
		}
		if err != nil {
			return nil, nil, err
		}
		rr.Pid = ch.Pid()
		return ch, rr, nil
	})
}

// startBouncer starts PgBouncer as bc says (its Port is picked here) and
// waits until it answers. It tries up to three ports.
func startBouncer(ctx context.Context, bin, dir string, cred *syscall.Credential, bc bouncerConfig) (*child, *relayRun, error) {
	return onFreePort(ctx, func(port int) (*child, *relayRun, error) {
		bc.Port = port
		ch, ini, err := startPgbouncer(ctx, bin, dir, bc, cred)
		if err != nil {
			return nil, nil, err
		}
		rr := &relayRun{Addr: fmt.Sprintf("127.0.0.1:%d", port), Config: ini, Pid: ch.Pid(),
			Command: commandRecord{What: "pgbouncer " + bc.PoolMode, Argv: ch.Argv, User: osUserName(cred)}}
		return ch, rr, nil
	})
}

// onFreePort calls start with a free loopback port until it succeeds, at
// most three times.
func onFreePort(ctx context.Context, start func(port int) (*child, *relayRun, error)) (*child, *relayRun, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := pgcluster.FreePort()
		if err != nil {
			return nil, nil, err
		}
		ch, rr, err := start(port)
		if err == nil {
			return ch, rr, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, nil, lastErr
}

// medianRun is the index of the run with the median QPS among the runs
// without error (the lower middle one for an even count), or -1.
func medianRun(runs []runResult) int {
	var idx []int
	for i, r := range runs {
		if r.Error == "" && r.Summary.Transactions > 0 {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return -1
	}
	sort.SliceStable(idx, func(a, b int) bool { return runs[idx[a]].Summary.TPS < runs[idx[b]].Summary.TPS })
	return idx[(len(idx)-1)/2]
}

func progressLine(n, total int, label string, r runResult, runs int) string {
	head := fmt.Sprintf("[%2d/%d] %-30s %-8s run %d/%d:", n, total, label, r.Mode, r.Run, runs)
	if r.Summary.Transactions == 0 && r.Error != "" {
		return head + " ERROR " + r.Error
	}
	s := fmt.Sprintf("%s %9.0f qps  p50 %.2f ms  p99 %.2f ms  failed %d", head, r.Summary.TPS,
		float64(r.Latency.P50)/1000, float64(r.Latency.P99)/1000, r.Summary.Failed)
	if r.Summary.AbortedClients > 0 {
		s += fmt.Sprintf(" (+%d clients aborted)", r.Summary.AbortedClients)
	}
	s += fmt.Sprintf("  CPU µs/q: relay %s worker %.1f pgbench %.1f", relayCPUText(r), r.CPU.WorkerPerQuery, r.CPU.PgbenchPerQuery)
	if r.Error != "" {
		s += "  ERROR " + r.Error
	}
	return s
}

func relayCPUText(r runResult) string {
	if r.Target == targetDirect {
		return "-"
	}
	return fmt.Sprintf("%.1f", r.CPU.RelayPerQuery)
}

// findPgbench prefers the pgbench binary beside the server's (the same
// version, and not Debian's pg_wrapper script, whose Perl start-up would
// count as pgbench CPU), then pgbench on PATH.
func findPgbench(bin string) (string, error) {
	var dirs []string
	if real, err := filepath.EvalSymlinks(filepath.Join(bin, "postgres")); err == nil {
		dirs = append(dirs, filepath.Dir(real))
	}
	dirs = append(dirs, bin)
	for _, d := range dirs {
		p := filepath.Join(d, "pgbench")
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	if p, err := exec.LookPath("pgbench"); err == nil {
		return p, nil
	}
	return "", errors.New("pgbench not found beside postgres or on PATH (Debian: apt-get install postgresql-client)")
}

// runPgbenchSimple runs pgbench -i and the like, bounded in time.
func runPgbenchSimple(ctx context.Context, argv []string, limit time.Duration) (commandRecord, string, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	env := []string{"PGSSLMODE=disable", "PGCONNECT_TIMEOUT=10"}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = cleanEnv(env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGINT) }
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	rec := commandRecord{Argv: argv, Env: env, Seconds: time.Since(start).Seconds()}
	if cmd.ProcessState != nil {
		rec.Exit = cmd.ProcessState.String()
	}
	if err != nil {
		rec.Error = err.Error()
	}
	return rec, string(out), err
}

func procCmdline(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

func osUserName(cred *syscall.Credential) string {
	if cred == nil {
		return ""
	}
	return strconv.Itoa(int(cred.Uid))
}

func appendErr(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

func tailString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// pgbenchErrorLine summarises what pgbench printed on failure: the first
// server error (ERROR: or FATAL:) and the first aborted client.
func pgbenchErrorLine(stderr string) string {
	var server, aborted, other string
	for _, l := range strings.Split(stderr, "\n") {
		l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "pgbench: error:"))
		l = strings.TrimSpace(strings.TrimPrefix(l, "pgbench: error:"))
		switch {
		case l == "" || strings.Contains(l, "Run was aborted"):
		case server == "" && (strings.Contains(l, "ERROR:") || strings.Contains(l, "FATAL:")):
			server = l
		case aborted == "" && strings.Contains(l, "aborted"):
			aborted = l
		case other == "":
			other = l
		}
	}
	var parts []string
	for _, p := range []string{server, aborted} {
		if p != "" {
			parts = append(parts, trunc(p, 200))
		}
	}
	if len(parts) == 0 && other != "" {
		parts = append(parts, trunc(other, 200))
	}
	return strings.Join(parts, " / ")
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(l)
}
