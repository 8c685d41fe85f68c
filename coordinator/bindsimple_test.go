package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgcluster"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestScatterSimpleBound: a simple-protocol multi-shard query that merges
// partial results runs on the workers as a prepared statement, its
// constants bound as parameters (planner.Bindable), and answers exactly as
// PostgreSQL on an unsharded twin: rows, column types and errors, those
// at the binding of a value (22P02, which the text then answers), at the
// folding of constants (22003, 22012, which keep the text) and in a
// transaction block.
func TestScatterSimpleBound(t *testing.T) {
	cl := pgtest.Start(t, 2)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	direct := connect(t, cl.Servers[0].Addr())
	simple := pgx.QueryExecModeSimpleProtocol

	rename := twinTables(t, c, direct, "bs", bindSchema, []string{"t"}, []string{
		"SELECT create_distributed_table('bs_t', 'id', shard_count => 12)",
	})
	check := func(sqlT string) {
		t.Helper()
		compareSimple(t, c, direct, rename, sqlT)
	}
	for _, q := range boundCases {
		check(q)
	}

	// A column's type changes under the workers' prepared statements:
	// their result type with it (refused at Bind, then prepared afresh).
	grouped := "SELECT g, sum(v), max(v) FROM {t} WHERE id > 10 GROUP BY g ORDER BY g"
	check(grouped)
	aC, aD := rename("ALTER TABLE {t} ALTER COLUMN v TYPE bigint")
	exec(t, c, aC, simple)
	exec(t, direct, aD, simple)
	check(grouped)

	// The workers ran it prepared: the last statement of a worker
	// connection shows $n where the constants were.
	sqlC, _ := rename("SELECT g, count(*) FROM {t} WHERE id BETWEEN 200 AND 200 + 50 GROUP BY g")
	exec(t, c, sqlC, simple)
	prepared := 0
	for i := range cl.Servers {
		var n int
		w := connect(t, cl.Servers[i].Addr())
		if err := w.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%UNION ALL%' AND query LIKE '%BETWEEN $1 AND ($2 + $3)%' AND pid <> pg_backend_pid()").Scan(&n); err != nil {
			t.Fatal(err)
		}
		prepared += n
	}
	if prepared == 0 {
		t.Errorf("no worker connection ran the multi-shard query prepared")
	}

	// PostgreSQL's folding errors, also where the workers would use a
	// generic plan at once.
	for _, mode := range []string{"auto", "force_generic_plan"} {
		exec(t, c, "SET plan_cache_mode = "+mode, simple)
		exec(t, direct, "SET plan_cache_mode = "+mode, simple)
		for _, q := range foldCases {
			check(strings.Replace(q, "id < 0", "id < 10", 1)) // a good value first
			check(q)
		}
	}
	exec(t, c, "RESET plan_cache_mode", simple)
	exec(t, direct, "RESET plan_cache_mode", simple)

	// An ALTER through another coordinator: a string compared with the
	// column takes the column's new type, as in the text (found by the
	// adversary round: a string bound as a parameter kept the type its
	// statement was prepared with).
	c2 := connect(t, pgtest.Coordinator(t, cl, nil).Addr())
	dateQ := "SELECT count(*) FROM {t} WHERE d < '2020-01-05 12:00' AND id < 100"
	check(dateQ)
	aC, aD = rename("ALTER TABLE {t} ALTER COLUMN d TYPE timestamp")
	exec(t, c2, aC, simple)
	exec(t, direct, aD, simple)
	check(dateQ)

	// A cancel while a worker waits for a lock at the Bind is the
	// statement's answer (57014), not a reason to run the text instead
	// (found by the adversary round: it ran again and answered).
	cancelAtBind(t, c, cl, rename)

	// In a transaction block: before and after a write there.
	for _, tc := range []struct{ write, q string }{
		{"", "SELECT count(*), sum(v) FROM {t} WHERE id > 300"},
		{"UPDATE {t} SET v = v + 1 WHERE id = 301", "SELECT count(*), sum(v) FROM {t} WHERE id > 300"},
		{"", "SELECT count(*) FROM {t} WHERE v = 'abc'"},
		{"UPDATE {t} SET v = v + 1 WHERE id = 302", "SELECT count(*) FROM {t} WHERE v = 'abc'"},
	} {
		exec(t, c, "BEGIN", simple)
		exec(t, direct, "BEGIN", simple)
		if tc.write != "" {
			wC, wD := rename(tc.write)
			exec(t, c, wC, simple)
			exec(t, direct, wD, simple)
		}
		check(tc.q)
		// After an error the block has failed on both.
		_, errC := c.Exec(ctx, "SELECT 1", simple)
		_, errD := direct.Exec(ctx, "SELECT 1", simple)
		if sqlState(errC) != sqlState(errD) {
			t.Errorf("after %q in a block: %v, want %v", tc.q, errC, errD)
		}
		exec(t, c, "ROLLBACK", simple)
		exec(t, direct, "ROLLBACK", simple)
	}
}

