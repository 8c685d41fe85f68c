package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestUnionOfShards: a multi-shard query that groups, aggregates, sorts
// or limits one table reads each worker's shards as one relation
// (planner.unionOf). The answers match PostgreSQL's on an unsharded twin
// in every protocol, for the forms that keep the query per shard too
// (names of the select list in GROUP BY, column aliases of the table,
// references qualified by schema), and a role with SELECT on some
// columns only reads them through the union as it reads the table.
func TestUnionOfShards(t *testing.T) {
	cl := pgtest.Start(t, 2)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	direct := connect(t, cl.Servers[0].Addr())
	simple := pgx.QueryExecModeSimpleProtocol

	rename := twinTables(t, c, direct, "us", unionSchema, []string{"t"}, []string{
		"SELECT create_distributed_table('us_t', 'id', shard_count => 12)",
	})
	compareModes(t, c, direct, rename, unionCases)
	// The plan reads the shards as one relation (and keeps the query per
	// shard where a union would read otherwise).
	// (The worker's plan: one aggregate over its 6 shards, or one each.)
	plan := strings.Join(queryStrings(t, c, "EXPLAIN SELECT g, count(*) FROM us_t GROUP BY g"), "\n")
	if n := strings.Count(plan, "Aggregate"); n != 1 {
		t.Errorf("EXPLAIN of a grouped multi-shard query:\n%s\nwant one aggregate over the worker's shards", plan)
	}
	plan = strings.Join(queryStrings(t, c, "EXPLAIN SELECT b, count(*) FROM us_t AS x(a, b) GROUP BY b"), "\n")
	if n := strings.Count(plan, "Aggregate"); n != 6 {
		t.Errorf("EXPLAIN of a query naming the table's columns anew:\n%s\nwant the query per shard", plan)
	}

	// Column privileges: the union names the columns the query reads.
	// (Granted on each worker, on the table and its shards there, as a
	// table distributed before shards took their table's privileges
	// needs.)
	for i := range cl.Servers { // roles are each server's
		w := connect(t, cl.Servers[i].Addr())
		exec(t, w, "CREATE ROLE us_reader LOGIN; GRANT USAGE ON SCHEMA pgfleet_shards TO us_reader", simple)
		for _, tb := range queryStrings(t, w, "SELECT format('%I.%I', schemaname, tablename) FROM pg_tables "+
			"WHERE schemaname = 'pgfleet_shards' AND tablename LIKE 'us\\_t\\_%' OR schemaname = 'public' AND tablename = 'us_t'") {
			exec(t, w, "GRANT SELECT (id, g, v) ON "+tb+" TO us_reader", simple)
		}
	}
	cfg, err := pgx.ParseConfig(pgtest.URL(srv.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	cfg.User = "us_reader"
	reader, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close(ctx)
	for _, mode := range scatterModes {
		got, err := scatterQuery(ctx, reader, mode, "SELECT g, count(*), sum(v) FROM us_t GROUP BY g ORDER BY g", nil)
		if err != nil {
			t.Errorf("us_reader's grouped read of its columns (%v): %v", mode, err)
			continue
		}
		want, err := scatterQuery(ctx, direct, mode, "SELECT g, count(*), sum(v) FROM usp_t GROUP BY g ORDER BY g", nil)
		if err != nil {
			t.Fatal(err)
		}
		sameResult(t, fmt.Sprintf("us_reader's grouped read (%v)", mode), got, want, true)
		for _, q := range []string{"SELECT max(secret) FROM us_t", "SELECT g, count(*) FROM us_t GROUP BY g HAVING min(secret) > '' ORDER BY 1", "SELECT * FROM us_t ORDER BY id LIMIT 1"} {
			if _, err := scatterQuery(ctx, reader, mode, q, nil); sqlState(err) != "42501" {
				t.Errorf("us_reader: %s (%v): %v, want 42501", q, mode, err)
			}
		}
	}
}

// unionCases are multi-shard queries of one table that groups,
// aggregates, sorts or limits ({t}: the table), with whether their rows
// come in a defined order.
var unionCases = []struct {
	sql     string
	ordered bool
}{
	{sql: "SELECT count(*) FROM {t}"},
	{sql: "SELECT g, count(*), sum(v), avg(v), min(v), max(secret) FROM {t} WHERE id BETWEEN 100 AND 400 GROUP BY g ORDER BY g", ordered: true},
	{sql: "SELECT x.g, max(x.v) FROM {t} x GROUP BY x.g ORDER BY 1", ordered: true},
	{sql: "SELECT g AS k, count(*) FROM {t} GROUP BY k ORDER BY k", ordered: true},
	{sql: "SELECT b, count(*) FROM {t} AS x(a, b) GROUP BY b ORDER BY b", ordered: true},
	{sql: "SELECT count(*) FROM public.{t} WHERE public.{t}.v > 0"},
	{sql: "SELECT id, v FROM {t} WHERE v IS NOT NULL ORDER BY v DESC, id LIMIT 7 OFFSET 3", ordered: true},
	{sql: "SELECT DISTINCT g FROM {t} WHERE v > 100 ORDER BY g", ordered: true},
	{sql: "SELECT DISTINCT ON (g) g, id, v FROM {t} ORDER BY g, v DESC NULLS LAST, id", ordered: true},
	{sql: "SELECT g FROM {t} GROUP BY g HAVING sum(v) > 0 ORDER BY sum(v) DESC, g LIMIT 3", ordered: true},
	{sql: "SELECT id, count(*) FROM {t} GROUP BY id HAVING id % 50 = 0 ORDER BY 2, 1 LIMIT 5", ordered: true},
	{sql: "SELECT * FROM {t} ORDER BY id DESC LIMIT 2", ordered: true},
	{sql: "SELECT count(*) FROM {t} WHERE false"},
	// Grouped by the primary key, the other columns may be read
	// (found by the adversary round: the union has no key, 42803).
	{sql: "SELECT id, v, count(*) FROM {t} GROUP BY id ORDER BY id LIMIT 3", ordered: true},
	{sql: "SELECT id, secret FROM {t} GROUP BY id ORDER BY id DESC LIMIT 3", ordered: true},
	{sql: "SELECT id, v FROM {t} GROUP BY id HAVING v > 290 ORDER BY id", ordered: true},
	{sql: "SELECT id FROM {t} GROUP BY id ORDER BY v DESC NULLS LAST, id LIMIT 3", ordered: true},
	{sql: "SELECT x.id, x.v FROM {t} x GROUP BY x.id ORDER BY x.id LIMIT 2", ordered: true},
	{sql: "SELECT id, v FROM {t} GROUP BY 1 ORDER BY 1 LIMIT 2", ordered: true},
	{sql: "SELECT * FROM {t} GROUP BY id ORDER BY id LIMIT 1", ordered: true},
	{sql: "SELECT g % 3, count(*), sum(v) FROM {t} GROUP BY 1 ORDER BY 1", ordered: true},
	// ORDER BY and DISTINCT ON by the name PostgreSQL gives a select
	// list entry (found by the adversary round: read as a column, 42703).
	{sql: "SELECT id, abs(v) FROM {t} ORDER BY abs DESC NULLS LAST, id LIMIT 3", ordered: true},
	{sql: "SELECT DISTINCT lower(secret) FROM {t} ORDER BY lower LIMIT 2", ordered: true},
	{sql: "SELECT DISTINCT ON (abs) abs(v), id FROM {t} ORDER BY abs, id LIMIT 4", ordered: true},
	{sql: "SELECT DISTINCT ON (\"?column?\") g % 2, id FROM {t} ORDER BY \"?column?\", id", ordered: true},
	{sql: "SELECT coalesce(v, 0) FROM {t} ORDER BY coalesce, 1 LIMIT 2", ordered: true},
	{sql: "SELECT v AS g, g AS v FROM {t} ORDER BY g, v LIMIT 5", ordered: true},
}

// unionSchema is the table of unionCases.
const unionSchema = `
CREATE TABLE %[1]s_t (id bigint PRIMARY KEY, g int, v int, secret text);
INSERT INTO %[1]s_t SELECT i, i %% 6, CASE WHEN i %% 9 = 0 THEN NULL ELSE (i * 31) %% 500 - 200 END, 's' || i
	FROM generate_series(1, 600) i;`

// compareModes runs each case ({t}: the table, renamed by rename) twice in
// every protocol through c and on the plain twin through direct, and
// expects the same result.
func compareModes(t *testing.T, c, direct *pgx.Conn, rename func(string) (string, string), cases []struct {
	sql     string
	ordered bool
}) {
	t.Helper()
	ctx := context.Background()
	for _, tc := range cases {
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
}
