package coordinator_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestCopyQueryMerged: COPY (query) TO STDOUT whose query needs the
// coordinator's merge (ORDER BY, aggregates, LIMIT, DISTINCT) gives
// PostgreSQL's bytes, in text and CSV with their options (escapes, quotes,
// NULL strings, headers), and PostgreSQL's errors.
func TestCopyQueryMerged(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	plain := oracleDB(t, cl.Servers[1].Addr(), "qoracle")
	simple := pgx.QueryExecModeSimpleProtocol
	const cols = "(id int PRIMARY KEY, g int, s text, n numeric)"
	exec(t, plain, "DROP TABLE IF EXISTS cm_t; CREATE TABLE cm_t "+cols, simple)
	t.Cleanup(func() { _, _ = plain.Exec(context.Background(), "DROP TABLE IF EXISTS cm_t", simple) })
	testTable(t, c, "cm_t", cols, "SELECT create_distributed_table('cm_t', 'id', shard_count => 4)")
	const rows = `INSERT INTO cm_t VALUES (1, 1, 'plain', 1.5), (2, 1, E'tab\there', NULL), (3, 2, E'new\nline', 2),
		(4, 2, E'back\\slash', 3), (5, 3, '\N', 4), (6, 3, '', 5), (7, 3, NULL, 6), (8, 4, 'quote"d,comma', 7),
		(9, 4, E'cr\rx', 8), (10, 5, '\.', 9), (11, 5, 'semi;colon', 10), (12, 5, E'bell\x07', 11)`
	for _, conn := range []*pgx.Conn{c, plain} {
		exec(t, conn, rows, simple)
	}
	copyTo := func(conn *pgx.Conn, sql string) (string, string) {
		var buf bytes.Buffer
		tag, err := conn.PgConn().CopyTo(ctx, &buf, sql)
		if err != nil {
			return "", sqlState(err)
		}
		return tag.String() + "\n" + buf.String(), ""
	}
	for _, sql := range []string{
		"COPY (SELECT g, count(*), sum(n), max(s) FROM cm_t GROUP BY g ORDER BY g) TO STDOUT",
		"COPY (SELECT id, s, n FROM cm_t ORDER BY id) TO STDOUT",
		"COPY (SELECT id, s, n FROM cm_t ORDER BY id) TO STDOUT WITH (DELIMITER '|', NULL '', HEADER)",
		"COPY (SELECT id, s, n FROM cm_t ORDER BY id) TO STDOUT WITH (FORMAT csv)",
		"COPY (SELECT id, s AS \"the s\", n FROM cm_t ORDER BY id) TO STDOUT WITH (FORMAT csv, HEADER true, NULL 'NUL', DELIMITER ';', FORCE_QUOTE (n))",
		"COPY (SELECT id, s, n FROM cm_t ORDER BY id) TO STDOUT WITH (FORMAT csv, QUOTE '''', ESCAPE '\\', FORCE_QUOTE *)",
		"COPY (SELECT s FROM cm_t ORDER BY id) TO STDOUT WITH (FORMAT csv)",
		"COPY (SELECT id FROM cm_t ORDER BY id DESC LIMIT 3) TO STDOUT",
		"COPY (SELECT DISTINCT g FROM cm_t ORDER BY 1) TO STDOUT CSV HEADER",
		"COPY (SELECT id FROM cm_t WHERE id > 100 ORDER BY id) TO STDOUT WITH (HEADER)",
		"COPY (SELECT g, 10 / (g - g) FROM cm_t GROUP BY g ORDER BY g) TO STDOUT",
		"COPY (SELECT g FROM cm_t ORDER BY g) TO STDOUT WITH (FORMAT csv, DELIMITER 'xy')",
		// The adversary's: the options' check ran the query again, outside
		// the transaction, on the default node's empty tables.
		"COPY (SELECT count(*), 100 / count(*) FROM cm_t) TO STDOUT",
		"COPY (SELECT sum(id) FROM cm_t HAVING 1 / count(*) > 0) TO STDOUT",
		"COPY (SELECT id AS dup, s AS dup FROM cm_t WHERE id < 3 ORDER BY id) TO STDOUT WITH (FORMAT csv, FORCE_QUOTE (dup))",
		"COPY (SELECT id FROM cm_t ORDER BY id LIMIT 2) TO STDOUT WITH (FORMAT csv, FORCE_QUOTE (nope))",
		"COPY (SELECT id FROM cm_t ORDER BY id LIMIT 2) TO STDOUT WITH (HEADER match)",
	} {
		got, gotErr := copyTo(c, sql)
		want, wantErr := copyTo(plain, sql)
		if got != want || gotErr != wantErr {
			t.Errorf("%s\n got %q %s\nwant %q %s", sql, got, gotErr, want, wantErr)
		}
	}
	// Binary over several shards with a merge: refused before anything.
	if _, err := copyTo(c, "COPY (SELECT id FROM cm_t ORDER BY id) TO STDOUT WITH (FORMAT binary)"); err != "0A000" {
		t.Errorf("binary with a merge: %s, want 0A000", err)
	}
	// After DDL in the block, which holds the table's lock: the rows as
	// the block sees them, not a wait on the block's own lock.
	for _, conn := range []*pgx.Conn{c, plain} {
		exec(t, conn, "BEGIN", simple)
		exec(t, conn, "ALTER TABLE cm_t ADD COLUMN z int DEFAULT 7", simple)
	}
	const afterDDL = "COPY (SELECT id, z FROM cm_t ORDER BY id LIMIT 2) TO STDOUT"
	got, gotErr := copyTo(c, afterDDL)
	want, wantErr := copyTo(plain, afterDDL)
	if got != want || gotErr != wantErr {
		t.Errorf("%s after ALTER TABLE in the block:\n got %q %s\nwant %q %s", afterDDL, got, gotErr, want, wantErr)
	}
	for _, conn := range []*pgx.Conn{c, plain} {
		exec(t, conn, "ROLLBACK", simple)
	}
	// In a transaction block: the block's own writes are copied.
	exec(t, c, "BEGIN", simple)
	exec(t, c, "INSERT INTO cm_t VALUES (100, 9, 'in block', 0)", simple)
	if got, err := copyTo(c, "COPY (SELECT id, s FROM cm_t WHERE g = 9 ORDER BY id) TO STDOUT"); got != "COPY 1\n100\tin block\n" {
		t.Errorf("in a block: %q %s", got, err)
	}
	exec(t, c, "ROLLBACK", simple)
}
