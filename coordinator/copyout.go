package coordinator

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/pgfleet/pgfleet/executor"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/internal/wire"
	"github.com/pgfleet/pgfleet/planner"
	"github.com/pgfleet/pgfleet/pooling"
)

// copyOut runs COPY of a distributed table TO STDOUT (planner.CopyOut):
// each worker in turn copies its shards' rows on a pooled connection in
// the session's settings, and the client gets them as one COPY: the first
// worker's CopyOutResponse, every worker's CopyData, one CopyDone and a
// command tag counting every row. A worker's error ends the COPY with it,
// as PostgreSQL's own error would. Outside transaction blocks (inside one
// the workers' connections would not see the transaction's writes).
func (ss *session) copyOut(p *planner.Plan, lits []literal, text string) error {
	if ss.inTxn() {
		return ss.queryError(pgerr.New(pgerr.FeatureNotSupported,
			"COPY from distributed table %s TO STDOUT is not supported inside a transaction block yet", p.DistTable).
			WithHint("Run it outside BEGIN ... COMMIT, or SELECT the rows."))
	}
	// PostgreSQL's own verdict on the statement first (a generated or
	// unknown column): the default node's table of that name has the
	// shards' columns and no rows.
	err := ss.onDefaultNode(func(sc *pooling.ServerConn) error {
		sc.SetBuf(wire.AppendFrame(sc.Buf(), 'Q', append([]byte(text), 0)))
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
	var rows int64
	started := false // the client got a CopyOutResponse
	for _, w := range p.Scatter.Workers {
		sql := w.SQL
		if lits != nil {
			sql, _ = spliceLiterals(sql, lits)
		}
		pool, err := ss.poolFor(w.Node)
		if err != nil {
			return ss.copyOutFailed(err)
		}
		sc, err := ss.sideCheckout(ctx, pool)
		if err != nil {
			return ss.copyOutFailed(err)
		}
		n, werr, err := ss.relayCopyOut(sc, sql, &started)
		if err != nil {
			sc.MarkBroken()
		}
		pool.Release(sc)
		if err == nil {
			err = werr
		}
		if err != nil {
			return ss.copyOutFailed(err)
		}
		rows += n
	}
	if !started {
		return ss.queryError(errCatalogMoved) // no worker: the table moved
	}
	ss.out = wire.AppendFrame(ss.out, 'c', nil)
	ss.out = wire.AppendFrame(ss.out, 'C', append([]byte("COPY "+strconv.FormatInt(rows, 10)), 0))
	ss.out = append(ss.out, 'Z', 0, 0, 0, 5, ss.txStatus())
	return nil
}

// relayCopyOut runs one worker's COPY ... TO STDOUT on sc and passes its
// rows on: the CopyOutResponse only if the client has none yet. It returns
// the worker's row count, its error (werr), or a lost connection (err).
func (ss *session) relayCopyOut(sc *pooling.ServerConn, sql string, started *bool) (n int64, werr, err error) {
	sc.SetBuf(wire.AppendFrame(sc.Buf(), 'Q', append([]byte(sql), 0)))
	if err := sc.Flush(); err != nil {
		return 0, nil, executor.LostWorker(sc.Addr, err)
	}
	for {
		f, err := sc.Next()
		if err != nil {
			return 0, nil, executor.LostWorker(sc.Addr, err)
		}
		switch f.Type {
		case 'H':
			if !*started {
				*started = true
				ss.out = wire.AppendFrame(ss.out, 'H', f.Body)
			}
		case 'd':
			ss.out = wire.AppendFrame(ss.out, 'd', f.Body)
			if len(ss.out) > 64<<10 {
				if err := ss.flush(); err != nil {
					return 0, nil, errQuietClose
				}
			}
		case 'C':
			tag := string(f.Body)
			if i := len(tag) - 1; i >= 0 && tag[i] == 0 {
				tag = tag[:i]
			}
			if len(tag) > 5 {
				n, _ = strconv.ParseInt(tag[5:], 10, 64)
			}
		case 'E':
			if werr == nil {
				werr = executor.NewWorkerError(f.Body)
			}
		case 'N':
			ss.out = wire.AppendFrame(ss.out, 'N', f.Body)
		case 'S':
			sc.NoteParameterStatus(f.Body)
		case 'Z':
			sc.TxStatus = f.Body[0]
			return n, werr, nil
		}
	}
}

// copyOutFailed ends a COPY TO STDOUT with err, before any CopyOutResponse
// or after one (the client then reads ErrorResponse in place of CopyDone).
func (ss *session) copyOutFailed(err error) error {
	if errors.Is(err, errQuietClose) {
		return err
	}
	return ss.queryError(err)
}
