package shards

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
)

// GIDPrefix starts the global id of every prepared transaction this package
// makes ("pgfleet_<op>_<random>_<node>"), so that a recovery task can find
// the ones a crashed coordinator left in pg_prepared_xacts.
const GIDPrefix = "pgfleet_"

// beginSQL opens a node's transaction with settings that make the text COPY
// format read back exactly what it wrote, whatever the caller's session has.
// pgfleet.internal lets pgfleet's own writes through the guard trigger on
// the default node's table of a distributed table.
const beginSQL = `BEGIN; SET LOCAL datestyle = 'ISO, MDY'; SET LOCAL intervalstyle = 'postgres';
SET LOCAL extra_float_digits = 3; SET LOCAL bytea_output = 'hex'; SET LOCAL pgfleet.internal = 'on'`

// opLockTimeout bounds each lock wait of catalog moves and DDL
// (create_distributed_table, undistribute_table, citus_add_node, DDL on
// catalog tables): their locks on several workers, taken while writes that
// span workers hold row locks, can form a deadlock across workers that no
// single PostgreSQL detects. It ends as 55P03 with a hint to retry.
const opLockTimeout = "SET LOCAL lock_timeout = '10s'"

// opBeginSQL opens the transactions of catalog moves.
const opBeginSQL = beginSQL + "; " + opLockTimeout

// cleanupTimeout bounds the rollbacks after a failure, which run even when
// the caller's context is done.
const cleanupTimeout = 30 * time.Second

// maxDecisionDelay is the longest a group may take from its first PREPARE
// TRANSACTION to its commit decision; a slower group aborts instead. It is
// far below the age at which recovery forgets decisions (an hour), so that
// an abort decision recovery made for a group cannot be forgotten while the
// group might still decide to commit.
const maxDecisionDelay = 10 * time.Minute

// Decider is what SettleDecision needs of the metadata store.
type Decider = decider

// decider records the decisions of distributed transactions durably, in the
// metadata database: a group's commit point is its commit decision, and
// recovery resolves what a crashed coordinator left prepared from it.
type decider interface {
	// Decide records the decision to commit base; metadata.ErrAborted if
	// recovery decided to abort it first.
	Decide(ctx context.Context, base string) error
	// Abort records the decision to abort base unless one is stored, and
	// returns the decision that stands.
	Abort(ctx context.Context, base string) (byte, error)
}

var _ decider = (*metadata.Store)(nil)

// nodeTx is one node's part of a distributed transaction.
type nodeTx struct {
	node     int32
	conn     *pgx.Conn
	gid      string
	prepared bool
	done     bool // committed, rolled back, or lost with its connection
}

// group is a transaction over several nodes, made atomic with two-phase
// commit: begin on each node as it is needed, prepare all, record the
// decision to commit in the metadata database, then commit all prepared; or
// roll everything back. Once the decision is recorded the group commits, and
// recovery commits what it leaves prepared; before, recovery may abort it
// (its decision wins by the table's primary key), and the group rolls back.
type group struct {
	// beginStmt opens each node's transaction (beginSQL unless set).
	beginStmt string
	base      string
	nodes     *nodes
	store     decider
	txs       []*nodeTx
	by        map[int32]*nodeTx
	// prepareStart is when the first PREPARE TRANSACTION was sent.
	prepareStart time.Time
	// decideStart is when the commit decision was sent (SettleDecision).
	decideStart time.Time
	// decided: the commit decision is recorded (by decide, or by the
	// caller's catalog change under metadata.WithDecision). From then on
	// nothing may roll a prepared transaction back.
	decided bool
	// inDoubt: the decision could not be recorded nor read; the prepared
	// transactions are left to recovery.
	inDoubt bool
}

func newGroup(op string, n *nodes, store decider) *group {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &group{base: GIDPrefix + op + "_" + hex.EncodeToString(b[:]), nodes: n, store: store, by: map[int32]*nodeTx{}}
}

// begin opens the node's transaction unless it is open already.
func (g *group) begin(ctx context.Context, node int32) (*nodeTx, error) {
	if tx := g.by[node]; tx != nil {
		return tx, nil
	}
	conn, err := g.nodes.conn(node)
	if err != nil {
		return nil, err
	}
	stmt := g.beginStmt
	if stmt == "" {
		stmt = beginSQL
	}
	if _, err := conn.Exec(ctx, stmt); err != nil {
		return nil, g.nodes.wrap(err, "cannot begin a transaction on node %s", g.nodes.describe(node))
	}
	tx := &nodeTx{node: node, conn: conn, gid: fmt.Sprintf("%s_%d", g.base, node)}
	g.txs = append(g.txs, tx)
	g.by[node] = tx
	return tx, nil
}

