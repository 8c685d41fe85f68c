package coordinator_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestRecoveryIgnoresClientSettings: recovery takes its connections from
// the pools it shares with client sessions of the same user; a client's
// settings left on a pooled connection (default_transaction_read_only
// here) do not reach it: the prepared transaction it must roll back is
// rolled back.
func TestRecoveryIgnoresClientSettings(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, func(c *coordinator.Config) {
		c.PoolSize = 1
		c.RecoveryInterval = -1
	})
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	c := connect(t, srv.Addr())
	exec(t, c, "SET default_transaction_read_only = on", simple)
	exec(t, c, "SET statement_timeout = '1ms'", simple)
	// The pooled connection now has the settings (on a loaded machine
	// SELECT 1 itself may take more than 1 ms: canceled, settings applied).
	if _, err := c.Exec(ctx, "SELECT 1", simple); err != nil && sqlState(err) != "57014" {
		t.Fatalf("SELECT 1: %v", err)
	}

	w := connect(t, cl.Servers[0].Addr())
	var b [8]byte
	_, _ = rand.Read(b[:])
	gid := "pgfleet_test_" + hex.EncodeToString(b[:]) + "_1"
	exec(t, w, "BEGIN; SELECT txid_current(); PREPARE TRANSACTION '"+gid+"'", simple)
	t.Cleanup(func() { _, _ = w.Exec(context.Background(), "ROLLBACK PREPARED '"+gid+"'", simple) })
	time.Sleep(1100 * time.Millisecond)
	srv.RecoverPrepared(ctx, 0)
	var n int
	if err := w.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_xacts WHERE gid = $1", gid).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("the undecided prepared transaction is still there after recovery under a client's settings")
	}
}
