package coordinator_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/internal/pgcluster"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestFleetCatalogPush: three coordinators joined by gossip, none polling
// the catalog (an hour between polls): a table distributed through one is
// routed through the others as soon as they hear of it, and a write
// through a second is read back through the third. Reads through the
// other two while the rows move never see fewer rows than there are: the
// table is fenced on them until they route it to its shards (they may get
// 40001 meanwhile, never a short answer; found by an adversary before the
// fences: 0 rows up to 55 ms after the distribution returned).
func TestFleetCatalogPush(t *testing.T) {
	cl := pgtest.Shared(t)
	coords := startFleet(t, cl, 3, func(cfg *coordinator.Config) {
		cfg.CatalogPoll = time.Hour
		cfg.MetricsListen = "127.0.0.1:0"
	})
	a, b, c := coords[0], coords[1], coords[2]
	ctx := context.Background()
	ca, cb, cc := connect(t, a.Addr()), connect(t, b.Addr()), connect(t, c.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	// Each change through a; the time until b and c route by it.
	var delays []time.Duration
	for round := 0; round < 5; round++ {
		tb := fmt.Sprintf("fl_t%d", round)
		exec(t, ca, "DROP TABLE IF EXISTS "+tb, simple)
		exec(t, ca, "CREATE TABLE "+tb+" (id bigint PRIMARY KEY, v text)", simple)
		t.Cleanup(func() {
			_, _ = ca.Exec(context.Background(), "SELECT undistribute_table('"+tb+"')", simple)
			_, _ = ca.Exec(context.Background(), "DROP TABLE IF EXISTS "+tb, simple)
		})
		exec(t, ca, "INSERT INTO "+tb+" SELECT g, 'r' FROM generate_series(1000, 1049) g", simple)
		// Readers through b and c, from before the move until after it.
		stop := make(chan struct{})
		type seen struct {
			counts map[int]int
			codes  map[string]int
		}
		results := make(chan seen, 2)
		for _, s := range []*coordinator.Server{b, c} {
			rc := connect(t, s.Addr())
			go func() {
				r := seen{counts: map[int]int{}, codes: map[string]int{}}
				for {
					select {
					case <-stop:
						results <- r
						return
					default:
					}
					var n int
					if err := rc.QueryRow(ctx, "SELECT count(*) FROM "+tb, simple).Scan(&n); err != nil {
						r.codes[sqlState(err)]++
						time.Sleep(time.Millisecond) // a client retrying, not spinning
						continue
					}
					r.counts[n]++
				}
			}()
		}
		time.Sleep(20 * time.Millisecond)
		exec(t, ca, "SELECT create_distributed_table('"+tb+"', 'id', shard_count => 4)", simple)
		done := time.Now()
		// Routable through b and c: the new catalog pushed and the fence
		// lifted (a routed read no longer gets 40001).
		for _, conn := range []*pgx.Conn{cb, cc} {
			for {
				var n int
				err := conn.QueryRow(ctx, "SELECT count(*) FROM "+tb+" WHERE id = 1000", simple).Scan(&n)
				if err == nil && n == 1 {
					break
				}
				if sqlState(err) != "40001" || time.Since(done) > 10*time.Second {
					t.Fatalf("round %d: a routed read through another coordinator: %d, %v", round, n, err)
				}
				time.Sleep(time.Millisecond)
			}
		}
		for _, s := range []*coordinator.Server{b, c} {
			if s.CatalogVersion() != a.CatalogVersion() {
				t.Fatalf("round %d: %s holds catalog %d, %s %d", round, s.Addr(), s.CatalogVersion(), a.Addr(), a.CatalogVersion())
			}
		}
		delays = append(delays, time.Since(done))
		time.Sleep(20 * time.Millisecond)
		close(stop)
		for range 2 {
			r := <-results
			for n := range r.counts {
				if n != 50 {
					t.Errorf("round %d: a read through another coordinator counted %d rows, want 50 (%v)", round, n, r.counts)
				}
			}
			for code := range r.codes {
				if code != "40001" {
					t.Errorf("round %d: a read through another coordinator failed with %s, want 40001 at most (%v)", round, code, r.codes)
				}
			}
			if r.counts[50] == 0 {
				t.Errorf("round %d: no read counted the rows (%v, %v)", round, r.counts, r.codes)
			}
		}
		// Written through b (a stale coordinator's write would be refused
		// by the guard), read through c from the shard it went to.
		exec(t, cb, "INSERT INTO "+tb+" (id, v) VALUES (42, 'via b')", simple)
		var v string
		if err := cc.QueryRow(ctx, "SELECT v FROM "+tb+" WHERE id = 42").Scan(&v); err != nil || v != "via b" {
			t.Fatalf("round %d: read through c: %q, %v", round, v, err)
		}
		var shell int
		if err := cc.QueryRow(ctx, "SELECT count(*) FROM "+tb, simple).Scan(&shell); err != nil || shell != 51 {
			t.Fatalf("round %d: count through c: %d, %v", round, shell, err)
		}
	}
	slices.Sort(delays)
	t.Logf("catalog changes routable through the two other coordinators after: median %v, max %v (poll interval 1h)", delays[len(delays)/2], delays[len(delays)-1])
	// The others timed each change from a's announcement to holding it,
	// and every member counted the bytes it sent.
	for _, s := range coords {
		_, body := probe(t, s.MetricsAddr(), "/metrics")
		count, sum, sent := -1.0, -1.0, -1.0
		for _, line := range strings.Split(body, "\n") {
			name, v, _ := strings.Cut(line, " ")
			f, _ := strconv.ParseFloat(v, 64)
			switch name {
			case "pgfleet_catalog_propagation_seconds_count":
				count = f
			case "pgfleet_catalog_propagation_seconds_sum":
				sum = f
			case "pgfleet_gossip_bytes_sent_total":
				sent = f
			}
		}
		if s == a && count != 0 {
			t.Errorf("%s, which made the changes, timed %v propagations, want 0", s.Addr(), count)
		}
		if s != a && count < 5 {
			t.Errorf("%s timed %v catalog propagations, want at least 5 (one per distribution)", s.Addr(), count)
		}
		if sent <= 0 {
			t.Errorf("%s: gossip bytes sent %v", s.Addr(), sent)
		}
		if s != a {
			t.Logf("%s: %v propagations, mean %.1f ms; %v gossip bytes sent", s.Addr(), count, 1000*sum/count, sent)
		}
	}
}

// TestFleetCancel: a query started through one coordinator is cancelled by
// a CancelRequest sent to another (psql's Ctrl-C reaching another member
// behind a load balancer).
func TestFleetCancel(t *testing.T) {
	cl := pgtest.Shared(t)
	coords := startFleet(t, cl, 2, nil)
	a, b := coords[0], coords[1]
	c := connect(t, a.Addr())
	pid, secret := c.PgConn().PID(), c.PgConn().SecretKey()
	errc := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := c.Exec(context.Background(), "SELECT pg_sleep(20)")
		errc <- err
	}()
	// The request is sent again every half second (Ctrl-C pressed again):
	// one that comes before the statement reached its worker cancels
	// nothing, as on PostgreSQL, and a loaded machine may take that long.
	cancelVia := func(addr string, pid uint32, secret []byte) {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := (&pgproto3.CancelRequest{ProcessID: pid, SecretKey: secret}).Encode(nil)
		if _, err := nc.Write(msg); err != nil {
			t.Fatal(err)
		}
		nc.Close()
	}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(15 * time.Second)
wait:
	for {
		select {
		case err := <-errc:
			if sqlState(err) != "57014" {
				t.Errorf("cancelled through the other coordinator: %v, want 57014", err)
			}
			break wait
		case <-tick.C:
			cancelVia(b.Addr(), pid, secret)
		case <-timeout:
			t.Fatal("the query was not cancelled through the other coordinator")
		}
	}
	t.Logf("cancelled after %v", time.Since(start))
	// A key of nobody's is ignored, as PostgreSQL ignores it (after any
	// repeated request still on its way has landed).
	time.Sleep(500 * time.Millisecond)
	cancelVia(b.Addr(), pid^1, secret)
	var one int
	if err := c.QueryRow(context.Background(), "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Errorf("session after the cancel: %d, %v", one, err)
	}
}

