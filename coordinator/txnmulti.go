package coordinator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/coordinator/twophase"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/internal/wire"
	"github.com/pgfleet/pgfleet/metadata"
	"github.com/pgfleet/pgfleet/planner"
	"github.com/pgfleet/pgfleet/pooling"
)

// A client transaction block over several workers. The session holds one
// connection per worker in the transaction: the current statement's one in
// sc/pool/node (the relay loop's), the others parked. A statement that
// needs another worker switches at a batch boundary: to the parked
// connection of that worker, or to a new one where the client's BEGIN text
// starts the transaction. COMMIT then runs two-phase commit (multiEnd).

// txConn is one worker's connection in a transaction block.
type txConn struct {
	node int32
	pool *pooling.Pool
	sc   *pooling.ServerConn
	// logN: of a parked connection, how many of the transaction's SETs
	// (txLog) it has run; those after are run there when it is switched
	// back to (joinWorker) or a savepoint is made (multiSavepoint).
	logN int
}

// parkedOn is the index in ss.parked of the transaction's connection to
// node, or -1.
func (ss *session) parkedOn(node int32) int {
	for i, p := range ss.parked {
		if p.node == node {
			return i
		}
	}
	return -1
}

const (
	// txPrepareTimeout bounds one PREPARE TRANSACTION (deferred triggers
	// and constraints run in it); the decision must come within
	// twophase.MaxDecisionDelay of the first one.
	txPrepareTimeout = 4 * time.Minute
	txCleanupTimeout = 30 * time.Second
)

func errMultiRefused(msg, hint string) error {
	return pgerr.New(pgerr.FeatureNotSupported, "%s", msg).WithHint("%s", hint)
}

// joinWorker makes node the current worker of the session's transaction
// block, taking it into the transaction if it is not in yet.
func (ss *session) joinWorker(ctx context.Context, node int32) error {
	if ss.sc != nil && ss.sc.TxStatus == 'E' {
		// As PostgreSQL: a failed transaction runs nothing until it
		// ends, on any of its workers (a portal on a parked one
		// included). COMMIT then rolls back everywhere (multiEnd).
		return pgerr.New(pgerr.InFailedSQLTransaction,
			"current transaction is aborted, commands ignored until end of transaction block")
	}
	if ss.needSync && !ss.batchWork {
		// Only Parse or Describe used the current connection in this
		// batch: answer them with a hidden Sync (the transaction block
		// stays open) and move; one that failed fails the batch
		// (errBatchFailed), as in acquire.
		if err := ss.settle(); err != nil {
			return err
		}
		if ss.sc == nil || ss.sc.TxStatus == 'I' {
			return ss.afterBlockEnded(ctx, node)
		}
		if ss.sc.TxStatus != 'T' {
			return pgerr.New(pgerr.InFailedSQLTransaction,
				"current transaction is aborted, commands ignored until end of transaction block")
		}
	}
	if ss.needSync {
		// Statements of this pipeline ran on the current worker: their
		// answers first (a hidden Sync, which ends no transaction block).
		if err := ss.settle(); err != nil {
			return err
		}
		if ss.sc == nil || ss.sc.TxStatus == 'I' {
			return ss.afterBlockEnded(ctx, node)
		}
		if ss.sc.TxStatus != 'T' {
			return errFailedTxn
		}
	}
	from, to := ss.srv.nodeAddr(ss.node), ss.srv.nodeAddr(node)
	switch {
	case ss.txBegin == "" && ss.chainAsk:
		// The transaction was chained (COMMIT or ROLLBACK AND CHAIN) on
		// this worker, which knows its characteristics: ask it.
		b, err := chainBegin(txConn{node: ss.node, pool: ss.pool, sc: ss.sc})
		if err != nil {
			return err
		}
		ss.txBegin, ss.chainAsk = b, false
	}
	if ss.verifyState && ss.stateChanged() {
		// User code (set_config() in a DO block or function) changed
		// the session on this worker: the other would run without it.
		return errMultiRefused(fmt.Sprintf("a function changed this session's settings or state on worker %s; a statement on worker %s would not see the change", from, to),
			"Make the change with SET before BEGIN, or keep the transaction to rows on one worker.")
	}
	switch {
	case ss.pinned != "": // (its BEGIN went to its connection: not the case below)
		return errMultiRefused(fmt.Sprintf("this session is pinned to one worker connection (%s); its transaction cannot take in worker %s", ss.pinned, to),
			"Reconnect, or keep the transaction to rows on one worker.")
	case ss.txBegin == "":
		return errMultiRefused(fmt.Sprintf("this transaction runs on worker %s and the statement needs worker %s, but its BEGIN was sent together with other statements", from, to),
			"Send BEGIN as a statement of its own to let a transaction span several workers.")
	case ss.txLogLost || ss.paramsUnsure:
		return errMultiRefused(fmt.Sprintf("this transaction made a SET on worker %s; a statement on worker %s would not see it", from, to),
			"Make the SET outside the transaction block, or keep the transaction to rows on one worker.")
	case ss.txSavepoint && !ss.savepointsKnown():
		return errMultiRefused(fmt.Sprintf("this transaction has savepoints on worker %s that pgfleet cannot set again on worker %s", from, to),
			"Name savepoints with plain identifiers, or keep the transaction to rows on one worker.")
	case ss.srv.store == nil:
		return errMultiRefused("transactions across workers need the metadata database to record commit decisions", "")
	}
	cur := txConn{node: ss.node, pool: ss.pool, sc: ss.sc, logN: len(ss.txLog)}
	if i := ss.parkedOn(node); i >= 0 {
		p := ss.parked[i]
		if p.sc.TxStatus == 'I' {
			// Rolled back when the block failed (abortParked), which a
			// ROLLBACK TO then brought back on the current worker: a
			// savepoint the coordinator did not know. Not a transaction
			// to go on with.
			return pgerr.New(pgerr.InvalidTransactionState,
				"this transaction's part on worker %s was rolled back when it failed", to).
				WithHint("Roll the transaction back and run it again.")
		}
		// SETs made since it was parked (SET LOCAL statement_timeout after
		// the block took in a second worker): run there first, so that
		// the statement sees them as on the other workers.
		if err := ss.catchUp(i); err != nil {
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Severity == "FATAL" {
				p.sc.MarkBroken()
				return ss.lostServer(err)
			}
			// (As PostgreSQL would have refused the SET: the block fails,
			// on the worker that refused it.)
			ss.parked[i] = cur
			ss.setCurrent(p)
			ss.txFailed = true
			return err
		}
		ss.parked[i] = cur
		ss.setCurrent(p)
		return nil
	}
	pool, err := ss.poolFor(node)
	if err != nil {
		return err
	}
	if len(ss.parked) == 0 {
		// The first worker this transaction takes in: the idle timer
		// goes off on the one it holds (see idleTimerOff).
		if err := ss.idleTimerOff(cur); err != nil {
			return err
		}
	}
	var sc *pooling.ServerConn
	for attempt := 1; ; attempt++ {
		if sc = ss.spare(node); sc == nil {
			if sc, err = ss.joinCheckout(ctx, pool, to); err != nil {
				return err
			}
		}
		// The transaction's savepoints are set again on the worker it
		// takes in, in order: everything the worker does comes after
		// them, so ROLLBACK TO and RELEASE of any of them mean there what
		// they mean on the others (multiSavepoint).
		begin := ss.beginSQL(ss.txBegin) + ss.savepointReplay()
		if ss.joinPipe != nil && !ss.idleOff && ss.idleZeroKnown(pool) && oneStatement(begin) {
			// The BEGIN goes ahead of the statement (Parse, Bind and
			// Execute, no Sync): if it fails, PostgreSQL skips the
			// statement up to the Sync, so nothing runs outside the
			// transaction block (the caller undoes the join then).
			*ss.joinPipe = appendRun(nil, begin, nil)
			break
		}
		if ss.idleOff || !ss.idleZeroKnown(pool) {
			// The BEGIN and the idle timer's read, in one round trip.
			var rows [][]string
			rows, err = sc.Query(begin+"\n;"+idleOffSQL, time.Now().Add(pool.Config().ResetTimeout))
			if err == nil && len(rows) > 0 {
				ss.noteIdleSetting(pool, rows[len(rows)-1:]) // (the SETs set again may have rows before it)
			}
		} else {
			err = sc.Exec(begin, time.Now().Add(pool.Config().ResetTimeout), nil)
		}
		if err == nil && sc.TxStatus == 'T' {
			break
		}
		sc.MarkBroken()
		pool.Release(sc)
		var wpe *pgconn.PgError
		if err != nil && !errors.As(err, &wpe) && attempt < checkoutAttempts {
			continue // a dead connection: the BEGIN did not run; take another
		}
		if err == nil {
			err = pgerr.New(pgerr.InvalidTransactionState, "worker %s did not start the transaction", to)
		}
		return err
	}
	for _, op := range ss.txLog {
		// (Set again there: defined on that backend now.)
		op.customNames(func(name string) { sc.Defines = pooling.AddDefine(sc.Defines, name) })
	}
	ss.parked = append(ss.parked, cur)
	ss.setCurrent(txConn{node: node, pool: pool, sc: sc})
	return nil
}

