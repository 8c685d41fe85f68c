package shards_test

import (
	"fmt"
	"testing"

	"github.com/pgfleet/pgfleet/coordinator/shards"
	"github.com/pgfleet/pgfleet/metadata"
)

// TestGroupCommitDecision checks the commit point of a distributed
// transaction: it commits after recording its commit decision, and a group
// that recovery decided to abort first rolls back on every node, whether
// recovery has rolled its prepared transactions back yet or not.
func TestGroupCommitDecision(t *testing.T) {
	e := newEnv(t)
	for i := range e.w {
		e.exec(i, "CREATE TABLE g (id int)")
	}
	run := func(id int) *shards.TestGroup {
		t.Helper()
		g := shards.NewTestGroup(e.store, e.conns)
		for _, n := range e.ids {
			if err := g.Exec(e.ctx, n, fmt.Sprintf("INSERT INTO g VALUES (%d)", id)); err != nil {
				t.Fatal(err)
			}
		}
		if err := g.Prepare(e.ctx); err != nil {
			t.Fatal(err)
		}
		return g
	}
	rows := func(id int) (n int64) {
		t.Helper()
		for i := range e.w {
			n += e.int(i, "SELECT count(*) FROM g WHERE id = $1", id)
		}
		return n
	}

	// The usual way: decide, then commit everywhere.
	g := run(1)
	if err := g.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	if d, err := e.store.Decision(e.ctx, g.Base()); err != nil || d != metadata.CommitDecision {
		t.Errorf("decision of a committed group = %q, %v; want 'c'", d, err)
	}
	if n := rows(1); n != 2 {
		t.Errorf("committed group: %d rows, want 2", n)
	}

	// Recovery decided to abort while the group was prepared: the group
	// cannot decide to commit, and rolls back.
	g = run(2)
	if d, err := e.store.Abort(e.ctx, g.Base()); err != nil || d != metadata.AbortDecision {
		t.Fatalf("Abort = %q, %v", d, err)
	}
	err := g.Commit(e.ctx)
	if pe := wantCode(t, err, "40001", "aborted by recovery"); pe.Detail != "" {
		t.Errorf("cleanup problems: %s", pe.Detail)
	}
	if n := rows(2); n != 0 {
		t.Errorf("aborted group: %d rows committed", n)
	}
	e.noPreparedXacts()

	// A coordinator that wakes up after recovery aborted and rolled back
	// its prepared transactions commits nothing and reports no leftovers.
	g = run(3)
	if _, err := e.store.Abort(e.ctx, g.Base()); err != nil {
		t.Fatal(err)
	}
	for i, n := range e.ids {
		e.exec(i, fmt.Sprintf("ROLLBACK PREPARED '%s_%d'", g.Base(), n))
	}
	err = g.Commit(e.ctx)
	if pe := wantCode(t, err, "40001", "aborted by recovery"); pe.Detail != "" {
		t.Errorf("cleanup problems: %s", pe.Detail)
	}
	if n := rows(3); n != 0 {
		t.Errorf("aborted group: %d rows committed", n)
	}
	e.noPreparedXacts()

	// After the decision, nothing rolls a prepared transaction back: what
	// the group does not commit is recovery's to commit.
	g = run(4)
	if err := e.store.Decide(e.ctx, g.Base()); err != nil {
		t.Fatal(err)
	}
	e.exec(1, fmt.Sprintf("COMMIT PREPARED '%s_%d'", g.Base(), e.ids[1])) // as recovery would
	if err := g.Commit(e.ctx); err != nil {
		t.Fatalf("commit after recovery committed one node: %v", err)
	}
	if problems := g.Rollback(e.ctx); len(problems) != 0 {
		t.Errorf("rollback after the decision: %v", problems)
	}
	if n := rows(4); n != 2 {
		t.Errorf("decided group: %d rows, want 2", n)
	}
	e.noPreparedXacts()
}

// TestCatalogChangeIsTheDecision checks that the distributed operations
// record their commit decisions: undistribute_table's in its catalog change.
func TestCatalogChangeIsTheDecision(t *testing.T) {
	e := newEnv(t)
	e.exec(0, "CREATE TABLE u (id bigint PRIMARY KEY)")
	e.exec(0, "INSERT INTO u SELECT generate_series(1, 100)")
	snap, err := shards.Distribute(e.ctx, e.store, e.conns, e.home, "u", "id", 4, "")
	if err != nil {
		t.Fatal(err)
	}
	before := snap.Version
	if snap, err = shards.Undistribute(e.ctx, e.store, snap, e.conns, e.home, "u"); err != nil {
		t.Fatal(err)
	}
	if snap.Version != before+1 {
		t.Errorf("undistribute_table moved the version from %d to %d, want one step", before, snap.Version)
	}
	for _, op := range []string{"distribute", "undistribute"} {
		if n := e.int(0, `SELECT count(*) FROM pgfleet.transaction_decisions
			WHERE gid_base LIKE 'pgfleet\_'||$1||'\_%' AND decision = 'c'`, op); n != 1 {
			t.Errorf("%d commit decisions for %s, want 1", n, op)
		}
	}
	if n := e.int(0, "SELECT count(*) FROM u"); n != 100 {
		t.Errorf("%d rows back in u, want 100", n)
	}
	e.noPreparedXacts()
}
