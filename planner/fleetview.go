package planner

import (
	"slices"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"

	"github.com/pgfleet/pgfleet/metadata"
)

// pg_prepared_xacts lists the prepared transactions of one PostgreSQL
// server; through the coordinator, a client's PREPARE TRANSACTION runs on
// the worker it wrote on, so a transaction manager's recovery scan (JDBC's
// XAResource.recover: SELECT gid FROM pg_prepared_xacts WHERE database =
// current_database()) must see every worker's. A SELECT reading the view
// is therefore a gathering (gather.go) whose rows come from every active
// worker's view instead of a table's shards, the statement then run once on
// the default node over them: every worker's prepared transactions but the
// coordinator's own (ids starting with pgfleet_, which a client cannot
// commit or roll back either). Other statements reading the view
// (INSERT ... SELECT, COPY (SELECT ...), several statements in one string)
// are refused, as is the function beneath it (pg_prepared_xact()): they
// would see the default node's only. EXPLAIN is left to the default node.

// FleetView is the view whose rows a fleet-view plan gathers from every
// worker (Scatter.Fleet).
const FleetView = "pg_catalog.pg_prepared_xacts"

const fleetViewRel = "pg_prepared_xacts"

// fleetViewSQL is what each worker runs: the view's columns, in its order.
const fleetViewSQL = "SELECT * FROM pg_catalog.pg_prepared_xacts WHERE NOT pg_catalog.starts_with(gid, 'pgfleet_')"

// MentionsFleetView: the text may read pg_prepared_xacts (cheap; the
// planner decides). A Unicode-escaped identifier (U&"...") may spell it.
func MentionsFleetView(sql string) bool {
	return ContainsFold(sql, "pg_prepared_xact") || ContainsFold(sql, "u&")
}

// fleetView plans a statement of tree reading pg_prepared_xacts, in a
// fleet of more than one active node; ok is false when none does (the
// statement is planned as any other).
func fleetView(tree *pg_query.ParseResult, cat *metadata.Snapshot) (p *Plan, err error, ok bool) {
	var nodes []int32
	for _, n := range cat.Nodes {
		if n.Active {
			nodes = append(nodes, n.ID)
		}
	}
	if len(nodes) < 2 {
		return nil, nil, false // the default node's view is the fleet's
	}
	reads, fn, withDB := false, false, false
	for _, raw := range tree.Stmts {
		if raw.Stmt.GetExplainStmt() != nil {
			continue
		}
		ctes := cteNames(raw.Stmt)
		for rv := range readRelations(raw.Stmt) {
			if isFleetView(rv, ctes) {
				reads = true
				withDB = withDB || rv.Catalogname != ""
			}
		}
		Walk(raw.Stmt, func(m proto.Message) {
			if x, ok := m.(*pg_query.FuncCall); ok {
				if n := len(x.Funcname); n > 0 && x.Funcname[n-1].GetString_().GetSval() == "pg_prepared_xact" {
					fn = true
				}
			}
		})
	}
	switch {
	case fn:
		return nil, unsupported("pg_prepared_xact() lists one worker's prepared transactions").
			WithHint("Read the pg_prepared_xacts view, which the coordinator gathers from every worker."), true
	case !reads:
		return nil, nil, false
	case withDB:
		return nil, unsupported("pg_prepared_xacts named with a database name is not supported").
			WithHint("Leave out the database name."), true
	}
	refuse := unsupported("only a SELECT of its own reads pg_prepared_xacts through the coordinator, which gathers every worker's").
		WithHint("Read pg_prepared_xacts in a SELECT statement of its own, without distributed or reference tables.")
	if len(tree.Stmts) != 1 {
		return nil, refuse, true
	}
	stmt := tree.Stmts[0].Stmt
	sel := stmt.GetSelectStmt()
	if sel == nil {
		return nil, refuse, true
	}
	ctes := cteNames(stmt)
	maxParam := int32(0)
	Walk(stmt, func(m proto.Message) {
		if notPlainRead(m) {
			err = refuse
		}
		switch x := m.(type) {
		case *pg_query.RangeVar:
			if lookup(cat, x, ctes) != nil {
				err = refuse
			}
		case *pg_query.ParamRef:
			maxParam = max(maxParam, x.Number)
		}
	})
	if err != nil {
		return nil, err, true
	}

	// The template: each use of the view the gathered rows' placeholder,
	// under the name its columns go by.
	tmpl := proto.Clone(sel).(*pg_query.SelectStmt)
	tctes := cteNames(&pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: tmpl}})
	var aliases []string
	Walk(tmpl, func(m proto.Message) {
		rv, ok := m.(*pg_query.RangeVar)
		if !ok || !isFleetView(rv, tctes) {
			return
		}
		if rv.Alias == nil {
			rv.Alias = &pg_query.Alias{Aliasname: rv.Relname}
		}
		aliases = append(aliases, rv.Alias.Aliasname)
		rv.Schemaname, rv.Relname, rv.Inh = mergeSchema, gatherRel(0), true
	})
	unqualifyView(tmpl)
	if err := wholeRows(tmpl, aliases); err != nil {
		return nil, err, true
	}
	first, err := deparse(tree.Version, stmt)
	if err != nil {
		return nil, err, true
	}
	m := &Merge{Kind: SQLMerge, Gather: true, tmpl: tmpl, version: tree.Version, Tables: []string{FleetView}}
	for k := 1; k <= int(maxParam); k++ {
		m.Params = append(m.Params, k)
	}
	m.SQL, _ = deparse(tree.Version, &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: tmpl}})
	sc := &Scatter{Table: FleetView, Fleet: true, First: []string{first}, Merge: m,
		CheckCollation: []string{"*"}, CheckRelations: []string{FleetView},
		TxTime: txTime(stmt), ParamKeys: paramKeys(stmt)}
	slices.Sort(nodes)
	for _, n := range nodes {
		sc.Workers = append(sc.Workers, WorkerQuery{Node: n, SQL: fleetViewSQL})
	}
	return &Plan{Root: sc, ReadOnly: true}, nil, true
}

