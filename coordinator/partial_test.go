package coordinator_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestAnswerBeforePartialMessage: a request followed in the same write by
// the start of a next message is answered at once, as PostgreSQL answers
// it, not when the rest of the next message comes; the next is answered
// once it is whole. Sessions may sleep here (IdleSleep 5 ms): one holding
// part of a message does not, and reads the rest after a pause.
func TestAnswerBeforePartialMessage(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, func(c *coordinator.Config) { c.IdleSleep = 5 * time.Millisecond })
	r := rawConnect(t, srv.Addr())
	encode := func(msgs ...pgproto3.FrontendMessage) []byte {
		var b []byte
		for _, m := range msgs {
			var err error
			if b, err = m.Encode(b); err != nil {
				t.Fatal(err)
			}
		}
		return b
	}
	next := encode(&pgproto3.Query{String: "SELECT 2"})
	for _, tc := range []struct {
		name  string
		first []byte
		want  string
	}{
		{"simple Query", encode(&pgproto3.Query{String: "SELECT 1"}), "1,C SELECT 1,ZI"},
		{"Parse Bind Execute Sync", encode(append(exe("SELECT 1"), &pgproto3.Sync{})...), "1,C SELECT 1,ZI"},
		{"BEGIN", encode(&pgproto3.Query{String: "BEGIN"}), "C BEGIN,ZT"},
	} {
		for _, cut := range []int{1, 5, len(next) - 1} {
			_ = r.conn.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := r.conn.Write(append(tc.first[:len(tc.first):len(tc.first)], next[:cut]...)); err != nil {
				t.Fatal(err)
			}
			r.expect(tc.name+" with part of the next message", r.answers(), tc.want)
			time.Sleep(30 * time.Millisecond) // several sleep sweeps
			if _, err := r.conn.Write(next[cut:]); err != nil {
				t.Fatal(err)
			}
			want := "2,C SELECT 1,ZI"
			if tc.name == "BEGIN" {
				want = "2,C SELECT 1,ZT"
			}
			r.expect(tc.name+": the next message, completed", r.answers(), want)
			if tc.name == "BEGIN" {
				r.expect("ROLLBACK", r.round(&pgproto3.Query{String: "ROLLBACK"}), "C ROLLBACK,ZI")
			}
		}
	}
}
