package planner

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
)

// SubqueryFirst is Build's answer to an UPDATE or DELETE whose WHERE (or
// SET) has IN, = ANY, op ALL, EXISTS or scalar subqueries over distributed
// tables that do not pin to the statement's shard (Django's filter(...).update(...) over a join:
// WHERE id IN (SELECT U0.id FROM ... JOIN ...)). The coordinator runs each
// subquery first, as a query of its own in the statement's transaction,
// and then the statement with each subquery replaced by the rows it gave
// (With), planned as any UPDATE or DELETE: Citus's recursive
// planning of a subquery into an intermediate result, with the result as
// constants. A subquery that refers to the outer statement's rows does not
// run on its own (PostgreSQL says which column or table it lacks): the
// statement is refused with the original cause then. As an error, it is
// that refusal.
type SubqueryFirst struct {
	Selects []string
	// Exists marks the EXISTS subqueries: only whether they gave a row
	// counts, not their values.
	Exists []bool
	// Calls and Ops are the functions (name/argument count) and operators
	// the subqueries call: one that is VOLATILE would run where
	// PostgreSQL, which evaluates a subquery only when a row reaches it,
	// may not call it (nextval, a function that writes).
	Calls, Ops []string
	// Types are the types the subqueries name (casts), quoted: a cast to
	// a user type may call a function of the user's, a domain its CHECK.
	// Rels are the relations they read, by name: a view may call anything.
	Types, Rels []string
	// ConstTypes are the types the subqueries cast a string constant to
	// ('ok'::mood, as a rows-first write's parameters become): an enum's
	// is read as the statement is analysed, calling nothing at run time.
	ConstTypes []string
	// tmpl is the statement with a marker (markers[k], a SELECT of a
	// string) in subquery k's place.
	tmpl    string
	markers []string
	err     *pgerr.Error
}

func (e *SubqueryFirst) Error() string { return e.err.Error() }
func (e *SubqueryFirst) Unwrap() error { return e.err }

