package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/pgfleet/pgfleet/bench"
)

const benchUsage = `Usage:
  pgfleet bench relay [flags]    pgbench -S directly, through a pgfleet coordinator and through PgBouncer
  pgfleet bench router [flags]   the head-to-head harness: point-select, the Citus mix, writes and scatter
                                 queries on distributed pgbench tables through a fleet of coordinators, against
                                 the same queries sent directly to the worker, through PgBouncer and to any
                                 system given by --target name=URL; a scaling ladder with --workers 1,2,4
                                 --coordinators 1,2,3
  pgfleet bench idle [flags]     coordinator memory per idle client connection (10,000 clients by default)
(bench/README.md describes them)
`

// benchCmd parses pgfleet bench's flags and runs the benchmark in package bench.
func benchCmd(args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(os.Stderr, benchUsage)
		if len(args) == 0 {
			os.Exit(2)
		}
		return nil
	}
	switch args[0] {
	case "relay":
		return benchRelay(args[1:])
	case "router":
		return benchRouter(args[1:])
	case "idle":
		return benchIdle(args[1:])
	default:
		return fmt.Errorf("bench: unknown benchmark %q\n\n%s", args[0], benchUsage)
	}
}

func benchRelay(args []string) error {
	o := bench.DefaultRelayOptions()
	fs := flag.NewFlagSet("bench relay", flag.ExitOnError)
	benchFlags(fs, &o.Options, "pgbench -i scale factor",
		"server connections of the coordinator and of PgBouncer (default_pool_size)")
	if err := parseBenchFlags(fs, args); err != nil {
		return err
	}
	return runInterruptible(func(ctx context.Context) error { return bench.RunRelay(ctx, o) })
}

func benchRouter(args []string) error {
	o := bench.DefaultRouterOptions()
	modes, workloads := strings.Join(o.Modes, ","), strings.Join(o.Workloads, ",")
	workers, coords := "1", "1"
	var targets targetFlags
	fs := flag.NewFlagSet("bench router", flag.ExitOnError)
	benchFlags(fs, &o.Options, "pgbench -i scale factor of every data set (accounts = 100000 * scale)",
		"server connections of each coordinator (per worker) and of PgBouncer transaction mode")
	fs.IntVar(&o.Shards, "shards", o.Shards, "shard_count of pgbench_accounts")
	fs.StringVar(&workers, "workers", workers, "PostgreSQL workers the shards are spread over (1 to 8); a list such as 1,2,4 adds the scaling ladder")
	fs.StringVar(&coords, "coordinators", coords, "coordinators pgbench's clients are split over; a list such as 1,2,3 adds the scaling ladder")
	fs.IntVar(&o.CoordinatorProcs, "coordinator-procs", o.CoordinatorProcs, "GOMAXPROCS of each coordinator (0: the coordinator's default, which adapts from 1 up to every CPU)")
	fs.StringVar(&modes, "modes", modes, "pgbench query modes to run, comma-separated")
	fs.StringVar(&workloads, "workloads", workloads, "workloads to run, comma-separated: point-select, citus-mix, write, scatter, tpcb-like")
	fs.Float64Var(&o.Rate, "rate", o.Rate, "run every configuration open-loop at this many transactions per second (pgbench -R); 0: closed loop")
	fs.BoolVar(&o.HalfPeak, "half-peak", o.HalfPeak, "add open-loop point-select runs at half the fleet's peak, directly and through the fleet")
	fs.Var(&targets, "target", "another system to run the workloads against, name=postgres://user:password@host:port/db (repeatable)")
	fs.BoolVar(&o.LoadTargets, "load-targets", o.LoadTargets, "load pgbench's tables into each --target and distribute them (false: use what is there)")
	if err := parseBenchFlags(fs, args); err != nil {
		return err
	}
	var err error
	if o.Modes, err = bench.ParseModes(modes); err != nil {
		return err
	}
	if o.Workloads, err = bench.ParseWorkloads(workloads); err != nil {
		return err
	}
	if o.Workers, err = bench.ParseCounts("--workers", workers); err != nil {
		return err
	}
	if o.Coordinators, err = bench.ParseCounts("--coordinators", coords); err != nil {
		return err
	}
	o.Targets = targets
	return runInterruptible(func(ctx context.Context) error { return bench.RunRouter(ctx, o) })
}

// targetFlags collects --target name=URL flags.
type targetFlags []bench.URLTarget

