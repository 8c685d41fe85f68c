package coordinator_test

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestCitusViewsQuotedNames: citus_tables and citus_shards list a table
// whose name needs quoting ("CamelT") under its own name, and every reader's
// query of them still answers (adversary: one such table made both views
// fail for everyone with 42P01, relation "public.camelt").
func TestCitusViewsQuotedNames(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	testTable(t, c, `"CamelT"`, "(id int PRIMARY KEY)", `SELECT create_distributed_table('"CamelT"', 'id', shard_count => 3)`)
	testTable(t, c, "plain_ct", "(id int PRIMARY KEY)", "SELECT create_reference_table('plain_ct')")
	if got := queryString(t, c, `SELECT string_agg(table_name::text || ':' || shard_count, ',' ORDER BY table_name::text)
		FROM citus_tables WHERE table_name::text IN ('"CamelT"', 'plain_ct')`, simple); got != `"CamelT":3,plain_ct:1` {
		t.Errorf("citus_tables: %q", got)
	}
	if got := queryString(t, c, `SELECT count(*)::text FROM citus_shards WHERE table_name = '"CamelT"'::regclass`, simple); got != "3" {
		t.Errorf("citus_shards of \"CamelT\": %s, want 3", got)
	}
	if got := queryString(t, c, "SELECT count(*)::text FROM citus_tables WHERE table_name IS NULL", simple); got != "0" {
		t.Errorf("citus_tables rows without a table: %s", got)
	}
}
