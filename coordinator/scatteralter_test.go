package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestScatterAfterAlter: after an ALTER TABLE changes a column's type, a
// multi-shard statement of the extended protocol that the client prepares
// afterwards answers with the new type, as on PostgreSQL, on the
// connection that ran it before and on a new one; one the client prepared
// before fails with PostgreSQL's 0A000 (found by an adversary round: the
// first execution of each statement after the ALTER failed with 0A000,
// its description shared from before).
func TestScatterAfterAlter(t *testing.T) {
	cl := pgtest.Start(t, 2)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	direct := connect(t, cl.Servers[0].Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	rename := twinTables(t, c, direct, "sa", `
CREATE TABLE %[1]s_t (id int PRIMARY KEY, k int);
INSERT INTO %[1]s_t SELECT g, g * 7 FROM generate_series(1, 100) g;`, []string{"t"}, []string{
		"SELECT create_distributed_table('sa_t', 'id', shard_count => 8)",
	})
	queries := []string{
		"SELECT id, k FROM {t} WHERE k > $1 ORDER BY id LIMIT 3",
		"SELECT k % 3, sum(k), max(k) FROM {t} WHERE id > $1 GROUP BY 1 ORDER BY 1",
	}
	// Named statements prepared before the ALTER, on both.
	cBefore := connect(t, srv.Addr())
	dBefore := connect(t, cl.Servers[0].Addr())
	run := func(conn *pgx.Conn, mode pgx.QueryExecMode, sql string) (scatterResult, error) {
		return scatterQuery(ctx, conn, mode, sql, []any{int64(5)})
	}
	for _, q := range queries {
		qC, qD := rename(q)
		for i := 0; i < 3; i++ {
			if _, err := run(c, pgx.QueryExecModeExec, qC); err != nil {
				t.Fatalf("%s before the ALTER: %v", q, err)
			}
		}
		if _, err := run(cBefore, pgx.QueryExecModeCacheStatement, qC); err != nil {
			t.Fatal(err)
		}
		if _, err := run(dBefore, pgx.QueryExecModeCacheStatement, qD); err != nil {
			t.Fatal(err)
		}
	}
	aC, aD := rename("ALTER TABLE {t} ALTER COLUMN k TYPE int8")
	exec(t, c, aC, simple)
	exec(t, direct, aD, simple)

	fresh := connect(t, srv.Addr())
	for _, q := range queries {
		qC, qD := rename(q)
		for _, tc := range []struct {
			conn *pgx.Conn
			mode pgx.QueryExecMode
			what string
		}{
			{c, pgx.QueryExecModeExec, "unnamed, the same connection"},
			{c, pgx.QueryExecModeExec, "unnamed, the same connection again"},
			{fresh, pgx.QueryExecModeCacheStatement, "named, a new connection"},
			{fresh, pgx.QueryExecModeExec, "unnamed, a new connection"},
		} {
			want, err := run(direct, tc.mode, qD)
			if err != nil {
				t.Fatal(err)
			}
			got, err := run(tc.conn, tc.mode, qC)
			if err != nil {
				t.Errorf("%s after the ALTER (%s): %v", q, tc.what, err)
				continue
			}
			sameResult(t, fmt.Sprintf("%s (%s)", q, tc.what), got, want, true)
		}
		// Prepared before: PostgreSQL's own answer.
		_, errC := run(cBefore, pgx.QueryExecModeCacheStatement, qC)
		_, errD := run(dBefore, pgx.QueryExecModeCacheStatement, qD)
		if sqlState(errC) != sqlState(errD) {
			t.Errorf("%s prepared before the ALTER: %v, want %v", q, errC, errD)
		}
	}
}

// TestAlterThroughLaggingCoordinator: an ALTER TABLE sent through a
// coordinator that has not yet learnt (by gossip or its catalog poll) that
// the table was just distributed through another changes its shards too,
// not only the first worker's table (found while testing DDL through a
// second coordinator: the shards kept the old type).
func TestAlterThroughLaggingCoordinator(t *testing.T) {
	cl := pgtest.Start(t, 2)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	c2 := connect(t, pgtest.Coordinator(t, cl, nil).Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	exec(t, c2, "SELECT 1", simple) // c2's coordinator holds the catalog before the distribution
	exec(t, c, "CREATE TABLE la_t (id int PRIMARY KEY, k int); INSERT INTO la_t SELECT g, g FROM generate_series(1, 50) g", simple)
	exec(t, c, "SELECT create_distributed_table('la_t', 'id', shard_count => 4)", simple)
	t.Cleanup(func() { _, _ = c.Exec(ctx, "DROP TABLE IF EXISTS la_t", simple) })
	exec(t, c2, "ALTER TABLE la_t ALTER COLUMN k TYPE int8", simple)
	for i := range cl.Servers {
		w := connect(t, cl.Servers[i].Addr())
		for _, line := range queryStrings(t, w, "SELECT attrelid::regclass::text || ' ' || atttypid::regtype::text FROM pg_attribute WHERE attname = 'k' AND attrelid::regclass::text LIKE '%la_t%'") {
			if !strings.HasSuffix(line, " bigint") {
				t.Errorf("worker %d: %s, want bigint everywhere", i+1, line)
			}
		}
	}
	var sum int64
	if err := c.QueryRow(ctx, "SELECT sum(k) FROM la_t").Scan(&sum); err != nil || sum != 1275 {
		t.Errorf("sum(k) through the first coordinator: %d, %v; want 1275", sum, err)
	}
}
