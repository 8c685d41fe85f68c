package coordinator_test

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// rawConn is a hijacked client connection for message-level tests.
type rawConn struct {
	t    *testing.T
	conn net.Conn
	fe   *pgproto3.Frontend
}

func rawConnect(t *testing.T, addr string) *rawConn {
	t.Helper()
	return rawConnectDB(t, addr, "postgres")
}

// round sends msgs and Sync (none after a simple Query), and returns the answers up to ReadyForQuery
// in a compact form: data rows as their first column's text, others by
// type (errors with their SQLSTATE, CommandComplete with its tag).
func (r *rawConn) round(msgs ...pgproto3.FrontendMessage) []string {
	r.t.Helper()
	if _, q := msgs[len(msgs)-1].(*pgproto3.Query); !q {
		msgs = append(msgs, &pgproto3.Sync{})
	}
	r.send(20*time.Second, msgs...)
	return r.answers()
}

// answers reads up to ReadyForQuery, in round's form.
func (r *rawConn) answers() []string {
	r.t.Helper()
	var out []string
	for {
		m, err := r.fe.Receive()
		if err != nil {
			r.t.Fatalf("receive: %v (so far %v)", err, out)
		}
		switch m := m.(type) {
		case *pgproto3.DataRow:
			out = append(out, string(m.Values[0]))
		case *pgproto3.ErrorResponse:
			out = append(out, "E"+m.Code)
		case *pgproto3.CommandComplete:
			out = append(out, "C "+string(m.CommandTag))
		case *pgproto3.PortalSuspended:
			out = append(out, "s")
		case *pgproto3.ReadyForQuery:
			return append(out, "Z"+string(m.TxStatus))
		}
	}
}

func (r *rawConn) expect(what string, got []string, want string) {
	r.t.Helper()
	if g := strings.Join(got, ","); g != want {
		r.t.Errorf("%s: got %s, want %s", what, g, want)
	}
}

func exe(sql string, args ...string) []pgproto3.FrontendMessage {
	var params [][]byte
	for _, a := range args {
		params = append(params, []byte(a))
	}
	return []pgproto3.FrontendMessage{&pgproto3.Parse{Query: sql}, &pgproto3.Bind{Parameters: params},
		&pgproto3.Execute{}}
}

// TestPortalAcrossWorkers: in a transaction over two workers, a portal
// fetched in parts (Execute with a row limit, as JDBC does with a fetch
// size) on one worker goes on after statements on the other, and is
// described and closed where it lives.
func TestPortalAcrossWorkers(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(8))
	c := connect(t, srv.Addr())
	k1, k2 := spanningTable(t, c, "pt_acc")
	r := rawConnect(t, srv.Addr())
	a1, a2 := fmt.Sprint(k1), fmt.Sprint(k2)
	rows := "SELECT g::text FROM pt_acc, generate_series(1, 7) g WHERE aid = $1 ORDER BY g"

	for round, first := range []string{a1, a2} {
		other := a2
		if first == a2 {
			other = a1
		}
		r.expect("BEGIN", r.round(&pgproto3.Query{String: "BEGIN"})[0:1], "C BEGIN")
		r.round(exe("UPDATE pt_acc SET n = n + 1 WHERE aid = $1", other)...) // the other worker first
		r.expect("bind and first fetch", r.round(
			&pgproto3.Parse{Name: "s1", Query: rows},
			&pgproto3.Bind{DestinationPortal: "c1", PreparedStatement: "s1", Parameters: [][]byte{[]byte(first)}},
			&pgproto3.Execute{Portal: "c1", MaxRows: 3}), "1,2,3,s,ZT")
		r.expect("other worker", r.round(exe("UPDATE pt_acc SET n = n + 1 WHERE aid = $1", other)...), "C UPDATE 1,ZT")
		r.expect("second fetch", r.round(&pgproto3.Execute{Portal: "c1", MaxRows: 3}), "4,5,6,s,ZT")
		r.expect("other worker again", r.round(exe("SELECT n::text FROM pt_acc WHERE aid = $1", other)...), "102,C SELECT 1,ZT")
		r.expect("describe", r.round(&pgproto3.Describe{ObjectType: 'P', Name: "c1"}), "ZT")
		r.expect("last fetch", r.round(&pgproto3.Execute{Portal: "c1"}), "7,C SELECT 1,ZT")
		// A second named portal on the other worker, while c1 is open:
		// PostgreSQL refuses the name.
		if round == 0 {
			r.expect("second portal of the same name", r.round(
				&pgproto3.Bind{DestinationPortal: "c1", PreparedStatement: "s1", Parameters: [][]byte{[]byte(other)}},
				&pgproto3.Execute{Portal: "c1"}), "E42P03,ZE")
			r.expect("ROLLBACK", r.round(&pgproto3.Query{String: "ROLLBACK"}), "C ROLLBACK,ZI")
			r.round(&pgproto3.Close{ObjectType: 'S', Name: "s1"})
			continue
		}
		r.expect("close", r.round(&pgproto3.Close{ObjectType: 'P', Name: "c1"}), "ZT")
		r.expect("closed", r.round(&pgproto3.Execute{Portal: "c1"}), "E34000,ZE")
		r.expect("ROLLBACK", r.round(&pgproto3.Query{String: "ROLLBACK"}), "C ROLLBACK,ZI")
	}

	// A commit after the fetches keeps the writes on both workers.
	r.round(&pgproto3.Query{String: "BEGIN"})
	r.round(exe("UPDATE pt_acc SET n = n + 1 WHERE aid = $1", a2)...)
	r.expect("fetch", r.round(
		&pgproto3.Bind{DestinationPortal: "c2", PreparedStatement: "s1", Parameters: [][]byte{[]byte(a1)}},
		&pgproto3.Execute{Portal: "c2", MaxRows: 5}), "1,2,3,4,5,s,ZT")
	r.round(exe("UPDATE pt_acc SET n = n + 1 WHERE aid = $1", a1)...)
	r.round(exe("UPDATE pt_acc SET n = n + 1 WHERE aid = $1", a2)...)
	r.expect("rest", r.round(&pgproto3.Execute{Portal: "c2", MaxRows: 5}), "6,7,C SELECT 2,ZT")
	r.expect("COMMIT", r.round(&pgproto3.Query{String: "COMMIT"}), "C COMMIT,ZI")
	for k, want := range map[int]string{k1: "101", k2: "102"} {
		if got := queryString(t, c, "SELECT n::text FROM pt_acc WHERE aid = $1", pgx.QueryExecModeSimpleProtocol, k); got != want {
			t.Errorf("after commit: n(%d) = %s, want %s", k, got, want)
		}
	}
}

