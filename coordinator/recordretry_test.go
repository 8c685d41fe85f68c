package coordinator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/internal/pgcluster"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestTerminatedBackendsThenQuery: after every backend on the first
// worker (the metadata database's) is terminated, the coordinator's pooled
// worker connections and its metadata connections with them, the next
// multi-shard statements answer as before: the new worker connections are
// recorded on a new metadata connection (adversary 158: the first got
// 53300 "metadata: record backend: FATAL: terminating connection").
func TestTerminatedBackendsThenQuery(t *testing.T) {
	cl := pgtest.Start(t, 2)
	srv := pgtest.Coordinator(t, cl, func(c *coordinator.Config) {
		c.PoolSize = 4
		c.LeaseTTL = 10 * time.Second // the connection budget on: connections are recorded
	})
	c := connect(t, srv.Addr())
	ctx := context.Background()
	admin := summedTable(t, c, cl, "trq")
	for round := 0; round < 3; round++ {
		if got := queryString(t, c, "SELECT sum(v)::text FROM trq"); got != "5050" {
			t.Fatalf("round %d, before: sum %s, want 5050", round, got)
		}
		n := terminateClients(t, admin)
		c2 := connect(t, srv.Addr()) // a new session too
		for i, conn := range []*pgx.Conn{c, c2, c, c2} {
			if got := queryString(t, conn, "SELECT sum(v)::text FROM trq"); got != "5050" {
				t.Fatalf("round %d, statement %d after terminating %d backends: sum %s, want 5050", round, i, n, got)
			}
		}
		c2.Close(ctx)
	}
}

// TestTerminatedBackendsThenPathLookup: a session whose search_path is not
// plainly public names a distributed table without its schema; the first
// worker is asked where the name resolves. Right after every backend
// there is terminated (the metadata connections, used a moment before and
// so handed out unchecked, among them), the lookup answers on a new
// connection (adversary 159: 08006 "could not ask the first worker where
// t ... is").
func TestTerminatedBackendsThenPathLookup(t *testing.T) {
	cl := pgtest.Start(t, 2)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	c := connect(t, srv.Addr())
	ctx := context.Background()
	admin := summedTable(t, c, cl, "tpl")
	for round := 0; round < 5; round++ {
		// A lookup under a path not asked before: the metadata
		// connection it used is now idle, under a second.
		exec(t, c, fmt.Sprintf("SET search_path = warm%d, public", round))
		if got := queryString(t, c, "SELECT sum(v)::text FROM tpl"); got != "5050" {
			t.Fatalf("round %d, before: sum %s, want 5050", round, got)
		}
		n := terminateClients(t, admin)
		c2 := connect(t, srv.Addr())
		exec(t, c2, fmt.Sprintf("SET search_path = after%d, public", round))
		if got := queryString(t, c2, "SELECT sum(v)::text FROM tpl"); got != "5050" {
			t.Fatalf("round %d, after terminating %d backends: sum %s, want 5050", round, n, got)
		}
		c2.Close(ctx)
	}
}

// summedTable makes the distributed table name of keys and values 1 to 100
// (their sum 5050) through c, and returns a connection to the cluster's
// first worker, closed at the test's end.
func summedTable(t *testing.T, c *pgx.Conn, cl *pgcluster.Cluster, name string) *pgx.Conn {
	t.Helper()
	exec(t, c, "CREATE TABLE "+name+" (k int PRIMARY KEY, v int)")
	exec(t, c, "SELECT create_distributed_table('"+name+"', 'k')")
	exec(t, c, "INSERT INTO "+name+" SELECT g, g FROM generate_series(1, 100) g")
	admin, err := pgx.Connect(context.Background(), pgtest.URL(cl.Servers[0].Addr()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })
	return admin
}

// terminateClients terminates every client backend of admin's server but
// admin's own (the coordinator's worker and metadata connections there)
// and returns how many. pg_terminate_backend(pid, timeout) waits until
// each is gone, so that what follows does not race a backend still ending
// (a statement sent to it then gets its FATAL, as a PostgreSQL client of
// that backend would).
func terminateClients(t *testing.T, admin *pgx.Conn) int {
	t.Helper()
	var n int
	if err := admin.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid, 10000)) FROM pg_stat_activity
		WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no backend to terminate: the coordinator holds no connection to the first worker")
	}
	return n
}
