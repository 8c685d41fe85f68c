package executor

import (
	"net"
	"strconv"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/pooling"
)

// answer is what a fake worker answers a statement with.
type answer struct {
	fields []pgproto3.FieldDescription // nil: NoData
	rows   [][][]byte
	err    *pgproto3.ErrorResponse // sent at Execute instead of rows
	hangUp bool                    // close the connection at Execute
	copy   []string                // a simple Query's COPY TO STDOUT rows
}

// fakeWorker is a shard connection's other end: it speaks the extended
// query protocol after startup, answering each statement by its text
// through answer. It records the Binds it got.
type fakeWorker struct {
	t      *testing.T
	answer func(query string, bind *pgproto3.Bind) answer
	mu     sync.Mutex
	binds  []pgproto3.Bind
	parses []string // the texts of the Parses it got
	done   chan struct{}
	// fail, when set, may fail a Parse or Bind ("parse", "bind") of a
	// statement's text; the worker then skips to Sync.
	fail func(step, query string) *pgproto3.ErrorResponse
}

// fakeConn starts a fake worker and returns the coordinator's connection
// to it.
func fakeConn(t *testing.T, addr string, answer func(query string, bind *pgproto3.Bind) answer) (*pooling.ServerConn, *fakeWorker) {
	client, server := net.Pipe()
	w := &fakeWorker{t: t, answer: answer, done: make(chan struct{})}
	go w.serve(server)
	t.Cleanup(func() {
		client.Close()
		<-w.done
	})
	sc := pooling.NewServerConn(client, addr, map[string]string{"client_encoding": "UTF8", "server_encoding": "UTF8"})
	return sc, w
}

func (w *fakeWorker) serve(nc net.Conn) {
	defer close(w.done)
	defer nc.Close()
	be := pgproto3.NewBackend(nc, nc)
	stmts := map[string]string{} // prepared statement name -> query
	var portal string            // the unnamed portal's query
	var bound *pgproto3.Bind
	failed := false // an error: skip to Sync
	for {
		msg, err := be.Receive()
		if err != nil {
			return
		}
		if failed {
			if _, ok := msg.(*pgproto3.Sync); !ok {
				continue
			}
		}
		switch m := msg.(type) {
		case *pgproto3.Parse:
			w.mu.Lock()
			w.parses = append(w.parses, m.Query)
			w.mu.Unlock()
			if e := w.failAt("parse", m.Query); e != nil {
				be.Send(e)
				failed = true
				continue
			}
			stmts[m.Name] = m.Query
			be.Send(&pgproto3.ParseComplete{})
		case *pgproto3.Bind:
			if e := w.failAt("bind", stmts[m.PreparedStatement]); e != nil {
				be.Send(e)
				failed = true
				continue
			}
			b := *m
			b.Parameters = nil
			for _, v := range m.Parameters {
				b.Parameters = append(b.Parameters, append([]byte(nil), v...)) // the message's bytes are reused
			}
			w.mu.Lock()
			w.binds = append(w.binds, b)
			w.mu.Unlock()
			portal, bound = stmts[m.PreparedStatement], &b
			be.Send(&pgproto3.BindComplete{})
		case *pgproto3.Describe:
			q := portal
			if m.ObjectType == 'S' {
				q = stmts[m.Name]
				be.Send(&pgproto3.ParameterDescription{})
			}
			if a := w.answer(q, bound); a.fields != nil {
				be.Send(&pgproto3.RowDescription{Fields: a.fields})
			} else {
				be.Send(&pgproto3.NoData{})
			}
		case *pgproto3.Execute:
			a := w.answer(portal, bound)
			switch {
			case a.hangUp:
				return
			case a.err != nil:
				be.Send(a.err)
				failed = true
			default:
				for _, r := range a.rows {
					be.Send(&pgproto3.DataRow{Values: r})
				}
				be.Send(&pgproto3.CommandComplete{CommandTag: []byte("SELECT")})
			}
		case *pgproto3.Close:
			delete(stmts, m.Name)
			be.Send(&pgproto3.CloseComplete{})
		case *pgproto3.Sync:
			failed = false
			be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
			if err := be.Flush(); err != nil {
				return
			}
		case *pgproto3.Query:
			a := w.answer(m.String, nil)
			switch {
			case a.hangUp:
				return
			case a.err != nil:
				be.Send(a.err)
			default:
				be.Send(&pgproto3.CopyOutResponse{OverallFormat: 0})
				for _, r := range a.copy {
					be.Send(&pgproto3.CopyData{Data: []byte(r + "\n")})
				}
				be.Send(&pgproto3.CopyDone{})
				be.Send(&pgproto3.CommandComplete{CommandTag: []byte("COPY " + strconv.Itoa(len(a.copy)))})
			}
			be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
			if err := be.Flush(); err != nil {
				return
			}
		case *pgproto3.Terminate:
			return
		}
	}
}

// parsedText reports whether the worker got a Parse of query.
func (w *fakeWorker) parsedText(query string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, q := range w.parses {
		if q == query {
			return true
		}
	}
	return false
}

func (w *fakeWorker) failAt(step, query string) *pgproto3.ErrorResponse {
	w.mu.Lock()
	f := w.fail
	w.mu.Unlock()
	if f == nil {
		return nil
	}
	return f(step, query)
}

// sink is a fake client: the messages it was sent, in order.
type sink struct {
	msgs []string // type byte, then the body
	gone int      // after this many messages the client is gone (0: never)
}

func (s *sink) Send(typ byte, body []byte) bool {
	s.msgs = append(s.msgs, string(typ)+string(body))
	return s.gone == 0 || len(s.msgs) < s.gone
}
