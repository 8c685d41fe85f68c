package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	pg_query "github.com/pganalyze/pg_query_go/v5"

	"github.com/pgfleet/pgfleet/coordinator/twophase"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/internal/wire"
	"github.com/pgfleet/pgfleet/metadata"
	"github.com/pgfleet/pgfleet/pooling"
)

// A client's own two-phase commit. PREPARE TRANSACTION runs on the worker
// its block is on (over several workers, the one that wrote: multiPrepare);
// the prepared transaction then lives there, so COMMIT PREPARED and
// ROLLBACK PREPARED, which may come from any session of any coordinator,
// run on the worker that lists the id in pg_prepared_xacts. The checks
// PostgreSQL makes at PREPARE TRANSACTION that a worker cannot make for
// the fleet are made here first: a WITH HOLD cursor the coordinator keeps,
// declared in the block, and an id already prepared on another worker.

// gidLookupTimeout bounds the search of the workers for a prepared
// transaction's id.
const gidLookupTimeout = 10 * time.Second

// twoPhaseStmt reads a statement of its own that is PREPARE TRANSACTION,
// COMMIT PREPARED or ROLLBACK PREPARED: its kind and global id.
func twoPhaseStmt(sql string) (pg_query.TransactionStmtKind, string, bool) {
	tree, err := pg_query.Parse(sql)
	if err != nil || len(tree.Stmts) != 1 {
		return 0, "", false
	}
	ts := tree.Stmts[0].GetStmt().GetTransactionStmt()
	if ts == nil {
		return 0, "", false
	}
	switch ts.Kind {
	case pg_query.TransactionStmtKind_TRANS_STMT_PREPARE, pg_query.TransactionStmtKind_TRANS_STMT_COMMIT_PREPARED,
		pg_query.TransactionStmtKind_TRANS_STMT_ROLLBACK_PREPARED:
		return ts.Kind, ts.Gid, true
	}
	return 0, "", false
}

// clientPrepare returns the id of a client's PREPARE TRANSACTION: sql is
// that statement alone, with an id that is not one of pgfleet's.
func clientPrepare(cls *class, sql string) (string, bool) {
	if cls.count != 1 || txnControl(sql) != "PREPARE TRANSACTION" {
		return "", false
	}
	kind, gid, ok := twoPhaseStmt(sql)
	if !ok || kind != pg_query.TransactionStmtKind_TRANS_STMT_PREPARE || strings.HasPrefix(gid, twophase.GIDPrefix) {
		return "", false
	}
	return gid, true
}

