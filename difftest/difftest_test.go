package difftest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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

// TestDifferentialMoves runs the differential tester through three
// coordinators while a fourth client moves the shard groups of every
// distributed table back and forth between the two workers, one group at
// a time (citus_move_shard_placement, shard_transfer_mode auto: logical
// replication, or writes held where a table has no replica identity). Every
// answer must be plain PostgreSQL's, except that a statement inside a
// transaction block may get 40001 for a shard moved under it (a statement
// outside one runs again by itself); the invariants (each row in the shard
// its hash gives, reference copies equal, contents equal to the oracle's,
// no prepared transaction left) are checked between moves and at the end.
func TestDifferentialMoves(t *testing.T) {
	if testing.Short() {
		t.Skip("moves shards for a while")
	}
	seed := *flagSeed
	if seed == 0 {
		seed = rand.Uint64() >> 1
	}
	fleet := pgtest.Start(t, 2)
	oracle := pgtest.Start(t, 1)
	env := Env{Oracle: oracle.Servers[0].Addr()}
	for _, s := range fleet.Servers {
		env.Workers = append(env.Workers, s.Addr())
	}
	// The coordinators are one fleet (gossip): a move holds its group's
	// statements at each while it cuts over.
	var first *coordinator.Server
	for range 3 {
		c := pgtest.Coordinator(t, fleet, func(c *coordinator.Config) {
			c.PoolSize = 8
			c.Gossip = "127.0.0.1:0"
			if first != nil {
				c.Join = []string{first.Fleet().Addr()}
			}
		})
		if first == nil {
			first = c
		}
		env.Coordinators = append(env.Coordinators, c.Addr())
	}
	var moves, skipped atomic.Int64
	disturb := func(ctx context.Context, quiet *sync.Mutex) error {
		conn, err := pgx.Connect(ctx, pgtest.URL(env.Coordinators[2]))
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		for i := 0; ; i++ {
			if !sleepCtx(ctx, 300*time.Millisecond) {
				return nil
			}
			// A group: the first shard of one hash range of a colocation
			// group, where it is, and the other worker.
			var shard int64
			var host string
			var port int
			quiet.Lock()
			err := conn.QueryRow(ctx, `SELECT s.shardid, n.host, n.port FROM pgfleet.shards s
				JOIN pgfleet.tables t ON t.name = s.table_name JOIN pgfleet.placements p USING (shardid)
				JOIN pgfleet.nodes n USING (nodeid) WHERE t.kind = 'h'
				ORDER BY t.colocation_id, s.min_hash, s.shardid OFFSET $1 % greatest(1, (SELECT count(*) FROM pgfleet.shards s
				JOIN pgfleet.tables t ON t.name = s.table_name WHERE t.kind = 'h')) LIMIT 1`, i).Scan(&shard, &host, &port)
			if err == pgx.ErrNoRows {
				quiet.Unlock()
				continue
			}
			if err != nil {
				quiet.Unlock()
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("finding a shard to move: %w", err)
			}
			to := fleet.Servers[0]
			if to.Host == host && to.Port == port {
				to = fleet.Servers[1]
			}
			_, err = conn.Exec(ctx, fmt.Sprintf("SELECT citus_move_shard_placement(%d, '%s', %d, '%s', %d)", shard, host, port, to.Host, to.Port))
			quiet.Unlock()
			switch code := sqlState(err); {
			case err == nil:
				moves.Add(1)
			case ctx.Err() != nil:
				return nil
			case code == "55000" || code == "55006" || code == "42704" || code == "40001" || code == "55P03":
				// DDL during the copy, a table dropped or redistributed
				// meanwhile, a statement holding the shards' locks past the
				// move's lock_timeout: the move changed nothing.
				skipped.Add(1)
			default:
				return fmt.Errorf("moving shard %d from %s:%d to %s: %w", shard, host, port, to.Addr(), err)
			}
		}
	}
	cfg := Config{
		Seed:          seed,
		MaxStatements: 1500,
		Duration:      *flagDuration,
		MaxFailures:   1,
		CheckEvery:    100,
		Timeout:       30 * time.Second,
		Disturb:       disturb,
		Logf: func(format string, args ...any) {
			if msg := fmt.Sprintf(format, args...); strings.HasPrefix(msg, "MISMATCH") {
				t.Log(msg)
			}
		},
	}
	stats, err := Run(context.Background(), env, cfg)
	t.Log("\n" + stats.Report())
	t.Logf("%d groups moved, %d moves changed nothing", moves.Load(), skipped.Load())
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	if n := len(stats.Mismatches); n > 0 {
		t.Errorf("seed %d: %d mismatches (first above)", seed, n)
	}
	if moves.Load() < 3 {
		t.Errorf("only %d moves ran beside the statements", moves.Load())
	}
}

// sleepCtx sleeps for d, or reports false when ctx ends first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// sqlState is err's SQLSTATE, or "".
func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}
