package planner

import (
	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"
)

// Bindable says how a simple-protocol statement's constants, lifted into
// parameters for its plan (the coordinator's liftLiterals), may be bound
// as parameters of a statement the workers keep prepared rather than
// spliced back into a text they plan at every execution. It holds for a
// worker statement in which every parameter is a value compared with a
// column (col < $1, col BETWEEN $1 AND $2 + $3, col IN ($1, $2)), a
// column's operand (col + $1), or a LIMIT or OFFSET:
//
//   - there the statement's meaning does not depend on whether the value
//     is a constant or a parameter, given the parameter the constant's
//     type (the coordinator binds only numbers, typed int4, int8 or
//     numeric as PostgreSQL's parser types them): operators resolve
//     alike, before and after an ALTER of the column;
//   - PostgreSQL folds an expression of constants alone when it plans (an
//     error there fails the statement even if no row needs it), while a
//     prepared generic plan evaluates it when a row does; so no
//     expression may be of constants alone (a cast, 40000::int2, is one)
//     but $a + $b and $a - $b, which the coordinator checks cannot fail
//     for the values it binds (Sums).
//
// Errors at Parse or Bind of the prepared form that a constant may cause
// are left to the text, which the coordinator runs instead then: its
// error is PostgreSQL's own.
type Bindable struct {
	// Sums: $A Op $B, Op '+' or '-'.
	Sums []ParamSum `json:"sums,omitempty"`
}

// ParamSum is an arithmetic of two parameters.
type ParamSum struct {
	A, B int
	Op   byte
}

// comparisons are the operators a bound value may be compared by.
var comparisons = map[string]bool{"=": true, "<>": true, "!=": true, "<": true, ">": true, "<=": true, ">=": true}

// bindable is the Bindable of a worker statement, or nil when one of its
// parameters is used otherwise.
func bindable(stmt *pg_query.Node) *Bindable {
	sel := stmt.GetSelectStmt()
	if sel == nil {
		return nil
	}
	safe := map[*pg_query.ParamRef]bool{}
	var sums []ParamSum
	// side marks the parameters of a constant operand (n) of an operator
	// whose other operand reads a column; false if n is not one.
	side := func(n *pg_query.Node) bool {
		if p := n.GetParamRef(); p != nil {
			safe[p] = true
			return true
		}
		e := n.GetAExpr()
		if e == nil || e.Kind != pg_query.A_Expr_Kind_AEXPR_OP || len(e.Name) != 1 {
			return false
		}
		op := e.Name[0].GetString_().GetSval()
		a, b := e.Lexpr.GetParamRef(), e.Rexpr.GetParamRef()
		if (op != "+" && op != "-") || a == nil || b == nil {
			return false
		}
		safe[a], safe[b] = true, true
		sums = append(sums, ParamSum{A: int(a.Number), B: int(b.Number), Op: op[0]})
		return true
	}
	Walk(stmt, func(m proto.Message) {
		e, ok := m.(*pg_query.A_Expr)
		if !ok || e.Lexpr == nil || e.Rexpr == nil {
			return
		}
		switch e.Kind {
		case pg_query.A_Expr_Kind_AEXPR_OP:
			// Any operator with a column on one side: evaluated per row
			// in either form.
			if readsColumn(e.Lexpr) {
				side(e.Rexpr)
			} else if readsColumn(e.Rexpr) {
				side(e.Lexpr)
			}
		case pg_query.A_Expr_Kind_AEXPR_OP_ANY, pg_query.A_Expr_Kind_AEXPR_OP_ALL:
			if len(e.Name) == 1 && comparisons[e.Name[0].GetString_().GetSval()] && readsColumn(e.Lexpr) {
				side(e.Rexpr)
			}
		case pg_query.A_Expr_Kind_AEXPR_DISTINCT, pg_query.A_Expr_Kind_AEXPR_NOT_DISTINCT:
			if readsColumn(e.Lexpr) {
				side(e.Rexpr)
			} else if readsColumn(e.Rexpr) {
				side(e.Lexpr)
			}
		case pg_query.A_Expr_Kind_AEXPR_IN, pg_query.A_Expr_Kind_AEXPR_BETWEEN, pg_query.A_Expr_Kind_AEXPR_NOT_BETWEEN:
			if readsColumn(e.Lexpr) {
				for _, item := range e.Rexpr.GetList().GetItems() {
					side(item)
				}
			}
		}
	})
	for _, n := range []*pg_query.Node{sel.LimitCount, sel.LimitOffset} {
		if n != nil {
			side(n)
		}
	}
	ok := true
	Walk(stmt, func(m proto.Message) {
		if p, isParam := m.(*pg_query.ParamRef); isParam && !safe[p] {
			ok = false
		}
	})
	if !ok {
		return nil
	}
	return &Bindable{Sums: sums}
}

// readsColumn reports whether n reads a column (and no parameter, whose
// own use is judged apart).
func readsColumn(n *pg_query.Node) bool {
	col, param := false, false
	Walk(n, func(m proto.Message) {
		switch m.(type) {
		case *pg_query.ColumnRef:
			col = true
		case *pg_query.ParamRef:
			param = true
		}
	})
	return col && !param
}
