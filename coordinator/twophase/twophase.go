// Package twophase is pgfleet's one two-phase commit: a transaction over
// several workers made atomic by PREPARE TRANSACTION on each, a commit
// decision recorded durably in the metadata database, and COMMIT PREPARED
// on each; or everything rolled back. Client transaction blocks that span
// workers and the coordinator's own writes over several workers (COPY,
// multi-row INSERT, DDL, reference-table writes, the Citus functions) run
// their commit through it, each over its own kind of connection (Conn).
//
// A group's decision may instead be a record its last part writes and
// commits in one phase (record.go).
//
// Once the commit decision is recorded the group commits, and recovery
// commits what it leaves prepared; before, recovery may abort it (its
// decision wins by the decisions table's primary key), and the group rolls
// back.
package twophase

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
)

// GIDPrefix starts the global id of every prepared transaction pgfleet
// makes ("pgfleet_<op>_<random>_<node>"), so that recovery can find the
// ones a crashed coordinator left in pg_prepared_xacts.
const GIDPrefix = "pgfleet_"

// MaxDecisionDelay is the longest a group may take from its first PREPARE
// TRANSACTION to its commit decision; a slower group aborts instead. It is
// far below the age at which recovery forgets decisions (an hour), so that
// an abort decision recovery made for a group cannot be forgotten while the
// group might still decide to commit.
const MaxDecisionDelay = 10 * time.Minute

// CleanupTimeout bounds the rollbacks after a failure and the settling of
// a decision, which run even when the caller's context is done.
const CleanupTimeout = 30 * time.Second

// CommitRetryWindow is how long a COMMIT PREPARED of a decided transaction
// whose worker does not answer (restarting, its connection lost) is retried
// before it is left to recovery; its row locks are held until it commits,
// so it is retried as soon as the worker answers again.
const CommitRetryWindow = 30 * time.Second

// CommitBackoff is the longest pause between two attempts of a COMMIT
// PREPARED retried; the first pauses are shorter.
const CommitBackoff = 200 * time.Millisecond

// ForgetCommitAge is the youngest age at which recovery forgets a commit
// decision that no prepared transaction references any more
// (metadata.Store.ForgetDecisions), and ForgetAbortAge that of an abort
// decision, which must outlive every attempt to decide the other way
// (MaxDecisionDelay, and a coordinator stalled between its check and its
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

// Decider records the decisions of distributed transactions durably, in the
// metadata database: a group's commit point is its commit decision, and
// recovery resolves what a crashed coordinator left prepared from it.
type Decider interface {
	// Decide records the decision to commit base; metadata.ErrAborted if
	// recovery decided to abort it first.
	Decide(ctx context.Context, base string) error
	// Abort records the decision to abort base unless one is stored, and
	// returns the decision that stands.
	Abort(ctx context.Context, base string) (byte, error)
}

var _ Decider = (*metadata.Store)(nil)

// Conn is one worker's connection in a group, open in a transaction.
type Conn interface {
	// Exec runs one statement of the commit protocol (PREPARE
	// TRANSACTION, COMMIT PREPARED, ROLLBACK [PREPARED]) and returns its
	// command tag. A worker's error is a *pgconn.PgError; any other error
	// means the connection is lost.
	Exec(ctx context.Context, sql string) (string, error)
	// Lost reports whether the connection is known to be lost.
	Lost() bool
	// Redial replaces a lost connection with a new one to the same
	// worker, database and user, to commit a prepared transaction.
	Redial(ctx context.Context) error
}

// Part is one worker's share of a group.
type Part struct {
	Node     int32
	Where    string // the worker, for messages: "node 1 (host:port)", "worker host:port"
	GID      string
	Conn     Conn
	Prepared bool
	// Done: committed, rolled back, or left (lost, or to recovery).
	Done bool
}

