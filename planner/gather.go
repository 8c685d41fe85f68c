package planner

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
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

// gatherTable is the placeholder name of the first gathered table's uses
// in the merge template (the k-th one's is gatherRel(k)); RenderGather
// replaces them with the rows.
const gatherTable = "gathered"

// gatherRel is the placeholder name of the k-th gathered table (from 0).
func gatherRel(k int) string {
	if k == 0 {
		return gatherTable
	}
	return fmt.Sprintf("%s_%d", gatherTable, k+1)
}

// gatherIndex is the k of a placeholder name, or -1.
func gatherIndex(rel string) int {
	if rel == gatherTable {
		return 0
	}
	if n, ok := strings.CutPrefix(rel, gatherTable+"_"); ok {
		if k, err := strconv.Atoi(n); err == nil && k >= 2 {
			return k - 1
		}
	}
	return -1
}

// GatherSeparator is the name of the column that, in the rows gathered
// for several tables at once, precedes the k-th table's columns (from 0)
// and is true in that table's rows.
func GatherSeparator(k int) string { return fmt.Sprintf("?gather %d", k+1) }

// gather plans stmt by gathering, or returns cause (the refusal it
// replaces) when it cannot: stmt must be a SELECT reading distributed
// tables, reference tables, CTEs and functions. Several distributed tables
// (joined on anything, in subqueries, colocated or not) are gathered in one
// pass: each worker returns all their rows in one result, each table's
// columns after a separator column that is true in its rows (the other
// tables' columns NULL there).
func (b *builder) gather(stmt *pg_query.Node, cause error) (*Plan, error) {
	sel := stmt.GetSelectStmt()
	if sel == nil {
		return nil, cause
	}
	ctes := cteNames(stmt)
	var dists []*metadata.Table      // in the order of first use
	var local []string               // relations not in the catalog (b.local)
	var localSeen, distSeen []string // the names their uses go by
	var refuse error
	maxParam := int32(0)
	Walk(stmt, func(m proto.Message) {
		if refuse != nil {
			return
		}
		if notPlainRead(m) {
			refuse = cause
			return
		}
		switch x := m.(type) {
		case *pg_query.RangeTableSample:
			refuse = cause // gathered rows are not a table to sample
		case *pg_query.RangeVar:
			t := lookup(b.cat, x, ctes)
			switch {
			case t == nil && ctes.refs[x]:
			case t == nil && b.local:
				if !slices.Contains(local, x.Relname) {
					local = append(local, x.Relname)
				}
				localSeen = append(localSeen, visibleName(x))
			case t == nil:
				refuse = unsupported("%s reads %s, which is not a distributed or reference table, besides distributed tables", StatementName(stmt), x.Relname).
					WithHint("Read the local table in a statement of its own.")
			case t.Kind == metadata.Reference:
			default:
				distSeen = append(distSeen, visibleName(x))
				if !slices.ContainsFunc(dists, func(d *metadata.Table) bool { return d.Name == t.Name }) {
					dists = append(dists, t)
				}
			}
		case *pg_query.ParamRef:
			if x.Number > maxParam {
				maxParam = x.Number
			}
		}
	})
	for _, n := range localSeen {
		if refuse == nil && slices.Contains(distSeen, n) {
			// FROM public.d, s1.d (local): the gathered use goes by its
			// name as an alias, which the other then repeats.
			refuse = unsupported("%s reads a distributed table and a local relation both named %s", StatementName(stmt), n).
				WithHint("Give one of them an alias.")
		}
	}
	if refuse != nil {
		return nil, refuse
	}
	if len(dists) == 0 {
		return nil, cause
	}
	for _, d := range dists {
		if len(b.cat.Shards[d.Name]) == 0 {
			return nil, pgerr.New(pgerr.Internal, "%s has no shards", d.Name)
		}
	}
	dist := dists[0]
	index := func(name string) int {
		return slices.IndexFunc(dists, func(d *metadata.Table) bool { return d.Name == name })
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
			toShard(rv, t, rv.Relname, b.cat.Shards[t.Name][0].ID)
			return
		}
		aliases = append(aliases, rv.Alias.Aliasname)
		rv.Schemaname, rv.Relname = mergeSchema, gatherRel(index(t.Name))
		if !rv.Inh {
			refuse = unsupported("ONLY %s in a multi-shard query is not supported", t.Name).
				WithHint("Leave out ONLY (a distributed table has no inheritance children), or add WHERE <distribution column> = <value>.")
		}
	})
	if refuse != nil {
		return nil, refuse
	}
	if err := wholeRows(tmpl, aliases); err != nil {
		return nil, err
	}

	// The first statement (which describes the result) and the collation
	// check read, of each table, a shard on the node of the first table's
	// first shard: tables that are not colocated have their shards
	// elsewhere, moves and splits included.
	home := b.cat.Shards[dist.Name][0].Nodes
	b.shardAt = map[string]int{}
	for _, d := range dists {
		i := slices.IndexFunc(b.cat.Shards[d.Name], func(sh metadata.Shard) bool {
			return len(sh.Nodes) > 0 && len(home) > 0 && sh.Nodes[0] == home[0]
		})
		if i < 0 {
			b.shardAt = nil
			return nil, unsupported("%s has no shard on the worker holding shards of %s, which this multi-shard query gathers together", d.Name, dist.Name).
				WithHint("Distribute the tables over the same workers, or read them in statements of their own.")
		}
		b.shardAt[d.Name] = i
	}
	first, err := b.rewrite(stmt, 0)
	if err != nil {
		b.shardAt = nil
		return nil, err
	}
	at := b.shardAt
	b.shardAt = nil

	m := &Merge{Kind: SQLMerge, Gather: true, Local: local, tmpl: tmpl, version: b.tree.Version}
	for k := 1; k <= int(maxParam); k++ {
		m.Params = append(m.Params, k)
	}
	sc := &Scatter{Table: dist.Name, DistType: dist.DistType, First: []string{first}, Merge: m,
		// The columns' collations are read once (check) and applied.
		CheckCollation: []string{"*"}}
	for _, d := range dists {
		m.Tables = append(m.Tables, d.Name)
		_, rel, _ := strings.Cut(d.Name, ".")
		sc.CheckRelations = append(sc.CheckRelations, quoteIdent(d.ShardsIn())+"."+quoteIdent(metadata.ShardName(rel, b.cat.Shards[d.Name][at[d.Name]].ID)))
	}
	if len(dists) == 1 {
		schema, rel, _ := strings.Cut(dist.Name, ".")
		all := &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: &pg_query.SelectStmt{
			TargetList: []*pg_query.Node{resTarget(&pg_query.Node{Node: &pg_query.Node_ColumnRef{ColumnRef: &pg_query.ColumnRef{
				Fields: []*pg_query.Node{{Node: &pg_query.Node_AStar{AStar: &pg_query.A_Star{}}}}}}})},
			FromClause:  []*pg_query.Node{{Node: &pg_query.Node_RangeVar{RangeVar: &pg_query.RangeVar{Schemaname: schema, Relname: rel, Inh: true, Relpersistence: "p"}}}},
			LimitOption: pg_query.LimitOption_LIMIT_OPTION_DEFAULT}}}
		if sc.Workers, err = b.workerQueries(all, b.cat.Shards[dist.Name], dist.Name); err != nil {
			return nil, err
		}
	} else if sc.Workers, err = b.gatherWorkers(dists); err != nil {
		return nil, err
	}
	// For reading plans: the uses of the table as placeholders.
	m.SQL, _ = deparse(b.tree.Version, &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: tmpl}})
	sc.TxTime = txTime(stmt)
	sc.ParamKeys = paramKeys(stmt)
	return &Plan{Root: sc, ReadOnly: true, Tables: tableNames(stmt, b.cat)}, nil
}

