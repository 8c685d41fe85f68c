package planner

import (
	"fmt"
	"regexp"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"
)

// DDLValueChecks returns, for an ALTER TABLE that computes values for
// existing rows (ADD COLUMN ... DEFAULT expr, ALTER COLUMN ... TYPE ...
// USING expr), one statement per such expression that adds a stored
// generated column computed by it to the same table. Run (and rolled back)
// on the default node, it fails unless PostgreSQL itself finds the
// expression immutable (no volatile or stable function or cast, no
// subquery, no system column): only then does every shard or copy, each
// computing the expression on its own worker, store what PostgreSQL would
// store once. timeWord reports a date/time word ('now', 'today', ...)
// in such an expression: a constant read when each worker parses it.
// Anything else gives no checks.
func DDLValueChecks(sql string) (checks []string, timeWord bool) {
	tree, err := pg_query.Parse(sql)
	if err != nil || len(tree.Stmts) != 1 {
		return nil, false
	}
	at := tree.Stmts[0].Stmt.GetAlterTableStmt()
	if at == nil || at.Relation == nil {
		return nil, false
	}
	for _, c := range at.Cmds {
		cmd := c.GetAlterTableCmd()
		if cmd == nil {
			continue
		}
		def := cmd.GetDef().GetColumnDef()
		if def == nil || def.TypeName == nil {
			continue
		}
		var expr *pg_query.Node
		switch cmd.Subtype {
		case pg_query.AlterTableType_AT_AddColumn:
			for _, cn := range def.Constraints {
				if con := cn.GetConstraint(); con != nil && con.Contype == pg_query.ConstrType_CONSTR_DEFAULT {
					expr = con.RawExpr
				}
			}
		case pg_query.AlterTableType_AT_AlterColumnType:
			expr = def.RawDefault
		}
		if expr == nil {
			continue
		}
		tn := proto.Clone(def.TypeName).(*pg_query.TypeName)
		cast := &pg_query.Node{Node: &pg_query.Node_TypeCast{TypeCast: &pg_query.TypeCast{Arg: expr, TypeName: tn, Location: -1}}}
		chk := &pg_query.AlterTableStmt{Relation: at.Relation, Objtype: pg_query.ObjectType_OBJECT_TABLE, Cmds: []*pg_query.Node{{
			Node: &pg_query.Node_AlterTableCmd{AlterTableCmd: &pg_query.AlterTableCmd{
				Subtype: pg_query.AlterTableType_AT_AddColumn, Behavior: pg_query.DropBehavior_DROP_RESTRICT,
				Def: &pg_query.Node{Node: &pg_query.Node_ColumnDef{ColumnDef: &pg_query.ColumnDef{
					Colname: fmt.Sprintf("pgfleet_value_check_%d", len(checks)), TypeName: proto.Clone(def.TypeName).(*pg_query.TypeName), IsLocal: true,
					Constraints: []*pg_query.Node{{Node: &pg_query.Node_Constraint{Constraint: &pg_query.Constraint{
						Contype: pg_query.ConstrType_CONSTR_GENERATED, GeneratedWhen: "a", RawExpr: cast, Location: -1}}}},
				}}},
			}},
		}}}
		out, err := deparse(tree.Version, &pg_query.Node{Node: &pg_query.Node_AlterTableStmt{AlterTableStmt: chk}})
		if err != nil {
			// Cannot be checked: refused by the caller as a time word would be.
			return nil, true
		}
		checks = append(checks, out)
		if e, err := deparse(tree.Version, &pg_query.Node{
			Node: &pg_query.Node_SelectStmt{SelectStmt: &pg_query.SelectStmt{TargetList: []*pg_query.Node{
				pg_query.MakeResTargetNodeWithVal(expr, -1)}}}}); err != nil || timeWordRE.MatchString(e) {
			timeWord = true
		}
	}
	return checks, timeWord
}

// timeWordRE finds a date/time word anywhere in an expression's text (in a
// string constant, an array or range literal, ...); also in names, which
// is refused needlessly, never run wrongly.
var timeWordRE = regexp.MustCompile(`(?i)(^|[^a-z0-9_])(now|today|tomorrow|yesterday)($|[^a-z0-9_])`)
