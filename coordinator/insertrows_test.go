package coordinator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestInsertSelectRows: an INSERT ... SELECT that does not push down to
// the shards (from a reference, local or non-colocated table, with LIMIT
// or a window function, into a reference or local table, leaving a
// sequence column to its default) gives what PostgreSQL gives on plain
// tables: the rows stored, RETURNING, the command tag or the SQLSTATE, all
// or nothing; in a transaction block it is the transaction's; values of
// types whose text would not read back are refused, not rounded.
func TestInsertSelectRows(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	c := connect(t, srv.Addr())
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	const (
		dcols = "(id int PRIMARY KEY, v text, n numeric, f float8, ts timestamptz, tags text[], c char(5), b bit(3))"
		rcols = "(k int PRIMARY KEY, name text)"
		scols = "(id bigserial PRIMARY KEY, v text)"
	)
	testTable(t, c, "isd1", dcols, "SELECT create_distributed_table('isd1', 'id', shard_count => 4)")
	testTable(t, c, "isd2", dcols, "SELECT create_distributed_table('isd2', 'id', shard_count => 3)")
	testTable(t, c, "isr", rcols, "SELECT create_reference_table('isr')")
	testTable(t, c, "iss", scols, "SELECT create_distributed_table('iss', 'id', shard_count => 3)")
	plainTables(t, c, "isd1o "+dcols, "isd2o "+dcols, "isro "+rcols, "isso "+scols, "isl "+dcols, "islo "+dcols)
	fleet := strings.NewReplacer("{d1}", "isd1", "{d2}", "isd2", "{r}", "isr", "{s}", "iss", "{l}", "isl")
	oracle := strings.NewReplacer("{d1}", "isd1o", "{d2}", "isd2o", "{r}", "isro", "{s}", "isso", "{l}", "islo")
	both := func(q string) {
		t.Helper()
		gatherBoth(t, c, fleet, oracle, q, simple)
	}
	for _, q := range []string{
		"INSERT INTO {r} SELECT g, 'name ' || g || ' é''\\' FROM generate_series(1, 12) g",
		"INSERT INTO {d1} (id, v, n, f, ts, tags) SELECT k, name, k * 1.5, k / 3.0::float8, '2024-03-01 12:00+02'::timestamptz + k * interval '1 hour', ARRAY[name, NULL] FROM {r} RETURNING *",
		"INSERT INTO {d2} SELECT id + 100, v, n, f, ts, tags FROM {d1} WHERE id < 5",
		"INSERT INTO {r} (k, name) SELECT id + 1000, v FROM {d1} ORDER BY id LIMIT 3 RETURNING k, name",
		"INSERT INTO {d1} (id, v) SELECT id + 2000, v FROM {d1} ORDER BY id DESC LIMIT 2 RETURNING id",
		"INSERT INTO {d1} (id, v) SELECT 1, 'duplicate'",
		"INSERT INTO {d1} (id, v) SELECT id + 3000, v FROM {d1} WHERE false RETURNING id, v",
		"INSERT INTO {d1} (id, v) SELECT id + 3000, v FROM {d1} WHERE false",
		"INSERT INTO {d1} (id, nosuch) SELECT id, v FROM {d1} WHERE false",
		"INSERT INTO {d1} (id, v) SELECT 'x', 'y' FROM {r} WHERE false",
		"INSERT INTO {d1} (id, v) SELECT '4500', NULL FROM {r} WHERE k = 1 RETURNING id, v",
		"INSERT INTO {d1} (v, id) SELECT NULL, k + 4600 FROM {r} WHERE k = 1 RETURNING id, v",
		"INSERT INTO {d1} (id, v) SELECT '4700', 'union' UNION ALL SELECT '4701', 'union' FROM {r} WHERE k = 1",
		"INSERT INTO {d1} (id, v) SELECT d2.id + 4000, d2.v || '!' FROM {d2} d2 JOIN {r} r ON r.k = d2.id - 100 ORDER BY 1 RETURNING id, v",
		"WITH s AS (SELECT k FROM {r} WHERE k < 4) INSERT INTO {d1} (id, v) SELECT k + 5000, 'cte' FROM s RETURNING *",
		"INSERT INTO {d1} (id, v, n) SELECT id + 6000, v, sum(n) OVER (ORDER BY id) FROM {d1} WHERE id < 10 RETURNING id, n",
		"INSERT INTO {d1} (id, v) SELECT k + 8000, (1 / (k - 1))::text FROM {r}",
		"INSERT INTO {d1} (id, v) SELECT k + 8000, 'x' FROM {r} ON CONFLICT (id) DO NOTHING",
		"INSERT INTO {d1} (id, v) SELECT k + 8000, 'again' FROM {r} WHERE k < 3 ON CONFLICT (id) DO UPDATE SET v = excluded.v RETURNING id, v",
		"INSERT INTO {s} (v) SELECT name FROM {r} ORDER BY k RETURNING id, v",
		"INSERT INTO {s} (v) SELECT v FROM {s} ORDER BY id LIMIT 2 RETURNING *",
		"INSERT INTO {l} SELECT * FROM {d1} WHERE id < 3",
		"INSERT INTO {d1} (id, v) SELECT 9000 + count(*), 'count' FROM {d2}",
		// Adversary round: char(n) and bit(n) keep their length; constants
		// compared by DISTINCT are text, constants before a * are not.
		"INSERT INTO {d1} (id, v, c, b) SELECT k + 14000, 'abc'::char(5), 'xy'::char(5), B'101' FROM {r} WHERE k < 3 RETURNING v, c, b",
		"INSERT INTO {d2} (id, v, b) SELECT id + 14000, c, b FROM {d1} WHERE id > 14000 RETURNING id, v, b",
		"INSERT INTO {d1} (id, c) VALUES (14100, 'xyz'::char(3)) LIMIT 1 RETURNING c",
		"INSERT INTO {d1} (id, n) SELECT DISTINCT k + 12000, '5' FROM {r}",
		"INSERT INTO {d1} (id, v) SELECT '12100', s.* FROM (SELECT name FROM {r} WHERE k = 1) s RETURNING id, v",
		"INSERT INTO {d1} (id, v) SELECT id, v FROM {d2} WHERE false ON CONFLICT (v) DO NOTHING",
		"INSERT INTO {l} SELECT FROM {r} WHERE false",
		"SELECT * FROM {d1} ORDER BY id",
		"SELECT * FROM {d2} ORDER BY id",
		"SELECT * FROM {r} ORDER BY k",
		"SELECT * FROM {s} ORDER BY id",
		"SELECT * FROM {l} ORDER BY id",
	} {
		both(q)
	}
	// In a transaction block: the transaction's, undone by ROLLBACK.
	for _, tbl := range [][2]string{{"isd1", "isr"}, {"isd1o", "isro"}} {
		tx, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+tbl[0]+" (id, v) SELECT k + 10000, name FROM "+tbl[1], simple); err != nil {
			t.Fatalf("%s in a transaction block: %v", tbl[0], err)
		}
		if got := queryString(t, c, "SELECT count(*) FROM "+tbl[0]+" WHERE id > 10000", simple); got == "0" {
			t.Errorf("%s: the transaction does not see its rows", tbl[0])
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
	}
	both("SELECT count(*) FROM {d1} WHERE id > 10000")
	// With no rows, PostgreSQL's INSERT runs in the statement's
	// transaction: its locks (no wait on them), a read-only transaction,
	// an error failing the block.
	for _, tbl := range [][2]string{{"isd1", "isl"}, {"isd1o", "islo"}} {
		tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		tx, err := c.Begin(tctx)
		if err != nil {
			t.Fatal(err)
		}
		exec(t, tx.Conn(), "LOCK TABLE "+tbl[1]+" IN ACCESS EXCLUSIVE MODE")
		if _, err := tx.Exec(tctx, "INSERT INTO "+tbl[1]+" SELECT * FROM "+tbl[0]+" WHERE false", simple); err != nil {
			t.Errorf("%s: no rows into a table the transaction locked: %v", tbl[1], err)
		}
		_, err = tx.Exec(tctx, "INSERT INTO "+tbl[0]+" (id, n) SELECT 1, 'abc' WHERE false", simple)
		_, err2 := tx.Exec(tctx, "SELECT 1", simple)
		if sqlState(err) != "22P02" || sqlState(err2) != "25P02" {
			t.Errorf("%s: no rows with a bad constant in a block: %v, then %v; want 22P02, then 25P02", tbl[0], err, err2)
		}
		_ = tx.Rollback(tctx)
		cancel()
		tx, err = c.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+tbl[0]+" (id) SELECT 1 WHERE false", simple); sqlState(err) != "25006" {
			t.Errorf("%s: no rows in a read-only transaction: %v, want 25006", tbl[0], err)
		}
		_ = tx.Rollback(ctx)
	}
	exec(t, c, "SET client_encoding = 'LATIN1'")
	_, err := c.Exec(ctx, "INSERT INTO isd1 (id, v) SELECT k + 13000, name FROM isr", simple)
	wantRefusal(t, "client_encoding LATIN1", err)
	exec(t, c, "RESET client_encoding")
	_, err = c.Exec(ctx, "INSERT INTO isl SELECT FROM isr", simple)
	wantRefusal(t, "a SELECT without columns", err)
	// Refused, never rounded or read differently.
	exec(t, c, "SET extra_float_digits = 0")
	_, err = c.Exec(ctx, "INSERT INTO isd2 (id, f) SELECT k + 500, k / 3.0::float8 FROM isr", simple)
	wantRefusal(t, "float under extra_float_digits 0", err)
	exec(t, c, "RESET extra_float_digits")
	exec(t, c, "SET DateStyle = 'SQL, DMY'")
	_, err = c.Exec(ctx, "INSERT INTO isd2 (id, ts) SELECT id + 500, ts FROM isd1", simple)
	wantRefusal(t, "timestamptz under DateStyle SQL", err)
	exec(t, c, "RESET DateStyle")
	_, err = c.Exec(ctx, "WITH d AS (DELETE FROM isr WHERE k = 1 RETURNING k) INSERT INTO isd1 (id) SELECT k + 600 FROM d", simple)
	wantRefusal(t, "a WITH that writes", err)
	// Over the extended protocol too (rowsfirstext.go; refused before).
	gatherBoth(t, c, fleet, oracle, "INSERT INTO {d1} (id, v) SELECT k + $1, name FROM {r} WHERE k < 4 RETURNING id, v", pgx.QueryExecModeExec, 700)
	_, err = c.Exec(ctx, "INSERT INTO isd1 (id, v) SELECT k + 700, name FROM isr; SELECT 1", simple)
	wantRefusal(t, "in a query string of several statements", err)
	both("SELECT count(*) FROM {d2} WHERE id >= 500")
	both("SELECT count(*) FROM {d1} WHERE id >= 600 AND id < 800")
}