// clientTwoPhase handles a client's two-phase statement (a simple query of
// its own) before it runs. PREPARE TRANSACTION that PostgreSQL would refuse
// is answered here (handled), ending the block rolled back as a failed
// PREPARE TRANSACTION does. For COMMIT PREPARED and ROLLBACK PREPARED
// outside a block, node is the worker that holds the id (-1: none does, or
// the statement is not one; it goes where it would).
func (ss *session) clientTwoPhase(text string) (node int32, handled bool, err error) {
	kind, gid, ok := twoPhaseStmt(text)
	if !ok || !ss.routes || strings.HasPrefix(gid, twophase.GIDPrefix) {
		return -1, false, nil // (pgfleet's ids: refuseOwnGID)
	}
	if kind == pg_query.TransactionStmtKind_TRANS_STMT_PREPARE {
		if rb := (class{count: 1, txn: "rollback"}); ss.pendingFailed && ss.localTxnOK(&rb) {
			// A block the coordinator failed before a worker saw it:
			// PostgreSQL's PREPARE TRANSACTION of a failed block rolls
			// it back (adversary: 25P02, the block left failed).
			ss.localTxn(&rb, "ROLLBACK")
			return -1, true, nil
		}
		if len(ss.parked) > 0 && ss.multi == nil && !ss.catalogPending() {
			// A block over several workers: here, before cursorStatement
			// takes PREPARE for the end of the block and drops the WITH
			// HOLD cursors it declared (adversary: the block was
			// prepared, where PostgreSQL refuses it).
			tag, after, err := ss.multiPrepare(text, gid)
			if err != nil {
				return -1, true, ss.queryError(err)
			}
			ss.out = append(commandComplete(ss.out, tag), after...)
			ss.out = readyForQuery(ss.out, ss.txStatus())
			return -1, true, nil
		}
		if ss.txStatus() != 'T' || ss.multi != nil || len(ss.parked) > 0 || ss.catalogPending() {
			// A failed block's or none: as ROLLBACK, or a warning; a
			// block over several workers running create_distributed_table:
			// refused (multiCheck).
			return -1, false, nil
		}
		for _, c := range ss.cursors {
			if c.hold && c.pending {
				return -1, true, ss.failPrepare(errHoldPrepare())
			}
		}
		unlock, err := ss.lockGID(gid)
		if err != nil {
			return -1, true, ss.failPrepare(err)
		}
		ss.gidUnlock = unlock // (once the PREPARE TRANSACTION ran: simpleQuery)
		here := ss.currentNode()
		found, err := ss.gidNodes(gid)
		if err != nil {
			return -1, true, ss.failPrepare(err)
		}
		for _, f := range found {
			if f.node != here {
				return -1, true, ss.failPrepare(pgerr.New(pgerr.DuplicateObject,
					"transaction identifier %q is already in use", gid))
			}
		}
		return -1, false, nil
	}
	if ss.txStatus() != 'I' {
		return -1, false, nil // PostgreSQL's 25001 or 25P02, from the block's worker
	}
	found, err := ss.gidNodes(gid)
	if err != nil {
		return -1, false, err
	}
	var mine []int32
	for _, f := range found {
		if f.database == ss.database {
			mine = append(mine, f.node)
		}
	}
	switch {
	case len(found) == 0:
		return -1, false, nil // PostgreSQL's 42704, from wherever it goes
	case len(mine) > 1:
		return -1, false, pgerr.New(pgerr.FeatureNotSupported,
			"prepared transaction %q exists on %d workers of the fleet", gid, len(mine)).
			WithHint("Connect to each worker directly to commit or roll back its transaction of that id.")
	case len(mine) == 1:
		node = mine[0]
	default:
		node = found[0].node // PostgreSQL's "belongs to another database"
	}
	if ss.pinned != "" && ss.sc != nil && node != ss.node {
		if !ss.settingsUnknown {
			// A session pinned to its connection (a temporary table, a
			// session lock) whose settings and role pgfleet knows: a
			// connection of the pool there, which has them, runs it.
			return -1, true, ss.twoPhaseAside(node, text)
		}
		return -1, false, pgerr.New(pgerr.FeatureNotSupported,
			"%s of a transaction prepared on another worker is not supported in a session pinned to one worker connection (%s)",
			tag2PC(text), ss.pinned).
			WithHint("Run it from a new session.")
	}
	return node, false, nil
}

// twoPhaseAside runs a COMMIT or ROLLBACK PREPARED (text) of a pinned
// session, outside a transaction block, on a connection of its pool for
// the worker holding the id, and answers the client. Neither statement
// reads the session's state but its role and database, which the pool's
// connection shares (checkout gives it the session's settings).
func (ss *session) twoPhaseAside(node int32, text string) error {
	pool, err := ss.poolFor(node)
	if err != nil {
		return ss.queryError(err)
	}
	sc, err := ss.sideCheckout(context.Background(), pool)
	if err != nil {
		return ss.queryError(err)
	}
	// Its privileges are the current role's: the pinned connection's,
	// which user code may have changed where pgfleet does not follow
	// (set_config('role', ...) in a function), as a role's settings
	// changed since the session began (ALTER ROLE ... SET role) may the
	// pool's connection's. Where they differ it is refused (adversary: a
	// role that PostgreSQL refuses committed another's transaction).
	deadline := time.Now().Add(pool.Config().ResetTimeout)
	own, err := ss.sc.QueryRelay(whoSQL, deadline, ss.relayAsync)
	if err != nil {
		sc.MarkBroken()
		ss.sideRelease(pool, sc)
		return ss.queryError(err)
	}
	side, err := sc.Query(whoSQL, deadline)
	if err == nil && (len(own) != 1 || len(side) != 1 || len(own[0]) != 1 || len(side[0]) != 1 || own[0][0] != side[0][0]) {
		err = pgerr.New(pgerr.FeatureNotSupported,
			"%s of a transaction prepared on another worker is not supported in a session pinned to one worker connection (%s) whose role pgfleet cannot take on there", tag2PC(text), ss.pinned).
			WithHint("Run it from a new session.")
	}
	if err != nil {
		ss.sideRelease(pool, sc)
		return ss.queryError(err)
	}
	tag, err := sc.ExecTag(text, time.Time{}, nil)
	var pe *pgconn.PgError
	if err != nil && !errors.As(err, &pe) || sc.TxStatus != 'I' {
		sc.MarkBroken() // not reusable
	}
	ss.sideRelease(pool, sc)
	if err != nil {
		if pe == nil {
			// The connection failed: the outcome is not known.
			err = pgerr.New(pgerr.ConnectionFailure, "lost the connection to worker %s while it ran %s: %v", ss.srv.nodeAddr(node), tag2PC(text), err).
				WithHint("Look for the transaction in pg_prepared_xacts before running the statement again.")
		}
		return ss.queryError(err)
	}
	ss.answerTag(tag)
	return nil
}

