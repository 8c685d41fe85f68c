package planner

import (
	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"

	"github.com/pgfleet/pgfleet/metadata"
)

// unqualifyColumns rewrites column references qualified with a catalog
// table's schema (schema.table.column, schema.table.*) to table.column.
// Shards are read under the table's name as their alias, which PostgreSQL
// resolves only by that name, so the schema-qualified form would not find
// them; in the statement as written it names the same table. A name that is
// also a user's alias, a CTE or a subquery's alias is left alone (the
// worker then reports it). db.schema.table.column is refused: the
// coordinator cannot check the database name as PostgreSQL does.
func unqualifyColumns(stmt *pg_query.Node, cat *metadata.Snapshot) error {
	ctes := cteNames(stmt)
	schemaOf := map[string]string{} // relation name -> schema, renamed tables without an alias
	taken := map[string]bool{}      // names that are also other range entries
	for n := range ctes.names {
		taken[n] = true
	}
	Walk(stmt, func(m proto.Message) {
		switch v := m.(type) {
		case *pg_query.RangeVar:
			if v.Alias != nil && v.Alias.Aliasname != "" {
				taken[v.Alias.Aliasname] = true
				return
			}
			t := lookup(cat, v, ctes)
			if t == nil {
				taken[v.Relname] = true
				return
			}
			schema := t.Name[:len(t.Name)-len(v.Relname)-1]
			if s, ok := schemaOf[v.Relname]; ok && s != schema {
				taken[v.Relname] = true
			}
			schemaOf[v.Relname] = schema
		case *pg_query.RangeSubselect:
			if v.Alias != nil {
				taken[v.Alias.Aliasname] = true
			}
		case *pg_query.RangeFunction:
			if v.Alias != nil {
				taken[v.Alias.Aliasname] = true
			}
		case *pg_query.JoinExpr:
			if v.Alias != nil {
				taken[v.Alias.Aliasname] = true
			}
		}
	})
	if len(schemaOf) == 0 {
		return nil
	}
	var err error
	Walk(stmt, func(m proto.Message) {
		cr, ok := m.(*pg_query.ColumnRef)
		if !ok || err != nil || len(cr.Fields) < 3 {
			return
		}
		f := cr.Fields
		rel := f[len(f)-2].GetString_().GetSval()
		schema := f[len(f)-3].GetString_().GetSval()
		if s, ok := schemaOf[rel]; !ok || s != schema || taken[rel] {
			return
		}
		if len(f) == 4 {
			err = unsupported("column references with a database name (%s.%s.%s...) to distributed or reference tables are not supported", f[0].GetString_().GetSval(), schema, rel).
				WithHint("Leave out the database name.")
			return
		}
		cr.Fields = f[1:]
	})
	return err
}

// refuseShardNames refuses what would show a shard's name or identity
// where PostgreSQL shows the table's: the tableoid system column (and so
// tableoid::regclass) and pg_typeof of a whole-row reference (a row of the
// shard's row type). A whole row as a value (SELECT t FROM t, row_to_json)
// reads as the table's and is left alone.
func refuseShardNames(stmt *pg_query.Node, cat *metadata.Snapshot) error {
	ctes := cteNames(stmt)
	rowNames := map[string]bool{} // names under which a catalog table's rows are referenced
	tables := map[string]bool{}   // their relation names, which name their row types
	Walk(stmt, func(m proto.Message) {
		if rv, ok := m.(*pg_query.RangeVar); ok && lookup(cat, rv, ctes) != nil {
			tables[rv.Relname] = true
			if rv.Alias != nil && rv.Alias.Aliasname != "" {
				rowNames[rv.Alias.Aliasname] = true
			} else {
				rowNames[rv.Relname] = true
			}
		}
	})
	wholeRow := func(n *pg_query.Node) bool {
		cr := n.GetColumnRef()
		if cr == nil {
			return false
		}
		f := cr.Fields
		return len(f) == 1 && rowNames[f[0].GetString_().GetSval()] || len(f) >= 2 && f[len(f)-1].GetAStar() != nil
	}
	var err error
	Walk(stmt, func(m proto.Message) {
		if err != nil {
			return
		}
		switch v := m.(type) {
		case *pg_query.TypeCast:
			// t::t: the shard's row type does not cast to the table's.
			if names := v.GetTypeName().GetNames(); len(names) > 0 && v.Arg != nil && wholeRow(v.Arg) &&
				tables[names[len(names)-1].GetString_().GetSval()] {
				err = unsupported("casting a whole row of a distributed or reference table to its row type is not supported: the row is a shard's").
					WithHint("Cast the row's columns, or use ROW(...)::type.")
			}
		case *pg_query.ColumnRef:
			if last := v.Fields[len(v.Fields)-1].GetString_(); last != nil && last.Sval == "tableoid" {
				err = unsupported("tableoid of distributed or reference tables is not supported: it would be a shard's").
					WithHint("Name the table in the query instead of reading tableoid.")
			}
		case *pg_query.FuncCall:
			if name := v.Funcname[len(v.Funcname)-1].GetString_().GetSval(); name != "pg_typeof" {
				return
			}
			// Anywhere in the argument: array_agg(t) is an array of the
			// shard's row type.
			for _, a := range v.Args {
				Walk(a, func(m proto.Message) {
					cr, ok := m.(*pg_query.ColumnRef)
					if !ok || err != nil {
						return
					}
					if wholeRow(&pg_query.Node{Node: &pg_query.Node_ColumnRef{ColumnRef: cr}}) {
						err = unsupported("pg_typeof of a whole row of a distributed or reference table is not supported: its type would be a shard's").
							WithHint("Use pg_typeof on the row's columns.")
					}
				})
			}
		}
	})
	return err
}
