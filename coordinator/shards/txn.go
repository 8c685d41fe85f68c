package shards

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgerr"
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

// cleanupTimeout bounds the rollbacks after a failure, which run even when
// the caller's context is done.
const cleanupTimeout = 30 * time.Second

// nodeTx is one node's part of a distributed transaction.
type nodeTx struct {
	node     int32
	conn     *pgx.Conn
	gid      string
	prepared bool
	done     bool // committed, rolled back, or lost with its connection
}

// group is a transaction over several nodes, made atomic with two-phase
// commit: begin on each node as it is needed, prepare all, then commit all
// prepared, or roll everything back.
type group struct {
	// beginStmt opens each node's transaction (beginSQL unless set).
	beginStmt string
	base      string
	nodes     *nodes
	txs       []*nodeTx
	by        map[int32]*nodeTx
}

func newGroup(op string, n *nodes) *group {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &group{base: GIDPrefix + op + "_" + hex.EncodeToString(b[:]), nodes: n, by: map[int32]*nodeTx{}}
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
	for _, tx := range g.txs {
		if tx.done || tx.prepared {
			continue
		}
		tag, err := tx.conn.Exec(ctx, "PREPARE TRANSACTION '"+tx.gid+"'")
		if err != nil {
			tx.done = true // a failed PREPARE rolls the transaction back
			return g.nodes.wrap(err, "cannot prepare the transaction on node %s", g.nodes.describe(tx.node))
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

// commit commits every prepared transaction. It tries them all; the error
// lists the nodes where COMMIT PREPARED failed, whose prepared transactions
// remain to be committed by hand or by recovery.
func (g *group) commit(ctx context.Context) error {
	var failed []string
	var first error
	for _, tx := range g.txs {
		if tx.done || !tx.prepared {
			continue
		}
		if _, err := tx.conn.Exec(ctx, "COMMIT PREPARED '"+tx.gid+"'"); err != nil {
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
	e := g.nodes.wrap(first, "the change is committed in the catalog, but %s failed", failed[0])
	e.Hint = "Run " + strings.Join(failed, "; ") + "."
	return e
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
		if tx.done {
			continue
		}
		tx.done = true
		if tx.conn.IsClosed() {
			if tx.prepared {
				problems = append(problems, fmt.Sprintf("prepared transaction '%s' remains on node %s (connection lost)",
					tx.gid, g.nodes.describe(tx.node)))
			}
			continue // an open transaction ends with its connection
		}
		sql := "ROLLBACK"
		if tx.prepared {
			sql = "ROLLBACK PREPARED '" + tx.gid + "'"
		}
		if _, err := tx.conn.Exec(ctx, sql); err != nil {
			if tx.prepared {
				problems = append(problems, fmt.Sprintf("prepared transaction '%s' remains on node %s: %v",
					tx.gid, g.nodes.describe(tx.node), err))
			} else if !tx.conn.IsClosed() {
				problems = append(problems, fmt.Sprintf("cannot roll back on node %s: %v", g.nodes.describe(tx.node), err))
			}
		}
	}
	return problems
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
		return &pgerr.Error{Severity: "ERROR", Code: pe.Code, Message: pe.Message, Detail: pe.Detail, Hint: pe.Hint}
	}
	code := pgerr.ConnectionFailure
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		code = pgerr.QueryCanceled
	}
	return &pgerr.Error{Severity: "ERROR", Code: code, Message: err.Error()}
}
