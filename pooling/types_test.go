package pooling

import (
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// TestTypeOIDs: the OIDs of user types in RowDescription and
// ParameterDescription (worker to default node) and in Parse (default
// node to worker) are translated; built-in ones and unknown ones are not.
func TestTypeOIDs(t *testing.T) {
	tr := &TypeOIDs{}
	tr.Store(&OIDTables{In: map[uint32]uint32{20000: 17000, 20001: 20001}, Out: map[uint32]uint32{17000: 20000}})
	var misses []uint32
	tr.Miss = func(oid uint32, _ bool) { misses = append(misses, oid) }

	rd := pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{
		{Name: []byte("a"), DataTypeOID: 23}, {Name: []byte("status"), TableOID: 20000, DataTypeOID: 20000},
		{Name: []byte(""), DataTypeOID: 20001}, {Name: []byte("x"), DataTypeOID: 30000}}}
	b, _ := rd.Encode(nil)
	tr.translateIn('T', b[5:])
	var got pgproto3.RowDescription
	if err := got.Decode(b[5:]); err != nil {
		t.Fatal(err)
	}
	var types []uint32
	for _, f := range got.Fields {
		types = append(types, f.DataTypeOID)
	}
	if want := []uint32{23, 17000, 20001, 30000}; !equal(types, want) || got.Fields[1].TableOID != 20000 || string(got.Fields[1].Name) != "status" {
		t.Errorf("RowDescription: types %v (table %d), want %v", types, got.Fields[1].TableOID, want)
	}
	if !equal(misses, []uint32{30000}) {
		t.Errorf("misses %v, want the unknown 30000", misses)
	}

	pd := pgproto3.ParameterDescription{ParameterOIDs: []uint32{25, 20000}}
	b, _ = pd.Encode(nil)
	tr.translateIn('t', b[5:])
	var gpd pgproto3.ParameterDescription
	_ = gpd.Decode(b[5:])
	if !equal(gpd.ParameterOIDs, []uint32{25, 17000}) {
		t.Errorf("ParameterDescription: %v", gpd.ParameterOIDs)
	}

	buf, _ := (&pgproto3.Parse{Name: "s", Query: "INSERT INTO t VALUES ($1, $2)", ParameterOIDs: []uint32{23, 17000}}).Encode(nil)
	buf, _ = (&pgproto3.Sync{}).Encode(buf)
	tr.translateOut(buf)
	var gp pgproto3.Parse
	_ = gp.Decode(buf[5 : len(buf)-5])
	if !equal(gp.ParameterOIDs, []uint32{23, 20000}) || gp.Query != "INSERT INTO t VALUES ($1, $2)" {
		t.Errorf("Parse: %+v", gp)
	}
	// A large Parse (AppendLarge) is the client's buffer: translated in a copy.
	large, _ := (&pgproto3.Parse{Query: "SELECT $1", ParameterOIDs: []uint32{17000}}).Encode(nil)
	orig := string(large)
	out := tr.parseBody(large[5:], true)
	_ = gp.Decode(out)
	if string(large) != orig || !equal(gp.ParameterOIDs, []uint32{20000}) {
		t.Errorf("parseBody in copy mode: input changed %v, output %v", string(large) != orig, gp.ParameterOIDs)
	}
}

func equal(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestRelationOIDs: a RowDescription's column of a shard gets its table's
// OID and column number; a relation the tables call plain, and one no
// reading names (after the miss), keep theirs; a shard's column the tables
// do not map is read for, then described as 0.
func TestRelationOIDs(t *testing.T) {
	tr := &TypeOIDs{}
	tr.Store(&OIDTables{Rels: map[uint32]RelOID{30000: {OID: 17000, Cols: []int16{1, 3, 0}}}, Plain: map[uint32]bool{30001: true}})
	var misses []uint32
	tr.RelMiss = func(oid uint32, col int16) { misses = append(misses, oid*100+uint32(col)) }
	rd := pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{
		{Name: []byte("id"), TableOID: 30000, TableAttributeNumber: 1, DataTypeOID: 20},
		{Name: []byte("name"), TableOID: 30000, TableAttributeNumber: 2, DataTypeOID: 25},
		{Name: []byte("new"), TableOID: 30000, TableAttributeNumber: 3, DataTypeOID: 25},
		{Name: []byte("k"), TableOID: 30001, TableAttributeNumber: 1, DataTypeOID: 23},
		{Name: []byte("v"), TableOID: 30002, TableAttributeNumber: 4, DataTypeOID: 23},
		{Name: []byte("?column?"), DataTypeOID: 23},
		{Name: []byte("sys"), TableOID: 1259, TableAttributeNumber: 2, DataTypeOID: 19},
		{Name: []byte("added"), TableOID: 30000, TableAttributeNumber: 4, DataTypeOID: 23},
		{Name: []byte("ctid"), TableOID: 30000, TableAttributeNumber: 0xFFFF, DataTypeOID: 27}}}
	b, _ := rd.Encode(nil)
	tr.translateIn('T', b[5:])
	var got pgproto3.RowDescription
	if err := got.Decode(b[5:]); err != nil {
		t.Fatal(err)
	}
	var cols []uint32
	for _, f := range got.Fields {
		cols = append(cols, f.TableOID, uint32(f.TableAttributeNumber))
	}
	want := []uint32{17000, 1, 17000, 3, 17000, 0, 30001, 1, 30002, 4, 0, 0, 1259, 2, 17000, 0, 17000, 0xFFFF}
	if !equal(cols, want) || string(got.Fields[1].Name) != "name" || got.Fields[1].DataTypeOID != 25 {
		t.Errorf("columns %v, want %v (%+v)", cols, want, got.Fields[1])
	}
	// The unknown relation, and the columns not mapped (read for; still
	// unknown: 0).
	if !equal(misses, []uint32{3000003, 3000204, 3000004}) {
		t.Errorf("misses %v, want 30000's column 3, 30002, 30000's column 4", misses)
	}
}
