package planner

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
)

// Scatter is how a multi-shard SELECT runs: one statement per worker that
// reads all of that worker's shards (a UNION ALL of the query on each), sent
// to every worker at once, and a merge of what comes back.
type Scatter struct {
	// Table is the distributed table whose shard indexes the workers read;
	// colocated tables join in at the same index.
	Table    string        `json:"table"`
	DistType string        `json:"-"`
	Workers  []WorkerQuery `json:"workers"`
	Merge    *Merge        `json:"merge"`
	// First is the statement renamed to the first shard (one entry): its
	// description is the result's.
	First []string `json:"-"`
	// Fallback: a multi-shard query whose merge of partial results may
	// find at run time what it cannot do (sort or group by an enum or an
	// array, a collation, a user-defined aggregate) is also planned by
	// gathering its tables; the executor runs that instead then.
	Fallback *Plan `json:"-"`
	// Checks made once per plan in a worker's catalog before the first run.
	// CheckFuncs: none of these functions may be an aggregate or a window
	// function (the merge would treat it as a plain function).
	CheckFuncs []string `json:"check_funcs,omitempty"`
	// CheckCollation: the merge compares these columns of CheckRelations
	// ("*": all of them) with the database's default collation, so none may
	// have another one.
	CheckCollation []string `json:"check_collation,omitempty"`
	CheckRelations []string `json:"check_relations,omitempty"`
	// LimitFuncs: the functions the select list calls when each shard
	// stops at the LIMIT on its own: a VOLATILE one among them would run
	// on more rows than PostgreSQL's (which evaluates the select list
	// after its LIMIT), so the plan's gathering fallback runs instead.
	LimitFuncs []string `json:"limit_funcs,omitempty"`
	// ParamKeys: a parameter is part of an expression the statement
	// groups, sorts, dedupes or partitions by. PostgreSQL matches such
	// expressions to each other (DISTINCT ON (v * 2) ... ORDER BY v * 2),
	// so a plan of a text whose constants were lifted into parameters
	// (two parameters: two expressions) is not that text's plan.
	ParamKeys bool `json:"param_keys,omitempty"`
	// TxTime is a value the statement reads that PostgreSQL fixes for the
	// whole transaction (now(), CURRENT_DATE, 'now'), "" if none: in a
	// transaction block the statement's connections would each read their
	// own moment, not the transaction's start, so it is refused there.
	TxTime string `json:"tx_time,omitempty"`
	// Bind: a simple-protocol statement's constants (lifted into the
	// plan's parameters) may be bound as parameters of the workers'
	// statements (SQL, prepared) rather than spliced into their text
	// (bindable.go); nil when not.
	Bind *Bindable `json:"-"`
	// Whole: the table's shards are all on one worker, which runs the
	// whole statement over their union (unionOf); its rows are the
	// result (Merge is a Concat without LIMIT).
	Whole bool `json:"whole,omitempty"`
	// Fleet: the rows gathered are every worker's of a view (FleetView),
	// not a table's; the merge runs on the default node (fleetview.go).
	Fleet bool `json:"fleet,omitempty"`
}

// WorkerQuery is the statement one worker runs: the partial query over each
// of its shards, glued with UNION ALL.
type WorkerQuery struct {
	Node   int32  `json:"node"`
	Shards []int  `json:"shards"` // shard indexes
	SQL    string `json:"sql"`
	// PerShard, when SQL reads the worker's shards as one relation
	// (unionOf), is the query on each shard glued with UNION ALL, which
	// the simple protocol runs: there the worker plans the statement at
	// every execution, its constants spliced in, and the union measured
	// both faster and slower than this form (issue 13's notes); the
	// extended protocol's prepared statements take the union.
	PerShard string `json:"per_shard,omitempty"`
}

// TextSQL is the worker's statement for the simple protocol.
func (w WorkerQuery) TextSQL() string {
	if w.PerShard != "" {
		return w.PerShard
	}
	return w.SQL
}

// MergeKind says how the shards' rows become the result.
type MergeKind string

const (
	// Concat: the shards' rows are the result, in any order. With Limit or
	// Offset (constants or parameters) the coordinator counts rows off; the
	// shards return at most limit+offset rows each.
	Concat MergeKind = "concat"
	// SQLMerge: the shards return partial rows (in binary), which a worker
	// combines with Merge.Render's statement: its parameters are the
	// partial columns as arrays ($1 .. $n, unnested into p(c1 .. cn)),
	// then the statement's own parameters the merge needs (Params).
	SQLMerge MergeKind = "sql"
)

// Merge describes how partial results combine.
type Merge struct {
	Kind   MergeKind `json:"kind"`
	Limit  *Value    `json:"limit,omitempty"`  // Concat
	Offset *Value    `json:"offset,omitempty"` // Concat
	// ShardLimit: the shards stop at limit+offset rows each, so together
	// they evaluate the select list (and WHERE) on other rows than
	// PostgreSQL, which may stop at limit+offset rows in all: with no
	// ORDER BY, or one of plain columns an index scan can give in order.
	// (Sorting by a computed expression evaluates it on every row, on
	// the shards and on PostgreSQL alike: not set then.)
	ShardLimit bool `json:"shard_limit,omitempty"`
	// Columns is the number of partial columns (0 when the select list has
	// a *, then known from the shards' row description); the last Hidden
	// of them are sort keys that are not output.
	Columns int `json:"columns,omitempty"`
	Hidden  int `json:"hidden,omitempty"`
	// Params are the statement's parameters the merge statement uses, in
	// the order it numbers them after the arrays.
	Params []int `json:"params,omitempty"`
	// RowIDs: the merge statement sees only the columns it sorts or
	// dedupes by (the output columns Keys, 1-based, then the hidden ones),
	// after an array of row numbers ($1, unnested as r); it returns each
	// kept row's number and its Keys. The coordinator sends the other
	// columns as the shards returned them (in the client's format), so
	// they may be of any type.
	RowIDs bool  `json:"row_ids,omitempty"`
	Keys   []int `json:"keys,omitempty"`
	// Aggregates: the partial columns that hold partial aggregates, how
	// each output aggregate combines them.
	Aggregates []AggMerge `json:"aggregates,omitempty"`
	// Gather: the whole statement runs over the table's gathered rows
	// (see gather.go; RenderGather makes the statement).
	Gather bool `json:"gather,omitempty"`
	// Tables: the gathered tables, in the order of their columns.
	Tables []string `json:"tables,omitempty"`
	// Local: the statement also reads relations that are not in the
	// catalog (local tables, views, sequences), which only the default
	// node has: it runs there, which must hold the first table's first
	// shard (the coordinator refuses it otherwise).
	Local []string `json:"local,omitempty"`
	// SQL is the merge statement rendered with unknown column types (for
	// reading plans; Render makes the real one).
	SQL string `json:"sql,omitempty"`

	tmpl    *pg_query.SelectStmt
	fill    bool // the select list is every output column (it has a *)
	version int32
}

// AggMerge is one aggregate of the original query and the partial columns
// (1-based) it combines.
type AggMerge struct {
	Func string `json:"func"`
	Cols []int  `json:"cols"`
}

// handledAggs are the aggregates that combine exactly from per-shard
// partial aggregates.
var handledAggs = map[string]bool{
	"count": true, "sum": true, "min": true, "max": true, "avg": true,
	"bool_and": true, "bool_or": true, "every": true, "bit_and": true, "bit_or": true, "bit_xor": true,
}

// otherAggs are PostgreSQL's other aggregates: they cannot be combined from
// per-shard results by the merge.
var otherAggs = map[string]bool{
	"array_agg": true, "string_agg": true, "json_agg": true, "jsonb_agg": true, "json_object_agg": true,
	"jsonb_object_agg": true, "json_objectagg": true, "json_arrayagg": true, "json_agg_strict": true,
	"jsonb_agg_strict": true, "json_object_agg_strict": true, "jsonb_object_agg_strict": true,
	"json_object_agg_unique": true, "jsonb_object_agg_unique": true, "json_object_agg_unique_strict": true,
	"jsonb_object_agg_unique_strict": true, "xmlagg": true, "stddev": true,
	"stddev_pop": true, "stddev_samp": true, "variance": true, "var_pop": true, "var_samp": true, "corr": true,
	"covar_pop": true, "covar_samp": true, "regr_avgx": true, "regr_avgy": true, "regr_count": true,
	"regr_intercept": true, "regr_r2": true, "regr_slope": true, "regr_sxx": true, "regr_sxy": true,
	"regr_syy": true, "percentile_cont": true, "percentile_disc": true, "mode": true, "range_agg": true,
	"range_intersect_agg": true, "any_value": true, "rank": true, "dense_rank": true, "percent_rank": true,
	"cume_dist": true,
}

const (
	mergeSchema = "pgfleet_merge" // placeholders in merge templates
	hiddenAlias = "pgfleet_sort_"
)

// multiShard plans a SELECT that no equality pins to one shard group.
func (b *builder) multiShard(stmt *pg_query.Node, p *Plan, dist []*metadata.Table) (*Plan, error) {
	sel := stmt.GetSelectStmt()
	if len(sel.LockingClause) > 0 {
		return nil, unsupported("SELECT ... FOR UPDATE or FOR SHARE over several shards is not supported").
			WithHint("Add WHERE %s = <value> so that the statement reads one shard.", dist[0].DistColumn)
	}
	if err := b.checkCTEs(sel); err != nil {
		return nil, err
	}
	for _, f := range sel.FromClause {
		if err := b.checkJoins(f); err != nil {
			return nil, err
		}
	}
	nullable, err := b.checkOccurrences(sel)
	if err != nil {
		return nil, err
	}
	if err := b.shardRows(sel); err != nil {
		return nil, err
	}
	for _, n := range []*pg_query.Node{sel.LimitCount, sel.LimitOffset} {
		if n != nil && hasSubLink(n) {
			return nil, unsupported("a subquery in LIMIT or OFFSET of a multi-shard query is not supported").
				WithHint("Give LIMIT and OFFSET as constants or parameters.")
		}
	}
	a := &analysis{b: b, sel: sel, single: len(sel.FromClause) == 1 && sel.FromClause[0].GetRangeVar() != nil, nullable: nullable}
	if err := a.check(); err != nil {
		return nil, err
	}
	m, partial, err := a.plan()
	if err != nil {
		return nil, err
	}
	if m.Kind == SQLMerge {
		// A column of a subquery, VALUES or CTE may carry an explicit
		// collation that the merge's arrays would lose.
		from := append([]*pg_query.Node{}, sel.FromClause...)
		if sel.WithClause != nil {
			from = append(from, sel.WithClause.Ctes...)
		}
		for _, f := range from {
			if err := noCollate(f); err != nil {
				return nil, unsupported("COLLATE in the FROM or WITH clause of a multi-shard query that sorts, groups or dedupes is not supported").
					WithHint("Pin the query to one shard with WHERE <distribution column> = <value>.")
			}
		}
	}
	p.ReadOnly = true
	shards := b.cat.Shards[dist[0].Name]
	// The statement on the first shard describes the result to clients.
	first, err := b.rewrite(stmt, 0)
	if err != nil {
		return nil, err
	}
	sc := &Scatter{Table: dist[0].Name, DistType: dist[0].DistType, First: []string{first}, Merge: m}
	partialNode := &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: partial}}
	if sc.Workers, err = b.workerQueries(partialNode, shards, dist[0].Name); err != nil {
		return nil, err
	}
	if len(sc.Workers) == 1 {
		// Every shard on one worker: the whole statement runs there over
		// their union, and its rows are the answer (no merge).
		if whole := b.unionOf(stmt, dist[0].Name, shards, sc.Workers[0].Shards); whole != nil {
			sql, err := deparse(b.tree.Version, whole)
			if err != nil {
				return nil, err
			}
			sc.Workers[0] = WorkerQuery{Node: sc.Workers[0].Node, Shards: sc.Workers[0].Shards, SQL: sql}
			sc.Merge, sc.Whole = &Merge{Kind: Concat}, true
			sc.Bind = bindable(whole)
			sc.TxTime = txTime(stmt)
			sc.ParamKeys = paramKeys(stmt)
			p.Root = sc
			return p, nil
		}
	}
	if m.Kind == SQLMerge && unionForm(sc.Workers) {
		sc.Bind = bindable(partialNode)
	}
	if m.Kind == SQLMerge {
		m.version = b.tree.Version
		if m.Columns > 0 {
			m.SQL, _ = m.Render(make([]string, m.Columns))
		}
		sc.CheckCollation = a.collationColumns()
		if len(sc.CheckCollation) > 0 {
			sc.CheckRelations = b.relations(stmt)
		}
	}
	if !a.local {
		sc.CheckFuncs = a.funcs()
	}
	if m.ShardLimit || m.Kind == Concat && m.Limit != nil {
		sc.LimitFuncs = targetFuncs(sel)
	}
	sc.TxTime = txTime(stmt)
	sc.ParamKeys = paramKeys(stmt)
	p.Root = sc
	return p, nil
}

