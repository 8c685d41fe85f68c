package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestSetInBlockTakesInWorkers: a transaction block's SETs (SET LOCAL of a
// custom setting, the multi-tenant pattern; SET; SET LOCAL between
// savepoints) hold on every worker the block takes in after them, as on
// one PostgreSQL: they are set again there after its BEGIN, in their
// places among its savepoints. They were refused with 0A000. A SET made
// once the block spans workers is run on each other worker when the block
// comes back to it (it was refused, 0A000, as having reached one only).
func TestSetInBlockTakesInWorkers(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(8))
	c := connect(t, srv.Addr())
	ctx := context.Background()
	k1, k2 := spanningTable(t, c, "sb_acc")
	simple := pgx.QueryExecModeSimpleProtocol
	settings := "SELECT coalesce(current_setting('app.sb_tenant', true), 'unset') || ' ' || current_setting('work_mem') || ' ' || " +
		"current_setting('DateStyle') || ' ' || current_setting('statement_timeout') FROM sb_acc WHERE aid = $1"
	for _, extended := range []bool{false, true} {
		r := txnRunner{t: t, c: c, extended: extended}
		read := func(what string, k int, want string) {
			t.Helper()
			var got string
			mode := simple
			if extended {
				mode = pgx.QueryExecModeExec
			}
			if err := c.QueryRow(ctx, settings, mode, k).Scan(&got); err != nil || got != want {
				t.Errorf("%s: %s: on the worker of %d: %q, %v; want %q", r.name(), what, k, got, err, want)
			}
		}
		for _, order := range [][2]int{{k1, k2}, {k2, k1}} {
			// The tenant set for the transaction, then rows on both
			// workers, written too.
			r.must("BEGIN")
			r.must("SET LOCAL app.sb_tenant = '3'")
			read("SET LOCAL app.sb_tenant", order[0], "3 4MB ISO, MDY 0")
			read("SET LOCAL app.sb_tenant", order[1], "3 4MB ISO, MDY 0")
			r.must("UPDATE sb_acc SET n = n + 1 WHERE aid = $1 AND current_setting('app.sb_tenant') = '3'", order[1])
			r.must("UPDATE sb_acc SET n = n + 1 WHERE aid = $1 AND current_setting('app.sb_tenant') = '3'", order[0])
			r.must("COMMIT")
			// (The placeholder stays defined, empty, as on PostgreSQL.)
			read("after COMMIT", order[1], " 4MB ISO, MDY 0")
			read("after COMMIT", order[0], " 4MB ISO, MDY 0")

			// SET, SET LOCAL and savepoints: ROLLBACK TO undoes on
			// every worker what came after the savepoint.
			r.must("BEGIN")
			r.must("SET work_mem = '9MB'")
			r.must("SET LOCAL DateStyle = 'SQL, DMY'")
			r.must("SAVEPOINT a")
			r.must("SET LOCAL statement_timeout = '5s'")
			read("before ROLLBACK TO", order[1], " 9MB SQL, DMY 5s")
			read("before ROLLBACK TO", order[0], " 9MB SQL, DMY 5s")
			r.must("ROLLBACK TO a")
			read("after ROLLBACK TO", order[0], " 9MB SQL, DMY 0")
			read("after ROLLBACK TO", order[1], " 9MB SQL, DMY 0")
			r.must("COMMIT")
			read("after COMMIT of SET work_mem", order[1], " 9MB ISO, MDY 0")
			read("after COMMIT of SET work_mem", order[0], " 9MB ISO, MDY 0")
			r.must("RESET work_mem")

			if !extended {
				// SET CONSTRAINTS and a SET in one query: both hold
				// (the SET's tag was taken for SET CONSTRAINTS', and the
				// work_mem lost).
				r.must("BEGIN")
				r.must("SET CONSTRAINTS ALL DEFERRED; SET LOCAL work_mem = '1MB'")
				read("SET CONSTRAINTS then SET LOCAL", order[1], " 1MB ISO, MDY 0")
				read("SET CONSTRAINTS then SET LOCAL", order[0], " 1MB ISO, MDY 0")
				r.must("COMMIT")
			}

			// Rolled back: nothing stays, on either worker.
			r.must("BEGIN")
			r.must("SET work_mem = '9MB'")
			read("SET in a block", order[1], " 9MB ISO, MDY 0")
			read("SET in a block", order[0], " 9MB ISO, MDY 0")
			r.must("ROLLBACK")
			read("after ROLLBACK", order[0], " 4MB ISO, MDY 0")
			read("after ROLLBACK", order[1], " 4MB ISO, MDY 0")

			// A custom SET rolled back AND CHAIN leaves its placeholder
			// for the chained transaction's workers too (adversary
			// round 16: NULL on the worker taken in after).
			r.must("BEGIN")
			r.must("SET app.sb_q = 'b'")
			r.must("ROLLBACK AND CHAIN")
			for _, k := range []int{order[0], order[1]} {
				if got := queryString(t, c, "SELECT coalesce(current_setting('app.sb_q', true), '<null>') FROM sb_acc WHERE aid = $1", simple, k); got != "" {
					t.Errorf("%s: after ROLLBACK AND CHAIN of SET app.sb_q, on the worker of %d: %q, want an empty string", r.name(), k, got)
				}
			}
			r.must("COMMIT")

			// SETs once the block spans both workers hold on both: the
			// other worker runs them when the block comes back to it
			// (they were refused, 0A000), and a savepoint made before
			// it comes back keeps them on both through a ROLLBACK TO.
			if extended {
				// (pgx's statement cache prepares it now, not in the
				// pipeline below.)
				var w string
				if err := c.QueryRow(ctx, settings, order[0]).Scan(&w); err != nil {
					t.Fatal(err)
				}
			}
			r.must("BEGIN")
			read("spanning", order[0], " 4MB ISO, MDY 0")
			read("spanning", order[1], " 4MB ISO, MDY 0")
			r.must("SET LOCAL work_mem = '9MB'")
			r.must("SET LOCAL app.sb_tenant = '5'")
			read("SET LOCAL once spanning", order[0], "5 9MB ISO, MDY 0")
			read("SET LOCAL once spanning", order[1], "5 9MB ISO, MDY 0")
			r.must("SET LOCAL statement_timeout = '7s'")
			r.must("SAVEPOINT s1")
			r.must("SET LOCAL DateStyle = 'SQL, DMY'")
			read("SET after a savepoint", order[1], "5 9MB SQL, DMY 7s")
			r.must("ROLLBACK TO s1")
			read("after ROLLBACK TO", order[0], "5 9MB ISO, MDY 7s")
			read("after ROLLBACK TO", order[1], "5 9MB ISO, MDY 7s")
			// A SET after a savepoint, then RELEASE: the other worker has
			// not run it (RELEASE sets nothing again there).
			r.must("SAVEPOINT s2")
			r.must("SET LOCAL work_mem = '7MB'")
			r.must("RELEASE s2")
			read("SET LOCAL after a savepoint, then RELEASE", order[1], "5 7MB ISO, MDY 7s")
			read("SET LOCAL after a savepoint, then RELEASE", order[0], "5 7MB ISO, MDY 7s")
			r.must("SET work_mem = '3MB'")
			r.must("UPDATE sb_acc SET n = n + 1 WHERE aid = $1 AND current_setting('work_mem') = '3MB'", order[0])
			r.must("UPDATE sb_acc SET n = n + 1 WHERE aid = $1 AND current_setting('work_mem') = '3MB'", order[1])
			if extended {
				// In one pipeline: the SET's answer is read before the
				// block switches workers (a hidden Sync), then run there.
				b := &pgx.Batch{}
				b.Queue("SET LOCAL work_mem = '2MB'")
				b.Queue(settings, order[1])
				b.Queue(settings, order[0])
				br := c.SendBatch(ctx, b)
				if _, err := br.Exec(); err != nil {
					t.Errorf("pipelined SET LOCAL: %v", err)
				}
				for _, k := range []int{order[1], order[0]} {
					var got string
					if err := br.QueryRow().Scan(&got); err != nil || got != "5 2MB ISO, MDY 7s" {
						t.Errorf("pipelined SET LOCAL, then the worker of %d: %q, %v; want %q", k, got, err, "5 2MB ISO, MDY 7s")
					}
				}
				if err := br.Close(); err != nil {
					t.Errorf("pipeline: %v", err)
				}
				r.must("SET work_mem = '3MB'")
			}
			r.must("COMMIT")
			read("after COMMIT of SET work_mem once spanning", order[0], " 3MB ISO, MDY 0")
			read("after COMMIT of SET work_mem once spanning", order[1], " 3MB ISO, MDY 0")
			r.must("RESET work_mem")
		}
	}
	// Each UPDATE ran twice per order and protocol, on both keys.
	for _, k := range []int{k1, k2} {
		if got := queryString(t, c, "SELECT n::text FROM sb_acc WHERE aid = $1", simple, k); got != "108" {
			t.Errorf("n(%d) = %s, want 108", k, got)
		}
	}
	// The next client of these connections has no such setting.
	_ = c.Close(ctx)
	if got := nextRead(t, srv.Addr(), "SELECT coalesce(current_setting('app.sb_tenant', true), '<null>')"); got != "<null>" {
		t.Errorf("the next client reads app.sb_tenant = %q, want <null>", got)
	}
}

