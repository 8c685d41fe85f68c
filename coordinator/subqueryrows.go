package coordinator

import (
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/executor"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/internal/wire"
	"github.com/pgfleet/pgfleet/planner"
	"github.com/pgfleet/pgfleet/pooling"
)

// UPDATE or DELETE with IN/ANY/ALL subqueries over distributed tables that
// do not pin to one shard (planner.SubqueryFirst), in a simple query: as
// for an INSERT ... SELECT that does not push down (insertrows.go), the
// coordinator runs each subquery as a query of its own, its answer kept
// from the client, then the statement with the subqueries' rows in their
// place as VALUES of typed constants, planned and run as any UPDATE or
// DELETE; all in one transaction, the client's or one the coordinator
// opens and commits. The subqueries see the transaction's writes before
// the statement, as the statement's own would (READ COMMITTED takes a new
// snapshot per statement, so rows another transaction commits between
// them are seen by the statement's own scan and not by its subqueries:
// Citus's intermediate results behave so too). A subquery that reads the
// outer statement's rows cannot run on its own: PostgreSQL's 42703 or
// 42P01 for it gives the original refusal instead.

// subqueriesFirst runs an UPDATE or DELETE (sql) the planner answered with
// qf.
func (ss *session) subqueriesFirst(sql string, qf *planner.SubqueryFirst) error {
	implicit, stop, err := ss.startRowsFirst(qf.Unwrap(), "Send the statement as a query of its own.")
	if stop {
		return err
	}
	defer func() { ss.multi = nil }()
	m := ss.multi
	if err := ss.volatileSubqueries(qf); err != nil {
		return ss.endString(implicit, ss.partError(err), nil)
	}
	const what = "a subquery of an UPDATE or DELETE"
	selects := make([]string, len(qf.Selects))
	size := 0
	for k, sel := range qf.Selects {
		c, stop, err := ss.captureRun(sel, ss.srv.cfg.MaxGather)
		if stop {
			return err
		}
		m.start, m.scanned, m.failed = len(ss.out), len(ss.out), false
		res, perr := ss.capturedRows(c, what, "Update or delete the rows in smaller parts (narrower subqueries).")
		var err2 error
		switch {
		case perr != nil:
			err2 = perr
		case res.errBody != nil:
			if code := errCode(res.errBody); code == pgerr.UndefinedColumn || code == pgerr.UndefinedTable {
				// It reads the outer statement's rows, or names what does
				// not exist: the default node's Parse of the statement
				// says which (PostgreSQL's 42703, else the refusal).
				// (In the client's block the refusal stands: what the
				// block made is not seen elsewhere.)
				err2 = qf.Unwrap()
				if implicit {
					err2 = ss.defaultParse(sql, nil, err2)
				}
				break
			}
			if !evalIndependent(errCode(res.errBody)) {
				// An error PostgreSQL raises only if it evaluates the
				// subquery, which it may not (no row of the statement
				// reaches it): data errors (adversary: 22012 where
				// PostgreSQL deleted nothing), a function's RAISE, and
				// lookups at run time ('f'::regproc: 42883). Unless the
				// statement's analysis fails first (the default node's
				// Parse of it: PostgreSQL's error, in PostgreSQL's order;
				// adversary: a subquery's 42883 came before the outer
				// WHERE's 42703), a refusal with the error as detail.
				e := pgerr.New(pgerr.FeatureNotSupported, "%s; its subquery, run first, failed, and PostgreSQL might not have evaluated it", pgerr.Flatten(qf.Unwrap()).Message).
					WithHint("Run the subquery as a statement of its own, or pin it to the statement's shard.")
				var er pgproto3.ErrorResponse
				if er.Decode(res.errBody) == nil {
					e.Detail = er.Code + ": " + er.Message
				}
				err2 = e
				if implicit {
					err2 = ss.defaultParse(sql, nil, err2)
				}
				break
			}
			ss.out = wire.AppendFrame(ss.out, 'E', withoutPosition('E', res.errBody))
			m.start, m.scanned = len(ss.out), len(ss.out)
			return ss.endString(implicit, true, nil)
		case qf.Exists[k]:
			selects[k] = "SELECT true WHERE false"
			if len(res.rows) > 0 {
				selects[k] = "SELECT true"
			}
		case len(res.oids) == 0:
			err2 = qf.Unwrap()
		default:
			var cols []textType
			var colls []string
			if cols, err2 = ss.textColTypes(res.oids, res.typmods, what, "pin the subquery to the statement's shard", false); err2 == nil {
				colls, err2 = ss.subqueryCollations(sel, cols)
			}
			if err2 == nil {
				var n int
				selects[k], n = rowsSelect(res.rows, cols, colls)
				if size += n; size > subqueryRowsLimit {
					err2 = pgerr.New(codeProgramLimitExceeded,
						"the rows of the subqueries of an UPDATE or DELETE exceed %d bytes, which the coordinator carries in the statement", subqueryRowsLimit).
						WithHint("Update or delete the rows in smaller parts (narrower subqueries).")
				}
			}
		}
		if err2 != nil {
			return ss.endString(implicit, ss.partError(err2), nil)
		}
	}
	q, err := qf.With(selects)
	if err != nil {
		return ss.endString(implicit, ss.partError(err), nil)
	}
	return ss.endWithLast(implicit, q)
}

