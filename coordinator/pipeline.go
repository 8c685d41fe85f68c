package coordinator

import (
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/internal/pgerr"
)

// Pipelines over several workers. A client may send many statements before
// one Sync (a pgx Batch, a JDBC batch, psycopg's executemany and pipeline
// mode). PostgreSQL runs them, outside a transaction block, as one implicit
// transaction that the Sync commits and the first error rolls back whole.
// When such a pipeline needs a second worker, the first worker's implicit
// transaction is made explicit by a hidden BEGIN (in an implicit block
// PostgreSQL's BEGIN keeps what already ran), the statements sent there so
// far are answered (a hidden Sync, which no longer commits), and the
// pipeline goes on as a transaction across workers: the next worker is
// taken in with BEGIN, as a client's transaction block takes workers in
// (joinWorker), and the client's Sync ends it with two-phase commit, or
// rolls every worker back after an error (implicitEnd). The client sees
// what PostgreSQL shows: the statements' answers, then ReadyForQuery idle.
// Inside a client's transaction block the same hidden Sync lets a pipeline
// go on to another worker (the block stays open).

// errBatchFailed: a statement of the pipeline failed on the worker, whose
// error the client already has; the rest of the pipeline is skipped to its
// Sync, as PostgreSQL skips it.
var errBatchFailed = errors.New("pgfleet: the pipeline failed on a worker")

// implicitName names the hidden BEGIN's statement and portal on a worker
// (closed right after, so that the client's unnamed ones are untouched).
const implicitName = "pgfleet_implicit"

// pipelineBlock lets a pipeline that ran statements on the current worker
// go on to another one (see above): outside a transaction block it makes
// the worker's implicit transaction explicit; then the worker answers what
// it was sent. A pipeline that sent a BEGIN, COMMIT or savepoint statement
// to the worker itself is refused (its transaction block is the client's,
// and pgfleet cannot tell where it stands).
func (ss *session) pipelineBlock() error {
	implicit := ss.sc.TxStatus == 'I' && ss.txBegin == ""
	if implicit {
		if ss.batchTxn || ss.pendingBegin != "" || ss.srv.store == nil {
			return errMultiRefused("this pipeline runs on one worker and a statement needs another, after transaction control statements sent with it",
				"Send Sync before a statement for rows on another worker.")
		}
		b := ss.sc.Buf()
		b, _ = (&pgproto3.Parse{Name: implicitName, Query: "BEGIN"}).Encode(b)
		b, _ = (&pgproto3.Bind{DestinationPortal: implicitName, PreparedStatement: implicitName}).Encode(b)
		b, _ = (&pgproto3.Execute{Portal: implicitName}).Encode(b)
		b, _ = (&pgproto3.Close{ObjectType: 'P', Name: implicitName}).Encode(b)
		b, _ = (&pgproto3.Close{ObjectType: 'S', Name: implicitName}).Encode(b)
		ss.sc.SetBuf(b)
		ss.push(expect{kind: eSwallow, term: tParse})
		ss.push(expect{kind: eSwallow, term: tBind})
		ss.push(expect{kind: eSwallow, term: tExecute})
		ss.push(expect{kind: eSwallow, term: tClose})
		ss.push(expect{kind: eSwallow, term: tClose})
	}
	if err := ss.settle(); err != nil {
		return err
	}
	if implicit {
		if ss.sc == nil || ss.sc.TxStatus != 'T' {
			ss.skipping = true // (the worker said why)
			return errBatchFailed
		}
		ss.txBegin, ss.implicitTxn = "BEGIN", true
		// Portals the pipeline bound there live on: an Execute of one
		// after the pipeline moved on goes back to its worker.
		for name := range ss.portals {
			if _, ok := ss.portalNode[name]; !ok {
				ss.notePortal(name)
			}
		}
	}
	return nil
}

// implicitPipeline readies a multi-shard or reference-table write portal
// outside a transaction block at Execute: when the pipeline ran statements
// on a worker before it, or the client sent more statements after it
// before the Sync (pipelineGoesOn), PostgreSQL would commit them all
// together, so they run in a transaction block of pgfleet's, ended at the
// Sync (implicitEnd): the worker's implicit transaction made explicit, or,
// with no worker held yet, a BEGIN deferred as a client's is. A write
// followed by the Sync alone commits on its own, as PostgreSQL commits it
// at that Sync; a pinned session's is refused when more follows.
func (ss *session) implicitPipeline() error {
	if ss.inTxn() && !(ss.sc != nil && ss.needSync) || ss.pinned != "" || ss.srv.store == nil {
		return nil
	}
	if ss.sc != nil && ss.needSync && !ss.batchWork {
		// Only Parse or Describe used the connection: answered, and
		// given back outside a transaction block. One that failed
		// fails the batch (errBatchFailed): PostgreSQL skips the rest
		// (adversary finding: a reference write's Execute after a
		// Parse refused in a failed block answered a second error).
		if err := ss.settle(); err != nil {
			return err
		}
	}
	switch {
	case ss.sc != nil && ss.needSync && !(ss.txBegin == "" && ss.batchTxn):
		return ss.pipelineBlock()
	case ss.sc == nil && !ss.inTxn():
		more, err := ss.pipelineGoesOn()
		if err != nil {
			return err
		}
		if more {
			ss.pendingBegin, ss.implicitTxn = "BEGIN", true
		}
	}
	return nil
}

