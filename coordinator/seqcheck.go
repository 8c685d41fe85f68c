package coordinator

import (
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/wire"
)

// currval() and lastval() answer from state PostgreSQL keeps per
// connection: the last value nextval gave in it. A session's nextval calls
// (often implicit, through a column DEFAULT, so invisible in its SQL) run
// on whichever pooled connection it holds, and a pooled connection carries
// other clients' values. So the coordinator answers them only when it
// knows the answer PostgreSQL would give: before the session has run any
// statement that may call nextval (since it began or since DISCARD
// SEQUENCES or DISCARD ALL), the value is "not yet defined", which the
// worker reports itself once the connection's own state is cleared
// (DISCARD SEQUENCES first). Otherwise they are refused with 0A000.

// errSeqState refuses currval or lastval after statements that may have
// called nextval on other server connections.
func errSeqState(fn string) error {
	return errMultiRefused(fn+"() is not supported after statements that may have called nextval(): pgfleet runs them on pooled worker connections, which keep sequence state apart",
		"Use INSERT ... RETURNING, or the value nextval() returns, instead of "+fn+"().")
}

// discardSequences clears the held connection's sequence state before a
// statement of the session that reads it.
func (ss *session) discardSequences() error {
	if ss.sc.TxStatus == 'E' {
		return nil // the statement fails anyway
	}
	if err := ss.sc.Exec("DISCARD SEQUENCES", time.Now().Add(ss.pool.Config().ResetTimeout), nil); err != nil {
		var pe *pgconn.PgError
		if !errors.As(err, &pe) {
			return ss.lostServer(err)
		}
		return ss.queryError(err)
	}
	return nil
}

// queueDiscardSequences queues a hidden DISCARD SEQUENCES on the held
// connection ahead of a Bind of a statement that reads sequence state.
func (ss *session) queueDiscardSequences() {
	b := ss.sc.Buf()
	b = wire.AppendFrame(b, 'P', []byte("\x00DISCARD SEQUENCES\x00\x00\x00"))
	b = wire.AppendFrame(b, 'B', []byte{0, 0, 0, 0, 0, 0, 0, 0})
	b = wire.AppendFrame(b, 'E', []byte{0, 0, 0, 0, 0})
	ss.sc.SetBuf(b)
	ss.push(expect{kind: eSwallow, term: tParse})
	ss.push(expect{kind: eSwallow, term: tBind})
	ss.push(expect{kind: eSwallow, term: tExecute})
}
