package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestCopyInTransactionBlock: COPY FROM STDIN into distributed and
// reference tables inside a transaction block joins the block: later
// statements see the rows, COMMIT keeps them on every shard, ROLLBACK
// (also to a savepoint) keeps none, an error fails the transaction; as on
// plain PostgreSQL (was 0A000).
func TestCopyInTransactionBlock(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	plain := oracleDB(t, cl.Servers[1].Addr(), "copytxn_oracle")
	for _, conn := range []*pgx.Conn{c, plain} {
		exec(t, conn, "DROP TABLE IF EXISTS ct_t, ct_r")
		exec(t, conn, "CREATE TABLE ct_t (id int PRIMARY KEY, v text)")
		exec(t, conn, "CREATE TABLE ct_r (k int PRIMARY KEY, name text)")
	}
	t.Cleanup(func() { _, _ = plain.Exec(context.Background(), "DROP TABLE IF EXISTS ct_t, ct_r") })
	testTable(t, c, "ct_t", "(id int PRIMARY KEY, v text)", "SELECT create_distributed_table('ct_t', 'id', shard_count => 4)")
	testTable(t, c, "ct_r", "(k int PRIMARY KEY, name text)", "SELECT create_reference_table('ct_r')")
	rows := func(from, to int) string {
		var b strings.Builder
		for i := from; i <= to; i++ {
			fmt.Fprintf(&b, "%d\tv%d\n", i, i)
		}
		return b.String()
	}
	type step struct {
		sql  string
		data string // COPY FROM STDIN's rows
	}
	run := func(conn *pgx.Conn, s step) string {
		if s.data != "" || strings.HasPrefix(s.sql, "COPY") {
			tag, err := conn.PgConn().CopyFrom(ctx, strings.NewReader(s.data), s.sql)
			if err != nil {
				return "error " + sqlState(err)
			}
			return tag.String()
		}
		res, err := conn.PgConn().Exec(ctx, s.sql).ReadAll()
		if err != nil {
			return "error " + sqlState(err)
		}
		var b strings.Builder
		for _, r := range res {
			b.WriteString(r.CommandTag.String())
			for _, row := range r.Rows {
				for _, v := range row {
					b.WriteString(" " + string(v))
				}
			}
		}
		return b.String()
	}
	steps := []step{
		{sql: "BEGIN"},
		{sql: "INSERT INTO ct_t VALUES (1000, 'before')"},
		{sql: "COPY ct_t FROM STDIN", data: rows(1, 40)},
		{sql: "SELECT count(*), sum(id) FROM ct_t"},
		{sql: "UPDATE ct_t SET v = 'changed' WHERE id = 7"},
		{sql: "COPY ct_r FROM STDIN", data: "1\tone\n2\ttwo\n"},
		{sql: "SELECT count(*) FROM ct_t t JOIN ct_r r ON r.k = t.id"},
		{sql: "ROLLBACK"},
		{sql: "SELECT count(*) FROM ct_t"},
		{sql: "SELECT count(*) FROM ct_r"},
		{sql: "BEGIN"},
		{sql: "COPY ct_t FROM STDIN", data: rows(1, 30)},
		{sql: "SAVEPOINT s"},
		{sql: "COPY ct_t FROM STDIN", data: rows(31, 60)},
		{sql: "ROLLBACK TO SAVEPOINT s"},
		{sql: "COPY ct_r FROM STDIN", data: "1\tone\n2\ttwo\n3\tthree\n"},
		{sql: "COMMIT"},
		{sql: "SELECT count(*), sum(id), min(v), max(v) FROM ct_t"},
		{sql: "SELECT k, name FROM ct_r ORDER BY k"},
		// A duplicate key on one shard fails the transaction: nothing of
		// it stays.
		{sql: "BEGIN"},
		{sql: "INSERT INTO ct_t VALUES (2000, 'x')"},
		{sql: "COPY ct_t FROM STDIN", data: rows(100, 120) + "5\tdup\n"},
		{sql: "SELECT 1"},
		{sql: "COMMIT"},
		{sql: "SELECT count(*) FROM ct_t"},
		// A row the coordinator cannot read fails it too.
		{sql: "BEGIN"},
		{sql: "COPY ct_t FROM STDIN", data: rows(200, 210) + "notanumber\tx\n"},
		{sql: "ROLLBACK"},
		{sql: "SELECT count(*) FROM ct_t"},
	}
	for _, s := range steps {
		got, want := run(c, s), run(plain, s)
		if got != want {
			t.Errorf("%s:\n got        %s\n PostgreSQL %s", s.sql, got, want)
		}
	}
}