// readRelations are the range variables stmt reads rows from: those in
// the FROM of its SELECTs (subqueries and CTEs included), an UPDATE's
// FROM, a DELETE's USING and a MERGE's source; not the relation a
// statement writes, grants on, alters or creates.
func readRelations(stmt *pg_query.Node) map[*pg_query.RangeVar]bool {
	out := map[*pg_query.RangeVar]bool{}
	Walk(stmt, func(m proto.Message) {
		var from []*pg_query.Node
		switch x := m.(type) {
		case *pg_query.SelectStmt:
			from = x.FromClause
		case *pg_query.UpdateStmt:
			from = x.FromClause
		case *pg_query.DeleteStmt:
			from = x.UsingClause
		case *pg_query.MergeStmt:
			from = []*pg_query.Node{x.SourceRelation}
		}
		for _, f := range from {
			Walk(f, func(m proto.Message) {
				if rv, ok := m.(*pg_query.RangeVar); ok {
					out[rv] = true
				}
			})
		}
	})
	return out
}

// unqualifyView drops the schema from column references that qualify the
// view's columns with it (pg_catalog.pg_prepared_xacts.gid), which the
// gathered rows, named by an alias, do not answer to. Only a use of the
// view without an alias answers to that name.
func unqualifyView(tmpl *pg_query.SelectStmt) {
	Walk(tmpl, func(m proto.Message) {
		cr, ok := m.(*pg_query.ColumnRef)
		if ok && len(cr.Fields) == 3 && cr.Fields[0].GetString_().GetSval() == "pg_catalog" && cr.Fields[1].GetString_().GetSval() == fleetViewRel {
			cr.Fields = cr.Fields[1:]
		}
	})
}

// isFleetView: rv names pg_catalog's pg_prepared_xacts. Unqualified it
// is taken as the view, which it is unless search_path names pg_catalog
// after a schema holding a relation of that name (not handled).
func isFleetView(rv *pg_query.RangeVar, ctes *CTEs) bool {
	return rv.Relname == fleetViewRel && (rv.Schemaname == "" || rv.Schemaname == "pg_catalog") && !ctes.refs[rv]
}