// catchUp runs on parked connection i the transaction's SETs it has not
// run (txLog after its logN): one round trip, none when it has them all.
func (ss *session) catchUp(i int) error {
	p := &ss.parked[i]
	if p.logN >= len(ss.txLog) {
		return nil
	}
	for _, op := range ss.txLog[p.logN:] {
		// (Defined on that backend for good once set there, even if a
		// later one fails. Adversary 160: a name first set after the
		// connection was parked was not recorded, and a session that
		// never set it read '' there.)
		op.customNames(func(name string) { p.sc.Defines = pooling.AddDefine(p.sc.Defines, name) })
	}
	replay, deadline := ss.logReplay(p.logN, len(ss.txLog)), time.Now().Add(p.pool.Config().ResetTimeout)
	if ss.idleOff || !ss.idleZeroKnown(p.pool) || namesIdleTimeout(ss.txLog[p.logN:]) {
		// The idle timer stays off on a worker the transaction is not
		// on (a SET of it set again would end the parked connection while
		// the client works elsewhere: adversary 160), read as joinWorker
		// reads it, in the same round trip.
		rows, err := p.sc.Query(replay+"\n;"+idleOffSQL, deadline)
		if err != nil {
			return err
		}
		if len(rows) > 0 {
			ss.noteIdleSetting(p.pool, rows[len(rows)-1:])
		}
	} else if err := p.sc.Exec(replay, deadline, nil); err != nil {
		return err
	}
	p.logN = len(ss.txLog)
	return nil
}

// namesIdleTimeout reports whether one of ops sets
// idle_in_transaction_session_timeout.
func namesIdleTimeout(ops []paramOp) bool {
	return slices.ContainsFunc(ops, func(op paramOp) bool { return planner.ContainsFold(op.text, "idle_in_transaction") })
}

// afterBlockEnded takes node for a statement whose transaction block
// ended earlier in the same pipeline (its COMMIT or ROLLBACK, answered by
// joinWorker's hidden Sync): the statement starts the pipeline's next
// implicit transaction, on the worker it needs, as on PostgreSQL
// (adversary round 16: BEGIN; SET, then COMMIT and a statement for
// another worker in one batch, got 25P02).
func (ss *session) afterBlockEnded(ctx context.Context, node int32) error {
	ss.releaseIfIdle()
	return ss.acquire(ctx, node)
}

// oneStatement reports whether sql (a BEGIN the client sent, as
// beginSQL and savepointReplay make it) is one statement, which a Parse
// takes: no semicolon but trailing ones.
func oneStatement(sql string) bool {
	return !strings.Contains(strings.TrimRight(sql, "; \t\r\n"), ";")
}

// unjoin takes back the worker joinWorker took in last, whose BEGIN sent
// ahead (joinPipe) did not start the transaction there: the connection
// holds nothing of the transaction and goes back to its pool (which
// closes it if it is marked broken).
func (ss *session) unjoin() {
	c := txConn{node: ss.node, pool: ss.pool, sc: ss.sc}
	prev := ss.parked[len(ss.parked)-1]
	ss.parked = ss.parked[:len(ss.parked)-1]
	ss.setCurrent(prev)
	c.pool.Release(c.sc)
}

// joinCheckout takes a connection to worker to (pool) for a transaction
// that holds connections to others.
func (ss *session) joinCheckout(ctx context.Context, pool *pooling.Pool, to string) (*pooling.ServerConn, error) {
	// This transaction holds connections while it waits for another one.
	// Its class (the connections it holds) lets it into connections that
	// transactions holding fewer cannot take (pooling.Pool), so no two
	// transactions wait for each other's connections forever, as long as
	// the class stays below the pools' span (a pool of at least as many
	// connections as there are workers). Beyond it, a wait cycle is
	// possible: wait briefly, then fail with a retryable deadlock error.
	held := ss.holding()
	jctx, cancel := ctx, context.CancelFunc(func() {})
	if held >= pool.Span() {
		jctx, cancel = context.WithTimeout(ctx, joinWait)
	}
	sc, err := ss.checkout(jctx, pool, held)
	waited := jctx.Err() != nil && ctx.Err() == nil
	cancel()
	var pe *pgerr.Error
	if err != nil && held >= pool.Span() && (waited || errors.As(err, &pe) && pe.Code == pgerr.TooManyConnections) {
		return nil, &pgerr.Error{Severity: "ERROR", Code: pgerr.DeadlockDetected,
			Message: fmt.Sprintf("no connection to worker %s became free within %v while this transaction holds connections on %d other workers, more than the pool's reserve covers (a possible wait cycle with another transaction across workers)", to, joinWait, held),
			Hint:    "Retry the transaction. If it happens often, raise the coordinator's --pool-size to at least the number of workers."}
	}
	return sc, err
}

// joinWait bounds how long a transaction that holds connections on more
// workers than the pools' reserve covers waits for one to another worker
// (see joinWorker).
const joinWait = time.Second

func (ss *session) setCurrent(c txConn) {
	ss.cancelMu.Lock()
	ss.sc, ss.pool, ss.node = c.sc, c.pool, c.node
	ss.cancelTarget.Store(c.sc)
	ss.publishTxn()
	ss.cancelMu.Unlock()
}

// noteTxnTag follows SET, RESET and SAVEPOINT in a transaction block (the
// tags of CommandComplete bodies starting with 'S' and short enough, or
// with "RES").
func (ss *session) noteTxnTag(body []byte) {
	switch {
	case string(body) == "SET\x00", string(body) == "RESET\x00":
		ss.txSet = true
	case bytes.HasPrefix(body, []byte("SAVEPOINT")):
		ss.txSavepoint = true
	}
}

