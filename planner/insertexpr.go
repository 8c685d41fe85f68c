package planner

import (
	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
)

// ValuesNeeded is Build's answer to an INSERT into a distributed table
// whose distribution column is given by an expression the router cannot
// read (1000 + 4, now()::date, (random() * 1e9)::bigint). As Citus does,
// the coordinator has PostgreSQL evaluate each such expression once
// (DistExprs), puts the values in their place (WithDistValues) and plans
// that; as an error, it is a refusal.
type ValuesNeeded struct{ err *pgerr.Error }

func (e *ValuesNeeded) Error() string { return e.err.Error() }
func (e *ValuesNeeded) Unwrap() error { return e.err }

// DistExprs are the distribution column's expressions in each VALUES row
// of an INSERT into a distributed table, as SQL ("" where the router reads
// the value itself), and the reason none can be evaluated apart from the
// statement: a subquery, a column, a parameter, DEFAULT, a sequence
// function, or (time, when evaluated apart in a transaction block) the
// transaction's time.
func DistExprs(sql string, cat *metadata.Snapshot, inTxn bool) ([]string, error) {
	ins, t, pos, version, err := insertDist(sql, cat)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range ins.SelectStmt.GetSelectStmt().ValuesLists {
		row := l.GetList().GetItems()
		if pos >= len(row) || distValue(version, row[pos], t.DistType, true) != nil {
			out = append(out, "")
			continue
		}
		e := row[pos]
		var refuse string
		Walk(e, func(m proto.Message) {
			switch x := m.(type) {
			case *pg_query.SubLink, *pg_query.ColumnRef:
				refuse = "a subquery or a column"
			case *pg_query.ParamRef:
				refuse = "a parameter"
			case *pg_query.SetToDefault:
				refuse = "DEFAULT"
			case *pg_query.FuncCall:
				if f, _ := funcName(x); f == "nextval" || f == "currval" || f == "setval" || f == "lastval" {
					refuse = "a sequence function"
				}
			}
		})
		if refuse == "" && inTxn && writeTime(e) != "" {
			refuse = "the transaction's time, in a transaction block"
		}
		if refuse != "" {
			return nil, unsupported("the distribution column %q of %s is given by an expression with %s, which the coordinator cannot evaluate apart from the INSERT", t.DistColumn, t.Name, refuse).
				WithHint("Give the distribution column a constant or a parameter.")
		}
		sql, err := deparseExpr(version, e)
		if err != nil {
			return nil, err
		}
		out = append(out, sql)
	}
	return out, nil
}

// WithDistValues is the INSERT with the distribution column's expression
// in each row replaced by vals (SQL constants; "" keeps the row's own).
func WithDistValues(sql string, cat *metadata.Snapshot, vals []string) (string, error) {
	ins, _, pos, version, err := insertDist(sql, cat)
	if err != nil {
		return "", err
	}
	rows := ins.SelectStmt.GetSelectStmt().ValuesLists
	if len(vals) != len(rows) {
		return "", pgerr.New(pgerr.Internal, "%d values for %d rows", len(vals), len(rows))
	}
	for i, l := range rows {
		if vals[i] == "" {
			continue
		}
		e, err := parseExpr(vals[i])
		if err != nil {
			return "", err
		}
		l.GetList().Items[pos] = e
	}
	return deparse(version, &pg_query.Node{Node: &pg_query.Node_InsertStmt{InsertStmt: ins}})
}

// insertDist reads an INSERT ... VALUES into a distributed table with a
// column list: the statement, the table and its distribution column's
// place in the list.
func insertDist(sql string, cat *metadata.Snapshot) (*pg_query.InsertStmt, *metadata.Table, int, int32, error) {
	tree, err := pg_query.Parse(sql)
	if err != nil || len(tree.Stmts) != 1 || tree.Stmts[0].Stmt.GetInsertStmt() == nil {
		return nil, nil, 0, 0, pgerr.New(pgerr.Internal, "not one INSERT statement")
	}
	ins := tree.Stmts[0].Stmt.GetInsertStmt()
	t := lookup(cat, ins.Relation, cteNames(tree.Stmts[0].Stmt))
	if t == nil || t.Kind != metadata.Distributed || ins.SelectStmt.GetSelectStmt() == nil {
		return nil, nil, 0, 0, pgerr.New(pgerr.Internal, "not an INSERT into a distributed table")
	}
	for i, c := range ins.Cols {
		if c.GetResTarget().GetName() == t.DistColumn {
			return ins, t, i, tree.Version, nil
		}
	}
	return nil, nil, 0, 0, pgerr.New(pgerr.Internal, "no distribution column in the column list")
}
