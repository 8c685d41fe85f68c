package executor

import (
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/planner"
	"github.com/pgfleet/pgfleet/pooling"
)

// Lease lends the run a connection to a worker node; give takes it back
// (broken: it is closed, not pooled).
type Lease func(node int32) (sc *pooling.ServerConn, give func(broken bool), err error)

// CopyOut runs COPY of a distributed table TO STDOUT (planner.CopyOut):
// each worker in turn copies its shards' rows (Workers, the first with the
// header if one is asked for), and the client gets one COPY: the first
// worker's CopyOutResponse, every worker's CopyData and notices, one
// CopyDone and a command tag counting every row. A worker's error ends
// the COPY with it, as PostgreSQL's own error would, before CopyDone.
type CopyOut struct {
	Workers []planner.WorkerQuery
	Text    Text // the statement's constants (nil: none)
	Lease   Lease
	Sink    Sink

	started bool // the client got a CopyOutResponse
}

// Run copies every worker's rows to the sink and ends the COPY; an error
// it returns has not been sent (the client may have had CopyData before
// it: an ErrorResponse then ends the COPY).
func (c *CopyOut) Run() error {
	var rows int64
	for _, w := range c.Workers {
		sql := w.SQL
		if c.Text != nil {
			sql = c.Text.Splice(sql)
		}
		sc, give, err := c.Lease(w.Node)
		if err != nil {
			return err
		}
		n, werr, err := c.relay(sc, sql)
		give(err != nil)
		if err == nil {
			err = werr
		}
		if err != nil {
			return err
		}
		rows += n
	}
	if !c.started {
		return ErrCatalogMoved // no worker: the table moved
	}
	c.Sink.Send('c', nil)
	c.Sink.Send('C', append(strconv.AppendInt([]byte("COPY "), rows, 10), 0))
	return nil
}

// relay runs one worker's COPY ... TO STDOUT on sc and passes its rows on:
// the CopyOutResponse only if the client has none yet. It returns the
// worker's row count, its error (werr), or a lost connection or client
// (err).
func (c *CopyOut) relay(sc *pooling.ServerConn, sql string) (n int64, werr, err error) {
	b, _ := (&pgproto3.Query{String: sql}).Encode(sc.Buf())
	sc.SetBuf(b)
	if err := sc.Flush(); err != nil {
		return 0, nil, LostWorker(sc.Addr, err)
	}
	err = CycleUntil(sc, func(typ byte, body []byte) error {
		switch typ {
		case 'H':
			if !c.started {
				c.started = true
				c.Sink.Send('H', body)
			}
		case 'd':
			if !c.Sink.Send('d', body) {
				return ErrClientGone // the rest is not read
			}
		case 'C':
			if tag, ok := strings.CutPrefix(strings.TrimSuffix(string(body), "\x00"), "COPY "); ok {
				n, _ = strconv.ParseInt(tag, 10, 64)
			}
		case 'E':
			if werr == nil {
				werr = NewWorkerError(body)
			}
		case 'N':
			c.Sink.Send('N', body)
		}
		return nil
	})
	return n, werr, err
}
