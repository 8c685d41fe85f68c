package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestMultiRowSequenceExtended: a multi-row INSERT over several shards
// leaving a column to its sequence, sent with the extended protocol (an
// ORM's bulk insert: TypeORM's save of several entities, Rails'
// insert_all), draws the values in row order and returns them in VALUES
// order, as PostgreSQL does; the sequence column may be the distribution
// column. It was refused ("needs the simple query protocol").
func TestMultiRowSequenceExtended(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	ctx := context.Background()
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	freshTables(t, c, []string{"ms_a", "ms_b"},
		"CREATE TABLE ms_a (id bigserial PRIMARY KEY, v text)",
		"SELECT create_distributed_table('ms_a', 'id', shard_count => 4)",
		"CREATE TABLE ms_b (tenant int, id bigserial, v text, PRIMARY KEY (tenant, id))",
		"SELECT create_distributed_table('ms_b', 'tenant', shard_count => 4)")
	read := func(sql string, args ...any) string {
		t.Helper()
		rows, err := c.Query(ctx, sql, args...)
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		var out []string
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			var row []string
			for _, v := range vals {
				row = append(row, fmt.Sprint(v))
			}
			out = append(out, strings.Join(row, ":"))
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return strings.Join(out, ",")
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe} {
		exec(t, c, "TRUNCATE ms_a, ms_b RESTART IDENTITY", simple)
		if got := read("INSERT INTO ms_a (v) VALUES ($1), ($2), ($3), ($4), ($5), ($6) RETURNING id, v", mode, "a", "b", "c", "d", "e", "f"); got != "1:a,2:b,3:c,4:d,5:e,6:f" {
			t.Errorf("%v: ms_a RETURNING: %s", mode, got)
		}
		if got := read("INSERT INTO ms_b (tenant, v) VALUES ($1, 'a'), ($2, 'b'), ($3, 'c'), ($4, 'd') RETURNING tenant, id", mode, 4, 3, 2, 1); got != "4:1,3:2,2:3,1:4" {
			t.Errorf("%v: ms_b RETURNING: %s", mode, got)
		}
		exec(t, c, "BEGIN", simple)
		if got := read("INSERT INTO ms_a (v) VALUES ($1), ($2), ($3) RETURNING id", mode, "x", "y", "z"); got != "7,8,9" {
			t.Errorf("%v: in a block: %s", mode, got)
		}
		exec(t, c, "ROLLBACK", simple)
		// Every row found by its key, once.
		for id := 1; id <= 6; id++ {
			if got := read("SELECT v FROM ms_a WHERE id = $1", mode, id); got != string(rune('a'+id-1)) {
				t.Errorf("%v: ms_a row %d: %q", mode, id, got)
			}
		}
		if got := read("SELECT count(*)::text || ' ' || max(id)::text FROM ms_a", simple); got != "6 6" {
			t.Errorf("%v: ms_a rows: %s, want 6 6", mode, got)
		}
	}
}
