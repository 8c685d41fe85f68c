package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/pgfleet/pgfleet/bench"
)

const benchUsage = `Usage:
  pgfleet bench relay [flags]   pgbench -S directly, through a pgfleet coordinator and through PgBouncer
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
	default:
		return fmt.Errorf("bench: unknown benchmark %q\n\n%s", args[0], benchUsage)
	}
}

func benchRelay(args []string) error {
	d := bench.DefaultRelayOptions()
	o := d
	fs := flag.NewFlagSet("bench relay", flag.ExitOnError)
	fs.IntVar(&o.Scale, "scale", d.Scale, "pgbench -i scale factor")
	fs.IntVar(&o.Clients, "clients", d.Clients, "pgbench clients (-c)")
	fs.IntVar(&o.Jobs, "jobs", d.Jobs, "pgbench threads (-j)")
	fs.DurationVar(&o.Duration, "duration", d.Duration, "length of each run (pgbench -T, whole seconds)")
	fs.IntVar(&o.Runs, "runs", d.Runs, "runs per configuration; the report shows the median run by QPS")
	fs.IntVar(&o.PoolSize, "pool-size", d.PoolSize, "server connections of the coordinator and of PgBouncer (default_pool_size)")
	fs.StringVar(&o.OutDir, "out", d.OutDir, "directory for the Markdown and JSON reports")
	fs.BoolVar(&o.KeepGoing, "keep-going", false, "record a failed run and go on instead of stopping")
	_ = fs.Parse(args)
	if fs.NArg() > 0 {
		return fmt.Errorf("bench relay: unexpected arguments %q", fs.Args())
	}
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
	return bench.RunRelay(ctx, o)
}
