package coordinator_test

import (
	"context"
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

	rename := twinTables(t, c, direct, "ow", unionSchema, []string{"t"}, []string{
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
	compareModes(t, c, direct, rename, append(append(extra[:0:0], unionCases...), extra...))
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