// txnControl names the first statement of sql that a transaction over
// several workers cannot run (savepoints, PREPARE TRANSACTION), or "".
func txnControl(sql string) string {
	lx := lexer{s: sql}
	for {
		n, _, _, more := lx.statement()
		if n > 0 {
			w := lx.words[:n]
			at := func(i int) string {
				if i < n {
					return strings.ToUpper(w[i])
				}
				return ""
			}
			switch at(0) {
			case "SAVEPOINT", "RELEASE":
				return at(0)
			case "ROLLBACK":
				if at(1) == "TO" || at(2) == "TO" {
					return "ROLLBACK TO SAVEPOINT"
				}
			case "PREPARE":
				if at(1) == "TRANSACTION" {
					return "PREPARE TRANSACTION"
				}
			}
		}
		if !more {
			return ""
		}
	}
}

// multiCheck refuses, in a transaction over several workers, what it cannot
// run: PREPARE TRANSACTION, savepoint statements together with other
// statements, and COMMIT or ROLLBACK together with other statements.
func (ss *session) multiCheck(cls *class, sql string) error {
	if what := txnControl(sql); what != "" && !savepointOnly(cls) {
		return errMultiRefused(what+" is not supported in a transaction that spans several workers, but as a statement of its own",
			"Send savepoint statements and PREPARE TRANSACTION on their own.")
	}
	if cls.txn != "" && cls.txn != "begin" && cls.count != 1 {
		return errMultiRefused("COMMIT or ROLLBACK together with other statements is not supported in a transaction that spans several workers",
			"Send COMMIT or ROLLBACK as a statement of its own.")
	}
	return nil
}

// multiSimple handles a simple Query in a transaction over several
// workers when it is COMMIT or ROLLBACK or refused; done says so.
func (ss *session) multiSimple(cls *class, sql string) (done bool, err error) {
	if err := ss.multiCheck(cls, sql); err != nil {
		if cls.count == 1 && txnControl(sql) == "PREPARE TRANSACTION" {
			// A PREPARE TRANSACTION that fails ends the block on
			// PostgreSQL, rolled back: so does its refusal.
			if _, _, _, rerr := ss.multiEnd(false, false); rerr != nil {
				err = withCleanup(err, []string{rerr.Error()})
			}
		}
		return true, ss.queryError(err)
	}
	var tag string
	var extra, after []byte
	switch {
	case savepointOnly(cls):
		tag, err = ss.multiSavepoint(cls.sps[0], sql, func(typ byte, b []byte) { extra = wire.AppendFrame(extra, typ, b) })
	case cls.txn == "commit" || cls.txn == "rollback":
		tag, extra, after, err = ss.multiEnd(cls.txn == "commit", cls.chain)
		ss.txnEnded(err == nil && tag == "COMMIT")
	default:
		return false, nil
	}
	ss.out = append(ss.out, extra...)
	if err != nil {
		if pe := pgerr.Flatten(err); pe.Severity == "FATAL" {
			return true, err
		}
		er := pgerr.Flatten(err)
		userNames(ss.srv.catalog.Load(), er)
		ss.out, _ = er.Encode(ss.out)
	} else {
		ss.out = append(commandComplete(ss.out, tag), after...)
	}
	ss.out = readyForQuery(ss.out, ss.txStatus())
	return true, nil
}

// unpreparable adds what to do to a worker's refusal to prepare a
// transaction at all (0A000: it ran LISTEN, UNLISTEN or NOTIFY, or used
// temporary objects, which PostgreSQL commits only in one phase).
func unpreparable(err error) error {
	var wpe *pgconn.PgError
	if !errors.As(err, &wpe) || wpe.Code != pgerr.FeatureNotSupported {
		return err
	}
	e := pgerr.FromWorker(wpe)
	e.Message += "; the transaction spans several workers, commits with two-phase commit, and was rolled back"
	e.Hint = "Send NOTIFY, pg_notify(), LISTEN and UNLISTEN in a transaction of their own, or keep the transaction to rows on one worker."
	if strings.Contains(wpe.Message, "temporary") {
		e.Hint = "Make and use temporary objects outside transactions that span workers, or keep the transaction to rows on one worker."
	}
	if strings.Contains(wpe.Message, "WITH HOLD") {
		e.Hint = "Declare holdable cursors through pgfleet (DECLARE ... WITH HOLD), not in functions, in transactions that span workers, or keep the transaction to rows on one worker."
	}
	return e
}

