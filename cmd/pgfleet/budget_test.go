package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgcluster"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestBudgetSIGSTOP: two `pgfleet serve` processes share a worker's budget
// of 6 connections. One is stopped (SIGSTOP) holding 2 connections in open
// transactions; once its lease lapses the other ends those backends and
// takes the whole budget, and a sampler counting the clients' connections
// on the worker every 10 ms never sees more than 6, also after the stopped
// one resumes (its transactions are gone, it rejoins with its share).
func TestBudgetSIGSTOP(t *testing.T) {
	if _, err := pgcluster.BinDir(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	cl := pgtest.Shared(t)
	ctx := context.Background()
	w0 := cl.Servers[0].Addr()
	admin, err := pgx.Connect(ctx, pgtest.URL(w0))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	for _, q := range []string{"DROP DATABASE IF EXISTS budget_stop WITH (FORCE)", "CREATE DATABASE budget_stop",
		"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'bstop_user') THEN CREATE ROLE bstop_user LOGIN SUPERUSER; END IF; END $$"} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS budget_stop WITH (FORCE)") })
	bin := filepath.Join(t.TempDir(), "pgfleet")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	start := func() (*exec.Cmd, string) {
		port, err := pgcluster.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		cmd := exec.Command(bin, "serve", "--listen", addr, "--worker", w0, "--worker", cl.Servers[1].Addr(),
			"--metadata", "postgres://postgres@"+w0+"/budget_stop?sslmode=disable",
			"--worker-connections", "6", "--lease", "2s", "--pool-size", "8", "--pool-timeout", "20s", "--recovery-interval", "0")
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGCONT)
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		return cmd, addr
	}
	client := func(addr string) *pgx.Conn {
		t.Helper()
		for i := 0; ; i++ {
			c, err := pgx.Connect(ctx, "postgres://bstop_user@"+addr+"/postgres?sslmode=disable")
			if err == nil {
				return c
			}
			if i == 300 {
				t.Fatalf("pgfleet serve at %s never accepted a client: %v", addr, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	share := func(addr string) int {
		c, err := pgx.Connect(ctx, "postgres://postgres@"+w0+"/budget_stop?sslmode=disable")
		if err != nil {
			return -1
		}
		defer c.Close(ctx)
		var n int
		if err := c.QueryRow(ctx, `SELECT s.share FROM pgfleet.connection_shares s JOIN pgfleet.coordinators c ON c.name = s.coordinator
			WHERE c.address = $1 AND s.worker = $2`, addr, w0).Scan(&n); err != nil {
			return -1
		}
		return n
	}
	waitShare := func(what, addr string, want int) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for share(addr) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: share %d recorded, want %d", what, share(addr), want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	maxSeen, stopSampler := pgtest.SampleConnections(t, w0, "bstop_user")

	_, addrA := start()
	cmdB, addrB := start()
	client(addrA).Close(ctx)
	held := []*pgx.Conn{}
	for i := 0; i < 2; i++ { // a share of 3 over 2 workers: 2 for clients holding no other connection
		held = append(held, client(addrB))
	}
	waitShare("a", addrA, 3)
	waitShare("b", addrB, 3)
	for _, c := range held {
		if _, err := c.Exec(ctx, "BEGIN; SELECT 1"); err != nil {
			t.Fatal(err)
		}
	}
	if err := cmdB.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Load through A: it gets B's share once B's lease lapsed and B's
	// backends are ended.
	var wg sync.WaitGroup
	stopLoad := make(chan struct{})
	var failed atomic.Value
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := pgx.Connect(ctx, "postgres://bstop_user@"+addrA+"/postgres?sslmode=disable")
			if err != nil {
				failed.Store(err.Error())
				return
			}
			defer c.Close(ctx)
			for {
				select {
				case <-stopLoad:
					return
				default:
				}
				if _, err := c.Exec(ctx, "SELECT pg_sleep(0.01)"); err != nil {
					failed.Store(err.Error())
					return
				}
			}
		}()
	}
	waitShare("a with b stopped", addrA, 6)
	time.Sleep(time.Second)
	busy := maxSeen()
	if err := cmdB.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for _, c := range held {
		if _, err := c.Exec(ctx, "SELECT 1"); err == nil {
			t.Error("a transaction of the stopped coordinator survived its lease")
		}
	}
	waitShare("b resumed", addrB, 3)
	waitShare("a after b resumed", addrA, 3)
	time.Sleep(500 * time.Millisecond)
	close(stopLoad)
	wg.Wait()
	stopSampler()
	if f := failed.Load(); f != nil {
		t.Errorf("a client through the running coordinator failed: %v", f)
	}
	if m := maxSeen(); m > 6 {
		t.Errorf("the worker held %d of the coordinators' connections at once, over the budget of 6", m)
	}
	if busy < 5 {
		t.Errorf("with b stopped, a used at most %d connections at once: it did not take b's share", busy)
	}
}
