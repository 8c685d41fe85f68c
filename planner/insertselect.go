package planner

import (
	"slices"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"

	"github.com/pgfleet/pgfleet/metadata"
)

// errInsertSelect is the refusal of an INSERT ... SELECT that does not push
// down to the shards.
func errInsertSelect(why string) error {
	return unsupported("INSERT ... SELECT into a distributed table is supported when each shard's rows come from the colocated shards; here %s", why).
		WithHint("Select from tables colocated with the target, joined on their distribution columns, with the source's distribution column in the target's; or insert the rows with INSERT ... VALUES or COPY.")
}

// insertSelect plans INSERT INTO t ... SELECT ... by pushing it down to
// the shards (a MultiShardWrite): shard i of t takes what the SELECT gives
// over shard i of its tables. That is the statement's answer when the
// SELECT reads tables colocated with t, joined on their distribution
// columns, with no step that crosses shards (LIMIT, OFFSET, window
// functions, set operations, DISTINCT ON, grouping sets, an aggregate of
// several shards: the SELECT plans as a concatenation of the shards'
// rows), and gives t's distribution column the source's own: every row it
// makes on shard i then belongs to shard i of t. Groups share their
// distribution value (PostgreSQL requires the column grouped or
// functionally dependent on the grouping), so GROUP BY stays on a shard.
func (b *builder) insertSelect(stmt *pg_query.Node, ins *pg_query.InsertStmt, target *metadata.Table) (*Plan, error) {
	if target == nil || target.Kind != metadata.Distributed {
		return nil, unsupported("INSERT ... SELECT into reference tables is not supported yet").
			WithHint("Insert the rows with INSERT ... VALUES or COPY.")
	}
	sel := ins.SelectStmt.GetSelectStmt()
	switch {
	case ins.WithClause != nil || sel.WithClause != nil:
		return nil, errInsertSelect("it has WITH")
	case sel.Op != pg_query.SetOperation_SETOP_NONE:
		return nil, errInsertSelect("the SELECT is a set operation")
	case sel.LimitCount != nil || sel.LimitOffset != nil:
		return nil, errInsertSelect("the SELECT has LIMIT or OFFSET")
	case len(sel.DistinctClause) > 0 && sel.DistinctClause[0] != nil:
		return nil, errInsertSelect("the SELECT has DISTINCT ON")
	case len(sel.LockingClause) > 0:
		return nil, errInsertSelect("the SELECT locks rows")
	}
	if err := conflictMovesRow(ins, target); err != nil {
		return nil, err
	}
	if oc := ins.OnConflictClause; oc != nil {
		// DO UPDATE runs on each shard: a subquery there would read one
		// shard of a distributed table.
		var dist bool
		Walk(oc, func(m proto.Message) {
			if rv, ok := m.(*pg_query.RangeVar); ok {
				if t := lookup(b.cat, rv, nil); t != nil && t.Kind == metadata.Distributed {
					dist = true
				}
			}
		})
		if dist {
			return nil, errInsertSelect("its ON CONFLICT clause reads a distributed table")
		}
	}
	var cross string
	Walk(sel, func(m proto.Message) {
		switch x := m.(type) {
		case *pg_query.FuncCall:
			if x.Over != nil {
				cross = "the SELECT has a window function"
			}
		case *pg_query.GroupingSet:
			cross = "the SELECT has grouping sets"
		case *pg_query.RangeTableSample:
			cross = "the SELECT samples a table"
		}
	})
	if cross != "" {
		return nil, errInsertSelect(cross)
	}
	if len(ins.Cols) == 0 {
		return nil, errInsertSelect("the INSERT has no column list")
	}
	pos := slices.IndexFunc(ins.Cols, func(c *pg_query.Node) bool { return c.GetResTarget().GetName() == target.DistColumn })
	if pos < 0 || pos >= len(sel.TargetList) {
		return nil, errInsertSelect("the SELECT does not give the distribution column " + target.DistColumn)
	}
	for _, t := range sel.TargetList {
		if cr := t.GetResTarget().GetVal().GetColumnRef(); cr != nil && cr.Fields[len(cr.Fields)-1].GetAStar() != nil {
			return nil, errInsertSelect("the SELECT has *")
		}
	}
	if name := writeTime(stmt); name != "" {
		return nil, errInsertSelect("it reads " + name + ", which each worker would give its own value of")
	}

	// The SELECT alone must be a concatenation of the shards' rows.
	sp, err := b.plan(&pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: sel}})
	if err != nil {
		if isUnsupported(err) {
			return nil, errInsertSelect("the SELECT is not answered shard by shard")
		}
		return nil, err
	}
	var src string
	switch {
	case sp.Kind == Router:
		src = sp.DistTable
	case sp.Kind == MultiShard && sp.Scatter != nil && sp.Scatter.Merge != nil && sp.Scatter.Merge.Kind == Concat &&
		sp.Scatter.Merge.Limit == nil && sp.Scatter.Merge.Offset == nil:
		src = sp.Scatter.Table
	default:
		return nil, errInsertSelect("the SELECT is not answered shard by shard")
	}
	if st := b.cat.Table(src); st == nil || st.ColocationID != target.ColocationID {
		return nil, errInsertSelect("the SELECT reads tables not colocated with " + target.Name)
	}
	// The target's distribution column is the source's: a column of a
	// distributed table colocated with the target, named with its table
	// unless the SELECT reads that table alone.
	cr := sel.TargetList[pos].GetResTarget().GetVal().GetColumnRef()
	if cr == nil || !b.sourceDistColumn(sel, cr, target) {
		return nil, errInsertSelect("the SELECT's value for " + target.DistColumn + " is not the distribution column of a colocated table it reads")
	}

	if err := b.shardLocal(stmt, "INSERT ... SELECT", target); err != nil {
		return nil, err
	}
	p := &Plan{Kind: MultiShardWrite, DistTable: target.Name, DistType: target.DistType,
		Mutability: perRowMutability(stmt, target.Name), Returning: len(ins.ReturningList) > 0}
	p.Tables = tableNames(stmt, b.cat)
	n := len(b.cat.Shards[target.Name])
	p.ShardSQL = make([]string, n)
	for i := range n {
		if p.ShardSQL[i], err = b.rewrite(stmt, i); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// sourceDistColumn reports whether cr names the distribution column of a
// distributed table the SELECT reads in its FROM (directly, not in a
// subquery), colocated with target.
func (b *builder) sourceDistColumn(sel *pg_query.SelectStmt, cr *pg_query.ColumnRef, target *metadata.Table) bool {
	var names []string
	for _, f := range cr.Fields {
		if f.GetString_() == nil {
			return false
		}
		names = append(names, f.GetString_().Sval)
	}
	col := names[len(names)-1]
	qual := names[:len(names)-1]
	single := len(sel.FromClause) == 1 && sel.FromClause[0].GetRangeVar() != nil
	found := false
	var visit func(f *pg_query.Node)
	visit = func(f *pg_query.Node) {
		if j := f.GetJoinExpr(); j != nil {
			if j.Alias == nil { // an aliased join hides its tables' names
				visit(j.Larg)
				visit(j.Rarg)
			}
			return
		}
		x := f.GetRangeVar()
		if x == nil {
			return // a subquery or function: its tables are not in scope
		}
		t := lookup(b.cat, x, nil)
		if t == nil || t.Kind != metadata.Distributed || t.ColocationID != target.ColocationID || t.DistColumn != col || colAliases(x) {
			return // (renamed columns: which is the distribution column is not known)
		}
		switch {
		case len(qual) == 0:
			found = found || single
		case len(qual) == 1 && x.Alias != nil:
			found = found || qual[0] == x.Alias.Aliasname
		case len(qual) == 1:
			found = found || qual[0] == x.Relname
		}
	}
	for _, f := range sel.FromClause {
		visit(f)
	}
	return found
}
