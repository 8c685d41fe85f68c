package coordinator_test

import (
	"io"
	"net/http"
	"strconv"
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

// TestRequestMetrics: /metrics counts each client request in the latency
// histogram (five queries: at least five, and each answered under the
// histogram's last bucket) and reports the pools by worker.
func TestRequestMetrics(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, func(c *coordinator.Config) { c.MetricsListen = "127.0.0.1:0" })
	c := connect(t, srv.Addr())
	for i := 0; i < 5; i++ {
		exec(t, c, "SELECT 1")
	}
	code, body := probe(t, srv.MetricsAddr(), "/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	value := func(prefix string) float64 {
		t.Helper()
		for _, line := range strings.Split(body, "\n") {
			if rest, ok := strings.CutPrefix(line, prefix+" "); ok {
				v, err := strconv.ParseFloat(rest, 64)
				if err != nil {
					t.Fatalf("%s: %v", line, err)
				}
				return v
			}
		}
		t.Fatalf("/metrics has no %s:\n%s", prefix, body)
		return 0
	}
	if n := value("pgfleet_request_duration_seconds_count"); n < 5 {
		t.Errorf("requests counted: %v, want at least 5", n)
	}
	if n, all := value(`pgfleet_request_duration_seconds_bucket{le="2.384185791015625"}`), value("pgfleet_request_duration_seconds_count"); n != all {
		t.Errorf("requests under 2.4 s: %v of %v", n, all)
	}
	w := cl.Servers[0].Addr()
	if v := value(`pgfleet_pool_connections_idle{worker="` + w + `"}`); v < 1 {
		t.Errorf("idle connections to %s after the queries: %v, want at least 1", w, v)
	}
	value(`pgfleet_pool_connections_in_use{worker="` + w + `"}`)
	value(`pgfleet_pool_waiting{worker="` + w + `"}`)
}
