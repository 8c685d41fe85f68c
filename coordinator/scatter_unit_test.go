package coordinator

import (
	"bytes"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/planner"
)

func TestBindResults(t *testing.T) {
	// Two parameter formats (text, binary), two parameters ("7", NULL),
	// one result format (binary).
	b := []byte{0, 2, 0, 0, 0, 1, 0, 2, 0, 0, 0, 1, '7', 0xff, 0xff, 0xff, 0xff, 0, 1, 0, 1}
	n, res, ok := bindResults(b)
	if !ok || n != 2 || !bytes.Equal(res, []byte{0, 1, 0, 1}) {
		t.Errorf("bindResults = %d %v %v", n, res, ok)
	}
	for _, bad := range [][]byte{nil, {0, 1}, {0, 0, 0, 1, 0, 0, 0, 9, 'x'}, append(b, 0)} {
		if _, _, ok := bindResults(bad); ok {
			t.Errorf("bindResults(%v) accepted", bad)
		}
	}
}

func TestSpliceFrom(t *testing.T) {
	lits := []literal{{token: "'a$1'"}, {token: "10"}}
	got, used := spliceFrom("SELECT $1, $2, $3 FROM x WHERE y = '$3' LIMIT $4", lits, 3)
	if want := "SELECT $1, $2, 'a$1' FROM x WHERE y = '$3' LIMIT 10"; got != want || used != 2 {
		t.Errorf("spliceFrom = %q, %d; want %q, 2", got, used, want)
	}
}

func TestWithFormats(t *testing.T) {
	rd := pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte("a"), DataTypeOID: 23}, {Name: []byte("b"), DataTypeOID: 25}}}
	b, _ := rd.Encode(nil)
	var got pgproto3.RowDescription
	if err := got.Decode(withFormats(b[5:], []byte{0, 2, 0, 1, 0, 0})); err != nil {
		t.Fatal(err)
	}
	if got.Fields[0].Format != 1 || got.Fields[1].Format != 0 {
		t.Errorf("formats %d %d", got.Fields[0].Format, got.Fields[1].Format)
	}
	if err := got.Decode(withFormats(b[5:], []byte{0, 1, 0, 1})); err != nil || got.Fields[1].Format != 1 {
		t.Errorf("one format for all: %v %d", err, got.Fields[1].Format)
	}
}

func TestLimitValue(t *testing.T) {
	r := &scatterRun{lits: []literal{{value: "10"}, {value: "2.5"}, {value: "-1"}}}
	for _, c := range []struct {
		v    *planner.Value
		want int64
		code string
	}{
		{nil, -1, ""},
		{&planner.Value{Const: "7"}, 7, ""},
		{&planner.Value{Param: 1}, 10, ""},
		{&planner.Value{Param: 2}, 3, ""},
		{&planner.Value{Param: 3}, 0, "2201W"},
		{&planner.Value{Const: "x"}, 0, "22P02"},
	} {
		got, err := r.value(c.v, -1, "2201W", "LIMIT")
		code := ""
		if err != nil {
			code = err.(interface{ SQLState() string }).SQLState()
		}
		if got != c.want || code != c.code {
			t.Errorf("value(%+v) = %d %v, want %d %s", c.v, got, err, c.want, c.code)
		}
	}
}