// relayAsync passes to the client what its own connection sent beside the
// answer to a question of the coordinator's: notices, parameter changes and
// notifications (a LISTEN's, its backend's PID the session's).
func (ss *session) relayAsync(typ byte, body []byte) {
	if typ == 'A' {
		ss.ownNotification(body, ss.sc.PID)
	}
	ss.out = wire.AppendFrame(ss.out, typ, body)
}

// whoSQL reads the role whose privileges a statement has.
const whoSQL = "SELECT CURRENT_USER::pg_catalog.text"

// tag2PC is the command a two-phase statement's text runs.
func tag2PC(text string) string {
	if kind, _, ok := twoPhaseStmt(text); ok && kind == pg_query.TransactionStmtKind_TRANS_STMT_ROLLBACK_PREPARED {
		return "ROLLBACK PREPARED"
	}
	return "COMMIT PREPARED"
}

// lockGID holds, until unlock, a lock on a client's transaction id on the
// default node's postgres database, which every coordinator of the fleet
// shares: from the search of the workers for the id to its PREPARE
// TRANSACTION, no other session of any coordinator prepares the same id
// (two at once, on two workers, could both have found it free, leaving an
// id prepared twice, which COMMIT PREPARED then refuses). The lock is a
// transaction's advisory lock, so a coordinator gone mid-way leaves none.
func (ss *session) lockGID(gid string) (unlock func(), err error) {
	snap := ss.srv.catalog.Load()
	var n *metadata.Node
	if snap != nil {
		n = snap.Node(ss.srv.defaultNode.Load())
	}
	if n == nil {
		return func() {}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), gidLookupTimeout)
	defer cancel()
	c, err := ss.srv.adminConn(ctx, *n, "postgres", ss.holding())
	if err != nil {
		return nil, pgerr.New(pgerr.ConnectionFailure, "locking transaction identifier %q: %v", gid, err).
			WithHint("Try again when every worker is reachable.")
	}
	// (No timeout of the worker's may end the wait, or the transaction
	// idle while the PREPARE runs: the lock would go with it. Adversary:
	// idle_in_transaction_session_timeout let another session prepare
	// the id on another worker.)
	_, err = c.Exec(ctx, "BEGIN; SET LOCAL idle_in_transaction_session_timeout = 0; SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = 0", pgx.QueryExecModeSimpleProtocol)
	if err == nil {
		_, err = c.Exec(ctx, "SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended($1::pg_catalog.text, 7270))", gid)
	}
	if err != nil {
		pooling.Reclaim(context.Background(), c.PgConn()) // (its transaction rolled back)
		if ctx.Err() != nil {
			return nil, pgerr.New(pgerr.LockNotAvailable, "transaction identifier %q is being prepared by another session", gid).
				WithHint("Try again; the identifier is in use if that PREPARE TRANSACTION succeeds.")
		}
		return nil, pgerr.New(pgerr.ConnectionFailure, "locking transaction identifier %q: %v", gid, err).
			WithHint("Try again when every worker is reachable.")
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), txCleanupTimeout)
		defer cancel()
		_, _ = c.Exec(ctx, "ROLLBACK")
		pooling.Reclaim(ctx, c.PgConn())
	}, nil
}

// gidAt is a worker that lists a prepared transaction's id, and the
// database the transaction belongs to.
type gidAt struct {
	node     int32
	database string
}

