package main

import (
	"bufio"
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestDemo runs the README's first command as a user would: the demo
// binary starts workers and a coordinator, psql-style clients work through
// it, and SIGTERM leaves no server and no directory behind.
func TestDemo(t *testing.T) {
	cmd := exec.Command(buildDemo(t), "demo", "--workers", "2", "--coordinators", "2", "--port", "0",
		"--pgbench-scale", "1", "--shards", "4")
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
		}
	})
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	var workers, coords []string
	var ready, dir, fleetLine string
	urlRe := regexp.MustCompile(`postgres://\S+`)
	timeout := time.After(2 * time.Minute)
	for ready == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("demo exited before it was ready")
			}
			u := urlRe.FindString(l)
			switch {
			case strings.HasPrefix(strings.TrimSpace(l), "worker "):
				workers = append(workers, u)
			case strings.HasPrefix(strings.TrimSpace(l), "coordinator "):
				coords = append(coords, u)
			case strings.HasPrefix(strings.TrimSpace(l), "the fleet "):
				fleetLine = l
			case strings.HasPrefix(l, "ready:"):
				ready = strings.TrimSuffix(u, `"`)
				if m := regexp.MustCompile(`removes (\S+)\)`).FindStringSubmatch(l); m != nil {
					dir = m[1]
				}
			}
		case <-timeout:
			t.Fatal("demo not ready within 2 minutes")
		}
	}
	if len(workers) != 2 || len(coords) != 2 || dir == "" {
		t.Fatalf("demo printed workers %v, coordinators %v, dir %q", workers, coords, dir)
	}
	// The coordinators are one fleet: joined by gossip, and a libpq URL
	// naming both.
	second, err := url.Parse(coords[1])
	if err != nil || !strings.Contains(fleetLine, "(gossip, 2 members)") || !strings.Contains(fleetLine, ","+second.Host+"/") {
		t.Errorf("demo's fleet line: %q", fleetLine)
	}
	ctx := context.Background()
	for _, u := range coords {
		c, err := pgx.Connect(ctx, u)
		if err != nil {
			t.Fatalf("connect %s: %v", u, err)
		}
		var one int
		if err := c.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
			t.Fatalf("SELECT 1 through %s: %v", u, err)
		}
		c.Close(ctx)
	}
	if psql, err := exec.LookPath("psql"); err == nil {
		script := `CREATE TABLE demo_t (id int PRIMARY KEY, v text);
INSERT INTO demo_t VALUES (1, 'one'), (2, 'two');
BEGIN;
UPDATE demo_t SET v = 'uno' WHERE id = 1;
COMMIT;
SELECT v FROM demo_t ORDER BY id;
`
		cmd := exec.Command(psql, ready, "-X", "-v", "ON_ERROR_STOP=1")
		cmd.Stdin = strings.NewReader(script)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("psql: %v\n%s", err, out)
		}
		out, err = exec.Command(psql, ready, "-X", "-At", "-v", "ON_ERROR_STOP=1",
			"-c", "SELECT string_agg(v, ',' ORDER BY id) FROM demo_t", "-c", `\d demo_t`).CombinedOutput()
		if err != nil {
			t.Fatalf("psql: %v\n%s", err, out)
		}
		if !strings.HasPrefix(string(out), "uno,two\n") || !strings.Contains(string(out), "id|integer||not null") {
			t.Errorf("psql output:\n%s", out)
		}
	}
	// The Citus mix over the distributed pgbench schema the demo loaded,
	// with prepared statements through the second coordinator.
	if pgbench, err := exec.LookPath("pgbench"); err == nil {
		w := "../../bench/workloads/"
		out, err := exec.Command(pgbench, "-n", "-M", "prepared", "-c", "16", "-j", "2", "-T", "2",
			"-D", "naccounts=100000", "-D", "hot_pct=5", "-f", w+"hot.sql@80", "-f", w+"uniform.sql@10",
			"-f", w+"tellers.sql@5", "-f", w+"branches.sql@5", coords[1]).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "number of failed transactions: 0 (0.000%)") {
			t.Errorf("pgbench Citus mix through the demo: %v\n%s", err, out)
		}
	} else if os.Getenv("CI") != "" {
		t.Error("pgbench not found under CI")
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
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
		t.Errorf("demo left %s behind", dir)
	}
	if pids := postgresUnder(dir); len(pids) > 0 {
		t.Errorf("postgres still running from %s: %v", dir, pids)
	}
}

// postgresUnder lists processes whose command line names dir.
func postgresUnder(dir string) []string {
	var pids []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), dir) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}