// startFleet starts n coordinators on cl joined by gossip (each with
// configure applied, if given) and waits until each sees all n.
func startFleet(t *testing.T, cl *pgcluster.Cluster, n int, configure func(*coordinator.Config)) []*coordinator.Server {
	t.Helper()
	var coords []*coordinator.Server
	for i := 0; i < n; i++ {
		coords = append(coords, pgtest.Coordinator(t, cl, func(cfg *coordinator.Config) {
			cfg.Gossip = "127.0.0.1:0"
			if i > 0 {
				cfg.Join = []string{coords[0].Fleet().Addr()}
			}
			if configure != nil {
				configure(cfg)
			}
		}))
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, s := range coords {
		for len(s.Fleet().Members()) != n {
			if time.Now().After(deadline) {
				t.Fatalf("%s sees %d members, want %d", s.Addr(), len(s.Fleet().Members()), n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return coords
}

// A role's settings changed through one coordinator reach the next login
// through another at once, though the other's pool holds a connection the
// role logged in with before the change.
func TestFleetLoginAfterRoleChange(t *testing.T) {
	cl := pgtest.Shared(t)
	coords := startFleet(t, cl, 2, nil)
	roleChangeSeen(t, cl, connect(t, coords[0].Addr()), coords[1].Addr(), "flrc_dave", "Asia/Kolkata")
}
