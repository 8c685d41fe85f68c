package coordinator_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestCopyDataBehindExecute: an extended-protocol COPY FROM STDIN whose
// data the client sends behind the Execute, before the CopyInResponse
// (no Sync between, or a pause that has the coordinator send the Execute
// on), copies every row, as PostgreSQL does, which enters the COPY as it
// runs the Execute and takes what follows as its data. Adversary 158: the
// rows were dropped (COPY 0) or the session hung.
func TestCopyDataBehindExecute(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(2))
	c := connect(t, srv.Addr())
	freshTables(t, c, []string{"cdbe"}, "CREATE TABLE cdbe (k int PRIMARY KEY, v text)")
	row := func(k int) pgproto3.FrontendMessage {
		return &pgproto3.CopyData{Data: []byte(fmt.Sprintf("%d\tx\n", k))}
	}
	done, sync, flush := &pgproto3.CopyDone{}, &pgproto3.Sync{}, &pgproto3.Flush{}
	pause := pgproto3.FrontendMessage(nil) // a 300 ms pause between writes
	for i, tc := range []struct {
		name string
		msgs []pgproto3.FrontendMessage
		want string
	}{
		{"all in one write", []pgproto3.FrontendMessage{row(1), done, sync}, "C COPY 1,ZI"},
		{"a Sync inside the copy", []pgproto3.FrontendMessage{row(1), sync, done, sync}, "C COPY 1,ZI"},
		{"a pause, then the data", []pgproto3.FrontendMessage{pause, row(1), done, sync}, "C COPY 1,ZI"},
		{"a pause, data, Sync, pause, done", []pgproto3.FrontendMessage{pause, row(1), sync, pause, done, sync}, "C COPY 1,ZI"},
		{"two rows between pauses", []pgproto3.FrontendMessage{pause, row(1), pause, row(2), done, sync}, "C COPY 2,ZI"},
		{"a Flush, then the data", []pgproto3.FrontendMessage{flush, pause, row(1), done, sync}, "C COPY 1,ZI"},
		{"a CopyFail behind it", []pgproto3.FrontendMessage{row(1), &pgproto3.CopyFail{Message: "stop"}, sync}, "E57014,ZI"},
	} {
		r := rawConnect(t, srv.Addr())
		batch := exe("COPY cdbe FROM STDIN")
		for _, m := range tc.msgs {
			if m == nil {
				r.send(20*time.Second, batch...)
				batch = nil
				time.Sleep(300 * time.Millisecond)
				continue
			}
			batch = append(batch, m)
		}
		r.send(20*time.Second, batch...)
		r.expect(tc.name, r.answers(), tc.want)
		wantRows := "0"
		if tc.want != "E57014,ZI" {
			wantRows = tc.want[len("C COPY ") : len("C COPY ")+1]
		}
		if got := queryString(t, c, "SELECT count(*)::text FROM cdbe"); got != wantRows {
			t.Errorf("case %d (%s): %s rows copied, want %s", i, tc.name, got, wantRows)
		}
		exec(t, c, "TRUNCATE cdbe")
		// The session goes on.
		r.expect(tc.name+", then a query", r.round(exe("SELECT 'ok'")...), "ok,C SELECT 1,ZI")
		_ = r.conn.Close()
	}
}

// TestCopyInForeignMessage: a message other than COPY's own inside COPY
// FROM STDIN gets what PostgreSQL gives, asked directly in the same test:
// an error, then FATAL, both 08P01, and the connection closed, nothing
// copied (pgfleet failed the COPY with 57014 and went on: adversary 159).
func TestCopyInForeignMessage(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(2))
	c := connect(t, srv.Addr())
	freshTables(t, c, []string{"cifm"}, "CREATE TABLE cifm (k int PRIMARY KEY, v text)")
	run := func(addr string) string {
		r := rawConnect(t, addr)
		defer r.conn.Close()
		r.send(20*time.Second, &pgproto3.Query{String: "COPY cifm FROM STDIN"})
		r.send(20*time.Second, &pgproto3.CopyData{Data: []byte("1\tx\n")}, &pgproto3.Query{String: "SELECT 1"},
			&pgproto3.CopyDone{})
		var got []string
		for {
			m, err := r.fe.Receive()
			if err != nil {
				return strings.Join(append(got, "closed"), ",")
			}
			switch m := m.(type) {
			case *pgproto3.ErrorResponse:
				got = append(got, m.Severity+" "+m.Code)
			case *pgproto3.CommandComplete:
				got = append(got, "C "+string(m.CommandTag))
			case *pgproto3.ReadyForQuery:
				got = append(got, "Z"+string(m.TxStatus))
			}
		}
	}
	want := run(cl.Servers[0].Addr()) // PostgreSQL, the table there being the coordinator's
	if want != "ERROR 08P01,FATAL 08P01,closed" {
		t.Logf("PostgreSQL answered %s", want)
	}
	if got := run(srv.Addr()); got != want {
		t.Errorf("through the coordinator: %s; PostgreSQL: %s", got, want)
	}
	if n := queryString(t, c, "SELECT count(*)::text FROM cifm"); n != "0" {
		t.Errorf("%s rows copied, want 0", n)
	}
}
