package planner

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"

	"github.com/pgfleet/pgfleet/internal/pgerr"
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
				if t := lookup(b.cat, rv, b.ctes); t != nil && t.Kind == metadata.Distributed {
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
	r, _ := sp.Root.(*Scatter)
	switch {
	case sp.Kind() == KindRouter:
		src = sp.DistTable()
	case r != nil && r.Merge != nil && r.Merge.Kind == Concat && r.Merge.Limit == nil && r.Merge.Offset == nil:
		src = r.Table
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
	x := &MultiShardWrite{Table: target.Name, DistType: target.DistType,
		Mutability: perRowMutability(stmt, target.Name), Returning: len(ins.ReturningList) > 0}
	n := len(b.cat.Shards[target.Name])
	x.ShardSQL = make([]string, n)
	for i := range n {
		if x.ShardSQL[i], err = b.rewrite(stmt, i); err != nil {
			return nil, err
		}
	}
	return &Plan{Root: x, Tables: tableNames(stmt, b.cat)}, nil
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
		t := lookup(b.cat, x, b.ctes)
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

// SelectFirst is Build's answer to an INSERT ... SELECT that does not push
// down to the shards (the SELECT reads a reference, local or non-colocated
// table, crosses shards, or leaves sequence columns to their default; or
// the target is a reference or local table): the coordinator runs Select
// (the SELECT with the INSERT's WITH) first, as a query of its own in the
// statement's transaction, and then the INSERT with the rows it gave as
// VALUES (InsertWithRows), planned as any INSERT ... VALUES. As an error,
// it is a refusal (why it does not push down).
type SelectFirst struct {
	Select string
	// Untyped are the SELECT's columns that are a string constant or
	// NULL (as SQL, "" for the others): PostgreSQL gives them the
	// INSERT's column types, where the SELECT alone makes them text.
	Untyped []string
	// Catalog: the target is a distributed or reference table (else a
	// table of the default node), Target its catalog name.
	Catalog bool
	Target  string
	// Batchable: the rows may go in INSERTs of a part of them each, in
	// the one transaction, and mean what one INSERT of them all means.
	// Not with ON CONFLICT DO UPDATE (one statement fails on a row it
	// would update twice; two would update it twice), nor into a table of
	// the default node (its statement triggers fire once per statement).
	// A distributed table's statement is one per shard already. (A table
	// whose foreign key references itself is not either, which only
	// PostgreSQL knows: its key is checked at each INSERT's end, and a
	// row's referenced row may come in a later part.)
	Batchable bool
	err       *pgerr.Error
}

func (e *SelectFirst) Error() string { return e.err.Error() }
func (e *SelectFirst) Unwrap() error { return e.err }

// selectFirst is the SelectFirst of an INSERT ... SELECT refused for cause,
// or cause where its SELECT cannot run first: a WITH that writes (its
// writes and the INSERT's would be two statements), or a WITH that the
// INSERT's ON CONFLICT or RETURNING reads.
func (b *builder) selectFirst(ins *pg_query.InsertStmt, target *metadata.Table, cause error) error {
	var pe *pgerr.Error
	if !errors.As(cause, &pe) {
		return cause
	}
	sel := proto.Clone(ins.SelectStmt.GetSelectStmt()).(*pg_query.SelectStmt)
	writes := false
	Walk(ins, func(m proto.Message) {
		switch m.(type) {
		case *pg_query.InsertStmt, *pg_query.UpdateStmt, *pg_query.DeleteStmt, *pg_query.MergeStmt:
			writes = writes || m != ins
		}
	})
	if writes {
		return cause
	}
	if ins.WithClause != nil {
		reads := false
		Walk(&pg_query.InsertStmt{OnConflictClause: ins.OnConflictClause, ReturningList: ins.ReturningList}, func(m proto.Message) {
			switch m.(type) {
			case *pg_query.RangeVar, *pg_query.SubLink:
				reads = true
			}
		})
		if reads || sel.WithClause != nil {
			return cause
		}
		sel.WithClause = ins.WithClause
	}
	untyped, err := untypedColumns(b.tree.Version, sel)
	if err != nil {
		return cause
	}
	text, err := deparse(b.tree.Version, &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: sel}})
	if err != nil {
		return cause
	}
	update := ins.OnConflictClause != nil && ins.OnConflictClause.Action == pg_query.OnConflictAction_ONCONFLICT_UPDATE
	sf := &SelectFirst{Select: text, Untyped: untyped, Catalog: target != nil, Batchable: target != nil && !update, err: pe}
	if target != nil {
		sf.Target = target.Name
	}
	return sf
}

