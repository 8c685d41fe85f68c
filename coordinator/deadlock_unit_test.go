package coordinator

import (
	"testing"
	"time"
)

// TestDistributedVictim: the wait-for graph's distributed cycles and the
// victim picked in them.
func TestDistributedVictim(t *testing.T) {
	a, b, c := &session{pid: 1}, &session{pid: 2}, &session{pid: 3}
	t0 := time.Now()
	pubs := map[*session]*txnWorkers{a: {since: t0}, b: {since: t0.Add(time.Second)}, c: {since: t0.Add(2 * time.Second)}}
	tx := func(ss *session) dlNode { return dlNode{ss: ss} }
	opaque := func(addr string, pid uint32) dlNode { return dlNode{addr: addr, pid: pid} }
	edge := func(to dlNode, addr string) dlEdge { return dlEdge{to: to, addr: addr} }
	cases := []struct {
		name  string
		graph map[dlNode][]dlEdge
		want  *session
	}{
		{"a cycle through two workers: the younger", map[dlNode][]dlEdge{
			tx(a): {edge(tx(b), "w2")},
			tx(b): {edge(tx(a), "w1")},
		}, b},
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
		}, b},
		{"three transactions over three workers: the youngest", map[dlNode][]dlEdge{
			tx(a): {edge(tx(b), "w1")},
			tx(b): {edge(tx(c), "w2")},
			tx(c): {edge(tx(a), "w3")},
		}, c},
		{"a waiter outside the cycle is not the victim", map[dlNode][]dlEdge{
			tx(a): {edge(tx(b), "w1")},
			tx(b): {edge(tx(a), "w2")},
			tx(c): {edge(tx(a), "w1")},
		}, b},
	}
	for _, tc := range cases {
		if got := distributedVictim(tc.graph, pubs); got != tc.want {
			name := func(ss *session) any {
				if ss == nil {
					return nil
				}
				return ss.pid
			}
			t.Errorf("%s: victim %v, want %v", tc.name, name(got), name(tc.want))
		}
	}
}