// prepare prepares every open transaction. On failure some may be prepared:
// the caller rolls the group back.
func (g *group) prepare(ctx context.Context) error {
	if g.prepareStart.IsZero() {
		g.prepareStart = time.Now()
	}
	for _, tx := range g.txs {
		if tx.done || tx.prepared {
			continue
		}
		tag, err := tx.conn.Exec(ctx, "PREPARE TRANSACTION '"+tx.gid+"'")
		if err != nil {
			tx.done = true // a failed PREPARE rolls the transaction back
			// A deferred constraint or trigger fails here: its error as
			// PostgreSQL gives it at COMMIT.
			return g.nodes.stmtErr(err, "cannot prepare the transaction on node %s", g.nodes.describe(tx.node))
		}
		if tag.String() != "PREPARE TRANSACTION" {
			// PREPARE of a transaction that had failed rolls it back.
			tx.done = true
			return pgerr.New(pgerr.InvalidTransactionState, "the transaction on node %s had failed and was rolled back (%s)",
				g.nodes.describe(tx.node), tag.String())
		}
		tx.prepared = true
	}
	return nil
}

// decide records the decision to commit: after it returns nil the group
// must commit. On error nothing is committed. Either the decision is to
// abort (recovery's, or this group's when the commit decision could not be
// recorded), and the caller rolls the group back; or the decision could not
// be learned at all, and the prepared transactions are left to recovery
// (inDoubt; rollback leaves them alone).
func (g *group) decide(ctx context.Context) error {
	if g.decided {
		return nil
	}
	if g.store == nil {
		return pgerr.New(pgerr.Internal, "shards: no metadata store to record the commit decision in")
	}
	if !g.prepareStart.IsZero() && time.Since(g.prepareStart) > maxDecisionDelay {
		// Recovery may have aborted it and forgotten that since: never
		// decide to commit. Without a decision recovery aborts it too.
		return pgerr.New("40001", "the distributed transaction took more than %s from PREPARE to its commit decision and was rolled back",
			maxDecisionDelay).WithHint("Retry the statement.")
	}
	g.decideStart = time.Now()
	err := g.store.Decide(ctx, g.base)
	if err == nil {
		g.decided = true
		return nil
	}
	return g.settle(ctx, err)
}

// settle learns the decision after recording the commit decision failed
// with cause (Decide, or a catalog change under metadata.WithDecision),
// which may have committed with its answer lost. It returns nil if the
// commit decision stands after all (g.decided is set), cause if the
// decision is to abort, and an error saying the outcome is left to
// recovery if it cannot learn it (g.inDoubt is set).
func (g *group) settle(ctx context.Context, cause error) error {
	var refused *pgerr.Error
	if errors.As(cause, &refused) {
		return cause // the store refused before committing anything (ErrAborted, say)
	}
	since := g.decideStart
	if since.IsZero() {
		since = g.prepareStart // a catalog change's decision: attempted after it
	}
	d, err := SettleDecision(ctx, g.store, g.base, since)
	if err == nil {
		if d == metadata.CommitDecision {
			g.decided = true
			return nil
		}
		e := toPgErr(cause)
		e.Message = "cannot record the commit decision, so the distributed transaction was rolled back: " + e.Message
		return e
	}
	var left []string
	for _, tx := range g.txs {
		if tx.prepared && !tx.done {
			tx.done = true
			left = append(left, fmt.Sprintf("'%s' on node %s", tx.gid, g.nodes.describe(tx.node)))
		}
	}
	g.inDoubt = true
	e := pgerr.New(pgerr.ConnectionFailure,
		"the outcome of the distributed transaction is unknown: its commit decision could not be recorded (%v) nor read (%v)",
		cause, err)
	e.Detail = "Prepared transactions left: " + strings.Join(left, ", ") + "."
	e.Hint = "pgfleet's recovery commits or rolls them back once the metadata database answers."
	return e
}

// ForgetCommitAge is the youngest age at which recovery forgets a commit
// decision that no prepared transaction references any more
// (metadata.Store.ForgetDecisions), and ForgetAbortAge that of an abort
// decision, which must outlive every attempt to decide the other way
// (maxDecisionDelay, and a coordinator stalled between its check and its
// insert).
const (
	ForgetCommitAge = 5 * time.Minute
	ForgetAbortAge  = time.Hour
)

// settleTrust is how long after a commit decision was attempted an abort
// answer to SettleDecision is trusted: until then recovery cannot have
// forgotten a commit decision the attempt recorded (ForgetCommitAge, with a
// margin for clock rates).
const settleTrust = ForgetCommitAge - time.Minute