// paramKeys reports whether a parameter is in a GROUP BY, ORDER BY,
// DISTINCT ON or window clause of any query level of stmt.
func paramKeys(stmt *pg_query.Node) bool {
	found := false
	has := func(nodes ...[]*pg_query.Node) {
		for _, l := range nodes {
			for _, n := range l {
				Walk(n, func(m proto.Message) {
					if _, ok := m.(*pg_query.ParamRef); ok {
						found = true
					}
				})
			}
		}
	}
	Walk(stmt, func(m proto.Message) {
		switch x := m.(type) {
		case *pg_query.SelectStmt:
			has(x.DistinctClause, x.GroupClause, x.SortClause, x.WindowClause)
		case *pg_query.WindowDef:
			has(x.PartitionClause, x.OrderClause)
		}
	})
	return found
}

// workerQueries is stmt for each worker: renamed to each of its shards of
// table and glued with UNION ALL, workers in node order.
func (b *builder) workerQueries(stmt *pg_query.Node, shards []metadata.Shard, table string) ([]WorkerQuery, error) {
	byNode := map[int32][]int{}
	var nodes []int32
	for i, sh := range shards {
		if len(sh.Nodes) == 0 {
			return nil, pgerr.New(pgerr.Internal, "shard %d of %s has no placement", sh.ID, table)
		}
		n := sh.Nodes[0]
		if _, ok := byNode[n]; !ok {
			nodes = append(nodes, n)
		}
		byNode[n] = append(byNode[n], i)
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i] < nodes[j] })
	var out []WorkerQuery
	for _, n := range nodes {
		branches, err := b.shardTrees(stmt, byNode[n])
		if err != nil {
			return nil, err
		}
		var union *pg_query.SelectStmt
		for _, branch := range branches {
			s := branch.GetSelectStmt()
			if union == nil {
				union = s
				continue
			}
			union = &pg_query.SelectStmt{Op: pg_query.SetOperation_SETOP_UNION, All: true, Larg: union, Rarg: s,
				LimitOption: pg_query.LimitOption_LIMIT_OPTION_DEFAULT}
		}
		sql, err := deparse(b.tree.Version, &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: union}})
		if err != nil {
			return nil, err
		}
		wq := WorkerQuery{Node: n, Shards: byNode[n], SQL: sql}
		if one := b.unionOf(stmt, table, shards, byNode[n]); one != nil {
			if wq.SQL, err = deparse(b.tree.Version, one); err != nil {
				return nil, err
			}
			wq.PerShard = sql
		}
		out = append(out, wq)
	}
	return out, nil
}

// unionForm reports whether every worker reads its shards as one relation
// (unionOf).
func unionForm(ws []WorkerQuery) bool {
	for _, w := range ws {
		if w.PerShard == "" {
			return false
		}
	}
	return len(ws) > 0
}

// unionOf is stmt reading the worker's shards idxs of table as one
// relation, or nil when stmt is not a query of that table alone:
//
//	SELECT bid, count(*) FROM (SELECT * FROM a_1 UNION ALL SELECT * FROM a_3) a
//	  WHERE aid BETWEEN 1 AND 1000 GROUP BY bid
//
// rather than the query on each shard glued with UNION ALL. Both give the
// worker's part of the answer: a partial query is right over any set of
// whole shards (rows of one distribution value share a shard), and
// PostgreSQL flattens the union into one scan per shard under a single
// aggregate, sort or limit, each given the WHERE clause; planning it
// costs a fraction of planning the query once per shard (2.6 times the
// executions per second with 16 shards, simple protocol), and executing
// it less (1.13 times, prepared). Kept to a single table read by name,
// with no subquery, CTE or other relation, and none of what a subquery
// in FROM reads differently from a table: its whole row (a record, not
// the table's type), system columns, column aliases of the table.
func (b *builder) unionOf(stmt *pg_query.Node, table string, shards []metadata.Shard, idxs []int) *pg_query.Node {
	sel := stmt.GetSelectStmt()
	if sel == nil || sel.Op > pg_query.SetOperation_SETOP_NONE || sel.WithClause != nil ||
		len(sel.LockingClause) > 0 || len(sel.FromClause) != 1 || len(sel.ValuesLists) > 0 || sel.IntoClause != nil {
		return nil
	}
	rv := sel.FromClause[0].GetRangeVar()
	if rv == nil || !shapes(sel) {
		return nil
	}
	t := lookup(b.cat, rv, nil)
	if t == nil || t.Name != table || t.Kind == metadata.Reference {
		return nil
	}
	alias := rv.Alias
	if alias == nil {
		alias = &pg_query.Alias{Aliasname: rv.Relname}
	}
	if len(alias.Colnames) > 0 {
		return nil // they rename the table's columns in order
	}
	// The union reads the columns the statement names (a role may have
	// SELECT on those only), or all of them for a *.
	outNames := map[string]bool{}
	for _, tg := range sel.TargetList {
		if n := tg.GetResTarget().GetName(); n != "" {
			outNames[n] = true
		}
	}
	plain, star := true, false
	var cols []string
	seen := map[string]bool{}
	Walk(stmt, func(m proto.Message) {
		switch x := m.(type) {
		case *pg_query.RangeVar:
			plain = plain && x == rv
		case *pg_query.SubLink, *pg_query.RangeSubselect, *pg_query.RangeFunction, *pg_query.RangeTableSample,
			*pg_query.RangeTableFunc, *pg_query.JoinExpr, *pg_query.WithClause:
			plain = false
		case *pg_query.ColumnRef:
			f := x.Fields
			switch {
			case len(f) == 2 && f[0].GetString_().GetSval() != alias.Aliasname, len(f) > 2, len(f) == 0:
				plain = false
			case f[len(f)-1].GetAStar() != nil:
				star = true
			default:
				name := f[len(f)-1].GetString_().GetSval()
				if name == "" || len(f) == 1 && outNames[name] {
					plain = false // a name of the select list's, perhaps no column
				} else if !seen[name] {
					seen[name] = true
					cols = append(cols, name)
				}
			}
		}
	})
	if !plain || wholeRows(sel, []string{alias.Aliasname}) != nil || !namesAreColumns(sel) || !groupedByColumns(sel) {
		return nil
	}
	var target []*pg_query.Node
	if star {
		target = []*pg_query.Node{{Node: &pg_query.Node_ResTarget{ResTarget: &pg_query.ResTarget{
			Val: &pg_query.Node{Node: &pg_query.Node_ColumnRef{ColumnRef: &pg_query.ColumnRef{
				Fields: []*pg_query.Node{{Node: &pg_query.Node_AStar{AStar: &pg_query.A_Star{}}}}}}}}}}}
	} else {
		for _, c := range cols {
			target = append(target, &pg_query.Node{Node: &pg_query.Node_ResTarget{ResTarget: &pg_query.ResTarget{
				Val: &pg_query.Node{Node: &pg_query.Node_ColumnRef{ColumnRef: &pg_query.ColumnRef{
					Fields: []*pg_query.Node{{Node: &pg_query.Node_String_{String_: &pg_query.String{Sval: c}}}}}}}}}})
		}
	}
	var union *pg_query.SelectStmt
	for _, idx := range idxs {
		if idx < 0 || idx >= len(shards) {
			return nil
		}
		srv := &pg_query.RangeVar{Schemaname: rv.Schemaname, Relname: rv.Relname, Inh: true, Relpersistence: "p"}
		toShard(srv, t, rv.Relname, shards[idx].ID)
		one := &pg_query.SelectStmt{
			TargetList:  target,
			FromClause:  []*pg_query.Node{{Node: &pg_query.Node_RangeVar{RangeVar: srv}}},
			LimitOption: pg_query.LimitOption_LIMIT_OPTION_DEFAULT}
		if union == nil {
			union = one
			continue
		}
		union = &pg_query.SelectStmt{Op: pg_query.SetOperation_SETOP_UNION, All: true, Larg: union, Rarg: one,
			LimitOption: pg_query.LimitOption_LIMIT_OPTION_DEFAULT}
	}
	if union == nil {
		return nil
	}
	out := proto.Clone(stmt).(*pg_query.Node)
	out.GetSelectStmt().FromClause = []*pg_query.Node{{Node: &pg_query.Node_RangeSubselect{RangeSubselect: &pg_query.RangeSubselect{
		Subquery: &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: union}},
		Alias:    proto.Clone(alias).(*pg_query.Alias)}}}}
	return out
}

// namesAreColumns reports whether every bare name sel sorts, dedupes or
// groups by is also read as a column (in its select list, WHERE or
// HAVING). ORDER BY and DISTINCT ON may name a select list entry by the
// name PostgreSQL gives it (lower(s) is "lower", an expression
// "?column?"), which the union would try to read as a column.
func namesAreColumns(sel *pg_query.SelectStmt) bool {
	read := map[string]bool{}
	for _, n := range append(append([]*pg_query.Node{}, sel.TargetList...), sel.WhereClause, sel.HavingClause) {
		Walk(n, func(m proto.Message) {
			if cr, ok := m.(*pg_query.ColumnRef); ok && len(cr.Fields) > 0 {
				read[cr.Fields[len(cr.Fields)-1].GetString_().GetSval()] = true
			}
		})
	}
	ok := true
	for _, l := range [][]*pg_query.Node{sel.SortClause, sel.DistinctClause, sel.GroupClause} {
		for _, n := range l {
			Walk(n, func(m proto.Message) {
				if cr, isRef := m.(*pg_query.ColumnRef); isRef && len(cr.Fields) == 1 {
					if name := cr.Fields[0].GetString_().GetSval(); name != "" && !read[name] {
						ok = false
					}
				}
			})
		}
	}
	return ok
}

// groupedByColumns reports whether a grouped sel reads, outside its
// aggregates, only columns it groups by. PostgreSQL also lets a query
// grouped by a table's primary key read the table's other columns (they
// depend on the key), which a union of shards, with no key, refuses
// (42803); so anything else, and any call not known to be an aggregate,
// keeps the query per shard.
func groupedByColumns(sel *pg_query.SelectStmt) bool {
	if len(sel.GroupClause) == 0 {
		return true
	}
	grouped := map[string]bool{}
	inAgg := map[*pg_query.ColumnRef]bool{} // or in an expression grouped by
	for _, g := range sel.GroupClause {
		cr := g.GetColumnRef()
		if k := g.GetAConst().GetIval(); k != nil && k.Ival >= 1 && int(k.Ival) <= len(sel.TargetList) {
			// GROUP BY 1: the select list's first expression is grouped
			// by, and with it the columns in it there.
			val := sel.TargetList[k.Ival-1].GetResTarget().GetVal()
			Walk(val, func(m proto.Message) {
				if c, ok := m.(*pg_query.ColumnRef); ok {
					inAgg[c] = true
				}
			})
			cr = val.GetColumnRef()
		}
		if cr == nil || len(cr.Fields) == 0 {
			continue // an expression: its columns elsewhere count as not grouped
		}
		if name := cr.Fields[len(cr.Fields)-1].GetString_().GetSval(); name != "" {
			grouped[name] = true
		}
	}
	clauses := append(append(append([]*pg_query.Node{}, sel.TargetList...), sel.SortClause...), sel.DistinctClause...)
	clauses = append(append(clauses, sel.HavingClause), sel.WindowClause...)
	for _, n := range clauses {
		Walk(n, func(m proto.Message) {
			fc, ok := m.(*pg_query.FuncCall)
			if !ok || fc.Over != nil || len(fc.Funcname) == 0 {
				return
			}
			name := fc.Funcname[len(fc.Funcname)-1].GetString_().GetSval()
			if handledAggs[name] || otherAggs[name] || fc.AggStar || fc.AggDistinct || len(fc.AggOrder) > 0 || fc.AggFilter != nil {
				Walk(fc, func(m proto.Message) {
					if cr, ok := m.(*pg_query.ColumnRef); ok {
						inAgg[cr] = true
					}
				})
			}
		})
	}
	ok := true
	for _, n := range clauses {
		Walk(n, func(m proto.Message) {
			if cr, isRef := m.(*pg_query.ColumnRef); isRef && !inAgg[cr] && len(cr.Fields) > 0 {
				last := cr.Fields[len(cr.Fields)-1]
				if last.GetAStar() != nil || !grouped[last.GetString_().GetSval()] {
					ok = false
				}
			}
		})
	}
	return ok
}

