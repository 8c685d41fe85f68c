package coordinator_test

import (
	"context"
	"strings"
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
	// COPY leaving the distribution column out: its default, NULL or
	// 23502 on PostgreSQL; refused (it was 23502).
	_, err := c.PgConn().CopyFrom(ctx, strings.NewReader("x\n"), "COPY nd_t (v) FROM STDIN")
	wantRefusal(t, "COPY without the distribution column", err)
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

// TestLocalTableBesideDistributed: a statement that reads a distributed or
// reference table and a table that is neither (a local table, a temporary
// table: they exist on the default node only) was sent where the shards
// are and failed with 42P01 there, where PostgreSQL answers. A read beside
// distributed tables is gathered to the default node, one beside reference
// tables only reads the default node's copies (PostgreSQL's rows); a write,
// and a temporary table in a pinned session, are refused with 0A000 and a
// hint. FOR UPDATE OF <alias>
// is not such a table.
func TestLocalTableBesideDistributed(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	plain := oracleDB(t, cl.Servers[1].Addr(), "localoracle")
	ctx := context.Background()
	exec(t, plain, "DROP TABLE IF EXISTS lb_d, lb_r, lb_local")
	testTable(t, c, "lb_d", "(id int PRIMARY KEY, v int)", "SELECT create_distributed_table('lb_d', 'id', shard_count => 4)")
	testTable(t, c, "lb_r", "(id int PRIMARY KEY, name text)", "SELECT create_reference_table('lb_r')")
	for _, conn := range []*pgx.Conn{c, plain} {
		exec(t, conn, "DROP TABLE IF EXISTS lb_local")
		exec(t, conn, "CREATE TABLE lb_local (id int, w text)")
		exec(t, conn, "INSERT INTO lb_local VALUES (1, 'one'), (2, 'two'), (7, 'seven')", pgx.QueryExecModeSimpleProtocol)
	}
	exec(t, plain, "CREATE TABLE lb_d (id int PRIMARY KEY, v int)")
	exec(t, plain, "CREATE TABLE lb_r (id int PRIMARY KEY, name text)")
	t.Cleanup(func() {
		_, _ = plain.Exec(ctx, "DROP TABLE IF EXISTS lb_d, lb_r, lb_local")
		_, _ = c.Exec(ctx, "DROP TABLE IF EXISTS lb_local")
	})
	for _, conn := range []*pgx.Conn{c, plain} {
		exec(t, conn, "INSERT INTO lb_d SELECT g, g * 10 FROM generate_series(1, 20) g", pgx.QueryExecModeSimpleProtocol)
		exec(t, conn, "INSERT INTO lb_r VALUES (1, 'r1'), (7, 'r7')", pgx.QueryExecModeSimpleProtocol)
	}
	refJoin := "SELECT count(*) FROM lb_r r JOIN lb_local l USING (id)"
	compareOracle(t, c, plain, []string{
		"SELECT d.v, l.w FROM lb_d d JOIN lb_local l USING (id) WHERE d.id = 7",
		"SELECT count(*) FROM lb_d d JOIN lb_local l USING (id)",
		"SELECT count(*) FROM lb_d WHERE id IN (SELECT id FROM lb_local)",
		refJoin,
		"SELECT * FROM lb_d a WHERE id = 3 FOR UPDATE OF a",
		"SELECT count(*) FROM lb_local",
		"SELECT v FROM lb_d WHERE id = 7",
	}, nil)
	for _, q := range []string{"UPDATE lb_d SET v = v + 1 WHERE id = 7 AND EXISTS (SELECT 1 FROM lb_local l WHERE l.id = 7)"} {
		_, err := c.Exec(ctx, q, pgx.QueryExecModeSimpleProtocol)
		wantRefusal(t, q, err)
	}
	// A temporary table (its session is pinned to its connection).
	tc := connect(t, srv.Addr())
	exec(t, tc, "CREATE TEMP TABLE lb_temp (id int)")
	q := "SELECT count(*) FROM lb_d d JOIN lb_temp t USING (id)"
	_, err := tc.Exec(ctx, q, pgx.QueryExecModeSimpleProtocol)
	wantRefusal(t, q, err)
}
