package coordinator

import (
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestDistributedVictim: the wait-for graph's distributed cycles and the
// victim picked in them.
func TestDistributedVictim(t *testing.T) {
	t0 := time.Now()
	a := &dlTxn{since: t0, coord: "c1", id: 1}
	b := &dlTxn{since: t0.Add(time.Second), coord: "c2", id: 1} // another coordinator's
	c := &dlTxn{since: t0.Add(2 * time.Second), coord: "c1", id: 2}
	twin := &dlTxn{since: t0, coord: "c3", id: 1}
	tx := func(t *dlTxn) dlNode { return dlNode{tx: t} }
	opaque := func(addr string, pid uint32) dlNode { return dlNode{addr: addr, pid: pid} }
	edge := func(to dlNode, addr string) dlEdge { return dlEdge{to: to, addr: addr} }
	pidEdge := func(to dlNode, addr string, from, at uint32) dlEdge {
		return dlEdge{to: to, addr: addr, from: from, at: at}
	}
	cases := []struct {
		name  string
		graph map[dlNode][]dlEdge
		want  []*dlTxn
	}{
		{"a cycle through two workers: the younger", map[dlNode][]dlEdge{
			tx(a): {edge(tx(b), "w2")},
			tx(b): {edge(tx(a), "w1")},
		}, []*dlTxn{b}},
		{"a cycle on one worker is PostgreSQL's to break", map[dlNode][]dlEdge{
			tx(a): {edge(tx(b), "w1")},
			tx(b): {edge(tx(a), "w1")},
		}, nil},
		{"a wait that closes no cycle", map[dlNode][]dlEdge{
			tx(a): {edge(tx(b), "w1")},
			tx(b): {edge(opaque("w2", 77), "w2")},
		}, nil},
		{"through another client's backend", map[dlNode][]dlEdge{
			tx(a):              {edge(opaque("w1", 9), "w1")},
			opaque("w1", 9):    {edge(tx(b), "w1")},
			tx(b):              {edge(tx(a), "w2")},
			opaque("w2", 1000): {edge(tx(c), "w2")},
		}, []*dlTxn{b}},
		{"three transactions over three workers: the youngest", map[dlNode][]dlEdge{
			tx(a): {edge(tx(b), "w1")},
			tx(b): {edge(tx(c), "w2")},
			tx(c): {edge(tx(a), "w3")},
		}, []*dlTxn{c}},
		{"at the same start, the greater coordinator name", map[dlNode][]dlEdge{
			tx(a):    {edge(tx(twin), "w2")},
			tx(twin): {edge(tx(a), "w1")},
		}, []*dlTxn{twin}},
		{"two deadlocks at once: a victim in each (adversary 144)", map[dlNode][]dlEdge{
			tx(a):    {edge(tx(b), "w2")},
			tx(b):    {edge(tx(a), "w1")},
			tx(c):    {edge(tx(twin), "w1")},
			tx(twin): {edge(tx(c), "w2")},
		}, []*dlTxn{b, c}},
		{"a session's statement and its advisory locks' connection on one worker (PostgreSQL sees two sessions)", map[dlNode][]dlEdge{
			tx(a):           {pidEdge(opaque("w1", 9), "w1", 10, 9)},
			opaque("w1", 9): {pidEdge(tx(a), "w1", 9, 11)},
		}, []*dlTxn{a}},
		{"one backend of a transaction in a cycle on one worker is PostgreSQL's", map[dlNode][]dlEdge{
			tx(a):           {pidEdge(opaque("w1", 9), "w1", 10, 9)},
			opaque("w1", 9): {pidEdge(tx(a), "w1", 9, 10)},
		}, nil},
		{"a waiter outside the cycle is not the victim", map[dlNode][]dlEdge{
			tx(a): {edge(tx(b), "w1")},
			tx(b): {edge(tx(a), "w2")},
			tx(c): {edge(tx(a), "w1")},
		}, []*dlTxn{b}},
	}
	for _, tc := range cases {
		got := distributedVictims(tc.graph)
		names := func(ts []*dlTxn) []string {
			var out []string
			for _, t := range ts {
				out = append(out, t.coord+"/"+strconv.FormatInt(t.id, 10))
			}
			slices.Sort(out)
			return out
		}
		if !slices.Equal(names(got), names(tc.want)) {
			t.Errorf("%s: victims %v, want %v", tc.name, names(got), names(tc.want))
		}
	}
}