// TestPipelineAfterBlockEnds: a block's COMMIT or ROLLBACK and then a
// statement for another worker in one pipeline: the statement runs in the
// pipeline's next implicit transaction, as on PostgreSQL (adversary round
// 16: after a block that ran only a SET, it got 25P02 and its INSERT was
// not done).
func TestPipelineAfterBlockEnds(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(8))
	c := connect(t, srv.Addr())
	k1, k2 := spanningTable(t, c, "pb_acc")
	simple := pgx.QueryExecModeSimpleProtocol
	for _, k := range []int{k1, k2} {
		for _, end := range []string{"COMMIT", "ROLLBACK"} {
			if res := batchRun(c, []string{"BEGIN", "SET work_mem = '5MB'"}); strings.Contains(strings.Join(res, " "), "error") {
				t.Fatalf("BEGIN; SET: %q", res)
			}
			res := batchRun(c, []string{end, fmt.Sprintf("UPDATE pb_acc SET n = n + 1 WHERE aid = %d", k),
				fmt.Sprintf("SELECT n FROM pb_acc WHERE aid = %d", k)})
			if strings.Contains(strings.Join(res, " "), "error") {
				t.Errorf("%s then statements on the worker of %d in one pipeline: %q, want them done", end, k, res)
			}
			want := "4MB"
			if end == "COMMIT" {
				want = "5MB"
			}
			if got := queryString(t, c, "SHOW work_mem", simple); got != want {
				t.Errorf("%s: work_mem afterwards %s, want %s", end, got, want)
			}
			exec(t, c, "RESET work_mem", simple)
		}
	}
	for _, k := range []int{k1, k2} {
		if got := queryString(t, c, "SELECT n::text FROM pb_acc WHERE aid = $1", simple, k); got != "102" {
			t.Errorf("n(%d) = %s, want 102 (one UPDATE per ending)", k, got)
		}
	}
}
