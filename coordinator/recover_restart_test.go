package coordinator_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/coordinator/shards"
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

// wantCommitted checks, through c, that both keys' n is want, and that no
// prepared transaction is left on any worker.
func (e *restartEnv) wantCommitted(t *testing.T, c *pgx.Conn, want string) {
	t.Helper()
	for _, k := range []int{e.k1, e.k2} {
		if got := queryString(t, c, "SELECT n FROM rr WHERE aid = $1", k); got != want {
			t.Errorf("key %d: n = %s, want %s", k, got, want)
		}
	}
	if n := e.preparedLeft(t); n != 0 {
		t.Errorf("%d prepared transactions left", n)
	}
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
	e.wantCommitted(t, c, "101")
}

// awaitWrite runs sql on a new session of addr until it succeeds, through
// the errors of a worker being down, and returns when it did.
func awaitWrite(t *testing.T, ctx context.Context, addr, sql string, args ...any) time.Time {
	t.Helper()
	b := connect(t, addr)
	defer func() { _ = b.Close(context.Background()) }()
	var errs []string
	for {
		bctx, bcancel := context.WithTimeout(ctx, 15*time.Second)
		_, err := b.Exec(bctx, sql, args...)
		timedOut := bctx.Err() != nil
		bcancel()
		if err == nil {
			return time.Now()
		}
		errs = append(errs, sqlState(err)+" "+err.Error())
		if ctx.Err() != nil || timedOut {
			t.Fatalf("%s did not complete: %d errors, the last %v", sql, len(errs), errs[len(errs)-1])
		}
		if b.IsClosed() {
			b = connect(t, addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDecidedAutocommitWriteAcrossWorkerRestart: as
// TestDecidedCommitAcrossWorkerRestart, for an autocommit write of a
// reference table (two-phase commit over every copy, package shards): the
// worker of a copy restarts between the decision and its COMMIT PREPARED,
// and another client's write of the same row completes within a second of
// the worker's return; both copies have both writes.
func TestDecidedAutocommitWriteAcrossWorkerRestart(t *testing.T) {
	e := newRestartEnv(t, nil)
	c := connect(t, e.srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	exec(t, c, "CREATE TABLE rref (id int PRIMARY KEY, n int)", simple)
	exec(t, c, "INSERT INTO rref VALUES (1, 100)", simple)
	exec(t, c, "SELECT create_reference_table('rref')", simple)

	w2 := e.cl.Servers[1]
	var up time.Time
	upDone := make(chan struct{})
	var fired atomic.Bool // set in c's session
	defer shards.SetTestHookBeforeCommit(func(base string) {
		if fired.Swap(true) {
			return
		}
		w2.Stop()
		go func() {
			defer close(upDone)
			time.Sleep(time.Second)
			if err := w2.Restart(context.Background()); err != nil {
				t.Errorf("restarting worker 2: %v", err)
			}
			up = time.Now()
		}()
	})()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	writeErr := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, "UPDATE rref SET n = n + 1 WHERE id = 1")
		writeErr <- err
	}()
	for i := 0; !fired.Load() && i < 1000; i++ {
		time.Sleep(5 * time.Millisecond)
	}
	done := awaitWrite(t, ctx, e.srv.Addr(), "UPDATE rref SET n = n + 10 WHERE id = 1")
	<-upDone
	if err := <-writeErr; err != nil {
		t.Errorf("the write across the restart: %v", err)
	}
	t.Logf("other client's write completed %v after worker 2 answered again", done.Sub(up).Round(time.Millisecond))
	if lag := done.Sub(up); lag > time.Second {
		t.Errorf("the other client's write completed %v after worker 2 was back, want within 1s", lag)
	}
	for _, w := range e.cl.Servers {
		wc := connect(t, w.Addr())
		shard := queryString(t, wc, `SELECT c.oid::regclass::text FROM pg_class c WHERE relname ~ '^rref_[0-9]+$'`)
		if got := queryString(t, wc, "SELECT n FROM "+shard+" WHERE id = 1"); got != "111" {
			t.Errorf("copy on %s: n = %s, want 111", w.Addr(), got)
		}
		_ = wc.Close(context.Background())
	}
	if n := e.preparedLeft(t); n != 0 {
		t.Errorf("%d prepared transactions left", n)
	}
}

// TestDecidedCommitFinishedByAnotherCoordinator: a coordinator stops
// between a transaction block's commit decision and its COMMIT PREPAREDs
// (as if killed). Another coordinator's recovery, whose grace for
// undecided transactions is an hour, commits the decided one at once, so
// a client of the other coordinator writing the same row waits a round,
// not the grace; when the first coordinator wakes up its client gets
// COMMIT.
func TestDecidedCommitFinishedByAnotherCoordinator(t *testing.T) {
	e := newRestartEnv(t, nil)
	other := pgtest.Coordinator(t, e.cl, func(c *coordinator.Config) {
		c.RecoveryInterval = 200 * time.Millisecond
		c.RecoveryGrace = time.Hour
	})
	stopped := make(chan struct{})
	resume := make(chan struct{})
	e.srv.SetDecideHooks(nil, func(string) {
		close(stopped)
		<-resume
	})
	a := connect(t, e.srv.Addr())
	exec(t, a, "BEGIN")
	exec(t, a, "UPDATE rr SET n = n + 1 WHERE aid = $1", e.k1)
	exec(t, a, "UPDATE rr SET n = n + 1 WHERE aid = $1", e.k2)
	commitErr := make(chan error, 1)
	go func() {
		_, err := a.Exec(context.Background(), "COMMIT")
		commitErr <- err
	}()
	<-stopped
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	awaitWrite(t, ctx, other.Addr(), "UPDATE rr SET n = n + 10 WHERE aid = $1", e.k2)
	t.Logf("the other coordinator's client wrote the row %v after the first coordinator stopped", time.Since(start).Round(time.Millisecond))
	close(resume)
	if err := <-commitErr; err != nil {
		t.Errorf("COMMIT on the coordinator that stopped: %v", err)
	}
	c := connect(t, other.Addr())
	if got := queryString(t, c, "SELECT n FROM rr WHERE aid = $1", e.k1); got != "101" {
		t.Errorf("k1: n = %s, want 101", got)
	}
	if got := queryString(t, c, "SELECT n FROM rr WHERE aid = $1", e.k2); got != "111" {
		t.Errorf("k2: n = %s, want 111", got)
	}
	if n := e.preparedLeft(t); n != 0 {
		t.Errorf("%d prepared transactions left", n)
	}
}
