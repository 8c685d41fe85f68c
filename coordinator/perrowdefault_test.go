package coordinator_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestPerRowDefaultMultiShard: a multi-row INSERT over several shards, and
// a multi-shard UPDATE, whose rows take a gen_random_uuid() default (Rails'
// uuid columns) or call it beside other functions, run as on PostgreSQL,
// which computes it once per row too: every row gets its own value. They
// were refused (0A000 "each worker would compute its own value"). A
// reference table's copies would differ, so a write to one taking such a
// default is still refused.
func TestPerRowDefaultMultiShard(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	ctx := context.Background()
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	freshTables(t, c, []string{"prd_d", "prd_r"},
		"CREATE TABLE prd_d (id bigint PRIMARY KEY, note text, tok uuid NOT NULL DEFAULT gen_random_uuid())",
		"SELECT create_distributed_table('prd_d', 'id', shard_count => 4)",
		"CREATE TABLE prd_r (id int PRIMARY KEY, tok uuid DEFAULT gen_random_uuid())",
		"SELECT create_reference_table('prd_r')")
	for i, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeExec} {
		base := int64(i * 100)
		tag, err := c.Exec(ctx, "INSERT INTO prd_d (id, note) VALUES ($1, 'A'), ($2, 'B'), ($3, 'C'), ($4, 'D'), ($5, 'E'), ($6, 'F')",
			mode, base+1, base+2, base+3, base+4, base+5, base+6)
		if err != nil || tag.RowsAffected() != 6 {
			t.Fatalf("%v: a multi-row INSERT taking a gen_random_uuid() default: %v, %v", mode, tag, err)
		}
	}
	if _, err := c.Exec(ctx, "UPDATE prd_d SET tok = gen_random_uuid(), note = lower(note) WHERE id % 2 = 0", simple); err != nil {
		t.Errorf("a multi-shard UPDATE calling gen_random_uuid() and lower(): %v", err)
	}
	if _, err := c.Exec(ctx, "UPDATE prd_d SET tok = DEFAULT WHERE id % 3 = 0", pgx.QueryExecModeExec); err != nil {
		t.Errorf("a multi-shard UPDATE SET tok = DEFAULT: %v", err)
	}
	if got := queryString(t, c, "SELECT count(*)::text || ' ' || count(DISTINCT tok)::text || ' ' || string_agg(note, '' ORDER BY id) FROM prd_d"); got != "12 12 AbCdEfAbCdEf" {
		t.Errorf("rows, distinct tokens, notes: %s, want 12 12 AbCdEfAbCdEf", got)
	}
	if _, err := c.Exec(ctx, "INSERT INTO prd_r (id) VALUES (1)", simple); sqlState(err) != "0A000" {
		t.Errorf("a reference-table write taking a gen_random_uuid() default: %v, want 0A000", err)
	}
	// A function of the user's by the same name is not the built-in
	// (adversary 156: a volatile one ran once per worker).
	for _, s := range []string{
		"DROP SCHEMA IF EXISTS prd_evil CASCADE",
		"CREATE SCHEMA prd_evil",
		"CREATE FUNCTION prd_evil.gen_random_uuid() RETURNS uuid VOLATILE LANGUAGE sql AS $$ SELECT md5(txid_current()::text)::uuid $$",
		"ALTER TABLE prd_d ADD COLUMN tok2 uuid",
		"ALTER TABLE prd_d ALTER COLUMN tok2 SET DEFAULT prd_evil.gen_random_uuid()",
	} {
		exec(t, c, s, simple)
	}
	t.Cleanup(func() { _, _ = c.Exec(context.Background(), "DROP SCHEMA IF EXISTS prd_evil CASCADE", simple) })
	if _, err := c.Exec(ctx, "INSERT INTO prd_d (id, note) VALUES (1001, 'x'), (1002, 'y'), (1003, 'z'), (1004, 'w')", simple); sqlState(err) != "0A000" {
		t.Errorf("a multi-shard INSERT taking the default prd_evil.gen_random_uuid(): %v, want 0A000", err)
	}
	if _, err := c.Exec(ctx, "UPDATE prd_d SET tok = prd_evil.gen_random_uuid() WHERE id > 0", simple); sqlState(err) != "0A000" {
		t.Errorf("a multi-shard UPDATE calling prd_evil.gen_random_uuid(): %v, want 0A000", err)
	}
}
