package coordinator_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestCopyFromBinary: pgx's CopyFrom (COPY ... FROM STDIN in binary
// format) into distributed tables of every distribution type and into a
// reference table stores each row in the shard PostgreSQL's hash gives
// (found again by a routed read of its key), outside and inside a
// transaction block, as plain PostgreSQL stores them; errors (a duplicate
// key, a NULL distribution value) keep nothing (was 0A000).
func TestCopyFromBinary(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	plain := oracleDB(t, cl.Servers[1].Addr(), "copybin_oracle")
	types := []struct {
		name, typ string
		val       func(i int) any
	}{
		{"cb_i2", "smallint", func(i int) any { return int16(i*7 - 300) }},
		{"cb_i4", "int", func(i int) any { return int32(i*1000003 - 50000000) }},
		{"cb_i8", "bigint", func(i int) any { return int64(i)*9000000000007 - 4000000000000000 }},
		{"cb_tx", "text", func(i int) any { return fmt.Sprintf("k%dé", i) }},
		{"cb_vc", "varchar(12)", func(i int) any { return fmt.Sprintf("v%d", i) }},
		{"cb_bp", "char(6)", func(i int) any { return fmt.Sprintf("b%d", i) }},
		{"cb_uu", "uuid", func(i int) any { return fmt.Sprintf("%08x-0000-4000-8000-%012x", i*7919, i) }},
	}
	for _, ty := range types {
		cols := fmt.Sprintf("(k %s PRIMARY KEY, n int, note text)", ty.typ)
		exec(t, plain, "DROP TABLE IF EXISTS "+ty.name)
		exec(t, plain, "CREATE TABLE "+ty.name+" "+cols)
		testTable(t, c, ty.name, cols, fmt.Sprintf("SELECT create_distributed_table('%s', 'k', shard_count => 8)", ty.name))
		name := ty.name
		t.Cleanup(func() { _, _ = plain.Exec(context.Background(), "DROP TABLE IF EXISTS "+name) })
		var rows [][]any
		for i := 1; i <= 60; i++ {
			var note any = fmt.Sprintf("row %d", i)
			if i%9 == 0 {
				note = nil
			}
			rows = append(rows, []any{ty.val(i), int32(i), note})
		}
		for _, conn := range []*pgx.Conn{c, plain} {
			n, err := conn.CopyFrom(ctx, pgx.Identifier{ty.name}, []string{"k", "n", "note"}, pgx.CopyFromRows(rows[:30]))
			if err != nil || n != 30 {
				t.Fatalf("%s: CopyFrom: %d, %v", ty.name, n, err)
			}
			// Inside a transaction block, then rolled back, then kept.
			for _, end := range []string{"ROLLBACK", "COMMIT"} {
				tx, err := conn.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if n, err := tx.CopyFrom(ctx, pgx.Identifier{ty.name}, []string{"k", "n", "note"}, pgx.CopyFromRows(rows[30:])); err != nil || n != 30 {
					t.Fatalf("%s: CopyFrom in a block: %d, %v", ty.name, n, err)
				}
				if _, err := tx.Exec(ctx, end); err != nil {
					t.Fatal(err)
				}
			}
			// A duplicate key: nothing of the COPY stays.
			if _, err := conn.CopyFrom(ctx, pgx.Identifier{ty.name}, []string{"k", "n", "note"},
				pgx.CopyFromRows([][]any{{ty.val(61), int32(61), "new"}, {ty.val(5), int32(5), "dup"}})); sqlState(err) != "23505" {
				t.Errorf("%s: CopyFrom of a duplicate key: %v, want 23505", ty.name, err)
			}
		}
		q := "SELECT count(*)::text || ' ' || sum(n)::text || ' ' || count(note)::text || ' ' || string_agg(k::text, ',' ORDER BY k) FROM " + ty.name
		if got, want := queryString(t, c, q), queryString(t, plain, q); got != want {
			t.Errorf("%s after the copies:\n got        %s\n PostgreSQL %s", ty.name, got, want)
		}
		for i := 1; i <= 60; i++ {
			// A routed read finds each row in the shard its key hashes to.
			var n int
			if err := c.QueryRow(ctx, "SELECT n FROM "+ty.name+" WHERE k = $1", ty.val(i)).Scan(&n); err != nil || n != i {
				t.Errorf("%s: routed read of row %d: %d, %v", ty.name, i, n, err)
			}
		}
	}
	// A NULL distribution value: refused as PostgreSQL's NOT NULL would.
	if _, err := c.CopyFrom(ctx, pgx.Identifier{"cb_i4"}, []string{"k", "n"}, pgx.CopyFromRows([][]any{{nil, int32(1)}})); sqlState(err) != "23502" {
		t.Errorf("CopyFrom of a NULL key: %v, want 23502", err)
	}
	// A reference table.
	testTable(t, c, "cb_ref", "(k int PRIMARY KEY, w text)", "SELECT create_reference_table('cb_ref')")
	if n, err := c.CopyFrom(ctx, pgx.Identifier{"cb_ref"}, []string{"k", "w"}, pgx.CopyFromRows([][]any{{int32(1), "a"}, {int32(2), nil}})); err != nil || n != 2 {
		t.Errorf("CopyFrom into a reference table: %d, %v", n, err)
	}
	for _, s := range cl.Servers {
		if got := queryString(t, connect(t, s.Addr()), "SELECT count(*)::text FROM pg_class WHERE relname ~ '^cb_ref_[0-9]+$'"); got != "1" {
			t.Fatalf("reference table copy on %s: %s", s.Addr(), got)
		}
	}
	if got := queryString(t, c, "SELECT string_agg(k || ':' || coalesce(w, 'NULL'), ',' ORDER BY k) FROM cb_ref"); got != "1:a,2:NULL" {
		t.Errorf("cb_ref: %s", got)
	}
}
