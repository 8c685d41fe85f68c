package planner

import (
	"fmt"
	"sort"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
)

// Gathering is how a read-only SELECT that no merge of per-shard results
// answers still gets PostgreSQL's answer: the distributed table's rows are
// gathered from its shards (each worker runs SELECT * over its shards, in
// binary) and the whole statement runs once, on the worker holding the
// first shard, with each use of the table replaced by those rows (unnest of
// one array parameter per column). Window functions, count(DISTINCT),
// string_agg, percentile_*, set operations, subqueries and CTEs over the
// table then behave exactly as on PostgreSQL, errors included: the shards
// evaluate nothing. The rows gathered are bounded (54000 past the limit).

// gatherTable is the placeholder schema of a gathered table's uses in the
// merge template; Render replaces them with the rows.
const gatherTable = "gathered"

// gather plans stmt by gathering, or returns cause (the refusal it
// replaces) when it cannot: stmt must be a SELECT reading exactly one
// distributed table, besides reference tables, CTEs and functions.
func (b *builder) gather(stmt *pg_query.Node, cause error) (*Plan, error) {
	sel := stmt.GetSelectStmt()
	if sel == nil {
		return nil, cause
	}
	ctes := cteNames(stmt)
	for name := range ctes {
		if b.cat.Table("public."+name) != nil {
			return nil, cause // which uses are the CTE's is a question of scope
		}
	}
	var dist *metadata.Table
	var refuse error
	maxParam := int32(0)
	Walk(stmt, func(m proto.Message) {
		if refuse != nil {
			return
		}
		switch x := m.(type) {
		case *pg_query.SelectStmt:
			if len(x.LockingClause) > 0 || x.IntoClause != nil {
				refuse = cause
			}
		case *pg_query.CommonTableExpr:
			if x.Ctequery.GetSelectStmt() == nil {
				refuse = cause // a data-modifying WITH
			}
		case *pg_query.RangeTableSample:
			refuse = cause // gathered rows are not a table to sample
		case *pg_query.RangeVar:
			t := lookup(b.cat, x, ctes)
			switch {
			case t == nil && x.Schemaname == "" && ctes[x.Relname]:
			case t == nil:
				refuse = unsupported("%s reads %s, which is not a distributed or reference table, besides distributed tables", StatementName(stmt), x.Relname).
					WithHint("Read the local table in a statement of its own.")
			case t.Kind == metadata.Reference:
			case dist == nil:
				dist = t
			case dist.Name != t.Name:
				refuse = cause
			}
		case *pg_query.ParamRef:
			if x.Number > maxParam {
				maxParam = x.Number
			}
		}
	})
	if refuse != nil {
		return nil, refuse
	}
	if dist == nil {
		return nil, cause
	}
	shards := b.cat.Shards[dist.Name]
	if len(shards) == 0 {
		return nil, pgerr.New(pgerr.Internal, "%s has no shards", dist.Name)
	}

	// The template: the statement, each use of the table a placeholder
	// under the name the statement's columns use for it.
	tmpl := proto.Clone(sel).(*pg_query.SelectStmt)
	tctes := cteNames(&pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: tmpl}})
	var aliases []string
	Walk(tmpl, func(m proto.Message) {
		rv, ok := m.(*pg_query.RangeVar)
		if !ok || refuse != nil {
			return
		}
		t := lookup(b.cat, rv, tctes)
		if t == nil {
			return
		}
		if rv.Alias == nil {
			rv.Alias = &pg_query.Alias{Aliasname: rv.Relname}
		}
		if t.Kind == metadata.Reference {
			// Its copy on the worker (the logical table there, on the
			// default node, is empty).
			rv.Relname = metadata.ShardName(rv.Relname, b.cat.Shards[t.Name][0].ID)
			return
		}
		aliases = append(aliases, rv.Alias.Aliasname)
		rv.Schemaname, rv.Relname = mergeSchema, gatherTable
		if !rv.Inh {
			refuse = unsupported("ONLY %s in a multi-shard query is not supported", dist.Name)
		}
	})
	if refuse != nil {
		return nil, refuse
	}
	if err := wholeRows(tmpl, aliases); err != nil {
		return nil, err
	}

	p := &Plan{Kind: MultiShard, DistTable: dist.Name, DistType: dist.DistType, ReadOnly: true}
	seen := map[string]bool{}
	Walk(stmt, func(m proto.Message) {
		if rv, ok := m.(*pg_query.RangeVar); ok {
			if t := lookup(b.cat, rv, ctes); t != nil && !seen[t.Name] {
				seen[t.Name] = true
				p.Tables = append(p.Tables, t.Name)
			}
		}
	})
	sort.Strings(p.Tables)
	first, err := b.rewrite(stmt, 0)
	if err != nil {
		return nil, err
	}
	p.ShardSQL = []string{first}

	m := &Merge{Kind: SQLMerge, Gather: true, tmpl: tmpl, version: b.tree.Version}
	for k := 1; k <= int(maxParam); k++ {
		m.Params = append(m.Params, k)
	}
	schema, rel, _ := strings.Cut(dist.Name, ".")
	sc := &Scatter{Table: dist.Name, Merge: m,
		// The columns' collations are read once (check) and applied.
		CheckCollation: []string{"*"},
		CheckRelations: []string{quoteIdent(schema) + "." + quoteIdent(metadata.ShardName(rel, shards[0].ID))}}
	all := &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: &pg_query.SelectStmt{
		TargetList: []*pg_query.Node{resTarget(&pg_query.Node{Node: &pg_query.Node_ColumnRef{ColumnRef: &pg_query.ColumnRef{
			Fields: []*pg_query.Node{{Node: &pg_query.Node_AStar{AStar: &pg_query.A_Star{}}}}}}})},
		FromClause:  []*pg_query.Node{{Node: &pg_query.Node_RangeVar{RangeVar: &pg_query.RangeVar{Schemaname: schema, Relname: rel, Inh: true, Relpersistence: "p"}}}},
		LimitOption: pg_query.LimitOption_LIMIT_OPTION_DEFAULT}}}
	if sc.Workers, err = b.workerQueries(all, shards, dist.Name); err != nil {
		return nil, err
	}
	// For reading plans: the uses of the table as placeholders.
	m.SQL, _ = deparse(b.tree.Version, &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: tmpl}})
	sc.TxTime = txTime(stmt)
	p.Scatter = sc
	return p, nil
}

