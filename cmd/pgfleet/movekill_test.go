package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/internal/pgcluster"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestMoveKilled: the coordinator process running a shard move is killed
// (SIGKILL) while the rows are copied by logical replication, and again
// after the move's transactions are prepared (its catalog change held up
// by a lock). Another coordinator's recovery undoes each move: the
// prepared transactions are rolled back after the grace, the replication
// objects, the target's copy and the move's record are removed, the rows
// are where the catalog says, all of them; and the move then runs to the
// end.
func TestMoveKilled(t *testing.T) {
	if _, err := pgcluster.BinDir(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	cl := pgtest.Start(t, 2)
	ctx := context.Background()
	w0, w1 := cl.Servers[0].Addr(), cl.Servers[1].Addr()
	bin := filepath.Join(t.TempDir(), "pgfleet")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	recoverer := pgtest.Coordinator(t, cl, func(c *coordinator.Config) {
		c.RecoveryInterval, c.RecoveryGrace = 200*time.Millisecond, 2*time.Second
	})
	c, err := pgx.Connect(ctx, pgtest.URL(recoverer.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	simple := pgx.QueryExecModeSimpleProtocol
	workers := make([]*pgx.Conn, 2)
	for i, w := range []string{w0, w1} {
		if workers[i], err = pgx.Connect(ctx, pgtest.URL(w)); err != nil {
			t.Fatal(err)
		}
		defer workers[i].Close(ctx)
	}
	for _, q := range []string{"CREATE TABLE mk (id bigint PRIMARY KEY, v text)",
		"SELECT create_distributed_table('mk', 'id', shard_count => 2)",
		"INSERT INTO mk SELECT g, repeat('x', 200) FROM generate_series(1, 50000) g"} {
		if _, err := c.Exec(ctx, q, simple); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var shard int64
	var port int
	// A shard on the second worker: the lock that holds up the catalog
	// change below is on the first (the metadata database), where it would
	// also hold up the creation of the move's replication slot, which
	// waits for every transaction running on its node.
	if err := workers[0].QueryRow(ctx, `SELECT s.shardid, n.port FROM pgfleet.shards s JOIN pgfleet.placements USING (shardid)
		JOIN pgfleet.nodes n USING (nodeid) WHERE s.table_name = 'public.mk' AND n.port = $1`, cl.Servers[1].Port).Scan(&shard, &port); err != nil {
		t.Fatal(err)
	}
	src, dst := 1, 0
	moveSQL := fmt.Sprintf("SELECT citus_move_shard_placement(%d, '%s', %d, '%s', %d, 'force_logical')", shard,
		cl.Servers[src].Host, cl.Servers[src].Port, cl.Servers[dst].Host, cl.Servers[dst].Port)

	// mover starts a coordinator process and runs the move through it
	// (its error, if it returns, goes to moved).
	moved := make(chan error, 2)
	var moverLog string
	mover := func() *exec.Cmd {
		t.Helper()
		p, err := pgcluster.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		addr := fmt.Sprintf("127.0.0.1:%d", p)
		cmd := exec.Command(bin, "serve", "--listen", addr, "--worker", w0, "--worker", w1, "--recovery-interval", "0")
		logf, err := os.Create(filepath.Join(t.TempDir(), "mover.log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		moverLog = logf.Name()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		go func() {
			for i := 0; i < 300; i++ {
				if mc, err := pgx.Connect(ctx, pgtest.URL(addr)); err == nil {
					_, err = mc.Exec(ctx, moveSQL, simple)
					moved <- err
					mc.Close(ctx)
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
		return cmd
	}
	waitFor := func(what string, w *pgx.Conn, q string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			var n int
			if err := w.QueryRow(ctx, q).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				return
			}
			select {
			case err := <-moved:
				t.Fatalf("waiting for %s, the move returned: %v", what, err)
			default:
			}
			if time.Now().After(deadline) {
				log, _ := os.ReadFile(moverLog)
				var act []string
				for _, w := range workers {
					rows, _ := w.Query(ctx, `SELECT coalesce(application_name,'') || ' ' || coalesce(state,'') || ' ' || coalesce(wait_event_type,'') || ':' || coalesce(wait_event,'') || ' ' || left(query, 120) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND state IS NOT NULL AND state <> 'idle'`)
					a, _ := pgx.CollectRows(rows, pgx.RowTo[string])
					act = append(act, a...)
				}
				t.Fatalf("%s never happened; the mover's log:\n%s\nactivity:\n%s", what, log, strings.Join(act, "\n"))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	kill := func(cmd *exec.Cmd) {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		select {
		case <-moved: // its client's connection ended with it
		case <-time.After(10 * time.Second):
			t.Fatal("the killed coordinator's client did not see it go")
		}
	}
	// undone checks that the move left nothing and moved nothing.
	undone := func(when string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			left := 0
			for i, w := range workers {
				var n int
				if err := w.QueryRow(ctx, `SELECT (SELECT count(*)::int FROM pg_subscription) + (SELECT count(*)::int FROM pg_publication)
					+ (SELECT count(*)::int FROM pg_replication_slots) + (SELECT count(*)::int FROM pg_prepared_xacts)
					+ (SELECT count(*)::int FROM pg_tables WHERE schemaname = 'pgfleet' AND tablename LIKE 'pgfleet_move%')
					+ (SELECT count(*)::int FROM pg_tables WHERE schemaname = 'pgfleet_shards' AND tablename = $1 AND $2)`,
					fmt.Sprintf("mk_%d", shard), i == dst).Scan(&n); err != nil {
					t.Fatal(err)
				}
				left += n
			}
			var records int
			if err := workers[0].QueryRow(ctx, "SELECT count(*)::int FROM pgfleet.shard_moves").Scan(&records); err != nil {
				t.Fatal(err)
			}
			if left == 0 && records == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("killed %s: %d objects and %d records of the move left after 30 s", when, left, records)
			}
			time.Sleep(100 * time.Millisecond)
		}
		var n, onSource int
		if err := c.QueryRow(ctx, "SELECT count(*)::int FROM mk", simple).Scan(&n); err != nil || n != 50000 {
			t.Fatalf("killed %s: mk has %d rows, %v; want 50000", when, n, err)
		}
		if err := workers[src].QueryRow(ctx, fmt.Sprintf("SELECT count(*)::int FROM pgfleet_shards.mk_%d", shard)).Scan(&onSource); err != nil || onSource == 0 {
			t.Fatalf("killed %s: the source's shard has %d rows, %v", when, onSource, err)
		}
	}

	// Killed while the subscription copies the rows.
	cmd := mover()
	waitFor("the move's subscription", workers[dst], "SELECT count(*)::int FROM pg_subscription")
	kill(cmd)
	undone("during the copy")

	// Killed after its transactions are prepared: its catalog change
	// waits behind a lock on the shard's placement.
	blocker, err := pgx.Connect(ctx, pgtest.URL(w0))
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Close(ctx)
	if _, err := blocker.Exec(ctx, fmt.Sprintf("BEGIN; SELECT FROM pgfleet.placements WHERE shardid = %d FOR UPDATE", shard)); err != nil {
		t.Fatal(err)
	}
	cmd = mover()
	waitFor("the move's prepared transaction", workers[src], "SELECT count(*)::int FROM pg_prepared_xacts")
	kill(cmd)
	if _, err := blocker.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	undone("after its prepare")

	// And then it runs to the end. (Until the killed coordinator's
	// metadata backend ends, or while recovery still cleans up, the move
	// lock is held: 55006, whose hint says to wait; seen under a full
	// suite's load.)
	for deadline := time.Now().Add(30 * time.Second); ; {
		_, err := c.Exec(ctx, moveSQL, simple)
		if err == nil {
			break
		}
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "55006" || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*)::int FROM mk", simple).Scan(&n); err != nil || n != 50000 {
		t.Fatalf("after the move: %d rows, %v", n, err)
	}
}
