package coordinator

import (
	"testing"
	"time"
)

// TestDistributedVictim: the wait-for graph's distributed cycles and the
// victim picked in them.
func TestDistributedVictim(t *testing.T) {
	t0 := time.Now()
	a, b, c := &txnWorkers{since: t0}, &txnWorkers{since: t0.Add(time.Second)}, &txnWorkers{since: t0.Add(2 * time.Second)}
	pubs := map[*txnWorkers]*session{a: {pid: 1}, b: {pid: 2}, c: {pid: 3}}
	tx := func(w *txnWorkers) dlNode { return dlNode{tx: w} }
	opaque := func(addr string, pid uint32) dlNode { return dlNode{addr: addr, pid: pid} }
	edge := func(to dlNode, addr string) dlEdge { return dlEdge{to: to, addr: addr} }
	cases := []struct {
		name  string
		graph map[dlNode][]dlEdge
		want  *txnWorkers
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
			name := func(w *txnWorkers) any {
				if w == nil {
					return nil
				}
				return pubs[w].pid
			}
			t.Errorf("%s: victim %v, want %v", tc.name, name(got), name(tc.want))
		}
	}
}
