package shards

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/pgfleet/pgfleet/metadata"
)

// catalogOf builds a snapshot: nodes (id: should have shards), and per
// table its colocation id and the node of each shard.
func catalogOf(nodes map[int32]bool, tables map[string][2]any) *metadata.Snapshot {
	snap := &metadata.Snapshot{Tables: map[string]*metadata.Table{}, Shards: map[string][]metadata.Shard{}}
	for id := int32(1); id <= 9; id++ {
		if should, ok := nodes[id]; ok {
			snap.Nodes = append(snap.Nodes, metadata.Node{ID: id, Active: true, ShouldHaveShards: should})
		}
	}
	next := int64(100)
	for _, name := range slices.Sorted(maps.Keys(tables)) {
		spec := tables[name]
		placed := spec[1].([]int32)
		snap.Tables[name] = &metadata.Table{Name: name, Kind: metadata.Distributed, ColocationID: spec[0].(int32), ShardCount: len(placed)}
		for i, r := range metadata.HashRanges(len(placed)) {
			snap.Shards[name] = append(snap.Shards[name], metadata.Shard{ID: next + int64(i), Table: name, MinHash: r[0], MaxHash: r[1], Nodes: []int32{placed[i]}})
		}
		next += 100
	}
	return snap
}

// apply runs a plan on the snapshot's placements (every table of a moved
// group follows) and returns the shard groups per node per colocation id.
func apply(snap *metadata.Snapshot, plan []PlannedMove) map[int32]map[int32]int {
	for _, m := range plan {
		shards, tables, err := ColocatedShards(snap, m.Shard)
		if err != nil {
			panic(err)
		}
		for i, sh := range shards {
			list := snap.Shards[tables[i].Name]
			for j := range list {
				if list[j].ID == sh.ID {
					if list[j].Nodes[0] != m.From {
						panic(fmt.Sprintf("move %v: shard %d is on %d", m, sh.ID, list[j].Nodes[0]))
					}
					list[j].Nodes = []int32{m.To}
				}
			}
		}
	}
	out := map[int32]map[int32]int{}
	for name, t := range snap.Tables {
		if out[t.ColocationID] == nil {
			out[t.ColocationID] = map[int32]int{}
		}
		for _, sh := range snap.Shards[name] {
			out[t.ColocationID][sh.Nodes[0]]++
		}
	}
	return out
}

func TestRebalancePlan(t *testing.T) {
	for _, c := range []struct {
		name   string
		nodes  map[int32]bool
		tables map[string][2]any
		opt    RebalanceOptions
		moves  int
		want   map[int32]map[int32]int // colocation id -> node -> shard groups (per table of the group)
	}{
		{"a new node takes its share", map[int32]bool{1: true, 2: true, 3: true},
			map[string][2]any{"public.a": {int32(1), []int32{1, 2, 1, 2, 1, 2}}, "public.b": {int32(1), []int32{1, 2, 1, 2, 1, 2}}},
			RebalanceOptions{}, 2, map[int32]map[int32]int{1: {1: 2, 2: 2, 3: 2}}},
		{"balanced already", map[int32]bool{1: true, 2: true},
			map[string][2]any{"public.a": {int32(1), []int32{1, 2, 1}}},
			RebalanceOptions{}, 0, map[int32]map[int32]int{1: {1: 2, 2: 1}}},
		{"drain node 2", map[int32]bool{1: true, 2: false, 3: true},
			map[string][2]any{"public.a": {int32(1), []int32{1, 2, 3, 2}}},
			RebalanceOptions{DrainOnly: true}, 2, map[int32]map[int32]int{1: {1: 2, 3: 2}}},
		{"single-shard groups spread", map[int32]bool{1: true, 2: true},
			map[string][2]any{"public.a": {int32(1), []int32{1}}, "public.b": {int32(2), []int32{1}}, "public.c": {int32(3), []int32{1}}, "public.d": {int32(4), []int32{1}}},
			RebalanceOptions{}, 2, map[int32]map[int32]int{1: {2: 1}, 2: {2: 1}, 3: {1: 1}, 4: {1: 1}}},
		{"one table's group only", map[int32]bool{1: true, 2: true},
			map[string][2]any{"public.a": {int32(1), []int32{1, 1, 1, 1}}, "public.z": {int32(2), []int32{1, 1, 1, 1}}},
			RebalanceOptions{Table: "public.z"}, 2, map[int32]map[int32]int{1: {1: 4}, 2: {1: 2, 2: 2}}},
		{"at most one move", map[int32]bool{1: true, 2: true},
			map[string][2]any{"public.a": {int32(1), []int32{1, 1, 1, 1}}},
			RebalanceOptions{MaxMoves: 1}, 1, map[int32]map[int32]int{1: {1: 3, 2: 1}}},
		{"excluded shards stay", map[int32]bool{1: true, 2: true},
			map[string][2]any{"public.a": {int32(1), []int32{1, 1, 1, 1}}},
			RebalanceOptions{Excluded: []int64{100, 101, 102}}, 1, map[int32]map[int32]int{1: {1: 3, 2: 1}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			snap := catalogOf(c.nodes, c.tables)
			plan, err := RebalancePlan(snap, c.opt)
			if err != nil {
				t.Fatal(err)
			}
			again, _ := RebalancePlan(catalogOf(c.nodes, c.tables), c.opt)
			if fmt.Sprint(plan) != fmt.Sprint(again) {
				t.Errorf("two plans of one catalog differ: %v and %v", plan, again)
			}
			if len(plan) != c.moves {
				t.Errorf("plan %v has %d moves, want %d", plan, len(plan), c.moves)
			}
			got := apply(snap, plan)
			for coloc, want := range c.want {
				for node, n := range want {
					per := 0
					for _, tb := range c.tables {
						if tb[0].(int32) == coloc {
							per++
						}
					}
					if got[coloc][node] != n*per {
						t.Errorf("colocation %d: node %d has %d shards after the plan, want %d (plan %v)", coloc, node, got[coloc][node], n*per, plan)
					}
				}
			}
			if after, _ := RebalancePlan(snap, c.opt); c.opt.MaxMoves == 0 && len(c.opt.Excluded) == 0 && len(after) != 0 {
				t.Errorf("a second plan after the first still moves: %v", after)
			}
		})
	}
	if _, err := RebalancePlan(catalogOf(map[int32]bool{1: false}, map[string][2]any{"public.a": {int32(1), []int32{1}}}), RebalanceOptions{}); err == nil {
		t.Error("draining the only node planned no error")
	}
}