// sameMessage reports whether two errors carry the same message, detail
// and context (a Bind names the parameter there).
func sameMessage(a, b error) bool {
	var x, y *pgconn.PgError
	return errors.As(a, &x) && errors.As(b, &y) && x.Message == y.Message && x.Where == y.Where && x.Detail == y.Detail
}

// bindSchema is the table of boundCases.
const bindSchema = `
CREATE TABLE %[1]s_t (id bigint PRIMARY KEY, g int, v int, n numeric, s text, d date, f float8);
INSERT INTO %[1]s_t SELECT i, i %% 6, CASE WHEN i %% 9 = 0 THEN NULL ELSE (i * 31) %% 500 - 200 END,
	i / 7.0, 's' || i, DATE '2020-01-01' + i, i / 3.0
	FROM generate_series(1, 600) i;`

// boundCases are simple-protocol multi-shard queries with constants, of
// bs_t (bindSchema), some of which fail.
var boundCases = []string{
	"SELECT g, count(*), sum(v), avg(v) FROM {t} WHERE id BETWEEN 100 AND 100 + 299 GROUP BY g ORDER BY g",
	"SELECT g, count(*) FROM {t} WHERE id BETWEEN 500 AND 500 - 1 GROUP BY g ORDER BY g",
	"SELECT g, max(s) FROM {t} WHERE s > 's5' AND s <> 's55' GROUP BY g ORDER BY g",
	"SELECT count(*), sum(n) FROM {t} WHERE v < 1.5 AND v >= -7",
	"SELECT count(*) FROM {t} WHERE v > 2.5e1",
	"SELECT count(*) FROM {t} WHERE id < 5000000000 AND id > 2147483648 - 2147483600",
	"SELECT count(*) FROM {t} WHERE id = ANY(ARRAY[1, 2, 3, 500]) OR id IN (7, 8, 9) OR v > ALL(ARRAY[290, 280])",
	"SELECT count(*) FROM {t} WHERE v IS DISTINCT FROM 12 AND d < '2020-03-01'",
	"SELECT count(*) FROM {t} WHERE id > '12'::int AND d >= '2020-02-01'::date",
	"SELECT g, v + 1000 FROM {t} WHERE v IS NOT NULL ORDER BY v DESC, id LIMIT 5",
	"SELECT DISTINCT g FROM {t} WHERE n > 80.5 ORDER BY g",
	"SELECT id FROM {t} ORDER BY id DESC LIMIT 3 OFFSET 2",
	"SELECT g, sum(v) FROM {t} WHERE s = 'nothing' GROUP BY g",
	"SELECT count(*) FROM {t} WHERE s = 'it''s'",
	// Errors: a value its type refuses (at Bind of the prepared form,
	// so the text answers), and constants PostgreSQL folds.
	// (The same texts with good values first: their description is
	// kept, so the bad value fails at Bind, not at the description.)
	"SELECT count(*) FROM {t} WHERE v = '12'",
	"SELECT count(*) FROM {t} WHERE v = 'abc'",
	"SELECT count(*) FROM {t} WHERE d > '2020-12-31'",
	"SELECT count(*) FROM {t} WHERE d > '2020-13-45'",
	"SELECT count(*) FROM {t} WHERE id < 2147483647 + 1",
	"SELECT count(*) FROM {t} WHERE id < 0 AND v = 1 / 0",
	"SELECT count(*) FROM {t} WHERE id < 0 AND v = 2147483647 + 1",
	"SELECT count(*) FROM {t} WHERE v = 12345678901",
	// IN lists of 64 items or more are planned as one literal
	// (collapseLists): never bound (found by the adversary round: an
	// empty string was bound, 0 rows).
	"SELECT count(*) FROM {t} WHERE s IN (" + listOf("'s%d'", 70) + ")",
	"SELECT count(*) FROM {t} WHERE s NOT IN (" + listOf("'s%d'", 70) + ")",
	"SELECT g, count(*) FROM {t} WHERE id IN (" + listOf("%d", 80) + ") GROUP BY g ORDER BY g LIMIT 3",
	"SELECT count(*), max(f) FROM {t} WHERE f < 1.5 OR f > 150.25",
}