// until sends msgs and reads the answers up to the first message of type
// stop (or an error it fails on, with a 10 s deadline), in round's form.
func (r *rawConn) until(stop string, msgs ...pgproto3.FrontendMessage) []string {
	r.t.Helper()
	r.send(10*time.Second, msgs...)
	var out []string
	for {
		m, err := r.fe.Receive()
		if err != nil {
			r.t.Fatalf("receive: %v (so far %v)", err, out)
		}
		var got string
		switch m := m.(type) {
		case *pgproto3.ParseComplete:
			got = "1"
		case *pgproto3.BindComplete:
			got = "2"
		case *pgproto3.ErrorResponse:
			got = "E" + m.Code
		case *pgproto3.CommandComplete:
			got = "C " + string(m.CommandTag)
		case *pgproto3.ReadyForQuery:
			got = "Z" + string(m.TxStatus)
		}
		if got != "" {
			out = append(out, got)
		}
		if strings.HasPrefix(got, stop) && got != "" {
			return out
		}
	}
}

// TestRefusedParseAfterFlush: a pipeline outside a block that wrote on
// several workers, then had a Parse refused, each answered after a Flush,
// is answered at its Sync at once and rolled back (an adversary round
// waited 30 s: the worker that failed the transaction for the refusal was
// sent no Sync, and skipped the ROLLBACK).
func TestRefusedParseAfterFlush(t *testing.T) {
	cl := pgtest.Start(t, 2)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	exec(t, c, "CREATE TABLE fl_t (id int PRIMARY KEY, v text)", simple)
	exec(t, c, "SELECT create_distributed_table('fl_t', 'id', shard_count => 4)", simple)
	exec(t, c, "INSERT INTO fl_t SELECT g, 'x' FROM generate_series(1, 10) g", simple)
	r := rawConnect(t, srv.Addr())
	for id := 1; id <= 4; id++ {
		r.expect("UPDATE, Flush", r.until("C", &pgproto3.Parse{Query: "UPDATE fl_t SET v = v || 'z'"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Flush{}), "1,2,C UPDATE 10")
		r.expect("refused Parse, Flush", r.until("E", &pgproto3.Parse{Name: "bad", Query: fmt.Sprintf("SELECT nosuch FROM fl_t WHERE id = %d", id)}, &pgproto3.Flush{}), "E42703")
		r.expect("Sync", r.until("Z", &pgproto3.Sync{}), "ZI")
		if n := queryString(t, c, "SELECT count(*)::text FROM fl_t WHERE v <> 'x'"); n != "0" {
			t.Fatalf("row %d: %s rows of the failed pipeline's UPDATE committed", id, n)
		}
	}
}

// send sends msgs, with a deadline for them and their answers.
func (r *rawConn) send(d time.Duration, msgs ...pgproto3.FrontendMessage) {
	r.t.Helper()
	for _, m := range msgs {
		r.fe.Send(m)
	}
	_ = r.conn.SetDeadline(time.Now().Add(d))
	if err := r.fe.Flush(); err != nil {
		r.t.Fatal(err)
	}
}
