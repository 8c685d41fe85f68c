package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgcluster"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestServeSIGTERM: a `pgfleet serve` process sent SIGTERM refuses new
// connections, ends an idle client's session with FATAL 57P01 "terminating
// connection due to administrator command", lets a client in a transaction
// commit (then ends its session too) and exits with status 0.
func TestServeSIGTERM(t *testing.T) {
	if _, err := pgcluster.BinDir(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	cl := pgtest.Shared(t)
	bin := filepath.Join(t.TempDir(), "pgfleet")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	port, err := pgcluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(bin, "serve", "--listen", addr, "--worker", cl.Servers[0].Addr(),
		"--worker", cl.Servers[1].Addr(), "--shutdown-timeout", "2m", "--recovery-interval", "0")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	ctx := context.Background()
	url := "postgres://postgres@" + addr + "/postgres?sslmode=disable"
	var inTx *pgx.Conn
	for i := 0; ; i++ {
		if inTx, err = pgx.Connect(ctx, url); err == nil {
			break
		}
		if i == 300 {
			t.Fatalf("pgfleet serve never accepted a client: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer inTx.Close(ctx)
	idle, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close(ctx)
	direct, err := pgx.Connect(ctx, cl.Servers[0].URL())
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close(ctx)
	mustExec := func(c *pgx.Conn, sql string) {
		t.Helper()
		if _, err := c.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	mustExec(direct, "DROP TABLE IF EXISTS sigterm_t")
	mustExec(direct, "CREATE TABLE sigterm_t (id int)")
	defer direct.Exec(ctx, "DROP TABLE IF EXISTS sigterm_t")
	mustExec(inTx, "BEGIN")
	mustExec(inTx, "INSERT INTO sigterm_t VALUES (1)")

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			break
		}
		c.Close()
		if i == 300 {
			t.Fatal("still accepting connections after SIGTERM")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var pe *pgconn.PgError
	_, err = idle.Exec(ctx, "SELECT 1")
	if !errors.As(err, &pe) || pe.Code != "57P01" || pe.Severity != "FATAL" ||
		pe.Message != "terminating connection due to administrator command" {
		t.Errorf("idle client after SIGTERM: got %v, want FATAL 57P01", err)
	}
	mustExec(inTx, "INSERT INTO sigterm_t VALUES (2)")
	mustExec(inTx, "COMMIT")
	_, err = inTx.Exec(ctx, "SELECT 1")
	if !errors.As(err, &pe) || pe.Code != "57P01" {
		t.Errorf("client after its transaction: got %v, want 57P01", err)
	}
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		if err != nil {
			t.Errorf("pgfleet serve exited with %v, want status 0", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("pgfleet serve did not exit once its clients were gone")
	}
	var n int
	if err := direct.QueryRow(ctx, "SELECT count(*) FROM sigterm_t").Scan(&n); err != nil || n != 2 {
		t.Errorf("rows committed during shutdown: %d %v, want 2", n, err)
	}
}

// TestEmptyPasswordRefused: a --user with an empty password would let
// anyone in as that user; PostgreSQL never accepts an empty password, and
// pgfleet refuses to start with one.
func TestEmptyPasswordRefused(t *testing.T) {
	f := coordinatorFlags{users: []string{"x:"}}
	if _, err := f.config("0.0.0.0:7496", []string{"127.0.0.1:5432"}); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("--user x: gave %v, want a refusal naming the empty password", err)
	}
	f = coordinatorFlags{users: []string{"x:pw:with:colons"}, logLevel: "info"}
	cfg, err := f.config("127.0.0.1:7496", []string{"127.0.0.1:5432"})
	if err != nil || cfg.Users["x"] != "pw:with:colons" {
		t.Errorf("--user x:pw:with:colons: %v, %q", err, cfg.Users["x"])
	}
}
