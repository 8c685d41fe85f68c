package coordinator_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestFailedBlockReleasesLocks: a transaction block over two workers that
// fails releases its row locks on both at the error, as PostgreSQL's does,
// not when its client ends the block; with a savepoint it keeps them, as
// PostgreSQL keeps the locks taken before the savepoint, and ROLLBACK TO
// brings it back (adversary 145: a deadlock victim kept the survivor
// waiting on its other worker until its client rolled back).
func TestFailedBlockReleasesLocks(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(8))
	ctx := context.Background()
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	accounts(t, c, "fb_acc")
	k1, w1 := 1, workerOfAid(t, c, "fb_acc", 1)
	k2 := keyOff(t, c, "fb_acc", w1)
	val := func(k int) int {
		t.Helper()
		var n int
		if err := c.QueryRow(ctx, "SELECT n FROM fb_acc WHERE aid = $1", k).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// other updates a row from another session, giving up after 3 s.
	other := func(mode pgx.QueryExecMode, k int) error {
		b := connect(t, srv.Addr())
		defer b.Close(ctx)
		exec(t, b, "SET lock_timeout = '3s'", simple)
		_, err := b.Exec(ctx, "UPDATE fb_acc SET n = n + 10 WHERE aid = $1", mode, k)
		return err
	}
	for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeCacheStatement} {
		for _, failOn := range []int{k1, k2, 0} { // 0: a statement over both workers
			exec(t, c, "UPDATE fb_acc SET n = 0 WHERE aid IN ($1, $2)", mode, k1, k2)
			a := connect(t, srv.Addr())
			exec(t, a, "BEGIN", mode)
			exec(t, a, "UPDATE fb_acc SET n = n + 1 WHERE aid = $1", mode, k1)
			exec(t, a, "UPDATE fb_acc SET n = n + 1 WHERE aid = $1", mode, k2)
			fail := "UPDATE fb_acc SET n = n / 0 WHERE aid = $1"
			args := []any{mode, failOn}
			if failOn == 0 {
				fail, args = "UPDATE fb_acc SET n = n / 0 WHERE aid IN ($1, $2)", []any{mode, k1, k2}
			}
			if _, err := a.Exec(ctx, fail, args...); sqlState(err) != "22012" {
				t.Fatalf("mode %v: division by zero: %v", mode, err)
			}
			for _, k := range []int{k1, k2} {
				if err := other(mode, k); err != nil {
					t.Fatalf("mode %v, failed on key %d: another session's update of key %d while the failed block is open: %v (want it done: the failed block holds no locks)", mode, failOn, k, err)
				}
			}
			if _, err := a.Exec(ctx, "SELECT n FROM fb_acc WHERE aid = $1", mode, k2); sqlState(err) != "25P02" {
				t.Fatalf("mode %v: a statement in the failed block: %v, want 25P02", mode, err)
			}
			if _, err := a.Exec(ctx, "SELECT n FROM fb_acc WHERE aid = $1", mode, k1); sqlState(err) != "25P02" {
				t.Fatalf("mode %v: a statement in the failed block: %v, want 25P02", mode, err)
			}
			tag, err := a.Exec(ctx, "COMMIT", mode)
			if err != nil || tag.String() != "ROLLBACK" {
				t.Fatalf("mode %v: COMMIT of the failed block: %q, %v; want ROLLBACK", mode, tag, err)
			}
			if v1, v2 := val(k1), val(k2); v1 != 10 || v2 != 10 {
				t.Fatalf("mode %v: after the failed block and the other session's updates: %d, %d; want 10, 10", mode, v1, v2)
			}
			// The session goes on across both workers.
			exec(t, a, "BEGIN", mode)
			exec(t, a, "UPDATE fb_acc SET n = n + 1 WHERE aid = $1", mode, k1)
			exec(t, a, "UPDATE fb_acc SET n = n + 1 WHERE aid = $1", mode, k2)
			exec(t, a, "COMMIT", mode)
			if v1, v2 := val(k1), val(k2); v1 != 11 || v2 != 11 {
				t.Fatalf("mode %v: the next block: %d, %d; want 11, 11", mode, v1, v2)
			}
			a.Close(ctx)
		}

		// With a savepoint the block keeps the locks taken before it and
		// releases those taken since, on every worker, and ROLLBACK TO
		// brings it back (adversary 146: the other worker kept both).
		exec(t, c, "UPDATE fb_acc SET n = 0 WHERE aid IN ($1, $2)", mode, k1, k2)
		a := connect(t, srv.Addr())
		exec(t, a, "BEGIN", mode)
		exec(t, a, "UPDATE fb_acc SET n = n + 1 WHERE aid = $1", mode, k2)
		exec(t, a, "SAVEPOINT s", mode)
		exec(t, a, "UPDATE fb_acc SET n = n + 1 WHERE aid = $1", mode, k1)
		if _, err := a.Exec(ctx, "UPDATE fb_acc SET n = n / 0 WHERE aid = $1", mode, k2); sqlState(err) != "22012" {
			t.Fatalf("mode %v: division by zero: %v", mode, err)
		}
		if err := other(mode, k2); sqlState(err) != "55P03" {
			t.Fatalf("mode %v: another session's update of a row locked before the savepoint: %v, want 55P03", mode, err)
		}
		if err := other(mode, k1); err != nil {
			t.Fatalf("mode %v: another session's update of a row the other worker locked after the savepoint: %v (want it done)", mode, err)
		}
		exec(t, a, "ROLLBACK TO SAVEPOINT s", mode)
		exec(t, a, "UPDATE fb_acc SET n = n + 2 WHERE aid = $1", mode, k1)
		exec(t, a, "COMMIT", mode)
		if v1, v2 := val(k1), val(k2); v1 != 12 || v2 != 1 {
			t.Fatalf("mode %v: after ROLLBACK TO and COMMIT: %d, %d; want 12, 1", mode, v1, v2)
		}
		a.Close(ctx)

		// A savepoint released before the failure: none to go back to.
		exec(t, c, "UPDATE fb_acc SET n = 0 WHERE aid IN ($1, $2)", mode, k1, k2)
		a = connect(t, srv.Addr())
		exec(t, a, "BEGIN", mode)
		exec(t, a, "SAVEPOINT s1", mode)
		exec(t, a, "RELEASE s1", mode)
		exec(t, a, "UPDATE fb_acc SET n = n + 1 WHERE aid = $1", mode, k1)
		exec(t, a, "UPDATE fb_acc SET n = n + 1 WHERE aid = $1", mode, k2)
		if _, err := a.Exec(ctx, "SELECT 1 / 0", mode); sqlState(err) != "22012" {
			t.Fatalf("mode %v: division by zero: %v", mode, err)
		}
		for _, k := range []int{k1, k2} {
			if err := other(mode, k); err != nil {
				t.Fatalf("mode %v: another session's update of key %d after the released savepoint's block failed: %v", mode, k, err)
			}
		}
		if _, err := a.Exec(ctx, "ROLLBACK TO SAVEPOINT s1", mode); sqlState(err) != "3B001" {
			t.Fatalf("mode %v: ROLLBACK TO the released savepoint: %v, want 3B001", mode, err)
		}
		exec(t, a, "ROLLBACK", mode)
		if v1, v2 := val(k1), val(k2); v1 != 10 || v2 != 10 {
			t.Fatalf("mode %v: after the released savepoint's block: %d, %d; want 10, 10", mode, v1, v2)
		}
		a.Close(ctx)
	}

	// A distributed deadlock's victim: the survivor goes on while the
	// victim's client keeps its failed block open.
	for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeCacheStatement} {
		exec(t, c, "UPDATE fb_acc SET n = 0 WHERE aid IN ($1, $2)", mode, k1, k2)
		a, b := connect(t, srv.Addr()), connect(t, srv.Addr())
		exec(t, a, "BEGIN", mode)
		exec(t, a, "UPDATE fb_acc SET n = n + 1 WHERE aid = $1", mode, k1)
		exec(t, b, "BEGIN", mode)
		exec(t, b, "UPDATE fb_acc SET n = n + 10 WHERE aid = $1", mode, k2)
		aDone := make(chan error, 1)
		go func() {
			_, err := a.Exec(ctx, "UPDATE fb_acc SET n = n + 1 WHERE aid = $1", mode, k2)
			aDone <- err
		}()
		time.Sleep(300 * time.Millisecond) // a waits for b's row
		// b, the younger, waits for a's row: the victim.
		if _, err := b.Exec(ctx, "UPDATE fb_acc SET n = n + 10 WHERE aid = $1", mode, k1); sqlState(err) != "40P01" {
			t.Fatalf("mode %v: the victim's statement: %v, want 40P01", mode, err)
		}
		select {
		case err := <-aDone:
			if err != nil {
				t.Fatalf("mode %v: the survivor's statement: %v", mode, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("mode %v: the survivor still waits for the victim's row 10 s after the victim's 40P01", mode)
		}
		exec(t, a, "COMMIT", mode)
		if tag, err := b.Exec(ctx, "COMMIT", mode); err != nil || tag.String() != "ROLLBACK" {
			t.Fatalf("mode %v: the victim's COMMIT: %q, %v; want ROLLBACK", mode, tag, err)
		}
		if v1, v2 := val(k1), val(k2); v1 != 1 || v2 != 1 {
			t.Fatalf("mode %v: after the deadlock: %d, %d; want 1, 1", mode, v1, v2)
		}
		a.Close(ctx)
		b.Close(ctx)
	}
}
