package coordinator_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestInsertExpressions: a distribution column given by an expression is
// evaluated once by PostgreSQL and the row goes to the shard of that value
// (a read routed on it finds the row), with PostgreSQL's values and errors;
// where the coordinator cannot evaluate it apart from the INSERT
// (transaction block, a function that writes, a sequence), 0A000 with a
// hint and nothing written.
func TestInsertExpressions(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	c := connect(t, srv.Addr())
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	const cols = "(id bigint PRIMARY KEY, v text)"
	testTable(t, c, "ie", cols, "SELECT create_distributed_table('ie', 'id', shard_count => 7)")
	testTable(t, c, "ied", "(d int PRIMARY KEY, n int)", "SELECT create_distributed_table('ied', 'd', shard_count => 3)")
	plainTables(t, c, "ieo "+cols)
	fleet, oracle := strings.NewReplacer("{t}", "ie"), strings.NewReplacer("{t}", "ieo")
	both := func(q string) {
		t.Helper()
		got := gatherRun(t, c, fleet.Replace(q), simple)
		want := gatherRun(t, c, oracle.Replace(q), simple)
		if !reflect.DeepEqual(got, want) || got.State == "0A000" {
			t.Errorf("%s:\n got %+v\nwant %+v (plain PostgreSQL)", q, got, want)
		}
	}
	for _, q := range []string{
		"INSERT INTO {t} (id, v) VALUES (1000 + 4, 'a'), ((2 ^ 10)::bigint, 'b'), (abs(-7), 'c'), (length('héllo'), 'd')",
		"INSERT INTO {t} VALUES (10 * 3, 'e'), (31, 'f')",
		"INSERT INTO {t} (v, id) VALUES ('g', 7 * 6) ON CONFLICT (id) DO UPDATE SET v = excluded.v || '!' RETURNING id, v",
		"INSERT INTO {t} (v, id) VALUES ('h', 7 * 6) ON CONFLICT (id) DO UPDATE SET v = excluded.v || '!' RETURNING id, v",
		"INSERT INTO {t} (id, v) VALUES (1 / 0, 'z')",                   // 22012
		"INSERT INTO {t} (id, v) VALUES ('5'::text, 'z')",               // 42804: text is not assigned to bigint
		"INSERT INTO {t} (id, v) VALUES (2.5 * 3, 'y') RETURNING id",    // numeric 7.5 assigned: 8
		"INSERT INTO {t} (id, v) VALUES (9223372036854775807 + 1, 'o')", // 22003
		"SELECT * FROM {t} ORDER BY id",
	} {
		both(q)
	}
	for _, id := range []int{1004, 1024, 7, 5, 30, 31, 42, 8} {
		if got, want := queryString(t, c, "SELECT coalesce(max(v), 'none') FROM ie WHERE id = $1", id),
			queryString(t, c, "SELECT coalesce(max(v), 'none') FROM ieo WHERE id = $1", id); got != want {
			t.Errorf("routed read of id %d: %q, want %q", id, got, want)
		}
	}
	// Adversary findings: a char(n) value keeps its length (it was cast to
	// char(1)); values whose text under the session's settings is not the
	// value (floats under extra_float_digits 0, timestamptz under a
	// DateStyle with zone abbreviations) are refused, not rounded.
	both("INSERT INTO {t} (id, v) VALUES (length(upper('ab')::char(5) || 'x') + 2000, upper('ab')::char(5)) RETURNING id, v, length(v)")
	testTable(t, c, "iec", "(k char(5) PRIMARY KEY, v int)", "SELECT create_distributed_table('iec', 'k', shard_count => 3)")
	if got := queryString(t, c, "INSERT INTO iec (k, v) VALUES (upper('abc')::char(5), 1) RETURNING k", simple); got != "ABC  " {
		t.Errorf("char(5) distribution value: %q, want %q", got, "ABC  ")
	}
	if got := queryString(t, c, "SELECT v FROM iec WHERE k = 'ABC'"); got != "1" {
		t.Errorf("routed read of the char(5) value: %q", got)
	}
	exec(t, c, "SET extra_float_digits = 0")
	if _, err := c.Exec(ctx, "INSERT INTO ie (id, v) VALUES (1234567890123456.7::float8 * 1, 'f')", simple); sqlState(err) != "0A000" {
		t.Errorf("float under extra_float_digits 0: %v, want 0A000", err)
	}
	exec(t, c, "RESET extra_float_digits")
	if got := queryString(t, c, "INSERT INTO ie (id, v) VALUES (1234567890123456.7::float8 * 1, 'f') RETURNING id", simple); got != "1234567890123457" {
		t.Errorf("float distribution value: %s, want 1234567890123457", got)
	}
	// Volatile and time: one value, and the row is where its value says.
	var id int64
	if err := c.QueryRow(ctx, "INSERT INTO ie (id, v) VALUES ((random() * 1e12)::bigint, 'r') RETURNING id", simple).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if n := queryString(t, c, "SELECT count(*) FROM ie WHERE id = $1 AND v = 'r'", id); n != "1" {
		t.Errorf("random id %d: routed read finds %s rows", id, n)
	}
	exec(t, c, "INSERT INTO ied VALUES (now()::date - DATE '2000-01-01', 1), (CURRENT_DATE - DATE '2000-01-02', 2)", simple)
	days := queryString(t, c, "SELECT CURRENT_DATE - DATE '2000-01-01'")
	if got := queryString(t, c, "SELECT n FROM ied WHERE d = $1", days); got != "1" {
		t.Errorf("now()::date: %q", got)
	}
	if got := queryString(t, c, "SELECT n FROM ied WHERE d = $1 - 1", days); got != "2" {
		t.Errorf("CURRENT_DATE - 1: %q", got)
	}
	// Refused, nothing written.
	exec(t, c, "CREATE TABLE IF NOT EXISTS ie_log (x int)")
	t.Cleanup(func() { _, _ = c.Exec(context.Background(), "DROP TABLE IF EXISTS ie_log") })
	exec(t, c, "CREATE OR REPLACE FUNCTION ie_writes() RETURNS bigint LANGUAGE sql AS 'INSERT INTO ie_log VALUES (1) RETURNING 500'", simple)
	t.Cleanup(func() { _, _ = c.Exec(context.Background(), "DROP FUNCTION IF EXISTS ie_writes()", simple) })
	before := queryString(t, c, "SELECT count(*) FROM ie")
	for _, q := range []string{
		"INSERT INTO ie (id, v) VALUES (ie_writes(), 'w')",
		"INSERT INTO ie (id, v) VALUES (nextval('ie_seq') + 1, 'w')", // (nextval('ie_seq') alone is drawn: TestNextvalInInsert)
		"INSERT INTO ie (id, v) VALUES ((SELECT 600), 'w')",
		"INSERT INTO ie (id, v) VALUES (pg_advisory_lock(1)::text::int + 700, 'w')",
		"INSERT INTO ie (id, v) VALUES (length(set_config('application_name', 'x', false)) + 100, 's')", // pins the session
	} {
		_, err := c.Exec(ctx, q, simple)
		wantRefusal(t, q, err)
	}
	exec(t, c, "BEGIN")
	_, err := c.Exec(ctx, "INSERT INTO ie (id, v) VALUES (800 + 1, 't')", simple)
	exec(t, c, "ROLLBACK")
	if sqlState(err) != "0A000" {
		t.Errorf("in a transaction block: %v, want 0A000", err)
	}
	if after := queryString(t, c, "SELECT count(*) FROM ie"); after != before {
		t.Errorf("refused INSERTs wrote: %s rows, were %s", after, before)
	}
	if n := queryString(t, c, "SELECT count(*) FROM ie_log"); n != "0" {
		t.Errorf("the writing function's row stayed: %s", n)
	}
}
