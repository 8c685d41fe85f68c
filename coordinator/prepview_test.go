package coordinator_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestPreparedStatementsRefused: pg_prepared_statements, which on a pooled
// worker connection lists other sessions' statements under pgfleet's
// names, is refused with 0A000 in both protocols (found by pgx's suite:
// a deallocated statement stayed listed); the session goes on.
func TestPreparedStatementsRefused(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	ctx := context.Background()
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec, pgx.QueryExecModeCacheStatement} {
		for _, q := range []string{"SELECT count(*) FROM pg_prepared_statements", "select name from PG_CATALOG.Pg_Prepared_Statements", `SELECT * FROM "pg_prepared_statements"`} {
			var n any
			err := c.QueryRow(ctx, q, mode).Scan(&n)
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "0A000" || pe.Hint == "" {
				t.Errorf("%v %s: %v, want 0A000 with a hint", mode, q, err)
			}
		}
		var one int
		if err := c.QueryRow(ctx, "SELECT 1", mode).Scan(&one); err != nil || one != 1 {
			t.Errorf("%v: the session after the refusal: %v", mode, err)
		}
	}
}

// TestParseSeveralStatements: a Parse with several statements is 42601, as
// on PostgreSQL, also when they name distributed tables (it was 0A000).
func TestParseSeveralStatements(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	ctx := context.Background()
	exec(t, c, "DROP TABLE IF EXISTS pss_t", pgx.QueryExecModeSimpleProtocol)
	exec(t, c, "CREATE TABLE pss_t (id int PRIMARY KEY, n int)", pgx.QueryExecModeSimpleProtocol)
	exec(t, c, "SELECT create_distributed_table('pss_t', 'id')", pgx.QueryExecModeSimpleProtocol)
	t.Cleanup(func() {
		_, _ = c.Exec(context.Background(), "SELECT undistribute_table('pss_t')", pgx.QueryExecModeSimpleProtocol)
		_, _ = c.Exec(context.Background(), "DROP TABLE IF EXISTS pss_t", pgx.QueryExecModeSimpleProtocol)
	})
	for _, q := range []string{"BEGIN; UPDATE pss_t SET n = n WHERE id = 2; ROLLBACK", "BEGIN; SELECT 1; COMMIT"} {
		_, err := c.PgConn().Prepare(ctx, "", q, nil)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "42601" || pe.Message != "cannot insert multiple commands into a prepared statement" {
			t.Errorf("Parse of %q: %v, want PostgreSQL's 42601", q, err)
		}
	}
}