// notPlainRead: m, a node of a SELECT, makes it more than a read of rows
// (FOR UPDATE or SHARE, INTO, a data-modifying WITH).
func notPlainRead(m proto.Message) bool {
	switch x := m.(type) {
	case *pg_query.SelectStmt:
		return len(x.LockingClause) > 0 || x.IntoClause != nil
	case *pg_query.CommonTableExpr:
		return x.Ctequery.GetSelectStmt() == nil
	}
	return false
}

// gatherWorkers are the statements that gather several tables' rows at
// once: on each worker, per table, the rows of its shards there, that
// table's separator true and the other tables' columns NULL of their types
// (from an empty read of one of their shards on the same worker):
//
//	SELECT true AS "?gather 1", g1.*, false AS "?gather 2", g2.*
//	  FROM (SELECT * FROM a_1 UNION ALL SELECT * FROM a_3) g1
//	  LEFT JOIN (SELECT * FROM b_5 WHERE false) g2 ON true
//	UNION ALL
//	SELECT false, g1.*, true, g2.* FROM (...) g1 ... (b's rows)
func (b *builder) gatherWorkers(dists []*metadata.Table) ([]WorkerQuery, error) {
	// Per node, per table: its shards there, qualified and quoted.
	on := map[int32][][]string{}
	first := map[int32][]int{} // the first table's shard indexes there
	var nodes []int32
	for k, d := range dists {
		schema, rel := d.ShardsIn(), d.Name[len(d.Schema())+1:]
		for i, sh := range b.cat.Shards[d.Name] {
			if len(sh.Nodes) == 0 {
				return nil, pgerr.New(pgerr.Internal, "shard %d of %s has no placement", sh.ID, d.Name)
			}
			n := sh.Nodes[0]
			if _, ok := on[n]; !ok {
				on[n] = make([][]string, len(dists))
				nodes = append(nodes, n)
			}
			on[n][k] = append(on[n][k], quoteIdent(schema)+"."+quoteIdent(metadata.ShardName(rel, sh.ID)))
			if k == 0 {
				first[n] = append(first[n], i)
			}
		}
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i] < nodes[j] })
	var out []WorkerQuery
	for _, n := range nodes {
		var branches []string
		for k := range dists {
			if len(on[n][k]) == 0 {
				continue
			}
			var sel, from []string
			for j, d := range dists {
				g := fmt.Sprintf("g%d", j+1)
				sel = append(sel, fmt.Sprintf("%t AS %s", j == k, quoteIdent(GatherSeparator(j))), g+".*")
				if len(on[n][j]) == 0 {
					return nil, unsupported("%s has no shard on the worker holding shards of %s, which this multi-shard query gathers together", d.Name, dists[k].Name).
						WithHint("Distribute the tables over the same workers, or read them in statements of their own.")
				}
				if j == k {
					continue
				}
				from = append(from, fmt.Sprintf("LEFT JOIN (SELECT * FROM %s WHERE false) %s ON true", on[n][j][0], g))
			}
			var parts []string
			for _, s := range on[n][k] {
				parts = append(parts, "SELECT * FROM "+s)
			}
			branches = append(branches, fmt.Sprintf("SELECT %s FROM (%s) g%d %s",
				strings.Join(sel, ", "), strings.Join(parts, " UNION ALL "), k+1, strings.Join(from, " ")))
		}
		out = append(out, WorkerQuery{Node: n, Shards: first[n], SQL: strings.Join(branches, " UNION ALL ")})
	}
	return out, nil
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
			err = unsupported("system column %s in a multi-shard query is not supported: each shard has its own", last).
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

