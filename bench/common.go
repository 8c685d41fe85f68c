package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pgfleet/pgfleet/internal/pgcluster"
)

// Options are the settings the relay and router benchmarks share.
type Options struct {
	Scale     int           // pgbench -i -s
	Clients   int           // pgbench -c
	Jobs      int           // pgbench -j
	Duration  time.Duration // pgbench -T, rounded up to whole seconds
	Warmup    time.Duration // unmeasured pgbench before each run, after its relays start; 0: none
	Runs      int           // runs per configuration; the report shows the median by QPS
	PoolSize  int           // coordinator --pool-size and PgBouncer transaction mode's default_pool_size
	OutDir    string        // where the .md and .json reports go
	KeepGoing bool          // record a failed run and go on instead of stopping
	// NoPgbouncer skips the PgBouncer references (and installing PgBouncer).
	NoPgbouncer bool

	// Executable is the pgfleet binary run as "serve" for the coordinator;
	// empty means this process's own executable.
	Executable string
	// Stdout gets the Markdown table, Stderr progress; nil means os.Stdout
	// and os.Stderr.
	Stdout, Stderr io.Writer
}

// defaultOptions are the defaults both benchmarks share.
func defaultOptions() Options {
	return Options{Scale: 5, Clients: 32, Jobs: 2, Duration: 10 * time.Second, Warmup: 2 * time.Second, Runs: 3, PoolSize: 8,
		OutDir: filepath.Join("bench", "results")}
}

func (o *Options) validate() error {
	switch {
	case o.Scale < 1:
		return errors.New("--scale must be at least 1")
	case o.Clients < 1:
		return errors.New("--clients must be at least 1")
	case o.Jobs < 1 || o.Jobs > o.Clients:
		return errors.New("--jobs must be between 1 and --clients")
	case o.Duration < time.Second:
		return errors.New("--duration must be at least 1s")
	case o.Warmup < 0 || (o.Warmup > 0 && o.Warmup < time.Second):
		return errors.New("--warmup must be 0 or at least 1s")
	case o.Runs < 1:
		return errors.New("--runs must be at least 1")
	case o.PoolSize < 1:
		return errors.New("--pool-size must be at least 1")
	case o.OutDir == "":
		return errors.New("--out must not be empty")
	}
	return nil
}

// sessionPoolSize is PgBouncer's pool_size in session mode: at least one
// server connection per client, since a session-mode client holds its
// connection for as long as it is connected.
func (o *Options) sessionPoolSize() int { return max(o.PoolSize, o.Clients) }

// bouncerFor is PgBouncer's configuration for a PgBouncer target in front of
// the worker on workerPort: session mode with sessionPoolSize, transaction
// mode with PoolSize.
func (o *Options) bouncerFor(target string, workerPort int, databases []string) bouncerConfig {
	mode, pool := "session", o.sessionPoolSize()
	if target == targetBouncerTx {
		mode, pool = "transaction", o.PoolSize
	}
	return bouncerConfig{PoolMode: mode, PoolSize: pool, WorkerPort: workerPort,
		QueryTimeout: o.Duration + 60*time.Second, Databases: databases}
}

func isBouncer(target string) bool { return target == targetBouncerSess || target == targetBouncerTx }

// base is what a benchmark run sets up before it starts anything, and the
// relay it has running.
type base struct {
	out, log io.Writer
	hz       int
	bin      string // PostgreSQL's bin directory
	exe      string // pgfleet
	pgbench  string
	bouncer  string // pgbouncer binary, "" when skipped
	// noBouncer: skip PgBouncer (Options.NoPgbouncer).
	noBouncer bool
	cred      *syscall.Credential
	dir       string   // temporary directory for everything
	cur       *child   // a relay running outside a measured run, stopped on the way out
	running   []*child // the relays of the measured run now, stopped on the way out
}

// newBase finds the pgfleet executable, pgbench and the user PgBouncer runs
// as, and creates o.OutDir and a temporary directory named after tmpPrefix.
func newBase(o Options, tmpPrefix string) (*base, error) {
	b := &base{out: o.Stdout, log: o.Stderr, hz: clockTicks(), exe: o.Executable, noBouncer: o.NoPgbouncer}
	if b.out == nil {
		b.out = os.Stdout
	}
	if b.log == nil {
		b.log = os.Stderr
	}
	var err error
	if b.exe == "" {
		if b.exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("finding the pgfleet executable: %w", err)
		}
	}
	if b.bin, err = pgcluster.BinDir(); err != nil {
		return nil, err
	}
	if b.pgbench, err = findPgbench(b.bin); err != nil {
		return nil, err
	}
	if b.cred, err = runAs(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("--out: %w", err)
	}
	if b.dir, err = os.MkdirTemp("", tmpPrefix); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *base) logf(format string, args ...any) {
	fmt.Fprintf(b.log, format+"\n", args...)
}

