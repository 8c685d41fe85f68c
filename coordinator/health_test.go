package coordinator_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
	// Statements by plan kind, in both protocols, and errors by SQLSTATE:
	// a worker's (22012), the coordinator's own (0A000), and one raised
	// by a function with a code of its own.
	testTable(t, c, "rm_t", "(k int PRIMARY KEY, v int)", "SELECT create_distributed_table('rm_t', 'k', shard_count => 4)")
	simple := pgx.QueryExecModeSimpleProtocol
	for i := 0; i < 3; i++ {
		exec(t, c, "INSERT INTO rm_t VALUES ($1, 1)", i)
		exec(t, c, "SELECT * FROM rm_t WHERE k = 1", simple)
		exec(t, c, "SELECT count(*) FROM rm_t WHERE v = $1", 1)
		exec(t, c, "SELECT count(*) FROM rm_t WHERE v = 1", simple)
	}
	for _, q := range []string{"SELECT 1/0", "SELECT name FROM pg_prepared_statements"} {
		if _, err := c.Exec(context.Background(), q, simple); err == nil {
			t.Fatalf("%s: no error", q)
		}
		if _, err := c.PgConn().ExecParams(context.Background(), q, nil, nil, nil, nil).Close(); err == nil {
			t.Fatalf("%s over the extended protocol: no error", q)
		}
	}
	_, err := c.Exec(context.Background(), `DO $$ BEGIN RAISE EXCEPTION 'mine' USING ERRCODE = 'P0123'; END $$`)
	if sqlState(err) != "P0123" {
		t.Fatalf("RAISE with ERRCODE P0123: %v", err)
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
	// Durations are in seconds: all but the slowest two requests (the
	// distribution among them, over 2.4 s once on a loaded machine) are
	// in the 2.4 s bucket; milliseconds taken for seconds would put none.
	if n, all := value(`pgfleet_request_duration_seconds_bucket{le="2.384185791015625"}`), value("pgfleet_request_duration_seconds_count"); n < all-2 {
		t.Errorf("requests under 2.4 s: %v of %v", n, all)
	}
	w := cl.Servers[0].Addr()
	if v := value(`pgfleet_pool_connections_idle{worker="` + w + `"}`); v < 1 {
		t.Errorf("idle connections to %s after the queries: %v, want at least 1", w, v)
	}
	value(`pgfleet_pool_connections_in_use{worker="` + w + `"}`)
	value(`pgfleet_pool_waiting{worker="` + w + `"}`)
	for kind, want := range map[string]float64{"router": 6, "multi-shard": 6} {
		if v := value(`pgfleet_statements_total{kind="` + kind + `"}`); v != want {
			t.Errorf("%s statements: %v, want %v\n%s", kind, v, want, body)
		}
	}
	if v := value(`pgfleet_statements_total{kind="default-node"}`); v < 5 {
		t.Errorf("default-node statements: %v, want at least 5", v)
	}
	for code, want := range map[string]float64{"22012": 2, "0A000": 2, "P0123": 1} {
		if v := value(`pgfleet_errors_total{sqlstate="` + code + `"}`); v != want {
			t.Errorf("errors %s: %v, want %v", code, v, want)
		}
	}
}
