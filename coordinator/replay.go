package coordinator

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/internal/wire"
	"github.com/pgfleet/pgfleet/planner"
)

// Statements that meet a moved shard run again. A shard move's cut-over
// drops the source's shards while statements routed to them wait for its
// lock; each then fails with 42P01 on the worker, which staleShard makes a
// 40001 (on every path an error takes to the client). When that statement
// ran outside a transaction block, on its own, it failed whole and changed
// nothing, so the coordinator can run it again
// on the placement the catalog now has: the client sees a pause, not an
// error. The session keeps a copy of the client's messages of each such
// request (a Query, or the extended-protocol messages up to Sync) and,
// when the request's whole answer is that error (nothing but parse, bind
// and description acknowledgements before it, nothing sent to the client
// yet), drops the answer and takes the messages again from the copy, at
// most staleRetries times. Not replayed: a request inside a transaction
// block (its earlier statements ran on the old placement; the client
// retries the transaction), DDL, COPY, function calls and Flush,
// multi-shard reads and catalog functions (notePlan), and requests over
// replayMax bytes.

// While a request runs again, what looks ahead at the client's next
// messages (pipelineGoesOn, moreBeforeSync) reads the copy's.

// staleRetries is how many times one request runs again; staleBackoff is
// the pause before a try when the catalog did not change since the last
// one (a placement whose commit is still on its way: a shard move's
// target commits a moment after the decision; found by
// TestMoveShardRepeatedly, three tries in one millisecond).
const staleRetries = 5

var staleBackoff = [staleRetries + 1]time.Duration{0, 0, 10 * time.Millisecond, 40 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond}

// replayMax bounds the messages a session keeps of a request.
const replayMax = 64 << 10

// replay is a session's copy of the client's request being answered.
type replay struct {
	on      bool // a request that started outside a transaction block is being answered
	broken  bool // it cannot run again
	msgs    []byte
	mark    int // len(ss.out) when the request began
	flushes int // ss.flushes then
	tries   int
	ver     int64        // the catalog version the last try ran under
	names   []string     // statements the request's Parses named
	queue   []wire.Frame // messages to take again, before the client's next
}

// noteRequest keeps f, a message the client sent, in the copy of the
// request it belongs to, or starts one.
func (ss *session) noteRequest(f wire.Frame) {
	r := &ss.replay
	if !r.on {
		if !ss.routes || ss.needSync || ss.skipping || ss.implicitTxn || ss.inTxn() {
			return
		}
		switch f.Type {
		case 'Q', 'P', 'B', 'D', 'E', 'C':
		default:
			return
		}
		*r = replay{on: true, msgs: r.msgs[:0], mark: len(ss.out), flushes: ss.flushes, queue: r.queue[:0], names: r.names[:0]}
	}
	if r.broken {
		return
	}
	switch f.Type {
	case 'P':
		// (DDL is noted where the session classifies the statement:
		// noteClass.)
		if name, _, _ := wire.CBytes(f.Body); len(name) > 0 {
			r.names = append(r.names, string(name))
		}
	case 'B':
		_, rest, _ := wire.CBytes(f.Body)
		name, _, _ := wire.CBytes(rest)
		if st := ss.stmts[string(name)]; st != nil && st.cls.ddl {
			r.broken = true
		}
	case 'Q', 'D', 'E', 'C', 'S':
	default:
		r.broken = true
	}
	if len(r.msgs)+5+len(f.Body) > replayMax {
		r.broken = true
	}
	if !r.broken {
		r.msgs = wire.AppendFrame(r.msgs, f.Type, f.Body)
	}
}

// noteClass marks the request as one that cannot run again when a
// statement of it, of class cls, is DDL.
func (ss *session) noteClass(cls *class) {
	if cls.ddl {
		ss.replay.broken = true
	}
}

// end ends the request's copy; a large one's buffer goes (an idle
// session keeps little).
func (r *replay) end() {
	r.on = false
	if cap(r.msgs) > 4<<10 {
		r.msgs, r.queue = nil, nil
	}
}

// notePlan marks the request as one that cannot run again when it ran a
// plan of kind k whose failure may leave something done: a multi-shard
// read (each worker's statement commits on its own, and a function it
// calls may have written), a catalog function, COPY. A routed statement
// fails whole on its one worker, and multi-shard writes commit in one
// distributed transaction or not at all.
func (ss *session) notePlan(k planner.Kind) {
	switch k {
	case planner.KindMultiShard, planner.KindFunction, planner.KindCopyIn, planner.KindCopyOut:
		ss.replay.broken = true
	}
}

// retryStale is called when the request ends (its Query or Sync has been
// answered): it reports whether the request is to run again, and if so
// has dropped its answer and queued its messages.
func (ss *session) retryStale() bool {
	r := &ss.replay
	if r.broken || r.tries >= staleRetries || ss.flushes != r.flushes ||
		ss.inTxn() || ss.needSync || ss.skipping || !onlyStaleError(ss.out[r.mark:]) {
		return false
	}
	r.tries++
	// The answer goes but for its ParameterStatus messages (a pooled
	// connection taking the session's settings reports them), which the
	// client is still told.
	var kept []byte
	for typ, body := range frames(ss.out[r.mark:]) {
		if typ == 'S' {
			kept = wire.AppendFrame(kept, 'S', body)
		}
	}
	ss.out = append(ss.out[:r.mark], kept...)
	r.mark = len(ss.out)
	// The statements the request's Parses made are made again: the
	// names were free when they ran (else the Parse had failed), and are
	// freed again.
	for _, name := range r.names {
		delete(ss.stmts, name)
		delete(ss.parsed, name)
	}
	// The move's catalog change committed before its shards left the
	// source: reading the catalog now routes the request to the target.
	ss.srv.refreshCatalog(context.Background())
	if v := ss.srv.catalog.Load().Version; r.tries > 1 && v == r.ver {
		time.Sleep(staleBackoff[r.tries])
	} else {
		r.ver = v
	}
	r.queue = r.queue[:0]
	for typ, body := range frames(r.msgs) {
		r.queue = append(r.queue, wire.Frame{Type: typ, Body: body})
	}
	ss.srv.metrics.staleRetries.Inc()
	return true
}

// onlyStaleError reports whether out, a request's answer, is
// acknowledgements of parsing, binding and describing, staleShard's 40001
// (or errCatalogMoved's: a plan of a shard count a split changed, which ran
// nowhere), ParameterStatus messages (a pooled connection taking the
// session's settings; found by an adversary: psql's application_name kept
// a request from running again), and the ReadyForQuery: no rows, no command completed, nothing else the
// client must see.
func onlyStaleError(out []byte) bool {
	errs, ready := 0, false
	for typ, body := range frames(out) {
		if ready {
			return false
		}
		switch typ {
		case '1', '2', '3', 'n', 't', 'T', 'S':
		case 'E':
			var er pgproto3.ErrorResponse
			if errCode(body) != pgerr.SerializationFailure || er.Decode(body) != nil ||
				!strings.HasSuffix(er.Message, staleShardSuffix) && er.Message != errCatalogMoved.Message {
				return false
			}
			errs++
		case 'Z':
			ready = true
		default:
			return false
		}
	}
	return errs == 1 && ready
}
