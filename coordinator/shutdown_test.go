package coordinator_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// refusing waits until the coordinator no longer accepts connections.
func refusing(t *testing.T, addr string) {
	t.Helper()
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return
		}
		c.Close()
		if i == 200 {
			t.Fatal("the coordinator still accepts connections during shutdown")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitingOnLock waits until a backend of the worker running a statement
// on table waits for a lock.
func waitingOnLock(t *testing.T, direct *pgx.Conn, table string) {
	t.Helper()
	for i := 0; ; i++ {
		var n int
		if err := direct.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks l
			JOIN pg_stat_activity a USING (pid) WHERE NOT l.granted AND a.query LIKE '%' || $1 || '%'`, table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if i == 500 {
			t.Fatal("the blocked statement never waited")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestGracefulShutdown: after Shutdown begins, new connections are refused,
// an idle client gets FATAL 57P01, a client in a transaction may go on and
// commit (and then gets 57P01), a statement running when it began finishes
// with its answer, and Shutdown returns once they are all gone, before its
// deadline.
func TestGracefulShutdown(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	direct := connectURL(t, cl.Servers[0].URL())
	exec(t, direct, "DROP TABLE IF EXISTS gs_t")
	exec(t, direct, "CREATE TABLE gs_t (id int PRIMARY KEY)")
	t.Cleanup(func() { _, _ = direct.Exec(context.Background(), "DROP TABLE IF EXISTS gs_t") })

	inTx, idle, running := connect(t, srv.Addr()), connect(t, srv.Addr()), connect(t, srv.Addr())
	exec(t, inTx, "BEGIN")
	exec(t, inTx, "INSERT INTO gs_t VALUES (1)")
	// running waits for inTx's row lock: it is mid-statement throughout.
	ranErr := make(chan error, 1)
	go func() {
		_, err := running.Exec(ctx, "INSERT INTO gs_t VALUES (1) ON CONFLICT (id) DO UPDATE SET id = 2")
		ranErr <- err
	}()
	waitingOnLock(t, direct, "gs_t")

	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(sctx) }()
	refusing(t, srv.Addr())

	if _, err := pgx.Connect(ctx, pgtest.URL(srv.Addr())); err == nil {
		t.Error("a new client connected during shutdown")
	}
	_, err := idle.Exec(ctx, "SELECT 1")
	if sqlState(err) != "57P01" {
		t.Errorf("idle client during shutdown: got %v, want 57P01", err)
	}
	// The transaction goes on and commits.
	exec(t, inTx, "INSERT INTO gs_t VALUES (3)")
	exec(t, inTx, "COMMIT")
	if err := <-ranErr; err != nil {
		t.Errorf("statement running at shutdown: %v", err)
	}
	_, err = inTx.Exec(ctx, "SELECT 1")
	if sqlState(err) != "57P01" {
		t.Errorf("client after its transaction: got %v, want 57P01", err)
	}
	_, err = running.Exec(ctx, "SELECT 1")
	if sqlState(err) != "57P01" {
		t.Errorf("client after its statement: got %v, want 57P01", err)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if sctx.Err() != nil {
		t.Error("Shutdown waited for its deadline")
	}
	var got []int32
	rows, _ := direct.Query(ctx, "SELECT id FROM gs_t ORDER BY id")
	got, err = pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil || len(got) != 2 || got[0] != 2 || got[1] != 3 {
		t.Errorf("rows after shutdown: %v %v, want [2 3]", got, err)
	}
}

// TestShutdownDeadline: at Shutdown's deadline a client idle in a
// transaction and a client whose statement is still running get FATAL
// 57P01, their transactions are rolled back, and no backend of theirs is
// left on the worker.
func TestShutdownDeadline(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, func(c *coordinator.Config) { c.Listen = "127.0.0.1:0" })
	ctx := context.Background()
	direct := connectURL(t, cl.Servers[0].URL())
	exec(t, direct, "DROP TABLE IF EXISTS gsd_t")
	exec(t, direct, "CREATE TABLE gsd_t (id int PRIMARY KEY)")
	t.Cleanup(func() { _, _ = direct.Exec(context.Background(), "DROP TABLE IF EXISTS gsd_t") })

	inTx, running := connect(t, srv.Addr()), connect(t, srv.Addr())
	exec(t, inTx, "BEGIN")
	exec(t, inTx, "INSERT INTO gsd_t VALUES (1)")
	ranErr := make(chan error, 1)
	go func() {
		_, err := running.Exec(ctx, "BEGIN; INSERT INTO gsd_t VALUES (5); INSERT INTO gsd_t VALUES (1); COMMIT")
		ranErr <- err
	}()
	waitingOnLock(t, direct, "gsd_t")

	sctx, cancel := context.WithCancel(ctx)
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(sctx) }()
	refusing(t, srv.Addr())
	cancel() // the deadline
	if err := <-ranErr; sqlState(err) != "57P01" {
		t.Errorf("statement running at the deadline: got %v, want 57P01", err)
	}
	_, err := inTx.Exec(ctx, "COMMIT")
	if sqlState(err) != "57P01" {
		t.Errorf("client in a transaction at the deadline: got %v, want 57P01", err)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	var n int
	if err := direct.QueryRow(ctx, "SELECT count(*) FROM gsd_t").Scan(&n); err != nil || n != 0 {
		t.Errorf("rows after the deadline: %d %v, want none (both transactions rolled back)", n, err)
	}
	// The cancelled statement's backend goes too (it held a lock wait).
	for i := 0; ; i++ {
		var left int
		if err := direct.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE pid <> pg_backend_pid() AND datname = current_database() AND backend_type = 'client backend'
			AND (state <> 'idle' OR xact_start IS NOT NULL) AND query LIKE '%gsd_t%'`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			break
		}
		if i == 100 {
			t.Fatalf("%d backends of the shut-down coordinator still in a transaction", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