// shapes reports whether sel does more than read rows (groups,
// aggregates, sorts, dedupes or limits them), which a union of its
// shards saves planning and running once per shard; a plain read is the
// same work either way and keeps the per-shard form.
func shapes(sel *pg_query.SelectStmt) bool {
	if len(sel.GroupClause) > 0 || len(sel.DistinctClause) > 0 || len(sel.SortClause) > 0 ||
		sel.HavingClause != nil || sel.LimitCount != nil || sel.LimitOffset != nil {
		return true
	}
	found := false
	for _, t := range sel.TargetList {
		Walk(t, func(m proto.Message) {
			if _, ok := m.(*pg_query.FuncCall); ok {
				found = true
			}
		})
	}
	return found
}

// shardTrees is stmt renamed for each of the shard indexes, as rewrite
// renames it, with one walk of the tree.
func (b *builder) shardTrees(stmt *pg_query.Node, idxs []int) ([]*pg_query.Node, error) {
	base := proto.Clone(stmt).(*pg_query.Node)
	ctes := cteNames(base)
	type ref struct {
		rv     *pg_query.RangeVar
		rel    string
		t      *metadata.Table
		shards []metadata.Shard
		one    bool // a reference table: its one shard
	}
	var refs []ref
	Walk(base, func(m proto.Message) {
		rv, ok := m.(*pg_query.RangeVar)
		if !ok {
			return
		}
		if t := lookup(b.cat, rv, ctes); t != nil {
			if rv.Alias == nil {
				rv.Alias = &pg_query.Alias{Aliasname: rv.Relname}
			}
			refs = append(refs, ref{rv, rv.Relname, t, b.cat.Shards[t.Name], t.Kind == metadata.Reference})
		}
	})
	ins := base.GetInsertStmt()
	conname := ins.GetOnConflictClause().GetInfer().GetConname()
	out := make([]*pg_query.Node, 0, len(idxs))
	for _, idx := range idxs {
		for _, r := range refs {
			i := idx
			if r.one {
				i = 0
			}
			if i < 0 || i >= len(r.shards) {
				return nil, pgerr.New(pgerr.Internal, "no shard %d for table %s", i, r.rel)
			}
			if conname != "" && r.rv == ins.Relation {
				ins.OnConflictClause.Infer.Conname = conname
				shardConstraint(ins, r.shards[i].ID)
			}
			toShard(r.rv, r.t, r.rel, r.shards[i].ID)
		}
		out = append(out, proto.Clone(base).(*pg_query.Node))
	}
	return out, nil
}

// Deparse writes a statement's parse tree as SQL that parses back to the
// same tree (pg_query's deparser with the workarounds below), leaving n as
// it was. Every statement pgfleet composes from a parse tree goes through
// it.
func Deparse(version int32, n *pg_query.Node) (string, error) { return deparse(version, n) }

func deparse(version int32, n *pg_query.Node) (string, error) {
	n = proto.Clone(n).(*pg_query.Node) // the workarounds change the tree
	parenIndirection(n)
	out, err := pg_query.Deparse(&pg_query.ParseResult{Version: version, Stmts: []*pg_query.RawStmt{{Stmt: n}}})
	if err != nil {
		return out, err
	}
	return lockSpacing(n, out), nil
}

// lockSpacing puts back the space pg_query's deparser leaves out between
// FOR UPDATE OF's last relation and NOWAIT or SKIP LOCKED (OF tNOWAIT
// names a relation tnowait; OF tSKIP LOCKED does not parse).
func lockSpacing(n *pg_query.Node, sql string) string {
	Walk(n, func(m proto.Message) {
		lc, ok := m.(*pg_query.LockingClause)
		if !ok || len(lc.LockedRels) == 0 || lc.WaitPolicy == pg_query.LockWaitPolicy_LockWaitBlock {
			return
		}
		last := lc.LockedRels[len(lc.LockedRels)-1].GetRangeVar().GetRelname()
		if last == "" {
			return
		}
		for _, name := range []string{last, `"` + strings.ReplaceAll(last, `"`, `""`) + `"`} {
			for _, w := range []string{"NOWAIT", "SKIP LOCKED"} {
				sql = strings.ReplaceAll(sql, name+w, name+" "+w)
			}
		}
	})
	return sql
}

// parenIndirection works around pg_query's deparser, which writes
// operands without the parentheses PostgreSQL's grammar needs for them:
// (a AND b) IS NULL came out as a AND b IS NULL, (NOT x)::int as NOT
// x::int, (x AT TIME ZONE 'UTC')::date as x AT TIME ZONE 'UTC'::date,
// (-2) ^ 2 as -2 ^ 2, each a valid statement that means something else,
// and (ARRAY['z','y'])[1] as ARRAY['z','y'][1], a syntax error. Each
// operand of an operator (A_Expr, AND/OR/NOT, IS [NOT] NULL, IS TRUE and
// the like, a cast, COLLATE, a subquery comparison, a function written in
// SQL syntax such as AT TIME ZONE) that is itself such an expression, or
// a negative constant, goes inside an A_Indirection without indirection
// (two for the kinds of argument it does not parenthesise), which the
// deparser parenthesises and which deparses to the operand alone; so does the argument of a subscript or field selection that is
// not a column, a parameter or another expression the deparser
// parenthesises itself. Parentheses are not in the parse tree, so the
// statement parses back to the tree it came from. Running it again
// changes nothing.
func parenIndirection(n *pg_query.Node) {
	paren := func(x *pg_query.Node) *pg_query.Node {
		// The deparser parenthesises an A_Indirection's argument when it
		// is an A_Expr, a function call, a cast or another A_Indirection.
		switch x.Node.(type) {
		case *pg_query.Node_AExpr, *pg_query.Node_FuncCall, *pg_query.Node_TypeCast:
		default:
			x = &pg_query.Node{Node: &pg_query.Node_AIndirection{AIndirection: &pg_query.A_Indirection{Arg: x}}}
		}
		return &pg_query.Node{Node: &pg_query.Node_AIndirection{AIndirection: &pg_query.A_Indirection{Arg: x}}}
	}
	wrap := func(slot **pg_query.Node) {
		if *slot != nil && compoundOperand(*slot) {
			*slot = paren(*slot)
		}
	}
	eachNode(n, func(x *pg_query.Node) bool {
		switch v := x.Node.(type) {
		case *pg_query.Node_AExpr:
			wrap(&v.AExpr.Lexpr)
			if l := v.AExpr.Rexpr.GetList(); l != nil {
				for i := range l.Items {
					wrap(&l.Items[i])
				}
			} else if fc := v.AExpr.Rexpr.GetFuncCall(); fc != nil && escapeCall(fc) {
				// LIKE, ILIKE or SIMILAR TO pattern ESCAPE e: the pattern
				// and the escape are the call's arguments.
				for i := range fc.Args {
					wrap(&fc.Args[i])
				}
			} else {
				wrap(&v.AExpr.Rexpr)
			}
		case *pg_query.Node_JsonIsPredicate:
			wrap(&v.JsonIsPredicate.Expr)
		case *pg_query.Node_IndexElem:
			// An index expression is written in parentheses unless it
			// is a function call, which a SQL-syntax one is not.
			if fc := v.IndexElem.Expr.GetFuncCall(); fc != nil && fc.Funcformat == pg_query.CoercionForm_COERCE_SQL_SYNTAX {
				v.IndexElem.Expr = &pg_query.Node{Node: &pg_query.Node_AIndirection{AIndirection: &pg_query.A_Indirection{Arg: v.IndexElem.Expr}}}
			}
		case *pg_query.Node_BoolExpr:
			for i := range v.BoolExpr.Args {
				wrap(&v.BoolExpr.Args[i])
			}
		case *pg_query.Node_NullTest:
			wrap(&v.NullTest.Arg)
		case *pg_query.Node_BooleanTest:
			wrap(&v.BooleanTest.Arg)
		case *pg_query.Node_TypeCast:
			wrap(&v.TypeCast.Arg)
		case *pg_query.Node_CollateClause:
			wrap(&v.CollateClause.Arg)
		case *pg_query.Node_SubLink:
			wrap(&v.SubLink.Testexpr)
		case *pg_query.Node_XmlExpr:
			if v.XmlExpr.Op == pg_query.XmlExprOp_IS_DOCUMENT {
				for i := range v.XmlExpr.Args {
					wrap(&v.XmlExpr.Args[i])
				}
			}
		case *pg_query.Node_FuncCall:
			if v.FuncCall.Funcformat == pg_query.CoercionForm_COERCE_SQL_SYNTAX {
				for i := range v.FuncCall.Args {
					wrap(&v.FuncCall.Args[i])
				}
			}
		}
		return true
	})
	Walk(n, func(m proto.Message) {
		ind, ok := m.(*pg_query.A_Indirection)
		if !ok || len(ind.Indirection) == 0 || ind.Arg == nil {
			return
		}
		switch a := ind.Arg.Node.(type) {
		case *pg_query.Node_ColumnRef, *pg_query.Node_ParamRef, *pg_query.Node_AIndirection, *pg_query.Node_FuncCall,
			*pg_query.Node_AExpr, *pg_query.Node_TypeCast, *pg_query.Node_RowExpr:
			return
		case *pg_query.Node_SubLink:
			if a.SubLink.SubLinkType == pg_query.SubLinkType_EXPR_SUBLINK {
				return // (SELECT ...) is written in parentheses
			}
		}
		ind.Arg = &pg_query.Node{Node: &pg_query.Node_AIndirection{AIndirection: &pg_query.A_Indirection{Arg: ind.Arg}}}
	})
}

// escapeCall reports whether fc is the call LIKE ... ESCAPE or SIMILAR TO
// ... ESCAPE is written as (like_escape, similar_to_escape).
func escapeCall(fc *pg_query.FuncCall) bool {
	name, builtin := funcName(fc)
	return builtin && (name == "like_escape" || name == "similar_to_escape" || name == "similar_escape")
}

// compoundOperand reports whether n, as an operand, needs parentheses
// that pg_query's deparser may leave out (parenIndirection).
func compoundOperand(n *pg_query.Node) bool {
	switch v := n.Node.(type) {
	case *pg_query.Node_AExpr, *pg_query.Node_BoolExpr, *pg_query.Node_NullTest, *pg_query.Node_BooleanTest,
		*pg_query.Node_CollateClause:
		return true
	case *pg_query.Node_SubLink:
		t := v.SubLink.SubLinkType
		return t != pg_query.SubLinkType_EXPR_SUBLINK && t != pg_query.SubLinkType_ARRAY_SUBLINK && t != pg_query.SubLinkType_EXISTS_SUBLINK
	case *pg_query.Node_FuncCall:
		return v.FuncCall.Funcformat == pg_query.CoercionForm_COERCE_SQL_SYNTAX
	case *pg_query.Node_XmlExpr:
		return v.XmlExpr.Op == pg_query.XmlExprOp_IS_DOCUMENT
	case *pg_query.Node_JsonIsPredicate:
		return true
	case *pg_query.Node_AConst:
		switch c := v.AConst.Val.(type) {
		case *pg_query.A_Const_Ival:
			return c.Ival.Ival < 0
		case *pg_query.A_Const_Fval:
			return strings.HasPrefix(c.Fval.Fval, "-")
		}
	}
	return false
}

