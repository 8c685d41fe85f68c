package planner

import (
	"fmt"
	"slices"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"

	"github.com/pgfleet/pgfleet/internal/pgerr"
)

// A write that every shard or every copy runs for itself cannot read the
// transaction's time there: each worker's transaction began at its own
// moment, and the rows would store as many different now()s as workers,
// where PostgreSQL stores one. The coordinator reads the moment once and
// writes it into the statement as constants (FreezeTime), including the
// column defaults the rows take that read it (FillDefaults first).

// TimeRead is the refusal of a multi-shard write that reads the
// transaction's time: planned again after FreezeTime, it may run.
type TimeRead struct{ Err *pgerr.Error }

func (e *TimeRead) Error() string { return e.Err.Error() }
func (e *TimeRead) Unwrap() error { return e.Err }

// TimePlaceholder is the moment a prepared statement's plan holds until
// it runs (MultiShardWrite.TimeFrozen).
const TimePlaceholder = "2000-01-01 00:00:00+00"

// timeFuncs are the functions that read the transaction's (or, outside a
// transaction block, the statement's, the same) start time.
var timeFuncs = []string{"now", "transaction_timestamp", "statement_timestamp"}

// timeCall returns the expression, over the moment %[1]s (a timestamptz
// literal), that gives what n gives at that moment under the session's
// TimeZone, or "" when n does not read the time.
func timeCall(n *pg_query.Node) string {
	switch x := n.Node.(type) {
	case *pg_query.Node_SqlvalueFunction:
		v := x.SqlvalueFunction
		p := ""
		if v.Typmod >= 0 {
			p = fmt.Sprintf("(%d)", v.Typmod)
		}
		switch v.Op {
		case pg_query.SQLValueFunctionOp_SVFOP_CURRENT_DATE:
			return "%[1]s::pg_catalog.timestamptz::pg_catalog.date"
		case pg_query.SQLValueFunctionOp_SVFOP_CURRENT_TIME, pg_query.SQLValueFunctionOp_SVFOP_CURRENT_TIME_N:
			return "%[1]s::pg_catalog.timestamptz::pg_catalog.timetz" + p
		case pg_query.SQLValueFunctionOp_SVFOP_CURRENT_TIMESTAMP, pg_query.SQLValueFunctionOp_SVFOP_CURRENT_TIMESTAMP_N:
			return "%[1]s::pg_catalog.timestamptz" + p
		case pg_query.SQLValueFunctionOp_SVFOP_LOCALTIME, pg_query.SQLValueFunctionOp_SVFOP_LOCALTIME_N:
			return "%[1]s::pg_catalog.timestamptz::pg_catalog.time" + p
		case pg_query.SQLValueFunctionOp_SVFOP_LOCALTIMESTAMP, pg_query.SQLValueFunctionOp_SVFOP_LOCALTIMESTAMP_N:
			return "%[1]s::pg_catalog.timestamptz::pg_catalog.timestamp" + p
		}
	case *pg_query.Node_FuncCall:
		f := x.FuncCall
		if len(f.Args) > 0 || f.AggStar || f.Over != nil || f.AggFilter != nil || len(f.AggOrder) > 0 {
			return ""
		}
		var name []string
		for _, s := range f.Funcname {
			name = append(name, s.GetString_().GetSval())
		}
		if (len(name) == 1 || (len(name) == 2 && name[0] == "pg_catalog")) && slices.Contains(timeFuncs, name[len(name)-1]) {
			return "%[1]s::pg_catalog.timestamptz"
		}
	}
	return ""
}

// ReadsTime reports whether the statement or expression sql reads the
// transaction's time (now(), CURRENT_TIMESTAMP, CURRENT_DATE, LOCALTIME,
// ...). An expression is read as a SELECT list.
func ReadsTime(sql string) bool {
	tree, err := pg_query.Parse(sql)
	if err != nil {
		if tree, err = pg_query.Parse("SELECT " + sql); err != nil {
			return false
		}
	}
	found := false
	for _, st := range tree.Stmts {
		Walk(st.Stmt, func(m proto.Message) {
			if n, ok := m.(*pg_query.Node); ok && !found && timeCall(n) != "" {
				found = true
			}
		})
	}
	return found
}

