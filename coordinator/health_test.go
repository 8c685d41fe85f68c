package coordinator_test

import (
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// probe GETs a health endpoint and returns its status and body.
func probe(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	cl := http.Client{Timeout: 20 * time.Second}
	resp, err := cl.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// readyUntil probes /readyz until it answers want (answers are cached
// for a second) and returns the last body.
func readyUntil(t *testing.T, addr string, want int) string {
	t.Helper()
	for i := 0; ; i++ {
		code, body := probe(t, addr, "/readyz")
		if code == want {
			return body
		}
		if i == 50 {
			t.Fatalf("/readyz: %d %q, want %d", code, body, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestReadyz: /readyz answers 200 while the catalog, the metadata database
// and every worker answer, and 503 naming the worker while one is stopped
// (SIGSTOP: it accepts connections and answers nothing) or down; /healthz
// answers 200 throughout.
func TestReadyz(t *testing.T) {
	cl := pgtest.Start(t, 2)
	srv := pgtest.Coordinator(t, cl, func(c *coordinator.Config) { c.MetricsListen = "127.0.0.1:0" })
	m := srv.MetricsAddr()
	if code, body := probe(t, m, "/readyz"); code != 200 || body != "ready\n" {
		t.Fatalf("/readyz with every worker up: %d %q", code, body)
	}
	w2 := cl.Servers[1]
	if err := syscall.Kill(w2.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			_ = syscall.Kill(w2.Pid(), syscall.SIGCONT)
		}
	}()
	body := readyUntil(t, m, 503)
	if !strings.Contains(body, "worker "+w2.Addr()) {
		t.Errorf("/readyz with worker 2 stopped: %q, want it named", body)
	}
	if code, _ := probe(t, m, "/healthz"); code != 200 {
		t.Errorf("/healthz with a worker stopped: %d", code)
	}
	_ = syscall.Kill(w2.Pid(), syscall.SIGCONT)
	stopped = false
	readyUntil(t, m, 200)
	w2.Stop()
	body = readyUntil(t, m, 503)
	if !strings.Contains(body, "worker "+w2.Addr()) {
		t.Errorf("/readyz with worker 2 down: %q, want it named", body)
	}
	if code, _ := probe(t, m, "/healthz"); code != 200 {
		t.Errorf("/healthz with a worker down: %d", code)
	}
}
