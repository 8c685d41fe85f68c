package coordinator

import (
	"encoding/binary"
	"testing"

	"github.com/pgfleet/pgfleet/metadata"
	"github.com/pgfleet/pgfleet/planner"
)

func TestFastHash(t *testing.T) {
	be := func(n int, v int64) []byte {
		b := make([]byte, 8)
		binary.BigEndian.PutUint64(b, uint64(v))
		return b[8-n:]
	}
	p8 := &planner.Plan{Root: &planner.Route{Table: "public.t", DistType: "int8"}}
	p4 := &planner.Plan{Root: &planner.Route{Table: "public.t", DistType: "int4"}}
	pt := &planner.Plan{Root: &planner.Route{Table: "public.t", DistType: "text"}}
	pv := &planner.Plan{Root: &planner.Route{Table: "public.t", DistType: "varchar"}}
	bare := &planner.Value{Param: 1}
	ins := &planner.Value{Param: 1, Assign: true}
	cases := []struct {
		name string
		p    *planner.Plan
		v    *planner.Value
		in   distInput
		want int32
		ask  bool
		err  bool
	}{
		{"int8 text", p8, bare, distInput{src: "int8", val: []byte(" 42 ")}, metadata.HashInt8(42), false, false},
		{"unspecified text", p8, bare, distInput{src: "unspecified", val: []byte("42")}, metadata.HashInt8(42), false, false},
		{"binary int2 for int8", p8, bare, distInput{src: "int2", val: be(2, 301), binary: true}, metadata.HashInt8(301), false, false},
		{"binary int4 for int8", p8, bare, distInput{src: "int4", val: be(4, -7), binary: true}, metadata.HashInt8(-7), false, false},
		{"binary int8 out of int4", p4, bare, distInput{src: "int8", val: be(8, 3000000000), binary: true}, anyShard, false, false},
		{"binary wrong length", p8, bare, distInput{src: "int8", val: be(4, 1), binary: true}, anyShard, false, false},
		{"numeric asks", p8, bare, distInput{src: "numeric", val: []byte("100.0")}, 0, true, false},
		// A value its type rejects is asked: PostgreSQL decides which error
		// comes first (a Parse error before this Bind's 22P02 or 22003).
		{"bad int8 text", p8, bare, distInput{src: "int8", val: []byte("abc")}, 0, true, false},
		{"cast out of range", p8, &planner.Value{Param: 1, Cast: "int2"}, distInput{src: "unspecified", val: []byte("70000")}, 0, true, false},
		{"bpchar against text", pt, bare, distInput{src: "bpchar", val: []byte("a  ")}, metadata.HashTextString("a"), false, false},
		{"varchar against text", pt, bare, distInput{src: "varchar", val: []byte("a  "), binary: true}, metadata.HashTextString("a  "), false, false},
		{"bpchar against varchar", pv, bare, distInput{src: "bpchar", val: []byte("a ")}, 0, false, true},
		{"bpchar into varchar", pv, ins, distInput{src: "bpchar", val: []byte("a ")}, metadata.HashTextString("a"), false, false},
		{"trailing space into varchar asks", pv, ins, distInput{src: "text", val: []byte("a ")}, 0, true, false},
		{"int4 for text asks", pt, bare, distInput{src: "int4", val: be(4, 1), binary: true}, 0, true, false},
		{"computed asks", pt, &planner.Value{Param: 1, Computed: true}, distInput{src: "unspecified", val: []byte("1")}, 0, true, false},
	}
	for _, c := range cases {
		h, ask, err := fastHash(c.p, c.v, c.in, false)
		if (err != nil) != c.err || ask != c.ask || !c.err && !c.ask && h != c.want {
			t.Errorf("%s: hash %d ask %v err %v, want %d ask %v err %v", c.name, h, ask, err, c.want, c.ask, c.err)
		}
	}
	if _, ask, _ := fastHash(pt, bare, distInput{src: "text", val: []byte("caf\xe9")}, true); !ask {
		t.Error("non-ASCII text in a foreign client_encoding: not asked")
	}
}

// The hot path (a Bind's int8 parameter, text or binary) allocates nothing.
func TestFastHashAllocs(t *testing.T) {
	p := &planner.Plan{Root: &planner.Route{Table: "public.t", DistType: "int8"}}
	v := &planner.Value{Param: 1}
	text := distInput{src: "unspecified", val: []byte("12345")}
	bin := distInput{src: "int8", val: []byte{0, 0, 0, 0, 0, 0, 0, 9}, binary: true}
	if n := testing.AllocsPerRun(100, func() {
		_, _, _ = fastHash(p, v, text, false)
		_, _, _ = fastHash(p, v, bin, false)
	}); n != 0 {
		t.Errorf("%v allocations per hash", n)
	}
	tail := []byte{0, 1, 0, 0, 0, 20}
	if paramType(tail, 0) != 20 || paramType(tail, 1) != 0 || paramType(nil, 0) != 0 {
		t.Error("paramType")
	}
}
