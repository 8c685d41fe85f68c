package coordinator

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/executor"
)

// TestResultTypeChanged: PostgreSQL's "cached plan must not change result
// type", from a worker or the executor, is what a simple-protocol
// multi-shard query answers with 40001 instead; other 0A000s are not.
func TestResultTypeChanged(t *testing.T) {
	worker := func(code, msg string) error {
		b, _ := (&pgproto3.ErrorResponse{Severity: "ERROR", Code: code, Message: msg}).Encode(nil)
		return executor.NewWorkerError(b[5:])
	}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{executor.ErrResultChanged, true},
		{worker("0A000", "cached plan must not change result type"), true},
		{fmt.Errorf("run: %w", worker("0A000", "cached plan must not change result type")), true},
		{worker("0A000", "avg(real) over several shards is not supported"), false},
		{worker("42883", "cached plan must not change result type"), false},
		{executor.ErrTableChanged, false},
		{nil, false},
	} {
		if got := resultTypeChanged(tc.err); got != tc.want {
			t.Errorf("resultTypeChanged(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