// versions are the versions of what the benchmark runs, but PgBouncer's
// (see findBouncer).
func (b *base) versions() versions {
	describe, build := pgfleetVersion()
	return versions{Pgfleet: describe, PgfleetBuildVCS: build, Go: runtimeVersion(),
		Postgres: commandOutput(nil, filepath.Join(b.bin, "postgres"), "--version"),
		Pgbench:  commandOutput(nil, b.pgbench, "--version")}
}

// findBouncer finds or installs PgBouncer, recording the commands in cmds;
// it notes in notes why PgBouncer is skipped, or sets v.Pgbouncer.
func (b *base) findBouncer(ctx context.Context, cmds *[]commandRecord, notes *[]string, v *versions) error {
	var note string
	if b.noBouncer {
		note = "PgBouncer references skipped (--pgbouncer=false)"
	} else {
		b.bouncer, note = findPgbouncer(ctx, b.logf, cmds)
	}
	if note != "" {
		*notes = append(*notes, note)
		b.logf("note: %s", note)
	} else {
		v.Pgbouncer = firstLine(commandOutput(b.cred, b.bouncer, "--version"))
	}
	return ctx.Err()
}

// pgbenchInit runs pgbench -i at scale in database db at host:port, logging
// it after logPrefix and recording it in cmds as what.
func (b *base) pgbenchInit(ctx context.Context, cmds *[]commandRecord, scale int, host, port, db, logPrefix, what string) error {
	argv := []string{b.pgbench, "-i", "-q", "-s", strconv.Itoa(scale), "-h", host, "-p", port, "-U", "postgres", db}
	b.logf("%s: %s", logPrefix, strings.Join(argv, " "))
	rec, out, err := runPgbenchSimple(ctx, argv, 15*time.Minute)
	rec.What = what
	*cmds = append(*cmds, rec)
	if err != nil {
		return fmt.Errorf("%w\n%s", err, trunc(out, 2000))
	}
	return nil
}

// spec is the part of a run's runSpec that does not depend on the benchmark.
func (b *base) spec(o Options, cr *configResult, run int) runSpec {
	return runSpec{Target: cr.Target, Mode: cr.Mode, Workload: cr.Workload, Run: run,
		Clients: o.Clients, Jobs: o.Jobs, Duration: o.Duration, Warmup: o.Warmup, Pgbench: b.pgbench, Dir: b.dir, Hz: b.hz, Cur: &b.running}
}

// runAll runs every configuration not skipped o.Runs times, round-robin: run
// 1 of every configuration, then run 2, ... so that a slow phase of a noisy
// machine spreads over all configurations.
func (b *base) runAll(ctx context.Context, o Options, configs []*configResult,
	runOne func(context.Context, *configResult, int) runResult) error {
	total := 0
	for _, cr := range configs {
		if cr.Skipped == "" {
			total += o.Runs
		}
	}
	n := 0
	for r := 1; r <= o.Runs; r++ {
		for _, cr := range configs {
			if cr.Skipped != "" {
				continue
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			n++
			res := runOne(ctx, cr, r)
			cr.Runs = append(cr.Runs, res)
			name := cr.Label
			if cr.Workload != "" {
				name += " " + cr.Workload
			}
			b.logf("%s", progressLine(n, total, name, res, o.Runs))
			if res.Error != "" {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if !o.KeepGoing {
					return fmt.Errorf("%s %s run %d: %s (use --keep-going to record failures and go on)", name, cr.Mode, r, res.Error)
				}
			}
		}
	}
	return nil
}

// stopRelay stops the relays running now, if any.
func (b *base) stopRelay() {
	if b.cur != nil {
		b.cur.Stop(syscall.SIGTERM, 10*time.Second)
		b.cur = nil
	}
	for _, c := range b.running {
		c.Stop(syscall.SIGTERM, 10*time.Second)
	}
	b.running = nil
}

func (b *base) removeDir() {
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
}

// benchmark is a relayBench or a routerBench.
type benchmark interface {
	run(context.Context) error
	// cleanup stops every process the benchmark started and removes its
	// temporary directory.
	cleanup()
	// finish writes the reports (when anything ran) and prints the table.
	finish(runErr error, interrupted bool) error
}

// runBenchmark runs b, then stops everything it started and writes its
// report, also when ctx is cancelled.
func runBenchmark(ctx context.Context, b benchmark) (err error) {
	defer func() {
		b.cleanup()
		if werr := b.finish(err, err != nil && ctx.Err() != nil); werr != nil && err == nil {
			err = werr
		}
	}()
	err = b.run(ctx)
	if err != nil && ctx.Err() != nil {
		err = errors.New("interrupted; stopped everything it had started")
	}
	return err
}
