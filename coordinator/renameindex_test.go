package coordinator_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestRenameIndex: ALTER INDEX ... RENAME of a distributed or reference
// table's index (Rails renames the indexes named after a column it
// renames, in the migration's block) renames every shard's index too, as
// the primary key's, whose constraint follows: each is then dropped by its
// new name, and the old one is gone. It was refused (0A000).
func TestRenameIndex(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	ctx := context.Background()
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	freshTables(t, c, []string{"rx_d", "rx_r"},
		"CREATE TABLE rx_d (id bigint PRIMARY KEY, email text)",
		"CREATE INDEX index_rx_d_on_email ON rx_d (email)",
		"SELECT create_distributed_table('rx_d', 'id', shard_count => 4)",
		"CREATE UNIQUE INDEX rx_d_id_email ON rx_d (id, email)",
		"CREATE TABLE rx_r (id int PRIMARY KEY, v text)",
		"CREATE INDEX rx_r_v ON rx_r (v)",
		"SELECT create_reference_table('rx_r')")
	r := txnRunner{t: t, c: c}
	r.must("BEGIN")
	r.must("ALTER TABLE rx_d RENAME COLUMN email TO email_address")
	r.must("ALTER INDEX index_rx_d_on_email RENAME TO index_rx_d_on_email_address")
	r.must("COMMIT")
	r = txnRunner{t: t, c: c, extended: true}
	r.must("ALTER INDEX rx_d_id_email RENAME TO rx_d_id_email_address")
	r.must("ALTER INDEX rx_d_pkey RENAME TO rx_d_pk")
	r.must("ALTER INDEX rx_r_v RENAME TO rx_r_v2")
	exec(t, c, "INSERT INTO rx_d SELECT g, 'e' || g FROM generate_series(1, 20) g", simple)
	if _, err := c.Exec(ctx, "INSERT INTO rx_d VALUES (3, 'x')", simple); sqlState(err) != "23505" {
		t.Errorf("a duplicate key under the renamed primary key: %v, want 23505", err)
	}
	if _, err := c.Exec(ctx, "DROP INDEX index_rx_d_on_email", simple); sqlState(err) != "42704" {
		t.Errorf("the old name: %v, want 42704", err)
	}
	for _, s := range []string{
		"DROP INDEX index_rx_d_on_email_address",
		"DROP INDEX rx_d_id_email_address",
		"ALTER TABLE rx_d DROP CONSTRAINT rx_d_pk",
		"DROP INDEX rx_r_v2",
	} {
		exec(t, c, s, simple)
	}
	if got := queryString(t, c, "SELECT count(*)::text FROM rx_d"); got != "20" {
		t.Errorf("rows: %s, want 20", got)
	}
}
