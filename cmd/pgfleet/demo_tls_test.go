package main

import (
	"context"
	"crypto/tls"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestDemoTLS: `pgfleet demo --tls` makes a throwaway CA in its directory
// and prints URLs with sslmode=verify-full and that CA, which pgx and psql
// use over TLS; the CA goes with the directory on exit.
func TestDemoTLS(t *testing.T) {
	d := startDemo(t, buildDemo(t), "--workers", "1", "--coordinators", "1", "--port", "0", "--tls")
	url := d.URL
	m := regexp.MustCompile(`removes (\S+)\)`).FindStringSubmatch(d.Line)
	if m == nil {
		t.Fatalf("ready line without the directory: %s", d.Line)
	}
	dir := m[1]
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
	d.stop(t)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("demo left %s (and its CA key) behind", dir)
	}
}
