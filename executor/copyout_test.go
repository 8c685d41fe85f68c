package executor

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/planner"
	"github.com/pgfleet/pgfleet/pooling"
)

// copyRun runs a COPY TO STDOUT over fake workers answering with answers
// (by node, from 1), and returns what the client got as a string of types
// and the CopyData, and which connections went back broken.
func copyRun(t *testing.T, answers []func(string, *pgproto3.Bind) answer, gone int) (got string, broken []bool, err error) {
	t.Helper()
	var workers []planner.WorkerQuery
	conns := map[int32]*pooling.ServerConn{}
	for i, a := range answers {
		node := int32(i + 1)
		workers = append(workers, planner.WorkerQuery{Node: node, SQL: fmt.Sprintf("COPY (worker %d) TO STDOUT", node)})
		conns[node], _ = fakeConn(t, fmt.Sprintf("worker%d", node), a)
	}
	broken = make([]bool, len(answers))
	k := &sink{gone: gone}
	c := &CopyOut{Workers: workers, Sink: k, Lease: func(node int32) (*pooling.ServerConn, func(bool), error) {
		return conns[node], func(b bool) { broken[node-1] = b }, nil
	}}
	err = c.Run()
	for _, m := range k.msgs {
		got += m[:1]
		if m[0] == 'd' || m[0] == 'C' {
			got += "(" + strings.TrimRight(m[1:], "\n\x00") + ")"
		}
	}
	return got, broken, err
}

func copies(rows ...string) func(string, *pgproto3.Bind) answer {
	return func(string, *pgproto3.Bind) answer { return answer{copy: rows} }
}

// TestCopyOut: one CopyOutResponse, every worker's rows in worker order,
// one CopyDone, and a tag counting them all.
func TestCopyOut(t *testing.T) {
	got, broken, err := copyRun(t, []func(string, *pgproto3.Bind) answer{copies("1\ta", "2\tb"), copies(), copies("3\tc")}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := "Hd(1\ta)d(2\tb)d(3\tc)cC(COPY 3)"; got != want {
		t.Errorf("client got %q, want %q", got, want)
	}
	if broken[0] || broken[1] || broken[2] {
		t.Errorf("broken = %v", broken)
	}
}

// TestCopyOutWorkerError: a worker's error ends the COPY with it, after
// the rows sent so far and before CopyDone; the workers after it are not
// asked.
func TestCopyOutWorkerError(t *testing.T) {
	failing := func(string, *pgproto3.Bind) answer {
		return answer{err: &pgproto3.ErrorResponse{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: "42501", Message: "permission denied"}}
	}
	asked := false
	third := func(q string, b *pgproto3.Bind) answer { asked = true; return answer{copy: []string{"x"}} }
	got, _, err := copyRun(t, []func(string, *pgproto3.Bind) answer{copies("1"), failing, third}, 0)
	var we *WorkerError
	if !errors.As(err, &we) || we.PG.Code != "42501" {
		t.Fatalf("err = %v, want the worker's 42501", err)
	}
	if got != "Hd(1)" || asked {
		t.Errorf("client got %q (third worker asked: %v), want \"Hd(1)\"", got, asked)
	}
}

// TestCopyOutClientGone: once the client is gone the worker's answer is
// not read on, and its connection goes back broken.
func TestCopyOutClientGone(t *testing.T) {
	_, broken, err := copyRun(t, []func(string, *pgproto3.Bind) answer{copies("1", "2", "3")}, 2)
	if !errors.Is(err, ErrClientGone) || !broken[0] {
		t.Errorf("err = %v, broken = %v; want ErrClientGone and a broken connection", err, broken)
	}
}
