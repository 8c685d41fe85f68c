package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// describeRun is the columns, rows and tag (or SQLSTATE) of one statement
// sent as a simple Query.
func describeRun(t *testing.T, pc *pgconn.PgConn, sql string) string {
	t.Helper()
	var b strings.Builder
	mrr := pc.Exec(context.Background(), sql)
	for mrr.NextResult() {
		rr := mrr.ResultReader()
		for _, f := range rr.FieldDescriptions() {
			fmt.Fprintf(&b, "%s:%d ", f.Name, f.DataTypeOID)
		}
		n := 0
		for rr.NextRow() {
			n++
		}
		tag, err := rr.Close()
		if err != nil {
			fmt.Fprintf(&b, "error %s; ", sqlState(err))
			continue
		}
		fmt.Fprintf(&b, "%d rows %s; ", n, tag)
	}
	if err := mrr.Close(); err != nil {
		fmt.Fprintf(&b, "error %s", sqlState(err))
	}
	return b.String()
}

// TestReturningNoRows: a write with RETURNING that returns no row still
// describes its columns, as PostgreSQL does: multi-shard UPDATE and
// DELETE, INSERT ... SELECT between colocated tables, and reference-table
// writes (regression: the columns were left out, and clients saw none).
func TestReturningNoRows(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	c := connect(t, srv.Addr())
	testTable(t, c, "rn", "(k bigint PRIMARY KEY, v text)", "SELECT create_distributed_table('rn', 'k', shard_count => 4)")
	testTable(t, c, "rn2", "(k bigint PRIMARY KEY, v text)", "SELECT create_distributed_table('rn2', 'k', colocate_with => 'rn')")
	testTable(t, c, "rnr", "(k int PRIMARY KEY, v text)", "SELECT create_reference_table('rnr')")
	plainTables(t, c, "rno (k bigint PRIMARY KEY, v text)", "rno2 (k bigint PRIMARY KEY, v text)", "rnro (k int PRIMARY KEY, v text)")
	for _, tb := range []string{"rn", "rno", "rnr", "rnro"} {
		exec(t, c, "INSERT INTO "+tb+" VALUES (1, 'a'), (2, 'b'), (3, 'c')")
	}
	pc := c.PgConn()
	fleet := strings.NewReplacer("{t}", "rn", "{t2}", "rn2", "{r}", "rnr")
	oracle := strings.NewReplacer("{t}", "rno", "{t2}", "rno2", "{r}", "rnro")
	for _, q := range []string{
		"UPDATE {t} SET v = 'z' WHERE v = 'nope' RETURNING k, v",
		"DELETE FROM {t} WHERE v = 'nope' RETURNING *",
		"UPDATE {t} SET v = v WHERE k > 1 RETURNING k, v || '!' AS w",
		"INSERT INTO {t2} (k, v) SELECT k, v FROM {t} WHERE v = 'nope' RETURNING k",
		"DELETE FROM {r} WHERE k = 42 RETURNING k",
		"UPDATE {r} SET v = 'z' WHERE k = 42 RETURNING v, k",
		"INSERT INTO {r} VALUES (1, 'x') ON CONFLICT DO NOTHING RETURNING *",
		"DELETE FROM {t} WHERE k = 42 RETURNING k, v",
	} {
		for _, block := range []bool{false, true} {
			if block {
				q = "BEGIN; " + q + "; ROLLBACK"
			}
			got, want := describeRun(t, pc, fleet.Replace(q)), describeRun(t, pc, oracle.Replace(q))
			if got != want || strings.Contains(got, "error") {
				t.Errorf("%s:\n got %s\nwant %s (plain PostgreSQL)", q, got, want)
			}
		}
	}
}
