package coordinator

import (
	"fmt"
	"strings"

	"github.com/pgfleet/pgfleet/metadata"
	"github.com/pgfleet/pgfleet/planner"
)

// explainScatter answers EXPLAIN (text, without ANALYZE) of a multi-shard
// query: first the coordinator's part, one line each (the workers and
// their shards, how their rows become the result), then the first
// worker's own EXPLAIN of its statement, relayed as the plan of a routed
// statement is.
func (ss *session) explainScatter(p *planner.Plan, lits []literal) error {
	x := p.Scatter()
	node, err := ss.srv.firstShardNode(p)
	if err != nil {
		return ss.queryError(err)
	}
	first := -1
	shards := 0
	for i, w := range x.Workers {
		shards += len(w.Shards)
		if w.Node == node {
			first = i
		}
	}
	if first < 0 {
		return ss.queryError(errCatalogMoved)
	}
	lines := []string{fmt.Sprintf("pgfleet multi-shard query over %s: %s, %d shards", x.Table, counted(len(x.Workers), "worker"), shards)}
	m := x.Merge
	switch {
	case m.Gather:
		lines = append(lines, fmt.Sprintf("  Gathering: every row of %s, then the statement once on worker %s:", strings.Join(m.Tables, ", "), ss.srv.nodeAddr(node)),
			"    "+m.SQL)
	case m.Kind == planner.SQLMerge:
		lines = append(lines, fmt.Sprintf("  Merge of the workers' partial rows on worker %s:", ss.srv.nodeAddr(node)), "    "+m.SQL)
	default:
		what := "  Result: the workers' rows, concatenated"
		if m.Limit != nil || m.Offset != nil {
			what += " (LIMIT and OFFSET counted by the coordinator)"
		}
		lines = append(lines, what)
	}
	for _, w := range x.Workers {
		lines = append(lines, fmt.Sprintf("  Worker %s: shards %s", ss.srv.nodeAddr(w.Node), shardList(w.Shards)))
	}
	lines = append(lines, fmt.Sprintf("  Plan of worker %s:", ss.srv.nodeAddr(node)))
	return ss.explainOn(p, lines, x.Workers[first].SQL, lits, node)
}

// explainOn sends the coordinator's lines of an EXPLAIN, then the
// worker's own EXPLAIN of its statement sql, relayed as the plan of a
// routed statement is.
func (ss *session) explainOn(p *planner.Plan, lines []string, sql string, lits []literal, node int32) error {
	var inject []byte
	for _, l := range lines {
		inject = append(inject, explainRow(l)...)
	}
	if lits != nil {
		sql, _ = spliceLiterals(sql, lits) // some may be the merge's alone
	}
	ss.inject = inject
	body := append(append(ss.qbuf[:0], p.Explain.Prefix+sql...), 0)
	ss.qbuf = body
	return ss.relayCycle('Q', body, nil, node)
}

// explainMultiWrite answers EXPLAIN (text, without ANALYZE) of a
// multi-shard UPDATE, DELETE or INSERT ... SELECT: the workers and their
// shards, then the plan of the first shard's statement on its worker.
func (ss *session) explainMultiWrite(p *planner.Plan, lits []literal) error {
	what, _, _ := strings.Cut(p.ShardSQL()[0], " ")
	snap := ss.srv.catalog.Load()
	all := snap.Shards[p.DistTable()]
	if len(all) != len(p.ShardSQL()) || len(all) == 0 || len(all[0].Nodes) == 0 {
		return ss.queryError(errCatalogMoved)
	}
	byNode := map[int32][]int{}
	var nodes []int32
	for i, sh := range all {
		n := sh.Nodes[0]
		if _, ok := byNode[n]; !ok {
			nodes = append(nodes, n)
		}
		byNode[n] = append(byNode[n], i)
	}
	lines := []string{fmt.Sprintf("pgfleet multi-shard %s of %s: %s, %d shards, one statement per shard, committed together (two-phase commit)",
		what, p.DistTable(), counted(len(nodes), "worker"), len(all))}
	for _, n := range nodes {
		lines = append(lines, fmt.Sprintf("  Worker %s: shards %s", ss.srv.nodeAddr(n), shardList(byNode[n])))
	}
	node := all[0].Nodes[0]
	lines = append(lines, fmt.Sprintf("  Plan of shard 0 on worker %s:", ss.srv.nodeAddr(node)))
	return ss.explainOn(p, lines, p.ShardSQL()[0], lits, node)
}

// explainInsertSplit answers EXPLAIN (text, without ANALYZE) of a
// multi-row INSERT into a distributed table: its rows by shard and worker
// (order: the shards in the order they run, groups: each shard's rows),
// then the first shard's statement, with only its rows, explained on its
// worker.
func (ss *session) explainInsertSplit(p *planner.Plan, lits []literal, order []int, groups map[int][]int) error {
	x := p.Root.(*planner.InsertSplit)
	all := ss.srv.catalog.Load().Shards[p.DistTable()]
	if len(order) == 0 || order[len(order)-1] >= len(all) {
		return ss.queryError(errCatalogMoved)
	}
	rel := p.DistTable()[strings.IndexByte(p.DistTable(), '.')+1:]
	byNode := map[int32][]int{}
	var nodes []int32
	for _, idx := range order {
		n := all[idx].Nodes[0]
		if _, ok := byNode[n]; !ok {
			nodes = append(nodes, n)
		}
		byNode[n] = append(byNode[n], idx)
	}
	rows := len(x.Rows)
	var lines []string
	if len(order) == 1 {
		lines = append(lines, fmt.Sprintf("pgfleet multi-row INSERT into %s: %d rows, all in shard %s on worker %s",
			p.DistTable(), rows, metadata.ShardName(rel, all[order[0]].ID), ss.srv.nodeAddr(nodes[0])))
	} else {
		lines = append(lines, fmt.Sprintf("pgfleet multi-row INSERT into %s: %d rows over %d shards on %s, one statement per shard, committed together (two-phase commit)",
			p.DistTable(), rows, len(order), counted(len(nodes), "worker")))
		for _, n := range nodes {
			var parts []string
			for _, idx := range byNode[n] {
				word := "rows"
				if len(groups[idx]) == 1 {
					word = "row"
				}
				parts = append(parts, fmt.Sprintf("%d (%s %s)", idx, word, rowList(groups[idx])))
			}
			lines = append(lines, fmt.Sprintf("  Worker %s: shards %s", ss.srv.nodeAddr(n), strings.Join(parts, ", ")))
		}
	}
	first := order[0]
	sql, err := x.SplitInsert(first, groups[first])
	if err != nil {
		return ss.queryError(err)
	}
	lines = append(lines, fmt.Sprintf("  Plan of shard %d on worker %s:", first, ss.srv.nodeAddr(all[first].Nodes[0])))
	return ss.explainOn(p, lines, sql, lits, all[first].Nodes[0])
}

// counted is "1 worker", "2 workers".
func counted(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// rowList is VALUES rows (0-based) as EXPLAIN shows them, from 1: 1, 3.
func rowList(rows []int) string {
	one := make([]int, len(rows))
	for i, r := range rows {
		one[i] = r + 1
	}
	return shardList(one)
}

// shardList is shard indexes as EXPLAIN shows them: 0, 2, 4.
func shardList(idx []int) string {
	var b strings.Builder
	for i, x := range idx {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprint(&b, x)
	}
	return b.String()
}
