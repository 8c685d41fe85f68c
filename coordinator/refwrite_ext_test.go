package coordinator_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestReferenceWriteExtended writes a reference table with parameters over
// the extended query protocol (pgx's cached statements and its exec mode):
// outside a transaction block every copy changes, atomically; inside one
// the write commits or rolls back with the transaction.
func TestReferenceWriteExtended(t *testing.T) {
	cl := pgtest.Shared(t)
	a := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, a.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	exec(t, c, "DROP TABLE IF EXISTS rx_ref", simple)
	exec(t, c, "CREATE TABLE rx_ref (id int PRIMARY KEY, name text, n bigint)", simple)
	exec(t, c, "INSERT INTO rx_ref SELECT g, 'r' || g, g FROM generate_series(1, 10) g", simple)
	exec(t, c, "SELECT create_reference_table('rx_ref')", simple)
	t.Cleanup(func() {
		for _, q := range []string{"SELECT undistribute_table('rx_ref')", "DROP TABLE IF EXISTS rx_ref"} {
			_, _ = c.Exec(ctx, q, simple)
		}
	})
	meta := connect(t, cl.Servers[0].Addr())
	var shard string
	if err := meta.QueryRow(ctx, "SELECT shardid::text FROM pgfleet.shards WHERE table_name = 'public.rx_ref'").Scan(&shard); err != nil {
		t.Fatal(err)
	}
	copyTable := "pgfleet_shards.rx_ref_" + shard
	var workers []*pgx.Conn
	for _, s := range cl.Servers {
		workers = append(workers, connect(t, s.Addr()))
	}
	// copies returns each copy's contents, which must agree.
	copies := func(what string) string {
		t.Helper()
		var first string
		for i, w := range workers {
			var got string
			if err := w.QueryRow(ctx, "SELECT coalesce(string_agg(id || ':' || name || ':' || n, ',' ORDER BY id), '') FROM "+copyTable, simple).Scan(&got); err != nil {
				t.Fatalf("%s: copy on %s: %v", what, cl.Servers[i].Addr(), err)
			}
			if i == 0 {
				first = got
			} else if got != first {
				t.Fatalf("%s: copies differ:\n%s: %s\n%s: %s", what, cl.Servers[0].Addr(), first, cl.Servers[i].Addr(), got)
			}
		}
		return first
	}
	run := func(what, sql string, mode pgx.QueryExecMode, args ...any) string {
		t.Helper()
		tag, err := c.Exec(ctx, sql, append([]any{mode}, args...)...)
		if err != nil {
			t.Fatalf("%s: %s: %v", what, sql, err)
		}
		return tag.String()
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec} {
		m := mode.String()
		base := copies(m + ": before")
		id := 100 + int(mode)
		if tag := run(m, "INSERT INTO rx_ref VALUES ($1, $2, $3)", mode, id, "new", int64(7)); tag != "INSERT 0 1" {
			t.Errorf("%s: insert: %s", m, tag)
		}
		if tag := run(m, "UPDATE rx_ref SET n = n + $1, name = $2 WHERE id = $3 OR id = $4", mode, int64(5), "upd", id, 3); tag != "UPDATE 2" {
			t.Errorf("%s: update: %s", m, tag)
		}
		want := fmt.Sprintf("%d:upd:12", id)
		if got := copies(m + ": after insert and update"); !contains(got, want) || !contains(got, "3:upd:8") {
			t.Errorf("%s: copies after insert and update: %s", m, got)
		}
		if tag := run(m, "DELETE FROM rx_ref WHERE id = $1", mode, id); tag != "DELETE 1" {
			t.Errorf("%s: delete: %s", m, tag)
		}
		if tag := run(m, "UPDATE rx_ref SET n = $1, name = $2 WHERE id = $3", mode, int64(3), "r3", 3); tag != "UPDATE 1" {
			t.Errorf("%s: update back: %s", m, tag)
		}
		if got := copies(m + ": after delete"); got != base {
			t.Errorf("%s: copies after delete:\n%s\nwant\n%s", m, got, base)
		}
		// A row on the last copy only: the write succeeds on the other
		// copy, fails there, and changes no copy.
		last := workers[len(workers)-1]
		if _, err := last.Exec(ctx, "INSERT INTO "+copyTable+" VALUES (999, 'stray', 0)", simple); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Exec(ctx, "INSERT INTO rx_ref VALUES ($1, $2, $3)", mode, 999, "dup", int64(1)); sqlState(err) != "23505" {
			t.Errorf("%s: unique violation on one copy: %v, want 23505", m, err)
		}
		if _, err := c.Exec(ctx, "INSERT INTO rx_ref VALUES ($1, $2, $3)", mode, 1, "dup", int64(1)); sqlState(err) != "23505" {
			t.Errorf("%s: unique violation: %v, want 23505", m, err)
		}
		if _, err := last.Exec(ctx, "DELETE FROM "+copyTable+" WHERE id = 999", simple); err != nil {
			t.Fatal(err)
		}
		if got := copies(m + ": after failed writes"); got != base {
			t.Errorf("%s: a failed write changed the copies:\n%s\nwant\n%s", m, got, base)
		}
		// The session still works.
		if got := queryString(t, c, "SELECT name FROM rx_ref WHERE id = $1", 2); got != "r2" {
			t.Errorf("%s: read after failed write: %q", m, got)
		}

		// Inside a transaction block: rolled back, then committed.
		exec(t, c, "BEGIN", mode)
		run(m, "UPDATE rx_ref SET n = n + $1 WHERE id = $2", mode, int64(1000), 4)
		run(m, "INSERT INTO rx_ref VALUES ($1, $2, $3)", mode, id, "tx", int64(1))
		var n int64
		if err := c.QueryRow(ctx, "SELECT n FROM rx_ref WHERE id = $1", mode, 4).Scan(&n); err != nil || n != 1004 {
			t.Errorf("%s: read in the transaction: %d, %v", m, n, err)
		}
		exec(t, c, "ROLLBACK", mode)
		if got := copies(m + ": after ROLLBACK"); got != base {
			t.Errorf("%s: ROLLBACK left changes:\n%s\nwant\n%s", m, got, base)
		}
		// A failing write fails the transaction; nothing commits.
		if _, err := last.Exec(ctx, "INSERT INTO "+copyTable+" VALUES (999, 'stray', 0)", simple); err != nil {
			t.Fatal(err)
		}
		for _, dup := range []int{1, 999} {
			exec(t, c, "BEGIN", mode)
			run(m, "UPDATE rx_ref SET n = n + $1 WHERE id = $2", mode, int64(1000), 4)
			if _, err := c.Exec(ctx, "INSERT INTO rx_ref VALUES ($1, $2, $3)", mode, dup, "dup", int64(1)); sqlState(err) != "23505" {
				t.Errorf("%s: unique violation in a transaction: %v, want 23505", m, err)
			}
			if _, err := c.Exec(ctx, "SELECT 1", mode); sqlState(err) != "25P02" {
				t.Errorf("%s: statement after the failed write: %v, want 25P02", m, err)
			}
			if tag, err := c.Exec(ctx, "COMMIT", mode); err != nil || tag.String() != "ROLLBACK" {
				t.Errorf("%s: COMMIT of a failed transaction: %v %v", m, tag, err)
			}
		}
		if _, err := last.Exec(ctx, "DELETE FROM "+copyTable+" WHERE id = 999", simple); err != nil {
			t.Fatal(err)
		}
		if got := copies(m + ": after failed transaction"); got != base {
			t.Errorf("%s: a failed transaction left changes:\n%s\nwant\n%s", m, got, base)
		}
		exec(t, c, "BEGIN", mode)
		run(m, "UPDATE rx_ref SET n = n + $1 WHERE id = $2", mode, int64(1000), 4)
		if tag := run(m, "INSERT INTO rx_ref VALUES ($1, $2, $3)", mode, id, "tx", int64(1)); tag != "INSERT 0 1" {
			t.Errorf("%s: insert in a transaction: %s", m, tag)
		}
		exec(t, c, "COMMIT", mode)
		got := copies(m + ": after COMMIT")
		if !contains(got, "4:r4:1004") || !contains(got, fmt.Sprintf("%d:tx:1", id)) {
			t.Errorf("%s: copies after COMMIT: %s", m, got)
		}
		run(m, "UPDATE rx_ref SET n = $1 WHERE id = $2", mode, int64(4), 4)
		run(m, "DELETE FROM rx_ref WHERE id = $1", mode, id)
		if got := copies(m + ": restored"); got != base {
			t.Errorf("%s: restored copies:\n%s\nwant\n%s", m, got, base)
		}
	}
	// A session pinned to its worker connection writes outside a
	// transaction block; inside one the write cannot reach every copy.
	pinned := connect(t, a.Addr())
	exec(t, pinned, "CREATE TEMP TABLE rx_tmp (x int)", simple)
	base := copies("pinned: before")
	if _, err := pinned.Exec(ctx, "UPDATE rx_ref SET name = $1 WHERE id = $2", "pin", 5); err != nil {
		t.Errorf("pinned session: %v", err)
	}
	if got := copies("pinned: after"); !contains(got, "5:pin:5") {
		t.Errorf("pinned session: copies: %s", got)
	}
	exec(t, pinned, "BEGIN")
	if _, err := pinned.Exec(ctx, "UPDATE rx_ref SET name = $1 WHERE id = $2", "r5", 5); sqlState(err) != "0A000" {
		t.Errorf("pinned session in a transaction: %v, want 0A000", err)
	}
	exec(t, pinned, "ROLLBACK")
	exec(t, pinned, "UPDATE rx_ref SET name = $1 WHERE id = $2", "r5", 5)
	if got := copies("pinned: restored"); got != base {
		t.Errorf("pinned session: restored copies:\n%s\nwant\n%s", got, base)
	}

	// In a pipeline (one Sync), after another statement: part of the
	// pipeline's one transaction, on every copy; a later error in the
	// pipeline undoes it on every copy.
	b := &pgx.Batch{}
	b.Queue("SELECT name FROM rx_ref WHERE id = $1", 1)
	b.Queue("UPDATE rx_ref SET name = $1 WHERE id = $2", "batch", 6)
	b.Queue("SELECT 1/0")
	br := c.SendBatch(ctx, b)
	var name string
	if err := br.QueryRow().Scan(&name); err != nil || name != "r1" {
		t.Errorf("batch: first statement: %q, %v", name, err)
	}
	if tag, err := br.Exec(); err != nil || tag.String() != "UPDATE 1" {
		t.Errorf("batch: reference write after another statement: %v %v, want UPDATE 1", tag, err)
	}
	if _, err := br.Exec(); sqlState(err) != "22012" {
		t.Errorf("batch: error after the write: %v, want 22012", err)
	}
	_ = br.Close()
	if got := copies("batch"); got != base {
		t.Errorf("batch: copies after a failed pipeline:\n%s\nwant\n%s", got, base)
	}
	b = &pgx.Batch{}
	b.Queue("SELECT name FROM rx_ref WHERE id = $1", 1)
	b.Queue("UPDATE rx_ref SET name = $1 WHERE id = $2", "batch", 6)
	if err := c.SendBatch(ctx, b).Close(); err != nil {
		t.Errorf("batch: %v", err)
	}
	if got := copies("batch"); !contains(got, "6:batch:6") {
		t.Errorf("batch: copies after the pipeline:\n%s", got)
	}
	exec(t, c, "UPDATE rx_ref SET name = $1 WHERE id = $2", "r6", 6)
	if got := copies("batch: restored"); got != base {
		t.Errorf("batch: restored copies:\n%s\nwant\n%s", got, base)
	}

	// RETURNING (what ORMs send for an INSERT that reads back its row):
	// the rows and tag PostgreSQL gives for the same statement on a plain
	// table, in the client's formats (binary where pgx knows the types),
	// in and out of transaction blocks, and every copy written alike.
	exec(t, c, "DROP TABLE IF EXISTS rx_plain", simple)
	exec(t, c, "CREATE TABLE rx_plain (id int PRIMARY KEY, name text, n bigint)", simple)
	var rows []string
	for _, r := range strings.Split(copies("the plain table"), ",") {
		f := strings.Split(r, ":")
		rows = append(rows, fmt.Sprintf("(%s, '%s', %s)", f[0], f[1], f[2]))
	}
	exec(t, c, "INSERT INTO rx_plain VALUES "+strings.Join(rows, ", "), simple)
	t.Cleanup(func() { _, _ = c.Exec(ctx, "DROP TABLE IF EXISTS rx_plain", simple) })
	plain := func() string {
		var got string
		if err := c.QueryRow(ctx, "SELECT coalesce(string_agg(id || ':' || name || ':' || n, ',' ORDER BY id), '') FROM rx_plain", simple).Scan(&got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	k := 100
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec} {
		for _, end := range []string{"", "COMMIT", "ROLLBACK"} {
			k++
			for _, q := range []struct {
				sql  string
				args []any
			}{
				{"INSERT INTO {t} (id, name, n) VALUES ($1, $2, $3) RETURNING id, name, n * 2 AS twice", []any{k, "new", int64(k)}},
				{"UPDATE {t} SET n = n + $1 WHERE id <= $2 RETURNING *", []any{int64(1), 3}},
				{"UPDATE {t} SET name = name WHERE id = -1 RETURNING id", []any{}},
				{"DELETE FROM {t} WHERE id = $1 RETURNING name, n", []any{k}},
			} {
				var outs [2]oracleRun
				for i, tb := range []string{"rx_ref", "rx_plain"} {
					if end != "" {
						exec(t, c, "BEGIN")
					}
					sql := strings.ReplaceAll(q.sql, "{t}", tb)
					outs[i] = gatherRun(t, c, sql, mode, q.args...)
					if end != "" {
						exec(t, c, end)
					}
				}
				if !reflect.DeepEqual(outs[0], outs[1]) || outs[0].State != "" {
					t.Fatalf("%s (mode %v, %q):\n got %+v\nwant %+v (plain PostgreSQL)", q.sql, mode, end, outs[0], outs[1])
				}
				if got, want := copies(q.sql), plain(); got != want {
					t.Fatalf("%s (mode %v, %q): copies\n%s\nwant\n%s", q.sql, mode, end, got, want)
				}
			}
		}
	}
	// A failing RETURNING write changes no copy, in and out of a block.
	before := copies("before a failing RETURNING")
	if _, err := c.Exec(ctx, "INSERT INTO rx_ref (id, name, n) VALUES ($1, 'dup', 0) RETURNING id", 1); sqlState(err) != "23505" {
		t.Errorf("duplicate key with RETURNING: %v, want 23505", err)
	}
	exec(t, c, "BEGIN")
	if _, err := c.Exec(ctx, "UPDATE rx_ref SET n = n / $1 RETURNING id", 0); sqlState(err) != "22012" {
		t.Errorf("division by zero with RETURNING in a block: %v, want 22012", err)
	}
	exec(t, c, "ROLLBACK")
	if got := copies("after a failing RETURNING"); got != before {
		t.Errorf("copies changed by failing writes:\n%s\nwant\n%s", got, before)
	}
}

func contains(list, item string) bool {
	for len(list) > 0 {
		i := 0
		for i < len(list) && list[i] != ',' {
			i++
		}
		if list[:i] == item {
			return true
		}
		if i == len(list) {
			break
		}
		list = list[i+1:]
	}
	return false
}

// TestReferenceWriteExtendedPgbench runs pgbench's TPC-B-like script with
// the extended protocol (-M extended and -M prepared): tellers and
// branches, reference tables, are written in every transaction.
func TestReferenceWriteExtendedPgbench(t *testing.T) {
	tpcbAcrossWorkers(t, "extended", "prepared")
}

// TestReferenceWriteInTxnPrepared: a reference-table write of the extended
// protocol in a transaction block runs on each copy as a statement the
// worker connection prepared once (refExecuteInTxn). It keeps running
// after the table changes under it, a Parse the worker refused is made
// again, and a write with RETURNING, whose columns follow the table's,
// gives a client that prepared it after an ALTER TABLE the new columns.
func TestReferenceWriteInTxnPrepared(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	prepared := pgx.QueryExecModeCacheStatement
	testTable(t, c, "rp_ref", "(id int PRIMARY KEY, n bigint, x int)", "SELECT create_reference_table('rp_ref')")
	exec(t, c, "INSERT INTO rp_ref SELECT g, 0, 0 FROM generate_series(1, 5) g", simple)
	var shard string
	if err := connect(t, cl.Servers[0].Addr()).QueryRow(ctx, "SELECT shardid::text FROM pgfleet.shards WHERE table_name = 'public.rp_ref'").Scan(&shard); err != nil {
		t.Fatal(err)
	}
	copies := func(what, want string) {
		t.Helper()
		for _, s := range cl.Servers {
			got := queryString(t, connect(t, s.Addr()), "SELECT string_agg(id || ':' || n, ',' ORDER BY id) FROM pgfleet_shards.rp_ref_"+shard)
			if got != want {
				t.Errorf("%s: copy on %s is %s, want %s", what, s.Addr(), got, want)
			}
		}
	}
	// txnOn runs sql prepared in a transaction block of its own on conn.
	txnOn := func(conn *pgx.Conn, sql string, args ...any) error {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, sql, append([]any{prepared}, args...)...); err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		return tx.Commit(ctx)
	}
	const upd = "UPDATE rp_ref SET n = n + $1 WHERE id = $2"
	for i := 1; i <= 3; i++ {
		if err := txnOn(c, upd, int64(10), i); err != nil {
			t.Fatalf("update %d: %v", i, err)
		}
	}
	copies("three updates", "1:10,2:10,3:10,4:0,5:0")

	// The column the statement writes goes away and comes back.
	const updx = "UPDATE rp_ref SET x = x + $1 WHERE id = $2"
	if err := txnOn(c, updx, 1, 1); err != nil {
		t.Fatal(err)
	}
	// A client of a coordinator whose connections never ran it prepares
	// it now and runs it after the DROP: the workers refuse the Parse
	// itself, which is then not taken as done.
	other := connect(t, pgtest.Coordinator(t, cl, poolSize(1)).Addr())
	if _, err := other.Prepare(ctx, "updx", updx); err != nil {
		t.Fatal(err)
	}
	exec(t, c, "ALTER TABLE rp_ref DROP COLUMN x", simple)
	if err := txnOn(c, updx, 1, 1); sqlState(err) != "42703" {
		t.Errorf("writing a dropped column: %v, want 42703", err)
	}
	otherTxn := func(sql string, args ...any) error { return txnOn(other, sql, args...) }
	if err := otherTxn("updx", 1, 1); sqlState(err) != "42703" {
		t.Errorf("writing a dropped column, fresh connections: %v, want 42703", err)
	}
	exec(t, c, "ALTER TABLE rp_ref ADD COLUMN x int DEFAULT 0", simple)
	if err := txnOn(c, updx, 2, 1); err != nil {
		t.Errorf("writing the column added again: %v", err)
	}
	if err := otherTxn("updx", 3, 1); err != nil {
		t.Errorf("writing the column added again, on the connections whose Parse failed: %v", err)
	}
	if err := txnOn(c, upd, int64(1), 2); err != nil {
		t.Errorf("update after the changes: %v", err)
	}
	copies("after the changes", "1:10,2:11,3:10,4:0,5:0")
	if got := queryString(t, c, "SELECT x::text FROM rp_ref WHERE id = 1"); got != "5" {
		t.Errorf("x of row 1: %s, want 5", got)
	}

	// RETURNING *: a client preparing it after ADD COLUMN gets the column.
	const ret = "UPDATE rp_ref SET n = n + $1 WHERE id = $2 RETURNING *"
	if err := txnOn(c, ret, int64(1), 3); err != nil {
		t.Fatal(err)
	}
	exec(t, c, "ALTER TABLE rp_ref ADD COLUMN y text DEFAULT 'y'", simple)
	fresh := connect(t, srv.Addr())
	tx, err := fresh.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(ctx, ret, prepared, int64(1), 3)
	if err != nil {
		t.Fatal(err)
	}
	var cols []string
	for _, f := range rows.FieldDescriptions() {
		cols = append(cols, f.Name)
	}
	for rows.Next() {
	}
	if err := rows.Err(); err != nil {
		t.Errorf("RETURNING * prepared after ADD COLUMN: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cols, ","); got != "id,n,x,y" {
		t.Errorf("RETURNING * prepared after ADD COLUMN: columns %s, want id,n,x,y", got)
	}
	copies("after RETURNING", "1:10,2:11,3:12,4:0,5:0")
}
