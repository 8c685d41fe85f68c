package shards

import (
	"cmp"
	"slices"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
)

// PlannedMove is one step of a rebalance: the shard group of Shard (a
// shard of Table, the first table of its colocation group by name) from
// node From to node To.
type PlannedMove struct {
	Table    string
	Shard    int64
	From, To int32
}

// RebalanceOptions narrow a plan (get_rebalance_table_shards_plan's and
// rebalance_table_shards' arguments).
type RebalanceOptions struct {
	Table     string  // only this table's colocation group ("": every group)
	DrainOnly bool    // only moves off nodes that should not have shards
	MaxMoves  int     // at most this many moves (0: no bound)
	Excluded  []int64 // shards whose groups stay where they are
}

// RebalancePlan plans the moves that spread each colocation group's shard
// groups evenly, by count, over the active nodes that should have shards:
// first every group off the nodes that should not (citus_drain_node), each
// to the eligible node with the fewest of its colocation group's, then
// from the node with the most to the node with the fewest until they differ
// by at most one, and while they differ by one, until the two nodes'
// shard groups over all colocation groups differ by at most one too (so
// that colocation groups of one shard group each spread). Ties go to the
// node with the fewest (or most) shard groups over all colocation groups,
// then to the lower (or higher) node id. The
// plan is a pure function of the catalog: the same catalog gives the same
// plan.
func RebalancePlan(snap *metadata.Snapshot, opt RebalanceOptions) ([]PlannedMove, error) {
	var eligible []int32
	drained := map[int32]bool{}
	for _, n := range snap.Nodes {
		switch {
		case n.Active && n.ShouldHaveShards:
			eligible = append(eligible, n.ID)
		case n.Active:
			drained[n.ID] = true
		}
	}
	// The colocation groups and their shard groups, on the first table
	// of each by name.
	type group struct {
		table  string
		shards []metadata.Shard // the first table's, by hash range
		fixed  map[int]bool     // shard groups with an excluded shard
	}
	byColocation := map[int32]*group{}
	var order []int32
	names := make([]string, 0, len(snap.Tables))
	for name := range snap.Tables {
		names = append(names, name)
	}
	slices.Sort(names)
	var only int32 = -1
	if opt.Table != "" {
		t := snap.Tables[opt.Table]
		if t == nil || t.Kind != metadata.Distributed {
			return nil, pgerr.New(pgerr.UndefinedTable, "table %s is not a distributed table", opt.Table)
		}
		only = t.ColocationID
	}
	for _, name := range names {
		t := snap.Tables[name]
		if t.Kind != metadata.Distributed || only >= 0 && t.ColocationID != only {
			continue
		}
		g := byColocation[t.ColocationID]
		if g == nil {
			g = &group{table: name, shards: snap.Shards[name], fixed: map[int]bool{}}
			byColocation[t.ColocationID] = g
			order = append(order, t.ColocationID)
		}
		for i, sh := range snap.Shards[name] {
			if slices.Contains(opt.Excluded, sh.ID) {
				g.fixed[i] = true
			}
		}
	}
	slices.Sort(order)
	// Shard groups per node over every colocation group, for ties.
	total := map[int32]int{}
	for _, g := range byColocation {
		for _, sh := range g.shards {
			if len(sh.Nodes) == 1 {
				total[sh.Nodes[0]]++
			}
		}
	}
	var plan []PlannedMove
	full := func() bool { return opt.MaxMoves > 0 && len(plan) >= opt.MaxMoves }
	for _, id := range order {
		g := byColocation[id]
		where := make([]int32, len(g.shards)) // the node of each shard group
		count := map[int32]int{}
		for _, n := range eligible {
			count[n] = 0
		}
		for i, sh := range g.shards {
			if len(sh.Nodes) != 1 {
				where[i] = -1 // replicated placements are not rebalanced
				continue
			}
			where[i] = sh.Nodes[0]
			if _, ok := count[where[i]]; ok {
				count[where[i]]++
			}
		}
		least := func() int32 {
			return slices.MinFunc(eligible, func(a, b int32) int {
				return cmp.Or(cmp.Compare(count[a], count[b]), cmp.Compare(total[a], total[b]), cmp.Compare(a, b))
			})
		}
		most := func() int32 {
			return slices.MaxFunc(eligible, func(a, b int32) int {
				return cmp.Or(cmp.Compare(count[a], count[b]), cmp.Compare(total[a], total[b]), cmp.Compare(a, b))
			})
		}
		move := func(i int, to int32) {
			from := where[i]
			plan = append(plan, PlannedMove{Table: g.table, Shard: g.shards[i].ID, From: from, To: to})
			if _, ok := count[from]; ok {
				count[from]--
			}
			count[to]++
			total[from]--
			total[to]++
			where[i] = to
		}
		for i := range g.shards {
			if drained[where[i]] && !g.fixed[i] && !full() {
				if len(eligible) == 0 {
					return nil, pgerr.New(pgerr.ObjectNotInPrerequisite, "no active node should have shards, so none can take the shards of %s", g.table).
						WithHint("Set shouldhaveshards on a node (citus_set_node_property) or add one.")
				}
				move(i, least())
			}
		}
		if opt.DrainOnly || len(eligible) < 2 {
			continue
		}
		for !full() {
			hi, lo := most(), least()
			// Uneven in this colocation group, or even here but not
			// over all of them (one shard group each: a move leaves this
			// group as even and the nodes' totals more so).
			if d := count[hi] - count[lo]; d <= 0 || d == 1 && total[hi]-total[lo] <= 1 {
				break
			}
			i := slices.IndexFunc(where, func(n int32) bool { return n == hi })
			for i >= 0 && g.fixed[i] {
				next := slices.IndexFunc(where[i+1:], func(n int32) bool { return n == hi })
				if next < 0 {
					i = -1
					break
				}
				i += 1 + next
			}
			if i < 0 {
				break // what is left on the fullest node stays
			}
			move(i, lo)
		}
	}
	return plan, nil
}
