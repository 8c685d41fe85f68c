package difftest

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

var (
	flagSeed       = flag.Uint64("seed", 1, "random seed (0: a random one)")
	flagDuration   = flag.Duration("duration", 0, "run for this long (0: until -statements)")
	flagStatements = flag.Int("statements", 2500, "stop after this many statements (0: until -duration)")
	flagFeatures   = flag.String("features", "", "exact comma-separated set of enabled features (default: every family and feature that is not a known bug)")
	flagEnable     = flag.String("enable", "", "features to turn on (\"all\" for every one), e.g. chain,latin1")
	flagDisable    = flag.String("disable", "", "features to turn off")
	flagMaxFail    = flag.Int("maxfail", 1, "stop after this many mismatches")
	flagCoords     = flag.Int("coordinators", 2, "coordinators in front of the workers (1 or 2)")
	flagCheckEvery = flag.Int("check-every", 200, "statements between invariant checks")
	flagTrace      = flag.String("trace", "", "write every statement to this file")
	flagVerbose    = flag.Bool("difftest.v", false, "log the schema")
)

// TestDifferential runs the differential tester for a bounded number of
// statements with a fixed seed (go test ./...), or as long as asked:
//
//	go test ./difftest -run TestDifferential -count=1 -timeout 0 -args -seed 0 -duration 1h -statements 0
//
// (scripts/difftest wraps this).
func TestDifferential(t *testing.T) {
	feats := defaultFeatures()
	if *flagFeatures != "" {
		feats = features{}
		for _, n := range allFeatures() {
			feats[n] = false
		}
		if err := feats.apply(*flagFeatures, ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := feats.apply(*flagEnable, *flagDisable); err != nil {
		t.Fatal(err)
	}
	seed := *flagSeed
	if seed == 0 {
		seed = rand.Uint64() >> 1
	}
	t.Logf("difftest: seed %d, features %s", seed, feats)
	fmt.Fprintf(os.Stderr, "difftest: seed %d (rerun: go test ./difftest -run TestDifferential -count=1 -args -seed %d)\n", seed, seed)

	fleet := pgtest.Start(t, 2)
	oracle := pgtest.Start(t, 1)
	env := Env{Oracle: oracle.Servers[0].Addr()}
	for _, s := range fleet.Servers {
		env.Workers = append(env.Workers, s.Addr())
	}
	for range max(1, min(*flagCoords, 2)) {
		c := pgtest.Coordinator(t, fleet, func(c *coordinator.Config) { c.PoolSize = 8 })
		env.Coordinators = append(env.Coordinators, c.Addr())
	}
	logf := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		switch {
		case strings.HasPrefix(msg, "progress"):
			fmt.Fprintln(os.Stderr, "difftest:", msg)
		case strings.HasPrefix(msg, "MISMATCH") || *flagVerbose:
			t.Log(msg)
		}
	}
	var trace *os.File
	if *flagTrace != "" {
		f, err := os.Create(*flagTrace)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		trace = f
	}
	cfg := Config{
		Seed:          seed,
		Duration:      *flagDuration,
		MaxStatements: *flagStatements,
		Features:      feats,
		MaxFailures:   *flagMaxFail,
		CheckEvery:    *flagCheckEvery,
		Timeout:       20 * time.Second,
		Logf:          logf,
	}
	if trace != nil {
		cfg.Trace = trace
	}
	stats, err := Run(context.Background(), env, cfg)
	t.Log("\n" + stats.Report())
	fmt.Fprint(os.Stderr, stats.Report())
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	if n := len(stats.Mismatches); n > 0 {
		t.Errorf("seed %d: %d mismatches (first above); rerun: go test ./difftest -run TestDifferential -count=1 -args -seed %d", seed, n, seed)
	}
}
