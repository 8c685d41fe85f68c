package coordinator

import (
	"context"
	"errors"
	"time"

	"github.com/pgfleet/pgfleet/executor"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/planner"
	"github.com/pgfleet/pgfleet/pooling"
)

// copyOut runs COPY of a distributed table TO STDOUT (planner.CopyOut) on
// pooled connections in the session's settings (executor.CopyOut), after
// PostgreSQL's verdict on the statement. Outside transaction blocks
// (inside one the workers' connections would not see the transaction's
// writes).
func (ss *session) copyOut(p *planner.Plan, x *planner.CopyOut, lits []literal, text string) error {
	if ss.inTxn() {
		return ss.queryError(pgerr.New(pgerr.FeatureNotSupported,
			"COPY from distributed table %s TO STDOUT is not supported inside a transaction block yet", x.Table).
			WithHint("Run it outside BEGIN ... COMMIT, or SELECT the rows."))
	}
	// PostgreSQL's own verdict on the statement first (a generated or
	// unknown column): the default node's table of that name has the
	// shards' columns and no rows.
	err := ss.onDefaultNode(func(sc *pooling.ServerConn) error {
		sc.SetBuf(appendQuery(sc.Buf(), text))
		if err := sc.Flush(); err != nil {
			return executor.LostWorker(sc.Addr, err)
		}
		_, err := executor.ReadText(sc)
		return err
	})
	if err != nil {
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
			pool.Release(sc)
		}, nil
	}
}
