package coordinator

import (
	"testing"
	"time"

	"github.com/pgfleet/pgfleet/metadata"
	"github.com/pgfleet/pgfleet/planner"
)

// TestHolds: a hold keeps the statements on its shard group from sessions
// whose transaction has not reached the group, by shard id or by table for
// statements over several shards, until it is lifted or its lease lapses.
func TestHolds(t *testing.T) {
	s := &Server{}
	held := func(id int64, tables []string, touched []int64, touchedAll []string) bool {
		_, _, ok := s.holding(id, tables, touched, touchedAll)
		return ok
	}
	if x, ok := parseHoldKey(holdKey([]int64{7}, []string{`public."a, b"`, "public.c"})); !ok || len(x.tables) != 2 || x.tables[0] != `public."a, b"` {
		t.Fatalf("a table name with a comma and a space read back as %+v, %v", x, ok)
	}
	key := holdKey([]int64{7, 3}, []string{"public.a", "public.b"})
	if x, ok := parseHoldKey(key); !ok || len(x.ids) != 2 || x.ids[0] != 3 || len(x.tables) != 2 || x.tables[1] != "public.b" {
		t.Fatalf("hold key read back as %+v, %v", x, ok)
	}
	for _, k := range []string{"public.a", holdPrefix, holdPrefix + "1,b public.a", holdPrefix + "1"} {
		if _, ok := parseHoldKey(k); ok {
			t.Errorf("%q read as a hold key", k)
		}
	}
	s.fence(key, 1, time.Hour)
	if s.fencedIn("SELECT * FROM a") != nil {
		t.Error("a hold refused a statement as a fence would")
	}
	a := []string{"public.a"}
	for _, tc := range []struct {
		id         int64
		tables     []string
		touched    []int64
		touchedAll []string
		want       bool
	}{
		{3, nil, nil, nil, true},
		{7, nil, nil, nil, true},
		{4, nil, nil, nil, false},
		{3, nil, []int64{9, 7}, nil, false}, // the transaction is on the group already
		{3, nil, []int64{9}, nil, true},
		{3, nil, nil, a, false},
		{0, a, nil, nil, true},
		{0, []string{"public.c"}, nil, nil, false},
		{0, a, nil, a, false},
		{0, a, []int64{3}, nil, false},
	} {
		if got := held(tc.id, tc.tables, tc.touched, tc.touchedAll); got != tc.want {
			t.Errorf("%+v: held %v, want %v", tc, got, tc.want)
		}
	}
	s.fence(key, 2, time.Hour) // a second mover's hold of the group
	done, _, _ := s.holding(7, nil, nil, nil)
	s.unfence(key, 1)
	if !held(3, nil, nil, nil) {
		t.Error("lifting one mover's hold lifted the other's")
	}
	s.unfence(key, 2)
	select {
	case <-done:
	default:
		t.Error("lifting the holds did not end a wait")
	}
	if held(3, nil, nil, nil) || s.holds.n.Load() != 0 {
		t.Error("a lifted hold still holds")
	}
	s.fence(holdKey([]int64{3}, a), 3, time.Millisecond)
	time.Sleep(5 * time.Millisecond)
	if held(3, nil, nil, nil) || s.holds.n.Load() != 0 {
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

// TestSetValue: the value of a SET statement as the session keeps it.
func TestSetValue(t *testing.T) {
	for sql, want := range map[string]string{
		"SET statement_timeout = 500":          "500",
		"set statement_timeout to '1s'":        "1s",
		"SET SESSION statement_timeout='2min'": "2min",
		"SET statement_timeout TO DEFAULT;":    "DEFAULT",
		"SET statement_timeout":                "",
	} {
		if got, _ := setValue(sql, "statement_timeout"); got != want {
			t.Errorf("%s: %q, want %q", sql, got, want)
		}
	}
}