// firstSublinks are the subqueries of an UPDATE's or DELETE's WHERE (and
// an UPDATE's SET) that run first: those of firstKinds that read a
// distributed table, not inside another subquery; ok is false when a
// distributed table is read anywhere else below the statement's own level
// (another kind of subquery, a WITH, a subquery in FROM/USING), or the
// statement is neither.
func firstSublinks(cat *metadata.Snapshot, stmt *pg_query.Node) (subs []*pg_query.SubLink, ok bool) {
	var where []*pg_query.Node // an UPDATE's SET values, the WHERE
	switch {
	case stmt.GetUpdateStmt() != nil:
		u := stmt.GetUpdateStmt()
		if u.WithClause != nil {
			return nil, false
		}
		for _, t := range u.TargetList {
			where = append(where, t.GetResTarget().GetVal())
		}
		where = append(where, u.WhereClause)
	case stmt.GetDeleteStmt() != nil:
		d := stmt.GetDeleteStmt()
		if d.WithClause != nil {
			return nil, false
		}
		where = append(where, d.WhereClause)
	default:
		return nil, false
	}
	ctes := cteNames(stmt)
	readsDist := func(n proto.Message) bool {
		found := false
		Walk(n, func(m proto.Message) {
			if rv, ok := m.(*pg_query.RangeVar); ok {
				if t := lookup(cat, rv, ctes); t != nil && t.Kind == metadata.Distributed {
					found = true
				}
			}
		})
		return found
	}
	// The names the statement's own level gives its relations.
	outer := map[string]bool{}
	name := func(rv *pg_query.RangeVar) {
		if rv == nil {
			return
		}
		if rv.Alias != nil {
			outer[rv.Alias.Aliasname] = true
		} else {
			outer[rv.Relname] = true
		}
	}
	var from []*pg_query.Node
	if u := stmt.GetUpdateStmt(); u != nil {
		name(u.Relation)
		from = u.FromClause
	} else {
		name(stmt.GetDeleteStmt().Relation)
		from = stmt.GetDeleteStmt().UsingClause
	}
	for _, f := range from {
		Walk(f, func(m proto.Message) {
			switch x := m.(type) {
			case *pg_query.RangeVar:
				name(x)
			case *pg_query.Alias:
				outer[x.Aliasname] = true
			}
		})
	}
	covered := map[proto.Message]bool{}
	ok = true
	for _, w := range where {
		Walk(w, func(m proto.Message) {
			sl, isSub := m.(*pg_query.SubLink)
			if !isSub || covered[sl] || !ok {
				return
			}
			Walk(sl.Subselect, func(in proto.Message) { covered[in] = true })
			if !readsDist(sl.Subselect) {
				return
			}
			if !firstKinds[sl.SubLinkType] || sl.Subselect.GetSelectStmt() == nil || correlated(sl.Subselect, outer) ||
				sl.SubLinkType == pg_query.SubLinkType_EXISTS_SUBLINK && existsSelect(sl.Subselect.GetSelectStmt()) == nil {
				ok = false
				return
			}
			subs = append(subs, sl)
		})
	}
	if !ok || len(subs) == 0 {
		return nil, false
	}
	// Every distributed table below the statement's own level is in one
	// of them.
	inSubs := map[proto.Message]bool{}
	for _, sl := range subs {
		Walk(sl.Subselect, func(m proto.Message) { inSubs[m] = true })
	}
	top := map[*pg_query.RangeVar]bool{}
	switch {
	case stmt.GetUpdateStmt() != nil:
		u := stmt.GetUpdateStmt()
		top[u.Relation] = true
		for _, f := range u.FromClause {
			if rv := f.GetRangeVar(); rv != nil {
				top[rv] = true
			}
		}
	case stmt.GetDeleteStmt() != nil:
		d := stmt.GetDeleteStmt()
		top[d.Relation] = true
		for _, f := range d.UsingClause {
			if rv := f.GetRangeVar(); rv != nil {
				top[rv] = true
			}
		}
	}
	Walk(stmt, func(m proto.Message) {
		if rv, isRV := m.(*pg_query.RangeVar); isRV && !top[rv] && !inSubs[rv] {
			if t := lookup(cat, rv, ctes); t != nil && t.Kind == metadata.Distributed {
				ok = false
			}
		}
	})
	return subs, ok
}

