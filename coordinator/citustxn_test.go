package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestCitusFunctionsInTransactions: create_distributed_table and
// create_reference_table in a query string of several statements and in
// a transaction block, as migration tools send them. What commits is on
// the shards (every row, once, the index the block created after the
// call); what does not commit (an error at COMMIT: a unique constraint
// added after the call that the shards could not enforce; ROLLBACK; an error of the call itself)
// leaves no table, no catalog entry and no prepared transaction.
func TestCitusFunctionsInTransactions(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	c := connect(t, srv.Addr())
	var workers []*pgx.Conn
	for _, s := range cl.Servers {
		workers = append(workers, connect(t, s.Addr()))
	}
	tables := []string{"ct_a", "ct_null", "ct_rb", "ct_ref", "ct_d", "ct_bad", "ct_old", "ct_gone", "ct_renamed", "ct_chain", "ct_mixed"}
	drop := func() {
		for _, tb := range tables {
			_, _ = c.Exec(ctx, "SELECT undistribute_table('"+tb+"')", simple)
			_, _ = c.Exec(ctx, "DROP TABLE IF EXISTS "+tb, simple)
		}
	}
	drop()
	t.Cleanup(drop)
	count := func(conn *pgx.Conn, q string) int {
		t.Helper()
		var n int
		if err := conn.QueryRow(ctx, q, simple).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	inCatalog := func(name string) bool {
		return count(workers[0], "SELECT count(*)::int FROM pgfleet.tables WHERE name = 'public."+name+"'") == 1
	}
	// shardRows counts the rows of table's shards on every worker (shard
	// tables are named <table>_<shard id>).
	shardRows := func(table string) (rows, shards int) {
		t.Helper()
		for _, w := range workers {
			names, err := w.Query(ctx, "SELECT schemaname || '.' || tablename FROM pg_tables WHERE tablename ~ $1", "^"+table+"_[0-9]+$")
			if err != nil {
				t.Fatal(err)
			}
			list, err := pgx.CollectRows(names, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range list {
				rows += count(w, "SELECT count(*)::int FROM "+n)
				shards++
			}
		}
		return rows, shards
	}
	noPrepared := func(what string) {
		t.Helper()
		for i, w := range workers {
			if n := count(w, "SELECT count(*)::int FROM pg_prepared_xacts"); n != 0 {
				t.Errorf("%s: worker %d has %d prepared transactions", what, i+1, n)
			}
		}
	}

	// A query string: one implicit transaction.
	exec(t, c, `CREATE TABLE ct_a (id bigserial PRIMARY KEY, v text);
		INSERT INTO ct_a (v) SELECT 'row ' || g FROM generate_series(1, 100) g;
		SELECT create_distributed_table('ct_a', 'id', shard_count => 4);
		CREATE INDEX ct_a_v ON ct_a (v);
		INSERT INTO ct_a (v) VALUES ('after the call')`, simple)
	if !inCatalog("ct_a") {
		t.Fatal("ct_a is not in the catalog after the string committed")
	}
	if rows, shards := shardRows("ct_a"); rows != 101 || shards != 4 {
		t.Errorf("ct_a: %d rows in %d shards on the workers, want 101 in 4", rows, shards)
	}
	if n := count(c, "SELECT count(DISTINCT id)::int FROM ct_a"); n != 101 {
		t.Errorf("ct_a through the coordinator: %d distinct ids, want 101", n)
	}
	if n := count(workers[0], "SELECT count(*)::int FROM ONLY ct_a"); n != 0 {
		t.Errorf("the shell of ct_a on the default node holds %d rows, want 0", n)
	}
	if v := queryString(t, c, "SELECT v FROM ct_a WHERE id = 101"); v != "after the call" {
		t.Errorf("row 101 is %q", v)
	}
	idx := 0
	for _, w := range workers {
		idx += count(w, "SELECT count(*)::int FROM pg_indexes WHERE indexname ~ '^ct_a_v'")
	}
	if idx < 5 { // the shell's and the 4 shards'
		t.Errorf("%d indexes named ct_a_v*, want the shell's and every shard's", idx)
	}

	// A unique constraint without the distribution column, added after
	// the call, fails the COMMIT (the move refuses it): nothing remains.
	_, err := c.Exec(ctx, `CREATE TABLE ct_null (id int, v text);
		INSERT INTO ct_null VALUES (1, 'a');
		SELECT create_distributed_table('ct_null', 'id');
		ALTER TABLE ct_null ADD CONSTRAINT ct_null_v UNIQUE (v)`, simple)
	if sqlState(err) != "0A000" {
		t.Errorf("a unique constraint without the distribution column after the call: %v, want 0A000", err)
	}
	if inCatalog("ct_null") || count(workers[0], "SELECT count(*)::int FROM pg_tables WHERE tablename = 'ct_null'") != 0 {
		t.Error("ct_null remains after its string failed")
	}
	if rows, shards := shardRows("ct_null"); shards != 0 {
		t.Errorf("ct_null: %d shards (%d rows) remain after its string failed", shards, rows)
	}
	noPrepared("after a failed COMMIT")

	// ROLLBACK forgets the call.
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"CREATE TABLE ct_rb (id int PRIMARY KEY)", "INSERT INTO ct_rb SELECT generate_series(1, 10)",
		"SELECT create_distributed_table('ct_rb', 'id')", "INSERT INTO ct_rb VALUES (11)"} {
		if _, err := tx.Exec(ctx, q, simple); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if n := count(tx.Conn(), "SELECT count(*)::int FROM ct_rb"); n != 11 {
		t.Errorf("in the block after the call: %d rows, want 11", n)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if inCatalog("ct_rb") {
		t.Error("ct_rb is in the catalog after ROLLBACK")
	}

	// A block with a reference table and a distributed table colocated
	// by default, then DDL and rows.
	tx, err = c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"CREATE TABLE ct_ref (k int PRIMARY KEY, name text)",
		"INSERT INTO ct_ref VALUES (1, 'one'), (2, 'two')",
		"SELECT create_reference_table('ct_ref')",
		"CREATE TABLE ct_d (id int PRIMARY KEY, k int)",
		"SELECT create_distributed_table('ct_d', 'id', shard_count => 4)",
		"INSERT INTO ct_d SELECT g, g % 3 FROM generate_series(1, 60) g",
		"ALTER TABLE ct_d ADD COLUMN w int DEFAULT 7",
		"INSERT INTO ct_ref VALUES (0, 'zero')",
	} {
		if _, err := tx.Exec(ctx, q, simple); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(c, "SELECT count(*)::int FROM ct_d JOIN ct_ref USING (k) WHERE w = 7"); n != 60 {
		t.Errorf("ct_d joined with ct_ref: %d rows, want 60", n)
	}
	if rows, shards := shardRows("ct_d"); rows != 60 || shards != 4 {
		t.Errorf("ct_d: %d rows in %d shards, want 60 in 4", rows, shards)
	}
	if rows, copies := shardRows("ct_ref"); rows != 3*len(workers) || copies != len(workers) {
		t.Errorf("ct_ref: %d rows in %d copies, want %d in %d", rows, copies, 3*len(workers), len(workers))
	}
	noPrepared("after a block committed")

	// The call's own errors fail the block; the refusals say what to do.
	for _, tc := range []struct {
		name, setup, call, code string
	}{
		{"no such column", "CREATE TABLE ct_bad (id int)", "SELECT create_distributed_table('ct_bad', 'nope')", "42703"},
		{"no such table", "SELECT 1", "SELECT create_distributed_table('ct_missing', 'id')", "42P01"},
		{"twice", "CREATE TABLE ct_bad (id int); SELECT create_distributed_table('ct_bad', 'id')", "SELECT create_distributed_table('ct_bad', 'id')", "42710"},
		{"already distributed", "SELECT 1", "SELECT create_distributed_table('ct_d', 'id')", "42710"},
		{"after a savepoint", "CREATE TABLE ct_bad (id int); SAVEPOINT s", "SELECT create_distributed_table('ct_bad', 'id')", "0A000"},
	} {
		tx, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, tc.setup, simple); err != nil {
			t.Fatalf("%s: %s: %v", tc.name, tc.setup, err)
		}
		_, err = tx.Exec(ctx, tc.call, simple)
		var pe *pgconn.PgError
		switch {
		case sqlState(err) != tc.code:
			t.Errorf("%s: %v, want %s", tc.name, err, tc.code)
		case tc.code == "0A000" && (!strings.Contains(fmt.Sprint(err), "create_distributed_table") || !asPgError(err, &pe) || pe.Hint == ""):
			t.Errorf("%s: a refusal without a hint: %v", tc.name, err)
		case tc.code != "0A000":
			if _, err := tx.Exec(ctx, "SELECT 1", simple); sqlState(err) != "25P02" {
				t.Errorf("%s: after the call's error the block answers %v, want 25P02", tc.name, err)
			}
		}
		_ = tx.Rollback(ctx)
		if inCatalog("ct_bad") || inCatalog("ct_missing") {
			t.Errorf("%s: the table is in the catalog", tc.name)
		}
	}

	// A table that exists with rows is distributed in a block while
	// another session reads it: from the call to the block's end the
	// table is fenced (40001, retryable, as while a move outside a block
	// runs), and after the COMMIT the reader sees every row, on the
	// shards.
	exec(t, c, "CREATE TABLE ct_old (id int PRIMARY KEY, v int)", simple)
	exec(t, c, "INSERT INTO ct_old SELECT g, g FROM generate_series(1, 1000) g", simple)
	reader := connect(t, srv.Addr())
	tx, err = c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT create_distributed_table('ct_old', 'id')", simple); err != nil {
		t.Fatal(err)
	}
	if _, err := reader.Exec(ctx, "SELECT count(*)::int FROM ct_old", simple); sqlState(err) != "40001" {
		t.Errorf("another session during the block: %v, want 40001", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(reader, "SELECT sum(v)::int FROM ct_old"); n != 500500 {
		t.Errorf("another session after the COMMIT: sum %d, want 500500", n)
	}
	if rows, _ := shardRows("ct_old"); rows != 1000 {
		t.Errorf("ct_old: %d rows on the shards, want 1000", rows)
	}

	// A block that takes the table's ACCESS EXCLUSIVE lock after the call
	// (a column renamed): a reader that waited on it read the table the
	// COMMIT had emptied (0 rows, found by an adversary). The table is
	// fenced from the call on: the reader gets 40001 at once, and every
	// row after the COMMIT.
	exec(t, c, "CREATE TABLE ct_lock (id int PRIMARY KEY, v int)", simple)
	exec(t, c, "INSERT INTO ct_lock SELECT g, g FROM generate_series(1, 1000) g", simple)
	t.Cleanup(func() {
		_, _ = c.Exec(ctx, "SELECT undistribute_table('ct_lock')", simple)
		_, _ = c.Exec(ctx, "DROP TABLE IF EXISTS ct_lock", simple)
	})
	tx, err = c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"SELECT create_distributed_table('ct_lock', 'id')", "ALTER TABLE ct_lock RENAME COLUMN v TO w",
		"SELECT count(*) FROM ct_lock"} {
		if _, err := tx.Exec(ctx, q, simple); err != nil {
			t.Fatalf("%s in the block: %v", q, err)
		}
	}
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	var n int
	err = reader.QueryRow(rctx, "SELECT count(*)::int FROM ct_lock", simple).Scan(&n)
	rcancel()
	if sqlState(err) != "40001" {
		t.Errorf("a reader while the block holds the table: %d rows, %v; want 40001", n, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(reader, "SELECT sum(w)::int FROM ct_lock"); n != 500500 {
		t.Errorf("after the COMMIT: sum %d, want 500500", n)
	}

	// The block renames the table or its column after the call, or drops
	// the table: the COMMIT distributes what the table is then (it failed
	// with 42P01 or 42703), or has nothing to move. Found by an adversary.
	exec(t, c, `CREATE TABLE ct_gone (id int); SELECT create_distributed_table('ct_gone', 'id'); DROP TABLE ct_gone`, simple)
	exec(t, c, `CREATE TABLE ct_name (id int, v text); INSERT INTO ct_name VALUES (1, 'a'), (2, 'b');
		SELECT create_distributed_table('ct_name', 'id'); ALTER TABLE ct_name RENAME TO ct_renamed;
		ALTER TABLE ct_renamed RENAME COLUMN id TO key`, simple)
	if !inCatalog("ct_renamed") || inCatalog("ct_name") || inCatalog("ct_gone") {
		t.Error("after the renames the catalog does not have ct_renamed (only)")
	}
	if v := queryString(t, c, "SELECT v FROM ct_renamed WHERE key = 2"); v != "b" {
		t.Errorf("routed read of ct_renamed by its renamed column: %q", v)
	}
	if rows, _ := shardRows("ct_renamed"); rows != 2 {
		t.Errorf("ct_renamed: %d rows on the shards, want 2", rows)
	}
	// A mixed-case name.
	exec(t, c, `CREATE TABLE "CT_Mixed" (id int); INSERT INTO "CT_Mixed" VALUES (5); SELECT create_distributed_table('"CT_Mixed"', 'id')`, simple)
	t.Cleanup(func() {
		_, _ = c.Exec(ctx, `SELECT undistribute_table('"CT_Mixed"')`, simple)
		_, _ = c.Exec(ctx, `DROP TABLE IF EXISTS "CT_Mixed"`, simple)
	})
	if n := count(c, `SELECT count(*)::int FROM "CT_Mixed" WHERE id = 5`); n != 1 {
		t.Errorf(`"CT_Mixed": %d rows, want 1`, n)
	}
	// COMMIT AND CHAIN: the chained block writes the table where it now
	// is (it got 40001, "distributed after this transaction began").
	exec(t, c, "CREATE TABLE ct_chain (id int, v text)", simple)
	exec(t, c, "BEGIN", simple)
	exec(t, c, "SELECT create_distributed_table('ct_chain', 'id')", simple)
	exec(t, c, "COMMIT AND CHAIN", simple)
	exec(t, c, "INSERT INTO ct_chain VALUES (1, 'a')", simple)
	exec(t, c, "COMMIT", simple)
	if n := count(c, "SELECT count(*)::int FROM ct_chain"); n != 1 || !inCatalog("ct_chain") {
		t.Errorf("ct_chain after COMMIT AND CHAIN: %d rows, in the catalog %v; want 1, true", n, inCatalog("ct_chain"))
	}
	noPrepared("at the end")
}