// relations names every relation a statement reads as the worker holding
// shard index 0 knows it: shard names for catalog tables, as written for
// others (CTE names resolve to nothing there, which is fine).
func (b *builder) relations(stmt *pg_query.Node) []string {
	ctes := cteNames(stmt)
	seen := map[string]bool{}
	var out []string
	Walk(stmt, func(m proto.Message) {
		rv, ok := m.(*pg_query.RangeVar)
		if !ok {
			return
		}
		schema, rel := rv.Schemaname, rv.Relname
		if t := lookup(b.cat, rv, ctes); t != nil {
			schema = t.ShardsIn()
			rel = metadata.ShardName(rel, b.cat.Shards[t.Name][0].ID)
		} else if ctes.refs[rv] {
			return
		}
		name := quoteIdent(rel)
		if schema != "" {
			name = quoteIdent(schema) + "." + name
		}
		if !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	})
	sort.Strings(out)
	return out
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// checkCTEs refuses data-modifying CTEs: each shard would run them.
func (b *builder) checkCTEs(sel *pg_query.SelectStmt) error {
	if sel.WithClause == nil {
		return nil
	}
	for _, c := range sel.WithClause.Ctes {
		if q := c.GetCommonTableExpr().GetCtequery(); q != nil && q.GetSelectStmt() == nil {
			return unsupported("a data-modifying WITH query in a multi-shard SELECT is not supported").
				WithHint("Run the write and the SELECT as separate statements (in one transaction block if they must be atomic).")
		}
	}
	return nil
}

// checkJoins refuses outer joins that keep the rows of a side without
// distributed tables against a side with them: every shard would add its
// own unmatched copy of those rows.
func (b *builder) checkJoins(n *pg_query.Node) error {
	j := n.GetJoinExpr()
	if j == nil {
		return nil
	}
	if err := b.checkJoins(j.Larg); err != nil {
		return err
	}
	if err := b.checkJoins(j.Rarg); err != nil {
		return err
	}
	l, r := b.hasDist(j.Larg), b.hasDist(j.Rarg)
	bad := false
	switch j.Jointype {
	case pg_query.JoinType_JOIN_LEFT:
		bad = r && !l
	case pg_query.JoinType_JOIN_RIGHT:
		bad = l && !r
	case pg_query.JoinType_JOIN_FULL:
		bad = l != r
	}
	if bad {
		return unsupported("an outer join that keeps the rows of a reference table or subquery against a distributed table is not supported over several shards").
			WithHint("Put the distributed table on the preserved side (FROM dist LEFT JOIN ref), or pin the query to one shard.")
	}
	return nil
}

// shardRows refuses what differs from shard to shard in a multi-shard
// query's rows: a whole row of a distributed table in the select list
// (each shard's row type is its own, and the shards' rows would not
// combine), and system columns (each shard has its own ctid (0,1)). A
// whole row inside an expression (t::text, row_to_json(t)) reads the same
// on every shard.
func (b *builder) shardRows(sel *pg_query.SelectStmt) error {
	for _, rt := range sel.TargetList {
		cr := rt.GetResTarget().GetVal().GetColumnRef()
		if cr == nil || len(cr.Fields) != 1 {
			continue
		}
		name := cr.Fields[0].GetString_().GetSval()
		if t := b.scope[name]; t != nil && t.Kind == metadata.Distributed {
			return unsupported("the whole row of %s as a column of a multi-shard query is not supported: each shard's row type is its own", name).
				WithHint("Select %s.* or name the columns.", name)
		}
	}
	var err error
	Walk(sel, func(m proto.Message) {
		if cr, ok := m.(*pg_query.ColumnRef); ok && err == nil {
			if last := cr.Fields[len(cr.Fields)-1].GetString_().GetSval(); systemColumn[last] {
				err = unsupported("system column %s in a multi-shard query is not supported: each shard has its own", last).
					WithHint("Name it in a query pinned to one shard.")
			}
		}
	})
	return err
}

// checkOccurrences refuses a distributed table read more than once (a
// self-join) unless every occurrence is joined to the others by equality of
// their distribution columns: rows in different shards would never meet.
// It returns the names (aliases) of the distributed tables on the nullable
// side of an outer join, and "column:" + their distribution columns.
func (b *builder) checkOccurrences(sel *pg_query.SelectStmt) (map[string]bool, error) {
	type occ struct {
		name string
		t    *metadata.Table
	}
	var occs []occ
	nullable := map[string]bool{}
	quals := []*pg_query.Node{sel.WhereClause}
	renamed := false
	var visit func(n *pg_query.Node, null bool)
	visit = func(n *pg_query.Node, null bool) {
		if rv := n.GetRangeVar(); rv != nil {
			if t := lookup(b.cat, rv, b.ctes); t != nil && t.Kind == metadata.Distributed {
				renamed = renamed || colAliases(rv)
				name := rv.Relname
				if rv.Alias != nil && rv.Alias.Aliasname != "" {
					name = rv.Alias.Aliasname
				}
				occs = append(occs, occ{name, t})
				if null {
					nullable[name] = true
					nullable["column:"+t.DistColumn] = true
				}
			}
		}
		if j := n.GetJoinExpr(); j != nil {
			jt := j.Jointype
			visit(j.Larg, null || jt == pg_query.JoinType_JOIN_RIGHT || jt == pg_query.JoinType_JOIN_FULL)
			visit(j.Rarg, null || jt == pg_query.JoinType_JOIN_LEFT || jt == pg_query.JoinType_JOIN_FULL)
			quals = append(quals, j.Quals)
		}
	}
	for _, f := range sel.FromClause {
		visit(f, false)
	}
	count := map[string]int{}
	dup := false
	for _, o := range occs {
		count[o.t.Name]++
		dup = dup || count[o.t.Name] > 1
	}
	if !dup {
		return nullable, nil
	}
	if renamed {
		return nil, unsupported("a distributed table read more than once, with its columns renamed, is not supported here").
			WithHint("Drop the column aliases (AS t(a, b)) and alias the columns in the select list.")
	}
	// resolve finds the occurrence whose distribution column cr names.
	resolve := func(n *pg_query.Node) int {
		cr := n.GetColumnRef()
		if cr == nil {
			return -1
		}
		names := ListNames(&pg_query.List{Items: cr.Fields})
		col := names[len(names)-1]
		found := -1
		for i, o := range occs {
			if o.t.DistColumn != col || len(names) >= 2 && names[len(names)-2] != o.name {
				continue
			}
			if found >= 0 {
				return -1
			}
			found = i
		}
		return found
	}
	parent := make([]int, len(occs))
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		for parent[i] != i {
			i = parent[i]
		}
		return i
	}
	var conj []*pg_query.Node
	for _, q := range quals {
		conj = flattenAnd(q, conj)
	}
	for _, c := range conj {
		e := c.GetAExpr()
		if e == nil || e.Kind != pg_query.A_Expr_Kind_AEXPR_OP || len(e.Name) != 1 || e.Name[0].GetString_().GetSval() != "=" {
			continue
		}
		if l, r := resolve(e.Lexpr), resolve(e.Rexpr); l >= 0 && r >= 0 {
			parent[find(l)] = find(r)
		}
	}
	for i := range occs {
		if find(i) != find(0) {
			return nil, unsupported("%s is read more than once, and %s is not joined to %s on the distribution column %q; a multi-shard self-join is supported only on the distribution column",
				occs[i].t.Name, occs[i].name, occs[0].name, occs[i].t.DistColumn).
				WithHint("Join them with %s.%s = %s.%s.", occs[0].name, occs[0].t.DistColumn, occs[i].name, occs[i].t.DistColumn)
		}
	}
	return nullable, nil
}

// qualifyUnnest makes unnest of one array pg_catalog's: a user's
// unnest(int[]) matches int[] better than pg_catalog.unnest(anyarray).
// With several arrays, unqualified unnest in FROM is PostgreSQL's syntax
// for ROWS FROM of pg_catalog.unnest of each, whatever else is named so.
func qualifyUnnest(un *pg_query.FuncCall) {
	if len(un.Args) == 1 {
		un.Funcname = []*pg_query.Node{pg_query.MakeStrNode("pg_catalog"), pg_query.MakeStrNode("unnest")}
	}
}

// hasSubLink reports whether an expression has a subquery.
func hasSubLink(n *pg_query.Node) bool {
	found := false
	Walk(n, func(m proto.Message) {
		if _, ok := m.(*pg_query.SubLink); ok {
			found = true
		}
	})
	return found
}

// stableTimeFuncs are the functions whose value is fixed for a statement
// (or transaction) in PostgreSQL, but taken separately by each worker.
var stableTimeFuncs = map[string]bool{"now": true, "transaction_timestamp": true, "statement_timestamp": true}

// stableTime finds a call of such a function (or CURRENT_TIMESTAMP and the
// like) in n; "" if none.
func stableTime(n proto.Message) string {
	name := ""
	Walk(n, func(m proto.Message) {
		switch v := m.(type) {
		case *pg_query.FuncCall:
			if f, builtin := funcName(v); builtin && stableTimeFuncs[f] {
				name = f + "()"
			}
		case *pg_query.SQLValueFunction:
			switch v.Op {
			case pg_query.SQLValueFunctionOp_SVFOP_CURRENT_ROLE, pg_query.SQLValueFunctionOp_SVFOP_CURRENT_USER,
				pg_query.SQLValueFunctionOp_SVFOP_USER, pg_query.SQLValueFunctionOp_SVFOP_SESSION_USER,
				pg_query.SQLValueFunctionOp_SVFOP_CURRENT_CATALOG, pg_query.SQLValueFunctionOp_SVFOP_CURRENT_SCHEMA:
			default:
				name = sqlValueNames[v.Op]
			}
		}
	})
	return name
}

// txTime finds a value fixed for the whole transaction in PostgreSQL (now(),
// CURRENT_TIMESTAMP, CURRENT_DATE, 'now'::timestamptz, ...); "" if none.
// In a transaction block a multi-shard statement's connections other than
// the transaction's would each read their own moment, not the
// transaction's start.
func txTime(n proto.Message) string {
	name := ""
	Walk(n, func(m proto.Message) {
		if name != "" {
			return
		}
		switch v := m.(type) {
		case *pg_query.FuncCall:
			if f, builtin := funcName(v); builtin && (f == "now" || f == "transaction_timestamp") {
				name = f + "()"
			}
		case *pg_query.SQLValueFunction:
			switch v.Op {
			case pg_query.SQLValueFunctionOp_SVFOP_CURRENT_DATE, pg_query.SQLValueFunctionOp_SVFOP_CURRENT_TIME,
				pg_query.SQLValueFunctionOp_SVFOP_CURRENT_TIME_N, pg_query.SQLValueFunctionOp_SVFOP_CURRENT_TIMESTAMP,
				pg_query.SQLValueFunctionOp_SVFOP_CURRENT_TIMESTAMP_N, pg_query.SQLValueFunctionOp_SVFOP_LOCALTIME,
				pg_query.SQLValueFunctionOp_SVFOP_LOCALTIME_N, pg_query.SQLValueFunctionOp_SVFOP_LOCALTIMESTAMP,
				pg_query.SQLValueFunctionOp_SVFOP_LOCALTIMESTAMP_N:
				name = sqlValueNames[v.Op]
			}
		case *pg_query.A_Const:
			if s := v.GetSval(); s != nil && TimeWord(s.Sval) {
				name = "'" + s.Sval + "'"
			}
		}
	})
	return name
}

func errStableTime(name string) error {
	return unsupported("%s in the select list, GROUP BY, HAVING, ORDER BY or DISTINCT of a multi-shard query is not supported: each worker would give its own value", name).
		WithHint("Compute the time in the client and pass it as a parameter.")
}

func (b *builder) hasDist(n *pg_query.Node) bool {
	found := false
	Walk(n, func(m proto.Message) {
		if rv, ok := m.(*pg_query.RangeVar); ok {
			if t := lookup(b.cat, rv, b.ctes); t != nil && t.Kind == metadata.Distributed {
				found = true
			}
		}
	})
	return found
}

