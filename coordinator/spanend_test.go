package coordinator_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestSpanningBlockKeepsFunctionSettings: settings a function or DO block
// changed (set_config(..., false)) in a transaction block over several
// workers last after its COMMIT, as on PostgreSQL, or the session is told
// no (0A000) where it cannot follow them; they go with its ROLLBACK; no
// other client sees them.
func TestSpanningBlockKeepsFunctionSettings(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(2))
	setup := connect(t, srv.Addr())
	k1, k2 := spanningTable(t, setup, "se_acc")
	if workerOfAid(t, setup, "se_acc", k2) != cl.Servers[0].Addr() {
		k1, k2 = k2, k1 // (the block ends on the default worker, where a DO block runs)
	}
	ctx := context.Background()
	for _, extended := range []bool{false, true} {
		for _, end := range []string{"COMMIT", "ROLLBACK"} {
			// (wantUndone: after the ROLLBACK, where the placeholder
			// set_config made stays, empty; wantOther: another client.)
			for _, set := range []struct{ do, read, want, wantUndone, wantOther string }{
				{"set_config('DateStyle', 'SQL, DMY', false)", "'2020-01-03'::date::text", "03/01/2020", "2020-01-03", "2020-01-03"},
				{"set_config('app.tenant', '7', false)", "coalesce(current_setting('app.tenant', true), 'none')", "7", "", "none"},
				// (A SET of it before in the block: the DO block's value
				// stays; adversary 149.)
				{"set_config('app.tenant', '7', false)", "coalesce(current_setting('app.tenant', true), 'none') || '.'", "7.", "5.", "none."},
				{"set_config('app.tenant', '7', false); PERFORM set_config('TimeZone', 'Asia/Tokyo', false)",
					"coalesce(current_setting('app.tenant', true), 'none') || ' ' || current_setting('TimeZone')", "7 Asia/Tokyo", " UTC", "none UTC"},
			} {
				c := connect(t, srv.Addr())
				exec(t, c, "SET TimeZone = 'UTC'")
				r := txnRunner{t: t, c: c, extended: extended}
				if set.wantOther == "none." {
					exec(t, c, "SET app.tenant = '5'")
				}
				r.must("BEGIN")
				r.must("UPDATE se_acc SET n = n + 1 WHERE aid = $1", k1)
				r.must("UPDATE se_acc SET n = n + 1 WHERE aid = $1", k2)
				if set.wantOther == "none." {
					r.must("SET app.tenant = '6'")
				}
				r.must("DO $$ BEGIN PERFORM " + set.do + "; END $$")
				r.must(end)
				want := set.want
				if end == "ROLLBACK" {
					want = set.wantUndone
				}
				name := r.name() + " " + end + " " + set.do
				if got := queryString(t, c, "SELECT "+set.read); got != want {
					t.Errorf("%s: after the block %q, want %q (PostgreSQL's)", name, got, want)
				}
				for _, k := range []int{k1, k2} {
					var got string
					err := c.QueryRow(ctx, "SELECT "+set.read+" FROM se_acc WHERE aid = $1", k).Scan(&got)
					if err != nil && sqlState(err) != "0A000" || err == nil && got != want {
						t.Errorf("%s: read of %d: %q, %v; want %q", name, k, got, err, want)
					}
				}
				c.Close(ctx)
				// No other client inherits the change (every pooled
				// connection is read).
				others := []*pgx.Conn{connect(t, srv.Addr()), connect(t, srv.Addr())}
				for _, o := range others {
					exec(t, o, "SET TimeZone = 'UTC'")
					for _, k := range []int{k1, k2} {
						var got string
						if err := o.QueryRow(ctx, "SELECT "+set.read+" FROM se_acc WHERE aid = $1", k).Scan(&got); err != nil || got != set.wantOther {
							t.Errorf("%s: another client's read of %d: %q, %v; want %q", name, k, got, err, set.wantOther)
						}
					}
				}
				for _, o := range others {
					o.Close(ctx)
				}
			}
		}
	}
}

