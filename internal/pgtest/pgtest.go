// Package pgtest starts real PostgreSQL servers and coordinators for
// integration tests, on free loopback ports, removed when the test ends
// (also when it fails). Where PostgreSQL is not installed the tests skip with
// the reason, except under CI (CI=true), where they fail.
package pgtest

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/internal/pgcluster"
)

var (
	sharedOnce sync.Once
	shared     *pgcluster.Cluster
	sharedErr  error
)

// Shared returns a package-wide cluster of two workers, started on first use.
// Call Cleanup from TestMain to stop it. Tests that need a server of their
// own (to kill it, say) use Start.
func Shared(t testing.TB) *pgcluster.Cluster {
	t.Helper()
	sharedOnce.Do(func() {
		if _, err := pgcluster.BinDir(); err != nil {
			sharedErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		shared, sharedErr = pgcluster.StartCluster(ctx, "", 2)
	})
	if sharedErr != nil {
		unavailable(t, sharedErr)
	}
	return shared
}

// Cleanup stops the shared cluster; call it from TestMain after m.Run.
func Cleanup() {
	if shared != nil {
		shared.Stop()
	}
}

// Main runs a package's tests and stops the shared cluster after them.
func Main(m interface{ Run() int }) {
	code := m.Run()
	Cleanup()
	os.Exit(code)
}

// Start starts a cluster of n workers owned by one test.
func Start(t testing.TB, n int, config ...string) *pgcluster.Cluster {
	t.Helper()
	if _, err := pgcluster.BinDir(); err != nil {
		unavailable(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.StartCluster(ctx, "", n, config...)
	if err != nil {
		t.Fatalf("starting PostgreSQL: %v", err)
	}
	t.Cleanup(c.Stop)
	return c
}

func unavailable(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("PostgreSQL is required under CI: %v", err)
	}
	t.Skipf("PostgreSQL not available: %v", err)
}

// Coordinator starts a coordinator in front of the cluster's workers on a
// free loopback port, closed when the test ends. mod may adjust the config.
func Coordinator(t testing.TB, c *pgcluster.Cluster, mod func(*coordinator.Config)) *coordinator.Server {
	t.Helper()
	// The connection budget is off unless a test turns it on (with a
	// metadata database of its own): coordinators of one test binary
	// would divide the shared cluster's workers between them.
	cfg := coordinator.Config{Listen: "127.0.0.1:0", PoolSize: 4, PoolTimeout: 2 * time.Second, LeaseTTL: -1}
	// PGFLEET_TEST_IDLE_SLEEP (a duration) has sessions sleep sooner than
	// the default: the suite run so exercises sleeping and waking between
	// most statements.
	if d, err := time.ParseDuration(os.Getenv("PGFLEET_TEST_IDLE_SLEEP")); err == nil {
		cfg.IdleSleep = d
	}
	for _, s := range c.Servers {
		cfg.Workers = append(cfg.Workers, s.Addr())
	}
	if mod != nil {
		mod(&cfg)
	}
	srv, err := coordinator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// URL is a libpq URL for a host:port as the postgres user.
func URL(addr string) string {
	return "postgres://postgres@" + addr + "/postgres?sslmode=disable"
}
