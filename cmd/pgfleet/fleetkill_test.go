package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgcluster"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestFleetSIGKILL: three `pgfleet serve` processes joined by gossip share
// each worker's budget of 24 connections; 300 clients spread over them
// write rows. One coordinator is killed (SIGKILL) under that load: the
// other two keep serving (their clients see no error), their shares grow
// to the whole budget once gossip declares it dead (its lease is revoked:
// sooner than the lease's 10 s), and the killed one's clients reconnect to
// them. A
// restarted coordinator rejoins and gets a share. Then one is frozen
// (SIGSTOP) past failure detection and resumed. Samplers on both
// workers count the clients' server connections every 10 ms: never more
// than the budget. Every acknowledged write is there at the end.
func TestFleetSIGKILL(t *testing.T) {
	if _, err := pgcluster.BinDir(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	if testing.Short() {
		t.Skip("300 clients and three coordinators: not in -short")
	}
	const budget, db, user = 24, "fleet_kill", "fkill_user"
	cl := pgtest.Shared(t)
	ctx := context.Background()
	w0, w1 := cl.Servers[0].Addr(), cl.Servers[1].Addr()
	for _, w := range []string{w0, w1} {
		admin, err := pgx.Connect(ctx, pgtest.URL(w))
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{"DROP DATABASE IF EXISTS " + db + " WITH (FORCE)", "CREATE DATABASE " + db,
			"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '" + user + "') THEN CREATE ROLE " + user + " LOGIN SUPERUSER; END IF; END $$"} {
			if _, err := admin.Exec(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() {
			_, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
			admin.Close(context.Background())
		})
	}
	bin := filepath.Join(t.TempDir(), "pgfleet")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	type coord struct {
		cmd                   *exec.Cmd
		addr, gossip, metrics string
	}
	start := func(join string) *coord {
		t.Helper()
		ports := make([]int, 3)
		for i := range ports {
			p, err := pgcluster.FreePort()
			if err != nil {
				t.Fatal(err)
			}
			ports[i] = p
		}
		c := &coord{addr: fmt.Sprintf("127.0.0.1:%d", ports[0]), gossip: fmt.Sprintf("127.0.0.1:%d", ports[1]),
			metrics: fmt.Sprintf("127.0.0.1:%d", ports[2])}
		argv := []string{"serve", "--listen", c.addr, "--worker", w0, "--worker", w1,
			"--metadata", "postgres://postgres@" + w0 + "/" + db + "?sslmode=disable",
			"--worker-connections", fmt.Sprint(budget), "--lease", "10s", "--pool-size", "16", "--pool-timeout", "30s",
			"--recovery-interval", "1s", "--gossip", c.gossip, "--metrics-listen", c.metrics}
		if join != "" {
			argv = append(argv, "--join", join)
		}
		c.cmd = exec.Command(bin, argv...)
		c.cmd.Stderr = os.Stderr
		if err := c.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = c.cmd.Process.Kill()
			_ = c.cmd.Wait()
		})
		return c
	}
	url := func(addr string) string { return "postgres://" + user + "@" + addr + "/" + db + "?sslmode=disable" }
	connect := func(addr string) (*pgx.Conn, error) {
		var err error
		for i := 0; i < 300; i++ {
			var c *pgx.Conn
			if c, err = pgx.Connect(ctx, url(addr)); err == nil {
				return c, nil
			}
			time.Sleep(50 * time.Millisecond)
		}
		return nil, err
	}
	meta, err := pgx.Connect(ctx, "postgres://postgres@"+w0+"/"+db+"?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer meta.Close(ctx)
	// shares are the live coordinators' recorded shares of w0, by address.
	shares := func() map[string]int {
		out := map[string]int{}
		rows, err := meta.Query(ctx, `SELECT c.address, s.share FROM pgfleet.connection_shares s
			JOIN pgfleet.coordinators c ON c.name = s.coordinator WHERE s.worker = $1 AND c.expires > now()`, w0)
		if err != nil {
			t.Logf("reading the shares: %v", err)
			time.Sleep(200 * time.Millisecond)
			return out
		}
		for rows.Next() {
			var a string
			var n int
			if rows.Scan(&a, &n) == nil {
				out[a] = n
			}
		}
		return out
	}
	waitShares := func(what string, want map[string]int) time.Duration {
		t.Helper()
		began := time.Now()
		for {
			got := shares()
			ok := len(got) == len(want)
			for a, n := range want {
				ok = ok && got[a] == n
			}
			if ok {
				return time.Since(began)
			}
			if time.Since(began) > 30*time.Second {
				t.Fatalf("%s: shares %v, want %v", what, got, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// members is how many coordinators one counts in the fleet (gossip).
	members := func(m string) int {
		resp, err := http.Get("http://" + m + "/metrics")
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		for _, line := range strings.Split(string(body), "\n") {
			if v, ok := strings.CutPrefix(line, "pgfleet_fleet_members "); ok {
				n, _ := strconv.Atoi(v)
				return n
			}
		}
		return -1
	}
	waitMembers := func(what string, m string, want int) time.Duration {
		t.Helper()
		began := time.Now()
		for members(m) != want {
			if time.Since(began) > 30*time.Second {
				t.Fatalf("%s: %d members, want %d", what, members(m), want)
			}
			time.Sleep(20 * time.Millisecond)
		}
		return time.Since(began)
	}

	a := start("")
	setup, err := connect(a.addr) // a is up: the others join through it
	if err != nil {
		t.Fatal(err)
	}
	defer setup.Close(ctx)
	b := start(a.gossip)
	c := start(a.gossip)
	for _, x := range []*coord{a, b, c} {
		waitMembers("three coordinators", x.metrics, 3)
	}
	simple := pgx.QueryExecModeSimpleProtocol
	for _, q := range []string{"CREATE TABLE kt (id bigint PRIMARY KEY, via text NOT NULL)",
		"SELECT create_distributed_table('kt', 'id', shard_count => 8)"} {
		if _, err := setup.Exec(ctx, q, simple); err != nil {
			t.Fatal(err)
		}
	}
	waitShares("three coordinators", map[string]int{a.addr: budget / 3, b.addr: budget / 3, c.addr: budget / 3})
	max0, stop0 := pgtest.SampleConnections(t, w0, user)
	max1, stop1 := pgtest.SampleConnections(t, w1, user)

	// 300 clients, 100 through each; a client of the killed coordinator
	// reconnects through the survivors.
	var (
		nextID  atomic.Int64
		ackMu   sync.Mutex
		acked   []int64
		killed  atomic.Bool
		frozen  atomic.Bool // b, stopped
		live    atomic.Value
		failed  atomic.Value
		moved   atomic.Int64
		wg      sync.WaitGroup
		stopRun = make(chan struct{})
	)
	live.Store([]string{a.addr, b.addr})
	for i := 0; i < 300; i++ {
		addr := []string{a.addr, b.addr, c.addr}[i%3]
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := connect(addr)
			if err != nil {
				failed.Store(fmt.Sprintf("connecting to %s: %v", addr, err))
				return
			}
			defer func() {
				if conn != nil { // (nil after a failed reconnect, which is reported)
					conn.Close(ctx)
				}
			}()
			for {
				select {
				case <-stopRun:
					return
				default:
				}
				id := nextID.Add(1)
				_, err := conn.Exec(ctx, "INSERT INTO kt (id, via) VALUES ($1, $2)", id, addr)
				if err == nil {
					ackMu.Lock()
					acked = append(acked, id)
					ackMu.Unlock()
					continue
				}
				var pe *pgconn.PgError
				disturbed := addr == c.addr && killed.Load() || addr == b.addr && frozen.Load()
				if !disturbed || addr == c.addr && errors.As(err, &pe) && pe.Code != "08006" && pe.Code != "57P01" {
					failed.Store(fmt.Sprintf("a client of %s: %v", addr, err))
					return
				}
				// The coordinator was killed: its write's outcome is
				// unknown (not acknowledged); go on through another.
				conn.Close(ctx)
				to := live.Load().([]string)
				addr = to[id%int64(len(to))]
				if conn, err = connect(addr); err != nil {
					failed.Store(fmt.Sprintf("reconnecting to %s: %v", addr, err))
					return
				}
				moved.Add(1)
			}
		}()
	}
	time.Sleep(3 * time.Second)
	before := nextID.Load()
	killed.Store(true)
	if err := c.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	detected := waitMembers("c killed", a.metrics, 2)
	waitShares("c killed", map[string]int{a.addr: budget / 2, b.addr: budget / 2})
	took := time.Since(began)
	t.Logf("c killed: gossip declared it dead after %v; a and b hold the whole budget after %v (lease 10s)",
		detected.Round(time.Millisecond), took.Round(time.Millisecond))
	if took > 10*time.Second {
		t.Errorf("a and b took the killed coordinator's share after %v, the lease's length: gossip did not revoke its lease", took)
	}
	time.Sleep(2 * time.Second)
	if nextID.Load() == before {
		t.Error("no write was attempted after the kill")
	}
	// A restarted coordinator rejoins and gets a share; a client writes
	// through it.
	c2 := start(b.gossip)
	took = waitShares("c restarted", map[string]int{a.addr: budget / 3, b.addr: budget / 3, c2.addr: budget / 3})
	t.Logf("a restarted coordinator has its share after %v", took.Round(time.Millisecond))
	cc, err := connect(c2.addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cc.Exec(ctx, "INSERT INTO kt (id, via) VALUES ($1, 'c2')", -1); err != nil {
		t.Fatalf("a write through the restarted coordinator: %v", err)
	}
	cc.Close(ctx)
	time.Sleep(time.Second)

	// b frozen (SIGSTOP) past failure detection: the others revoke its
	// lease, end its backends and take its share; resumed, b finds its
	// lease lost, closes everything and rejoins as a newcomer (it had
	// recorded backends over the budget others had taken: an adversary
	// saw 32 of 30). Its clients move to the others.
	live.Store([]string{a.addr, c2.addr})
	frozen.Store(true)
	if err := b.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.cmd.Process.Signal(syscall.SIGCONT) })
	waitShares("b frozen", map[string]int{a.addr: budget / 2, c2.addr: budget / 2})
	if err := b.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	took = waitShares("b resumed", map[string]int{a.addr: budget / 3, b.addr: budget / 3, c2.addr: budget / 3})
	t.Logf("b, frozen past failure detection and resumed, has its share again after %v", took.Round(time.Millisecond))
	time.Sleep(time.Second)
	close(stopRun)
	wg.Wait()
	stop0()
	stop1()
	if f := failed.Load(); f != nil {
		t.Errorf("%v", f)
	}
	if m0, m1 := max0(), max1(); m0 > budget || m1 > budget {
		t.Errorf("the coordinators held %d and %d connections on the workers at once, over the budget of %d", m0, m1, budget)
	} else {
		t.Logf("at most %d and %d connections on the workers (budget %d)", m0, m1, budget)
	}
	if moved.Load() < 90 {
		t.Errorf("%d clients of the killed coordinator moved to the others, want about 100", moved.Load())
	}
	// Every acknowledged write is there.
	rows, err := setup.Query(ctx, "SELECT id FROM kt", simple)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	lost := 0
	for _, id := range acked {
		if _, ok := slices.BinarySearch(ids, id); !ok {
			lost++
		}
	}
	if lost > 0 || !slices.Contains(ids, -1) {
		t.Errorf("%d of %d acknowledged writes lost (the restarted coordinator's: %v)", lost, len(acked), slices.Contains(ids, -1))
	}
	t.Logf("%d writes acknowledged, %d rows, %d clients moved", len(acked), len(ids), moved.Load())
}