// multiEnd ends the transaction on every worker: ROLLBACK everywhere
// (rollback, or a failed transaction: tag ROLLBACK), or two-phase commit:
// PREPARE TRANSACTION on each, the commit decision in the metadata
// database, COMMIT PREPARED on each. Every connection is released. extra
// holds notices for the client (a COMMIT PREPARED that recovery must
// complete); after, the ParameterStatus messages that go after the
// command's CommandComplete.
//
// With chain (COMMIT AND CHAIN, ROLLBACK AND CHAIN), a transaction that
// ended without error is followed by a new one, pending as after BEGIN,
// with the characteristics PostgreSQL gives it: the worker is asked for
// them (chainBegin).
func (ss *session) multiEnd(commit, chain bool) (tag string, extra, after []byte, err error) {
	// create_distributed_table and create_reference_table called in the
	// block run now, before it commits (citustxn.go).
	var moves *citusMoves
	var movesErr error
	calls := ss.citusPending
	ss.citusPending = nil
	// DROP TABLE of catalog tables in the block: their catalog entries go
	// with the commit decision, after every worker prepared.
	drops := ss.dropPending
	ss.dropPending, ss.blockSnap, ss.blockBase = nil, nil, nil
	if len(ss.settled) > 0 {
		// SETs a string committed before it began this block, kept for
		// its end (endOfCycle): the values the workers report here are
		// not read, so the connections are reset before anyone else uses
		// them, and the session keeps the SETs as written.
		ss.settled = ss.settled[:0]
		ss.paramsUnsure = true
	}
	if len(calls) > 0 && commit && ss.txStatus() != 'E' {
		if moves, movesErr = ss.citusRun(calls); movesErr != nil {
			if pgerr.Flatten(movesErr).Severity == "FATAL" {
				releaseCitus(calls, false)
				return "", nil, nil, movesErr
			}
			commit, chain = false, false
		}
	}
	all := ss.txParts()
	committed := false
	next := ""
	// The calls' fences go once the outcome is known (after the catalog
	// change, deferred below, when it committed).
	defer func() { releaseCitus(calls, committed) }()
	defer func() {
		ss.wroteOn = ss.wroteOn[:0]
		ss.multiRelease(all, committed)
		if err == nil {
			ss.pendingBegin, ss.chainStarted = next, chain
			// A chained block's catalog is the one of its first
			// statement (noteTxnStart), not the ended block's.
			ss.txSnap = nil
		}
	}()

	// A SET LOCAL of a reported setting ends with the block on each
	// worker, which reports the value back (ParameterStatus), as
	// PostgreSQL's backend reports it to its client after the command's
	// CommandComplete (after, which the callers send there): taken from
	// each connection's reports, before the connections go back (a
	// deferred function runs before the one above).
	before := paramsOf(all)
	defer func() {
		if err == nil {
			after = appendChangedParams(nil, all, before)
		}
	}()

	failed := false
	for _, c := range all {
		if c.sc.TxStatus != 'T' {
			failed = true
		}
	}
	if chain {
		cur := txConn{node: ss.node, pool: ss.pool, sc: ss.sc}
		for _, c := range all {
			if c.sc.TxStatus == 'E' { // (not one abortParked ended)
				cur = c
			}
		}
		next, err = chainBegin(cur)
		if err != nil {
			for _, c := range all {
				if c.sc.Exec("ROLLBACK", time.Now().Add(txCleanupTimeout), nil) != nil {
					c.sc.MarkBroken()
				}
			}
			return "", nil, nil, err
		}
	}
	if !commit || failed {
		for _, c := range all {
			if c.sc.TxStatus == 'I' {
				continue // rolled back when the transaction failed (abortParked)
			}
			if c.sc.Exec("ROLLBACK", time.Now().Add(txCleanupTimeout), nil) != nil {
				c.sc.MarkBroken()
			}
		}
		if movesErr != nil {
			return "", nil, nil, movesErr
		}
		return "ROLLBACK", nil, nil, nil
	}

	if moves == nil && len(drops) == 0 {
		if done, tag, err := commitOnePhase(all, ss.wroteOn); done {
			committed = err == nil && tag == "COMMIT"
			return tag, nil, nil, err
		}
	}
	g, last, recorded := (*twophase.Group)(nil), 0, false
	if moves == nil && len(drops) == 0 {
		g, last, recorded = ss.recordedGroup(all)
	}
	if !recorded {
		g = twophase.New("tx", ss.srv.store)
	}
	g.AfterDecide, g.BeforeCommit, g.BeforeDecide = ss.srv.hooks.afterDecide, ss.srv.hooks.beforeCommitPrepared, ss.srv.hooks.beforeDecide
	if moves != nil {
		// The catalog's tables follow the block's outcome.
		defer func() {
			if problems := moves.end(ss.srv, committed, g.InDoubt); len(problems) > 0 {
				if err == nil {
					tag, err = "", pgerr.New(pgerr.InvalidTransactionState, "the transaction was rolled back")
				}
				err = withCleanup(err, problems)
			}
		}()
	}
	for i := range all {
		p := g.Join(all[i].node, "worker "+all[i].sc.Addr, &poolConn{ss: ss, c: &all[i]})
		if recorded && i == last {
			g.SetLast(p)
		}
	}
	if err := g.Prepare(context.Background()); err != nil {
		problems := g.Rollback(context.Background())
		var pe *twophase.PrepareError
		switch {
		case !errors.As(err, &pe):
			return "", nil, nil, withCleanup(err, problems)
		case pe.Lost:
			// Whether it prepared is unknown; without a commit decision
			// recovery rolls it back if it did.
			return "", nil, nil, withCleanup(pgerr.New(pgerr.ConnectionFailure,
				"lost connection to %s during PREPARE TRANSACTION: %v; the transaction was rolled back", pe.Part.Where, pe.Err), problems)
		case pe.Err == nil:
			return "ROLLBACK", nil, nil, nil
		}
		return "", nil, nil, withCleanup(unpreparable(pe.Err), problems) // the worker's error (a deferred constraint, say): rolled back everywhere
	}
	ctx, cancel := context.WithTimeout(context.Background(), decideTimeout)
	defer cancel()
	if len(drops) > 0 {
		// The catalog change is the commit decision (as RunDDL's DROP
		// TABLE outside a block): both or neither.
		snap, derr := ss.srv.store.DropTables(metadata.WithDecision(ctx, g.Base), drops...)
		if derr == nil {
			g.Decided = true
		} else if derr = g.Settle(ctx, derr); derr == nil {
			snap, derr = ss.srv.store.Load(ctx) // decided, the answer lost
		}
		if derr != nil && !g.Decided {
			// Rolled back, or left to recovery when the outcome is unknown.
			ss.srv.refreshCatalog(context.Background())
			return "", nil, nil, withCleanup(derr, g.Rollback(ctx))
		}
		if derr == nil {
			ss.srv.changedCatalog(snap)
		} else {
			ss.srv.refreshCatalog(context.Background())
		}
		ss.srv.stmtEpoch.Add(1)
	}
	failures, err := g.Commit(ctx)
	var pe *pgconn.PgError
	if recorded && errors.As(err, &pe) && (pe.Code == pgerr.UndefinedFunction || pe.Code == pgerr.UndefinedTable || pe.Code == pgerr.InvalidSchemaName) {
		ss.srv.recordsLost(all[last].node, ss.database) // dropped by hand: made again for the next commit
	}
	if err != nil {
		// Rolled back, or left to recovery when the outcome is unknown.
		return "", nil, nil, withCleanup(err, g.Rollback(ctx))
	}
	committed = true
	for _, f := range failures {
		n := pgproto3.NoticeResponse{Severity: "WARNING", SeverityUnlocalized: "WARNING", Code: pgerr.ConnectionFailure,
			Message: fmt.Sprintf("the transaction is committed, but COMMIT PREPARED '%s' on %s failed: %v", f.Part.GID, f.Part.Where, f.Err),
			Hint:    "pgfleet's recovery completes the commit within seconds of the worker answering again."}
		extra, _ = n.Encode(extra)
	}
	return "COMMIT", extra, nil, nil
}

// commitOnePhase commits a transaction over several workers without
// two-phase commit when at most one of them wrote: each worker is asked
// (all at once) whether its transaction has a transaction id (PostgreSQL
// assigns one at the first write, row lock included) and its isolation
// level. With none or one that wrote and none SERIALIZABLE (where even a
// read-only transaction may fail at commit), the writer commits first with
// COMMIT, then the others: their transactions changed nothing, so the
// outcome is the writer's, as a transaction on one worker; a failed COMMIT
// of the writer rolls the others back and is the client's answer. done is
// false when two-phase commit is needed (two writers, SERIALIZABLE, an
// answer that could not be had); known lists workers known to have
// written, and with two of them nothing is asked.
//
// A worker whose transaction declared a cursor WITH HOLD (a function did:
// the client's own are the coordinator's) runs its query at COMMIT, which
// can fail there; after the writer's commit that error could not undo it,
// so when another worker wrote, such a worker takes two-phase commit, whose
// PREPARE refuses it as PostgreSQL refuses a holdable cursor there. Only
// cursors declared in this transaction count: one an earlier transaction
// left on the connection is not run again.
func commitOnePhase(all []txConn, known []int32) (done bool, tag string, err error) {
	if len(known) >= 2 {
		return false, "", nil
	}
	writer, holds, _, ok := askParts(all)
	if !ok {
		return false, "", nil // two-phase commit, whose PREPARE finds what failed
	}
	for i := range all {
		if writer >= 0 && holds[i] && i != writer {
			return false, "", nil // two-phase commit, whose PREPARE refuses the cursor
		}
	}
	tag = "COMMIT"
	if writer >= 0 {
		t, err := all[writer].sc.ExecTag("COMMIT", time.Now().Add(txCleanupTimeout), nil)
		var pe *pgconn.PgError
		switch {
		case err != nil && !errors.As(err, &pe):
			all[writer].sc.MarkBroken()
			err = pgerr.New(pgerr.ConnectionFailure, "lost connection to worker %s during COMMIT: %v; the transaction's writes were all on that worker, and whether they committed is unknown", all[writer].sc.Addr, err).
				WithHint("Check whether the transaction's writes are there before running it again.")
		case err == nil && t != "COMMIT":
			tag = t // ROLLBACK: the worker's transaction had failed
		}
		if err != nil || tag != "COMMIT" {
			for i := range all {
				if i != writer && all[i].sc.Exec("ROLLBACK", time.Now().Add(txCleanupTimeout), nil) != nil {
					all[i].sc.MarkBroken()
				}
			}
			return true, tag, err
		}
	}
	allAtOnce(len(all), func(i int) {
		if i != writer && all[i].sc.Exec("COMMIT", time.Now().Add(txCleanupTimeout), nil) != nil {
			all[i].sc.MarkBroken() // nothing of the transaction was there
		}
	})
	return true, tag, nil
}

