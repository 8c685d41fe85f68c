package coordinator_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestSettingsOnlyFunctionsMultiShard: a multi-shard UPDATE calling
// built-in functions PostgreSQL marks STABLE for their settings alone
// (date_trunc of a timestamptz, to_char, concat: Django's TruncMonth and
// Concat) runs, with the values PostgreSQL computes under the session's
// TimeZone; a STABLE function of the user's, and now() in a block, stay
// refused. They
// were refused (0A000).
func TestSettingsOnlyFunctionsMultiShard(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	ctx := context.Background()
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	t.Cleanup(func() { _, _ = c.Exec(context.Background(), "DROP FUNCTION IF EXISTS so_f(text)", simple) })
	freshTables(t, c, []string{"so_d"},
		"CREATE TABLE so_d (id int PRIMARY KEY, ts timestamptz, label text)",
		"INSERT INTO so_d SELECT g, timestamptz '2024-03-31 23:30:00+00' + g * interval '1 hour', 'n' || g FROM generate_series(1, 20) g",
		"SELECT create_distributed_table('so_d', 'id', shard_count => 4)",
		"CREATE OR REPLACE FUNCTION so_f(text) RETURNS text STABLE LANGUAGE sql AS $$ SELECT $1 || current_setting('application_name') $$",
		"SET TimeZone = 'Asia/Tokyo'")
	for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeExec} {
		for _, s := range []string{
			"UPDATE so_d SET ts = date_trunc('month', ts) WHERE id % 2 = 0",
			"UPDATE so_d SET label = concat(label, '@', to_char(ts, 'YYYY-MM-DD HH24'), '/', date_part('hour', ts)) WHERE id % 2 = 1",
		} {
			if _, err := c.Exec(ctx, s, mode); err != nil {
				t.Errorf("%v: %s: %v", mode, s, err)
			}
		}
		if _, err := c.Exec(ctx, "UPDATE so_d SET label = so_f(label) WHERE id > 0", mode); sqlState(err) != "0A000" {
			t.Errorf("%v: a STABLE function of the user's: %v, want 0A000", mode, err)
		}
		exec(t, c, "BEGIN", simple)
		exec(t, c, "UPDATE so_d SET label = label WHERE id = 1", simple)
		if _, err := c.Exec(ctx, "UPDATE so_d SET ts = now() WHERE id > 0", mode); sqlState(err) != "0A000" {
			t.Errorf("%v: now() in a block: %v, want 0A000", mode, err)
		}
		exec(t, c, "ROLLBACK", simple)
	}
	// Under Asia/Tokyo: 2024-03-31 23:30 UTC + 2 h is April 1 in Tokyo.
	if got := queryString(t, c, "SELECT ts::text FROM so_d WHERE id = 2", simple); got != "2024-04-01 00:00:00+09" {
		t.Errorf("date_trunc under the session's TimeZone: %s", got)
	}
	if got := queryString(t, c, "SELECT label FROM so_d WHERE id = 1", simple); got != "n1@2024-04-01 09/9@2024-04-01 09/9" {
		t.Errorf("concat, to_char, date_part: %s", got)
	}
}