// systemColumn: the gathered rows have none of these.
var systemColumn = map[string]bool{"ctid": true, "xmin": true, "xmax": true, "cmin": true, "cmax": true, "tableoid": true}

// wholeRows refuses a use of the gathered table as a whole row (t, t.* in
// an expression; over the gathered rows it would be a record, not the
// table's row type) and system columns (the gathered rows have none).
func wholeRows(s *pg_query.SelectStmt, aliases []string) error {
	var err error
	top := map[*pg_query.ColumnRef]bool{}
	Walk(s, func(m proto.Message) {
		if sel, ok := m.(*pg_query.SelectStmt); ok {
			for _, t := range sel.TargetList {
				if cr := t.GetResTarget().GetVal().GetColumnRef(); cr != nil {
					top[cr] = true
				}
			}
		}
	})
	Walk(s, func(m proto.Message) {
		cr, ok := m.(*pg_query.ColumnRef)
		if !ok || err != nil {
			return
		}
		f := cr.Fields
		name := f[0].GetString_().GetSval()
		whole := len(f) == 1 && name != ""
		star := len(f) == 2 && f[1].GetAStar() != nil && !top[cr]
		if last := f[len(f)-1].GetString_().GetSval(); systemColumn[last] {
			err = unsupported("system column %s in a multi-shard query that gathers rows is not supported", last).
				WithHint("Name it in a query pinned to one shard.")
			return
		}
		for _, a := range aliases {
			if (whole || star) && name == a {
				err = unsupported("the whole row of %s in an expression of a multi-shard query is not supported", a).
					WithHint("Name the columns.")
			}
		}
	})
	return err
}

