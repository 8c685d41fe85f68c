package coordinator

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	pg_query "github.com/pganalyze/pg_query_go/v5"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/executor"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/internal/wire"
	"github.com/pgfleet/pgfleet/planner"
	"github.com/pgfleet/pgfleet/pooling"
)

// copyOut runs COPY of a distributed table TO STDOUT (planner.CopyOut) on
// pooled connections in the session's settings (executor.CopyOut), after
// PostgreSQL's verdict on the statement. Inside a transaction block, whose
// writes the workers' other connections would not see, the block runs the
// COPY's SELECT and the coordinator writes the rows (copyMerged).
func (ss *session) copyOut(p *planner.Plan, x *planner.CopyOut, lits []literal, text string) error {
	if x.Query != "" {
		return ss.copyMerged(x, splice(x.Query, lits), text)
	}
	if ss.inTxn() {
		// The workers' COPY on pooled connections would not see the
		// block's writes: the block runs the SELECT, and the coordinator
		// writes its rows (gathered, up to --max-gather).
		if x.InBlock != "" && x.Format != nil {
			if x.FromTable {
				// COPY t (columns): PostgreSQL's verdict on the columns
				// (a generated one, say) from the shell, as outside.
				if err := ss.copyVerdict(text); err != nil {
					ss.failBlock()
					return ss.queryError(err)
				}
			}
			return ss.copyMerged(x, splice(x.InBlock, lits), text)
		}
		return ss.queryError(pgerr.New(pgerr.FeatureNotSupported,
			"COPY from distributed table %s TO STDOUT with option ENCODING is not supported inside a transaction block", x.Table).
			WithHint("Leave ENCODING out (set client_encoding), run it outside BEGIN ... COMMIT, or SELECT the rows."))
	}
	// PostgreSQL's own verdict on the statement first (a generated or
	// unknown column): the default node's table of that name has the
	// shards' columns and no rows.
	if err := ss.copyVerdict(text); err != nil {
		return ss.queryError(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	c := &executor.CopyOut{Workers: x.Workers, Sink: clientSink{ss}, Lease: ss.lease(ctx)}
	if lits != nil {
		c.Text = litText(lits)
	}
	if err := c.Run(); err != nil {
		if errors.Is(err, errQuietClose) {
			return err
		}
		return ss.queryError(err)
	}
	ss.out = readyForQuery(ss.out, ss.txStatus())
	return nil
}

// copyVerdictSQL is the COPY (query) TO STDOUT statement text with its
// query replaced by SELECT NULL AS <name>, ... of names.
func copyVerdictSQL(text string, names []string) (string, error) {
	tree, err := pg_query.Parse(text)
	if err != nil || len(tree.Stmts) != 1 || tree.Stmts[0].Stmt.GetCopyStmt() == nil {
		return "", pgerr.New(pgerr.Internal, "cannot read the COPY statement again")
	}
	cols := make([]string, len(names))
	for i, n := range names {
		cols[i] = "NULL AS " + pgx.Identifier{n}.Sanitize()
	}
	sel, err := pg_query.Parse("SELECT " + strings.Join(cols, ", "))
	if err != nil || len(sel.Stmts) != 1 {
		return "", pgerr.New(pgerr.Internal, "cannot compose the COPY statement's check")
	}
	cs := tree.Stmts[0].Stmt.GetCopyStmt()
	cs.Query, cs.Relation, cs.Attlist = sel.Stmts[0].Stmt, nil, nil // (COPY t (columns) TO: as COPY (query) TO)
	return planner.Deparse(tree.Version, tree.Stmts[0].Stmt)
}

// copyVerdict runs a COPY ... TO STDOUT statement as written on the
// default node, whose tables of the catalog's names are empty: PostgreSQL's
// verdict on it (its columns, its options) at the cost of no rows.
func (ss *session) copyVerdict(text string) error {
	return ss.onDefaultNode(func(sc *pooling.ServerConn) error {
		sc.SetBuf(appendQuery(sc.Buf(), text))
		if err := sc.Flush(); err != nil {
			return executor.LostWorker(sc.Addr, err)
		}
		_, err := executor.ReadText(sc)
		return err
	})
}

// lease lends the executor a connection to a worker, checked out of its
// pool in the session's class and settings (sideCheckout).
func (ss *session) lease(ctx context.Context) executor.Lease {
	return func(node int32) (*pooling.ServerConn, func(bool), error) {
		pool, err := ss.poolFor(node)
		if err != nil {
			return nil, nil, err
		}
		sc, err := ss.sideCheckout(ctx, pool)
		if err != nil {
			return nil, nil, err
		}
		return sc, func(broken bool) {
			if broken {
				sc.MarkBroken()
			}
			ss.sideRelease(pool, sc)
		}, nil
	}
}

// copyMerged runs COPY (query) TO STDOUT whose query needs the
// coordinator's merge: the query (its constants back in place) runs as the
// SELECT it is, in the session and its transaction block, and the
// coordinator writes its rows as COPY does in x.Format (copyformat.go),
// after PostgreSQL's verdict on the options (copyVerdictSQL). The rows are
// gathered first, bounded by --max-gather.
func (ss *session) copyMerged(x *planner.CopyOut, query, text string) error {
	switch {
	case ss.multi != nil:
		return ss.queryError(pgerr.New(pgerr.FeatureNotSupported,
			"COPY (query) TO STDOUT over several shards with ORDER BY, LIMIT, DISTINCT or aggregates is not supported in a query string of several statements").
			WithHint("Send the COPY as a query of its own."))
	case ss.foreignEnc:
		return ss.queryError(pgerr.New(pgerr.FeatureNotSupported,
			"COPY (query) TO STDOUT over several shards with ORDER BY, LIMIT, DISTINCT or aggregates is supported only in the server's encoding").
			WithHint("Use the server's client_encoding (UTF8) for this statement, or SELECT the rows."))
	}
	m := &multiOut{start: len(ss.out), scanned: len(ss.out)}
	ss.multi = m
	defer func() { ss.multi = nil }()
	c, stop, err := ss.captureRun(query, ss.srv.cfg.MaxGather)
	if stop {
		return err
	}
	if c.over {
		return ss.queryError(pgerr.New(codeProgramLimitExceeded,
			"the rows of COPY (query) TO STDOUT exceed %d bytes (--max-gather), which the coordinator gathers for a query it merges", c.limit).
			WithHint("Copy the rows in parts (WHERE ranges), or drop ORDER BY/LIMIT/DISTINCT so that the shards' rows stream."))
	}
	res, err := ss.capturedRows(c, "COPY (query) TO STDOUT", "") // c.over was answered above
	if err != nil {
		return ss.queryError(err)
	}
	if res.errBody != nil {
		ss.out = wire.AppendFrame(ss.out, 'E', withoutPosition('E', res.errBody))
		if ss.inTxn() {
			ss.failBlock()
		}
		ss.out = readyForQuery(ss.out, ss.txStatus())
		return nil
	}
	// PostgreSQL's verdict on the options (FORCE_QUOTE's columns among
	// them), on the statement with a query of the result's column names
	// that reads nothing: it takes no lock the client's transaction could
	// hold and runs nothing of the query a second time.
	verdict, err := copyVerdictSQL(text, res.names)
	if err == nil {
		err = ss.copyVerdict(verdict)
	}
	if err != nil {
		if ss.inTxn() {
			ss.failBlock()
		}
		return ss.queryError(err)
	}
	ss.out, _ = (&pgproto3.CopyOutResponse{ColumnFormatCodes: make([]uint16, len(res.names))}).Encode(ss.out)
	force := forcedColumns(x.Format, res.names)
	line := func(vals []*string, header bool) {
		start := len(ss.out)
		ss.out = append(ss.out, 'd', 0, 0, 0, 0)
		ss.out = appendCopyLine(ss.out, x.Format, res.names, force, vals, header)
		binary.BigEndian.PutUint32(ss.out[start+1:], uint32(len(ss.out)-start-1))
	}
	if x.Format.Header {
		line(nil, true)
	}
	for _, row := range res.rows {
		line(row, false)
	}
	ss.out, _ = (&pgproto3.CopyDone{}).Encode(ss.out)
	ss.out, _ = (&pgproto3.CommandComplete{CommandTag: []byte(fmt.Sprintf("COPY %d", len(res.rows)))}).Encode(ss.out)
	ss.out = readyForQuery(ss.out, ss.txStatus())
	return nil
}
