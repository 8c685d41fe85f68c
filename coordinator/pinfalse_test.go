package coordinator_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestNoPinAfterRefusedCopyInTransaction: a COPY refused inside a
// transaction block after SET LOCAL, and the failed transaction's end,
// leave the session as PostgreSQL leaves it: multi-shard statements and
// COPY work afterwards (they were refused for good, the session taken for
// one whose state a function changed).
func TestNoPinAfterRefusedCopyInTransaction(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	c := connect(t, srv.Addr())
	testTable(t, c, "pf_d", "(k int PRIMARY KEY)", "SELECT create_distributed_table('pf_d', 'k', shard_count => 4)")
	exec(t, c, "BEGIN", simple)
	exec(t, c, "SET LOCAL work_mem = '5MB'", simple)
	_, err := c.PgConn().CopyFrom(ctx, strings.NewReader("1\n"), "COPY pf_d (k) FROM STDIN")
	t.Logf("COPY in a transaction block: %v", err)
	if _, err := c.Exec(ctx, "SELECT 1", simple); err == nil {
		t.Logf("SELECT after the COPY ran")
	}
	exec(t, c, "COMMIT", simple)
	if _, err := c.PgConn().CopyFrom(ctx, strings.NewReader("2\n3\n"), "COPY pf_d (k) FROM STDIN"); err != nil {
		t.Errorf("COPY after the transaction: %v", err)
	}
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM pf_d", simple).Scan(&n); err != nil || n < 2 {
		t.Errorf("multi-shard count after the transaction: %d, %v", n, err)
	}
	var wm string
	if err := c.QueryRow(ctx, "SHOW work_mem", simple).Scan(&wm); err != nil || wm != "4MB" {
		t.Errorf("work_mem after the transaction: %q, %v; want 4MB", wm, err)
	}

	// User code after SET LOCAL in a transaction that rolls back: the
	// snapshot taken before it shows the SET LOCAL, gone after the
	// ROLLBACK with everything the transaction set; the session is not
	// taken for one whose state a function changed.
	exec(t, c, "CREATE OR REPLACE FUNCTION pf_f() RETURNS int LANGUAGE plpgsql AS 'BEGIN RETURN 1; END'", simple)
	t.Cleanup(func() { _, _ = c.Exec(context.Background(), "DROP FUNCTION IF EXISTS pf_f()", simple) })
	exec(t, c, "BEGIN", simple)
	exec(t, c, "SET LOCAL work_mem = '5MB'", simple)
	exec(t, c, "SELECT pf_f()", simple)
	exec(t, c, "ROLLBACK", simple)
	if err := c.QueryRow(ctx, "SELECT count(*) FROM pf_d", simple).Scan(&n); err != nil || n < 2 {
		t.Errorf("multi-shard count after a rolled-back transaction with user code: %d, %v", n, err)
	}
	// A setting a function made in a transaction that committed (AND
	// CHAIN) stays after the chained transaction's ROLLBACK.
	exec(t, c, "CREATE OR REPLACE FUNCTION pf_g() RETURNS text LANGUAGE sql AS $$ SELECT set_config('work_mem', '7MB', false) $$", simple)
	t.Cleanup(func() { _, _ = c.Exec(context.Background(), "DROP FUNCTION IF EXISTS pf_g()", simple) })
	for _, q := range []string{"BEGIN", "SELECT pf_g()", "COMMIT AND CHAIN", "ROLLBACK"} {
		exec(t, c, q, simple)
	}
	if err := c.QueryRow(ctx, "SHOW work_mem", simple).Scan(&wm); err != nil || wm != "7MB" {
		t.Errorf("work_mem after a function's set_config, COMMIT AND CHAIN, ROLLBACK: %q, %v; want 7MB", wm, err)
	}
	// A function that does change the session's settings still keeps the
	// session on its connection, after the ROLLBACK of another transaction.
	exec(t, c, "SELECT set_config('work_mem', '6MB', false)", simple)
	if err := c.QueryRow(ctx, "SHOW work_mem", simple).Scan(&wm); err != nil || wm != "6MB" {
		t.Errorf("work_mem after set_config: %q, %v; want 6MB", wm, err)
	}
}
