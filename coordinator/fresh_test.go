package coordinator_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// freshTables drops tables (undistributed first), now and when the test
// ends, and runs setup in the simple protocol: the tables, their
// distribution, their rows.
func freshTables(t *testing.T, c *pgx.Conn, tables []string, setup ...string) {
	t.Helper()
	simple := pgx.QueryExecModeSimpleProtocol
	drop := func() {
		for _, tb := range tables {
			_, _ = c.Exec(context.Background(), "SELECT undistribute_table('"+tb+"')", simple)
		}
		for _, tb := range tables {
			_, _ = c.Exec(context.Background(), "DROP TABLE IF EXISTS "+tb+" CASCADE", simple)
		}
	}
	drop()
	t.Cleanup(drop)
	for _, s := range setup {
		exec(t, c, s, simple)
	}
}
