package coordinator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/internal/pgcluster"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// restartEnv is a private two-worker cluster (a worker is restarted, so the
// shared one cannot serve) with a distributed table rr of 100 rows and a
// key on each worker: k1 on the first (which holds the metadata database),
// k2 on the second, the one restarted.
type restartEnv struct {
	cl     *pgcluster.Cluster
	srv    *coordinator.Server
	k1, k2 int
}

func newRestartEnv(t *testing.T, mod func(*coordinator.Config)) *restartEnv {
	t.Helper()
	cl := pgtest.Start(t, 2)
	srv := pgtest.Coordinator(t, cl, func(c *coordinator.Config) {
		c.PoolSize = 4
		c.RecoveryInterval = -1 // only what the coordinator does itself
		if mod != nil {
			mod(c)
		}
	})
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	exec(t, c, "CREATE TABLE rr (aid bigint PRIMARY KEY, n int)", simple)
	exec(t, c, "INSERT INTO rr SELECT g, 100 FROM generate_series(1, 100) g", simple)
	exec(t, c, "SELECT create_distributed_table('rr', 'aid', shard_count => 4)", simple)
	e := &restartEnv{cl: cl, srv: srv}
	w2 := cl.Servers[1].Addr()
	for k := 1; k <= 100 && (e.k1 == 0 || e.k2 == 0); k++ {
		if workerOfAid(t, c, "rr", k) == w2 {
			if e.k2 == 0 {
				e.k2 = k
			}
		} else if e.k1 == 0 {
			e.k1 = k
		}
	}
	if e.k1 == 0 || e.k2 == 0 {
		t.Fatal("every key on one worker")
	}
	_ = c.Close(context.Background())
	return e
}

// preparedLeft counts pgfleet's prepared transactions on every worker.
func (e *restartEnv) preparedLeft(t *testing.T) int {
	t.Helper()
	n := 0
	for _, w := range e.cl.Servers {
		c := connect(t, w.Addr())
		n += atoi(t, queryString(t, c, "SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'pgfleet%'"))
		_ = c.Close(context.Background())
	}
	return n
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}

// TestDecidedCommitAcrossWorkerRestart: the worker of one part of a
// transaction block restarts between the commit decision and its COMMIT
// PREPARED. The coordinator retries the COMMIT PREPARED as soon as the
// worker answers again (recovery is off here, and its grace would be a
// minute), so another client's write to the same row, retried until the
// worker is back, completes within a second of the worker's return; the
// committing client gets COMMIT, and both writes are there.
func TestDecidedCommitAcrossWorkerRestart(t *testing.T) {
	e := newRestartEnv(t, nil)
	w2 := e.cl.Servers[1]
	down := make(chan struct{})
	var up time.Time
	upDone := make(chan struct{})
	e.srv.SetDecideHooks(nil, func(base string) {
		w2.Stop()
		close(down)
		go func() {
			defer close(upDone)
			time.Sleep(time.Second)
			if err := w2.Restart(context.Background()); err != nil {
				t.Errorf("restarting worker 2: %v", err)
			}
			up = time.Now()
		}()
	})

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := connect(t, e.srv.Addr())
	exec(t, a, "BEGIN")
	exec(t, a, "UPDATE rr SET n = n + 1 WHERE aid = $1", e.k1)
	exec(t, a, "UPDATE rr SET n = n + 1 WHERE aid = $1", e.k2)
	commitErr := make(chan error, 1)
	go func() {
		_, err := a.Exec(ctx, "COMMIT")
		commitErr <- err
	}()

	<-down
	// Another client writes the same row, retrying while worker 2 is
	// down; once it answers, the write waits for the row lock of the
	// prepared transaction.
	b := connect(t, e.srv.Addr())
	var done time.Time
	var errs []string
	for {
		bctx, bcancel := context.WithTimeout(ctx, 15*time.Second)
		_, err := b.Exec(bctx, "UPDATE rr SET n = n + 10 WHERE aid = $1", e.k2)
		timedOut := bctx.Err() != nil
		bcancel()
		if err == nil {
			done = time.Now()
			break
		}
		errs = append(errs, sqlState(err)+" "+err.Error())
		if ctx.Err() != nil || timedOut {
			t.Fatalf("the other client's write did not complete: %v", errs)
		}
		if b.IsClosed() {
			b = connect(t, e.srv.Addr())
		}
		time.Sleep(50 * time.Millisecond)
	}
	<-upDone
	if err := <-commitErr; err != nil {
		t.Errorf("COMMIT: %v", err)
	}
	t.Logf("other client's write completed %v after worker 2 answered again (%d errors while it was down, the first: %v)",
		done.Sub(up).Round(time.Millisecond), len(errs), errs[:min(1, len(errs))])
	if lag := done.Sub(up); lag > time.Second {
		t.Errorf("the other client's write completed %v after worker 2 was back, want within 1s", lag)
	}
	c := connect(t, e.srv.Addr())
	if got := queryString(t, c, "SELECT n FROM rr WHERE aid = $1", e.k1); got != "101" {
		t.Errorf("k1: n = %s, want 101", got)
	}
	if got := queryString(t, c, "SELECT n FROM rr WHERE aid = $1", e.k2); got != "111" {
		t.Errorf("k2: n = %s, want 111 (both writes)", got)
	}
	if n := e.preparedLeft(t); n != 0 {
		t.Errorf("%d prepared transactions left", n)
	}
}

// TestCommitDecisionAfterStall: the coordinator stalls while recording a
// transaction block's commit decision, past the decision's deadline, and
// the insert committed meanwhile. The decision is then looked up under a
// fresh context (not the expired one, which answered 08006 "outcome
// unknown"), found to be commit, and the client gets COMMIT with both
// rows changed.
func TestCommitDecisionAfterStall(t *testing.T) {
	e := newRestartEnv(t, nil)
	defer coordinator.SetDecideTimeout(200 * time.Millisecond)()
	stalled := 0
	e.srv.SetDecideHooks(func(ctx context.Context, base string, err error) error {
		if err != nil {
			return err
		}
		stalled++
		<-ctx.Done() // the stall: the answer is read after the deadline
		return fmt.Errorf("metadata: decide: %w", ctx.Err())
	}, nil)
	c := connect(t, e.srv.Addr())
	exec(t, c, "BEGIN")
	exec(t, c, "UPDATE rr SET n = n + 1 WHERE aid = $1", e.k1)
	exec(t, c, "UPDATE rr SET n = n + 1 WHERE aid = $1", e.k2)
	if _, err := c.Exec(context.Background(), "COMMIT"); err != nil {
		t.Fatalf("COMMIT after a stall past the decision's deadline: %s %v", sqlState(err), err)
	}
	if stalled != 1 {
		t.Fatalf("the stall hook ran %d times, want 1", stalled)
	}
	for _, k := range []int{e.k1, e.k2} {
		if got := queryString(t, c, "SELECT n FROM rr WHERE aid = $1", k); got != "101" {
			t.Errorf("key %d: n = %s, want 101", k, got)
		}
	}
	if n := e.preparedLeft(t); n != 0 {
		t.Errorf("%d prepared transactions left", n)
	}
}