// askParts asks each worker of a transaction (all at once) whether its
// transaction has a transaction id (PostgreSQL assigns one at the first
// write, row lock included), its isolation level, whether it declared a
// cursor WITH HOLD, and whether it holds locks statements do not take
// by themselves (advisory ones, LOCK TABLE's: relation locks above ROW
// EXCLUSIVE; a statement's Parse locks a shard it may not write). ok is true when every worker answered,
// none is SERIALIZABLE and at most one wrote: writer is that one's index
// (-1: none); holds and locks say which have such cursors and locks.
func askParts(all []txConn) (writer int, holds, locks []bool, ok bool) {
	// Under no statement_timeout of the client's: the question must not
	// fail the transaction it is about (which then ends anyway).
	const q = "SET LOCAL statement_timeout = 0; SELECT pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL, pg_catalog.current_setting('transaction_isolation'), " +
		"EXISTS (SELECT FROM pg_catalog.pg_cursors c WHERE c.is_holdable AND c.creation_time OPERATOR(pg_catalog.>=) pg_catalog.transaction_timestamp()), " +
		"EXISTS (SELECT FROM pg_catalog.pg_locks l WHERE l.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid() AND (l.locktype OPERATOR(pg_catalog.=) 'advisory' " +
		"OR l.locktype OPERATOR(pg_catalog.=) 'relation' AND l.mode OPERATOR(pg_catalog.<>) ALL ('{AccessShareLock,RowShareLock,RowExclusiveLock}'::pg_catalog.text[])))"
	deadline := time.Now().Add(txCleanupTimeout)
	wrote := make([]bool, len(all))
	answered := make([]bool, len(all))
	holds, locks = make([]bool, len(all)), make([]bool, len(all))
	allAtOnce(len(all), func(i int) {
		rows, err := all[i].sc.Query(q, deadline)
		if err != nil || len(rows) != 1 || len(rows[0]) != 4 || rows[0][1] == "serializable" {
			return
		}
		wrote[i], holds[i], locks[i], answered[i] = rows[0][0] == "t", rows[0][2] == "t", rows[0][3] == "t", true
	})
	writer = -1
	for i := range all {
		switch {
		case !answered[i], wrote[i] && writer >= 0:
			return -1, holds, locks, false
		case wrote[i]:
			writer = i
		}
	}
	return writer, holds, locks, true
}

// txParts is the session's transaction over several workers: its
// connection on each, in node order.
func (ss *session) txParts() []txConn {
	all := append(make([]txConn, 0, len(ss.parked)+1), ss.parked...)
	all = append(all, txConn{node: ss.node, pool: ss.pool, sc: ss.sc})
	slices.SortFunc(all, func(a, b txConn) int { return int(a.node) - int(b.node) })
	return all
}

// paramsOf copies each connection's reported parameters (to tell, after
// the transaction ends, which a SET LOCAL changed: appendChangedParams).
func paramsOf(all []txConn) []map[string]string {
	before := make([]map[string]string, len(all))
	for i, c := range all {
		before[i] = maps.Clone(c.sc.Params)
	}
	return before
}

// allAtOnce runs fn(0) ... fn(n-1) concurrently (each on its own
// connection) and waits for them all.
func allAtOnce(n int, fn func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(i)
		}()
	}
	wg.Wait()
}

// decideTimeout bounds recording a commit decision; a variable for tests.
var decideTimeout = txCleanupTimeout

// poolConn is a pooled connection of a transaction over several workers
// as a two-phase commit participant. A lost one is given back broken and
// replaced by a new connection of its pool (to commit a prepared
// transaction); c.sc is the one it ends with, nil if none could be had.
type poolConn struct {
	ss   *session
	c    *txConn
	lost bool
}

func (p *poolConn) Exec(ctx context.Context, sql string) (string, error) {
	deadline, ok := ctx.Deadline()
	switch {
	case strings.HasPrefix(sql, "PREPARE"):
		deadline = time.Now().Add(txPrepareTimeout)
	case !ok:
		deadline = time.Now().Add(txCleanupTimeout)
	}
	tag, err := p.c.sc.ExecTag(sql, deadline, nil)
	var pe *pgconn.PgError
	if err != nil && !errors.As(err, &pe) {
		p.c.sc.MarkBroken()
		p.lost = true
	}
	return tag, err
}

// ExecParams runs the commit of a group's last part, with its record
// (twophase.ParamsConn): deferred triggers and constraints run in it, as
// in PREPARE, under the same bound.
func (p *poolConn) ExecParams(_ context.Context, stmts []twophase.Stmt) (string, error) {
	ps := make([]pooling.Stmt, len(stmts))
	for i, s := range stmts {
		ps[i] = pooling.Stmt{SQL: s.SQL, Args: s.Args}
	}
	tag, err := p.c.sc.ExecParams(ps, time.Now().Add(txPrepareTimeout))
	var pe *pgconn.PgError
	if err != nil && !errors.As(err, &pe) {
		p.c.sc.MarkBroken()
		p.lost = true
	}
	return tag, err
}

func (p *poolConn) Lost() bool { return p.c.sc == nil || p.lost }

func (p *poolConn) Redial(ctx context.Context) error {
	if p.c.sc != nil {
		p.c.sc.MarkBroken()
		p.c.pool.Release(p.c.sc)
		p.c.sc = nil
	}
	sc, err := p.c.pool.Acquire(ctx, p.ss.holding())
	if err != nil {
		return err
	}
	p.c.sc, p.lost = sc, false
	return nil
}

// chainBegin is the BEGIN of the transaction that AND CHAIN starts after
// the one c is in: with its isolation level, read only and deferrable. A
// failed transaction cannot be asked, so the worker is: ROLLBACK AND CHAIN
// there starts the transaction PostgreSQL would start (PostgreSQL 15: the
// session's defaults), whose characteristics are read, and then ROLLBACK
// ends it, leaving c idle (the caller rolls back every connection of a
// failed transaction anyway).
func chainBegin(c txConn) (string, error) {
	deadline := time.Now().Add(txCleanupTimeout)
	const q = "SELECT pg_catalog.current_setting('transaction_isolation'), pg_catalog.current_setting('transaction_read_only'), pg_catalog.current_setting('transaction_deferrable')"
	failed := c.sc.TxStatus != 'T'
	if failed {
		if err := c.sc.Exec("ROLLBACK AND CHAIN", deadline, nil); err != nil || c.sc.TxStatus != 'T' {
			c.sc.MarkBroken()
			if err == nil {
				err = pgerr.New(pgerr.InvalidTransactionState, "worker %s did not start the chained transaction", c.sc.Addr)
			}
			return "", err
		}
	}
	rows, err := c.sc.Query(q, deadline)
	if failed {
		if err := c.sc.Exec("ROLLBACK", deadline, nil); err != nil {
			c.sc.MarkBroken()
		}
	}
	if err != nil {
		return "", err
	}
	if len(rows) != 1 || len(rows[0]) != 3 {
		return "", pgerr.New(pgerr.Internal, "unexpected answer about the transaction's characteristics from worker %s", c.sc.Addr)
	}
	switch rows[0][0] {
	case "read uncommitted", "read committed", "repeatable read", "serializable":
	default:
		return "", pgerr.New(pgerr.Internal, "unexpected isolation level %q from worker %s", rows[0][0], c.sc.Addr)
	}
	return chainBeginSQL(rows[0][0], rows[0][1] == "on", rows[0][2] == "on"), nil
}

// chainBeginSQL is a BEGIN with the given characteristics.
func chainBeginSQL(isolation string, readOnly, deferrable bool) string {
	b := "BEGIN ISOLATION LEVEL " + strings.ToUpper(isolation)
	if readOnly {
		b += ", READ ONLY"
	} else {
		b += ", READ WRITE"
	}
	if deferrable {
		return b + ", DEFERRABLE"
	}
	return b + ", NOT DEFERRABLE"
}