// gidNodes asks every worker of the catalog which prepared transactions
// have the global id gid.
func (ss *session) gidNodes(gid string) ([]gidAt, error) {
	snap := ss.srv.catalog.Load()
	if snap == nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), gidLookupTimeout)
	defer cancel()
	var out []gidAt
	for _, n := range snap.Nodes {
		c, err := ss.srv.adminConn(ctx, n, "postgres", ss.holding())
		if err != nil {
			return nil, pgerr.New(pgerr.ConnectionFailure, "looking for prepared transaction %q: %v", gid, err).
				WithHint("Try again when every worker is reachable.")
		}
		var dbs []string
		rows, err := c.Query(ctx, "SELECT database::pg_catalog.text FROM pg_catalog.pg_prepared_xacts WHERE gid OPERATOR(pg_catalog.=) $1::pg_catalog.text", gid)
		if err == nil {
			for rows.Next() {
				var db string
				if err = rows.Scan(&db); err != nil {
					break
				}
				dbs = append(dbs, db)
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		pooling.Reclaim(context.Background(), c.PgConn())
		if err != nil {
			return nil, pgerr.New(pgerr.ConnectionFailure, "looking for prepared transaction %q on %s: %v", gid, n.Addr(), err).
				WithHint("Try again when every worker is reachable.")
		}
		for _, db := range dbs {
			out = append(out, gidAt{node: n.ID, database: db})
		}
	}
	return out, nil
}

// failPrepare answers a PREPARE TRANSACTION the coordinator refuses with
// err and ends the block rolled back, as a PREPARE TRANSACTION that fails
// on PostgreSQL does. The block's worker is sent a PREPARE TRANSACTION
// that fails there (an id longer than PostgreSQL takes), which rolls its
// transaction back and ends the block; its error is hidden behind err.
func (ss *session) failPrepare(err error) error {
	b, _ := pgerr.Flatten(err).Encode(nil)
	if ss.sc == nil || ss.sc.TxStatus != 'T' {
		// The block is the coordinator's alone (its BEGIN not sent yet).
		ss.applyLocalTxn(&class{txn: "rollback"}, "ROLLBACK") // (its cursors and portals end: txnEnded)
		ss.out = append(ss.out, b...)
		ss.out = readyForQuery(ss.out, ss.txStatus())
		return nil
	}
	ss.push(expect{kind: eSynth, synth: b})
	ss.sc.SetBuf(append(ss.sc.Buf(), msgFailPrepare...))
	ss.push(expect{kind: eRelay, term: tQuery, abort: true})
	return ss.roundTrip()
}

// msgFailPrepare is a PREPARE TRANSACTION that PostgreSQL refuses after it
// has begun to prepare (its id is longer than the 199 bytes it takes), so
// that the transaction is rolled back and the block ended.
var msgFailPrepare = appendQuery(nil, fmt.Sprintf("PREPARE TRANSACTION '%s'", strings.Repeat("x", 200)))

// preparesTxn: one of sql's statements is PREPARE TRANSACTION.
func preparesTxn(sql string) bool {
	lx := lexer{s: sql}
	for {
		n, _, _, more := lx.statement()
		if n > 1 && oneOf(lx.words[0], "PREPARE") && oneOf(lx.words[1], "TRANSACTION") {
			return true
		}
		if !more {
			return false
		}
	}
}

// multiPrepare runs a client's PREPARE TRANSACTION gid (sql) in a block
// over several workers, which at most one of them wrote to: a table-less
// statement (SELECT 1, a SET) runs on the default worker, so an XA
// transaction's block often spans two workers with its writes on one. The
// writer (or, with none, the session's current worker) prepares the
// transaction under the client's id, and only there is it prepared, as on
// PostgreSQL. The others changed nothing; each is prepared first under an
// id of pgfleet's, so that PostgreSQL refuses what it refuses at PREPARE
// (LISTEN, NOTIFY, temporary objects), and rolled back once the writer
// has prepared (a coordinator gone meanwhile leaves them to recovery,
// which rolls back what no decision covers). Writes on two workers, or
// SERIALIZABLE, are refused (0A000), and so is an id prepared on any
// worker already (42710). Every refusal or failure ends the block rolled
// back, as a failed PREPARE TRANSACTION does.
func (ss *session) multiPrepare(sql, gid string) (tag string, after []byte, err error) {
	all := ss.txParts()
	prepared := false
	defer func() {
		ss.wroteOn = ss.wroteOn[:0]
		ss.multiRelease(all, prepared)
		ss.pendingBegin, ss.chainStarted, ss.txSnap = "", false, nil
		ss.txnEnded(false)
	}()
	before := paramsOf(all)
	rollback := func() {
		for _, c := range all {
			if c.sc.Exec("ROLLBACK", time.Now().Add(txCleanupTimeout), nil) != nil {
				c.sc.MarkBroken()
			}
		}
	}
	for _, c := range all {
		if c.sc.TxStatus != 'T' {
			rollback() // a failed block: PREPARE TRANSACTION rolls it back
			return "ROLLBACK", nil, nil
		}
	}
	for _, c := range ss.cursors {
		if c.hold && c.pending {
			rollback()
			return "", nil, errHoldPrepare()
		}
	}
	unlock, err := ss.lockGID(gid)
	if err != nil {
		rollback()
		return "", nil, err
	}
	defer unlock()
	found, err := ss.gidNodes(gid)
	if err == nil && len(found) > 0 {
		err = pgerr.New(pgerr.DuplicateObject, "transaction identifier %q is already in use", gid)
	}
	if err != nil {
		rollback()
		return "", nil, err
	}
	writer, holds, locks, ok := askParts(all)
	if !ok {
		rollback()
		return "", nil, errMultiRefused("PREPARE TRANSACTION is not supported in a transaction that wrote on several workers or runs at SERIALIZABLE; the transaction was rolled back",
			"Keep a transaction you prepare to rows on one worker (all its rows in one shard, or colocated rows with one distribution value).")
	}
	if slices.Contains(holds, true) {
		rollback() // (a function declared it: the client's own are the coordinator's)
		return "", nil, errHoldPrepare()
	}
	if writer < 0 {
		writer = slices.IndexFunc(all, func(c txConn) bool { return c.node == ss.node })
	}
	for i := range all {
		if i != writer && locks[i] {
			// Its transaction ends at the PREPARE, and so would the locks,
			// which PostgreSQL keeps until COMMIT PREPARED (adversary).
			rollback()
			return "", nil, errMultiRefused("PREPARE TRANSACTION is not supported in a transaction that spans several workers and took locks (advisory locks, LOCK TABLE) on a worker it did not write on; the transaction was rolled back",
				"Take such locks on the worker the transaction writes on, or keep the transaction to one worker.")
		}
	}
	g := twophase.New("ro", ss.srv.store)
	for i := range all {
		if i != writer {
			g.Join(all[i].node, "worker "+all[i].sc.Addr, &poolConn{ss: ss, c: &all[i]})
		}
	}
	ctx := context.Background()
	if err := g.Prepare(ctx); err != nil {
		problems := g.Rollback(ctx) // the others, prepared or not
		if all[writer].sc.Exec("ROLLBACK", time.Now().Add(txCleanupTimeout), nil) != nil {
			all[writer].sc.MarkBroken()
		}
		var pe *twophase.PrepareError
		switch {
		case !errors.As(err, &pe):
			return "", nil, withCleanup(err, problems)
		case pe.Lost:
			return "", nil, withCleanup(pgerr.New(pgerr.ConnectionFailure,
				"lost connection to %s during PREPARE TRANSACTION: %v; the transaction was rolled back", pe.Part.Where, pe.Err), problems)
		case pe.Err == nil:
			return "ROLLBACK", nil, nil
		}
		var wpe *pgconn.PgError
		if errors.As(pe.Err, &wpe) {
			return "", nil, withCleanup(pgerr.FromWorker(wpe), problems) // PostgreSQL's refusal (NOTIFY, temporary objects)
		}
		return "", nil, withCleanup(pe.Err, problems)
	}
	w := all[writer].sc
	t, err := w.ExecTag(sql, time.Now().Add(txPrepareTimeout), nil)
	var wpe *pgconn.PgError
	switch {
	case err != nil && !errors.As(err, &wpe):
		w.MarkBroken()
		err = pgerr.New(pgerr.ConnectionFailure, "lost connection to worker %s during PREPARE TRANSACTION: %v; whether transaction %q was prepared is unknown", w.Addr, err, gid).
			WithHint("Look for it in pg_prepared_xacts before running the transaction again.")
	case err != nil:
		err = pgerr.FromWorker(wpe) // its transaction rolled back
	case t != "PREPARE TRANSACTION":
		tag = t // ROLLBACK: the worker's transaction had failed
	default:
		tag, prepared = t, true
	}
	problems := g.Rollback(ctx) // (nothing of theirs to keep, or the block failed)
	if err != nil {
		return "", nil, withCleanup(err, problems)
	}
	return tag, appendChangedParams(nil, all, before), nil
}

// errHoldPrepare is PostgreSQL's refusal to prepare a transaction that
// declared a cursor WITH HOLD.
func errHoldPrepare() error {
	return pgerr.New(pgerr.FeatureNotSupported, "cannot PREPARE a transaction that has created a cursor WITH HOLD").
		WithHint("Close the cursor before PREPARE TRANSACTION, or declare it without WITH HOLD.")
}
