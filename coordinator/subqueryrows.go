package coordinator

import (
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/internal/wire"
	"github.com/pgfleet/pgfleet/planner"
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

// subqueriesFirst runs an UPDATE or DELETE the planner answered with qf.
func (ss *session) subqueriesFirst(qf *planner.SubqueryFirst) error {
	why := pgerr.Flatten(qf.Unwrap()).Message
	switch {
	case ss.multi != nil:
		return ss.queryError(pgerr.New(pgerr.FeatureNotSupported, "%s; in a query string of several statements it is not supported either", why).
			WithHint("Send the statement as a query of its own."))
	case ss.scsOff:
		return ss.queryError(pgerr.New(pgerr.FeatureNotSupported, "%s; with standard_conforming_strings off it is not supported either", why).
			WithHint("Turn standard_conforming_strings on (the default) for this statement."))
	case ss.foreignEnc:
		return ss.queryError(pgerr.New(pgerr.FeatureNotSupported, "%s; the coordinator carries its subqueries' rows as text only in the server's encoding", why).
			WithHint("Use the server's client_encoding (UTF8) for this statement."))
	}
	m := &multiOut{start: len(ss.out), scanned: len(ss.out)}
	ss.multi = m
	defer func() { ss.multi = nil }()
	implicit := !ss.inTxn()
	if implicit {
		if stop, err := ss.partRun("BEGIN", true); stop {
			return err
		}
	}
	const what = "a subquery of an UPDATE or DELETE"
	rows := make([][][]string, len(qf.Selects))
	types := make([][]string, len(qf.Selects))
	failed := false
	for k, sel := range qf.Selects {
		c, stop, err := ss.captureRun(sel, ss.srv.cfg.MaxGather)
		if stop {
			return err
		}
		m.start, m.scanned, m.failed = len(ss.out), len(ss.out), false
		res, perr := ss.capturedRows(c, what, "Update or delete the rows in smaller parts (narrower subqueries).")
		switch {
		case perr != nil:
			failed = ss.partError(perr)
		case res.errBody != nil:
			if code := errCode(res.errBody); code == pgerr.UndefinedColumn || code == pgerr.UndefinedTable {
				// It reads the outer statement's rows (or names what
				// does not exist, which the refusal's verdict says).
				failed = ss.partError(qf.Unwrap())
				break
			}
			ss.out = wire.AppendFrame(ss.out, 'E', withoutPosition('E', res.errBody))
			m.start, m.scanned = len(ss.out), len(ss.out)
			failed = true
		case len(res.oids) == 0:
			failed = ss.partError(qf.Unwrap())
		default:
			t, terr := ss.textTypes(res.oids, res.typmods, what, "pin the subquery to the statement's shard")
			if terr != nil {
				failed = ss.partError(terr)
				break
			}
			types[k] = t
			for _, r := range res.rows {
				vals := make([]string, len(r))
				for i, v := range r {
					if v == nil {
						vals[i] = "NULL::" + t[i]
					} else {
						vals[i] = quoteLiteral(*v) + "::" + t[i]
					}
				}
				rows[k] = append(rows[k], vals)
			}
		}
		if failed {
			return ss.endString(implicit, true, nil)
		}
	}
	q, err := qf.WithRows(rows, types)
	if err != nil {
		return ss.endString(implicit, ss.partError(err), nil)
	}
	begin, flushes := len(ss.out), m.flushes
	if stop, err := ss.partRun(q, false); stop {
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
