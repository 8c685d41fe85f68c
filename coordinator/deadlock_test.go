package coordinator_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestDistributedDeadlock: two transaction blocks that each hold a row on
// one worker and wait for the other's row on the other worker get, as on
// PostgreSQL, 40P01 for one of them (the younger) while the other goes on
// and commits; waits that form no cycle are left alone.
func TestDistributedDeadlock(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(8))
	ctx := context.Background()
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	accounts(t, c, "dl_acc")
	k1, w1 := 1, workerOfAid(t, c, "dl_acc", 1)
	k2 := keyOff(t, c, "dl_acc", w1)
	k3 := k1 + 1
	for ; workerOfAid(t, c, "dl_acc", k3) != w1 || k3 == k2; k3++ {
	}
	val := func(k int) int {
		t.Helper()
		var n int
		if err := c.QueryRow(ctx, "SELECT n FROM dl_acc WHERE aid = $1", k).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	type result struct {
		who string
		err error
	}
	cases := []struct {
		mode pgx.QueryExecMode
		// a's second statement waits for b's row on the second worker:
		// routed, or a write over both workers.
		aSecond string
		aWant   [2]int
		// b's second statement waits for a's row on the first worker;
		// b is the younger, the victim.
		bSecond string
	}{
		{simple, "UPDATE dl_acc SET n = n + 1 WHERE aid = $1", [2]int{1, 1}, "UPDATE dl_acc SET n = n + 10 WHERE aid = $1"},
		{pgx.QueryExecModeCacheStatement, "UPDATE dl_acc SET n = n + 1 WHERE aid = $1", [2]int{1, 1}, "UPDATE dl_acc SET n = n + 10 WHERE aid = $1"},
		{simple, "UPDATE dl_acc SET n = n + 1 WHERE aid IN ($1, $2)", [2]int{2, 1}, "UPDATE dl_acc SET n = n + 10 WHERE aid = $1"},
		{pgx.QueryExecModeCacheStatement, "UPDATE dl_acc SET n = n + 1 WHERE aid IN ($1, $2)", [2]int{2, 1}, "UPDATE dl_acc SET n = n + 10 WHERE aid = $1"},
		{simple, "UPDATE dl_acc SET n = n + 1 WHERE aid = $1", [2]int{1, 1}, "UPDATE dl_acc SET n = n + 10 WHERE aid IN ($1, $2)"},
		{pgx.QueryExecModeCacheStatement, "UPDATE dl_acc SET n = n + 1 WHERE aid = $1", [2]int{1, 1}, "UPDATE dl_acc SET n = n + 10 WHERE aid IN ($1, $2)"},
	}
	for _, tc := range cases {
		mode := tc.mode
		exec(t, c, "UPDATE dl_acc SET n = 0 WHERE aid IN ($1, $2)", mode, k1, k2)
		a, b := connect(t, srv.Addr()), connect(t, srv.Addr())
		exec(t, a, "BEGIN", mode)
		exec(t, a, "UPDATE dl_acc SET n = n + 1 WHERE aid = $1", mode, k1)
		exec(t, b, "BEGIN", mode)
		exec(t, b, "UPDATE dl_acc SET n = n + 10 WHERE aid = $1", mode, k2)
		done := make(chan result, 2)
		go func() {
			args := []any{mode, k2}
			if tc.aWant[0] == 2 {
				args = append(args, k1)
			}
			_, err := a.Exec(ctx, tc.aSecond, args...)
			done <- result{"a", err}
		}()
		time.Sleep(300 * time.Millisecond) // a waits for b's row on the second worker
		go func() {
			args := []any{mode, k1}
			if strings.Contains(tc.bSecond, "IN") {
				args = append(args, k2)
			}
			_, err := b.Exec(ctx, tc.bSecond, args...)
			done <- result{"b", err}
		}()
		var got []result
		timeout := time.After(20 * time.Second)
		for len(got) < 2 {
			select {
			case r := <-done:
				got = append(got, r)
				if r.err != nil {
					// The victim's block is failed: its end undoes it, and
					// the other goes on.
					victim := map[string]*pgx.Conn{"a": a, "b": b}[r.who]
					if _, err := victim.Exec(ctx, "COMMIT", mode); err != nil {
						t.Fatalf("COMMIT of the failed block: %v", err)
					}
				}
			case <-timeout:
				t.Fatalf("%v %q: the two transactions still wait after 20 s (got %v)", mode, tc.aSecond, got)
			}
		}
		var failed, ok []string
		for _, r := range got {
			var pe *pgconn.PgError
			switch {
			case r.err == nil:
				ok = append(ok, r.who)
			case errors.As(r.err, &pe) && pe.Code == "40P01":
				failed = append(failed, r.who)
			default:
				t.Fatalf("%v: %s: %v, want 40P01 or success", mode, r.who, r.err)
			}
		}
		if len(failed) != 1 || len(ok) != 1 {
			t.Fatalf("%v: failed %v, succeeded %v; want one of each", mode, failed, ok)
		}
		// b took in the second worker last: it is the younger.
		if failed[0] != "b" {
			t.Errorf("%v: the victim was %s, want the younger transaction (b)", mode, failed[0])
		}
		survivor := map[string]*pgx.Conn{"a": a, "b": b}[ok[0]]
		exec(t, survivor, "COMMIT", mode)
		want := map[string][2]int{"a": tc.aWant, "b": {10, 10}}[ok[0]]
		if g1, g2 := val(k1), val(k2); g1 != want[0] || g2 != want[1] {
			t.Errorf("%v: rows %d, %d after the survivor (%s) committed; want %d, %d", mode, g1, g2, ok[0], want[0], want[1])
		}
		a.Close(ctx)
		b.Close(ctx)
	}

	// A multi-shard write outside a block (its own transaction on each
	// worker, taken in node order) against a block: with the block holding
	// the row of the write's second worker, the write locks its first
	// worker's row and waits; the block then waits for that row. One of
	// the two orders deadlocks; there the block (the younger) gets 40P01
	// and the write goes on.
	deadlocks := 0
	for _, first := range []int{k1, k2} {
		other := k1 + k2 - first
		exec(t, c, "UPDATE dl_acc SET n = 0 WHERE aid IN ($1, $2)", simple, k1, k2)
		a, b := connect(t, srv.Addr()), connect(t, srv.Addr())
		exec(t, a, "BEGIN", simple)
		exec(t, a, "UPDATE dl_acc SET n = n + 1 WHERE aid = $1", simple, first)
		bDone, aDone := make(chan error, 1), make(chan error, 1)
		go func() {
			_, err := b.Exec(ctx, "UPDATE dl_acc SET n = n + 10 WHERE aid IN ($1, $2)", simple, k1, k2)
			bDone <- err
		}()
		time.Sleep(300 * time.Millisecond)
		go func() {
			_, err := a.Exec(ctx, "UPDATE dl_acc SET n = n + 1 WHERE aid = $1", simple, other)
			aDone <- err
		}()
		var aErr error
		select {
		case aErr = <-aDone:
		case <-time.After(20 * time.Second):
			t.Fatalf("block holding %d: its update of %d still waits after 20 s", first, other)
		}
		var pe *pgconn.PgError
		switch {
		case aErr == nil:
		case errors.As(aErr, &pe) && pe.Code == "40P01":
			deadlocks++
		default:
			t.Fatalf("block holding %d: %v", first, aErr)
		}
		exec(t, a, "COMMIT", simple) // ROLLBACK after the 40P01
		select {
		case err := <-bDone:
			if err != nil {
				t.Fatalf("block holding %d: the multi-shard UPDATE: %v", first, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("block holding %d: the multi-shard UPDATE still waits", first)
		}
		want := 10
		if aErr == nil {
			want = 11
		}
		if g1, g2 := val(k1), val(k2); g1 != want || g2 != want {
			t.Errorf("block holding %d: rows %d, %d; want %d, %d", first, g1, g2, want, want)
		}
		a.Close(ctx)
		b.Close(ctx)
	}
	if deadlocks != 1 {
		t.Errorf("%d of the two orders deadlocked; want one", deadlocks)
	}

	// A wait through two workers that is no cycle is not broken: b waits
	// for a's row until a commits.
	a, b := connect(t, srv.Addr()), connect(t, srv.Addr())
	defer a.Close(ctx)
	defer b.Close(ctx)
	exec(t, c, "UPDATE dl_acc SET n = 0 WHERE aid IN ($1, $2, $3)", simple, k1, k2, k3)
	exec(t, a, "BEGIN", simple)
	exec(t, a, "UPDATE dl_acc SET n = n + 1 WHERE aid = $1", simple, k1)
	exec(t, a, "UPDATE dl_acc SET n = n + 1 WHERE aid = $1", simple, k2)
	exec(t, b, "BEGIN", simple)
	exec(t, b, "UPDATE dl_acc SET n = n + 10 WHERE aid = $1", simple, k3)
	done := make(chan error, 1)
	go func() {
		_, err := b.Exec(ctx, "UPDATE dl_acc SET n = n + 10 WHERE aid = $1", simple, k2)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("b's update did not wait for a's row: %v", err)
	case <-time.After(3500 * time.Millisecond):
	}
	exec(t, a, "COMMIT", simple)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("b's update after a committed: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("b still waits after a committed")
	}
	exec(t, b, "COMMIT", simple)
	if g1, g2, g3 := val(k1), val(k2), val(k3); g1 != 1 || g2 != 11 || g3 != 10 {
		t.Errorf("rows %d, %d, %d; want 1, 11, 10", g1, g2, g3)
	}
}

// TestDistributedDeadlockAcrossCoordinators: the two blocks of a
// distributed deadlock run through two coordinators of one fleet, each of
// which knows only its own session's backends; the transactions they
// share in the metadata database close the cycle, and the younger's
// coordinator cancels it.
func TestDistributedDeadlockAcrossCoordinators(t *testing.T) {
	cl := pgtest.Shared(t)
	srv1 := pgtest.Coordinator(t, cl, poolSize(4))
	srv2 := pgtest.Coordinator(t, cl, poolSize(4))
	ctx := context.Background()
	c := connect(t, srv1.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	accounts(t, c, "dl_fleet")
	k1 := 1
	k2 := keyOff(t, c, "dl_fleet", workerOfAid(t, c, "dl_fleet", k1))
	a, b := connect(t, srv1.Addr()), connect(t, srv2.Addr())
	defer a.Close(ctx)
	defer b.Close(ctx)
	for deadline := time.Now().Add(10 * time.Second); ; {
		// srv2 routes by the catalog it polls (until then its writes are
		// refused with 40001).
		if _, err := b.Exec(ctx, "UPDATE dl_fleet SET n = n WHERE aid = 1", simple); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the second coordinator: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	exec(t, a, "BEGIN", simple)
	exec(t, a, "UPDATE dl_fleet SET n = n + 1 WHERE aid = $1", simple, k1)
	exec(t, b, "BEGIN", simple)
	exec(t, b, "UPDATE dl_fleet SET n = n + 10 WHERE aid = $1", simple, k2)
	aDone, bDone := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := a.Exec(ctx, "UPDATE dl_fleet SET n = n + 1 WHERE aid = $1", simple, k2)
		aDone <- err
	}()
	time.Sleep(300 * time.Millisecond)
	go func() {
		_, err := b.Exec(ctx, "UPDATE dl_fleet SET n = n + 10 WHERE aid = $1", simple, k1)
		bDone <- err
	}()
	// The victim's other worker is rolled back before its client hears
	// of the deadlock: either answer may come first, and the older's
	// comes without the younger's ROLLBACK.
	var bErr error
	select {
	case bErr = <-bDone:
	case <-time.After(20 * time.Second):
		t.Fatal("the two blocks still wait after 20 s")
	}
	var pe *pgconn.PgError
	if !errors.As(bErr, &pe) || pe.Code != "40P01" {
		t.Fatalf("the younger block (through the second coordinator): %v, want 40P01", bErr)
	}
	select {
	case err := <-aDone:
		if err != nil {
			t.Fatalf("the older block: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the older block still waits after the younger's deadlock error")
	}
	exec(t, b, "ROLLBACK", simple)
	exec(t, a, "COMMIT", simple)
	var n1, n2 int
	if err := c.QueryRow(ctx, "SELECT (SELECT n FROM dl_fleet WHERE aid = $1), (SELECT n FROM dl_fleet WHERE aid = $2)", k1, k2).Scan(&n1, &n2); err != nil {
		t.Fatal(err)
	}
	if n1 != 1 || n2 != 1 {
		t.Errorf("rows %d, %d; want 1, 1 (the older block's only)", n1, n2)
	}
}

// TestDistributedDeadlocksOneAfterAnother: deadlocks that form one after
// another are each broken within seconds of forming, the older as the
// newer (adversary 144: one victim per check, the youngest of all, left
// the first waiting for as long as new ones formed).
func TestDistributedDeadlocksOneAfterAnother(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(16))
	ctx := context.Background()
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	accounts(t, c, "dl_stream")
	first := workerOfAid(t, c, "dl_stream", 1)
	var on1, on2 []int
	for k := 1; k <= 100 && (len(on1) < 6 || len(on2) < 6); k++ {
		if workerOfAid(t, c, "dl_stream", k) == first {
			on1 = append(on1, k)
		} else {
			on2 = append(on2, k)
		}
	}
	if len(on1) < 6 || len(on2) < 6 {
		t.Fatal("too few keys on a worker")
	}
	// pair makes a deadlock of two blocks over keys k1 (first worker) and
	// k2, and reports how long its first waiter waited for its answer.
	type outcome struct {
		waited   time.Duration
		deadlock bool
		err      error
	}
	pair := func(k1, k2 int) <-chan outcome {
		out := make(chan outcome, 1)
		go func() {
			a, b := connect(t, srv.Addr()), connect(t, srv.Addr())
			defer a.Close(ctx)
			defer b.Close(ctx)
			for _, s := range []struct {
				c *pgx.Conn
				k int
			}{{a, k1}, {b, k2}} {
				if _, err := s.c.Exec(ctx, "BEGIN", simple); err != nil {
					out <- outcome{err: err}
					return
				}
				if _, err := s.c.Exec(ctx, "UPDATE dl_stream SET n = n + 1 WHERE aid = $1", simple, s.k); err != nil {
					out <- outcome{err: err}
					return
				}
			}
			start := time.Now()
			type done struct {
				c   *pgx.Conn
				err error
			}
			dones := make(chan done, 2)
			go func() {
				_, err := a.Exec(ctx, "UPDATE dl_stream SET n = n + 1 WHERE aid = $1", simple, k2)
				dones <- done{a, err}
			}()
			time.Sleep(100 * time.Millisecond)
			go func() {
				_, err := b.Exec(ctx, "UPDATE dl_stream SET n = n + 1 WHERE aid = $1", simple, k1)
				dones <- done{b, err}
			}()
			// The victim releases its locks before its client hears of
			// the deadlock, so either answer may come first.
			var o outcome
			for range 2 {
				d := <-dones
				var pe *pgconn.PgError
				switch {
				case errors.As(d.err, &pe) && pe.Code == "40P01" && !o.deadlock:
					o.deadlock, o.waited = true, time.Since(start)
				case d.err != nil:
					o.err = d.err
				}
				_, _ = d.c.Exec(ctx, "ROLLBACK", simple)
			}
			out <- o
		}()
		return out
	}
	var results []<-chan outcome
	for i := 0; i < 6; i++ {
		results = append(results, pair(on1[i], on2[i]))
		time.Sleep(time.Second)
	}
	for i, r := range results {
		select {
		case o := <-r:
			switch {
			case o.err != nil:
				t.Errorf("deadlock %d: %v", i, o.err)
			case !o.deadlock:
				t.Errorf("deadlock %d: no 40P01", i)
			case o.waited > 5*time.Second:
				t.Errorf("deadlock %d broken after %v; want within 5 s of forming, whatever forms after it", i, o.waited.Round(100*time.Millisecond))
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("deadlock %d still waits", i)
		}
	}
}