// Group is a transaction over several workers.
type Group struct {
	Base  string
	Store Decider
	Parts []*Part
	// Decided: the commit decision is recorded (by Decide, or by the
	// caller's catalog change under metadata.WithDecision, which sets it).
	// From then on nothing may roll a prepared transaction back.
	Decided bool
	// InDoubt: the decision could not be recorded nor read; the prepared
	// transactions are left to recovery.
	InDoubt bool
	// prepareStart is when the first PREPARE TRANSACTION was sent,
	// decideStart when the commit decision was (SettleDecision).
	prepareStart, decideStart time.Time
	// AfterDecide sees the answer to Decide's commit decision (tests put
	// faults there); BeforeCommit runs between the decision and the
	// COMMIT PREPAREDs.
	AfterDecide  func(ctx context.Context, base string, err error) error
	BeforeCommit func(base string)
	// CommitFirst, when not 0, is the node whose part is committed before
	// the others' (a shard move's target: its new tables are visible
	// before the source's drop lets waiting statements fail there).
	CommitFirst int32
	// BeforeDecide runs before the commit decision is recorded (tests).
	BeforeDecide func(base string)
	// Last, in a group made by NewRecorded, is the part that is not
	// prepared: it commits with the group's record (record.go).
	Last   *Part
	record Record
}

// New starts a group for an operation (a word in its prepared
// transactions' names).
func New(op string, store Decider) *Group {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &Group{Base: GIDPrefix + op + "_" + hex.EncodeToString(b[:]), Store: store}
}

// Join adds a worker's transaction to the group.
func (g *Group) Join(node int32, where string, c Conn) *Part {
	p := &Part{Node: node, Where: where, GID: fmt.Sprintf("%s_%d", g.Base, node), Conn: c}
	g.Parts = append(g.Parts, p)
	return p
}

// PrepareError is a part's failure to prepare: the worker's own error (a
// deferred constraint, say), a transaction that had failed (PREPARE rolled
// it back: Err nil), or a lost connection (Lost). The part is Done: a
// failed PREPARE ends its transaction.
type PrepareError struct {
	Part *Part
	Err  error
	Lost bool
}

func (e *PrepareError) Error() string {
	switch {
	case e.Lost:
		return fmt.Sprintf("lost connection to %s during PREPARE TRANSACTION: %v", e.Part.Where, e.Err)
	case e.Err == nil:
		return fmt.Sprintf("the transaction on %s had failed and was rolled back", e.Part.Where)
	}
	return e.Err.Error()
}

func (e *PrepareError) Unwrap() error { return e.Err }

// Prepare prepares every part not prepared yet but the Last, all at once (each on its
// own connection, so the phase costs one round trip, not one per worker).
// On failure (the *PrepareError of the first part, in Parts' order, that
// failed) some may be prepared: the caller rolls the group back.
func (g *Group) Prepare(ctx context.Context) error {
	if g.prepareStart.IsZero() {
		g.prepareStart = time.Now()
	}
	errs := make([]error, len(g.Parts))
	g.each(func(i int, p *Part) bool { return !p.Done && !p.Prepared && p != g.Last }, func(i int, p *Part) {
		tag, err := p.Conn.Exec(ctx, "PREPARE TRANSACTION '"+p.GID+"'")
		switch {
		case err != nil:
			p.Done = true
			var pe *pgconn.PgError
			errs[i] = &PrepareError{Part: p, Err: err, Lost: !errors.As(err, &pe)}
		case tag != "PREPARE TRANSACTION":
			p.Done = true // PREPARE of a transaction that had failed rolls it back
			errs[i] = &PrepareError{Part: p}
		default:
			p.Prepared = true
		}
	})
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// each runs fn for the parts that want says, concurrently when there are
// several (each part has its own connection), and waits for them all.
func (g *Group) each(want func(int, *Part) bool, fn func(int, *Part)) {
	var picked []int
	for i, p := range g.Parts {
		if want(i, p) {
			picked = append(picked, i)
		}
	}
	if len(picked) == 1 {
		fn(picked[0], g.Parts[picked[0]])
		return
	}
	var wg sync.WaitGroup
	for _, i := range picked {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(i, g.Parts[i])
		}()
	}
	wg.Wait()
}

// Decide records the decision to commit: after it returns nil the group
// must commit. On error nothing is committed. Either the decision is to
// abort (recovery's, or this group's when the commit decision could not be
// recorded), and the caller rolls the group back; or the decision could not
// be learned at all, and the prepared transactions are left to recovery
// (InDoubt; Rollback leaves them alone).
func (g *Group) Decide(ctx context.Context) error {
	if g.Decided {
		return nil
	}
	if g.Store == nil {
		return pgerr.New(pgerr.Internal, "no metadata store to record the commit decision in")
	}
	if err := g.startDecision(); err != nil {
		return err
	}
	err := g.Store.Decide(ctx, g.Base)
	if g.AfterDecide != nil {
		err = g.AfterDecide(ctx, g.Base, err)
	}
	if err == nil {
		g.Decided = true
		return nil
	}
	return g.Settle(ctx, err)
}

