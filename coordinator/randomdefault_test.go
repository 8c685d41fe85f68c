package coordinator_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestRandomUUIDDistributionDefault: an INSERT leaving a uuid distribution
// column to its gen_random_uuid() (or uuid-ossp's uuid_generate_v4())
// default (Rails' and TypeORM's uuid keys) gets a random UUID per row made
// by the coordinator, which routes the row by it, in both protocols, one
// row or several: RETURNING gives them, and each row is found by its key.
// It was refused (0A000). Other defaults stay refused.
func TestRandomUUIDDistributionDefault(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	ctx := context.Background()
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	t.Cleanup(func() { _, _ = c.Exec(context.Background(), "DROP SCHEMA IF EXISTS ru_evil CASCADE", simple) })
	freshTables(t, c, []string{"ru_a", "ru_b", "ru_c", "ru_d", "ru_e"},
		"DROP SCHEMA IF EXISTS ru_evil CASCADE",
		`CREATE EXTENSION IF NOT EXISTS "uuid-ossp"`,
		"CREATE TABLE ru_a (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), name text)",
		"SELECT create_distributed_table('ru_a', 'id', shard_count => 4)",
		"CREATE TABLE ru_b (id uuid PRIMARY KEY DEFAULT uuid_generate_v4(), name text)",
		"SELECT create_distributed_table('ru_b', 'id', shard_count => 4)",
		"CREATE TABLE ru_c (id uuid PRIMARY KEY DEFAULT '00000000-0000-4000-8000-000000000000', name text)",
		"SELECT create_distributed_table('ru_c', 'id', shard_count => 4)",
		"CREATE SCHEMA ru_evil",
		"CREATE FUNCTION ru_evil.gen_random_uuid() RETURNS uuid LANGUAGE sql AS $$ SELECT '00000000-0000-4000-8000-000000000001'::uuid $$",
		"CREATE TABLE ru_d (id uuid PRIMARY KEY DEFAULT ru_evil.gen_random_uuid(), name text)",
		"SELECT create_distributed_table('ru_d', 'id', shard_count => 4)",
		// A sequence column beside it (adversary 157: refused in the
		// extended protocol).
		"CREATE TABLE ru_e (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), name text, k bigserial)",
		"SELECT create_distributed_table('ru_e', 'id', shard_count => 4)")
	for _, table := range []string{"ru_a", "ru_b", "ru_e"} {
		n := 0
		for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeExec, pgx.QueryExecModeCacheStatement} {
			for _, sql := range []string{
				"INSERT INTO " + table + " (name) VALUES ($1) RETURNING id::text",
				"INSERT INTO " + table + " (name) VALUES ($1), ('two'), ('three'), ('four'), ('five') RETURNING id::text",
			} {
				rows, err := c.Query(ctx, sql, mode, "one")
				if err != nil {
					t.Fatalf("%s %v: %s: %v", table, mode, sql, err)
				}
				ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
				if err != nil {
					t.Fatalf("%s %v: %s: %v", table, mode, sql, err)
				}
				for _, id := range ids {
					n++
					if len(id) != 36 || id[14] != '4' {
						t.Errorf("%s %v: id %q is not a version 4 UUID", table, mode, id)
					}
					if got := queryString(t, c, "SELECT count(*)::text FROM "+table+" WHERE id = $1", pgx.QueryExecModeExec, id); got != "1" {
						t.Errorf("%s %v: rows with id %s: %s, want 1", table, mode, id, got)
					}
				}
			}
		}
		if got := queryString(t, c, "SELECT count(DISTINCT id)::text FROM "+table); got != "18" || n != 18 {
			t.Errorf("%s: distinct ids %s of %d rows, want 18", table, got, n)
		}
	}
	for _, table := range []string{"ru_c", "ru_d"} {
		if _, err := c.Exec(ctx, "INSERT INTO "+table+" (name) VALUES ('x')", simple); sqlState(err) != "0A000" {
			t.Errorf("%s: another default of the distribution column: %v, want 0A000", table, err)
		}
	}
}
