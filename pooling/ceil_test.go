package pooling

import "testing"

// The gate's ceiling: when the share shrinks below what is open, clients
// holding connections to other workers (class > 0) may still open up to
// what the coordinator records (open connections and a reserve, never
// above the last record); new clients (class 0) only under the cap.
func TestGateHoldCeiling(t *testing.T) {
	g := NewGate(5)
	for i := 0; i < 4; i++ {
		if !g.tryOpen(0) {
			t.Fatalf("open %d of 5 refused", i+1)
		}
	}
	// The share shrinks to 3 with 4 open: record 5 (4 and a reserve of 1).
	if rec := g.Hold(3, 1); rec != 5 || g.Cap() != 3 || g.Ceil() != 5 {
		t.Fatalf("Hold(3, 1) with 4 open: record %d, cap %d, ceiling %d; want 5, 3, 5", rec, g.Cap(), g.Ceil())
	}
	if g.tryOpen(0) {
		t.Error("a new client opened a fifth connection over the cap of 3")
	}
	if !g.tryOpen(1) {
		t.Error("a client holding another worker's connection could not open the reserve's")
	}
	if g.tryOpen(2) {
		t.Error("a sixth connection opened past the ceiling of 5")
	}
	// Connections close; the next renewal records less, never more than
	// the last record.
	g.open.Add(-4)
	if rec := g.Hold(3, 1); rec != 3 || g.Ceil() != 3 {
		t.Fatalf("Hold(3, 1) with 1 open: record %d, ceiling %d; want 3, 3", rec, g.Ceil())
	}
	g.open.Add(5)
	if rec := g.Hold(3, 1); rec != 3 {
		t.Fatalf("Hold(3, 1) with 6 open after a ceiling of 3: record %d; want 3 (never above the last record)", rec)
	}
	// A larger share raises both after it is recorded.
	g.Raise(7)
	if g.Cap() != 7 || g.Ceil() != 7 {
		t.Errorf("Raise(7): cap %d, ceiling %d", g.Cap(), g.Ceil())
	}
	// A fence takes both to 0.
	g.Fence()
	if g.Cap() != 0 || g.Ceil() != 0 || g.tryOpen(1) {
		t.Errorf("after Fence: cap %d, ceiling %d", g.Cap(), g.Ceil())
	}
}
