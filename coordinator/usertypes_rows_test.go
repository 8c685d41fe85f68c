package coordinator_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestEnumDomainValuesThroughCoordinator: statements whose values the
// coordinator carries as text (INSERT ... SELECT between tables that are
// not colocated, writes with a subquery run first, their parameters over
// the extended protocol) take enums and domains without constraints over
// built-in types (and arrays of them), as PostgreSQL does: the rows, the
// tags, an unknown label (22P02), a domain's check failing on the rows
// (23514). They were refused (0A000, "types that are not built in").
func TestEnumDomainValuesThroughCoordinator(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	for _, q := range []string{"DROP TABLE IF EXISTS ud_a, ud_b, ud_a_plain, ud_b_plain", "DROP TYPE IF EXISTS ud_mood", "DROP DOMAIN IF EXISTS ud_pos",
		"CREATE TYPE ud_mood AS ENUM ('sad', 'ok', 'happy')", "CREATE DOMAIN ud_pos AS int CHECK (VALUE > 0)", "DROP DOMAIN IF EXISTS ud_id", "CREATE DOMAIN ud_id AS bigint"} {
		exec(t, c, q, simple)
	}
	t.Cleanup(func() {
		_, _ = c.Exec(context.Background(), "DROP TABLE IF EXISTS ud_a, ud_b, ud_a_plain, ud_b_plain", simple)
		_, _ = c.Exec(context.Background(), "DROP TYPE IF EXISTS ud_mood; DROP DOMAIN IF EXISTS ud_pos; DROP DOMAIN IF EXISTS ud_id", simple)
	})
	cols := "(id int PRIMARY KEY, mood ud_mood, p ud_pos, moods ud_mood[], f float8, u ud_id, us ud_id[])"
	for _, tb := range []string{"ud_a", "ud_b", "ud_a_plain", "ud_b_plain"} {
		exec(t, c, "CREATE TABLE "+tb+" "+cols, simple)
	}
	exec(t, c, "SELECT create_distributed_table('ud_a', 'id', shard_count => 4)", simple)
	exec(t, c, "SELECT create_distributed_table('ud_b', 'id', shard_count => 3, colocate_with => 'none')", simple)
	for _, tb := range []string{"ud_b", "ud_b_plain"} { // (the plain tables stay on the default node)
		exec(t, c, "INSERT INTO "+tb+" SELECT g, (ARRAY['sad','ok','happy'])[g % 3 + 1]::ud_mood, g, ARRAY['ok', 'sad']::ud_mood[], g / 3.0, g * 10, ARRAY[g, -g]::ud_id[] FROM generate_series(1, 12) g", simple)
	}
	fleet := strings.NewReplacer("{a}", "ud_a", "{b}", "ud_b")
	oracle := strings.NewReplacer("{a}", "ud_a_plain", "{b}", "ud_b_plain")
	state := func(r *strings.Replacer) string {
		return tableRows(t, c, r.Replace("SELECT concat_ws(',', id, mood, p, moods, f, u, us) FROM {a} ORDER BY id"))
	}
	for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeExec, pgx.QueryExecModeCacheStatement} {
		for _, q := range []struct {
			sql  string
			args []any
		}{
			{"INSERT INTO {a} SELECT id + $1, mood, p, moods, f, u, us FROM {b} WHERE mood <> $2", []any{100, "sad"}},
			{"INSERT INTO {a} (id, mood, p, u) SELECT id + $1, $2, 7, $3 FROM {b} WHERE id < 3", []any{200, "happy", "70"}},
			{"UPDATE {a} SET u = u + 1 WHERE id IN (SELECT id + 100 FROM {b} WHERE u = $1 OR us = $2)", []any{"30", "{50,-50}"}},
			{"UPDATE {a} SET mood = $1, p = p + 1 WHERE id IN (SELECT id + 100 FROM {b} WHERE mood = $2)", []any{"ok", "happy"}},
			{"INSERT INTO {a} (id, mood) SELECT id + $1, $2 FROM {b} WHERE id < 3", []any{400, "meh"}}, // 22P02
			{"INSERT INTO {a} (id, p) SELECT id + 500, p - 5 FROM {b} WHERE id < 7", nil},              // 23514 from the rows
			{"DELETE FROM {a} WHERE p IN (SELECT p + 100 FROM {b} WHERE moods = $1)", []any{"{ok,sad}"}},
		} {
			var got, want oracleRun
			for _, side := range []struct {
				r   *strings.Replacer
				out *oracleRun
			}{{fleet, &got}, {oracle, &want}} {
				sql := side.r.Replace(q.sql)
				if mode == simple {
					for i := len(q.args); i >= 1; i-- { // as literals
						sql = strings.ReplaceAll(sql, "$"+strconv.Itoa(i), "'"+strings.ReplaceAll(fmt.Sprint(q.args[i-1]), "'", "''")+"'")
					}
					*side.out = gatherRun(t, c, sql, simple)
				} else {
					*side.out = gatherRun(t, c, sql, mode, q.args...)
				}
				slices.SortFunc(side.out.Rows, slices.Compare)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s (%v): got %+v, PostgreSQL %+v", q.sql, mode, got, want)
			}
			if g, w := state(fleet), state(oracle); g != w {
				t.Fatalf("%s (%v): the table is\n%s\nwant\n%s", q.sql, mode, g, w)
			}
		}
		exec(t, c, "TRUNCATE ud_a, ud_a_plain", simple)
	}
	// A parameter of a domain with a constraint: PostgreSQL would not
	// check a value it copies, the coordinator's constant would be
	// checked again: refused, nothing written.
	_, err := c.Exec(context.Background(), "INSERT INTO ud_a (id, p) SELECT id + $1, $2 FROM ud_b WHERE id < 3", pgx.QueryExecModeExec, 300, "5")
	wantRefusal(t, "a parameter of a domain with a CHECK", err)
	if n := queryString(t, c, "SELECT count(*)::text FROM ud_a"); n != "0" {
		t.Errorf("the refused statement wrote %s rows", n)
	}
}
