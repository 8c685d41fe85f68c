package coordinator_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestSequenceSessionState: currval() and lastval() give what PostgreSQL
// gives, or 0A000, never another connection's value: before any nextval
// and after DISCARD SEQUENCES or DISCARD ALL they are "not yet defined"
// (55000) as on PostgreSQL, also on a pooled connection where another
// client called nextval; after statements that may have called nextval
// they are refused.
func TestSequenceSessionState(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(1))
	ctx := context.Background()
	admin := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	exec(t, admin, "DROP SEQUENCE IF EXISTS sq_a", simple)
	exec(t, admin, "CREATE SEQUENCE sq_a", simple)
	t.Cleanup(func() { _, _ = admin.Exec(ctx, "DROP SEQUENCE IF EXISTS sq_a", simple) })
	oracle := connect(t, cl.Servers[0].Addr())

	for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeExec, pgx.QueryExecModeCacheStatement} {
		// Another client's nextval on the one pooled connection.
		other := connect(t, srv.Addr())
		var v int64
		if err := other.QueryRow(ctx, "SELECT nextval('sq_a')", mode).Scan(&v); err != nil {
			t.Fatal(err)
		}
		other.Close(ctx)

		c := connect(t, srv.Addr())
		state := func(what, sql string, want string) {
			t.Helper()
			var got int64
			err := c.QueryRow(ctx, sql, mode).Scan(&got)
			if sqlState(err) != want {
				t.Errorf("%v %s: %s = %d, %v; want SQLSTATE %q", mode, what, sql, got, err, want)
			}
			// The oracle: a plain PostgreSQL session in the same state
			// (want 0A000 stands for a value on PostgreSQL).
			if want == "55000" {
				if _, err := oracle.Exec(ctx, "DISCARD SEQUENCES"); err != nil {
					t.Fatal(err)
				}
				if err := oracle.QueryRow(ctx, sql).Scan(&got); sqlState(err) != "55000" {
					t.Errorf("oracle %s: %v", sql, err)
				}
			}
		}
		state("fresh session", "SELECT currval('sq_a')", "55000")
		// The statement might have called nextval as well.
		state("after a currval", "SELECT lastval()", "0A000")
		exec(t, c, "DISCARD SEQUENCES", mode)
		state("after DISCARD SEQUENCES", "SELECT LASTVAL()", "55000")
		exec(t, c, "DISCARD SEQUENCES", mode)
		state("after DISCARD SEQUENCES", "SELECT \"currval\"('sq_a')", "55000")
		exec(t, c, "DISCARD ALL", simple)
		var a, b int64
		if err := c.QueryRow(ctx, "SELECT nextval('sq_a'), currval('sq_a')", mode).Scan(&a, &b); err != nil || a != b || a <= v {
			t.Errorf("%v: nextval and currval in one statement: %d, %d, %v", mode, a, b, err)
		}
		state("after nextval", "SELECT currval('sq_a')", "0A000")
		state("after nextval", "SELECT pg_catalog.lastval()", "0A000")
		exec(t, c, "DISCARD ALL", simple)
		exec(t, c, "SET work_mem = '5MB'", mode)
		exec(t, c, "BEGIN", mode)
		state("after SET and BEGIN", "SELECT currval('sq_a')", "55000")
		exec(t, c, "ROLLBACK", mode)
		exec(t, c, "DISCARD SEQUENCES", mode)
		exec(t, c, "SELECT 1", mode) // any statement may call nextval (a DEFAULT, a function)
		state("after a statement", "SELECT currval('sq_a')", "0A000")
		c.Close(ctx)
	}
}
