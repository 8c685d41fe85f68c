package coordinator_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestSetInBlockParkedCatchUp: a SET made once a block spans workers is
// set again on a parked connection when the block comes back to it
// (catchUp), and adversary 160 found two ways that went wrong: a custom
// setting first defined after the connection was parked was not recorded
// on it, so sessions that never set it read ” there for NULL; and a SET
// LOCAL idle_in_transaction_session_timeout set again there turned the
// worker's own timer back on, which ended the session while its client
// was busy on the other worker.
func TestSetInBlockParkedCatchUp(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(2))
	ctx := context.Background()
	c := connect(t, srv.Addr())
	k1, k2 := spanningTable(t, c, "sibsp")
	check := func(what, sql, want string) {
		t.Helper()
		c2 := connect(t, srv.Addr())
		defer c2.Close(ctx)
		if got := queryString(t, c2, sql); got != want {
			t.Errorf("%s: %s, want %s", what, got, want)
		}
	}

	exec(t, c, "BEGIN")
	exec(t, c, "UPDATE sibsp SET n = n WHERE aid = $1", k1)
	exec(t, c, "UPDATE sibsp SET n = n WHERE aid = $1", k2) // the first worker's connection is parked
	exec(t, c, "SET LOCAL app.sibsp_later = '1'")
	if got := queryString(t, c, fmt.Sprintf("SELECT current_setting('app.sibsp_later') FROM sibsp WHERE aid = %d", k1)); got != "1" {
		t.Errorf("the setting back on the first worker: %q, want 1", got)
	}
	exec(t, c, "COMMIT")
	for i := 0; i < 6; i++ {
		check(fmt.Sprintf("a session that never set it, %d", i),
			"SELECT count(*)::text FROM sibsp WHERE current_setting('app.sibsp_later', true) IS NULL", "100")
	}

	exec(t, c, "BEGIN")
	exec(t, c, "UPDATE sibsp SET n = n WHERE aid = $1", k1)
	exec(t, c, "UPDATE sibsp SET n = n WHERE aid = $1", k2)
	exec(t, c, "SET LOCAL idle_in_transaction_session_timeout = '400ms'")
	exec(t, c, "UPDATE sibsp SET n = n WHERE aid = $1", k1) // back on the first worker: the SET is set again there
	for i := 0; i < 4; i++ {
		exec(t, c, "SELECT pg_sleep(0.2) FROM sibsp WHERE aid = $1", k2) // the client is never idle 400 ms
	}
	exec(t, c, "UPDATE sibsp SET n = n + 1 WHERE aid = $1", k1)
	exec(t, c, "COMMIT")
	check("the block's write", fmt.Sprintf("SELECT n::text FROM sibsp WHERE aid = %d", k1), "101")
}
