package coordinator

import (
	"iter"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/internal/wire"
	"github.com/pgfleet/pgfleet/planner"
)

// A simple Query string of several statements runs on one worker when none
// of them is pgfleet's (the worker gives PostgreSQL's semantics itself).
// When one names a distributed or reference table, no worker can run the
// string: the coordinator runs it as PostgreSQL does, statement by
// statement in order, each answered as if sent alone but with one
// ReadyForQuery at the end, all in one implicit transaction: outside a
// transaction block the coordinator opens one before the first statement
// and commits it after the last; the first error ends the string and rolls
// the implicit transaction back (inside a block, it fails the block). The
// string's own BEGIN turns the implicit transaction into a block; its
// COMMIT or ROLLBACK ends it (with PostgreSQL's warning when there was no
// BEGIN), and the statements after it start another.

// multiOut follows the client output of the statement of such a string
// that is running: the frames it has written to ss.out since start, read
// as far as scanned, and whether one is an ErrorResponse. A flush of
// ss.out in the middle of a statement (a large result) reads what it sends
// first (session.flush).
type multiOut struct {
	start   int
	scanned int
	failed  bool
	flushes int // how many times ss.out was sent and emptied
}

// scan reads the frames of out from m.scanned on.
func (m *multiOut) scan(out []byte) {
	for {
		typ, _, n, ok := wire.SplitFrame(out[m.scanned:])
		if !ok {
			return
		}
		if typ == 'E' {
			m.failed = true
		}
		m.scanned += n
	}
}

// multiStatement runs the statements of a query string of several (see
// above). create_distributed_table and create_reference_table run when
// the implicit transaction commits (citustxn.go); the coordinator's other
// catalog functions are refused in such a string before anything runs:
// they commit on their own, and the implicit transaction could not undo
// them.
func (ss *session) multiStatement(parts []planner.Part) error {
	for _, pt := range parts {
		if pt.Function != "" && pt.Function != "create_distributed_table" && pt.Function != "create_reference_table" {
			return ss.queryError(pgerr.New(pgerr.FeatureNotSupported,
				"%s cannot run in a query string with several statements", pt.Function).
				WithHint("Send it as a query of its own, after the statements it depends on have run."))
		}
		if pt.Txn == planner.TxnPrepared {
			return ss.queryError(pgerr.New(pgerr.FeatureNotSupported,
				"two-phase commit statements are not supported in a query string with distributed or reference tables").
				WithHint("Send them as queries of their own."))
		}
	}
	m := &multiOut{start: len(ss.out), scanned: len(ss.out)}
	ss.multi = m
	defer func() { ss.multi = nil }()
	implicit, failed := false, false
	var held []byte // the last statement's CommandComplete, sent after the commit
	for k, pt := range parts {
		switch {
		case implicit && pt.Txn == planner.TxnBegin:
			if pt.Options {
				failed = ss.partError(pgerr.New(pgerr.FeatureNotSupported,
					"BEGIN with transaction modes after other statements of the same query string is not supported").
					WithHint("Put the BEGIN first in the query string, or send it on its own."))
				break
			}
			// The implicit transaction becomes a transaction block.
			implicit = false
			cc := pgproto3.CommandComplete{CommandTag: []byte(beginTag(pt.SQL))}
			ss.out, _ = cc.Encode(ss.out)
			continue
		case implicit && pt.Txn == planner.TxnEnd && pt.Chain:
			failed = ss.partError(pgerr.New("25P01", "%s AND CHAIN can only be used in transaction blocks", pt.Command))
		case implicit && pt.Txn == planner.TxnEnd:
			n := pgproto3.NoticeResponse{Severity: "WARNING", SeverityUnlocalized: "WARNING", Code: "25P01",
				Message: "there is no transaction in progress"}
			ss.out, _ = n.Encode(ss.out)
			implicit = false
		case implicit && pt.Txn == planner.TxnSavepoint:
			failed = ss.partError(pgerr.New("25P01", "%s can only be used in transaction blocks", pt.Command))
		case pt.Txn == planner.NotTxn && !ss.inTxn():
			if stop, err := ss.partRun("BEGIN", true); stop {
				return err
			}
			implicit = true
		}
		if failed {
			break
		}
		begin, flushes := len(ss.out), m.flushes
		if stop, err := ss.partRun(pt.SQL, false); stop {
			return err
		}
		if m.failed {
			failed = true
			break
		}
		if k == len(parts)-1 && implicit {
			// As PostgreSQL: the implicit transaction commits before the
			// last statement's CommandComplete, so that an error of the
			// commit comes instead of it, not after it.
			held = ss.holdLastTag(begin, flushes)
		}
	}
	return ss.endString(implicit, failed, held)
}