// RenderGather is a gathering merge's statement for the table's columns
// (names) of the given types: each use of the table becomes unnest of the
// column arrays, $1 .. $n, under the use's alias; the statement's own
// parameters follow.
//
// collations maps a column name to its collation (qualified and quoted)
// where that is not the database default: unnest's columns have the
// default, so those columns are selected with COLLATE from a subquery.
func (m *Merge) RenderGather(types, names []string, collations map[string]string) (string, error) {
	if !m.Gather || len(types) != len(names) {
		return "", pgerr.New(pgerr.Internal, "no gathering merge for these columns")
	}
	var collated *pg_query.Node // SELECT c1, c2 COLLATE x, ... FROM unnest(...) u(c1, ...)
	if len(collations) > 0 {
		var sel, from, cs []string
		for i, n := range names {
			c := fmt.Sprintf("c%d", i+1)
			cs = append(cs, c)
			from = append(from, fmt.Sprintf("$%d", i+1))
			if coll, ok := collations[n]; ok {
				c += " COLLATE " + coll
			}
			sel = append(sel, c)
		}
		fn := "unnest" // see qualifyUnnest
		if len(names) == 1 {
			fn = "pg_catalog.unnest"
		}
		tree, err := pg_query.Parse("SELECT " + strings.Join(sel, ", ") + " FROM " + fn + "(" + strings.Join(from, ", ") + ") AS u(" + strings.Join(cs, ", ") + ")")
		if err != nil || len(tree.Stmts) != 1 {
			return "", pgerr.New(pgerr.Internal, "the gathered columns' collations: %v", err)
		}
		collated = tree.Stmts[0].Stmt
	}
	s := proto.Clone(m.tmpl).(*pg_query.SelectStmt)
	arrays := int32(len(types))
	eachNode(s, func(x *pg_query.Node) bool {
		switch v := x.Node.(type) {
		case *pg_query.Node_ParamRef:
			v.ParamRef.Number += arrays
		case *pg_query.Node_RangeVar:
			rv := v.RangeVar
			if rv.Schemaname != mergeSchema || rv.Relname != gatherTable {
				return true
			}
			// Unqualified: PostgreSQL reads unnest of several arrays in FROM as
			// ROWS FROM of one unnest per array, whatever else is named unnest.
			un := &pg_query.FuncCall{Funcname: []*pg_query.Node{pg_query.MakeStrNode("unnest")},
				Funcformat: pg_query.CoercionForm_COERCE_EXPLICIT_CALL, Location: -1}
			alias := &pg_query.Alias{Aliasname: rv.Alias.Aliasname}
			for i := range types {
				un.Args = append(un.Args, &pg_query.Node{Node: &pg_query.Node_ParamRef{ParamRef: &pg_query.ParamRef{Number: int32(i + 1), Location: -1}}})
				if i >= len(rv.Alias.Colnames) {
					alias.Colnames = append(alias.Colnames, pg_query.MakeStrNode(names[i]))
				}
			}
			qualifyUnnest(un)
			// The statement's own column aliases first (too many of them
			// fail as on the table).
			alias.Colnames = append(append([]*pg_query.Node{}, rv.Alias.Colnames...), alias.Colnames...)
			if collated != nil {
				x.Node = &pg_query.Node_RangeSubselect{RangeSubselect: &pg_query.RangeSubselect{
					Subquery: proto.Clone(collated).(*pg_query.Node), Alias: alias}}
				return false
			}
			x.Node = &pg_query.Node_RangeFunction{RangeFunction: &pg_query.RangeFunction{
				Functions: []*pg_query.Node{{Node: &pg_query.Node_List{List: &pg_query.List{Items: []*pg_query.Node{
					{Node: &pg_query.Node_FuncCall{FuncCall: un}}, {}}}}}},
				Alias: alias}}
			return false
		}
		return true
	})
	return deparse(m.version, &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: s}})
}
