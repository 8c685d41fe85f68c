package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// waitNotification waits up to 5 s for the next notification on c.
func waitNotification(t *testing.T, c *pgx.Conn) *pgconn.Notification {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := c.WaitForNotification(ctx)
	if err != nil {
		t.Fatalf("waiting for a notification: %v", err)
	}
	return n
}

// TestListenNotifyIdle: a client that LISTENs and then waits, sending
// nothing, gets the notifications other clients send through any
// coordinator, as PostgreSQL sends them to an idle client (they reached it
// only with its next statement, and pgx's WaitForNotification hung); its
// own notifications name its own process ID; none is lost or repeated in
// a burst, and the session works on afterwards.
func TestListenNotifyIdle(t *testing.T) {
	cl := pgtest.Shared(t)
	a := pgtest.Coordinator(t, cl, nil)
	b := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	listener := connect(t, a.Addr())
	sender := connect(t, a.Addr())
	other := connect(t, b.Addr())
	testTable(t, sender, "ln_d", "(k int PRIMARY KEY, v text)", "SELECT create_distributed_table('ln_d', 'k', shard_count => 4)")
	sameCatalog(t, b, a) // (other writes ln_d below)

	exec(t, listener, "LISTEN ln_chan", simple)
	exec(t, sender, "NOTIFY ln_chan, 'one'", simple)
	n := waitNotification(t, listener)
	if n.Channel != "ln_chan" || n.Payload != "one" {
		t.Errorf("notification = %s %q, want ln_chan \"one\"", n.Channel, n.Payload)
	}
	if n.PID == listener.PgConn().PID() {
		t.Errorf("another session's notification carries the listener's own PID %d", n.PID)
	}

	// Through another coordinator, with pg_notify, in a transaction:
	// delivered at COMMIT.
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT pg_notify('ln_chan', 'two')"); err != nil {
		t.Fatal(err)
	}
	early, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	if n, err := listener.WaitForNotification(early); err == nil {
		t.Errorf("notification %q before the sender's COMMIT", n.Payload)
	}
	cancel()
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := waitNotification(t, listener); n.Payload != "two" {
		t.Errorf("payload after COMMIT = %q, want \"two\"", n.Payload)
	}

	// A transaction over several workers that notifies cannot commit in
	// two phases (PostgreSQL refuses to PREPARE it): 0A000 with a hint,
	// nothing of it kept, no notification sent.
	tx, err = other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO ln_d VALUES (101, 'a'), (102, 'b'), (103, 'c'), (104, 'd'), (105, 'e'), (106, 'f')"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "NOTIFY ln_chan, 'spanning'"); err != nil {
		t.Fatal(err)
	}
	err = tx.Commit(ctx)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "0A000" || pe.Hint == "" {
		t.Errorf("COMMIT of a spanning transaction that notified = %v, want 0A000 with a hint", err)
	}
	var kept int
	if err := sender.QueryRow(ctx, "SELECT count(*) FROM ln_d WHERE k > 100").Scan(&kept); err != nil || kept != 0 {
		t.Errorf("rows of the refused transaction kept: %d, %v", kept, err)
	}
	early, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
	if n, err := listener.WaitForNotification(early); err == nil {
		t.Errorf("notification %q of a transaction that did not commit", n.Payload)
	}
	cancel()

	// A burst: every notification once, in order.
	for i := 0; i < 200; i++ {
		exec(t, sender, fmt.Sprintf("NOTIFY ln_chan, 'b%d'", i), simple)
	}
	for i := 0; i < 200; i++ {
		if n := waitNotification(t, listener); n.Payload != fmt.Sprintf("b%d", i) {
			t.Fatalf("notification %d of the burst = %q", i, n.Payload)
		}
	}

	// The listener's own notification names its own process ID, as
	// PostgreSQL names the sender; it arrives with its own statement.
	exec(t, listener, "NOTIFY ln_chan, 'self'", simple)
	if n := waitNotification(t, listener); n.Payload != "self" || n.PID != listener.PgConn().PID() {
		t.Errorf("own notification = %q from PID %d, want \"self\" from %d", n.Payload, n.PID, listener.PgConn().PID())
	}

	// The session goes on, in both protocols (LISTEN keeps it on the
	// default node's connection: statements for other workers get 0A000,
	// as documented).
	exec(t, sender, "CREATE TABLE ln_local (k int)", simple)
	t.Cleanup(func() { _, _ = sender.Exec(context.Background(), "DROP TABLE IF EXISTS ln_local", simple) })
	exec(t, listener, "INSERT INTO ln_local VALUES (1), (2)", simple)
	var cnt int
	if err := listener.QueryRow(ctx, "SELECT count(*) FROM ln_local WHERE k <= $1", 2).Scan(&cnt); err != nil || cnt != 2 {
		t.Errorf("count on the listening session = %d, %v", cnt, err)
	}

	// Waiting with a deadline that passes, then a notification: the
	// watcher stopped at the client's next message leaves nothing half read.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = listener.WaitForNotification(short)
	cancel()
	if err == nil {
		t.Fatal("a notification nobody sent")
	}
	exec(t, listener, "SELECT 1", simple)
	exec(t, other, "NOTIFY ln_chan, 'after'", simple)
	if n := waitNotification(t, listener); n.Payload != "after" {
		t.Errorf("payload after an idle wait = %q", n.Payload)
	}
	exec(t, listener, "UNLISTEN *", simple)
	exec(t, sender, "NOTIFY ln_chan, 'unheard'", simple)
	short, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
	if n, err := listener.WaitForNotification(short); err == nil {
		t.Errorf("notification %q after UNLISTEN *", n.Payload)
	}
	cancel()
}
