package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestConnectionBudget: coordinators sharing a metadata database divide a
// worker's connection budget (9 here, pools of 16 each). Under load through
// every coordinator, a sampler counting the clients' connections on the
// worker every 10 ms never sees more than 9: while a second and a third
// coordinator join (4 each, then 3), one leaves (4 each), one stops renewing
// its lease (it closes its connections before the lease lapses; its busy
// client gets 08006), and one freezes holding connections in open
// transactions (the others end its backends once its lease lapses, then
// take its share).
func TestConnectionBudget(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	w0 := connect(t, cl.Servers[0].Addr())
	_, _ = w0.Exec(ctx, "DROP DATABASE IF EXISTS budget_meta WITH (FORCE)", simple)
	exec(t, w0, "CREATE DATABASE budget_meta", simple)
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), pgtest.URL(cl.Servers[0].Addr()))
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS budget_meta WITH (FORCE)")
			c.Close(context.Background())
		}
	})
	exec(t, w0, "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'bgt_user') THEN CREATE ROLE bgt_user LOGIN SUPERUSER; END IF; END $$", simple)
	const budget = 9
	worker := cl.Servers[0].Addr()
	regA := prometheus.NewRegistry()
	start := func() *coordinator.Server {
		return pgtest.Coordinator(t, cl, func(c *coordinator.Config) {
			if regA != nil {
				c.Registry, regA = regA, nil // a's
			}
			c.MetadataURL = fmt.Sprintf("postgres://postgres@%s/budget_meta?sslmode=disable", worker)
			c.WorkerConnections, c.LeaseTTL = budget, 2*time.Second
			c.PoolSize, c.PoolTimeout = 16, 15*time.Second
		})
	}
	maxSeen, stopSampler := pgtest.SampleConnections(t, worker, "bgt_user")
	// load runs clients through a coordinator until stop; each reports
	// its statements' errors.
	var wg sync.WaitGroup
	var failures sync.Map // error text -> count
	load := func(srv *coordinator.Server, clients int, stop <-chan struct{}, wg *sync.WaitGroup) {
		for i := 0; i < clients; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := pgx.Connect(ctx, "postgres://bgt_user@"+srv.Addr()+"/postgres?sslmode=disable")
				if err != nil {
					failures.Store(err.Error(), true)
					return
				}
				defer c.Close(ctx)
				for {
					select {
					case <-stop:
						return
					default:
					}
					if _, err := c.Exec(ctx, "SELECT pg_sleep(0.01)"); err != nil {
						failures.Store(err.Error(), true)
						return
					}
				}
			}()
		}
	}
	waitShare := func(what string, srv *coordinator.Server, want int) {
		t.Helper()
		deadline := time.Now().Add(8 * time.Second)
		for srv.Share(worker) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: share %d, want %d", what, srv.Share(worker), want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	stopAll := make(chan struct{})
	stopLoad := sync.OnceFunc(func() {
		close(stopAll)
		wg.Wait()
	})
	t.Cleanup(stopLoad)
	reg := regA
	a := start()
	waitShare("a alone", a, 9)
	load(a, 10, stopAll, &wg)
	time.Sleep(300 * time.Millisecond)
	b := start()
	load(b, 10, stopAll, &wg)
	waitShare("a after b joined", a, 4)
	waitShare("b", b, 4)
	stopC := make(chan struct{})
	c := start()
	var wgC sync.WaitGroup
	load(c, 10, stopC, &wgC)
	waitShare("c", c, 3)
	waitShare("a after c joined", a, 3)
	time.Sleep(300 * time.Millisecond)
	close(stopC)
	wgC.Wait()
	c.Close()
	waitShare("a after c left", a, 4)
	waitShare("b after c left", b, 4)

	// d stops renewing: it closes its connections before its lease
	// lapses, its client in a transaction finds its worker gone.
	d := start()
	waitShare("d", d, 3)
	inTx, err := pgx.Connect(ctx, "postgres://bgt_user@"+d.Addr()+"/postgres?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer inTx.Close(ctx)
	exec(t, inTx, "BEGIN", simple)
	exec(t, inTx, "SELECT 1", simple)
	d.PauseLease(false)
	time.Sleep(1700 * time.Millisecond) // three quarters of 2s, and some
	var pe *pgconn.PgError
	if _, err := inTx.Exec(ctx, "SELECT 1", simple); err == nil {
		t.Error("a transaction through a coordinator whose lease is lapsing still runs")
	} else if !errors.As(err, &pe) || pe.Code[:2] != "08" {
		t.Logf("transaction after the lease lapsed: %v", err)
	}
	waitShare("a after d lapsed", a, 4)
	waitShare("b after d lapsed", b, 4)

	// e freezes with connections in open transactions: its backends are
	// ended before the others take its share.
	e := start()
	waitShare("e", e, 3)
	var frozen []*pgx.Conn
	for i := 0; i < 2; i++ {
		f, err := pgx.Connect(ctx, "postgres://bgt_user@"+e.Addr()+"/postgres?sslmode=disable")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close(ctx)
		exec(t, f, "BEGIN", simple)
		exec(t, f, "SELECT 1", simple)
		frozen = append(frozen, f)
	}
	e.PauseLease(true)
	waitShare("a after e lapsed", a, 4)
	waitShare("b after e lapsed", b, 4)
	// a's metrics say so: its share, its pools' connections within it.
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "worker" && l.GetValue() == worker {
					got[f.GetName()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	// The fleet's view of it in the metadata database: a's and b's shares.
	meta, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@%s/budget_meta?sslmode=disable", worker))
	if err != nil {
		t.Fatal(err)
	}
	defer meta.Close(ctx)
	var shares, conns int
	if err := meta.QueryRow(ctx, `SELECT count(*), coalesce(sum(backends), 0) FROM pgfleet.pools
		WHERE live AND worker = $1 AND share = 4 AND coordinator IN ($2, $3)`, worker, a.Addr(), b.Addr()).Scan(&shares, &conns); err != nil {
		t.Fatal(err)
	}
	if shares != 2 || conns < 1 {
		t.Errorf("pgfleet.pools: %d live coordinators with a share of 4 (want a and b), %d backends recorded (want some: a and b are under load)", shares, conns)
	}
	if got["pgfleet_connection_share"] != 4 {
		t.Errorf("a's pgfleet_connection_share for the worker: %v, want 4", got["pgfleet_connection_share"])
	}
	inUse, ok := got["pgfleet_pool_connections_in_use"]
	if idle := got["pgfleet_pool_connections_idle"]; !ok || inUse+idle > 4 || inUse < 1 {
		t.Errorf("a's pools on the worker under load: %v in use, %v idle; want 1 to 4 in all (its share)", inUse, idle)
	}
	for _, f := range frozen {
		if _, err := f.Exec(ctx, "SELECT 1", simple); err == nil {
			t.Error("a transaction of a frozen coordinator whose lease lapsed still runs on its worker")
		}
	}
	time.Sleep(300 * time.Millisecond)

	stopLoad()
	stopSampler()
	if m := maxSeen(); m > budget {
		t.Errorf("the worker held %d of the coordinators' connections at once, over the budget of %d", m, budget)
	} else if m < budget-1 {
		t.Errorf("at most %d connections at once under load: the budget was not used", m)
	}
	failures.Range(func(k, _ any) bool {
		t.Errorf("a client's statement failed: %v", k)
		return true
	})
}

// TestAddNodeWithBudget: citus_add_node with the connection budget on (the
// default) connects to the node it adds, whose share the lease asks for the
// call (it was refused, 53300, since the lease asked shares of the catalog's
// active nodes only; adversary 140), and copies the reference tables there.
func TestAddNodeWithBudget(t *testing.T) {
	cl := pgtest.Start(t, 2)
	srv := pgtest.Coordinator(t, cl, func(c *coordinator.Config) {
		c.Workers = c.Workers[:1]
		c.LeaseTTL = 2 * time.Second
	})
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	c := connect(t, srv.Addr())
	exec(t, c, "CREATE TABLE ab_ref (id int PRIMARY KEY, name text)", simple)
	exec(t, c, "SELECT create_reference_table('ab_ref')", simple)
	exec(t, c, "INSERT INTO ab_ref SELECT g, 'r' || g FROM generate_series(1, 10) g", simple)
	// (A mixed-case name: its definition was looked up unquoted, 42P01;
	// adversary 141.)
	exec(t, c, `CREATE TABLE "AbRef" (id int PRIMARY KEY)`, simple)
	exec(t, c, `SELECT create_reference_table('"AbRef"')`, simple)
	exec(t, c, `INSERT INTO "AbRef" VALUES (1), (2)`, simple)
	second := cl.Servers[1]
	exec(t, c, fmt.Sprintf("SELECT citus_add_node('%s', %d)", second.Host, second.Port), simple)
	var n int
	if err := connect(t, second.Addr()).QueryRow(ctx, "SELECT count(*)::int FROM pgfleet_shards.ab_ref_102008").Scan(&n); err != nil || n != 10 {
		// (The copy's shard id is the catalog's first.)
		var names []string
		rows, _ := connect(t, second.Addr()).Query(ctx, "SELECT tablename::text FROM pg_tables WHERE schemaname = 'pgfleet_shards'", simple)
		for rows.Next() {
			var s string
			_ = rows.Scan(&s)
			names = append(names, s)
		}
		t.Errorf("the new node's copy of ab_ref: %d rows, %v (tables there: %v); want 10", n, err, names)
	}
	for i := 0; i < 4; i++ { // reads go to either copy
		if got := queryString(t, c, `SELECT count(*)::text || '/' || (SELECT count(*) FROM "AbRef") FROM ab_ref`); got != "10/2" {
			t.Errorf("ab_ref and \"AbRef\" through the coordinator after citus_add_node: %s rows, want 10/2", got)
		}
	}
}
