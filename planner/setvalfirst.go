package planner

import (
	"strconv"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"

	"github.com/pgfleet/pgfleet/internal/pgerr"
)

// SetvalFirst is a SELECT of one setval() whose value and is_called are
// aggregates over a distributed or reference table (Django's sequence
// reset: SELECT setval(pg_get_serial_sequence('"t"', 'id'),
// coalesce(max("id"), 1), max("id") IS NOT null) FROM "t"), run in two
// steps, as Citus runs such a query through an intermediate result: Read
// (the aggregates over the table, one row), then the setval() on the
// default node, where the sequences are, with that row's values (Call).
// As an error, it is the refusal it replaces.
type SetvalFirst struct {
	Read string
	// call is the setval() SELECT with the row's values as columns c1,
	// c2 of a relation pgfleet_v, which Call gives.
	call string
	n    int
	err  *pgerr.Error
}

func (e *SetvalFirst) Error() string { return e.err.Error() }
func (e *SetvalFirst) Unwrap() error { return e.err }

// Call is the setval() SELECT over rows, a SELECT of the Read row's
// values in their types ("SELECT ..." giving n columns).
func (e *SetvalFirst) Call(rows string) string {
	cols := make([]string, e.n)
	for i := range cols {
		cols[i] = "c" + strconv.Itoa(i+1)
	}
	return e.call + " FROM (" + rows + ") pgfleet_v(" + strings.Join(cols, ", ") + ")"
}

// setvalAggs are the aggregates whose presence makes one row.
var setvalAggs = map[string]bool{"max": true, "min": true, "count": true, "sum": true}

// setvalFirst returns the SetvalFirst of a SELECT of setval() over one
// table's aggregates, or nil: one target, one table in FROM (a WHERE
// allowed), no grouping, DISTINCT, ORDER BY, LIMIT, WITH, locking or set
// operation; the sequence argument reads no row; the others read columns
// only inside aggregates, and one has one; no subquery anywhere.
func setvalFirst(version int32, stmt *pg_query.Node, why *pgerr.Error) *SetvalFirst {
	sel := stmt.GetSelectStmt()
	if sel == nil || len(sel.TargetList) != 1 || len(sel.FromClause) != 1 || sel.FromClause[0].GetRangeVar() == nil ||
		len(sel.GroupClause) > 0 || sel.HavingClause != nil || len(sel.WindowClause) > 0 || len(sel.DistinctClause) > 0 ||
		len(sel.SortClause) > 0 || sel.LimitCount != nil || sel.LimitOffset != nil || sel.WithClause != nil ||
		sel.IntoClause != nil || len(sel.LockingClause) > 0 || sel.Op != pg_query.SetOperation_SETOP_NONE || len(sel.ValuesLists) > 0 {
		return nil
	}
	rt := sel.TargetList[0].GetResTarget()
	fc := rt.GetVal().GetFuncCall()
	if fc == nil || len(rt.Indirection) > 0 || len(fc.Args) < 2 || len(fc.Args) > 3 || fc.AggStar || fc.AggDistinct ||
		fc.Over != nil || fc.AggFilter != nil || len(fc.AggOrder) > 0 || fc.FuncVariadic || fc.AggWithinGroup {
		return nil
	}
	if name, builtin := funcName(fc); !builtin || name != "setval" {
		return nil
	}
	if hasSubLink(stmt) || readsRows(fc.Args[0]) {
		return nil
	}
	agg := false
	for _, a := range fc.Args[1:] {
		all, inAggs := 0, 0
		Walk(a, func(m proto.Message) {
			switch x := m.(type) {
			case *pg_query.ColumnRef:
				all++
			case *pg_query.FuncCall:
				if name, builtin := funcName(x); builtin && setvalAggs[name] && x.Over == nil {
					agg = true
					for _, arg := range x.Args {
						Walk(arg, func(m proto.Message) {
							if _, ok := m.(*pg_query.ColumnRef); ok {
								inAggs++
							}
						})
					}
				}
			}
		})
		if all != inAggs {
			return nil
		}
	}
	if !agg {
		return nil
	}
	// The arguments that read rows go first; the others (a constant, NULL:
	// untyped, they would come back as text) stay as written.
	read := proto.Clone(sel).(*pg_query.SelectStmt)
	read.TargetList = nil
	call := proto.Clone(fc).(*pg_query.FuncCall)
	n := 0
	for i, a := range fc.Args[1:] {
		if !readsRows(a) {
			continue
		}
		read.TargetList = append(read.TargetList, &pg_query.Node{Node: &pg_query.Node_ResTarget{ResTarget: &pg_query.ResTarget{Val: a}}})
		n++
		call.Args[i+1] = colRef("pgfleet_v", "c"+strconv.Itoa(n))
	}
	readSQL, err := deparse(version, &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: read}})
	if err != nil {
		return nil
	}
	target := &pg_query.ResTarget{Name: rt.Name, Val: &pg_query.Node{Node: &pg_query.Node_FuncCall{FuncCall: call}}}
	callSQL, err := deparse(version, &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: &pg_query.SelectStmt{
		TargetList: []*pg_query.Node{{Node: &pg_query.Node_ResTarget{ResTarget: target}}},
		Op:         pg_query.SetOperation_SETOP_NONE,
	}}})
	if err != nil {
		return nil
	}
	return &SetvalFirst{Read: readSQL, call: callSQL, n: n, err: why}
}

// readsRows reports whether n names a column (or a whole row).
func readsRows(n *pg_query.Node) bool {
	found := false
	Walk(n, func(m proto.Message) {
		if _, ok := m.(*pg_query.ColumnRef); ok {
			found = true
		}
	})
	return found
}