// FreezeTime returns the statement sql with every read of the
// transaction's time replaced by its value at moment (a timestamptz in a
// form PostgreSQL reads under any DateStyle, "2026-12-03 08:23:51.123456+00"),
// and how many it replaced (0: sql is returned as it is).
func FreezeTime(sql, moment string) (string, int, error) {
	tree, err := pg_query.Parse(sql)
	if err != nil {
		return "", 0, err
	}
	if len(tree.Stmts) != 1 {
		return sql, 0, nil
	}
	lit := quoteLiteral(moment)
	var repl error
	n := 0
	Walk(tree.Stmts[0].Stmt, func(m proto.Message) {
		node, ok := m.(*pg_query.Node)
		if !ok || repl != nil {
			return
		}
		tmpl := timeCall(node)
		if tmpl == "" {
			return
		}
		e, err := parseExpr(fmt.Sprintf(tmpl, lit))
		if err != nil {
			repl = err
			return
		}
		node.Node = e.Node
		n++
	})
	if repl != nil {
		return "", 0, repl
	}
	if n == 0 {
		return sql, 0, nil
	}
	out, err := deparse(tree.Version, tree.Stmts[0].Stmt)
	return out, n, err
}

// ColumnDefault is a column and its DEFAULT expression, as pg_get_expr
// prints it.
type ColumnDefault struct {
	Name, Expr string
}

// FillDefaults returns the INSERT sql with the given columns' DEFAULT
// expressions written where its rows take them: a column the statement
// does not list is added to the list with its expression in every row;
// a DEFAULT in a listed column's place becomes the expression. columns
// are the table's columns in order, which an INSERT without a column list
// gives its values to. ok is false (and sql unchanged) when the statement
// is not an INSERT of VALUES rows (or DEFAULT VALUES), or when a row has
// fewer values than another.
func FillDefaults(sql string, columns []string, fill []ColumnDefault) (out string, ok bool, err error) {
	tree, err := pg_query.Parse(sql)
	if err != nil {
		return "", false, err
	}
	if len(tree.Stmts) != 1 || tree.Stmts[0].Stmt.GetInsertStmt() == nil {
		return sql, false, nil
	}
	ins := tree.Stmts[0].Stmt.GetInsertStmt()
	var rows [][]*pg_query.Node
	if ins.SelectStmt != nil {
		sel := ins.SelectStmt.GetSelectStmt()
		if sel == nil || len(sel.ValuesLists) == 0 || sel.WithClause != nil || len(sel.SortClause) > 0 ||
			sel.LimitCount != nil || sel.LimitOffset != nil {
			return sql, false, nil
		}
		for _, r := range sel.ValuesLists {
			rows = append(rows, r.GetList().GetItems())
		}
	} else {
		rows = [][]*pg_query.Node{nil} // DEFAULT VALUES: one row, every column its default
	}
	width := len(rows[0])
	for _, r := range rows {
		if len(r) != width {
			return sql, false, nil
		}
	}
	var listed []string
	for _, c := range ins.Cols {
		rt := c.GetResTarget()
		if rt == nil || len(rt.Indirection) > 0 {
			return sql, false, nil // a field or subscript of a column
		}
		listed = append(listed, rt.Name)
	}
	if ins.Cols == nil {
		if width > len(columns) {
			return sql, false, nil
		}
		listed = slices.Clone(columns[:width])
		for _, c := range listed {
			ins.Cols = append(ins.Cols, &pg_query.Node{Node: &pg_query.Node_ResTarget{ResTarget: &pg_query.ResTarget{Name: c, Location: -1}}})
		}
	}
	for _, f := range fill {
		e, err := parseExpr(f.Expr)
		if err != nil {
			return "", false, err
		}
		if i := slices.Index(listed, f.Name); i >= 0 {
			for _, r := range rows {
				if r[i].GetSetToDefault() != nil {
					r[i] = proto.Clone(e).(*pg_query.Node)
				}
			}
			continue
		}
		listed = append(listed, f.Name)
		ins.Cols = append(ins.Cols, &pg_query.Node{Node: &pg_query.Node_ResTarget{ResTarget: &pg_query.ResTarget{Name: f.Name, Location: -1}}})
		for k := range rows {
			rows[k] = append(rows[k], proto.Clone(e).(*pg_query.Node))
		}
	}
	lists := make([]*pg_query.Node, len(rows))
	for k, r := range rows {
		lists[k] = &pg_query.Node{Node: &pg_query.Node_List{List: &pg_query.List{Items: r}}}
	}
	if ins.SelectStmt == nil {
		ins.SelectStmt = &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: &pg_query.SelectStmt{
			LimitOption: pg_query.LimitOption_LIMIT_OPTION_DEFAULT}}}
	}
	ins.SelectStmt.GetSelectStmt().ValuesLists = lists
	out, err = deparse(tree.Version, tree.Stmts[0].Stmt)
	return out, err == nil, err
}

// quoteLiteral quotes s as an SQL string constant.
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
