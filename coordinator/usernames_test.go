package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestErrorsNameUserTables: a worker's error about a shard reaches the
// client naming the user's table and constraint, as PostgreSQL would
// (ORMs map errors by constraint name), on every write path: routed
// INSERT in both protocols, multi-row INSERT over shards, COPY, and a
// CHECK violation; a key value that looks like a shard name is left alone.
func TestErrorsNameUserTables(t *testing.T) {
	cl := pgtest.Shared(t)
	co := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, co.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	exec(t, c, "DROP TABLE IF EXISTS un_acc")
	exec(t, c, "CREATE TABLE un_acc (id int, t text DEFAULT '', n int CHECK (n >= 0), PRIMARY KEY (id, t))")
	exec(t, c, "INSERT INTO un_acc (id, t, n) SELECT g, '', g FROM generate_series(2, 20) g")
	exec(t, c, "SELECT create_distributed_table('un_acc', 'id', shard_count => 4)", simple)
	t.Cleanup(func() {
		_, _ = c.Exec(ctx, "SELECT undistribute_table('un_acc')", simple)
		_, _ = c.Exec(ctx, "DROP TABLE IF EXISTS un_acc")
	})
	var shardID int64
	meta := connect(t, cl.Servers[0].Addr())
	if err := meta.QueryRow(ctx, "SELECT min(shardid) FROM pgfleet.shards WHERE table_name = 'public.un_acc'").Scan(&shardID); err != nil {
		t.Fatal(err)
	}
	// A unique key value spelled like a shard's name stays as it is in
	// the detail.
	look := fmt.Sprintf("un_acc_%d", shardID)
	exec(t, c, "INSERT INTO un_acc (id, t, n) VALUES (1, $1, 1)", look)

	// What PostgreSQL reports for the same table.
	direct := connect(t, cl.Servers[1].Addr())
	exec(t, direct, "CREATE TEMP TABLE un_acc (id int, t text DEFAULT '', n int CHECK (n >= 0), PRIMARY KEY (id, t))")
	exec(t, direct, "INSERT INTO un_acc (id, t, n) VALUES (1, $1, 1)", look)
	exec(t, direct, "INSERT INTO un_acc (id, t, n) VALUES (2, '', 2)")

	check := func(what string, err, want error) {
		t.Helper()
		var pe, we *pgconn.PgError
		if !errors.As(err, &pe) || !errors.As(want, &we) {
			t.Fatalf("%s: %v (PostgreSQL: %v)", what, err, want)
		}
		if pe.Code != we.Code || pe.TableName != we.TableName || pe.ConstraintName != we.ConstraintName ||
			pe.Detail != we.Detail || !strings.HasSuffix(pe.Message, we.Message) {
			t.Errorf("%s:\n got  %s table=%q constraint=%q message=%q detail=%q\n want %s table=%q constraint=%q message=%q detail=%q",
				what, pe.Code, pe.TableName, pe.ConstraintName, pe.Message, pe.Detail,
				we.Code, we.TableName, we.ConstraintName, we.Message, we.Detail)
		}
		// The table's schema, not the shards' (PostgreSQL's is the temporary one).
		if we.SchemaName != "" && pe.SchemaName != "public" {
			t.Errorf("%s: schema %q, want public", what, pe.SchemaName)
		}
	}
	run := func(conn *pgx.Conn, sql string, mode pgx.QueryExecMode, args ...any) error {
		_, err := conn.Exec(ctx, sql, append([]any{mode}, args...)...)
		return err
	}
	for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeCacheStatement} {
		q := "INSERT INTO un_acc (id, t, n) VALUES (2, '', 5)"
		check(fmt.Sprintf("routed duplicate key (%v)", mode), run(c, q, mode), run(direct, q, mode))
		q = "INSERT INTO un_acc (id, t, n) VALUES (99, '', -1)"
		check(fmt.Sprintf("check constraint (%v)", mode), run(c, q, mode), run(direct, q, mode))
		q = "INSERT INTO un_acc (id, t) VALUES (1, $1)"
		check(fmt.Sprintf("unique value that looks like a shard (%v)", mode), run(c, q, mode, look), run(direct, q, mode, look))
	}
	q := "INSERT INTO un_acc (id, n) VALUES (2, 5), (101, 1), (102, 1), (103, 1), (104, 1)"
	check("multi-row duplicate key", run(c, q, simple), run(direct, q, simple))
	copyIn := func(conn *pgx.Conn) error {
		_, err := conn.PgConn().CopyFrom(ctx, strings.NewReader("201\t1\n2\t1\n"), "COPY un_acc (id, n) FROM STDIN")
		return err
	}
	check("COPY duplicate key", copyIn(c), copyIn(direct))
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM un_acc").Scan(&n); err != nil || n != 20 {
		t.Errorf("%d rows after the failed writes (%v), want 20", n, err)
	}
}