// subqueryFirst is the SubqueryFirst of an UPDATE or DELETE refused for
// cause (a distributed table in a subquery), or cause where its subqueries
// cannot run first.
func (b *builder) subqueryFirst(stmt *pg_query.Node, cause error) error {
	var pe *pgerr.Error
	if !errors.As(cause, &pe) || len(b.tree.Stmts) != 1 || stmt != b.tree.Stmts[0].Stmt {
		// Not the statement itself (COPY (UPDATE ...) TO, EXPLAIN): the
		// statement with its rows would run without what wraps it.
		return cause
	}
	stmt = proto.Clone(stmt).(*pg_query.Node)
	subs, ok := firstSublinks(b.cat, stmt)
	if !ok {
		return cause
	}
	var nonce [12]byte
	_, _ = rand.Read(nonce[:])
	sf := &SubqueryFirst{err: pe}
	for k, sl := range subs {
		text, err := deparse(b.tree.Version, sl.Subselect)
		if err != nil {
			return cause
		}
		if sl.SubLinkType == pg_query.SubLinkType_EXISTS_SUBLINK {
			if text, err = deparse(b.tree.Version, &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: existsSelect(sl.Subselect.GetSelectStmt())}}); err != nil {
				return cause
			}
		}
		sf.Selects = append(sf.Selects, text)
		sf.Exists = append(sf.Exists, sl.SubLinkType == pg_query.SubLinkType_EXISTS_SUBLINK)
		if m := mutability(sl.Subselect); m != nil {
			sf.Calls, sf.Ops = append(sf.Calls, m.Calls...), append(sf.Ops, m.Ops...)
		}
		constCast := map[*pg_query.TypeName]bool{}
		Walk(sl.Subselect, func(m proto.Message) {
			switch x := m.(type) {
			case *pg_query.TypeCast: // (before its TypeName)
				if c := x.Arg.GetAConst(); c != nil && c.GetSval() != nil && x.TypeName != nil {
					constCast[x.TypeName] = true
				}
			case *pg_query.SubLink: // x op ANY (SELECT ...): its operator; IN's is =
				if l := len(x.OperName); l > 0 {
					sf.Ops = append(sf.Ops, x.OperName[l-1].GetString_().GetSval())
				} else if x.SubLinkType == pg_query.SubLinkType_ANY_SUBLINK {
					sf.Ops = append(sf.Ops, "=")
				}
			case *pg_query.A_Expr: // BETWEEN names no operator: its >= and <= (< and > negated)
				switch x.Kind {
				case pg_query.A_Expr_Kind_AEXPR_BETWEEN, pg_query.A_Expr_Kind_AEXPR_NOT_BETWEEN,
					pg_query.A_Expr_Kind_AEXPR_BETWEEN_SYM, pg_query.A_Expr_Kind_AEXPR_NOT_BETWEEN_SYM:
					sf.Ops = append(sf.Ops, ">=", "<=", "<", ">")
				}
			case *pg_query.CaseExpr: // CASE x WHEN v: x = v
				if x.Arg != nil {
					sf.Ops = append(sf.Ops, "=")
				}
			case *pg_query.RangeVar: // a view may call anything
				sf.Rels = append(sf.Rels, x.Relname)
			case *pg_query.TypeName: // a cast may call a function, a domain its CHECK
				var parts []string
				for _, n := range x.Names {
					parts = append(parts, quoteIdent(n.GetString_().GetSval()))
				}
				switch {
				case len(parts) == 0:
				case constCast[x]:
					sf.ConstTypes = append(sf.ConstTypes, strings.Join(parts, "."))
				default:
					sf.Types = append(sf.Types, strings.Join(parts, "."))
				}
			}
		})
		marker := fmt.Sprintf("pgfleet_sub_%s_%d", hex.EncodeToString(nonce[:]), k)
		sf.markers = append(sf.markers, "SELECT '"+marker+"'")
		sl.Subselect = &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: &pg_query.SelectStmt{
			TargetList:  []*pg_query.Node{resTarget(pg_query.MakeAConstStrNode(marker, -1))},
			LimitOption: pg_query.LimitOption_LIMIT_OPTION_DEFAULT}}}
	}
	var err error
	if sf.tmpl, err = deparse(b.tree.Version, stmt); err != nil {
		return cause
	}
	for _, m := range sf.markers {
		if strings.Count(sf.tmpl, m) != 1 {
			return cause
		}
	}
	return sf
}

// With is the statement with each subquery that ran first replaced by a
// SELECT of its rows (selects[k] for subquery k).
func (sf *SubqueryFirst) With(selects []string) (string, error) {
	if len(selects) != len(sf.markers) {
		return "", pgerr.New(pgerr.Internal, "%d subqueries' rows for %d subqueries", len(selects), len(sf.markers))
	}
	text := sf.tmpl
	for k, m := range sf.markers {
		before, after, _ := strings.Cut(text, m)
		text = before + selects[k] + after
	}
	return text, nil
}

// firstKinds are the subqueries that run first. Each is replaced by the
// rows it gave, which keeps what PostgreSQL does with them: IN, = ANY and
// op ALL compare with every row (NULLs included); a scalar subquery of
// several rows still fails with 21000 when PostgreSQL evaluates it (not
// over no rows); EXISTS runs as SELECT true ... LIMIT 1 and becomes one row
// or none.
var firstKinds = map[pg_query.SubLinkType]bool{
	pg_query.SubLinkType_ANY_SUBLINK:    true,
	pg_query.SubLinkType_ALL_SUBLINK:    true,
	pg_query.SubLinkType_EXPR_SUBLINK:   true,
	pg_query.SubLinkType_EXISTS_SUBLINK: true,
}

