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
	for _, m := range msgs {
		r.fe.Send(m)
	}
	if _, q := msgs[len(msgs)-1].(*pgproto3.Query); !q {
		r.fe.Send(&pgproto3.Sync{})
	}
	_ = r.conn.SetDeadline(time.Now().Add(20 * time.Second))
	if err := r.fe.Flush(); err != nil {
		r.t.Fatal(err)
	}
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
