package coordinator_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestScalarSubqueriesOverReferenceTables: a query made only of scalar
// subqueries over two reference tables (issue 10 found it crashing the
// session with XX000) answers what PostgreSQL answers, in both protocols.
func TestScalarSubqueriesOverReferenceTables(t *testing.T) {
	cl := pgtest.Shared(t)
	co := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, co.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	exec(t, c, "DROP TABLE IF EXISTS sq_ref1, sq_ref2, sq_dist")
	exec(t, c, "CREATE TABLE sq_ref1 (id int PRIMARY KEY)")
	exec(t, c, "CREATE TABLE sq_ref2 (id int PRIMARY KEY)")
	exec(t, c, "CREATE TABLE sq_dist (id int PRIMARY KEY, v int)")
	exec(t, c, "INSERT INTO sq_ref1 SELECT generate_series(1, 3)")
	exec(t, c, "INSERT INTO sq_ref2 SELECT generate_series(1, 5)")
	exec(t, c, "INSERT INTO sq_dist SELECT g, g FROM generate_series(1, 7) g")
	exec(t, c, "SELECT create_reference_table('sq_ref1')", simple)
	exec(t, c, "SELECT create_reference_table('sq_ref2')", simple)
	exec(t, c, "SELECT create_distributed_table('sq_dist', 'id')", simple)
	t.Cleanup(func() {
		for _, q := range []string{"SELECT undistribute_table('sq_ref1')", "SELECT undistribute_table('sq_ref2')",
			"SELECT undistribute_table('sq_dist')", "DROP TABLE IF EXISTS sq_ref1, sq_ref2, sq_dist"} {
			_, _ = c.Exec(ctx, q, simple)
		}
	})
	for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeCacheStatement} {
		var a, b int64
		err := c.QueryRow(ctx, "SELECT (SELECT count(*) FROM sq_ref1), (SELECT count(*) FROM sq_ref2)", mode).Scan(&a, &b)
		if err != nil || a != 3 || b != 5 {
			t.Errorf("mode %v: got %d, %d, %v; want 3, 5", mode, a, b, err)
		}
		var n int64
		if err := c.QueryRow(ctx, "WITH x AS (SELECT count(*) AS c FROM sq_ref2) SELECT c FROM x", mode).Scan(&n); err != nil || n != 5 {
			t.Errorf("mode %v: CTE over a reference table: %d, %v; want 5", mode, n, err)
		}
		if err := c.QueryRow(ctx, "SELECT sum(id) FROM (SELECT id FROM sq_ref2 WHERE id > 1) s", mode).Scan(&n); err != nil || n != 14 {
			t.Errorf("mode %v: FROM-subquery over a reference table: %d, %v; want 14", mode, n, err)
		}
		// With a distributed table among them it is answered or refused
		// (0A000), never a crash.
		err = c.QueryRow(ctx, "SELECT (SELECT count(*) FROM sq_ref1), (SELECT count(*) FROM sq_dist)", mode).Scan(&a, &b)
		if err != nil && sqlState(err) != "0A000" {
			t.Errorf("mode %v: ref and dist scalar subqueries: %v, want the answer or 0A000", mode, err)
		} else if err == nil && (a != 3 || b != 7) {
			t.Errorf("mode %v: got %d, %d; want 3, 7", mode, a, b)
		}
		if err := c.QueryRow(ctx, "SELECT 1", mode).Scan(&a); err != nil {
			t.Fatalf("mode %v: the session did not survive: %v", mode, err)
		}
	}
}