// settleAttempt bounds one lookup of SettleDecision.
const settleAttempt = 10 * time.Second

// SettleDecision learns the decision of the distributed transaction base
// after recording its commit decision, attempted at since, failed in a way
// that may have recorded it (a lost answer, an expired context): it records
// an abort decision unless one is stored and returns the decision that
// stands. Every lookup runs under a fresh context, bounded by
// cleanupTimeout from now, not from since: after a stall of the
// coordinator the caller's context has expired, but the decision is still
// there to read. It fails when the metadata database does not answer, and
// when the answer is abort but came so late that a commit decision the
// attempt recorded may have been committed by recovery and forgotten since.
func SettleDecision(ctx context.Context, store decider, base string, since time.Time) (byte, error) {
	ctx = context.WithoutCancel(ctx)
	deadline := time.Now().Add(cleanupTimeout)
	for {
		actx, cancel := context.WithTimeout(ctx, settleAttempt)
		d, err := store.Abort(actx, base)
		cancel()
		if err == nil {
			if d != metadata.CommitDecision && time.Since(since) > settleTrust {
				return 0, fmt.Errorf("the decision was read %v after the commit decision was attempted, too late to tell an abort from a commit already completed and forgotten",
					time.Since(since).Round(time.Second))
			}
			return d, nil
		}
		if time.Until(deadline) < time.Second {
			return 0, err
		}
		time.Sleep(time.Second)
	}
}

// sleep waits for d or until ctx is done, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// commit records the commit decision unless it is recorded already, and
// commits every prepared transaction. If the decision fails, the group is
// rolled back (or left to recovery when the outcome is unknown) and nothing
// is committed. After the decision it tries every node; the error lists the
// nodes where COMMIT PREPARED failed, whose prepared transactions recovery
// commits.
func (g *group) commit(ctx context.Context) error {
	if !g.decided && slices.ContainsFunc(g.txs, func(tx *nodeTx) bool { return tx.prepared && !tx.done }) {
		if err := g.decide(ctx); err != nil {
			return withProblems(err, g.rollback(ctx))
		}
	}
	if h := testHookBeforeCommit; h != nil && g.decided {
		h(g.base)
	}
	var failed []string
	var first error
	for _, tx := range g.txs {
		if tx.done || !tx.prepared {
			continue
		}
		if err := commitPrepared(ctx, tx); err != nil {
			failed = append(failed, fmt.Sprintf("COMMIT PREPARED '%s' on node %s", tx.gid, g.nodes.describe(tx.node)))
			if first == nil {
				first = err
			}
			continue
		}
		tx.done = true
	}
	if first == nil {
		return nil
	}
	e := g.nodes.wrap(first, "the change is committed, but %s failed", failed[0])
	e.Hint = "pgfleet's recovery completes the commit within seconds of the node answering again; to do it now, run " +
		strings.Join(failed, "; ") + "."
	return e
}

// testHookBeforeCommit runs between a group's commit decision and its
// COMMIT PREPAREDs; nil but in tests (SetTestHookBeforeCommit).
var testHookBeforeCommit func(base string)

// SetTestHookBeforeCommit makes f run between every group's commit decision
// and its COMMIT PREPAREDs, for tests that put a fault there (a worker
// restarting); it returns a function that removes it. Not for concurrent
// use with running groups.
func SetTestHookBeforeCommit(f func(base string)) (restore func()) {
	old := testHookBeforeCommit
	testHookBeforeCommit = f
	return func() { testHookBeforeCommit = old }
}

// CommitRetryWindow is how long a coordinator keeps retrying a COMMIT
// PREPARED of a decided transaction whose worker does not answer
// (restarting, its connection lost) before leaving it to recovery; its row
// locks are held until it commits, so it is retried as soon as the worker
// answers again.
const CommitRetryWindow = 30 * time.Second

// CommitBackoff is the longest pause between two attempts of a COMMIT
// PREPARED retried; the first pauses are shorter.
const CommitBackoff = 200 * time.Millisecond