// analysis is the planning of one multi-shard SELECT's merge.
type analysis struct {
	b      *builder
	sel    *pg_query.SelectStmt
	single bool // one plain table in FROM: unqualified and qualified columns are the same
	agg    bool // aggregates, GROUP BY or HAVING
	local  bool // grouped by a distribution column: every group lives in one shard
	// nullable: distributed tables on the nullable side of an outer join
	// (by name, and "column:" + distribution column), whose distribution
	// column can be NULL in rows of every shard.
	nullable map[string]bool
	names    []string
	// compared: the expressions a row merge sorts or dedupes by.
	compared []*pg_query.Node

	// aggregate merges
	keys     []*pg_query.Node
	partials []*pg_query.Node
	partialN map[string]int
	aggs     []AggMerge
	mine     map[*pg_query.ColumnRef]bool // column references the rewrite made
	params   map[int32]int32
	order    []int
}

// check refuses what no merge can do and finds the query's shape.
func (a *analysis) check() error {
	sel := a.sel
	if len(sel.WindowClause) > 0 {
		return errWindow()
	}
	var err error
	for _, part := range a.topExprs() {
		eachNode(part, func(n *pg_query.Node) bool {
			if err != nil {
				return false
			}
			switch x := n.Node.(type) {
			case *pg_query.Node_SubLink:
				if a.subLinkAgg(x.SubLink) {
					err = unsupported("aggregates inside subqueries in the select list, HAVING or ORDER BY of a multi-shard query are not supported").
						WithHint("Move the subquery into FROM (a derived table or CTE) and join it.")
				}
				return false
			case *pg_query.Node_FuncCall:
				fc := x.FuncCall
				if fc.Over != nil {
					err = errWindow()
					return false
				}
				name, builtin := funcName(fc)
				if builtin && handledAggs[name] || fc.AggStar || fc.AggDistinct || fc.AggWithinGroup ||
					fc.AggFilter != nil || len(fc.AggOrder) > 0 || builtin && otherAggs[name] {
					a.agg = true
				}
			case *pg_query.Node_GroupingFunc:
				err = unsupported("GROUPING() over several shards is not supported yet").
					WithHint("Compute the groupings with UNION ALL of plain GROUP BY queries.")
			case *pg_query.Node_JsonObjectAgg, *pg_query.Node_JsonArrayAgg:
				a.agg = true // refused by the aggregate merge
			}
			return true
		})
	}
	if err != nil {
		return err
	}
	for _, g := range sel.GroupClause {
		if g.GetGroupingSet() != nil {
			return unsupported("GROUPING SETS, ROLLUP and CUBE over several shards are not supported yet").
				WithHint("Use UNION ALL of plain GROUP BY queries, or pin the query to one shard with WHERE <distribution column> = <value>.")
		}
	}
	if len(sel.GroupClause) > 0 || sel.HavingClause != nil {
		a.agg = true
	}
	for _, rt := range sel.TargetList {
		r := rt.GetResTarget()
		name := r.GetName()
		if name == "" {
			name = FigureColname(r.GetVal())
		}
		a.names = append(a.names, name)
	}
	if a.agg {
		for _, g := range sel.GroupClause {
			e := a.groupExpr(g)
			if c, ok := a.b.distColumn(e); ok && c != "" && !a.nullableColumn(e) {
				a.local = true
			}
		}
	}
	return nil
}

// nullableColumn reports whether a distribution column reference may be
// of a table on the nullable side of an outer join: its NULL group would
// be in every shard.
func (a *analysis) nullableColumn(e *pg_query.Node) bool {
	names := ListNames(&pg_query.List{Items: e.GetColumnRef().GetFields()})
	if len(names) >= 2 {
		return a.nullable[names[len(names)-2]]
	}
	return len(names) == 1 && a.nullable["column:"+names[0]]
}

func errWindow() *pgerr.Error {
	return unsupported("window functions over several shards are not supported yet").
		WithHint("Pin the query to one shard with WHERE <distribution column> = <value>.")
}

// topExprs are the parts of the SELECT evaluated after its rows are found.
func (a *analysis) topExprs() []*pg_query.Node {
	var out []*pg_query.Node
	for _, l := range [][]*pg_query.Node{a.sel.TargetList, a.sel.SortClause, a.sel.DistinctClause, a.sel.GroupClause} {
		for _, n := range l {
			if n != nil && n.Node != nil {
				out = append(out, n)
			}
		}
	}
	if a.sel.HavingClause != nil {
		out = append(out, a.sel.HavingClause)
	}
	return out
}

// subLinkAgg reports whether a subquery calls an aggregate (which could be
// an aggregate of the outer query) or a function that could be one.
func (a *analysis) subLinkAgg(s *pg_query.SubLink) bool {
	found := false
	Walk(s.Subselect, func(m proto.Message) {
		if fc, ok := m.(*pg_query.FuncCall); ok {
			name, builtin := funcName(fc)
			if builtin && (handledAggs[name] || otherAggs[name]) || fc.AggStar || fc.AggDistinct || fc.AggFilter != nil {
				found = true
			}
		}
		switch m.(type) {
		case *pg_query.JsonObjectAgg, *pg_query.JsonArrayAgg:
			found = true
		}
	})
	return found
}

// funcName is a function's name and whether it names PostgreSQL's own
// (unqualified or in pg_catalog).
func funcName(fc *pg_query.FuncCall) (string, bool) {
	names := ListNames(&pg_query.List{Items: fc.Funcname})
	if len(names) == 0 {
		return "", false
	}
	return names[len(names)-1], len(names) == 1 || names[0] == "pg_catalog"
}

