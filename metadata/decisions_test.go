package metadata_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgfleet/pgfleet/metadata"
)

// TestStoreDecisions checks the decision table: exactly one decision
// stands per distributed transaction, and a catalog change made under
// WithDecision records the commit decision with it or not at all.
func TestStoreDecisions(t *testing.T) {
	pool, cl := storeDB(t)
	ctx := context.Background()
	st := metadata.NewStore(pool)
	if err := st.Init(ctx); err != nil {
		t.Fatal(err)
	}
	// An installation from before the table gets it from Init.
	if _, err := pool.Exec(ctx, "DROP TABLE pgfleet.transaction_decisions"); err != nil {
		t.Fatal(err)
	}
	if err := st.Init(ctx); err != nil {
		t.Fatal(err)
	}
	decision := func(base string) byte {
		t.Helper()
		d, err := st.Decision(ctx, base)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}

	// Commit first: deciding again is harmless, and Abort yields to it.
	if err := st.Decide(ctx, "pgfleet_x_1"); err != nil {
		t.Fatal(err)
	}
	if err := st.Decide(ctx, "pgfleet_x_1"); err != nil {
		t.Fatalf("deciding twice: %v", err)
	}
	if d, err := st.Abort(ctx, "pgfleet_x_1"); err != nil || d != metadata.CommitDecision {
		t.Fatalf("Abort after Decide = %q, %v; want 'c'", d, err)
	}
	// Abort first: the commit decision fails with 40001.
	if d, err := st.Abort(ctx, "pgfleet_x_2"); err != nil || d != metadata.AbortDecision {
		t.Fatalf("Abort = %q, %v; want 'a'", d, err)
	}
	if d, err := st.Abort(ctx, "pgfleet_x_2"); err != nil || d != metadata.AbortDecision {
		t.Fatalf("Abort again = %q, %v; want 'a'", d, err)
	}
	err := st.Decide(ctx, "pgfleet_x_2")
	wantCode(t, err, "40001")
	if !errors.Is(err, metadata.ErrAborted) {
		t.Errorf("Decide after Abort: %v, want ErrAborted", err)
	}
	if d := decision("pgfleet_x_2"); d != metadata.AbortDecision {
		t.Errorf("decision = %q after a refused Decide", d)
	}
	if d := decision("pgfleet_x_3"); d != 0 {
		t.Errorf("decision of an unknown transaction = %q", d)
	}

	// A catalog change under WithDecision is the commit decision.
	s := &stepper{t: t, st: st, ctx: ctx}
	if s.v, err = st.Version(ctx); err != nil {
		t.Fatal(err)
	}
	for _, w := range cl.Servers {
		s.ok("add node")(st.AddNode(ctx, w.Host, w.Port))
	}
	for _, name := range []string{"public.a", "public.b", "public.c"} {
		snap, _, err := st.CreateReferenceTable(ctx, name)
		s.check("create "+name, snap, err)
	}
	s.ok("drop a with a decision")(st.DropTable(metadata.WithDecision(ctx, "pgfleet_x_4"), "public.a"))
	if d := decision("pgfleet_x_4"); d != metadata.CommitDecision {
		t.Errorf("decision after the change = %q, want 'c'", d)
	}
	// A failed change records no decision...
	_, err = st.DropTable(metadata.WithDecision(ctx, "pgfleet_x_5"), "public.missing")
	s.failed("drop a missing table", err, "42P01")
	if d := decision("pgfleet_x_5"); d != 0 {
		t.Errorf("decision after a failed change = %q", d)
	}
	// ...and an aborted transaction fails the change.
	if _, err := st.Abort(ctx, "pgfleet_x_6"); err != nil {
		t.Fatal(err)
	}
	_, err = st.DropTable(metadata.WithDecision(ctx, "pgfleet_x_6"), "public.b")
	s.failed("drop b after recovery aborted", err, "40001")
	snap, err := st.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Table("public.b") == nil {
		t.Error("the refused change dropped b")
	}
	// Without a decision in ctx a change records none.
	s.ok("drop c")(st.DropTable(ctx, "public.c"))

	// Decisions reads several at once; a base without one is absent.
	ds, err := st.Decisions(ctx, []string{"pgfleet_x_1", "pgfleet_x_2", "pgfleet_x_3"})
	if err != nil || len(ds) != 2 || ds["pgfleet_x_1"] != metadata.CommitDecision || ds["pgfleet_x_2"] != metadata.AbortDecision {
		t.Errorf("Decisions = %v, %v; want x_1 commit, x_2 abort", ds, err)
	}

	// Old decisions go, except those still needed; abort decisions are
	// kept longer than commit decisions.
	time.Sleep(10 * time.Millisecond)
	n, err := st.ForgetDecisions(ctx, time.Millisecond, time.Hour, []string{"pgfleet_x_1"})
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 { // x_4
		t.Errorf("forgot %d decisions, want 1", n)
	}
	if decision("pgfleet_x_1") != metadata.CommitDecision || decision("pgfleet_x_4") != 0 || decision("pgfleet_x_2") != metadata.AbortDecision {
		t.Error("ForgetDecisions kept or dropped the wrong ones")
	}
	n, err = st.ForgetDecisions(ctx, time.Millisecond, time.Millisecond, []string{"pgfleet_x_1"})
	if err != nil || n != 2 { // x_2, x_6
		t.Errorf("ForgetDecisions of aborts = %d, %v; want 2", n, err)
	}
	if n, err := st.ForgetDecisions(ctx, time.Hour, time.Hour, nil); err != nil || n != 0 {
		t.Errorf("ForgetDecisions of an hour = %d, %v; want none", n, err)
	}
}
