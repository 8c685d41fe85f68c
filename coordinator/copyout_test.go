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

// TestCopyOut: COPY of a distributed table TO STDOUT gives the lines
// PostgreSQL gives for the same rows (in any order; the header once, first),
// in text and csv, with a column list and without (generated columns left
// out), and PostgreSQL's errors.
func TestCopyOut(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	c := connect(t, srv.Addr())
	ctx := context.Background()
	const cols = "(id int PRIMARY KEY, t text, n numeric, ts timestamptz, twice int GENERATED ALWAYS AS (id * 2) STORED)"
	testTable(t, c, "co", cols, "SELECT create_distributed_table('co', 'id', shard_count => 5)")
	testTable(t, c, "coe", "(id int PRIMARY KEY)", "SELECT create_distributed_table('coe', 'id', shard_count => 3)")
	plainTables(t, c, "coo "+cols)
	var rows []string
	texts := []string{"plain", "tab\there", "new\nline", `back\slash`, "quote\"s,comma", "é日本", ""}
	for i := 1; i <= 60; i++ {
		tx := "NULL"
		if i%9 != 0 {
			tx = "'" + strings.ReplaceAll(texts[i%len(texts)], "'", "''") + "'"
		}
		rows = append(rows, fmt.Sprintf("(%d, %s, %d.%d, '2024-03-%02d 12:00:00+00')", i, tx, i%7-3, i%10, i%28+1))
	}
	for _, tb := range []string{"co", "coo"} {
		exec(t, c, "INSERT INTO "+tb+" (id, t, n, ts) VALUES "+strings.Join(rows, ", "))
	}
	copyLines := func(sql string) ([]string, string, error) {
		var buf bytes.Buffer
		tag, err := c.PgConn().CopyTo(ctx, &buf, sql)
		return strings.SplitAfter(buf.String(), "\n"), tag.String(), err
	}
	for _, q := range []string{
		"COPY {t} TO STDOUT",
		"COPY {t} (t, id) TO STDOUT WITH (FORMAT csv, HEADER, FORCE_QUOTE *)",
		"COPY {t} TO STDOUT WITH (FORMAT csv, HEADER true, DELIMITER ';', NULL 'nil')",
		"COPY {t} (id, n) TO STDOUT (DELIMITER '|')",
		"COPY public.{t} TO STDOUT",
	} {
		got, gotTag, err := copyLines(strings.ReplaceAll(q, "{t}", "co"))
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		want, wantTag, werr := copyLines(strings.ReplaceAll(q, "{t}", "coo"))
		if werr != nil {
			t.Fatalf("%s on PostgreSQL: %v", q, werr)
		}
		if gotTag != wantTag {
			t.Errorf("%s: tag %q, want %q", q, gotTag, wantTag)
		}
		if strings.Contains(q, "HEADER") {
			if got[0] != want[0] {
				t.Errorf("%s: header %q, want %q", q, got[0], want[0])
			}
			got, want = got[1:], want[1:]
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: lines differ:\n got %q\nwant %q", q, got, want)
		}
	}
	// An empty table, and errors as PostgreSQL's.
	if got, tag, err := copyLines("COPY coe TO STDOUT WITH (FORMAT csv, HEADER)"); err != nil || tag != "COPY 0" || strings.Join(got, "") != "id\n" {
		t.Errorf("empty table: %q %q %v", got, tag, err)
	}
	// COPY (query): routed to one shard, over a reference table, or the
	// shards' rows as they come.
	testTable(t, c, "cor", "(k int PRIMARY KEY, name text)", "SELECT create_reference_table('cor')")
	plainTables(t, c, "coro (k int PRIMARY KEY, name text)")
	for _, tb := range []string{"cor", "coro"} {
		exec(t, c, "INSERT INTO "+tb+" VALUES (1, 'one'), (2, 'two, \"2\"'), (3, NULL)")
	}
	names := strings.NewReplacer("{t}", "co", "{r}", "cor")
	oracle := strings.NewReplacer("{t}", "coo", "{r}", "coro")
	for _, q := range []struct {
		sql     string
		ordered bool
	}{
		{"COPY (SELECT id, t, n FROM {t} WHERE id = 7) TO STDOUT", true},
		{"COPY (SELECT c.id, c.t, r.name FROM {t} c JOIN {r} r ON r.k = c.id % 4 WHERE c.id = 9) TO STDOUT WITH (FORMAT csv, HEADER)", true},
		{"COPY (SELECT * FROM {r} ORDER BY k DESC) TO STDOUT (FORMAT csv, HEADER, FORCE_QUOTE *)", true},
		{"COPY (SELECT id, upper(t), ts FROM {t} WHERE n > 0) TO STDOUT WITH (FORMAT csv, HEADER)", false},
		{"COPY (SELECT c.id, r.name FROM {t} c LEFT JOIN {r} r ON r.k = c.id) TO STDOUT", false},
		// Binary, answered by one shard or one copy (psycopg's cursor.copy).
		{"COPY (SELECT id, t, n FROM {t} WHERE id = 7) TO STDOUT (FORMAT binary)", true},
		{"COPY (SELECT * FROM {r} ORDER BY k) TO STDOUT (FORMAT binary)", true},
	} {
		got, gotTag, err := copyLines(names.Replace(q.sql))
		if err != nil {
			t.Errorf("%s: %v", q.sql, err)
			continue
		}
		want, wantTag, werr := copyLines(oracle.Replace(q.sql))
		if werr != nil {
			t.Fatalf("%s on PostgreSQL: %v", q.sql, werr)
		}
		if !q.ordered {
			if strings.Contains(q.sql, "HEADER") {
				if got[0] != want[0] {
					t.Errorf("%s: header %q, want %q", q.sql, got[0], want[0])
				}
				got, want = got[1:], want[1:]
			}
			slices.Sort(got)
			slices.Sort(want)
		}
		if gotTag != wantTag || !slices.Equal(got, want) {
			t.Errorf("%s:\n got %s %q\nwant %s %q", q.sql, gotTag, got, wantTag, want)
		}
	}
	for _, q := range []struct{ sql, state string }{
		{"COPY (SELECT id FROM co ORDER BY id) TO STDOUT (FORMAT binary)", "0A000"}, // the merged form is text or CSV (TestCopyQueryMerged)
		{"COPY (SELECT nope FROM co WHERE id = 1) TO STDOUT", "42703"},
		{"COPY co (nope) TO STDOUT", "42703"},
		{"COPY co (id, twice) TO STDOUT", "42P10"}, // a generated column
		{"COPY co TO STDOUT (FORMAT binary)", "0A000"},
		{"COPY (SELECT id FROM co WHERE n > 0) TO STDOUT (FORMAT binary)", "0A000"},
	} {
		if _, _, err := copyLines(q.sql); sqlState(err) != q.state {
			t.Errorf("%s: %v, want %s", q.sql, err, q.state)
		}
	}
	if _, err := c.Exec(ctx, "SELECT 1", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("session after COPY: %v", err)
	}
}
