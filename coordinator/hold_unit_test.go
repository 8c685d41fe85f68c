package coordinator

import (
	"testing"
	"time"

	"github.com/pgfleet/pgfleet/metadata"
	"github.com/pgfleet/pgfleet/planner"
)

// TestHolds: a hold keeps the statements on its shard group (writes; reads
// too when it holds reads) from sessions whose transaction has not reached
// the group, by shard id or by table for statements over several shards,
// until it is lifted or its lease lapses.
func TestHolds(t *testing.T) {
	s := &Server{}
	held := func(readOnly bool, id int64, tables []string, touched []int64, touchedAll []string) bool {
		_, _, ok := s.holding(readOnly, id, tables, touched, touchedAll)
		return ok
	}
	if x, ok := parseHoldKey(holdKey([]int64{7, 3}, []string{"public.a", "public.b"}, true)); !ok || !x.reads ||
		len(x.ids) != 2 || x.ids[0] != 3 || len(x.tables) != 2 || x.tables[1] != "public.b" {
		t.Fatalf("hold key read back as %+v, %v", x, ok)
	}
	for _, key := range []string{"public.a", holdPrefix, holdPrefix + "x 1 public.a", holdPrefix + "w 1,b public.a", holdPrefix + "w 1"} {
		if _, ok := parseHoldKey(key); ok {
			t.Errorf("%q read as a hold key", key)
		}
	}
	s.fence(holdKey([]int64{3, 7}, []string{"public.a", "public.b"}, false), 1, time.Hour)
	if s.fencedIn("SELECT * FROM a") != nil {
		t.Error("a hold refused a statement as a fence would")
	}
	a := []string{"public.a"}
	for _, tc := range []struct {
		readOnly   bool
		id         int64
		tables     []string
		touched    []int64
		touchedAll []string
		want       bool
	}{
		{false, 3, nil, nil, nil, true},
		{false, 7, nil, nil, nil, true},
		{true, 3, nil, nil, nil, false}, // a hold of writes lets reads go
		{false, 4, nil, nil, nil, false},
		{false, 3, nil, []int64{9, 7}, nil, false}, // the transaction is on the group already
		{false, 3, nil, []int64{9}, nil, true},
		{false, 3, nil, nil, a, false},
		{false, 0, a, nil, nil, true},
		{false, 0, []string{"public.c"}, nil, nil, false},
		{false, 0, a, nil, a, false},
		{false, 0, a, []int64{3}, nil, false},
	} {
		if got := held(tc.readOnly, tc.id, tc.tables, tc.touched, tc.touchedAll); got != tc.want {
			t.Errorf("%+v: held %v, want %v", tc, got, tc.want)
		}
	}
	s.fence(holdKey([]int64{3, 7}, []string{"public.a", "public.b"}, true), 2, time.Hour)
	if !held(true, 3, nil, nil, nil) {
		t.Error("a hold of reads let a read go")
	}
	done, _, _ := s.holding(false, 7, nil, nil, nil)
	s.unfence(holdKey([]int64{3, 7}, []string{"public.a", "public.b"}, false), 1)
	s.unfence(holdKey([]int64{3, 7}, []string{"public.a", "public.b"}, true), 2)
	select {
	case <-done:
	default:
		t.Error("lifting the holds did not end a wait")
	}
	if held(false, 3, nil, nil, nil) || s.holds.n.Load() != 0 {
		t.Error("a lifted hold still holds")
	}
	s.fence(holdKey([]int64{3}, a, true), 3, time.Millisecond)
	time.Sleep(5 * time.Millisecond)
	if held(false, 3, nil, nil, nil) || s.holds.n.Load() != 0 {
		t.Error("a lapsed hold still holds")
	}
}

// TestRouteAfterSplit: a routed plan made before a split (of another shard
// count) is not routed by the split's catalog, whose shard at the same
// index is another (the statement would name one shard and run where
// another is).
func TestRouteAfterSplit(t *testing.T) {
	table := &metadata.Table{Name: "public.t", Kind: metadata.Distributed, DistColumn: "id", DistType: "int8", ShardCount: 2}
	snap := func(version int64, ranges [][2]int32) *metadata.Snapshot {
		sn := &metadata.Snapshot{Version: version, Tables: map[string]*metadata.Table{"public.t": table}, Shards: map[string][]metadata.Shard{}}
		for i, r := range ranges {
			sn.Shards["public.t"] = append(sn.Shards["public.t"], metadata.Shard{ID: version*100 + int64(i), Table: "public.t", MinHash: r[0], MaxHash: r[1], Nodes: []int32{int32(i%2 + 1)}})
		}
		return sn
	}
	before := snap(1, [][2]int32{{-2147483648, -1}, {0, 2147483647}})
	p, err := planner.Build("SELECT * FROM t WHERE id = $1", before)
	if err != nil || p.Kind() != planner.KindRouter {
		t.Fatalf("plan: %v, %v", p, err)
	}
	s := &Server{}
	s.catalog.Store(before)
	if tgt, err := s.route(p, 5, 0, 1); err != nil || tgt.shard != 101 || tgt.index != 1 {
		t.Fatalf("before the split: %+v, %v", tgt, err)
	}
	s.catalog.Store(snap(2, [][2]int32{{-2147483648, -1073741825}, {-1073741824, -1}, {0, 2147483647}}))
	if tgt, err := s.route(p, -5, 0, 1); err != errCatalogMoved {
		t.Errorf("a plan of two shards routed by a catalog of three: %+v, %v; want errCatalogMoved", tgt, err)
	}
}
