package executor

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/planner"
)

func TestArrayValue(t *testing.T) {
	// int4[] {1, NULL}: one dimension, has nulls, element type 23.
	elems := []byte{0, 0, 0, 4, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff}
	got := arrayValue(oidInt4, 2, true, elems)
	want := []byte{0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 23, 0, 0, 0, 2, 0, 0, 0, 1}
	want = append(want, elems...)
	if !bytes.Equal(got, want) {
		t.Errorf("arrayValue = %v\nwant %v", got, want)
	}
	if got := arrayValue(oidInt4, 0, false, nil); !bytes.Equal(got, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 23}) {
		t.Errorf("empty array = %v", got)
	}
}

func dataRow(vals ...[]byte) []byte {
	b, _ := (&pgproto3.DataRow{Values: vals}).Encode(nil)
	return b[5:]
}

// TestAssemble puts a merged row together: the merge's key columns, the
// kept row's other columns.
func TestAssemble(t *testing.T) {
	r := &Scatter{X: &planner.Scatter{Merge: &planner.Merge{Kind: planner.SQLMerge, RowIDs: true, Keys: []int{2}, Hidden: 1}}, ncols: 4}
	for _, row := range [][]byte{
		dataRow([]byte("a0"), []byte{0, 0, 0, 1}, nil, []byte{9}),
		dataRow([]byte("a1"), []byte{0, 0, 0, 2}, []byte("z"), []byte{8}),
	} {
		r.offs = append(r.offs, len(r.kept))
		r.kept = append(r.kept, row...)
	}
	id := make([]byte, 4)
	binary.BigEndian.PutUint32(id, 1)
	got, err := r.assemble(nil, dataRow(id, []byte("2")))
	if err != nil {
		t.Fatal(err)
	}
	if want := dataRow([]byte("a1"), []byte("2"), []byte("z")); !bytes.Equal(got, want) {
		t.Errorf("assemble = %q, want %q", got, want)
	}
	binary.BigEndian.PutUint32(id, 5)
	if _, err := r.assemble(nil, dataRow(id, []byte("2"))); err == nil {
		t.Error("a row number out of range was accepted")
	}
}

// TestSameTypes: two row descriptions compare by their columns' types
// only (names, tables and formats aside); a short or malformed one is
// never the same.
func TestSameTypes(t *testing.T) {
	enc := func(fields ...pgproto3.FieldDescription) []byte {
		b, _ := (&pgproto3.RowDescription{Fields: fields}).Encode(nil)
		return b[5:]
	}
	i8 := pgproto3.FieldDescription{Name: []byte("a"), TableOID: 7, TableAttributeNumber: 1, DataTypeOID: 20, DataTypeSize: 8, TypeModifier: -1}
	i4 := pgproto3.FieldDescription{Name: []byte("bb"), DataTypeOID: 23, DataTypeSize: 4, TypeModifier: -1, Format: 1}
	renamed := i8
	renamed.Name, renamed.TableOID, renamed.Format = []byte("other"), 0, 1
	for _, tc := range []struct {
		a, b []byte
		want bool
	}{
		{enc(i8, i4), enc(renamed, i4), true},
		{enc(i8, i4), enc(i4, i8), false},
		{enc(i8), enc(i8, i4), false},
		{enc(), enc(), true},
		{enc(i8, i4), enc(i8, i4)[:10], false},
		{nil, enc(), false},
	} {
		if got := sameTypes(tc.a, tc.b); got != tc.want {
			t.Errorf("sameTypes(%x, %x) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