func (t *targetFlags) String() string { return fmt.Sprint(len(*t), " targets") }

func (t *targetFlags) Set(s string) error {
	u, err := bench.ParseURLTarget(s)
	if err != nil {
		return err
	}
	*t = append(*t, u)
	return nil
}

func benchIdle(args []string) error {
	o := bench.DefaultIdleOptions()
	points := strings.Trim(strings.ReplaceAll(fmt.Sprint(o.Points), " ", ","), "[]") // 1000,5000
	fs := flag.NewFlagSet("bench idle", flag.ExitOnError)
	fs.IntVar(&o.Clients, "clients", o.Clients, "idle client connections at the end")
	fs.StringVar(&points, "points", points, "client counts to measure at on the way, comma-separated (--clients is always one)")
	fs.IntVar(&o.PoolSize, "pool-size", o.PoolSize, "coordinator --pool-size")
	fs.DurationVar(&o.IdleSleep, "idle-sleep", o.IdleSleep, "coordinator --idle-sleep (0: its default; negative: sessions keep their goroutines)")
	fs.BoolVar(&o.Query, "query", o.Query, "run one SELECT 1 on every client before it goes idle")
	fs.DurationVar(&o.Settle, "settle", o.Settle, "wait after each step before measuring")
	fs.IntVar(&o.Parallel, "parallel", o.Parallel, "clients connecting at once")
	fs.BoolVar(&o.WaitGC, "wait-gc", o.WaitGC, "at each step, wait for the coordinator's next GC (up to 130 s) before measuring")
	fs.IntVar(&o.TargetBytes, "target", o.TargetBytes, "target coordinator bytes per idle client")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "bound on the whole benchmark")
	fs.StringVar(&o.OutDir, "out", o.OutDir, "directory for the Markdown and JSON reports")
	if err := parseBenchFlags(fs, args); err != nil {
		return err
	}
	var err error
	if o.Points, err = bench.ParsePoints(points); err != nil {
		return err
	}
	return runInterruptible(func(ctx context.Context) error { return bench.RunIdle(ctx, o) })
}

// benchFlags defines the flags every benchmark takes, with o's values as
// their defaults.
func benchFlags(fs *flag.FlagSet, o *bench.Options, scaleHelp, poolHelp string) {
	fs.IntVar(&o.Scale, "scale", o.Scale, scaleHelp)
	fs.IntVar(&o.Clients, "clients", o.Clients, "pgbench clients (-c)")
	fs.IntVar(&o.Jobs, "jobs", o.Jobs, "pgbench threads (-j)")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "length of each run (pgbench -T, whole seconds)")
	fs.DurationVar(&o.Warmup, "warmup", o.Warmup, "unmeasured pgbench before each run, once its coordinator or PgBouncer is up (0: none)")
	fs.IntVar(&o.Runs, "runs", o.Runs, "runs per configuration; the report shows the median run by QPS")
	fs.IntVar(&o.PoolSize, "pool-size", o.PoolSize, poolHelp)
	fs.StringVar(&o.OutDir, "out", o.OutDir, "directory for the Markdown and JSON reports")
	fs.BoolVar(&o.KeepGoing, "keep-going", o.KeepGoing, "record a failed run and go on instead of stopping")
	fs.BoolFunc("pgbouncer", "measure the PgBouncer references (default true; installed with apt-get when missing and root)",
		func(s string) error {
			v, err := strconv.ParseBool(s)
			o.NoPgbouncer = !v
			return err
		})
}

// parseBenchFlags parses args, which must all be flags.
func parseBenchFlags(fs *flag.FlagSet, args []string) error {
	_ = fs.Parse(args)
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected arguments %q", fs.Name(), fs.Args())
	}
	return nil
}

// runInterruptible runs a benchmark with a context that Ctrl-C or SIGTERM
// cancels; a second Ctrl-C kills the process (its children then get a
// signal from the kernel).
func runInterruptible(run func(context.Context) error) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	finished := make(chan struct{})
	defer close(finished) // runs before stop
	go func() {
		select {
		case <-ctx.Done():
			fmt.Fprintln(os.Stderr, "pgfleet bench: interrupted, stopping what it started (Ctrl-C again to quit at once)")
			stop() // a second Ctrl-C kills the process; its children get SIGTERM/SIGKILL from the kernel
		case <-finished:
		}
	}()
	return run(ctx)
}