// startDecision is called right before the commit decision is recorded
// (by Decide, or by the last part's record).
func (g *Group) startDecision() error {
	if !g.prepareStart.IsZero() && time.Since(g.prepareStart) > MaxDecisionDelay {
		// Recovery may have aborted it and forgotten that since: never
		// decide to commit. Without a decision recovery aborts it too.
		return pgerr.New("40001", "the distributed transaction took more than %s from PREPARE to its commit decision and was rolled back",
			MaxDecisionDelay).WithHint("Retry the transaction.")
	}
	if g.BeforeDecide != nil {
		g.BeforeDecide(g.Base)
	}
	g.decideStart = time.Now()
	return nil
}

// Settle learns the decision after recording the commit decision failed
// with cause (Decide, or a catalog change under metadata.WithDecision),
// which may have committed with its answer lost. It returns nil if the
// commit decision stands after all (Decided is set), cause if the decision
// is to abort, and an error saying the outcome is left to recovery if it
// cannot learn it (InDoubt is set).
func (g *Group) Settle(ctx context.Context, cause error) error {
	var refused *pgerr.Error
	if errors.As(cause, &refused) {
		return cause // the store refused before committing anything (ErrAborted, say)
	}
	since := g.decideStart
	if since.IsZero() {
		since = g.prepareStart // a catalog change's decision: attempted after it
	}
	d, err := SettleDecision(ctx, g.Store, g.Base, since)
	if err == nil {
		if d == metadata.CommitDecision {
			g.Decided = true
			return nil
		}
		e := ToPgErr(cause)
		e.Message = "cannot record the commit decision, so the distributed transaction was rolled back: " + e.Message
		return e
	}
	var left []string
	for _, p := range g.Parts {
		if p.Prepared && !p.Done {
			p.Done = true
			left = append(left, fmt.Sprintf("'%s' on %s", p.GID, p.Where))
		}
	}
	g.InDoubt = true
	e := pgerr.New(pgerr.ConnectionFailure,
		"the outcome of the distributed transaction is unknown: its commit decision could not be recorded (%v) nor read (%v)",
		cause, err)
	e.Detail = "Prepared transactions left: " + strings.Join(left, ", ") + "."
	e.Hint = "pgfleet's recovery commits or rolls them back once the metadata database answers."
	return e
}

