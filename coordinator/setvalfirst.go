package coordinator

import (
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/internal/wire"
	"github.com/pgfleet/pgfleet/planner"
)

// setvalFirst runs a SELECT of setval() over a table's aggregates
// (planner.SetvalFirst: Django's sequence reset after loaddata) in two
// steps of one transaction, the client's or an implicit one: the
// aggregates over the table, then setval() on the default node with their
// row, whose answer is the client's.
func (ss *session) setvalFirst(vf *planner.SetvalFirst) error {
	const what, hint = "setval()'s arguments", "Read the values first (SELECT max(...)), then call setval() with them."
	implicit, stop, err := ss.startRowsFirst(vf.Unwrap(), hint)
	if stop {
		return err
	}
	defer func() { ss.multi = nil }()
	m := ss.multi
	c, stop, err := ss.captureRun(vf.Read, ss.srv.cfg.MaxGather)
	if stop {
		return err
	}
	m.start, m.scanned, m.failed = len(ss.out), len(ss.out), false
	res, perr := ss.capturedRows(c, what, hint)
	switch {
	case perr != nil:
		return ss.endString(implicit, ss.partError(perr), nil)
	case res.errBody != nil:
		ss.out = wire.AppendFrame(ss.out, 'E', withoutPosition('E', res.errBody))
		m.start, m.scanned = len(ss.out), len(ss.out)
		return ss.endString(implicit, true, nil)
	case len(res.rows) != 1:
		return ss.endString(implicit, ss.partError(pgerr.New(pgerr.Internal, "%d rows of %s, want 1", len(res.rows), what)), nil)
	}
	cols, err := ss.textColTypes(res.oids, res.typmods, what, "cast the argument to a plain type", false)
	if err != nil {
		return ss.endString(implicit, ss.partError(err), nil)
	}
	rows, _ := rowsSelect(res.rows, cols, make([]string, len(cols)))
	return ss.endWithLast(implicit, vf.Call(rows))
}