// begunAlone reports whether the session's transaction block began with a
// BEGIN of its own (txBegin), or was chained from one whose
// characteristics joinWorker asks the worker for (chainAsk): one that may
// take in other workers.
func (ss *session) begunAlone() bool {
	return ss.txBegin != "" || ss.chainAsk
}

// chained follows a COMMIT AND CHAIN or ROLLBACK AND CHAIN that ran on the
// session's one worker (which started the new transaction itself): the
// SETs of the transaction that ended are the session's if it committed,
// and gone if not; either way the session's settings say what a worker
// taken in later must have, so they no longer keep the transaction on its
// worker (txSet), nor do the ended transaction's savepoints. Only
// settings the session could not follow (paramsUnsure) still do. After a
// failed transaction the new one's characteristics are the worker's to
// know, and so they are after any other: the new one has the ended one's,
// which SET TRANSACTION may have changed after its BEGIN, and which its
// BEGIN took from the session's defaults as they were then (a SET or RESET
// of default_transaction_read_only since would give the same BEGIN
// others). joinWorker asks the worker (chainAsk) when another worker is
// needed.
func (ss *session) chained(committed bool) {
	if committed && !ss.txFailed {
		ss.params.applyOps(ss.pending, ss.sc.Params)
	} else {
		ss.keepPlaceholders() // (adversary round 16: a worker the chained transaction took in read NULL)
	}
	ss.txBegin, ss.chainAsk, ss.chainStarted = "", true, true
	ss.txSnap = nil // the chained block's catalog is its first statement's
	ss.pending = ss.pending[:0]
	ss.savepoints, ss.spLost = ss.savepoints[:0], false
	ss.txFailed = false
	ss.txSavepoint = false
	ss.txSet = ss.paramsUnsure
	ss.txLog, ss.txLogLost = ss.txLog[:0], false
	// The connection's settings are the session's again (committed or
	// rolled back): a multiRelease gives it back under that key.
	ss.sc.ParamsKey = ss.params.key
	if ss.paramsUnsure || len(ss.settled) > 0 {
		ss.sc.ParamsKey = pooling.UnknownKey // (settled: known at a ReadyForQuery outside a block)
	}
	// The ended transaction's portals are gone on the worker too.
	if len(ss.portalNode) > 0 {
		clear(ss.portalNode)
	}
}

func withCleanup(err error, problems []string) error {
	if len(problems) == 0 {
		return err
	}
	fe := pgerr.Flatten(err)
	e := &pgerr.Error{Severity: "ERROR", Code: fe.Code, Message: fe.Message, Detail: fe.Detail, Hint: fe.Hint}
	if e.Detail != "" {
		e.Detail += "\n"
	}
	e.Detail += "Cleanup was incomplete: " + strings.Join(problems, "; ") + "."
	return e
}

// multiRelease gives every connection of a transaction over several
// workers back and leaves the session between transactions.
func (ss *session) multiRelease(all []txConn, committed bool) {
	ss.unpublishTxn()
	keep := -1
	userCode := ss.verifyState || ss.txUserCode
	// The block's SETs first, then what user code changed after them
	// (verifyRelease's adopted settings): SET app.x, then a DO block's
	// set_config of it, leaves the DO block's value (adversary 149).
	if committed && !ss.txFailed {
		ss.params.applyOps(ss.pending, ss.sc.Params)
	} else {
		ss.keepPlaceholders()
	}
	if ss.verifyState && ss.sc != nil && ss.sc.TxStatus == 'I' && ss.pinned == "" {
		// User code ran on the current connection since its snapshot (a
		// switch between workers compares it, so only this one can have
		// changed unseen). Its changes are followed as at the end of a
		// block on one worker (verifyRelease): custom settings a
		// function set are taken into the session; any other change (a
		// set_config of DateStyle, a session advisory lock a DO block
		// took) keeps the session on this connection, pinned, rather
		// than lose it with the connections closed below (adversary
		// 148; settings were lost so). A ROLLBACK undid the block's
		// settings, not the rest.
		if !committed {
			ss.stateRolledBack = true
		}
		if !ss.verifyRelease() {
			keep = slices.IndexFunc(all, func(c txConn) bool { return c.sc == ss.sc })
		}
	}
	if userCode {
		// User code ran in the transaction and no snapshot covers every
		// worker's connection: none goes back to the pool. (txUserCode:
		// a coordinator-run write, which takes no snapshot, joined
		// them; adversary round 3.)
		ss.verifyState, ss.txUserCode = false, false
		for i, c := range all {
			if c.sc != nil && i != keep {
				c.sc.MarkBroken()
			}
		}
	}
	if len(ss.pending) > 0 || ss.txSet || ss.paramsUnsure || ss.settingsUnknown {
		for _, c := range all {
			if c.sc != nil {
				c.sc.ParamsKey = "\x00unknown"
			}
		}
	}
	ss.pending = ss.pending[:0]
	// The block's SETs of search_path are the session's now, or gone:
	// unqualified names resolve by its settings again, as after a block
	// on one worker (endOfCycle). They were refused until a statement on
	// no table ran.
	ss.settingsDirty, ss.pathTouched = false, false
	if ss.sc != nil {
		// What the block's end reported (the settings its ROLLBACK put
		// back: appendChangedParams) is what the client was told last.
		ss.noteStrings(ss.sc)
	}
	ss.cancelMu.Lock()
	ss.cancelTarget.Store(nil)
	ss.sc = nil
	ss.cancelMu.Unlock()
	ss.spanHint = ss.spanHint[:0]
	for i, c := range all {
		if i != keep {
			c.pool.Release(c.sc)
		}
		ss.spanHint = append(ss.spanHint, c.node)
	}
	slices.Sort(ss.spanHint)
	if keep >= 0 {
		ss.cancelMu.Lock()
		ss.pool, ss.node, ss.sc = all[keep].pool, all[keep].node, all[keep].sc
		ss.cancelTarget.Store(ss.sc)
		ss.cancelMu.Unlock()
	}
	ss.dropSpares()
	clear(ss.parked)
	ss.parked = ss.parked[:0]
	ss.txBegin, ss.txSet, ss.txSavepoint, ss.txFailed = "", false, false, false
	ss.txLog, ss.txLogLost = ss.txLog[:0], false
	ss.idleOff, ss.idleTimeout = false, 0
	ss.chainAsk, ss.chainStarted = false, false
	ss.savepoints, ss.spLost = ss.savepoints[:0], false
	ss.needSync, ss.batchWork, ss.paramsUnsure = false, false, false
	ss.parkedUndone = false
	ss.implicitTxn = false
	ss.ddlDone()
	if len(ss.portals) > 0 {
		clear(ss.portals)
		clear(ss.portalSets)
	}
	if len(ss.bridged) > 0 {
		ss.endBlockPortals()
	}
	if len(ss.portalNode) > 0 {
		clear(ss.portalNode)
	}
}

// advisoryLocks reports whether sc's backend holds advisory locks (one
// query); ok is false when it could not be asked.
func advisoryLocks(sc *pooling.ServerConn, pool *pooling.Pool) (held, ok bool) {
	rows, err := sc.Query(advisoryCountSQL, time.Now().Add(pool.Config().ResetTimeout))
	if err != nil || len(rows) != 1 || len(rows[0]) != 1 {
		return false, false
	}
	return rows[0][0] != "0", true
}