// funcs lists the functions the select list, HAVING and ORDER BY call that
// the planner did not recognise as aggregates it merges.
func (a *analysis) funcs() []string {
	seen := map[string]bool{}
	for _, part := range a.topExprs() {
		Walk(part, func(m proto.Message) {
			if fc, ok := m.(*pg_query.FuncCall); ok {
				name, builtin := funcName(fc)
				if !(builtin && handledAggs[name] && a.agg) {
					seen[name] = true
				}
			}
		})
	}
	var out []string
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// targetFuncs lists the functions a select list calls, by name.
func targetFuncs(sel *pg_query.SelectStmt) []string {
	seen := map[string]bool{}
	for _, t := range sel.TargetList {
		Walk(t, func(m proto.Message) {
			if fc, ok := m.(*pg_query.FuncCall); ok {
				name, _ := funcName(fc)
				seen[name] = true
			}
		})
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// collationColumns lists the columns the merge compares ("*" for all):
// those of the sort keys and DISTINCT items of a row merge; those named in
// the select list, ORDER BY, DISTINCT, GROUP BY and HAVING of an aggregate
// merge.
func (a *analysis) collationColumns() []string {
	seen := map[string]bool{}
	parts := a.compared
	if a.agg && !a.local {
		parts = a.topExprs()
	}
	for _, part := range parts {
		Walk(part, func(m proto.Message) {
			if cr, ok := m.(*pg_query.ColumnRef); ok {
				last := cr.Fields[len(cr.Fields)-1]
				if last.GetAStar() != nil {
					seen["*"] = true
				} else if s := last.GetString_(); s != nil {
					seen[s.Sval] = true
				}
			}
		})
	}
	if seen["*"] {
		return []string{"*"}
	}
	var out []string
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// groupExpr resolves a GROUP BY item: a position names a select-list
// expression.
func (a *analysis) groupExpr(g *pg_query.Node) *pg_query.Node {
	if k, ok := position(g); ok && k >= 1 && k <= len(a.sel.TargetList) {
		return a.sel.TargetList[k-1].GetResTarget().GetVal()
	}
	return g
}

// plainSort reports whether every ORDER BY item of sel is a column (named,
// or by position or output name a select-list column), which PostgreSQL
// may read in order from an index and stop at the LIMIT; an expression is
// computed on every row to sort.
func plainSort(sel *pg_query.SelectStmt) bool {
	column := func(n *pg_query.Node) bool {
		cr := n.GetColumnRef()
		return cr != nil && cr.Fields[len(cr.Fields)-1].GetAStar() == nil
	}
	for _, sb := range sel.SortClause {
		n := sb.GetSortBy().GetNode()
		if i, ok := position(n); ok {
			if i < 1 || i > len(sel.TargetList) || !column(sel.TargetList[i-1].GetResTarget().GetVal()) {
				return false
			}
			continue
		}
		if !column(n) {
			return false
		}
	}
	return true
}

// position reports whether n is an integer constant (a select-list
// position in ORDER BY, GROUP BY and DISTINCT ON).
func position(n *pg_query.Node) (int, bool) {
	c := n.GetAConst()
	if c == nil || c.Isnull {
		return 0, false
	}
	if iv, ok := c.Val.(*pg_query.A_Const_Ival); ok {
		return int(iv.Ival.Ival), true
	}
	return 0, false
}

// plan builds the merge and the partial query the shards run.
func (a *analysis) plan() (*Merge, *pg_query.SelectStmt, error) {
	if err := a.checkPositions(); err != nil {
		return nil, nil, err
	}
	if a.agg && !a.local {
		// Keys and partial aggregates are computed by the shards, the rest
		// by the merge.
		m, partial, err := a.aggMerge()
		if err == nil {
			for _, n := range append(append([]*pg_query.Node{}, a.keys...), a.partials...) {
				if name := stableTime(n); name != "" {
					return nil, nil, errStableTime(name)
				}
			}
		}
		return m, partial, err
	}
	for _, n := range a.topExprs() {
		if name := stableTime(n); name != "" {
			return nil, nil, errStableTime(name)
		}
	}
	return a.rowMerge()
}

// checkPositions refuses a parameter where a select-list position may be:
// simple-protocol constants are lifted into parameters, and ORDER BY $1 is
// not ORDER BY 1. (The coordinator then plans the statement as written.)
func (a *analysis) checkPositions() error {
	items := append([]*pg_query.Node{}, a.sel.GroupClause...)
	items = append(items, a.sel.DistinctClause...)
	for _, s := range a.sel.SortClause {
		items = append(items, s.GetSortBy().GetNode())
	}
	for _, n := range items {
		if n != nil && n.GetParamRef() != nil {
			return unsupported("a parameter in ORDER BY, GROUP BY or DISTINCT ON of a multi-shard query is not supported").
				WithHint("Write the sort or grouping key in the statement's text.")
		}
	}
	return nil
}

// outputNamed finds the select-list position (1-based) of a bare name in
// ORDER BY or DISTINCT ON, which PostgreSQL matches against output names
// first; 0 if none matches.
func (a *analysis) outputNamed(n *pg_query.Node) (int, error) {
	cr := n.GetColumnRef()
	if cr == nil || len(cr.Fields) != 1 || cr.Fields[0].GetString_() == nil {
		return 0, nil
	}
	name := cr.Fields[0].GetString_().Sval
	found := 0
	for i, nm := range a.names {
		if nm != name {
			continue
		}
		if found != 0 && !a.equal(a.sel.TargetList[found-1].GetResTarget().GetVal(), a.sel.TargetList[i].GetResTarget().GetVal()) {
			return 0, pgerr.New("42702", "ORDER BY %q is ambiguous", name)
		}
		if found == 0 {
			found = i + 1
		}
	}
	return found, nil
}

// targetEqual finds a select-list expression equal to n (1-based), 0 if none.
func (a *analysis) targetEqual(n *pg_query.Node) int {
	for i, rt := range a.sel.TargetList {
		if a.equal(rt.GetResTarget().GetVal(), n) {
			return i + 1
		}
	}
	return 0
}

// rowMerge plans a query without aggregates across shards (or grouped by
// a distribution column): shards return rows, the merge orders, dedupes
// and limits them.
func (a *analysis) rowMerge() (*Merge, *pg_query.SelectStmt, error) {
	sel := a.sel
	partial := proto.Clone(sel).(*pg_query.SelectStmt)
	star := false
	for _, rt := range sel.TargetList {
		Walk(rt, func(m proto.Message) {
			if cr, ok := m.(*pg_query.ColumnRef); ok && cr.Fields[len(cr.Fields)-1].GetAStar() != nil {
				star = true
			}
		})
	}
	distinct := len(sel.DistinctClause) > 0
	distinctAll := distinct && sel.DistinctClause[0].GetNode() == nil
	limited := sel.LimitCount != nil && !isNull(sel.LimitCount)
	if len(sel.SortClause) == 0 && !distinct && sel.LimitOption != pg_query.LimitOption_LIMIT_OPTION_WITH_TIES {
		lim, off := valueOrNull(sel.LimitCount), valueOrNull(sel.LimitOffset)
		if (sel.LimitCount == nil || lim != nil) && (sel.LimitOffset == nil || off != nil) {
			m := &Merge{Kind: Concat}
			if sel.LimitCount != nil && !lim.Null {
				m.Limit = lim
			}
			if sel.LimitOffset != nil && !off.Null {
				m.Offset = off
			}
			pushLimit(partial, limited)
			m.ShardLimit = limited && plainSort(sel)
			return m, partial, nil
		}
	}

	if len(sel.TargetList) == 0 {
		return nil, nil, unsupported("a multi-shard query with an empty select list is supported only without ORDER BY and DISTINCT").
			WithHint("Select at least one column.")
	}
	// Sort keys and DISTINCT ON items become output columns (c_k) or hidden
	// columns the shards compute.
	var hidden []*pg_query.Node
	keys := map[int]bool{} // output columns the merge compares
	// ref resolves a sort or DISTINCT ON item; collated: it had a COLLATE,
	// which makes PostgreSQL read it as an expression over the input
	// columns, not a position or output name.
	ref := func(n *pg_query.Node, clause string, collated bool) (*pg_query.Node, error) {
		if k, ok := position(n); ok && !collated {
			if k < 1 || (!star && k > len(sel.TargetList)) {
				return nil, pgerr.New("42P10", "%s position %d is not in select list", clause, k)
			}
			if star {
				return nil, unsupported("ORDER BY or DISTINCT ON a position with * in the select list of a multi-shard query is not supported").
					WithHint("Name the column instead of its position.")
			}
			a.compared = append(a.compared, sel.TargetList[k-1])
			keys[k] = true
			return colRef("c" + strconv.Itoa(k)), nil
		}
		a.compared = append(a.compared, n)
		k, err := 0, error(nil)
		if !collated {
			k, err = a.outputNamed(n)
		}
		if err != nil {
			return nil, err
		}
		if k == 0 && !star {
			k = a.targetEqual(n)
		}
		if k > 0 && star {
			return nil, unsupported("ORDER BY or DISTINCT ON an output name with * in the select list of a multi-shard query is not supported").
				WithHint("ORDER BY the expression itself.")
		}
		if k > 0 {
			a.compared = append(a.compared, sel.TargetList[k-1])
			keys[k] = true
			return colRef("c" + strconv.Itoa(k)), nil
		}
		if distinctAll {
			return nil, unsupported("in a multi-shard SELECT DISTINCT, ORDER BY must name select-list columns").
				WithHint("ORDER BY the column's position or output name.")
		}
		for i, h := range hidden {
			if a.equal(h, n) {
				return colRef(mergeSchema, "h"+strconv.Itoa(i+1)), nil
			}
		}
		hidden = append(hidden, n)
		return colRef(mergeSchema, "h"+strconv.Itoa(len(hidden))), nil
	}
	tmpl := &pg_query.SelectStmt{LimitCount: cloneNode(sel.LimitCount), LimitOffset: cloneNode(sel.LimitOffset), LimitOption: sel.LimitOption}
	if !star {
		for i := range sel.TargetList {
			tmpl.TargetList = append(tmpl.TargetList, resTarget(colRef("c"+strconv.Itoa(i+1))))
		}
	}
	sorts, err := mergeSorts(sel.SortClause, ref)
	if err != nil {
		return nil, nil, err
	}
	tmpl.SortClause = sorts
	if distinctAll {
		tmpl.DistinctClause = []*pg_query.Node{{}}
		a.compared = append(a.compared, sel.TargetList...)
	} else {
		for _, d := range sel.DistinctClause {
			if err := noCollate(d); err != nil {
				return nil, nil, err
			}
			r, err := ref(d, "DISTINCT ON", false)
			if err != nil {
				return nil, nil, err
			}
			tmpl.DistinctClause = append(tmpl.DistinctClause, r)
		}
	}
	for _, rt := range sel.TargetList {
		if err := noCollate(rt.GetResTarget().GetVal()); err != nil {
			return nil, nil, err
		}
	}
	for i, h := range hidden {
		partial.TargetList = append(partial.TargetList, &pg_query.Node{Node: &pg_query.Node_ResTarget{ResTarget: &pg_query.ResTarget{
			Name: hiddenAlias + strconv.Itoa(i+1), Val: proto.Clone(h).(*pg_query.Node), Location: -1}}})
	}
	// Shards sort only to cut their rows at limit+offset, or to pick the
	// first row of each DISTINCT ON group.
	if !limited && !(distinct && !distinctAll) {
		partial.SortClause = nil
	}
	pushLimit(partial, limited)
	m := &Merge{Kind: SQLMerge, Hidden: len(hidden), tmpl: tmpl, fill: star && distinctAll, RowIDs: !distinctAll, ShardLimit: limited && plainSort(sel)}
	if m.RowIDs {
		tmpl.TargetList = []*pg_query.Node{resTarget(colRef("r"))}
		for k := 1; k <= len(sel.TargetList); k++ {
			if keys[k] {
				m.Keys = append(m.Keys, k)
				tmpl.TargetList = append(tmpl.TargetList, resTarget(colRef("c"+strconv.Itoa(k))))
			}
		}
	}
	if !star {
		m.Columns = len(sel.TargetList) + len(hidden)
	}
	if err := a.renumber(m); err != nil {
		return nil, nil, err
	}
	return m, partial, nil
}

// pushLimit makes the partial query return at most limit+offset rows (or
// every row without a limit) and drops its OFFSET.
func pushLimit(partial *pg_query.SelectStmt, limited bool) {
	if !limited {
		partial.LimitCount, partial.LimitOffset = nil, nil
		partial.LimitOption = pg_query.LimitOption_LIMIT_OPTION_DEFAULT
		return
	}
	if partial.LimitOffset != nil {
		l, lok := position(partial.LimitCount)
		o, ook := position(partial.LimitOffset)
		if lok && ook {
			partial.LimitCount = &pg_query.Node{Node: &pg_query.Node_AConst{AConst: &pg_query.A_Const{
				Val: &pg_query.A_Const_Fval{Fval: &pg_query.Float{Fval: strconv.FormatInt(int64(l)+int64(o), 10)}}, Location: -1}}}
			partial.LimitOffset = nil
			return
		}
		// LEAST(limit::int8::numeric + offset::int8::numeric, max bigint):
		// each rounded to bigint as PostgreSQL does, then added without
		// overflow (and without 'unknown + unknown' for quoted values).
		num := func(n *pg_query.Node) *pg_query.Node { return typeCast(typeCast(n, "int8"), "numeric") }
		sum := &pg_query.Node{Node: &pg_query.Node_AExpr{AExpr: &pg_query.A_Expr{
			Kind: pg_query.A_Expr_Kind_AEXPR_OP, Name: []*pg_query.Node{pg_query.MakeStrNode("+")},
			Lexpr: num(partial.LimitCount), Rexpr: num(partial.LimitOffset), Location: -1}}}
		maxInt8 := &pg_query.Node{Node: &pg_query.Node_AConst{AConst: &pg_query.A_Const{
			Val: &pg_query.A_Const_Fval{Fval: &pg_query.Float{Fval: "9223372036854775807"}}, Location: -1}}}
		partial.LimitCount = &pg_query.Node{Node: &pg_query.Node_MinMaxExpr{MinMaxExpr: &pg_query.MinMaxExpr{
			Op: pg_query.MinMaxOp_IS_LEAST, Args: []*pg_query.Node{sum, maxInt8}, Location: -1}}}
		partial.LimitOffset = nil
	}
}

// typeCast is CAST(n AS pg_catalog.typ).
func typeCast(n *pg_query.Node, typ string) *pg_query.Node {
	return &pg_query.Node{Node: &pg_query.Node_TypeCast{TypeCast: &pg_query.TypeCast{Arg: n,
		TypeName: &pg_query.TypeName{Names: []*pg_query.Node{pg_query.MakeStrNode("pg_catalog"), pg_query.MakeStrNode(typ)},
			Typemod: -1, Location: -1}, Location: -1}}}
}

func isNull(n *pg_query.Node) bool {
	c := n.GetAConst()
	return c != nil && c.Isnull
}

// valueOrNull is a LIMIT or OFFSET as a value: a constant, a parameter or
// NULL (LIMIT ALL); nil for anything else.
func valueOrNull(n *pg_query.Node) *Value {
	if n == nil {
		return nil
	}
	v := valueOf(n)
	if v == nil || v.Null || v.Param > 0 {
		return v
	}
	if _, err := strconv.ParseInt(v.Const, 10, 64); err != nil {
		return nil // 2.5 and the like: the SQL merge rounds as PostgreSQL does
	}
	return v
}

// noCollate refuses an explicit COLLATE where the merge would lose it.
func noCollate(n *pg_query.Node) error {
	found := false
	Walk(n, func(m proto.Message) {
		if _, ok := m.(*pg_query.CollateClause); ok {
			found = true
		}
	})
	if found {
		return unsupported("COLLATE in the select list, GROUP BY, DISTINCT, HAVING or inside an ORDER BY expression of a multi-shard query is not supported").
			WithHint("COLLATE may follow a whole ORDER BY item: ORDER BY name COLLATE \"C\".")
	}
	return nil
}

func colRef(fields ...string) *pg_query.Node {
	cr := &pg_query.ColumnRef{Location: -1}
	for _, f := range fields {
		cr.Fields = append(cr.Fields, pg_query.MakeStrNode(f))
	}
	return &pg_query.Node{Node: &pg_query.Node_ColumnRef{ColumnRef: cr}}
}

func resTarget(n *pg_query.Node) *pg_query.Node {
	return &pg_query.Node{Node: &pg_query.Node_ResTarget{ResTarget: &pg_query.ResTarget{Val: n, Location: -1}}}
}

func intConst(k int) *pg_query.Node {
	return &pg_query.Node{Node: &pg_query.Node_AConst{AConst: &pg_query.A_Const{
		Val: &pg_query.A_Const_Ival{Ival: &pg_query.Integer{Ival: int32(k)}}, Location: -1}}}
}

// aggMerge plans an aggregate query: shards group by the GROUP BY keys and
// compute partial aggregates; the merge groups again, combines them and
// applies HAVING, DISTINCT, ORDER BY and LIMIT.
func (a *analysis) aggMerge() (*Merge, *pg_query.SelectStmt, error) {
	sel := a.sel
	a.partialN = map[string]int{}
	a.mine = map[*pg_query.ColumnRef]bool{}
	for _, g := range sel.GroupClause {
		if err := noCollate(g); err != nil {
			return nil, nil, err
		}
		key := a.groupExpr(g)
		if cr := g.GetColumnRef(); cr != nil && len(cr.Fields) == 1 && cr.Fields[0].GetString_() != nil {
			name := cr.Fields[0].GetString_().Sval
			for _, rt := range sel.TargetList {
				r := rt.GetResTarget()
				if r.Name == name && !a.equal(r.Val, g) {
					return nil, nil, unsupported("GROUP BY %s could mean the select-list alias or a column of that name; a multi-shard query cannot tell", name).
						WithHint("GROUP BY the expression itself or its position.")
				}
			}
		}
		dup := false
		for _, k := range a.keys {
			if a.equal(k, key) {
				dup = true
			}
		}
		if !dup {
			a.keys = append(a.keys, key)
		}
	}
	tmpl := &pg_query.SelectStmt{LimitCount: cloneNode(sel.LimitCount), LimitOffset: cloneNode(sel.LimitOffset), LimitOption: sel.LimitOption}
	for _, rt := range sel.TargetList {
		r := rt.GetResTarget()
		if err := noCollate(r.Val); err != nil {
			return nil, nil, err
		}
		v, err := a.mergeExpr(r.Val)
		if err != nil {
			return nil, nil, err
		}
		tmpl.TargetList = append(tmpl.TargetList, resTarget(v))
	}
	if sel.HavingClause != nil {
		if err := noCollate(sel.HavingClause); err != nil {
			return nil, nil, err
		}
		v, err := a.mergeExpr(sel.HavingClause)
		if err != nil {
			return nil, nil, err
		}
		tmpl.HavingClause = v
	}
	// item resolves an ORDER BY or DISTINCT ON item; collated: see ref in
	// rowMerge.
	item := func(n *pg_query.Node, _ string, collated bool) (*pg_query.Node, error) {
		if collated {
			return a.mergeExpr(n)
		}
		if _, ok := position(n); ok {
			return proto.Clone(n).(*pg_query.Node), nil
		}
		k, err := a.outputNamed(n)
		if err != nil {
			return nil, err
		}
		if k > 0 {
			return intConst(k), nil
		}
		return a.mergeExpr(n)
	}
	sorts, err := mergeSorts(sel.SortClause, item)
	if err != nil {
		return nil, nil, err
	}
	tmpl.SortClause = sorts
	for _, d := range sel.DistinctClause {
		if d.GetNode() == nil {
			tmpl.DistinctClause = append(tmpl.DistinctClause, &pg_query.Node{})
			continue
		}
		if err := noCollate(d); err != nil {
			return nil, nil, err
		}
		r, err := item(d, "DISTINCT ON", false)
		if err != nil {
			return nil, nil, err
		}
		tmpl.DistinctClause = append(tmpl.DistinctClause, r)
	}
	if len(a.keys)+len(a.partials) == 0 {
		a.partial(&pg_query.FuncCall{Funcname: []*pg_query.Node{pg_query.MakeStrNode("count")}, AggStar: true,
			Funcformat: pg_query.CoercionForm_COERCE_EXPLICIT_CALL, Location: -1})
	}
	for i := range a.keys {
		tmpl.GroupClause = append(tmpl.GroupClause, colRef("c"+strconv.Itoa(i+1)))
	}
	partial := proto.Clone(sel).(*pg_query.SelectStmt)
	partial.TargetList = nil
	partial.GroupClause = nil
	for i, k := range a.keys {
		partial.TargetList = append(partial.TargetList, resTarget(proto.Clone(k).(*pg_query.Node)))
		partial.GroupClause = append(partial.GroupClause, intConst(i+1))
	}
	for _, p := range a.partials {
		partial.TargetList = append(partial.TargetList, resTarget(p))
	}
	partial.HavingClause, partial.SortClause, partial.DistinctClause = nil, nil, nil
	partial.LimitCount, partial.LimitOffset = nil, nil
	partial.LimitOption = pg_query.LimitOption_LIMIT_OPTION_DEFAULT
	nk := len(a.keys)
	for i := range a.aggs {
		for j := range a.aggs[i].Cols {
			a.aggs[i].Cols[j] += nk
		}
	}
	m := &Merge{Kind: SQLMerge, Columns: nk + len(a.partials), Aggregates: a.aggs, tmpl: tmpl}
	if err := a.renumber(m); err != nil {
		return nil, nil, err
	}
	return m, partial, nil
}

// partial adds a partial aggregate (deduplicated) and returns its index
// among the partials (1-based).
func (a *analysis) partial(fc *pg_query.FuncCall) int {
	n := &pg_query.Node{Node: &pg_query.Node_FuncCall{FuncCall: fc}}
	key, _ := deparseExpr(a.b.tree.Version, n)
	if i, ok := a.partialN[key]; ok {
		return i
	}
	a.partials = append(a.partials, n)
	a.partialN[key] = len(a.partials)
	return len(a.partials)
}

// deparseExpr is an expression's SQL text (as SELECT's single target).
func deparseExpr(version int32, n *pg_query.Node) (string, error) {
	s := &pg_query.SelectStmt{TargetList: []*pg_query.Node{resTarget(n)}, LimitOption: pg_query.LimitOption_LIMIT_OPTION_DEFAULT}
	sql, err := deparse(version, &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: s}})
	return strings.TrimPrefix(sql, "SELECT "), err
}

// mergeExpr rewrites an expression over the query's rows into one over the
// partial rows: GROUP BY keys become key columns, aggregates become
// placeholders that Render replaces; any other column is refused.
func (a *analysis) mergeExpr(n *pg_query.Node) (*pg_query.Node, error) {
	out := proto.Clone(n).(*pg_query.Node)
	var err error
	eachNode(out, func(x *pg_query.Node) bool {
		if err != nil {
			return false
		}
		for i, k := range a.keys {
			if a.equal(k, x) {
				c := colRef("c" + strconv.Itoa(i+1))
				a.mine[c.GetColumnRef()] = true
				x.Node = c.Node
				return false
			}
		}
		switch v := x.Node.(type) {
		case *pg_query.Node_FuncCall:
			fc := v.FuncCall
			name, builtin := funcName(fc)
			if !builtin || !handledAggs[name] {
				if builtin && otherAggs[name] || fc.AggStar || fc.AggDistinct || fc.AggFilter != nil || fc.AggWithinGroup || len(fc.AggOrder) > 0 {
					err = unsupported("the aggregate %s over several shards is not supported yet", name).
						WithHint("Supported across shards: count, sum, min, max, avg, bool_and, bool_or, bit_and, bit_or; or GROUP BY the distribution column.")
				}
				return true // a plain function: evaluated by the merge
			}
			if fc.AggDistinct {
				err = unsupported("%s(DISTINCT ...) over several shards is not supported yet", name).
					WithHint("GROUP BY the distribution column, or pin the query to one shard with WHERE <distribution column> = <value>.")
				return false
			}
			if fc.AggWithinGroup {
				err = unsupported("%s(...) WITHIN GROUP over several shards is not supported", name).
					WithHint("Pin the query to one shard with WHERE <distribution column> = <value>, or compute it over a subquery in FROM.")
				return false
			}
			var cols []int
			if name == "avg" {
				s := proto.Clone(fc).(*pg_query.FuncCall)
				s.Funcname = []*pg_query.Node{pg_query.MakeStrNode("sum")}
				c := proto.Clone(fc).(*pg_query.FuncCall)
				c.Funcname = []*pg_query.Node{pg_query.MakeStrNode("count")}
				cols = []int{a.partial(s), a.partial(c)}
			} else {
				cols = []int{a.partial(proto.Clone(fc).(*pg_query.FuncCall))}
			}
			if name == "every" {
				name = "bool_and"
			}
			a.aggs = append(a.aggs, AggMerge{Func: name, Cols: cols})
			x.Node = (&pg_query.Node{Node: &pg_query.Node_FuncCall{FuncCall: &pg_query.FuncCall{
				Funcname: []*pg_query.Node{pg_query.MakeStrNode(mergeSchema), pg_query.MakeStrNode("agg")},
				Args:     []*pg_query.Node{intConst(len(a.aggs))}, Funcformat: pg_query.CoercionForm_COERCE_EXPLICIT_CALL, Location: -1}}}).Node
			return false
		case *pg_query.Node_ColumnRef:
			if a.mine[v.ColumnRef] {
				return false
			}
			name, _ := deparseExpr(a.b.tree.Version, x)
			err = unsupported("%s must be in GROUP BY or inside an aggregate in a multi-shard query", name).
				WithHint("GROUP BY every column the select list, HAVING and ORDER BY use outside aggregates.")
			return false
		case *pg_query.Node_SubLink:
			err = unsupported("subqueries in the select list, HAVING or ORDER BY of a multi-shard aggregate query are not supported yet").
				WithHint("Move the subquery into FROM (a derived table or CTE) and join it.")
			return false
		case *pg_query.Node_JsonObjectAgg, *pg_query.Node_JsonArrayAgg:
			err = unsupported("JSON_OBJECTAGG and JSON_ARRAYAGG over several shards are not supported yet").
				WithHint("GROUP BY the distribution column, or pin the query to one shard with WHERE <distribution column> = <value>.")
			return false
		}
		return true
	})
	return out, err
}

// renumber gives the statement's parameters the merge template uses their
// merge numbers (Render adds the arrays' count).
func (a *analysis) renumber(m *Merge) error {
	// In the order of the statement's numbers: Walk's order of a
	// message's fields is not fixed.
	var refs []*pg_query.ParamRef
	seen := map[int32]int32{}
	Walk(m.tmpl, func(msg proto.Message) {
		if p, ok := msg.(*pg_query.ParamRef); ok {
			refs = append(refs, p)
			if _, ok := seen[p.Number]; !ok {
				seen[p.Number] = 0
				m.Params = append(m.Params, int(p.Number))
			}
		}
	})
	sort.Ints(m.Params)
	for i, k := range m.Params {
		seen[int32(k)] = int32(i + 1)
	}
	for _, p := range refs {
		p.Number = seen[p.Number]
	}
	return nil
}

// equal compares expressions as written, ignoring positions; a column
// named with and without its table is the same column when FROM has one
// table.
func (a *analysis) equal(x, y *pg_query.Node) bool {
	if x == nil || y == nil {
		return x == y
	}
	return proto.Equal(a.normal(x), a.normal(y))
}

func (a *analysis) normal(n *pg_query.Node) *pg_query.Node {
	c := proto.Clone(n).(*pg_query.Node)
	Walk(c, func(m proto.Message) {
		r := m.ProtoReflect()
		if fd := r.Descriptor().Fields().ByName("location"); fd != nil && fd.Kind() == protoreflect.Int32Kind {
			r.Clear(fd)
		}
		if cr, ok := m.(*pg_query.ColumnRef); ok && a.single && len(cr.Fields) == 2 && cr.Fields[1].GetString_() != nil {
			cr.Fields = cr.Fields[1:]
		}
	})
	return c
}

// eachNode calls fn for every Node of a tree, parents first; fn may replace
// the node's content, and returning false skips its children.
func eachNode(n proto.Message, fn func(*pg_query.Node) bool) {
	var visit func(m protoreflect.Message)
	visit = func(m protoreflect.Message) {
		if !m.IsValid() {
			return
		}
		if nd, ok := m.Interface().(*pg_query.Node); ok {
			if !fn(nd) {
				return
			}
			m = nd.ProtoReflect()
		}
		// In declaration order (Range's order is not fixed), so that
		// partial columns are numbered the same in every build.
		eachChild(m, visit)
	}
	visit(n.ProtoReflect())
}

// Render makes the merge statement for partial columns of the given types
// (PostgreSQL type names, as pg_type.typname; "" when unknown). Parameters
// $1 .. $n are the partial columns as arrays; the statement's parameters
// the merge uses follow.
func (m *Merge) Render(types []string) (string, error) {
	if m.Kind != SQLMerge {
		return "", pgerr.New(pgerr.Internal, "no merge statement for a %s merge", m.Kind)
	}
	n := len(types)
	if (m.Columns > 0 && n != m.Columns) || n <= m.Hidden {
		return "", pgerr.New(pgerr.Internal, "the shards returned %d columns, the plan expects %d", n, m.Columns)
	}
	out := n - m.Hidden
	s := proto.Clone(m.tmpl).(*pg_query.SelectStmt)
	if m.fill {
		for i := 1; i <= out; i++ {
			s.TargetList = append(s.TargetList, resTarget(colRef("c"+strconv.Itoa(i))))
		}
	}
	un := &pg_query.FuncCall{Funcname: []*pg_query.Node{pg_query.MakeStrNode("unnest")},
		Funcformat: pg_query.CoercionForm_COERCE_EXPLICIT_CALL, Location: -1}
	alias := &pg_query.Alias{Aliasname: "p"}
	arg := func(name string) {
		un.Args = append(un.Args, &pg_query.Node{Node: &pg_query.Node_ParamRef{ParamRef: &pg_query.ParamRef{Number: int32(len(un.Args) + 1), Location: -1}}})
		alias.Colnames = append(alias.Colnames, pg_query.MakeStrNode(name))
	}
	if m.RowIDs {
		arg("r")
	}
	for _, i := range m.Shipped(n) {
		arg("c" + strconv.Itoa(i))
	}
	arrays := int32(len(un.Args))
	qualifyUnnest(un)
	var err error
	eachNode(s, func(x *pg_query.Node) bool {
		if err != nil {
			return false
		}
		switch v := x.Node.(type) {
		case *pg_query.Node_ParamRef:
			v.ParamRef.Number += arrays
		case *pg_query.Node_ColumnRef:
			if f := v.ColumnRef.Fields; len(f) == 2 && f[0].GetString_().GetSval() == mergeSchema {
				h, _ := strconv.Atoi(strings.TrimPrefix(f[1].GetString_().GetSval(), "h"))
				x.Node = colRef("c" + strconv.Itoa(out+h)).Node
			}
		case *pg_query.Node_FuncCall:
			if f := v.FuncCall.Funcname; len(f) == 2 && f[0].GetString_().GetSval() == mergeSchema {
				k, _ := position(v.FuncCall.Args[0])
				var e *pg_query.Node
				if e, err = m.Aggregates[k-1].expr(types); err == nil {
					x.Node = e.Node
				}
				return false
			}
		}
		return true
	})
	if err != nil {
		return "", err
	}
	s.FromClause = []*pg_query.Node{{Node: &pg_query.Node_RangeFunction{RangeFunction: &pg_query.RangeFunction{
		Functions: []*pg_query.Node{{Node: &pg_query.Node_List{List: &pg_query.List{Items: []*pg_query.Node{
			{Node: &pg_query.Node_FuncCall{FuncCall: un}}, {}}}}}},
		Alias: alias}}}}
	return deparse(m.version, &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: s}})
}

