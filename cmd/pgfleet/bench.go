package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/pgfleet/pgfleet/bench"
)

const benchUsage = `Usage:
  pgfleet bench relay [flags]    pgbench -S directly, through a pgfleet coordinator and through PgBouncer
  pgfleet bench router [flags]   routed point queries on distributed pgbench tables through a coordinator,
                                 against the same queries sent directly to the worker and through PgBouncer
(bench/README.md describes both)
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
	modes := strings.Join(o.Modes, ",")
	fs := flag.NewFlagSet("bench router", flag.ExitOnError)
	benchFlags(fs, &o.Options, "pgbench -i scale factor of both data sets (accounts = 100000 * scale)",
		"server connections of the coordinator (per worker) and of PgBouncer transaction mode")
	fs.IntVar(&o.Shards, "shards", o.Shards, "shard_count of pgbench_accounts")
	fs.IntVar(&o.Workers, "workers", o.Workers, "PostgreSQL workers the shards are spread over (1 to 8)")
	fs.StringVar(&modes, "modes", modes, "pgbench query modes to run, comma-separated")
	if err := parseBenchFlags(fs, args); err != nil {
		return err
	}
	var err error
	if o.Modes, err = bench.ParseModes(modes); err != nil {
		return err
	}
	return runInterruptible(func(ctx context.Context) error { return bench.RunRouter(ctx, o) })
}

// benchFlags defines the flags every benchmark takes, with o's values as
// their defaults.
func benchFlags(fs *flag.FlagSet, o *bench.Options, scaleHelp, poolHelp string) {
	fs.IntVar(&o.Scale, "scale", o.Scale, scaleHelp)
	fs.IntVar(&o.Clients, "clients", o.Clients, "pgbench clients (-c)")
	fs.IntVar(&o.Jobs, "jobs", o.Jobs, "pgbench threads (-j)")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "length of each run (pgbench -T, whole seconds)")
	fs.IntVar(&o.Runs, "runs", o.Runs, "runs per configuration; the report shows the median run by QPS")
	fs.IntVar(&o.PoolSize, "pool-size", o.PoolSize, poolHelp)
	fs.StringVar(&o.OutDir, "out", o.OutDir, "directory for the Markdown and JSON reports")
	fs.BoolVar(&o.KeepGoing, "keep-going", o.KeepGoing, "record a failed run and go on instead of stopping")
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