// notePortal records that portal is being bound on the current worker of a
// transaction that may span workers.
func (ss *session) notePortal(portal string) {
	if ss.portalNode == nil {
		ss.portalNode = map[string]int32{}
	}
	ss.portalNode[portal] = ss.node
}

// portalWorker makes the worker a portal was bound on the current one
// before a Describe, Execute or Close of it: a portal lives on the
// connection that bound it, which may be parked. False: refused (the
// error is queued).
func (ss *session) portalWorker(portal string) bool {
	node, ok := ss.portalNode[portal]
	if !ok || ss.sc == nil || node == ss.node {
		return true
	}
	if err := ss.joinWorker(context.Background(), node); err != nil {
		if ss.sc != nil && ss.sc.TxStatus == 'T' {
			var pe *pgerr.Error
			if errors.As(err, &pe) && pe.Code == pgerr.FeatureNotSupported {
				err = errMultiRefused(fmt.Sprintf("portal %q is open on worker %s, and this transaction cannot go back to it now: %s",
					portal, ss.srv.nodeAddr(node), pe.Message), pe.Hint)
			}
		}
		ss.synthError(err)
		return false
	}
	return true
}

// portalFree refuses, as PostgreSQL does, a Bind to a named portal that is
// still open on another worker of the transaction.
func (ss *session) portalFree(portal string, node int32) bool {
	if at, ok := ss.portalNode[portal]; ok && at != node {
		ss.synthError(pgerr.New(pgerr.DuplicateCursor, "cursor %q already exists", portal))
		return false
	}
	return true
}

// abortParked rolls back the transaction's other workers once it failed on
// the current one: PostgreSQL's failed transaction releases its locks at
// the error, not when its client ends the block (a deadlock victim's
// included, whose rows the survivor waits for on another worker). The
// block stays failed on the current worker, which answers every statement
// but its end with 25P02 (a failed block never switches worker:
// joinWorker), and its end rolls that one back (multiEnd skips the
// connections this ended). With savepoints they go back to the innermost
// one instead, as PostgreSQL's failed subtransaction releases the locks
// taken since (and keeps those before): the client's ROLLBACK TO brings
// the block back on every worker.
func (ss *session) abortParked() {
	if ss.spLost || len(ss.savepoints) > 0 && !ss.savepointsKnown() {
		return
	}
	undo := "ROLLBACK"
	if n := len(ss.savepoints); n > 0 {
		// PostgreSQL aborts the innermost subtransaction, releasing the
		// locks taken since its savepoint: the other workers go back to
		// it, as the client's ROLLBACK TO would take them (again).
		undo = "ROLLBACK TO SAVEPOINT " + quoteIdent(ss.savepoints[n-1].name)
	}
	for _, c := range ss.parked {
		if c.sc.TxStatus != 'T' {
			continue // ended already, or failed (its locks are released)
		}
		err := c.sc.Exec(undo, time.Now().Add(txCleanupTimeout), nil)
		var pe *pgconn.PgError
		if err != nil && errors.As(err, &pe) && c.sc.TxStatus != 'T' {
			continue // (the worker answered: its transaction ended or failed, its locks went)
		}
		if err != nil && (undo == "ROLLBACK" || !errors.As(err, &pe)) {
			// Its backend goes when the block ends (a broken connection
			// is closed, not pooled), and the transaction with it. (A
			// worker's refusal of the ROLLBACK TO leaves its transaction
			// failed, its locks released.)
			c.sc.MarkBroken()
			c.sc.TxStatus = 'I'
		}
	}
}

// splitEnd ends a session whose transaction ended on one worker only (it
// should not happen: COMMIT and ROLLBACK are the coordinator's): the others
// are rolled back, and the client is told the outcome is unknown.
func (ss *session) splitEnd() error {
	addr := ss.sc.Addr
	for _, c := range ss.parked {
		_ = c.sc.Exec("ROLLBACK", time.Now().Add(txCleanupTimeout), nil)
	}
	ss.multiRelease(append(ss.parked, txConn{node: ss.node, pool: ss.pool, sc: ss.sc}), false)
	return &pgerr.Error{Severity: "FATAL", Code: pgerr.ConnectionFailure,
		Message: fmt.Sprintf("the transaction ended on worker %s only; it was rolled back on the other workers", addr),
		Hint:    "The transaction's outcome is unknown; reconnect and check before retrying."}
}

// multiBind handles a Bind in a transaction over several workers: refuses
// what cannot run, and binds COMMIT, ROLLBACK, savepoint statements and a
// client's PREPARE TRANSACTION locally (local is true), to run at Execute.
func (ss *session) multiBind(portal string, st *Statement) (local bool, err error) {
	_, prepare := clientPrepare(&st.cls, st.Query)
	prepare = prepare && !ss.catalogPending()
	if err := ss.multiCheck(&st.cls, st.Query); err != nil && !prepare {
		return false, err
	}
	if st.cls.txn != "commit" && st.cls.txn != "rollback" && !savepointOnly(&st.cls) && !prepare {
		return false, nil
	}
	if ss.needSync {
		if err := ss.settle(); err != nil {
			return false, err
		}
	}
	ss.localPortal = portal
	ss.localPortalSt = st
	ss.push(expect{kind: eSynth, synth: msgBindComplete})
	return true, nil
}

// multiExecute runs a COMMIT, ROLLBACK, savepoint statement or PREPARE
// TRANSACTION bound by multiBind.
func (ss *session) multiExecute(st *Statement) error {
	var tag string
	var extra, after []byte
	var err error
	if gid, ok := clientPrepare(&st.cls, st.Query); ok {
		tag, after, err = ss.multiPrepare(st.Query, gid)
	} else if savepointOnly(&st.cls) {
		tag, err = ss.multiSavepoint(st.cls.sps[0], st.Query, func(typ byte, b []byte) { extra = wire.AppendFrame(extra, typ, b) })
	} else {
		tag, extra, after, err = ss.multiEnd(st.cls.txn == "commit", st.cls.chain)
		ss.txnEnded(err == nil && tag == "COMMIT")
	}
	if len(extra) > 0 {
		ss.push(expect{kind: eSynth, synth: extra})
	}
	if err != nil {
		if pe := pgerr.Flatten(err); pe.Severity == "FATAL" {
			return err
		}
		ss.synthError(err)
		return nil
	}
	ss.push(expect{kind: eSynth, synth: append(commandComplete(nil, tag), after...)})
	return nil
}

// refWriteInTxn runs a reference-table write inside a transaction block on
// every worker holding a copy, each joined into the transaction, in node
// order (so that two transactions writing the same row lock its copies in
// the same order); the last worker's answer goes to the client.
func (ss *session) refWriteInTxn(p *planner.Plan, lits []literal) error {
	if err := ss.sameOnEveryCopy(context.Background(), p, lits, nil, nil, nil); err != nil {
		return ss.queryError(err)
	}
	snap := ss.srv.catalog.Load()
	nodes := slices.Clone(snap.Shards[p.Tables[0]][0].Nodes)
	slices.Sort(nodes)
	// Every copy runs the write's reporting form; the copies' reports
	// must agree (refdigest.go). Made of the statement with its
	// placeholders (once per shape), then given the constants.
	d, err := refDigestOf(p.ShardSQL()[0], p.Tables[0])
	if err != nil {
		return ss.queryError(err)
	}
	if lits != nil {
		d.sql, _ = spliceFrom(d.sql, lits, 1)
	}
	build := func(ahead bool) ([]byte, string) {
		if !ahead {
			return appendQuery(nil, d.sql), ""
		}
		// After a BEGIN's Parse, Bind and Execute (joinPipe): the same
		// statement as Parse, Bind, Describe and Execute, so that a BEGIN
		// that fails skips it up to the Sync (a Query would run).
		b, _ := (&pgproto3.Parse{Query: d.sql}).Encode(nil)
		b, _ = (&pgproto3.Bind{}).Encode(b)
		b, _ = (&pgproto3.Describe{ObjectType: 'P'}).Encode(b)
		return appendSync(appendExecute(b)), ""
	}
	last, fail, err := ss.refInTxn(d, p.Tables[0], nodes, build)
	switch {
	case err != nil:
		return ss.lostServer(err)
	case fail != nil:
		return ss.queryError(fail)
	case last.werr != nil:
		ss.txFailed = true
		ss.out = append(ss.out, last.msgs...)
		ss.out = wire.AppendFrame(ss.out, 'E', userNamesBody(ss.srv.catalog.Load(), ss.victimBody(last.werr)))
		ss.out = readyForQuery(ss.out, ss.sc.TxStatus)
		return nil
	}
	ss.out = d.answer(ss.out, last)
	ss.out = readyForQuery(ss.out, ss.sc.TxStatus)
	return nil
}

