package coordinator_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestFetchPreparedBeforeCursor: a FETCH prepared before its cursor is
// declared is described with no result (the cursor does not exist yet),
// and executed later it returns the cursor's rows: PostgreSQL does not
// check a utility statement's result against its description. pgfleet did
// (its check that a statement's result has not changed shape) and refused
// the FETCH with 0A000 when a worker connection prepared it again (pgx's
// TestConnSendBatchCursorFetch/cache_statement). Plain PostgreSQL is the
// oracle.
func TestFetchPreparedBeforeCursor(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(1))
	ctx := context.Background()
	run := func(a, b *pgx.Conn) []string {
		t.Helper()
		pc := a.PgConn()
		sd, err := pc.Prepare(ctx, "fd_fetch", "FETCH 2 FROM fd_c", nil)
		if err != nil {
			t.Fatal(err)
		}
		out := []string{fmt.Sprintf("fields %d", len(sd.Fields))}
		// Another session's DDL: the coordinator prepares statements on
		// its connections again at their next use.
		exec(t, b, "CREATE TABLE fd_tmp (x int)")
		exec(t, b, "DROP TABLE fd_tmp")
		exec(t, a, "BEGIN")
		exec(t, a, "DECLARE fd_c CURSOR FOR SELECT generate_series(1, 5) AS n")
		for i := 0; i < 2; i++ {
			res := pc.ExecPrepared(ctx, "fd_fetch", nil, nil, nil).Read()
			if res.Err != nil {
				out = append(out, "error "+sqlState(res.Err))
				continue
			}
			var vals []string
			for _, r := range res.Rows {
				vals = append(vals, string(r[0]))
			}
			out = append(out, fmt.Sprintf("%s %v", res.CommandTag, vals))
		}
		exec(t, a, "COMMIT")
		if _, err := pc.Exec(ctx, "DEALLOCATE fd_fetch").ReadAll(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	want := run(connect(t, cl.Servers[0].Addr()), connect(t, cl.Servers[0].Addr()))
	got := run(connect(t, srv.Addr()), connect(t, srv.Addr()))
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("through the coordinator: %v\nPostgreSQL: %v", got, want)
	}
	if len(want) != 3 || want[1] != "FETCH 2 [1 2]" {
		t.Errorf("PostgreSQL's answer %v: not what this test expects", want)
	}
}