// Shipped lists the partial columns (1-based, of n) the merge statement
// takes as arrays, in order (after the row numbers, with RowIDs).
func (m *Merge) Shipped(n int) []int {
	var out []int
	if !m.RowIDs {
		for i := 1; i <= n; i++ {
			out = append(out, i)
		}
		return out
	}
	out = append(out, m.Keys...)
	for j := 1; j <= m.Hidden; j++ {
		out = append(out, n-m.Hidden+j)
	}
	return out
}

// Arrays is the number of array parameters of the merge statement for n
// partial columns; the statement's own parameters follow them.
func (m *Merge) Arrays(n int) int {
	k := len(m.Shipped(n))
	if m.RowIDs {
		k++
	}
	return k
}

// expr is the merge expression of one aggregate, of the same type as the
// original aggregate's.
func (g AggMerge) expr(types []string) (*pg_query.Node, error) {
	col := func(i int) *pg_query.Node { return colRef("c" + strconv.Itoa(g.Cols[i])) }
	call := func(name string, arg *pg_query.Node) *pg_query.Node {
		return &pg_query.Node{Node: &pg_query.Node_FuncCall{FuncCall: &pg_query.FuncCall{
			Funcname: []*pg_query.Node{pg_query.MakeStrNode(name)}, Args: []*pg_query.Node{arg},
			Funcformat: pg_query.CoercionForm_COERCE_EXPLICIT_CALL, Location: -1}}}
	}
	cast := func(n *pg_query.Node, typ string) *pg_query.Node {
		return &pg_query.Node{Node: &pg_query.Node_TypeCast{TypeCast: &pg_query.TypeCast{Arg: n,
			TypeName: &pg_query.TypeName{Names: []*pg_query.Node{pg_query.MakeStrNode("pg_catalog"), pg_query.MakeStrNode(typ)},
				Typemod: -1, Location: -1}, Location: -1}}}
	}
	typ := func(i int) string {
		if c := g.Cols[i]; c >= 1 && c <= len(types) {
			return types[c-1]
		}
		return ""
	}
	switch g.Func {
	case "count":
		return cast(call("sum", col(0)), "int8"), nil
	case "sum":
		if typ(0) == "int8" { // sum(int2) and sum(int4) are bigint; a sum of bigints is numeric
			return cast(call("sum", col(0)), "int8"), nil
		}
		return call("sum", col(0)), nil
	case "avg":
		count := &pg_query.Node{Node: &pg_query.Node_AExpr{AExpr: &pg_query.A_Expr{Kind: pg_query.A_Expr_Kind_AEXPR_NULLIF,
			Name: []*pg_query.Node{pg_query.MakeStrNode("=")}, Lexpr: call("sum", col(1)), Rexpr: intConst(0), Location: -1}}}
		switch typ(0) {
		case "int8", "numeric", "":
			// avg(int) and avg(numeric) are numeric_div(sum, count), as here.
		case "float8", "interval":
			count = cast(count, "float8")
		case "float4":
			return nil, unsupported("avg of real values over several shards is not supported: PostgreSQL accumulates them in double precision").
				WithHint("Write avg(x::float8), which PostgreSQL computes the same way.")
		default:
			return nil, unsupported("avg of %s values over several shards is not supported", typ(0)).
				WithHint("Cast the argument: avg(x::numeric) or avg(x::float8).")
		}
		return &pg_query.Node{Node: &pg_query.Node_AExpr{AExpr: &pg_query.A_Expr{Kind: pg_query.A_Expr_Kind_AEXPR_OP,
			Name: []*pg_query.Node{pg_query.MakeStrNode("/")}, Lexpr: call("sum", col(0)), Rexpr: count, Location: -1}}}, nil
	default: // min, max, bool_and, bool_or, bit_and, bit_or, bit_xor: the same aggregate over the partials
		return call(g.Func, col(0)), nil
	}
}