// stateChanged reports whether the current connection's session state
// differs from the snapshot taken before user code ran (snapshotState);
// one query, on the rare path that takes in a worker after user code.
func (ss *session) stateChanged() bool {
	var dr pgproto3.DataRow
	if len(ss.stateBase) == 0 || dr.Decode(ss.stateBase) != nil || len(dr.Values) != 2 {
		return true
	}
	rows, err := ss.readState()
	return err != nil || !sameState(rows, dr.Values, true)
}

// savepointOnly reports whether cls is one savepoint statement (SAVEPOINT,
// RELEASE, ROLLBACK TO) and nothing else.
func savepointOnly(cls *class) bool {
	return cls.count == 1 && len(cls.sps) == 1 && len(cls.ops) == 0 && cls.txn == ""
}

// savepointsKnown reports whether the transaction's savepoints are known
// by names that can be written again exactly (savepointReplay): plain
// identifiers, as ORMs make them (s1, "s140311228536576_x1").
func (ss *session) savepointsKnown() bool {
	if ss.spLost {
		return false
	}
	for _, sp := range ss.savepoints {
		if sp.name == "" {
			return false
		}
		for i := 0; i < len(sp.name); i++ {
			c := sp.name[i]
			if !(c == '_' || c == '$' || c == ' ' || c == '-' || c == '.' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
				return false
			}
		}
	}
	return true
}

// savepointReplay is the transaction's savepoints, oldest first, and its
// SETs (txLog) in their places among them, as SQL to run after its BEGIN
// on a worker it takes in ("" without either).
func (ss *session) savepointReplay() string {
	var b strings.Builder
	at := 0
	for _, sp := range ss.savepoints {
		at = ss.appendLog(&b, at, sp.logN)
		b.WriteString("\n; SAVEPOINT ")
		b.WriteString(quoteIdent(sp.name))
	}
	ss.appendLog(&b, at, len(ss.txLog))
	return b.String()
}

// logReplay is the transaction's SETs from..to (txLog) as SQL to run on
// a connection of the block that missed them.
func (ss *session) logReplay(from, to int) string {
	var b strings.Builder
	ss.appendLog(&b, from, to)
	return strings.TrimPrefix(b.String(), "\n; ")
}

// appendLog writes the transaction's SETs from..to (txLog), each after
// "\n; ", and returns where it stopped.
func (ss *session) appendLog(b *strings.Builder, at, to int) int {
	for ; at < min(to, len(ss.txLog)); at++ {
		b.WriteString("\n; ") // (the newline ends a -- comment the text before ends with)
		b.WriteString(ss.txLog[at].text)
		// A RESET of a startup setting was followed by the startup
		// value on the worker it ran on (fixParams): here too.
		switch op := ss.txLog[at]; op.kind {
		case opReset, opSetDefault:
			if v, ok := ss.params.startupVal[op.name]; ok {
				b.WriteString("\n; " + setSQL(op.name, v))
			}
		case opNone:
			if v, ok := ss.params.startupVal[op.name]; ok && op.dflt {
				b.WriteString("\n; " + setLocalSQL(op.name, v))
			}
		case opResetAll:
			names := slices.Sorted(maps.Keys(ss.params.startupVal))
			for _, name := range names {
				b.WriteString("\n; " + setSQL(name, ss.params.startupVal[name]))
			}
		}
	}
	return at
}

// multiSavepoint runs a savepoint statement (SAVEPOINT, RELEASE, ROLLBACK
// TO) in a transaction over several workers: on each of them, the current
// one first, so that every worker keeps the same savepoints (joinWorker
// sets them on a worker taken in later). ROLLBACK TO undoes on each worker
// what it did after the savepoint, and brings a failed transaction back;
// SAVEPOINT and RELEASE in a failed transaction get 25P02 without being
// sent, as PostgreSQL answers them. A worker's error ends the statement
// there and fails the transaction (that worker becomes the current one, so
// the client sees the transaction failed). relay gets the current
// worker's ParameterStatus and notice messages (the others' are the same).
func (ss *session) multiSavepoint(op paramOp, sql string, relay func(typ byte, body []byte)) (string, error) {
	if op.kind != opRollbackTo && ss.txStatus() == 'E' {
		return "", pgerr.New(pgerr.InFailedSQLTransaction,
			"current transaction is aborted, commands ignored until end of transaction block")
	}
	cur := txConn{node: ss.node, pool: ss.pool, sc: ss.sc, logN: len(ss.txLog)}
	all := append([]txConn{cur}, ss.parked...)
	var tag string
	for i, c := range all {
		var r func(byte, []byte)
		if i == 0 {
			r = relay
		}
		text := sql
		if op.kind == opSavepoint && c.logN < len(ss.txLog) {
			// The SETs it missed go before the savepoint, where they
			// are on the others (a ROLLBACK TO it keeps them).
			text = ss.logReplay(c.logN, len(ss.txLog)) + "\n; " + sql
		}
		t, err := c.sc.ExecTag(text, time.Now().Add(10*time.Minute), r)
		if i > 0 && err == nil && text != sql {
			ss.parked[i-1].logN = len(ss.txLog) // (it ran the ones it missed: not so for RELEASE or ROLLBACK TO)
		}
		if i == 0 {
			tag = t
		}
		if err == nil {
			continue
		}
		var pe *pgconn.PgError
		if !errors.As(err, &pe) {
			c.sc.MarkBroken()
			return "", ss.lostServer(err)
		}
		if i > 0 {
			ss.parked[i-1] = cur
			ss.setCurrent(c)
		}
		ss.txFailed = true
		return "", err
	}
	if !ss.noteSavepoint(op) {
		ss.savepoints, ss.spLost = ss.savepoints[:0], true
	}
	if op.kind == opSavepoint {
		ss.txSavepoint = true
	}
	ss.parkedUndone = false // (a failure after this one undoes again)
	return tag, nil
}

// appendChangedParams appends a ParameterStatus for each reported setting
// whose value a connection of all reported anew since before (its Params
// then), once per setting, in name order.
func appendChangedParams(out []byte, all []txConn, before []map[string]string) []byte {
	var changed map[string]string
	for i, c := range all {
		for name, v := range c.sc.Params {
			if old, ok := before[i][name]; !ok || old != v {
				if changed == nil {
					changed = map[string]string{}
				}
				changed[name] = v
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(changed)) {
		ps := pgproto3.ParameterStatus{Name: name, Value: changed[name]}
		out, _ = ps.Encode(out)
	}
	return out
}