// untypedColumns are SelectFirst.Untyped for sel: a plain SELECT's target
// list read for string constants and NULLs, as far as the first * (after
// it the columns are not known here), that PostgreSQL leaves untyped: not
// those DISTINCT, DISTINCT ON, GROUP BY or ORDER BY name (by position,
// alias or the constant itself), which it resolves as text to compare
// them; none for a set operation, whose columns it resolves as text.
func untypedColumns(version int32, sel *pg_query.SelectStmt) ([]string, error) {
	if sel.Op != pg_query.SetOperation_SETOP_NONE || len(sel.DistinctClause) > 0 && sel.DistinctClause[0].GetNode() == nil {
		return nil, nil
	}
	var keys []*pg_query.Node
	keys = append(keys, sel.GroupClause...)
	keys = append(keys, sel.DistinctClause...)
	for _, n := range sel.SortClause {
		keys = append(keys, n.GetSortBy().GetNode())
	}
	out := make([]string, len(sel.TargetList))
	found := false
	for i, t := range sel.TargetList {
		rt := t.GetResTarget()
		v := rt.GetVal()
		if cr := v.GetColumnRef(); cr != nil && cr.Fields[len(cr.Fields)-1].GetAStar() != nil {
			break
		}
		c := v.GetAConst()
		if c == nil || !c.Isnull && c.GetSval() == nil {
			continue
		}
		text, err := deparseExpr(version, v)
		if err != nil {
			return nil, err
		}
		compared := slices.ContainsFunc(keys, func(k *pg_query.Node) bool {
			if kc := k.GetAConst(); kc != nil && kc.GetIval() != nil {
				return int(kc.GetIval().Ival) == i+1
			}
			if cr := k.GetColumnRef(); cr != nil && len(cr.Fields) == 1 && rt.Name != "" {
				return cr.Fields[0].GetString_().GetSval() == rt.Name
			}
			kt, err := deparseExpr(version, k)
			return err == nil && kt == text
		})
		if !compared {
			out[i], found = text, true
		}
	}
	if !found {
		return nil, nil
	}
	return out, nil
}

// InsertWithNoRows is an INSERT ... SELECT (SelectFirst) whose SELECT gave
// no rows, as PostgreSQL would run it: with SELECT exprs WHERE false in
// its place, which checks the statement and inserts nothing.
func InsertWithNoRows(sql string, exprs []string) (string, error) {
	tree, err := pg_query.Parse(sql)
	if err != nil || len(tree.Stmts) != 1 || tree.Stmts[0].Stmt.GetInsertStmt() == nil {
		return "", pgerr.New(pgerr.Internal, "not one INSERT statement")
	}
	ins := tree.Stmts[0].Stmt.GetInsertStmt()
	ins.WithClause = nil
	where, err := parseExpr("false")
	if err != nil {
		return "", err
	}
	sel := &pg_query.SelectStmt{WhereClause: where, LimitOption: pg_query.LimitOption_LIMIT_OPTION_DEFAULT}
	for _, e := range exprs {
		n, err := parseExpr(e)
		if err != nil {
			return "", err
		}
		sel.TargetList = append(sel.TargetList, resTarget(n))
	}
	ins.SelectStmt = &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: sel}}
	return deparse(tree.Version, tree.Stmts[0].Stmt)
}

// InsertWithRows is an INSERT ... SELECT (SelectFirst) with rows, each a
// list of SQL expressions, as its VALUES instead of the SELECT (and its
// WITH, which only the SELECT read).
func InsertWithRows(sql string, rows [][]string) (string, error) {
	tree, err := pg_query.Parse(sql)
	if err != nil || len(tree.Stmts) != 1 || tree.Stmts[0].Stmt.GetInsertStmt() == nil || len(rows) == 0 {
		return "", pgerr.New(pgerr.Internal, "not one INSERT statement with rows")
	}
	ins := tree.Stmts[0].Stmt.GetInsertStmt()
	ins.WithClause = nil
	// A marker row, replaced in the text by the rows.
	var nonce [12]byte
	_, _ = rand.Read(nonce[:])
	marker := "pgfleet_rows_" + hex.EncodeToString(nonce[:])
	ins.SelectStmt = &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: &pg_query.SelectStmt{
		ValuesLists: []*pg_query.Node{{Node: &pg_query.Node_List{List: &pg_query.List{Items: []*pg_query.Node{
			pg_query.MakeAConstStrNode(marker, -1)}}}}},
		LimitOption: pg_query.LimitOption_LIMIT_OPTION_DEFAULT}}}
	text, err := deparse(tree.Version, tree.Stmts[0].Stmt)
	if err != nil {
		return "", err
	}
	before, after, ok := strings.Cut(text, "VALUES ('"+marker+"')")
	if !ok || strings.Contains(after, marker) {
		return "", pgerr.New(pgerr.Internal, "cannot place the rows in %s", text)
	}
	var out strings.Builder
	out.WriteString(before)
	out.WriteString("VALUES ")
	for i, r := range rows {
		if i > 0 {
			out.WriteString(", ")
		}
		out.WriteString("(")
		out.WriteString(strings.Join(r, ", "))
		out.WriteString(")")
	}
	out.WriteString(after)
	return out.String(), nil
}
