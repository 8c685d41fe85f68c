package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

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

	// The setting changed inside such a transaction counts from then on,
	// as in PostgreSQL (adversary finding: the value read when the second
	// worker joined was enforced all the same, and the transaction lost).
	for i, change := range []string{
		"SET LOCAL idle_in_transaction_session_timeout = 0",
		"SET idle_in_transaction_session_timeout = '5s'",
		"SELECT set_config('idle_in_transaction_session_timeout', '0', true)",
		"RESET ALL",
	} {
		e := connect(t, srv.Addr())
		exec(t, e, "SET idle_in_transaction_session_timeout = '300ms'")
		exec(t, e, "BEGIN")
		exec(t, e, fmt.Sprintf("UPDATE iit_t SET n = %d WHERE aid = %d", 10+i, k1))
		exec(t, e, fmt.Sprintf("UPDATE iit_t SET n = %d WHERE aid = %d", 10+i, k2))
		exec(t, e, change)
		time.Sleep(time.Second)
		if _, err := e.Exec(ctx, "COMMIT"); err != nil {
			t.Errorf("after %q and a pause: COMMIT: %v", change, err)
		} else if got, want := pair(t, admin, k1, k2), fmt.Sprintf("%d,%d", 10+i, 10+i); got != want {
			t.Errorf("after %q and a commit: %s, want %s", change, got, want)
		}
	}
	// A pipeline over both workers paused before its Sync is not timed:
	// PostgreSQL starts the timer at ReadyForQuery (adversary finding).
	r := rawConnect(t, srv.Addr())
	r.expect("SET", r.round(&pgproto3.Query{String: "SET idle_in_transaction_session_timeout = '300ms'"}), "C SET,ZI")
	msgs := append(exe(fmt.Sprintf("UPDATE iit_t SET n = 21 WHERE aid = %d", k1)), exe(fmt.Sprintf("UPDATE iit_t SET n = 21 WHERE aid = %d", k2))...)
	r.send(5*time.Second, append(msgs, &pgproto3.Flush{})...)
	for done := 0; done < 2; {
		m, err := r.fe.Receive()
		if err != nil {
			t.Fatalf("the pipeline's answers before Sync: %v", err)
		}
		switch m := m.(type) {
		case *pgproto3.CommandComplete:
			done++
		case *pgproto3.ErrorResponse:
			t.Fatalf("the pipeline before Sync: %s %s", m.Code, m.Message)
		}
	}
	time.Sleep(time.Second)
	r.send(5*time.Second, &pgproto3.Sync{})
	r.expect("Sync after the pause", r.answers(), "ZI")
	if got := pair(t, admin, k1, k2); got != "21,21" {
		t.Errorf("after the pipeline's Sync: %s, want 21,21", got)
	}

	// Lowered inside it: ended as PostgreSQL ends it.
	f := connect(t, srv.Addr())
	exec(t, f, "SET idle_in_transaction_session_timeout = '10s'")
	exec(t, f, "BEGIN")
	exec(t, f, fmt.Sprintf("UPDATE iit_t SET n = 77 WHERE aid = %d", k1))
	exec(t, f, fmt.Sprintf("UPDATE iit_t SET n = 77 WHERE aid = %d", k2))
	exec(t, f, "SET LOCAL idle_in_transaction_session_timeout = '300ms'")
	time.Sleep(time.Second)
	if _, err := f.Exec(ctx, "COMMIT"); sqlState(err) != "25P03" {
		t.Errorf("after lowering the timeout in the transaction and idling past it: %v, want 25P03", err)
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

// TestIdleInTransactionOneWorker: a session's own
// idle_in_transaction_session_timeout on at most one worker (adversary
// finding: a client idle after BEGIN was never ended, and one idle in a
// transaction on one worker got 08006 at its next statement):
//   - after BEGIN with nothing sent to a worker yet, the client is sent
//     FATAL 25P03 at the timeout without asking, its value from a SET or
//     its startup packet;
//   - in a transaction on one worker, its next statement gets FATAL 25P03
//     and the transaction's write is rolled back;
//   - SET LOCAL of 0 in the transaction turns the timer off, as in
//     PostgreSQL: such a transaction may idle and commit.
func TestIdleInTransactionOneWorker(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	ctx := context.Background()
	admin := connect(t, srv.Addr())
	k1, _ := spanningTable(t, admin, "iit1_t")

	r := rawConnect(t, srv.Addr())
	r.expect("SET", r.round(&pgproto3.Query{String: "SET idle_in_transaction_session_timeout = '300ms'"}), "C SET,ZI")
	r.expect("BEGIN", r.round(&pgproto3.Query{String: "BEGIN"}), "C BEGIN,ZT")
	_ = r.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	began := time.Now()
	if m, err := r.fe.Receive(); err != nil {
		t.Errorf("idle after BEGIN past the timeout: %v, want FATAL 25P03", err)
	} else if e, ok := m.(*pgproto3.ErrorResponse); !ok || e.Code != "25P03" || e.Severity != "FATAL" {
		t.Errorf("idle after BEGIN past the timeout: %#v, want FATAL 25P03", m)
	} else if d := time.Since(began); d > 2*time.Second {
		t.Errorf("FATAL 25P03 came %v after BEGIN, the timeout is 300ms", d)
	}

	cfg, err := pgconn.ParseConfig(pgtest.URL(srv.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["idle_in_transaction_session_timeout"] = "300"
	pc, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pc.Exec(ctx, "BEGIN").ReadAll(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if _, err := pc.Exec(ctx, "SELECT 1").ReadAll(); sqlState(err) != "25P03" {
		t.Errorf("idle after BEGIN, the timeout from the startup packet: %v, want 25P03", err)
	}
	pc.Close(ctx)

	c := connect(t, srv.Addr())
	exec(t, c, "SET idle_in_transaction_session_timeout = '300ms'")
	exec(t, c, "BEGIN")
	exec(t, c, fmt.Sprintf("UPDATE iit1_t SET n = 7 WHERE aid = %d", k1))
	time.Sleep(time.Second)
	_, err = c.Exec(ctx, "COMMIT")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "25P03" || pe.Severity != "FATAL" {
		t.Errorf("COMMIT after idling in a transaction on one worker: %v, want FATAL 25P03", err)
	}
	if got := queryString(t, admin, fmt.Sprintf("SELECT n::text FROM iit1_t WHERE aid = %d", k1)); got != "100" {
		t.Errorf("after the timeout: n = %s, want 100 (rolled back)", got)
	}

	d := connect(t, srv.Addr())
	exec(t, d, "SET idle_in_transaction_session_timeout = '300ms'")
	exec(t, d, "BEGIN")
	exec(t, d, "SET LOCAL idle_in_transaction_session_timeout = 0")
	exec(t, d, fmt.Sprintf("UPDATE iit1_t SET n = 8 WHERE aid = %d", k1))
	time.Sleep(time.Second)
	exec(t, d, "COMMIT")
	if got := queryString(t, admin, fmt.Sprintf("SELECT n::text FROM iit1_t WHERE aid = %d", k1)); got != "8" {
		t.Errorf("after SET LOCAL 0 and a commit: n = %s, want 8", got)
	}
}

// pair is n of rows k1 and k2 of iit_t, as "n1,n2".
func pair(t *testing.T, c *pgx.Conn, k1, k2 int) string {
	t.Helper()
	return queryString(t, c, fmt.Sprintf("SELECT n::text FROM iit_t WHERE aid = %d", k1)) + "," +
		queryString(t, c, fmt.Sprintf("SELECT n::text FROM iit_t WHERE aid = %d", k2))
}
