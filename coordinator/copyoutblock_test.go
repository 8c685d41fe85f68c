package coordinator_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestCopyOutInTransactionBlock: COPY of a distributed table TO STDOUT
// inside a transaction block (psycopg2's copy_expert, which always runs in
// one) copies the rows the block sees, its own writes included, as
// PostgreSQL does; the table form and the COPY (query) form, text and CSV
// with options, and after a ROLLBACK the rows as they were. A plain table
// of the same rows written the same way is the oracle. ENCODING, which the
// coordinator does not write, is refused there (0A000).
func TestCopyOutInTransactionBlock(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	c := connect(t, srv.Addr())
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	const cols = "(id int PRIMARY KEY, t text, n numeric)"
	testTable(t, c, "cob", cols, "SELECT create_distributed_table('cob', 'id', shard_count => 4)")
	plainTables(t, c, "cobo "+cols)
	for _, tb := range []string{"cob", "cobo"} {
		exec(t, c, "INSERT INTO "+tb+" SELECT g, CASE WHEN g % 5 = 0 THEN NULL ELSE 'r' || g || E'\\t,\"' END, g / 3.0 FROM generate_series(1, 30) g", simple)
	}
	copyLines := func(sql string) ([]string, string, error) {
		var buf bytes.Buffer
		tag, err := c.PgConn().CopyTo(ctx, &buf, sql)
		return strings.SplitAfter(buf.String(), "\n"), tag.String(), err
	}
	queries := []string{
		"COPY {t} TO STDOUT",
		"COPY {t} (t, id) TO STDOUT WITH (FORMAT csv, HEADER, FORCE_QUOTE *)",
		"COPY {t} TO STDOUT WITH (FORMAT csv, HEADER true, DELIMITER ';', NULL 'nil')",
		"COPY (SELECT id, n FROM {t} WHERE id > 20) TO STDOUT (DELIMITER '|')",
		"COPY (SELECT id, t FROM {t}) TO STDOUT WITH (FORMAT csv)",
	}
	compare := func(when string) {
		t.Helper()
		for _, q := range queries {
			got, gotTag, err := copyLines(strings.ReplaceAll(q, "{t}", "cob"))
			if err != nil {
				t.Fatalf("%s: %s: %v", when, q, err)
			}
			want, wantTag, werr := copyLines(strings.ReplaceAll(q, "{t}", "cobo"))
			if werr != nil {
				t.Fatalf("%s: %s on PostgreSQL: %v", when, q, werr)
			}
			if gotTag != wantTag {
				t.Errorf("%s: %s: tag %q, want %q", when, q, gotTag, wantTag)
			}
			if strings.Contains(q, "HEADER") && got[0] != want[0] {
				t.Errorf("%s: %s: header %q, want %q", when, q, got[0], want[0])
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("%s: %s:\n got %q\nwant %q", when, q, got, want)
			}
		}
	}
	exec(t, c, "BEGIN", simple)
	for _, tb := range []string{"cob", "cobo"} {
		exec(t, c, "INSERT INTO "+tb+" VALUES (31, 'new', 1.5), (32, NULL, 2)", simple)
		exec(t, c, "UPDATE "+tb+" SET t = 'changed' WHERE id IN (3, 4, 22)", simple)
		exec(t, c, "DELETE FROM "+tb+" WHERE id IN (7, 28)", simple)
	}
	compare("in the block")
	exec(t, c, "ROLLBACK", simple)
	compare("after ROLLBACK")
	// psycopg2's way: a block opened by the driver, the COPY its first statement.
	exec(t, c, "BEGIN", simple)
	compare("first in a block")
	if _, _, err := copyLines("COPY cob TO STDOUT WITH (ENCODING 'LATIN1')"); sqlState(err) != "0A000" {
		t.Errorf("COPY with ENCODING in a block: %v, want 0A000", err)
	}
	exec(t, c, "ROLLBACK", simple)
	if n := queryString(t, c, "SELECT count(*)::text FROM cob"); n != fmt.Sprint(30) {
		t.Errorf("rows after it all: %s, want 30", n)
	}
}
