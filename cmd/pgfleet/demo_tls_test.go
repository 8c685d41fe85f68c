package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgcluster"
)

// TestDemoTLS: `pgfleet demo --tls` makes a throwaway CA in its directory
// and prints URLs with sslmode=verify-full and that CA, which pgx and psql
// use over TLS; the CA goes with the directory on exit.
func TestDemoTLS(t *testing.T) {
	if _, err := pgcluster.BinDir(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	bin := filepath.Join(t.TempDir(), "pgfleet")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "demo", "--workers", "1", "--coordinators", "1", "--port", "0", "--tls")
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	readyCh := make(chan [2]string, 1) // the URL and the directory, from the ready line
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "ready:") {
				if m := regexp.MustCompile(`psql "([^"]+)".*removes (\S+)\)`).FindStringSubmatch(l); m != nil {
					readyCh <- [2]string{m[1], m[2]}
				} else {
					readyCh <- [2]string{"", l}
				}
			}
		}
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
		}
	})
	var url, dir string
	select {
	case r := <-readyCh:
		url, dir = r[0], r[1]
	case <-time.After(2 * time.Minute):
		t.Fatal("demo not ready within 2 minutes")
	}
	if url == "" {
		t.Fatalf("ready line without a psql URL and directory: %s", dir)
	}
	ca := filepath.Join(dir, "ca.crt")
	if !strings.HasSuffix(url, "?sslmode=verify-full&sslrootcert="+ca) {
		t.Fatalf("URL %s, want sslmode=verify-full&sslrootcert=%s", url, ca)
	}
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	if _, ok := c.PgConn().Conn().(*tls.Conn); !ok {
		t.Error("pgx connection to the demo is not TLS")
	}
	var one int
	if err := c.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Errorf("SELECT 1: %v", err)
	}
	c.Close(ctx)
	if psql, err := exec.LookPath("psql"); err == nil {
		out, err := exec.Command(psql, url, "-X", "-At", "-c", `\conninfo`, "-c", "SELECT 6 * 7").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "SSL connection (protocol: TLS") || !strings.Contains(string(out), "\n42\n") {
			t.Errorf("psql %s: %v\n%s", url, err, out)
		}
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("demo exit: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("demo did not stop within 30s of SIGTERM")
	}
	exited <- nil // for the cleanup
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("demo left %s (and its CA key) behind", dir)
	}
}