// commitPrepared commits tx's prepared transaction, whose commit is
// decided, retrying on a new connection with the same configuration while
// the node does not answer, for up to CommitRetryWindow. A prepared
// transaction that is gone was committed by recovery, from the decision.
func commitPrepared(ctx context.Context, tx *nodeTx) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CommitRetryWindow)
	defer cancel()
	sql := "COMMIT PREPARED '" + tx.gid + "'"
	conn := tx.conn
	var fresh *pgx.Conn
	defer func() {
		if fresh != nil {
			_ = fresh.Close(context.Background())
		}
	}()
	pause := 10 * time.Millisecond
	var err error
	for {
		if conn != nil {
			if _, err = conn.Exec(ctx, sql); err == nil {
				tx.done = true
				return nil
			}
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == pgerr.UndefinedObject {
				tx.done = true // gone: recovery committed it, from the decision
				return nil
			}
		}
		if !sleep(ctx, pause) {
			if err == nil {
				err = ctx.Err()
			}
			return err
		}
		pause = min(2*pause, CommitBackoff)
		if conn == nil || conn.IsClosed() {
			// Lost (the node restarting, say): a new connection, as the
			// same user to the same database, may commit it.
			if fresh != nil {
				_ = fresh.Close(context.Background())
			}
			dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
			c, derr := pgx.ConnectConfig(dctx, tx.conn.Config())
			dcancel()
			fresh, conn = c, c
			if derr != nil {
				fresh, conn, err = nil, nil, derr
			}
		}
	}
}

// rollback rolls back every transaction not committed yet, prepared or not,
// best effort and even when ctx is done. It returns what it could not roll
// back, for the error's detail.
func (g *group) rollback(ctx context.Context) []string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	var problems []string
	for i := len(g.txs) - 1; i >= 0; i-- {
		tx := g.txs[i]
		if tx.done || (g.decided && tx.prepared) {
			continue // decided to commit: recovery commits what is left
		}
		tx.done = true
		if tx.conn.IsClosed() {
			if tx.prepared {
				problems = append(problems, fmt.Sprintf("prepared transaction '%s' remains on node %s (connection lost) until recovery rolls it back",
					tx.gid, g.nodes.describe(tx.node)))
			}
			continue // an open transaction ends with its connection
		}
		sql := "ROLLBACK"
		if tx.prepared {
			sql = "ROLLBACK PREPARED '" + tx.gid + "'"
		}
		if _, err := tx.conn.Exec(ctx, sql); err != nil {
			var pe *pgconn.PgError
			if tx.prepared && errors.As(err, &pe) && pe.Code == pgerr.UndefinedObject {
				continue // recovery rolled it back already
			}
			if tx.prepared {
				problems = append(problems, fmt.Sprintf("prepared transaction '%s' remains on node %s until recovery rolls it back: %v",
					tx.gid, g.nodes.describe(tx.node), err))
			} else if !tx.conn.IsClosed() {
				problems = append(problems, fmt.Sprintf("cannot roll back on node %s: %v", g.nodes.describe(tx.node), err))
			}
		}
	}
	return problems
}

// withProblems returns err with what a cleanup could not undo in its
// detail.
func withProblems(err error, problems []string) error {
	if len(problems) == 0 {
		return err
	}
	e := toPgErr(err)
	if e.Detail != "" {
		e.Detail += "\n"
	}
	e.Detail += "Cleanup was incomplete: " + strings.Join(problems, "; ") + "."
	return e
}

// nodes is the connections an operation may use and what it knows of the
// nodes, for messages.
type nodes struct {
	conns map[int32]*pgx.Conn
	addrs map[int32]string
}

func (n *nodes) conn(id int32) (*pgx.Conn, error) {
	c := n.conns[id]
	if c == nil || c.IsClosed() {
		return nil, pgerr.New(pgerr.ConnectionFailure, "no open connection to node %s", n.describe(id))
	}
	return c, nil
}

func (n *nodes) describe(id int32) string {
	if a := n.addrs[id]; a != "" {
		return fmt.Sprintf("%d (%s)", id, a)
	}
	return fmt.Sprint(id)
}

// wrap turns err into a *pgerr.Error whose message starts with what failed
// where, keeping a worker's SQLSTATE, detail and hint.
func (n *nodes) wrap(err error, format string, args ...any) *pgerr.Error {
	e := toPgErr(err)
	e.Message = fmt.Sprintf(format, args...) + ": " + e.Message
	return e
}

// stmtErr is the error of a client's statement that ran on a worker: a
// worker's own error as PostgreSQL gives it (shard names are mapped back
// for the client), a failure to reach the worker with where it happened.
func (n *nodes) stmtErr(err error, format string, args ...any) *pgerr.Error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return toPgErr(err)
	}
	return n.wrap(err, format, args...)
}

// toPgErr returns a copy of err as a *pgerr.Error: pgfleet's own errors and
// workers' errors keep their SQLSTATE, anything else is a connection failure
// (or a cancellation), as errors talking to a worker are.
func toPgErr(err error) *pgerr.Error {
	var fe *pgerr.Error
	if errors.As(err, &fe) {
		e := *fe
		return &e
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pgerr.FromWorker(pe)
	}
	code := pgerr.ConnectionFailure
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		code = pgerr.QueryCanceled
	}
	return &pgerr.Error{Severity: "ERROR", Code: code, Message: err.Error()}
}