// TestSearchPathAfterSpanningBlock: after a block over several workers
// that set search_path (or RESET ALL), unqualified names resolve by the
// session's settings as after a block on one worker: a distributed table
// reached through public is read, one another schema shadows is refused
// (0A000), never read from the wrong table. (They were refused until a
// statement on no table ran.) In the block, after the SET, a name the
// other schema shadows is refused or reads the other schema's table (it
// read public's: the names were resolved on the parked connection to the
// first worker, which had not run the SET).
func TestSearchPathAfterSpanningBlock(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	setup := connect(t, srv.Addr())
	k1, k2 := spanningTable(t, setup, "spb_acc")
	exec(t, setup, "CREATE SCHEMA IF NOT EXISTS spb_other")
	exec(t, setup, "CREATE TABLE IF NOT EXISTS spb_other.spb_acc (aid bigint, n int)")
	t.Cleanup(func() { _, _ = setup.Exec(context.Background(), "DROP SCHEMA spb_other CASCADE") })
	for _, extended := range []bool{false, true} {
		for _, tc := range []struct {
			set, end, count string
			qualified       bool // the UPDATE after the SET names public.spb_acc
		}{
			{"SET search_path = public", "COMMIT", "100", false},
			{"RESET ALL", "COMMIT", "100", false},
			{"SET search_path TO DEFAULT", "COMMIT", "100", false},
			{"SET LOCAL search_path = spb_other, public", "COMMIT", "100", false},
			{"SET search_path = spb_other, public", "ROLLBACK", "100", false},
			{"SET search_path = spb_other, public", "COMMIT", "", false},
			{"SET search_path = spb_other, public", "COMMIT", "", true}, // other.spb_acc shadows it: refused
		} {
			c := connect(t, srv.Addr())
			r := txnRunner{t: t, c: c, extended: extended}
			name := r.name() + " " + tc.set + " " + tc.end
			r.must("BEGIN")
			r.must("UPDATE spb_acc SET n = n + 1 WHERE aid = $1", k1)
			r.must("UPDATE spb_acc SET n = n + 1 WHERE aid = $1", k2)
			r.must(tc.set)
			// Where spb_other now shadows the table, PostgreSQL updates its
			// (empty) spb_acc: 0 rows, or refused; never public's row.
			table := "spb_acc"
			if tc.qualified {
				table = "public.spb_acc"
			}
			tag, err := r.run("UPDATE "+table+" SET n = n + 1 WHERE aid = $1", k2)
			switch shadowed := strings.Contains(tc.set, "spb_other") && !tc.qualified; {
			case shadowed && !(sqlState(err) == "0A000" || err == nil && tag == "UPDATE 0"):
				t.Errorf("%s: an UPDATE the other schema's table shadows: %q, %v; want UPDATE 0 or 0A000", name, tag, err)
			case !shadowed && err != nil:
				t.Errorf("%s: UPDATE after %s: %v", name, tc.set, err)
			}
			r.must(tc.end)
			if sqlState(err) == "0A000" {
				tc.count = "100" // (the block failed: its SET went with it)
			}
			for i := 0; i < 2; i++ {
				var got string
				err := c.QueryRow(context.Background(), "SELECT count(*)::text FROM spb_acc").Scan(&got)
				switch {
				case tc.count == "" && sqlState(err) != "0A000":
					t.Errorf("%s: count through a search_path whose schema shadows the table: %q, %v; want 0A000 (PostgreSQL reads spb_other's, 0 rows)", name, got, err)
				case tc.count != "" && (err != nil || got != tc.count):
					t.Errorf("%s: count after the block: %q, %v; want %s", name, got, err, tc.count)
				}
			}
			c.Close(context.Background())
		}
	}
}

// TestRefusedStatementPinsNothing: a statement whose user code would pin
// the session, refused before it reached a worker (a block on one worker
// that cannot take in another once pinned), leaves the session as it was:
// after the block, multi-shard reads run (adversary 151: the session was
// pinned for good).
func TestRefusedStatementPinsNothing(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	setup := connect(t, srv.Addr())
	k1, k2 := spanningTable(t, setup, "rp_acc")
	exec(t, setup, `CREATE OR REPLACE FUNCTION rp_fset(k text, v text, l bool) RETURNS text LANGUAGE plpgsql AS $$ BEGIN RETURN set_config(k, v, l); END $$`)
	t.Cleanup(func() { _, _ = setup.Exec(context.Background(), "DROP FUNCTION IF EXISTS rp_fset(text, text, bool)") })
	for _, extended := range []bool{false, true} {
		c := connect(t, srv.Addr())
		r := txnRunner{t: t, c: c, extended: extended}
		r.must("BEGIN")
		r.must("UPDATE rp_acc SET n = n WHERE aid = $1", k2)
		_, err := r.run("SELECT 1 FROM rp_acc WHERE aid = $1 AND rp_fset('app.x', 'w2', false) IS NULL", k1)
		if err != nil && sqlState(err) != "0A000" {
			t.Errorf("%s: the statement: %v, want it run or 0A000", r.name(), err)
		}
		r.run("ROLLBACK")
		if _, err := r.run("SELECT count(*) FROM rp_acc"); err != nil {
			t.Errorf("%s: a multi-shard read after the block: %v", r.name(), err)
		}
		c.Close(context.Background())
	}
}

// TestRefusedMultiShardPinsNothing: a multi-shard statement whose user
// code would pin the session is refused (0A000) and leaves the session as
// it was: the next multi-shard read runs.
func TestRefusedMultiShardPinsNothing(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	setup := connect(t, srv.Addr())
	spanningTable(t, setup, "rm_acc")
	exec(t, setup, `CREATE OR REPLACE FUNCTION rm_fset(k text, v text, l bool) RETURNS text LANGUAGE plpgsql AS $$ BEGIN RETURN set_config(k, v, l); END $$`)
	t.Cleanup(func() { _, _ = setup.Exec(context.Background(), "DROP FUNCTION IF EXISTS rm_fset(text, text, bool)") })
	for _, extended := range []bool{false, true} {
		c := connect(t, srv.Addr())
		r := txnRunner{t: t, c: c, extended: extended}
		if _, err := r.run("SELECT count(rm_fset('app.x', 'v', false)) FROM public.rm_acc"); err != nil && sqlState(err) != "0A000" {
			t.Errorf("%s: the statement: %v, want it run or 0A000", r.name(), err)
		}
		if _, err := r.run("SELECT count(*) FROM rm_acc"); err != nil {
			t.Errorf("%s: a multi-shard read after it: %v", r.name(), err)
		}
		c.Close(context.Background())
	}
}
