package planner

import (
	pg_query "github.com/pganalyze/pg_query_go/v5"
)

// RefDigestColumn names the column RefDigestSQL adds to a client's
// RETURNING list: the whole written row.
const RefDigestColumn = "pgfleet_row"

// RefDigestSQL rewrites a write to a reference-table copy (INSERT, UPDATE
// or DELETE, already naming the shard) so that every copy reports what it
// wrote, whatever the cause of a difference (volatile or catalog-dependent
// values, system columns, LIMIT without ORDER BY, a function redefined
// elsewhere): the coordinator compares the reports before committing.
//
// Without a RETURNING of the client's, the statement becomes one row:
// the number of rows written and a digest of them (RowsDigest), so the
// answer stays small. With one (returning is
// true), the whole row is added as a last column named RefDigestColumn,
// which the coordinator compares and strips. verb is the command tag's
// word; it is "" for a statement that writes no rows (SELECT ... FOR
// UPDATE), returned as written. ok is false for MERGE, a data-modifying
// WITH, several statements or a parse or deparse failure: the caller
// refuses.
func RefDigestSQL(sql string) (out, verb string, returning, ok bool) {
	tree, err := pg_query.Parse(sql)
	if err != nil || len(tree.Stmts) != 1 {
		return "", "", false, false
	}
	var rel *pg_query.RangeVar
	var list *[]*pg_query.Node
	// A data-modifying WITH writes what no report shows.
	var with *pg_query.WithClause
	switch s := tree.Stmts[0].Stmt.GetNode().(type) {
	case *pg_query.Node_InsertStmt:
		with = s.InsertStmt.WithClause
	case *pg_query.Node_UpdateStmt:
		with = s.UpdateStmt.WithClause
	case *pg_query.Node_DeleteStmt:
		with = s.DeleteStmt.WithClause
	case *pg_query.Node_SelectStmt:
		with = s.SelectStmt.WithClause
	}
	if with != nil {
		for _, c := range with.Ctes {
			if q := c.GetCommonTableExpr().GetCtequery(); q == nil || q.GetSelectStmt() == nil {
				return "", "", false, false
			}
		}
	}
	switch s := tree.Stmts[0].Stmt.GetNode().(type) {
	case *pg_query.Node_InsertStmt:
		rel, list, verb = s.InsertStmt.Relation, &s.InsertStmt.ReturningList, "INSERT"
	case *pg_query.Node_UpdateStmt:
		rel, list, verb = s.UpdateStmt.Relation, &s.UpdateStmt.ReturningList, "UPDATE"
	case *pg_query.Node_DeleteStmt:
		rel, list, verb = s.DeleteStmt.Relation, &s.DeleteStmt.ReturningList, "DELETE"
	case *pg_query.Node_MergeStmt:
		return "", "", false, false
	default:
		// Writes nothing (SELECT ... FOR UPDATE): runs as written.
		return sql, "", false, true
	}
	if rel == nil {
		return "", "", false, false
	}
	name := rel.Relname
	if rel.Alias != nil && rel.Alias.Aliasname != "" {
		name = rel.Alias.Aliasname
	}
	returning = len(*list) > 0
	// ROW(rel.*) is the whole row (rel alone could name a column).
	star := pg_query.MakeColumnRefNode([]*pg_query.Node{pg_query.MakeStrNode(name), pg_query.MakeAStarNode()}, -1)
	row := &pg_query.Node{Node: &pg_query.Node_RowExpr{RowExpr: &pg_query.RowExpr{Args: []*pg_query.Node{star},
		RowFormat: pg_query.CoercionForm_COERCE_EXPLICIT_CALL, Location: -1}}}
	*list = append(*list, pg_query.MakeResTargetNodeWithNameAndVal(RefDigestColumn, row, -1))
	d, err := deparse(tree.Version, tree.Stmts[0].Stmt)
	if err != nil {
		return "", "", false, false
	}
	if returning {
		return d, verb, true, true
	}
	return "WITH pgfleet_w AS (" + d + ") SELECT pg_catalog.count(*), " + RowsDigest(RefDigestColumn) + " FROM pgfleet_w", verb, false, true
}

// RowsDigest is an aggregate over row values (a composite column or
// alias) that sums up their multiset in constant memory, whatever their
// order: the sum of a 64-bit hash of each row's text.
func RowsDigest(row string) string {
	return "pg_catalog.sum(('x' || pg_catalog.left(pg_catalog.md5(" + row + "::text), 16))::bit(64)::bigint)"
}
