package coordinator

import (
	"testing"

	"github.com/pgfleet/pgfleet/pooling"
)

// TestTypeKnown: a worker's type OID is known only when In maps it; the
// default node's own type of the same number does not make it known
// (that type was reported for the worker's new one), and a default node's
// OID is known by Out or Canon.
func TestTypeKnown(t *testing.T) {
	tb := &pooling.OIDTables{
		In:    map[uint32]uint32{20000: 17000},
		Out:   map[uint32]uint32{17000: 20000},
		Canon: map[uint32]bool{17000: true, 17500: true},
	}
	for _, c := range []struct {
		oid  uint32
		in   bool
		want bool
	}{
		{20000, true, true},
		{17500, true, false}, // the default node's 17500 is another type
		{17000, true, false},
		{17000, false, true},
		{17500, false, true},
		{20000, false, false},
		{30000, true, false},
	} {
		if got := typeKnown(tb, c.oid, c.in); got != c.want {
			t.Errorf("typeKnown(%d, in %v) = %v, want %v", c.oid, c.in, got, c.want)
		}
	}
}

// TestOIDsStaleDropsTables: after DDL or a catalog change the tables are
// dropped, not only due to be read again at the next miss: a reading
// that met a DDL's commit halfway (a shard's columns renamed, the table's
// not yet) matched columns wrongly with every OID mapped, so no miss came
// to correct it (adversary: a rename swap left two columns' numbers
// swapped for good).
func TestOIDsStaleDropsTables(t *testing.T) {
	s := &Server{}
	s.mu.Lock()
	a, b := s.typeOIDs("w1:5432", "db"), s.typeOIDs("w2:5432", "db")
	s.mu.Unlock()
	for _, x := range []*pooling.TypeOIDs{a, b} {
		x.Store(&pooling.OIDTables{Rels: map[uint32]pooling.RelOID{20000: {OID: 17000, Cols: []int16{1, 3, 2}}}})
	}
	s.oidsStale()
	if a.Load() != nil || b.Load() != nil {
		t.Errorf("tables after oidsStale: %v and %v, want none", a.Load(), b.Load())
	}
}