// endWithLast runs sql, the statement a rows-first one runs last, whose
// answer is the client's (error positions taken out: they would point
// into pgfleet's text), and ends the string (startRowsFirst).
func (ss *session) endWithLast(implicit bool, sql string) error {
	m := ss.multi
	begin, flushes := len(ss.out), m.flushes
	if stop, err := ss.partRun(sql, false); stop {
		return err
	}
	if m.flushes != flushes {
		begin = 0 // what came before went to the client
	}
	ss.out = stripPositions(ss.out, begin)
	m.start, m.scanned = len(ss.out), len(ss.out)
	var held []byte
	if !m.failed && implicit {
		held = ss.holdLastTag(begin, flushes)
	}
	return ss.endString(implicit, m.failed, held)
}

// arrayEscaper quotes an element of an array's text inside double quotes.
var arrayEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`)

// arrayText writes a text[] as PostgreSQL reads it back (parseTextArray):
// every element quoted, NULL for nil.
func arrayText(vals []*string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, v := range vals {
		if i > 0 {
			b.WriteByte(',')
		}
		if v == nil {
			b.WriteString("NULL")
			continue
		}
		b.WriteByte('"')
		b.WriteString(arrayEscaper.Replace(*v))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// subqueryRowsLimit bounds the text of the rows the subqueries of one
// UPDATE or DELETE put in it: the coordinator plans the statement, and a
// multi-shard one is deparsed once per shard.
const subqueryRowsLimit = 4 << 20

// rowsSelect is a SELECT of rows (text values, nil for NULL) with the
// columns' types and collations ("" for the default or none), and the size
// of the values' text. Columns go as arrays unnested (one constant each,
// whatever the number of rows); with an array column, whose rows an
// array of arrays would flatten, as VALUES of typed constants.
func rowsSelect(rows [][]*string, cols []textType, colls []string) (string, int) {
	collate := func(i int) string {
		if colls[i] == "" {
			return ""
		}
		return " COLLATE " + colls[i]
	}
	size := 0
	if slices.ContainsFunc(cols, func(c textType) bool { return c.array }) {
		if len(rows) == 0 {
			nulls := make([]string, len(cols))
			for i, c := range cols {
				nulls[i] = "NULL::" + c.name + collate(i)
			}
			return "SELECT " + strings.Join(nulls, ", ") + " WHERE false", 0
		}
		var b strings.Builder
		b.WriteString("SELECT * FROM (VALUES ")
		for r, row := range rows {
			if r > 0 {
				b.WriteString(", ")
			}
			b.WriteByte('(')
			for i, v := range row {
				if i > 0 {
					b.WriteString(", ")
				}
				if v == nil {
					b.WriteString("NULL")
				} else {
					b.WriteString(quoteLiteral(*v))
					size += len(*v)
				}
				b.WriteString("::" + cols[i].name + collate(i))
			}
			b.WriteByte(')')
		}
		b.WriteString(") pgfleet_rows")
		return b.String(), size
	}
	arrays := make([]string, len(cols))
	col := make([]*string, len(rows))
	for i, c := range cols {
		for r, row := range rows {
			col[r] = row[i]
		}
		a := arrayText(col)
		size += len(a)
		arrays[i] = quoteLiteral(a) + "::" + c.name + "[]" + collate(i)
	}
	if len(arrays) == 1 {
		// One array: pg_catalog's (a user's unnest(int[]) could be the
		// better match); several take PostgreSQL's multi-argument form.
		return "SELECT * FROM pg_catalog.unnest(" + arrays[0] + ") pgfleet_rows", size
	}
	return "SELECT * FROM unnest(" + strings.Join(arrays, ", ") + ") pgfleet_rows", size
}

// subqueryCollations are the collations of a subquery's collatable
// columns ("" for the database default and for the others), asked of the
// default node, whose tables of the catalog's names have the shards'
// columns (LIMIT 0: nothing is read or called). A column of another
// collation compares by it (a case-insensitive one matches 'A' to 'a'),
// which its rows must keep.
func (ss *session) subqueryCollations(sel string, cols []textType) ([]string, error) {
	colls := make([]string, len(cols))
	var exprs, names []string
	var at []int
	for i, c := range cols {
		names = append(names, "c"+strconv.Itoa(i+1))
		if c.collatable {
			exprs = append(exprs, "pg_catalog.pg_collation_for(s.c"+strconv.Itoa(i+1)+")::text")
			at = append(at, i)
		}
	}
	if len(exprs) == 0 {
		return colls, nil
	}
	var rows [][]*string
	err := ss.onDefaultNode(func(sc *pooling.ServerConn) (err error) {
		rows, err = executor.QueryText(sc, "SELECT "+strings.Join(exprs, ", ")+" FROM (SELECT 1) pgfleet_one LEFT JOIN (SELECT * FROM ("+sel+
			") pgfleet_sub LIMIT 0) s("+strings.Join(names, ", ")+") ON false")
		return err
	})
	if err != nil || len(rows) != 1 || len(rows[0]) != len(at) {
		return nil, pgerr.New(pgerr.FeatureNotSupported, "the collations of a subquery of an UPDATE or DELETE could not be read on the default node").
			WithHint("Cast the subquery's text columns to a type without collation, or pin it to the statement's shard.")
	}
	for k, i := range at {
		if v := rows[0][k]; v != nil && *v != `"default"` {
			colls[i] = *v
		}
	}
	return colls, nil
}

// evalIndependent reports whether an error of a subquery run first is one
// PostgreSQL raises for the statement whether or not it evaluates the
// subquery: privileges (42501, checked for every table the statement
// reads before it runs), the transaction's state (25, 40), resources and
// limits (53, 54), cancellation (57), connections (08), refusals (0A) and
// internal errors. Others depend on evaluation, or are analysis errors,
// which the statement's own Parse gives in PostgreSQL's order.
func evalIndependent(code string) bool {
	if len(code) != 5 || code == pgerr.InsufficientPrivilege {
		return true
	}
	switch code[:2] {
	case "25", "40", "53", "54", "57", "08", "0A", "XX", "58":
		return true
	}
	return false
}

// volatileSubqueries refuses subqueries that call a VOLATILE function
// (random() aside), aggregate (by its support functions) or operator (of
// BETWEEN, CASE x WHEN and IN (SELECT ...) too), cast to a user type (its
// cast function, a domain's CHECK), or read a view: run first, they would call it where
// PostgreSQL, which evaluates a subquery only when a row of the statement
// reaches it, may not (adversary: WHERE false AND id IN (SELECT ... WHERE
// bump() > 0) advanced a sequence PostgreSQL left alone). The functions
// are looked up by name and argument count, any overload, in the
// session's database on the default node. A string constant cast to an
// enum, to a domain without constraints or to an array of them calls
// nothing at run time (PostgreSQL reads it as it analyses the statement).
func (ss *session) volatileSubqueries(qf *planner.SubqueryFirst) error {
	var calls []string
	for _, c := range qf.Calls {
		if !strings.HasPrefix(c, "random/") {
			calls = append(calls, c)
		}
	}
	if len(calls) == 0 && len(qf.Ops) == 0 && len(qf.Types) == 0 && len(qf.ConstTypes) == 0 && len(qf.Rels) == 0 {
		return nil
	}
	arr := func(l []string) string {
		q := make([]string, len(l))
		for i, v := range l {
			q[i] = quoteLiteral(v)
		}
		return "ARRAY[" + strings.Join(q, ", ") + "]::text[]"
	}
	var rows [][]*string
	err := ss.onDefaultNode(func(sc *pooling.ServerConn) (err error) {
		// An aggregate is volatile by its support functions too (a
		// user's with a volatile transition function).
		rows, err = executor.QueryText(sc, `SELECT
			(SELECT min(p.proname::text) FROM `+procsCalled(arr(calls))+`
				WHERE (p.provolatile = 'v' OR EXISTS (SELECT FROM pg_catalog.pg_aggregate a JOIN pg_catalog.pg_proc t
					ON t.oid IN (a.aggtransfn, a.aggfinalfn, a.aggcombinefn, a.aggserialfn, a.aggdeserialfn, a.aggmtransfn, a.aggminvtransfn, a.aggmfinalfn)
					WHERE a.aggfnoid = p.oid AND t.provolatile = 'v'))),
			(SELECT min(o.oprname::text) FROM pg_catalog.pg_operator o JOIN pg_catalog.pg_proc f ON f.oid = o.oprcode
				WHERE o.oprname = ANY (`+arr(qf.Ops)+`) AND f.provolatile = 'v'),
			(SELECT min(t) FROM (SELECT t FROM pg_catalog.unnest(`+arr(qf.Types)+`) t WHERE pg_catalog.to_regtype(t)::oid >= 16384
				UNION ALL SELECT t FROM pg_catalog.unnest(`+arr(qf.ConstTypes)+`) t JOIN pg_catalog.pg_type y ON y.oid = pg_catalog.to_regtype(t)::oid
				LEFT JOIN pg_catalog.pg_type ye ON ye.oid = y.typelem AND y.typcategory = 'A'
				WHERE y.oid >= 16384 AND NOT ((y.typtype = 'e' OR y.typtype = 'd' AND y.typbasetype < 16384) AND `+plainDomain("y")+` OR
					(ye.typtype = 'e' OR ye.typtype = 'd' AND ye.typbasetype < 16384) AND `+plainDomain("ye")+`)) u),
			(SELECT min(c.relname::text) FROM pg_catalog.pg_class c WHERE c.relkind = 'v' AND c.relname = ANY (`+arr(qf.Rels)+`))`)
		return err
	})
	if err != nil || len(rows) != 1 || len(rows[0]) != 4 {
		return pgerr.New(pgerr.FeatureNotSupported, "%s; the volatility of the functions its subqueries call could not be read", pgerr.Flatten(qf.Unwrap()).Message).
			WithHint("Run the subqueries as statements of their own.")
	}
	name := ""
	if f := rows[0][0]; f != nil {
		name = "the volatile function " + *f + "()"
	} else if o := rows[0][1]; o != nil {
		name = "the volatile operator " + *o
	} else if t := rows[0][2]; t != nil {
		name = "a cast to the user type " + *t + " (which may call a function or a domain's CHECK)"
	} else if v := rows[0][3]; v != nil {
		name = "the view " + *v + " (which may call a volatile function)"
	}
	if name == "" {
		return nil
	}
	return pgerr.New(pgerr.FeatureNotSupported, "%s; its subquery calls %s, which running the subquery first would call where PostgreSQL may not", pgerr.Flatten(qf.Unwrap()).Message, name).
		WithHint("Run the subquery as a statement of its own, or pin it to the statement's shard.")
}