// SettleDecision learns the decision of the distributed transaction base
// after recording its commit decision, attempted at since, failed in a way
// that may have recorded it (a lost answer, an expired context): it records
// an abort decision unless one is stored and returns the decision that
// stands. Every lookup runs under a fresh context, bounded by
// CleanupTimeout from now, not from since: after a stall of the
// coordinator the caller's context has expired, but the decision is still
// there to read. It fails when the metadata database does not answer, and
// when the answer is abort but came so late that a commit decision the
// attempt recorded may have been committed by recovery and forgotten since.
func SettleDecision(ctx context.Context, store Decider, base string, since time.Time) (byte, error) {
	ctx = context.WithoutCancel(ctx)
	deadline := time.Now().Add(CleanupTimeout)
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

// CommitFailure is a part whose COMMIT PREPARED failed after the decision:
// recovery commits it.
type CommitFailure struct {
	Part *Part
	Err  error
}

// Commit records the commit decision unless it is recorded already (in
// the metadata database, or with the last part's record and commit; on
// failure the caller rolls back, or leaves the group to recovery when
// InDoubt), then commits every prepared part (all at once), retrying each whose worker
// does not answer for up to CommitRetryWindow. The decision is the commit:
// the parts whose COMMIT PREPARED still failed are returned, for recovery
// to complete (the caller tells the client the transaction is committed).
func (g *Group) Commit(ctx context.Context) ([]CommitFailure, error) {
	if g.Last != nil && !g.Last.Done && !g.Decided {
		if err := g.commitLast(ctx); err != nil {
			return nil, err
		}
	}
	for _, p := range g.Parts {
		if p.Prepared && !p.Done && !g.Decided {
			if err := g.Decide(ctx); err != nil {
				return nil, err
			}
			break
		}
	}
	if g.BeforeCommit != nil && g.Decided {
		g.BeforeCommit(g.Base)
	}
	// All at once, as Prepare (CommitFirst's part before).
	errs := make([]error, len(g.Parts))
	commit := func(i int, p *Part) {
		if errs[i] = commitPrepared(ctx, p); errs[i] == nil {
			p.Done = true
		}
	}
	if g.CommitFirst != 0 {
		g.each(func(i int, p *Part) bool { return !p.Done && p.Prepared && p.Node == g.CommitFirst }, commit)
	}
	g.each(func(i int, p *Part) bool { return !p.Done && p.Prepared && errs[i] == nil }, commit)
	var failed []CommitFailure
	for i, err := range errs {
		if err != nil {
			failed = append(failed, CommitFailure{Part: g.Parts[i], Err: err})
		}
	}
	return failed, nil
}

// commitPrepared commits p's prepared transaction, whose commit is
// decided, on a new connection (Redial) while the worker does not answer,
// for up to CommitRetryWindow. A prepared transaction that is gone was
// committed by recovery, from the decision.
func commitPrepared(ctx context.Context, p *Part) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CommitRetryWindow)
	defer cancel()
	sql := "COMMIT PREPARED '" + p.GID + "'"
	pause := 10 * time.Millisecond
	var err error
	for {
		if !p.Conn.Lost() {
			if _, err = p.Conn.Exec(ctx, sql); err == nil {
				return nil
			}
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == pgerr.UndefinedObject {
				return nil // gone: recovery committed it, from the decision
			}
		}
		if !Sleep(ctx, pause) {
			if err == nil {
				err = ctx.Err()
			}
			return err
		}
		pause = min(2*pause, CommitBackoff)
		if p.Conn.Lost() {
			dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
			if derr := p.Conn.Redial(dctx); derr != nil {
				err = derr
			}
			dcancel()
		}
	}
}

// Sleep waits for d or until ctx is done, and reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Rollback rolls back every part not committed yet, prepared or not, in
// reverse order, best effort and even when ctx is done. Prepared parts of
// a decided group are left alone (recovery commits them). It returns what
// it could not roll back, for the error's detail.
func (g *Group) Rollback(ctx context.Context) []string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
	defer cancel()
	var problems []string
	for i := len(g.Parts) - 1; i >= 0; i-- {
		p := g.Parts[i]
		if p.Done || (g.Decided && p.Prepared) {
			continue
		}
		p.Done = true
		if p.Conn.Lost() {
			if p.Prepared {
				problems = append(problems, fmt.Sprintf("prepared transaction '%s' remains on %s (connection lost) until recovery rolls it back",
					p.GID, p.Where))
			}
			continue // an open transaction ends with its connection
		}
		sql := "ROLLBACK"
		if p.Prepared {
			sql = "ROLLBACK PREPARED '" + p.GID + "'"
		}
		if _, err := p.Conn.Exec(ctx, sql); err != nil {
			var pe *pgconn.PgError
			if p.Prepared && errors.As(err, &pe) && pe.Code == pgerr.UndefinedObject {
				continue // recovery rolled it back already
			}
			if p.Prepared {
				problems = append(problems, fmt.Sprintf("prepared transaction '%s' remains on %s until recovery rolls it back: %v",
					p.GID, p.Where, err))
			} else if !p.Conn.Lost() {
				problems = append(problems, fmt.Sprintf("cannot roll back on %s: %v", p.Where, err))
			}
		}
	}
	return problems
}

// WithProblems returns err with what a cleanup could not undo in its
// detail.
func WithProblems(err error, problems []string) error {
	if len(problems) == 0 {
		return err
	}
	e := ToPgErr(err)
	if e.Detail != "" {
		e.Detail += "\n"
	}
	e.Detail += "Cleanup was incomplete: " + strings.Join(problems, "; ") + "."
	return e
}

// ToPgErr returns a copy of err as a *pgerr.Error: pgfleet's own errors and
// workers' errors keep their SQLSTATE, anything else is a connection failure
// (or a cancellation), as errors talking to a worker are.
func ToPgErr(err error) *pgerr.Error {
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
