package coordinator_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestBudgetTransactionsOverWorkers: clients of two coordinators run
// transactions that write on both workers (each holds a connection to one
// worker while it asks for one to the other) while a third coordinator
// joins and leaves, so that the shares of both shrink below what their
// clients hold. The clients wait, but none fails: a coordinator whose
// share shrank still serves a client that holds a connection elsewhere
// (the pools' reserve), so transactions end and their connections go.
// The workers never see more than the budget. Found by an adversary:
// every client of a healthy coordinator got 53300 after the pool timeout
// when a coordinator joined, left or froze. The cause: an INSERT without a
// column list, in a transaction holding the first worker, read the column
// list on a second connection to it, which the pools' reserve does not
// cover (every client of a full pool waited for the others); it now asks
// on the connection it holds. Also here: a pool's idle connection while
// the gate is full and another pool's checkouts wait goes at release, and
// recovery takes its connections in its class.
func TestBudgetTransactionsOverWorkers(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	const db, budget = "budget_xw", 10
	for _, s := range cl.Servers {
		w := connect(t, s.Addr())
		_, _ = w.Exec(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)", simple)
		exec(t, w, "CREATE DATABASE "+db, simple)
		exec(t, w, "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'xw_user') THEN CREATE ROLE xw_user LOGIN SUPERUSER; END IF; END $$", simple)
		addr := s.Addr()
		t.Cleanup(func() {
			c, err := pgx.Connect(context.Background(), pgtest.URL(addr))
			if err == nil {
				_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
				c.Close(context.Background())
			}
		})
	}
	start := func() *coordinator.Server {
		return pgtest.Coordinator(t, cl, func(c *coordinator.Config) {
			c.MetadataURL = fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", cl.Servers[0].Addr(), db)
			c.WorkerConnections, c.LeaseTTL = budget, 3*time.Second
			c.PoolSize, c.PoolTimeout = 16, 5*time.Second
		})
	}
	url := func(s *coordinator.Server) string {
		return "postgres://xw_user@" + s.Addr() + "/" + db + "?sslmode=disable"
	}
	a, b := start(), start()
	setup, err := pgx.Connect(ctx, url(a))
	if err != nil {
		t.Fatal(err)
	}
	defer setup.Close(ctx)
	exec(t, setup, "CREATE TABLE xw_t (id bigint PRIMARY KEY, n int)", simple)
	exec(t, setup, "SELECT create_distributed_table('xw_t', 'id', shard_count => 4)", simple)
	time.Sleep(time.Second) // b reloads the catalog (no gossip here: polling)

	max0, stop0 := pgtest.SampleConnections(t, cl.Servers[0].Addr(), "xw_user")
	max1, stop1 := pgtest.SampleConnections(t, cl.Servers[1].Addr(), "xw_user")
	var next atomic.Int64
	var okTx, failed atomic.Int64
	var firstErr atomic.Value
	var errs sync.Map // message -> *atomic.Int64
	note := func(err error) {
		v, _ := errs.LoadOrStore(err.Error(), new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
		firstErr.CompareAndSwap(nil, err.Error())
		failed.Add(1)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 40; i++ {
		srv := []*coordinator.Server{a, b}[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := pgx.Connect(ctx, url(srv))
			if err != nil {
				firstErr.CompareAndSwap(nil, err.Error())
				failed.Add(1)
				return
			}
			defer c.Close(ctx)
			for {
				select {
				case <-stop:
					return
				default:
				}
				x, y := next.Add(1), next.Add(1)
				err := pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, "INSERT INTO xw_t VALUES ($1, 1)", x); err != nil {
						return err
					}
					if _, err := tx.Exec(ctx, "SELECT pg_sleep(0.005 * $1::int)", rand.IntN(4)); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, "INSERT INTO xw_t VALUES ($1, 2)", y)
					return err
				})
				if err != nil {
					note(err)
					continue
				}
				okTx.Add(1)
			}
		}()
	}
	time.Sleep(time.Second)
	for round := 0; round < 2; round++ {
		c := start() // the shares shrink from 5 to 3 per worker
		time.Sleep(1500 * time.Millisecond)
		_ = c.Close() // and grow back
		time.Sleep(1500 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	stop0()
	stop1()
	if m0, m1 := max0(), max1(); m0 > budget || m1 > budget {
		t.Errorf("the coordinators held %d and %d connections on the workers at once, over the budget of %d", m0, m1, budget)
	}
	if failed.Load() > 0 {
		t.Errorf("%d of %d transactions failed through coordinators whose shares moved; first: %v", failed.Load(), failed.Load()+okTx.Load(), firstErr.Load())
		errs.Range(func(k, v any) bool { t.Logf("%d × %s", v.(*atomic.Int64).Load(), k); return true })
	}
	if okTx.Load() == 0 {
		t.Error("no transaction committed")
	}
	t.Logf("%d transactions over two workers committed", okTx.Load())
}
