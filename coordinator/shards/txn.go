package shards

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/coordinator/twophase"
	"github.com/pgfleet/pgfleet/internal/pgerr"
)

// GIDPrefix starts the global id of every prepared transaction pgfleet
// makes (twophase.GIDPrefix).
const GIDPrefix = twophase.GIDPrefix

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
const cleanupTimeout = twophase.CleanupTimeout

// Decider is what a group needs of the metadata store to record its
// decision (twophase.Decider).
type Decider = twophase.Decider

// nodeTx is one node's part of a distributed transaction.
type nodeTx struct {
	node int32
	conn *pgx.Conn
	part *twophase.Part
}

// group is a transaction over several nodes on the operation's
// connections, made atomic by the one two-phase commit (twophase.Group).
type group struct {
	// beginStmt opens each node's transaction (beginSQL unless set).
	beginStmt string
	// inClient: the connections are a client's transaction block's; the
	// group begins, prepares, commits and rolls back nothing (the
	// client's COMMIT or ROLLBACK does).
	inClient bool
	nodes    *nodes
	tp       *twophase.Group
	by       map[int32]*nodeTx
}

func newGroup(op string, n *nodes, store Decider) *group {
	g := &group{nodes: n, tp: twophase.New(op, store), by: map[int32]*nodeTx{}}
	g.tp.BeforeCommit = func(base string) {
		if h := testHookBeforeCommit; h != nil {
			h(base)
		}
	}
	return g
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
	if g.inClient {
		tx := &nodeTx{node: node, conn: conn}
		g.by[node] = tx
		return tx, nil
	}
	stmt := g.beginStmt
	if stmt == "" {
		stmt = beginSQL
	}
	if _, err := conn.Exec(ctx, stmt); err != nil {
		return nil, g.nodes.wrap(err, "cannot begin a transaction on node %s", g.nodes.describe(node))
	}
	tx := &nodeTx{node: node, conn: conn, part: g.tp.Join(node, "node "+g.nodes.describe(node), &pgxConn{conn: conn})}
	g.by[node] = tx
	return tx, nil
}

// prepare prepares every open transaction. On failure some may be prepared:
// the caller rolls the group back.
func (g *group) prepare(ctx context.Context) error {
	if g.inClient {
		return nil
	}
	err := g.tp.Prepare(ctx)
	var pe *twophase.PrepareError
	if !errors.As(err, &pe) {
		return err
	}
	if pe.Err == nil {
		return pgerr.New(pgerr.InvalidTransactionState, "the transaction on node %s had failed and was rolled back",
			g.nodes.describe(pe.Part.Node))
	}
	// A deferred constraint or trigger fails here: its error as
	// PostgreSQL gives it at COMMIT.
	return g.nodes.stmtErr(pe.Err, "cannot prepare the transaction on node %s", g.nodes.describe(pe.Part.Node))
}

// decide records the decision to commit (twophase.Group.Decide).
func (g *group) decide(ctx context.Context) error { return g.tp.Decide(ctx) }

// settle learns the decision after a catalog change that carried it failed
// (twophase.Group.Settle).
func (g *group) settle(ctx context.Context, cause error) error { return g.tp.Settle(ctx, cause) }

// commit records the commit decision unless it is recorded already, and
// commits every prepared transaction. If the decision fails, the group is
// rolled back (or left to recovery when the outcome is unknown) and nothing
// is committed. After the decision it tries every node; the error lists the
// nodes where COMMIT PREPARED failed, whose prepared transactions recovery
// commits.
func (g *group) commit(ctx context.Context) error {
	if g.inClient {
		return nil
	}
	failed, err := g.tp.Commit(ctx)
	for _, tx := range g.by {
		tx.part.Conn.(*pgxConn).closeFresh()
	}
	if err != nil {
		return twophase.WithProblems(err, g.rollback(ctx))
	}
	if len(failed) == 0 {
		return nil
	}
	var what []string
	for _, f := range failed {
		what = append(what, fmt.Sprintf("COMMIT PREPARED '%s' on node %s", f.Part.GID, g.nodes.describe(f.Part.Node)))
	}
	e := g.nodes.wrap(failed[0].Err, "the change is committed, but %s failed", what[0])
	e.Hint = "pgfleet's recovery completes the commit within seconds of the node answering again; to do it now, run " +
		strings.Join(what, "; ") + "."
	return e
}

// rollback rolls back every transaction not committed yet
// (twophase.Group.Rollback) and returns what it could not roll back.
func (g *group) rollback(ctx context.Context) []string {
	if g.inClient {
		return nil
	}
	return g.tp.Rollback(ctx)
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

// pgxConn is a node's connection of an operation as a two-phase commit
// participant; a lost one is replaced by a new connection with the same
// configuration (closed when the commit is over).
type pgxConn struct {
	conn  *pgx.Conn
	fresh *pgx.Conn
}

func (c *pgxConn) cur() *pgx.Conn {
	if c.fresh != nil {
		return c.fresh
	}
	return c.conn
}

func (c *pgxConn) Exec(ctx context.Context, sql string) (string, error) {
	tag, err := c.cur().Exec(ctx, sql)
	return tag.String(), err
}

func (c *pgxConn) Lost() bool { return c.cur().IsClosed() }

func (c *pgxConn) Redial(ctx context.Context) error {
	c.closeFresh()
	fresh, err := pgx.ConnectConfig(ctx, c.conn.Config())
	if err != nil {
		return err
	}
	c.fresh = fresh
	return nil
}

func (c *pgxConn) closeFresh() {
	if c.fresh != nil {
		_ = c.fresh.Close(context.Background())
		c.fresh = nil
	}
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
	e := twophase.ToPgErr(err)
	e.Message = fmt.Sprintf(format, args...) + ": " + e.Message
	return e
}

// stmtErr is the error of a client's statement that ran on a worker: a
// worker's own error as PostgreSQL gives it (shard names are mapped back
// for the client), a failure to reach the worker with where it happened.
func (n *nodes) stmtErr(err error, format string, args ...any) *pgerr.Error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return twophase.ToPgErr(err)
	}
	return n.wrap(err, format, args...)
}