// holdLastTag takes out of ss.out the CommandComplete that ends the output
// of the statement that began at begin (the start of ss.out after a
// flush), to send after the implicit transaction commits.
func (ss *session) holdLastTag(begin, flushes int) []byte {
	m := ss.multi
	if m.flushes != flushes {
		begin = 0
	}
	held := takeLastTag(ss.out, begin)
	ss.out = ss.out[:len(ss.out)-len(held)]
	m.start, m.scanned = len(ss.out), len(ss.out)
	return held
}

// endString ends a query string run statement by statement: an implicit
// transaction commits what the string did, or rolls it back after an error
// (only errors of the COMMIT reach the client, and held, the last
// statement's CommandComplete, comes after a commit that succeeds); then
// the one ReadyForQuery.
func (ss *session) endString(implicit, failed bool, held []byte) error {
	if implicit {
		end := "COMMIT"
		if failed {
			end = "ROLLBACK"
		}
		if stop, err := ss.partRun(end, true); stop {
			return err
		}
		if !ss.multi.failed {
			ss.out = append(ss.out, held...)
		}
	}
	ss.out = readyForQuery(ss.out, ss.txStatus())
	return nil
}

// takeLastTag returns a copy of the CommandComplete frame that ends
// out[from:], or nil.
func takeLastTag(out []byte, from int) []byte {
	for r := from; ; {
		typ, _, n, ok := wire.SplitFrame(out[r:])
		if !ok {
			return nil
		}
		if typ == 'C' && r+n == len(out) {
			return append([]byte(nil), out[r:]...)
		}
		r += n
	}
}

// partRun runs one statement of a query string of several through
// simpleQuery and takes its ReadyForQuery out of the client's output, and
// its CommandComplete too when the statement is the coordinator's own
// (internal). It reports stop when the statement ended the string without
// a ReadyForQuery to take out: a lost worker connection, which the run
// loop reports, or the session's end (err).
func (ss *session) partRun(sql string, internal bool) (stop bool, err error) {
	m := ss.multi
	if err := ss.simpleQuery(append([]byte(sql), 0)); err != nil || ss.lost != nil {
		return true, err
	}
	m.scan(ss.out)
	drop := "Z"
	if internal {
		drop = "CZ"
	}
	ss.out = dropFrames(ss.out, m.start, drop)
	m.start, m.scanned = len(ss.out), len(ss.out)
	return false, nil
}

// partError answers a statement of the string with err, the statement's
// own failure (each comes inside the implicit transaction, which the
// caller rolls back), and reports true.
func (ss *session) partError(err error) bool {
	ss.out, _ = pgerr.Flatten(err).Encode(ss.out)
	ss.multi.start, ss.multi.scanned = len(ss.out), len(ss.out)
	return true
}

// frames yields the whole frames of b, type and body, in order.
func frames(b []byte) iter.Seq2[byte, []byte] {
	return func(yield func(byte, []byte) bool) {
		for {
			typ, body, n, ok := wire.SplitFrame(b)
			if !ok || !yield(typ, body) {
				return
			}
			b = b[n:]
		}
	}
}

// dropFrames removes from out[from:] the frames whose type is in types.
func dropFrames(out []byte, from int, types string) []byte {
	return rewriteFrames(out, from, func(typ byte, body []byte) ([]byte, bool) {
		return body, strings.IndexByte(types, typ) < 0
	})
}

// rewriteFrames rebuilds out[from:] frame by frame: fn gives each frame's
// body to keep (its own or a new one), or keep false to drop the frame. A
// partial frame at the end stays as it is.
func rewriteFrames(out []byte, from int, fn func(typ byte, body []byte) (newBody []byte, keep bool)) []byte {
	tail := append([]byte(nil), out[from:]...)
	out = out[:from]
	r := 0
	for {
		typ, body, n, ok := wire.SplitFrame(tail[r:])
		if !ok {
			return append(out, tail[r:]...)
		}
		if nb, keep := fn(typ, body); keep {
			out = wire.AppendFrame(out, typ, nb)
		}
		r += n
	}
}

// beginTag is PostgreSQL's command tag for a BEGIN or START TRANSACTION.
func beginTag(sql string) string {
	if lx := (lexer{s: sql}); lx.startsWith("START") {
		return "START TRANSACTION"
	}
	return "BEGIN"
}