// existsSelect is the query an EXISTS subquery runs first as, nil when it
// does not run first. PostgreSQL drops the select list (and ORDER BY,
// DISTINCT, a positive LIMIT) of an EXISTS subquery and stops at its first
// row, unless it aggregates, groups, has window functions, set-returning
// functions or set operations (simplify_EXISTS_query): then it evaluates
// the select list. So a plain subquery runs as SELECT true FROM ... WHERE
// ... LIMIT 1, which evaluates what PostgreSQL does; one whose select
// list, ORDER BY or DISTINCT ON calls anything (an aggregate or a
// set-returning function cannot be told from the text) or that is not
// plain does not run first (adversary: a
// wrapper's planner dropped max(1/0) PostgreSQL evaluates, and the write
// went through where PostgreSQL raised 22012).
func existsSelect(sel *pg_query.SelectStmt) *pg_query.SelectStmt {
	if sel == nil || sel.Op != pg_query.SetOperation_SET_OPERATION_UNDEFINED && sel.Op != pg_query.SetOperation_SETOP_NONE ||
		len(sel.GroupClause) > 0 || sel.HavingClause != nil || len(sel.WindowClause) > 0 || sel.LimitOffset != nil ||
		len(sel.LockingClause) > 0 || sel.WithClause != nil || len(sel.ValuesLists) > 0 || sel.IntoClause != nil || len(sel.FromClause) == 0 {
		return nil
	}
	if sel.LimitCount != nil {
		if i := sel.LimitCount.GetAConst().GetIval(); i == nil || i.Ival <= 0 {
			return nil
		}
	}
	// The select list, ORDER BY and DISTINCT [ON] stay as written, so
	// that PostgreSQL's analysis of them (a column that does not exist,
	// ORDER BY 5, DISTINCT with an ORDER BY off its list: adversary, the
	// write went through where PostgreSQL raised 42703 or 42P10) is the
	// same; only columns, constants and * may be in them, whose
	// evaluation calls nothing and fails nowhere. (An aggregate, window
	// or set-returning function there makes PostgreSQL keep and evaluate
	// them: EXISTS (... WHERE false ORDER BY count(*)) is true.)
	plain := true
	for _, l := range [][]*pg_query.Node{sel.TargetList, sel.SortClause, sel.DistinctClause} {
		for _, t := range l {
			Walk(t, func(m proto.Message) {
				switch x := m.(type) {
				case *pg_query.Node, *pg_query.ResTarget, *pg_query.ColumnRef, *pg_query.A_Star, *pg_query.A_Const,
					*pg_query.String, *pg_query.Integer, *pg_query.Boolean:
				case *pg_query.SortBy:
					if len(x.UseOp) > 0 {
						plain = false // ORDER BY x USING op: an operator's function
					}
				default:
					plain = false
				}
			})
		}
	}
	if !plain {
		return nil
	}
	out := proto.Clone(sel).(*pg_query.SelectStmt)
	out.LimitCount = pg_query.MakeAConstIntNode(1, -1)
	out.LimitOption = pg_query.LimitOption_LIMIT_OPTION_COUNT
	return out
}

// correlated reports whether a subquery names a relation of the outer
// statement (outer: the names it gives them) in a qualified column
// reference, where no relation of its own has that name: it reads the
// outer statement's rows and cannot run on its own. (An unqualified
// reference to an outer column fails to run on its own: 42703.)
func correlated(sub *pg_query.Node, outer map[string]bool) bool {
	inner := map[string]bool{}
	Walk(sub, func(m proto.Message) {
		switch x := m.(type) {
		case *pg_query.RangeVar:
			if x.Alias != nil {
				inner[x.Alias.Aliasname] = true
			} else {
				inner[x.Relname] = true
			}
		case *pg_query.Alias:
			inner[x.Aliasname] = true
		case *pg_query.CommonTableExpr:
			inner[x.Ctename] = true
		}
	})
	found := false
	Walk(sub, func(m proto.Message) {
		if cr, ok := m.(*pg_query.ColumnRef); ok && len(cr.Fields) >= 2 {
			// t.c, t.*, s.t.c: the relation is the next to last.
			if q := cr.Fields[len(cr.Fields)-2].GetString_().GetSval(); outer[q] && !inner[q] {
				found = true
			}
		}
	})
	return found
}