// pipelineGoesOn reports whether the client sends more than a Sync after
// the message being handled, waiting for its next message when none is
// read yet: a client cannot expect an answer before its Sync or Flush, so
// it sends one of them or more statements (psycopg's executemany writes
// its pipeline in parts as it goes). A Flush counts as more: the client
// wants answers before the Sync, and may send statements after reading
// them that PostgreSQL would commit with what ran before.
func (ss *session) pipelineGoesOn() (bool, error) {
	if ss.moreBeforeSync() {
		return true, nil
	}
	if q := ss.replay.queue; len(q) > 0 {
		// Running a request again (replay.go): its next message is here,
		// not in the client's stream.
		return q[0].Type != 'S', nil
	}
	typ, _, err := ss.r.Whole()
	if err != nil {
		return false, pgerr.Fatal(pgerr.ConnectionFailure, "reading the client's next message: %v", err)
	}
	return typ != 'S', nil
}

// settle has the current worker answer the pipeline's messages sent to it
// so far (a hidden Sync), in a transaction block, which the Sync leaves
// open. errBatchFailed: a message failed there (the client has the
// worker's error); the session skips the rest of the pipeline. A
// transaction block that had failed before stays failed ('E'), for the
// caller to answer.
func (ss *session) settle() error {
	errs := ss.workerErrs
	if err := ss.hiddenSync(); err != nil {
		return err
	}
	if ss.workerErrs != errs {
		ss.skipping = true
		return errBatchFailed
	}
	return nil
}

// implicitEnd answers the client's Sync of a pipeline that ran outside a
// transaction block on several workers: the current worker's answers, then
// two-phase commit of every worker's part, or, after an error anywhere,
// ROLLBACK on every worker; then ReadyForQuery idle. A failed commit (a
// deferred constraint, a worker lost before the decision) is the
// pipeline's last answer, as PostgreSQL reports a failed commit at Sync.
func (ss *session) implicitEnd() error {
	ss.implicitTxn = false
	if err := ss.answerQueued(); err != nil {
		return err
	}
	if ss.sc == nil {
		// No worker was taken in (the first statement failed).
		ss.pendingBegin, ss.pendingFailed = "", false
		ss.out = readyForQuery(ss.out, ss.txStatus())
		return nil
	}
	extra, err := ss.endBlock(ss.sc.TxStatus == 'T' && !ss.txFailed)
	ss.out = append(ss.out, extra...)
	if err != nil {
		er := pgerr.Flatten(err)
		if er.Severity == "FATAL" {
			return err
		}
		userNames(ss.srv.catalog.Load(), er)
		ss.out, _ = er.Encode(ss.out)
	}
	ss.out = readyForQuery(ss.out, ss.txStatus())
	return nil
}

// answerQueued has the current worker answer what the pipeline queued for
// it (a hidden Sync; the failing Parse of a refusal of the coordinator's,
// synthError, included), so that its status then says whether the
// pipeline failed; with nothing queued, the coordinator's own answers go
// out.
func (ss *session) answerQueued() error {
	if ss.sc != nil && (ss.needSync || ss.qhead < len(ss.queue) || len(ss.sc.Buf()) > 0) {
		return ss.hiddenSync()
	}
	ss.emitSynth()
	return nil
}

// endBlock ends pgfleet's transaction block of a pipeline: committed
// (two-phase over several workers) or rolled back on every worker. extra
// holds notices for the client (a COMMIT PREPARED left to recovery).
func (ss *session) endBlock(commit bool) (extra []byte, err error) {
	if len(ss.parked) == 0 && !ss.catalogPending() {
		return nil, ss.implicitEndOne(commit)
	}
	_, extra, after, err := ss.multiEnd(commit, false)
	return append(extra, after...), err
}

// implicitEndOne ends a pipeline's transaction block that stayed on one
// worker: COMMIT there (its error, a deferred constraint say, is the
// pipeline's), or ROLLBACK after an error. A connection lost meanwhile
// leaves the outcome unknown (08006, the session ends).
func (ss *session) implicitEndOne(commit bool) error {
	sql := "ROLLBACK"
	if commit {
		sql = "COMMIT"
	}
	err := ss.sc.Exec(sql, time.Now().Add(10*time.Minute), nil)
	var pe *pgconn.PgError
	if err != nil && !errors.As(err, &pe) {
		return ss.lostServer(err)
	}
	ss.multiRelease([]txConn{{node: ss.node, pool: ss.pool, sc: ss.sc}}, commit && err == nil)
	if err != nil {
		return pgerr.FromWorker(pe)
	}
	return nil
}

// queryInPipeline refuses a simple Query sent inside a pipeline that runs
// over several workers outside a transaction block (before its Sync).
// PostgreSQL would run the query in the pipeline's implicit transaction
// and commit both; here the pipeline's transaction is rolled back on
// every worker, as PostgreSQL rolls it back when such a query fails, and
// the client gets 0A000 and ReadyForQuery idle: the rest of the pipeline
// runs afresh, as after a failed query on PostgreSQL.
func (ss *session) queryInPipeline() error {
	ss.implicitTxn = false
	errs := ss.workerErrs
	if err := ss.answerQueued(); err != nil {
		return err
	}
	var err error
	if ss.sc != nil {
		_, err = ss.endBlock(false)
	}
	ss.pendingBegin, ss.pendingFailed = "", false
	if err != nil {
		if er := pgerr.Flatten(err); er.Severity == "FATAL" {
			return err
		}
	}
	if ss.workerErrs != errs {
		// A statement before the query failed: PostgreSQL skips the
		// query with the rest of the pipeline, up to its Sync.
		ss.skipping = true
		return nil
	}
	ss.skipping = false
	e := pgerr.New(pgerr.FeatureNotSupported,
		"a simple Query inside a pipeline that runs on several workers outside a transaction block is not supported; the pipeline's statements before it were rolled back").
		WithHint("Send Sync before the query, or wrap the pipeline in BEGIN ... COMMIT.")
	ss.out, _ = pgerr.Flatten(e).Encode(ss.out)
	ss.out = readyForQuery(ss.out, ss.txStatus())
	return nil
}
