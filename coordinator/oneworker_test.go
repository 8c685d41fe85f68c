package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestOneWorkerWhole: with every shard of a table on one worker, a
// multi-shard query that groups, aggregates, sorts or limits runs whole
// there over the union of its shards, with no merge (planner.Scatter.
// Whole), and answers as PostgreSQL on an unsharded twin in every
// protocol; simple-protocol constants are bound there too, and a value
// its type refuses gets PostgreSQL's own error.
func TestOneWorkerWhole(t *testing.T) {
	cl := pgtest.Start(t, 1)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	direct := connect(t, cl.Servers[0].Addr())

	const schema = `
CREATE TABLE %[1]s_t (id bigint PRIMARY KEY, g int, v int, secret text);
INSERT INTO %[1]s_t SELECT i, i %% 6, CASE WHEN i %% 9 = 0 THEN NULL ELSE (i * 31) %% 500 - 200 END, 's' || i
	FROM generate_series(1, 600) i;`
	rename := twinTables(t, c, direct, "ow", schema, []string{"t"}, []string{
		"SELECT create_distributed_table('ow_t', 'id', shard_count => 12)",
	})
	extra := []struct {
		sql     string
		ordered bool
	}{
		{sql: "SELECT g, count(*) FROM {t} GROUP BY g HAVING count(*) > 99 ORDER BY g DESC LIMIT 2 OFFSET 1", ordered: true},
		{sql: "SELECT g, avg(v)::numeric(10,3), sum(v) FILTER (WHERE v > 0) FROM {t} GROUP BY g ORDER BY 1", ordered: true},
		{sql: "SELECT max(secret COLLATE \"C\"), min(v) FROM {t}"},
	}
	all := append(append(extra[:0:0], unionCases...), extra...)
	for _, tc := range all {
		sqlC, sqlD := rename(tc.sql)
		for _, mode := range scatterModes {
			for round := 0; round < 2; round++ {
				got, err := scatterQuery(ctx, c, mode, sqlC, nil)
				if err != nil {
					t.Errorf("%s (%v): %v", tc.sql, mode, err)
					break
				}
				want, err := scatterQuery(ctx, direct, mode, sqlD, nil)
				if err != nil {
					t.Fatalf("%s on PostgreSQL (%v): %v", tc.sql, mode, err)
				}
				sameResult(t, fmt.Sprintf("%s (%v)", tc.sql, mode), got, want, tc.ordered)
			}
		}
	}
	// No merge: the worker's statement is the answer.
	plan := strings.Join(queryStrings(t, c, "EXPLAIN SELECT g, count(*) FROM ow_t GROUP BY g ORDER BY g"), "\n")
	if strings.Contains(plan, "unnest") || strings.Count(plan, "Aggregate") != 1 {
		t.Errorf("EXPLAIN of a grouped query on one worker:\n%s\nwant one aggregate, no merge", plan)
	}

	// Simple-protocol constants, bound or not, and errors.
	brename := twinTables(t, c, direct, "bs", bindSchema, []string{"t"}, []string{
		"SELECT create_distributed_table('bs_t', 'id', shard_count => 12)",
	})
	for _, q := range boundCases {
		compareSimple(t, c, direct, brename, q)
	}
	sqlC, _ := brename("SELECT g, count(*) FROM {t} WHERE id BETWEEN 200 AND 200 + 50 GROUP BY g")
	exec(t, c, sqlC, pgx.QueryExecModeSimpleProtocol)
	var prepared int
	if err := direct.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%UNION ALL%' AND query LIKE '%BETWEEN $1 AND ($2 + $3)%' AND pid <> pg_backend_pid()").Scan(&prepared); err != nil {
		t.Fatal(err)
	}
	if prepared == 0 {
		t.Errorf("the worker did not run the query prepared")
	}
}
