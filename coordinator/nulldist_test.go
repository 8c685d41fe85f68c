package coordinator_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestNullDistributionValues: an INSERT whose distribution value is NULL
// answers as PostgreSQL does, in both protocols and in multi-row INSERTs
// over several shards: a nullable column stores the row (on one shard;
// no equality finds it, IS NULL over every shard does), a NOT NULL one
// fails with 23502; COPY too. It was 23502 for both. Leaving the column out is
// refused with a hint (PostgreSQL would store its default or NULL).
func TestNullDistributionValues(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	plain := oracleDB(t, cl.Servers[1].Addr(), "nulldistoracle")
	ctx := context.Background()
	exec(t, plain, "DROP TABLE IF EXISTS nd_t, nd_nn, nd_u")
	testTable(t, c, "nd_t", "(id int, v text)", "SELECT create_distributed_table('nd_t', 'id', shard_count => 4)")
	testTable(t, c, "nd_u", "(id int, w text)", "SELECT create_distributed_table('nd_u', 'id', colocate_with => 'nd_t')")
	testTable(t, c, "nd_nn", "(id int NOT NULL, v text)", "SELECT create_distributed_table('nd_nn', 'id', shard_count => 4)")
	exec(t, plain, "CREATE TABLE nd_t (id int, v text)")
	exec(t, plain, "CREATE TABLE nd_u (id int, w text)")
	exec(t, plain, "CREATE TABLE nd_nn (id int NOT NULL, v text)")
	t.Cleanup(func() { _, _ = plain.Exec(ctx, "DROP TABLE IF EXISTS nd_t, nd_nn, nd_u") })
	for _, conn := range []*pgx.Conn{c, plain} {
		if _, err := conn.Exec(ctx, "INSERT INTO nd_t (id, v) VALUES ($1, $2)", nil, "extended"); err != nil {
			t.Fatalf("extended NULL: %v", err)
		}
	}
	for _, conn := range []*pgx.Conn{c, plain} {
		if _, err := conn.CopyFrom(ctx, pgx.Identifier{"nd_t"}, []string{"id", "v"}, pgx.CopyFromRows([][]any{{nil, "copied"}, {int32(9), "nine"}})); err != nil {
			t.Fatalf("COPY with a NULL key: %v", err)
		}
	}
	compareOracle(t, c, plain, []string{
		"INSERT INTO nd_t (id, v) VALUES (NULL, 'simple')",
		"INSERT INTO nd_t (id, v) VALUES (1, 'a'), (NULL, 'multi'), (2, 'b'), (3, 'c')",
		"INSERT INTO nd_u VALUES (NULL, 'u'), (1, 'u1')",
		"INSERT INTO nd_nn (id, v) VALUES (NULL, 'x')",
		"INSERT INTO nd_nn (id, v) VALUES (1, 'a'), (NULL, 'x'), (2, 'b')",
		"SELECT count(*), count(id) FROM nd_t",
		"SELECT v FROM nd_t WHERE id IS NULL ORDER BY v",
		"SELECT count(*) FROM nd_t WHERE id = NULL",
		"SELECT count(*) FROM nd_t t JOIN nd_u u ON t.id = u.id",
		"SELECT count(*) FROM nd_t t JOIN nd_u u ON t.id IS NOT DISTINCT FROM u.id",
		"SELECT id, count(*) FROM nd_t GROUP BY id ORDER BY id NULLS FIRST",
		"UPDATE nd_t SET v = v || '!' WHERE id IS NULL",
		"DELETE FROM nd_t WHERE id IS NULL AND v = 'simple!'",
		"SELECT v FROM nd_t WHERE id IS NULL ORDER BY v",
		"SELECT count(*) FROM nd_nn",
		"INSERT INTO nd_t (v) VALUES ('left out')",
	}, map[string]bool{"INSERT INTO nd_t (v) VALUES ('left out')": true})
}
