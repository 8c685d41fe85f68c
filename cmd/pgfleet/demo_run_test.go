package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgfleet/pgfleet/internal/pgcluster"
)

// buildDemo builds the pgfleet binary for a test that runs the demo as a
// user would (skipped where PostgreSQL is not installed, outside CI).
func buildDemo(t *testing.T) string {
	t.Helper()
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
	return bin
}

// demoRun is a running `pgfleet demo`: the psql URL and the whole line it
// printed when ready.
type demoRun struct {
	cmd       *exec.Cmd
	exited    chan error
	URL, Line string
}

var readyURL = regexp.MustCompile(`psql "([^"]+)"`)

// startDemo starts bin demo with args and waits for its ready line; the
// test's cleanup stops it if the test has not.
func startDemo(t *testing.T, bin string, args ...string) *demoRun {
	t.Helper()
	d := &demoRun{cmd: exec.Command(bin, append([]string{"demo"}, args...)...), exited: make(chan error, 1)}
	stdout, _ := d.cmd.StdoutPipe()
	d.cmd.Stderr = os.Stderr
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "ready:") {
				ready <- l
			}
		}
		d.exited <- d.cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.exited:
		case <-time.After(30 * time.Second):
			_ = d.cmd.Process.Kill()
		}
	})
	select {
	case d.Line = <-ready:
	case err := <-d.exited:
		d.exited <- err
		t.Fatalf("demo exited before it was ready: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("demo not ready within 2 minutes")
	}
	if m := readyURL.FindStringSubmatch(d.Line); m != nil {
		d.URL = m[1]
	} else {
		t.Fatalf("ready line without a psql URL: %s", d.Line)
	}
	return d
}

// stop sends SIGTERM and waits for a clean exit.
func (d *demoRun) stop(t *testing.T) {
	t.Helper()
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.exited:
		if err != nil {
			t.Errorf("demo exit: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("demo did not stop within 30s of SIGTERM")
	}
	d.exited <- nil // for the cleanup
}