// listOf is n items of format (with the item's number, from 1), joined
// by commas.
func listOf(format string, n int) string {
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf(format, i+1)
	}
	return strings.Join(items, ", ")
}

// foldCases fail on PostgreSQL while it plans them (it folds their
// constants), though no row reaches the failing expression: a generic
// plan of the bound statement would evaluate it only for a row (found by
// the adversary round).
var foldCases = []string{
	"SELECT count(*) FROM {t} WHERE id < 0 AND v < 40000::int2",
	"SELECT count(*) FROM {t} WHERE id < 0 AND f < 1e400",
	"SELECT count(*) FROM {t} WHERE id < 0 AND n < 9e131071 + 9e131071",
	"SELECT count(*) FROM {t} WHERE id < 0 AND v = 2147483647 + 1",
	"SELECT count(*) FROM {t} WHERE id < 0 AND s ~ '('",
	"SELECT count(*) FROM {t} WHERE id < 0 AND f > 1e-400",
}

// compareSimple runs sqlT ({t}: the table, renamed by rename) three times
// in the simple protocol through c and on the plain twin through direct:
// the same rows (in order if it sorts), or the same error.
func compareSimple(t *testing.T, c, direct *pgx.Conn, rename func(string) (string, string), sqlT string) {
	t.Helper()
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	sqlC, sqlD := rename(sqlT)
	for round := 0; round < 3; round++ {
		got, errC := scatterQuery(ctx, c, simple, sqlC, nil)
		want, errD := scatterQuery(ctx, direct, simple, sqlD, nil)
		if errD != nil || errC != nil {
			if sqlState(errC) != sqlState(errD) || errD == nil || errC == nil || !sameMessage(errC, errD) {
				t.Errorf("%s: got %v, want %v", sqlT, errC, errD)
			}
			continue
		}
		sameResult(t, sqlT, got, want, strings.Contains(sqlT, "ORDER BY"))
	}
}

// cancelAtBind cancels a bound multi-shard query of bs_t through c while a
// worker's shard is locked, and expects 57014; the lock is held until the
// query returns (or 10 s), so a query run again after the cancel would
// only return once it is released, with rows.
func cancelAtBind(t *testing.T, c *pgx.Conn, cl *pgcluster.Cluster, rename func(string) (string, string)) {
	t.Helper()
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	q, _ := rename("SELECT g, count(*) FROM {t} WHERE id > 5 GROUP BY g")
	for i := 0; i < 3; i++ { // prepared on the workers, described
		exec(t, c, q, simple)
	}
	w := connect(t, cl.Servers[0].Addr())
	var shard string
	if err := w.QueryRow(ctx, "SELECT format('%I.%I', schemaname, tablename) FROM pg_tables WHERE schemaname = 'pgfleet_shards' AND tablename LIKE 'bs\\_t\\_%' LIMIT 1").Scan(&shard); err != nil {
		t.Fatal(err)
	}
	exec(t, w, "BEGIN", simple)
	exec(t, w, "LOCK TABLE "+shard+" IN ACCESS EXCLUSIVE MODE", simple)
	released := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(released)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
		_, _ = w.Exec(ctx, "ROLLBACK", simple)
	}()
	watch := connect(t, cl.Servers[0].Addr())
	go func() {
		// Once a worker backend waits for the lock (at the Bind), cancel.
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			var n int
			if watch.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'").Scan(&n) == nil && n > 0 {
				break
			}
		}
		_ = c.PgConn().CancelRequest(ctx)
	}()
	_, err := c.Exec(ctx, q, simple)
	close(done)
	<-released
	if sqlState(err) != "57014" {
		t.Errorf("a query cancelled while a shard is locked: %v, want 57014", err)
	}
}