// RenderGather is a gathering merge's statement for the gathered columns
// (names) of the given types: each use of a gathered table becomes unnest
// of the column arrays, $1 .. $n, under the use's alias; the statement's
// own parameters follow. With several tables, the columns are theirs one
// after the other, each table's after its separator (GatherSeparator),
// and a use of a table reads the rows where its separator is true.
//
// collations maps, per gathered table, a column name to its collation
// (qualified and quoted) where that is not the database default: unnest's
// columns have the default, so those columns are selected with COLLATE
// from a subquery.
//
// keys are the gathered tables' primary keys, as positions (from 1) among
// each table's columns (nil: none), for groupByKeys.
func (m *Merge) RenderGather(types, names []string, collations []map[string]string, casts []string, keys [][]int) (string, error) {
	if !m.Gather || len(types) != len(names) || len(collations) != len(m.Tables) || casts != nil && len(casts) != len(names) {
		return "", pgerr.New(pgerr.Internal, "no gathering merge for these columns")
	}
	// Per table: its columns' positions (from 0), and its separator's (-1
	// for one table).
	cols := make([][]int, len(m.Tables))
	seps := make([]int, len(m.Tables))
	if len(m.Tables) == 1 {
		seps[0] = -1
		for i := range names {
			cols[0] = append(cols[0], i)
		}
	} else {
		// A column of the user's named like a separator would make the
		// split ambiguous.
		named := 0
		for _, n := range names {
			if strings.HasPrefix(n, "?gather ") {
				named++
			}
		}
		if named != len(m.Tables) {
			return "", unsupported("a column of %s is named like the coordinator's gathering separators (?gather n)", strings.Join(m.Tables, ", ")).
				WithHint("Rename the column, or read the tables in statements of their own.")
		}
		k := -1
		for i, n := range names {
			if k+1 < len(m.Tables) && n == GatherSeparator(k+1) && types[i] == "bool" {
				k++
				seps[k] = i
				continue
			}
			if k < 0 {
				break
			}
			cols[k] = append(cols[k], i)
		}
		if k != len(m.Tables)-1 {
			return "", pgerr.New(pgerr.Internal, "the gathered rows of %s came without their separators", strings.Join(m.Tables, ", "))
		}
	}
	// A use of table k reads from[k]: nil for unnest itself (one table, no
	// collations), else a subquery.
	from := make([]*pg_query.Node, len(m.Tables))
	var args, us []string
	for i := range names {
		args = append(args, fmt.Sprintf("$%d", i+1))
		us = append(us, fmt.Sprintf("c%d", i+1))
	}
	fn := "unnest" // see qualifyUnnest
	if len(names) == 1 {
		fn = "pg_catalog.unnest"
	}
	cast := func(i int) string {
		if casts == nil {
			return ""
		}
		return casts[i]
	}
	for k := range m.Tables {
		if seps[k] < 0 && len(collations[k]) == 0 && !slices.ContainsFunc(cols[k], func(i int) bool { return cast(i) != "" }) {
			continue
		}
		var sel []string
		for _, i := range cols[k] {
			c := fmt.Sprintf("c%d", i+1)
			if t := cast(i); t != "" {
				// It came as text: back to its type.
				c += "::" + t
			}
			if coll, ok := collations[k][names[i]]; ok {
				c += " COLLATE " + coll
			}
			sel = append(sel, c)
		}
		q := "SELECT " + strings.Join(sel, ", ") + " FROM " + fn + "(" + strings.Join(args, ", ") + ") AS u(" + strings.Join(us, ", ") + ")"
		if seps[k] >= 0 {
			q += fmt.Sprintf(" WHERE c%d", seps[k]+1)
		}
		tree, err := pg_query.Parse(q)
		if err != nil || len(tree.Stmts) != 1 {
			return "", pgerr.New(pgerr.Internal, "the gathered columns of %s: %v", m.Tables[k], err)
		}
		from[k] = tree.Stmts[0].Stmt
	}
	s := proto.Clone(m.tmpl).(*pg_query.SelectStmt)
	if len(keys) == len(m.Tables) {
		tcols := make([][]string, len(m.Tables))
		for k := range m.Tables {
			for _, i := range cols[k] {
				tcols[k] = append(tcols[k], names[i])
			}
		}
		groupByKeys(s, keys, tcols, func(k, j int) string {
			if cast(cols[k][j]) != "" {
				return "" // shipped as text: a domain over json, say
			}
			return types[cols[k][j]]
		})
	}
	arrays := int32(len(types))
	eachNode(s, func(x *pg_query.Node) bool {
		switch v := x.Node.(type) {
		case *pg_query.Node_ParamRef:
			v.ParamRef.Number += arrays
		case *pg_query.Node_RangeVar:
			rv := v.RangeVar
			k := gatherIndex(rv.Relname)
			if rv.Schemaname != mergeSchema || k < 0 || k >= len(m.Tables) {
				return true
			}
			// The statement's own column aliases first (too many of them
			// fail as on the table).
			alias := &pg_query.Alias{Aliasname: rv.Alias.Aliasname}
			alias.Colnames = append(alias.Colnames, rv.Alias.Colnames...)
			for j, i := range cols[k] {
				if j >= len(rv.Alias.Colnames) {
					alias.Colnames = append(alias.Colnames, pg_query.MakeStrNode(names[i]))
				}
			}
			if from[k] != nil {
				x.Node = &pg_query.Node_RangeSubselect{RangeSubselect: &pg_query.RangeSubselect{
					Subquery: proto.Clone(from[k]).(*pg_query.Node), Alias: alias}}
				return false
			}
			// Unqualified: PostgreSQL reads unnest of several arrays in FROM as
			// ROWS FROM of one unnest per array, whatever else is named unnest.
			un := &pg_query.FuncCall{Funcname: []*pg_query.Node{pg_query.MakeStrNode("unnest")},
				Funcformat: pg_query.CoercionForm_COERCE_EXPLICIT_CALL, Location: -1}
			for i := range types {
				un.Args = append(un.Args, &pg_query.Node{Node: &pg_query.Node_ParamRef{ParamRef: &pg_query.ParamRef{Number: int32(i + 1), Location: -1}}})
			}
			qualifyUnnest(un)
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

// groupByKeys lets the statement read a gathered table's other columns
// when it groups by the table's primary key, as PostgreSQL lets a query
// over the table (the key's functional dependency): over the gathered
// rows, which have no key, each SELECT that groups by all of a gathered
// table's key columns also groups by the table's columns it names. The
// groups are the same (within one key those columns have one value); a
// column of a type without an equality (json, geometric types) is left
// out, and GROUPING SETS, ROLLUP and CUBE are left as they are. keys[k]
// are table k's key columns as positions (from 1) in cols[k], its column
// names; typ(k, j) is the type of its column j.
func groupByKeys(s *pg_query.SelectStmt, keys [][]int, cols [][]string, typ func(k, j int) string) {
	// Every SELECT, a set operation's branches too.
	var levels []*pg_query.SelectStmt
	Walk(s, func(m proto.Message) {
		if sel, ok := m.(*pg_query.SelectStmt); ok {
			levels = append(levels, sel)
		}
	})
	for _, sel := range levels {
		groupLevel(sel, keys, cols, typ)
	}
}

func groupLevel(sel *pg_query.SelectStmt, keys [][]int, cols [][]string, typ func(k, j int) string) {
	if len(sel.GroupClause) == 0 {
		return
	}
	for _, g := range sel.GroupClause {
		if g.GetGroupingSet() != nil {
			return
		}
	}
	// The gathered tables this level reads, by the name it gives them.
	tables := map[string]int{}
	items := 0
	var from func(n *pg_query.Node)
	from = func(n *pg_query.Node) {
		if j := n.GetJoinExpr(); j != nil {
			from(j.Larg)
			from(j.Rarg)
			return
		}
		items++
		rv := n.GetRangeVar()
		if rv == nil || rv.Schemaname != mergeSchema || rv.Alias == nil || len(rv.Alias.Colnames) > 0 {
			return
		}
		if k := gatherIndex(rv.Relname); k >= 0 && k < len(keys) && len(keys[k]) > 0 {
			tables[rv.Alias.Aliasname] = k
		}
	}
	for _, f := range sel.FromClause {
		from(f)
	}
	if len(tables) == 0 {
		return
	}
	// ref names the gathered table and column a column reference reads,
	// if it is one: qualified, alone in a level that reads one table, or
	// a column of one gathered table only.
	ref := func(n *pg_query.Node) (string, string, bool) {
		cr := n.GetColumnRef()
		if cr == nil {
			return "", "", false
		}
		f := cr.Fields
		switch {
		case len(f) == 2 && f[0].GetString_() != nil:
			if _, ok := tables[f[0].GetString_().GetSval()]; ok {
				if f[1].GetAStar() != nil {
					return f[0].GetString_().GetSval(), "*", true
				}
				if f[1].GetString_() != nil {
					return f[0].GetString_().GetSval(), f[1].GetString_().GetSval(), true
				}
			}
		case len(f) == 1 && f[0].GetString_() != nil && items == 1:
			for t := range tables {
				return t, f[0].GetString_().GetSval(), true
			}
		case len(f) == 1 && f[0].GetString_() != nil:
			// Beside other items (a local table's, a function's):
			// the one gathered table with a column of that name. Were
			// another item's column meant, the columns added below
			// are still of a table grouped by its key, the same
			// groups; were it ambiguous, PostgreSQL says so (42702).
			c, found := f[0].GetString_().GetSval(), ""
			for t, k := range tables {
				if slices.Contains(cols[k], c) {
					if found != "" {
						return "", "", false
					}
					found = t
				}
			}
			if found != "" {
				return found, c, true
			}
		}
		return "", "", false
	}
	grouped := map[[2]string]bool{}
	for _, g := range sel.GroupClause {
		if i := g.GetAConst().GetIval(); i != nil && i.Ival >= 1 && int(i.Ival) <= len(sel.TargetList) {
			// GROUP BY n: the select list's nth entry.
			g = sel.TargetList[i.Ival-1].GetResTarget().GetVal()
		}
		if t, c, ok := ref(g); ok {
			grouped[[2]string{t, c}] = true
		}
	}
	var keyed []string // the tables grouped by their whole key
	for t, k := range tables {
		all := true
		for _, p := range keys[k] {
			if p < 1 || p > len(cols[k]) || !grouped[[2]string{t, cols[k][p-1]}] {
				all = false
			}
		}
		if all {
			keyed = append(keyed, t)
		}
	}
	if len(keyed) == 0 {
		return
	}
	slices.Sort(keyed)
	// The columns of those tables the level names anywhere (in its
	// subqueries too: they may read the level's columns).
	var add []*pg_query.Node
	addCol := func(t, c string) {
		k := tables[t]
		j := slices.Index(cols[k], c)
		if j < 0 || grouped[[2]string{t, c}] || !groupable(typ(k, j)) {
			return
		}
		grouped[[2]string{t, c}] = true
		add = append(add, colRef(t, c))
	}
	for _, l := range [][]*pg_query.Node{sel.TargetList, {sel.HavingClause}, sel.SortClause, sel.DistinctClause} {
		for _, x := range l {
			if x == nil {
				continue
			}
			eachNode(x, func(n *pg_query.Node) bool {
				t, c, ok := ref(n)
				if !ok || !slices.Contains(keyed, t) {
					return true
				}
				if c == "*" {
					for _, c := range cols[tables[t]] {
						addCol(t, c)
					}
				} else {
					addCol(t, c)
				}
				return true
			})
		}
	}
	sel.GroupClause = append(sel.GroupClause, add...)
}

// groupable: a column of type typ (pg_type.typname) can be grouped by;
// the built-in types without an equality cannot.
func groupable(typ string) bool {
	switch strings.TrimPrefix(typ, "_") {
	case "json", "jsonpath", "xml", "point", "lseg", "line", "path", "polygon", "circle", "box",
		"txid_snapshot", "pg_snapshot", "":
		return false
	}
	return true
}

// visibleName is the name a range variable's columns go by: its alias, or
// its relation's name.
func visibleName(rv *pg_query.RangeVar) string {
	if rv.Alias != nil {
		return rv.Alias.Aliasname
	}
	return rv.Relname
}