// FigureColname is the column name PostgreSQL gives a select-list
// expression without an alias (parse_target.c's FigureColname).
func FigureColname(n *pg_query.Node) string {
	name, _ := figureColname(n)
	if name == "" {
		return "?column?"
	}
	return name
}

func figureColname(n *pg_query.Node) (string, int) {
	if n == nil {
		return "", 0
	}
	switch v := n.Node.(type) {
	case *pg_query.Node_ColumnRef:
		if s := v.ColumnRef.Fields[len(v.ColumnRef.Fields)-1].GetString_(); s != nil {
			return s.Sval, 2
		}
	case *pg_query.Node_AIndirection:
		ind := v.AIndirection.Indirection
		if s := ind[len(ind)-1].GetString_(); s != nil {
			return s.Sval, 2
		}
		return figureColname(v.AIndirection.Arg)
	case *pg_query.Node_FuncCall:
		name, _ := funcName(v.FuncCall)
		return name, 2
	case *pg_query.Node_AExpr:
		if v.AExpr.Kind == pg_query.A_Expr_Kind_AEXPR_NULLIF {
			return "nullif", 2
		}
	case *pg_query.Node_TypeCast:
		name, strength := figureColname(v.TypeCast.Arg)
		if strength <= 1 && v.TypeCast.TypeName != nil {
			names := v.TypeCast.TypeName.Names
			return names[len(names)-1].GetString_().GetSval(), 1
		}
		return name, strength
	case *pg_query.Node_CollateClause:
		return figureColname(v.CollateClause.Arg)
	case *pg_query.Node_GroupingFunc:
		return "grouping", 2
	case *pg_query.Node_SubLink:
		switch v.SubLink.SubLinkType {
		case pg_query.SubLinkType_EXISTS_SUBLINK:
			return "exists", 2
		case pg_query.SubLinkType_ARRAY_SUBLINK:
			return "array", 2
		case pg_query.SubLinkType_EXPR_SUBLINK:
			if s := v.SubLink.Subselect.GetSelectStmt(); s != nil && len(s.TargetList) > 0 {
				rt := s.TargetList[0].GetResTarget()
				if rt.Name != "" {
					return rt.Name, 2
				}
				if name, st := figureColname(rt.Val); st > 0 {
					return name, 2
				}
				return "?column?", 2
			}
		}
	case *pg_query.Node_CaseExpr:
		name, strength := figureColname(v.CaseExpr.Defresult)
		if strength <= 1 {
			return "case", 1
		}
		return name, strength
	case *pg_query.Node_AArrayExpr:
		return "array", 2
	case *pg_query.Node_RowExpr:
		return "row", 2
	case *pg_query.Node_CoalesceExpr:
		return "coalesce", 2
	case *pg_query.Node_MinMaxExpr:
		if v.MinMaxExpr.Op == pg_query.MinMaxOp_IS_GREATEST {
			return "greatest", 2
		}
		return "least", 2
	case *pg_query.Node_SqlvalueFunction:
		return sqlValueNames[v.SqlvalueFunction.Op], 2
	case *pg_query.Node_XmlExpr:
		return xmlNames[v.XmlExpr.Op], 2
	case *pg_query.Node_XmlSerialize:
		return "xmlserialize", 2
	}
	return "", 0
}

var sqlValueNames = map[pg_query.SQLValueFunctionOp]string{
	pg_query.SQLValueFunctionOp_SVFOP_CURRENT_DATE: "current_date", pg_query.SQLValueFunctionOp_SVFOP_CURRENT_TIME: "current_time",
	pg_query.SQLValueFunctionOp_SVFOP_CURRENT_TIME_N: "current_time", pg_query.SQLValueFunctionOp_SVFOP_CURRENT_TIMESTAMP: "current_timestamp",
	pg_query.SQLValueFunctionOp_SVFOP_CURRENT_TIMESTAMP_N: "current_timestamp", pg_query.SQLValueFunctionOp_SVFOP_LOCALTIME: "localtime",
	pg_query.SQLValueFunctionOp_SVFOP_LOCALTIME_N: "localtime", pg_query.SQLValueFunctionOp_SVFOP_LOCALTIMESTAMP: "localtimestamp",
	pg_query.SQLValueFunctionOp_SVFOP_LOCALTIMESTAMP_N: "localtimestamp", pg_query.SQLValueFunctionOp_SVFOP_CURRENT_ROLE: "current_role",
	pg_query.SQLValueFunctionOp_SVFOP_CURRENT_USER: "current_user", pg_query.SQLValueFunctionOp_SVFOP_USER: "user",
	pg_query.SQLValueFunctionOp_SVFOP_SESSION_USER: "session_user", pg_query.SQLValueFunctionOp_SVFOP_CURRENT_CATALOG: "current_catalog",
	pg_query.SQLValueFunctionOp_SVFOP_CURRENT_SCHEMA: "current_schema",
}

var xmlNames = map[pg_query.XmlExprOp]string{
	pg_query.XmlExprOp_IS_XMLCONCAT: "xmlconcat", pg_query.XmlExprOp_IS_XMLELEMENT: "xmlelement",
	pg_query.XmlExprOp_IS_XMLFOREST: "xmlforest", pg_query.XmlExprOp_IS_XMLPARSE: "xmlparse",
	pg_query.XmlExprOp_IS_XMLPI: "xmlpi", pg_query.XmlExprOp_IS_XMLROOT: "xmlroot",
	pg_query.XmlExprOp_IS_XMLSERIALIZE: "xmlserialize", pg_query.XmlExprOp_IS_DOCUMENT: "?column?",
}

// String is a short description of the merge, for EXPLAIN-like output.
func (m *Merge) String() string {
	if m.Kind == Concat {
		return fmt.Sprintf("concat (limit %v, offset %v)", m.Limit != nil, m.Offset != nil)
	}
	return "sql: " + m.SQL
}

// cloneNode copies a parse-tree node (nil stays nil): merge templates are
// renumbered in place and must not share nodes with the statement.
func cloneNode(n *pg_query.Node) *pg_query.Node {
	if n == nil {
		return nil
	}
	return proto.Clone(n).(*pg_query.Node)
}

// mergeSorts rewrites ORDER BY items for a merge statement: each item's
// expression becomes what ref makes of it (told whether the item had its
// own COLLATE, which stays on the item); a COLLATE anywhere else is refused.
func mergeSorts(items []*pg_query.Node, ref func(*pg_query.Node, string, bool) (*pg_query.Node, error)) ([]*pg_query.Node, error) {
	var out []*pg_query.Node
	for _, s := range items {
		sb := proto.Clone(s.GetSortBy()).(*pg_query.SortBy)
		expr := sb.Node
		var coll *pg_query.CollateClause
		if cc := expr.GetCollateClause(); cc != nil {
			coll, expr = cc, cc.Arg
		}
		if err := noCollate(expr); err != nil {
			return nil, err
		}
		r, err := ref(expr, "ORDER BY", coll != nil)
		if err != nil {
			return nil, err
		}
		if coll != nil {
			r = &pg_query.Node{Node: &pg_query.Node_CollateClause{CollateClause: &pg_query.CollateClause{Arg: r, Collname: coll.Collname, Location: -1}}}
		}
		sb.Node = r
		out = append(out, &pg_query.Node{Node: &pg_query.Node_SortBy{SortBy: sb}})
	}
	return out, nil
}
