package planner

import (
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"
)

// TouchesNothing reports whether a statement text that names no catalog
// table also touches no other relation, sequence or function, so that it
// runs the same on any worker: settings (SET, RESET, SHOW), transaction
// control (savepoints included), DISCARD, DEALLOCATE, and SELECT or VALUES
// of constants, operators and a few built-in functions that read no
// relation (SELECT 1, SELECT now()). Other function calls and reg-type
// casts may read relations only the default node has. A text
// that does not parse touches nothing: any worker reports the error.
func TouchesNothing(sql string) bool {
	tree, err := pg_query.Parse(sql)
	if err != nil {
		return true
	}
	for _, raw := range tree.Stmts {
		switch raw.Stmt.GetNode().(type) {
		case *pg_query.Node_VariableSetStmt, *pg_query.Node_VariableShowStmt, *pg_query.Node_TransactionStmt,
			*pg_query.Node_DiscardStmt, *pg_query.Node_DeallocateStmt:
		case *pg_query.Node_SelectStmt:
			touches := false
			Walk(raw.Stmt, func(m proto.Message) {
				switch n := m.(type) {
				case *pg_query.FuncCall:
					touches = touches || !pureBuiltin(n)
				case *pg_query.RangeVar, *pg_query.RangeFunction, *pg_query.IntoClause:
					touches = true
				case *pg_query.TypeName:
					for _, p := range n.Names {
						if strings.HasPrefix(p.GetString_().GetSval(), "reg") {
							touches = true
						}
					}
				}
			})
			if touches {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// pureBuiltins are built-in functions that read no relation and answer
// the same in any worker's transaction.
var pureBuiltins = map[string]bool{
	"now": true, "clock_timestamp": true, "statement_timestamp": true, "transaction_timestamp": true,
	"timeofday": true, "random": true, "current_setting": true, "version": true, "gen_random_uuid": true,
	"length": true, "lower": true, "upper": true, "abs": true, "round": true, "md5": true, "concat": true,
	"format": true, "to_char": true, "date_trunc": true, "extract": true, "date_part": true, "coalesce": true,
}

func pureBuiltin(f *pg_query.FuncCall) bool {
	names := ListNames(&pg_query.List{Items: f.Funcname})
	switch {
	case len(names) == 1:
	case len(names) == 2 && names[0] == "pg_catalog":
		names = names[1:]
	default:
		return false
	}
	return pureBuiltins[names[0]]
}

// AdvisoryUnlockOnly reports whether sql is one SELECT of calls of
// PostgreSQL's advisory unlock functions (pg_advisory_unlock,
// pg_advisory_unlock_shared, pg_advisory_unlock_all) of constants and
// parameters alone: it reads no relation and no setting, and never waits,
// so it answers the same on any connection of the session that holds the
// locks.
func AdvisoryUnlockOnly(sql string) bool {
	tree, err := pg_query.Parse(sql)
	if err != nil || len(tree.Stmts) != 1 {
		return false
	}
	sel := tree.Stmts[0].Stmt.GetSelectStmt()
	if sel == nil || sel.FromClause != nil || sel.WhereClause != nil || sel.WithClause != nil || sel.IntoClause != nil ||
		len(sel.ValuesLists) > 0 || sel.Op != pg_query.SetOperation_SETOP_NONE || len(sel.TargetList) == 0 {
		return false
	}
	for _, t := range sel.TargetList {
		rt := t.GetResTarget()
		if rt == nil || !unlockCall(rt.Val) {
			return false
		}
	}
	return true
}

// unlockCall reports whether n is a call of an advisory unlock function
// whose arguments are constants or parameters (cast or not), cast or not.
func unlockCall(n *pg_query.Node) bool {
	for c := n.GetTypeCast(); c != nil; c = n.GetTypeCast() {
		if !plainCast(c.TypeName) {
			return false
		}
		n = c.Arg // (its boolean's text is the same everywhere)
	}
	f := n.GetFuncCall()
	if f == nil || f.AggOrder != nil || f.AggFilter != nil || f.Over != nil || f.AggStar || f.AggDistinct || f.FuncVariadic {
		return false
	}
	names := ListNames(&pg_query.List{Items: f.Funcname})
	if len(names) == 2 && names[0] == "pg_catalog" {
		names = names[1:]
	}
	if len(names) != 1 || (names[0] != "pg_advisory_unlock" && names[0] != "pg_advisory_unlock_shared" && names[0] != "pg_advisory_unlock_all") {
		return false
	}
	for _, a := range f.Args {
		for c := a.GetTypeCast(); c != nil; c = a.GetTypeCast() {
			if !plainCast(c.TypeName) {
				return false // 't'::regclass reads the catalog and search_path (adversary 151)
			}
			a = c.Arg
		}
		if a.GetAConst() == nil && a.GetParamRef() == nil {
			return false
		}
	}
	return true
}

// plainCasts are the types a constant cast to reads the same on any
// connection (not regclass and its kind, which read the catalog and the
// search_path, nor types whose input reads settings).
var plainCasts = map[string]bool{
	"int2": true, "int4": true, "int8": true, "oid": true, "numeric": true,
	"text": true, "varchar": true, "bpchar": true, "bool": true,
}

func plainCast(tn *pg_query.TypeName) bool {
	if tn == nil || len(tn.ArrayBounds) > 0 {
		return false
	}
	names := ListNames(&pg_query.List{Items: tn.Names})
	if len(names) == 2 && names[0] == "pg_catalog" {
		names = names[1:]
	}
	return len(names) == 1 && plainCasts[names[0]]
}
