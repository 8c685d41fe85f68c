package coordinator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestIdleInTransactionAcrossWorkers: a session's
// idle_in_transaction_session_timeout behaves as in PostgreSQL in a
// transaction over two workers: a client that never pauses longer than the
// timeout commits, although its first worker's connection waits longer
// while the client works on the other (before, that worker ended the
// connection and COMMIT failed with 08006); a client that pauses longer is
// ended with FATAL 25P03 and its writes on both workers are rolled back.
func TestIdleInTransactionAcrossWorkers(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	ctx := context.Background()
	admin := connect(t, srv.Addr())
	k1, k2 := spanningTable(t, admin, "iit_t")

	c := connect(t, srv.Addr())
	exec(t, c, "SET idle_in_transaction_session_timeout = '1s'")
	exec(t, c, "BEGIN")
	exec(t, c, fmt.Sprintf("UPDATE iit_t SET n = 1 WHERE aid = %d", k1))
	for i := 0; i < 5; i++ { // 1.5 s on the second worker, never idle
		exec(t, c, fmt.Sprintf("UPDATE iit_t SET n = n + 1 + 0 * length(pg_sleep(0.3)::text) WHERE aid = %d", k2))
	}
	exec(t, c, "COMMIT")
	if got := pair(t, admin, k1, k2); got != "1,105" {
		t.Errorf("after the commit: %s, want 1,105", got)
	}

	d := connect(t, srv.Addr())
	exec(t, d, "SET idle_in_transaction_session_timeout = '300ms'")
	exec(t, d, "BEGIN")
	exec(t, d, fmt.Sprintf("UPDATE iit_t SET n = 50 WHERE aid = %d", k1))
	exec(t, d, fmt.Sprintf("UPDATE iit_t SET n = 50 WHERE aid = %d", k2))
	time.Sleep(time.Second) // idle in the transaction past the timeout
	_, err := d.Exec(ctx, "COMMIT")
	if sqlState(err) != "25P03" {
		t.Errorf("after idling in a transaction across workers: got %v, want 25P03", err)
	}
	if got := pair(t, admin, k1, k2); got != "1,105" {
		t.Errorf("after the timeout: %s, want 1,105 (rolled back)", got)
	}
}

// TestCoordinatorIdleInTransactionTimeout: --idle-in-transaction-timeout
// ends a session idle in a transaction block with FATAL 25P03 and rolls it
// back; a session idle outside one is left alone.
func TestCoordinatorIdleInTransactionTimeout(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, func(c *coordinator.Config) { c.IdleInTransactionTimeout = 300 * time.Millisecond })
	ctx := context.Background()
	direct := connectURL(t, cl.Servers[0].URL())
	exec(t, direct, "DROP TABLE IF EXISTS iitc_t")
	exec(t, direct, "CREATE TABLE iitc_t (id int)")
	t.Cleanup(func() { _, _ = direct.Exec(context.Background(), "DROP TABLE IF EXISTS iitc_t") })
	inTx, idle := connect(t, srv.Addr()), connect(t, srv.Addr())
	exec(t, inTx, "BEGIN")
	exec(t, inTx, "INSERT INTO iitc_t VALUES (1)")
	exec(t, idle, "SELECT 1")
	time.Sleep(time.Second)
	_, err := inTx.Exec(ctx, "COMMIT")
	if sqlState(err) != "25P03" {
		t.Errorf("idle in a transaction past the limit: got %v, want 25P03", err)
	}
	if got := queryString(t, idle, "SELECT count(*)::text FROM iitc_t"); got != "0" {
		t.Errorf("rows after the timeout: %s, want 0", got)
	}
}

// pair is n of rows k1 and k2 of iit_t, as "n1,n2".
func pair(t *testing.T, c *pgx.Conn, k1, k2 int) string {
	t.Helper()
	return queryString(t, c, fmt.Sprintf("SELECT n::text FROM iit_t WHERE aid = %d", k1)) + "," +
		queryString(t, c, fmt.Sprintf("SELECT n::text FROM iit_t WHERE aid = %d", k2))
}
