package coordinator

import (
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/executor"
	"github.com/pgfleet/pgfleet/internal/pgerr"
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

//
// User code (classify's verify: DO, CALL, a function that is not built in;
// and what the catalog shows may run user code, stateviews.go: triggers,
// defaults, domains...) may call currval or lastval where the text does
// not show it. Such a
// statement runs after DISCARD SEQUENCES on its connections, so that it
// never reads another client's value: before the session's first
// statement that may call nextval, it gets PostgreSQL's answer ("not yet
// defined", 55000); after one, a 55000 from it may stand for a value
// PostgreSQL would have given, and is refused with 0A000 instead
// (seqGuard), on one worker or over several shards.

// seqGuardError turns a worker's 55000 error body into the 0A000 refusal,
// the worker's message kept as detail, when currval or lastval raised it
// (the error's routine, which no lc_messages translates); any other
// 55000 (a cursor that can only scan forward, RAISE ... USING ERRCODE)
// is the statement's own answer.
func seqGuardError(body []byte) []byte {
	var er pgproto3.ErrorResponse
	if er.Decode(body) != nil || er.Routine != "currval_oid" && er.Routine != "lastval" {
		return body
	}
	e := pgerr.New(pgerr.FeatureNotSupported, "currval() or lastval() in user code is not supported after statements that may have called nextval(): pgfleet runs them on pooled worker connections, which keep sequence state apart").
		WithHint("Use INSERT ... RETURNING, or the value nextval() returns, instead of currval() or lastval().")
	e.Detail = "The worker said: " + er.Message
	b, _ := pgerr.Flatten(e).Encode(nil)
	return b[5:]
}

// errSeqState refuses currval or lastval after statements that may have
// called nextval on other server connections.
func errSeqState(fn string) error {
	return errMultiRefused(fn+"() is not supported after statements that may have called nextval(): pgfleet runs them on pooled worker connections, which keep sequence state apart",
		"Use INSERT ... RETURNING, or the value nextval() returns, instead of "+fn+"().")
}

// discardSequences clears the held connection's sequence state before a
// statement of the session that reads it. snap: the statement also wants
// the snapshot of session state its user code is compared with
// (snapshotState), read in the same round trip by the connection's
// prepared state read (its text, pipelined with a simple Query, is planned
// at every use). answered: the client's statement got its answer here (an
// error), and is not to be sent.
func (ss *session) discardSequences(snap bool, sql string) (answered bool, err error) {
	if ss.sc.TxStatus == 'E' {
		return false, nil // the statement fails anyway
	}
	deadline := time.Now().Add(ss.pool.Config().ResetTimeout)
	if !snap {
		if err := ss.sc.Exec("DISCARD SEQUENCES", deadline, nil); err != nil {
			var pe *pgconn.PgError
			if !errors.As(err, &pe) {
				return false, ss.lostServer(err)
			}
			return true, ss.queryError(err)
		}
		return false, nil
	}
	names := ss.stateNamesOf(sql, nil)
	if ss.resnap {
		names = mergeNames(ss.stateNames, names) // (as snapshotState)
	}
	ss.verifyState, ss.stateRolledBack, ss.resnap = true, false, false
	ss.stateTxn = ss.sc.TxStatus == 'T'
	ss.stateBase = ss.stateBase[:0]
	ss.stateNames = names
	sc := ss.sc
	b := appendRun(sc.Buf(), "DISCARD SEQUENCES", nil)
	named := ss.stateNamed()
	if named {
		b = ss.appendStateRead(b, false)
	} else {
		b = appendRun(b, stateText(ss.stateNames), nil)
	}
	sc.SetBuf(appendSync(b))
	if err := sc.Flush(); err != nil {
		sc.MarkBroken()
		return false, ss.lostServer(err)
	}
	_ = sc.SetReadDeadline(deadline)
	discarded := false
	var werr []byte
	for {
		var f wire.Frame
		if f, err = sc.Next(); err != nil {
			break
		}
		switch {
		case f.Type == 'Z' && len(f.Body) == 1:
			sc.TxStatus = f.Body[0]
		case f.Type == 'S':
			sc.NoteParameterStatus(f.Body)
		case f.Type == 'C' && !discarded:
			discarded = true
		case f.Type == 'D':
			ss.stateBase = append(ss.stateBase[:0], f.Body...)
			ss.stateLocals = ss.blockLocals(ss.stateLocals[:0])
		case f.Type == 'E' && werr == nil:
			werr = slices.Clone(f.Body)
		}
		if f.Type == 'Z' {
			break
		}
	}
	_ = sc.SetReadDeadline(time.Time{})
	if werr != nil && named {
		ss.stateReadLost(errCode(werr)) // (the read's Parse may not have run)
	}
	switch {
	case err != nil:
		return false, ss.lostServer(err)
	case werr != nil && (!discarded || sc.TxStatus == 'E'):
		// The discard failed, or the read did in the client's
		// transaction block, which it aborted (a statement_timeout):
		// the client's statement is not sent, and the client is told
		// why its block failed (adversary: a hidden error left the
		// block's first statement with 25P02).
		// (No snapshot: the release pins the session.)
		ss.stateBase = ss.stateBase[:0]
		return true, ss.queryError(executor.NewWorkerError(werr))
	case werr != nil:
		// The read failed on its own: no snapshot, so the release pins
		// the session (verifyRelease).
		ss.stateBase = ss.stateBase[:0]
	}
	return false, nil
}

// queueDiscardSequences queues a hidden DISCARD SEQUENCES on the held
// connection ahead of a Bind of a statement that reads sequence state.
func (ss *session) queueDiscardSequences() {
	b := ss.sc.Buf()
	b = appendRun(b, "DISCARD SEQUENCES", nil)
	ss.sc.SetBuf(b)
	ss.push(expect{kind: eSwallow, term: tParse})
	ss.push(expect{kind: eSwallow, term: tBind})
	ss.push(expect{kind: eSwallow, term: tExecute})
}

// guardSeq is err, or the 0A000 refusal for a worker's 55000 while
// seqGuard holds (multi-shard statements).
func (ss *session) guardSeq(err error) error {
	var we *executor.WorkerError
	if errors.As(err, &we) && (we.PG.Code == pgerr.UndefinedTable || we.PG.Code == pgerr.UndefinedFunction) {
		// A shard dropped by a concurrent catalog change: 40001; a
		// relation or function only the default node has: 0A000.
		addr := we.Addr
		err = executor.NewWorkerError(ss.defaultOnly(ss.staleShardBody(we.Body), addr))
		if !errors.As(err, &we) {
			return err
		}
	}
	if !ss.seqGuard || !errors.As(err, &we) || we.PG.Code != pgerr.ObjectNotInPrerequisite {
		return err
	}
	return executor.NewWorkerError(seqGuardError(we.Body))
}
