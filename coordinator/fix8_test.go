package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestLatin1CopyIntoReferenceTable: COPY into a reference table from a
// session in client_encoding LATIN1 stores what PostgreSQL stores (the
// check that the copies agree used to fail with 08006: it ran as a simple
// query, which pgx refuses outside UTF8).
func TestLatin1CopyIntoReferenceTable(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	plain := connect(t, cl.Servers[1].Addr())
	testTable(t, c, "f8_ref_latin1", "(k text PRIMARY KEY, v int)", "SELECT create_reference_table('f8_ref_latin1')")
	exec(t, plain, "DROP TABLE IF EXISTS f8_ref_latin1_plain")
	exec(t, plain, "CREATE TABLE f8_ref_latin1_plain (k text PRIMARY KEY, v int)")
	t.Cleanup(func() { _, _ = plain.Exec(context.Background(), "DROP TABLE IF EXISTS f8_ref_latin1_plain") })
	data := "na\xefve caf\xe9,9\n\xdf\xfc4z,42\n" // naïve café, ßü4z in LATIN1
	var tags, rows [2]string
	for i, side := range []struct {
		c     *pgx.Conn
		table string
	}{{c, "f8_ref_latin1"}, {plain, "f8_ref_latin1_plain"}} {
		if _, err := side.c.PgConn().Exec(ctx, "SET client_encoding = 'LATIN1'").ReadAll(); err != nil {
			t.Fatal(err)
		}
		tag, err := side.c.PgConn().CopyFrom(ctx, strings.NewReader(data), "COPY "+side.table+" FROM STDIN WITH (FORMAT csv)")
		tags[i] = tag.String()
		if err != nil {
			tags[i] = "E" + sqlState(err) + " " + err.Error()
		}
		if _, err := side.c.PgConn().Exec(ctx, "RESET client_encoding").ReadAll(); err != nil {
			t.Fatal(err)
		}
		rows[i] = tableRows(t, side.c, "SELECT k, v FROM "+side.table+" ORDER BY k")
	}
	if tags[0] != tags[1] || rows[0] != rows[1] {
		t.Errorf("COPY under LATIN1:\n got %s\n%s\nPostgreSQL %s\n%s", tags[0], rows[0], tags[1], rows[1])
	}
}

// TestFailedTransactionAnswersFirst: in a failed transaction PostgreSQL
// answers 25P02 before it analyses a statement (only a syntax error comes
// first); a statement pgfleet would plan and reject (42702, an ambiguous
// ORDER BY; 42703) gets 25P02 as well, in the simple and the extended
// protocol, on a distributed and on a reference table (one shard, so that
// the transaction stays on one worker and its savepoint is allowed).
func TestFailedTransactionAnswersFirst(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	c := connect(t, srv.Addr())
	o := connect(t, cl.Servers[1].Addr())
	testTable(t, c, "f8_abort_d", "(k int PRIMARY KEY, v int)", "SELECT create_distributed_table('f8_abort_d', 'k', shard_count => 1)")
	testTable(t, c, "f8_abort_r", "(k int PRIMARY KEY, v int)", "SELECT create_reference_table('f8_abort_r')")
	for _, tb := range []string{"f8_abort_d", "f8_abort_r"} {
		exec(t, o, "DROP TABLE IF EXISTS "+tb)
		exec(t, o, "CREATE TABLE "+tb+" (k int PRIMARY KEY, v int)")
	}
	t.Cleanup(func() {
		_, _ = o.Exec(context.Background(), "DROP TABLE IF EXISTS f8_abort_d, f8_abort_r")
	})
	for _, x := range []*pgx.Conn{c, o} {
		exec(t, x, "INSERT INTO f8_abort_d (k, v) VALUES (1, 1), (2, 2), (3, 3)")
		exec(t, x, "INSERT INTO f8_abort_r (k, v) VALUES (1, 1)")
	}
	bad := []string{
		"SELECT k, (k)::text FROM f8_abort_d ORDER BY k",
		"SELECT nosuch FROM f8_abort_d WHERE k = 1",
		"SELECT k, (k)::text FROM f8_abort_r ORDER BY k",
		"SELECT k, (k)::text FROM f8_abort_d ORDER BY k; SELECT 1",
		"SELEC 1",
		"SELECT v FROM f8_abort_d WHERE k = 1 AND 'x' <> ('\xc3' || '\x9f')", // not UTF-8: 22021 first
	}
	for _, extended := range []bool{false, true} {
		for _, q := range bad {
			if extended && strings.Contains(q, ";") {
				continue
			}
			for _, first := range []string{"SELECT 1/0", "SELECT v/0 FROM f8_abort_d WHERE k = 2", "SELECT count(*)/0 FROM f8_abort_d"} {
				again := q // in a healthy transaction: the planner's answer
				if strings.Contains(q, ";") {
					again = "SELECT 1" // several statements over a distributed table are refused
				}
				s := []string{"BEGIN", "SAVEPOINT a", "SELECT * FROM f8_abort_d WHERE k = 1", first, q, "ROLLBACK TO a", "SELECT v FROM f8_abort_d WHERE k = 3", again, "COMMIT"}
				got := script(t, c, extended, s...)
				want := script(t, o, extended, s...)
				if got != want {
					t.Errorf("extended %v %q:\n got %s\nwant %s", extended, s, got, want)
				}
			}
		}
	}
}

// TestScatterLimitExpressionErrors: a multi-shard SELECT with LIMIT whose
// select list fails on rows PostgreSQL never reaches (it stops at the
// LIMIT; each shard stops at its own) answers PostgreSQL's rows or 0A000,
// never the shards' 22003; without LIMIT, for an invalid LIMIT, and when
// the failing expression is sorted by, the error is PostgreSQL's.
func TestScatterLimitExpressionErrors(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	o := connect(t, cl.Servers[1].Addr())
	testTable(t, c, "f8_lim", "(k int PRIMARY KEY, v int)", "SELECT create_distributed_table('f8_lim', 'k', shard_count => 4)")
	exec(t, o, "DROP TABLE IF EXISTS f8_lim")
	exec(t, o, "CREATE TABLE f8_lim (k int PRIMARY KEY, v int)")
	t.Cleanup(func() { _, _ = o.Exec(context.Background(), "DROP TABLE IF EXISTS f8_lim") })
	var vals []string
	for k := 2; k <= 2000; k++ {
		vals = append(vals, fmt.Sprintf("(%d, 2147483647)", k))
	}
	for _, x := range []*pgx.Conn{c, o} {
		exec(t, x, "INSERT INTO f8_lim (k, v) VALUES (1, 1)")
		exec(t, x, "INSERT INTO f8_lim (k, v) VALUES "+strings.Join(vals, ", "))
	}
	exec(t, o, "ANALYZE f8_lim")
	for _, q := range []string{
		"SELECT k, v + 1 FROM f8_lim ORDER BY k LIMIT 1",
		"SELECT k, v + 1 AS e FROM f8_lim ORDER BY k LIMIT 1 OFFSET 0",
		"SELECT v + 1 FROM f8_lim LIMIT 1",
		"SELECT k FROM f8_lim WHERE v + 1 > 0 ORDER BY k LIMIT 1",
	} {
		for _, extended := range []bool{false, true} {
			got := script(t, c, extended, q)
			want := script(t, o, extended, q)
			if got != want && got != "E0A000|I" {
				t.Errorf("extended %v %q: got %s, PostgreSQL %s", extended, q, got, want)
			}
		}
	}
	for _, q := range []string{
		"SELECT k, v + 1 FROM f8_lim ORDER BY k",
		"SELECT k FROM f8_lim ORDER BY k LIMIT -1",
		"SELECT k, v + 1 FROM f8_lim ORDER BY v + 1, k LIMIT 1", // sorted by it: every row evaluated
	} {
		for _, extended := range []bool{false, true} {
			if got, want := script(t, c, extended, q), script(t, o, extended, q); got != want {
				t.Errorf("extended %v %q: got %s, PostgreSQL %s", extended, q, got, want)
			}
		}
	}
}

// TestSplitInsertErrorPrecedence: a multi-row INSERT whose rows go to
// several shards reports the error PostgreSQL reports first: a constant
// that fails parse analysis or planning (22008 for a bad date,
// -2147483648::int4 folded to 22003) before a duplicate key in another
// shard's rows (23505) and before the read-only check (25006).
func TestSplitInsertErrorPrecedence(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	o := connect(t, cl.Servers[1].Addr())
	testTable(t, c, "f8_order", "(k int PRIMARY KEY, v int, d date)", "SELECT create_distributed_table('f8_order', 'k', shard_count => 8)")
	exec(t, o, "DROP TABLE IF EXISTS f8_order")
	exec(t, o, "CREATE TABLE f8_order (k int PRIMARY KEY, v int, d date)")
	t.Cleanup(func() { _, _ = o.Exec(context.Background(), "DROP TABLE IF EXISTS f8_order") })
	var rows []string
	for k := 1; k <= 40; k++ {
		rows = append(rows, fmt.Sprintf("(%d, %d, '2020-01-01')", k, k))
	}
	for _, x := range []*pgx.Conn{c, o} {
		exec(t, x, "INSERT INTO f8_order (k, v, d) VALUES "+strings.Join(rows, ", "))
	}
	var fresh []string
	for k := 101; k <= 140; k++ {
		fresh = append(fresh, fmt.Sprintf("(%d, %d, '2020-01-01')", k, k))
	}
	vals := strings.Join(fresh, ", ")
	cases := [][]string{
		{"INSERT INTO f8_order (k, v, d) VALUES " + vals + ", (200, -2147483648::int4, NULL), (5, 0, NULL)"},
		{"INSERT INTO f8_order (k, v, d) VALUES (5, 0, NULL), " + vals + ", (200, -2147483648::int4, NULL)"},
		{"INSERT INTO f8_order (k, v, d) VALUES (5, 0, NULL), " + vals + ", (200, 0, '2020-13-45')"},
		{"INSERT INTO f8_order (k, v, d) VALUES (5, 0, NULL), " + vals},
		{"SET default_transaction_read_only = on", "INSERT INTO f8_order (k, v, d) VALUES " + vals + ", (200, 0, '2020-02-30'::date)", "RESET default_transaction_read_only"},
		{"SET default_transaction_read_only = on", "INSERT INTO f8_order (k, v, d) VALUES " + vals + ", (200, -2147483648::int4, NULL)", "RESET default_transaction_read_only"},
		{"SET default_transaction_read_only = on", "INSERT INTO f8_order (k, v, d) VALUES " + vals, "RESET default_transaction_read_only"},
	}
	for _, s := range cases {
		for range 3 { // the shards run in no fixed order
			got := script(t, c, false, s...)
			want := script(t, o, false, s...)
			if got != want {
				t.Errorf("%.120q...:\n got %s\nwant %s", s, got, want)
				break
			}
		}
	}
	if got, want := tableRows(t, c, "SELECT k, v, d FROM f8_order ORDER BY k"), tableRows(t, o, "SELECT k, v, d FROM f8_order ORDER BY k"); got != want {
		t.Errorf("rows differ:\n got %s\nwant %s", got, want)
	}
}

// TestSavepointAfterRefusal: savepoint statements in a transaction that
// failed by the coordinator's own refusal (0A000) or by a multi-shard
// error, before or after BEGIN reached a worker, answer as PostgreSQL's
// do when the statement that failed them had failed there: SAVEPOINT
// 25P02, ROLLBACK TO a savepoint that was never made 3B001, ROLLBACK TO a
// real one brings the transaction back.
func TestSavepointAfterRefusal(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	c := connect(t, srv.Addr())
	o := connect(t, cl.Servers[1].Addr())
	testTable(t, c, "f8_sp", "(k int PRIMARY KEY, v int)", "SELECT create_distributed_table('f8_sp', 'k', shard_count => 1)")
	exec(t, o, "DROP TABLE IF EXISTS f8_sp")
	exec(t, o, "CREATE TABLE f8_sp (k int PRIMARY KEY, v int)")
	t.Cleanup(func() { _, _ = o.Exec(context.Background(), "DROP TABLE IF EXISTS f8_sp") })
	for _, x := range []*pgx.Conn{c, o} {
		exec(t, x, "INSERT INTO f8_sp (k, v) VALUES (1, 1), (2, 2)")
	}
	// refused on the coordinator (0A000); the oracle fails it with 22012.
	const refused = "WITH w AS (SELECT 0 AS z) UPDATE f8_sp SET v = v + 1 WHERE v > (SELECT z FROM w)"
	fails := []string{refused, "SELECT count(*)/0 FROM f8_sp", "SELECT 1/0"}
	for _, extended := range []bool{false, true} {
		for _, f := range fails {
			for i, s := range [][]string{
				{"BEGIN", f, "SAVEPOINT s0", "ROLLBACK TO SAVEPOINT s0", "RELEASE SAVEPOINT s0", "ROLLBACK TO s0", "COMMIT"},
				{"BEGIN", "SAVEPOINT s0", f, "SAVEPOINT s1", "ROLLBACK TO SAVEPOINT s1", "RELEASE s1", "ROLLBACK TO s0", "SELECT v FROM f8_sp WHERE k = 2", "COMMIT"},
				{"BEGIN", "SELECT v FROM f8_sp WHERE k = 1", "SAVEPOINT s0", f, "RELEASE SAVEPOINT s0", "ROLLBACK TO s0", "SELECT v FROM f8_sp WHERE k = 2", "COMMIT"},
				{"BEGIN", "SAVEPOINT s0", "SAVEPOINT s1", f, "ROLLBACK TO s1", f, "ROLLBACK TO s0", "UPDATE f8_sp SET v = 7 WHERE k = 1", "COMMIT", "SELECT v FROM f8_sp WHERE k = 1"},
				{"BEGIN", f, "ROLLBACK TO SAVEPOINT s0", "SAVEPOINT s0", "ROLLBACK", "SELECT 1"},
			} {
				os := make([]string, len(s))
				for j, q := range s {
					os[j] = q
					if q == refused {
						os[j] = "SELECT 1/0"
					}
				}
				got := strings.ReplaceAll(script(t, c, extended, s...), "E0A000", "E22012")
				want := script(t, o, extended, os...)
				if got != want {
					t.Errorf("extended %v, script %d %q:\n got %s\nwant %s", extended, i, s, got, want)
				}
				exec(t, o, "UPDATE f8_sp SET v = k")
				exec(t, c, "UPDATE f8_sp SET v = 1 WHERE k = 1")
			}
		}
	}
}

// TestEncodingAfterRolledBackSet: a SET client_encoding undone by ROLLBACK
// (or made for good by COMMIT) decides how the next statement's text key
// is hashed: every row is found again by its key afterwards.
func TestEncodingAfterRolledBackSet(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	testTable(t, c, "f8_enc", "(k text PRIMARY KEY, v int)", "SELECT create_distributed_table('f8_enc', 'k', shard_count => 8)")
	run := func(sql string) {
		t.Helper()
		if _, err := c.PgConn().Exec(ctx, sql).ReadAll(); err != nil {
			t.Fatalf("%q: %v", sql, err)
		}
	}
	latin1 := map[string]string{"é": "\xe9", "ü": "\xfc", "ßa": "\xdfa", "Ñ": "\xd1"}
	i := 0
	for _, s := range []struct{ start, inTx, end string }{
		{"LATIN1", "UTF8", "ROLLBACK"},
		{"UTF8", "LATIN1", "ROLLBACK"},
		{"UTF8", "LATIN1", "COMMIT"},
		{"LATIN1", "UTF8", "COMMIT"},
	} {
		run("SET client_encoding = '" + s.start + "'")
		run("BEGIN")
		run("SET client_encoding = '" + s.inTx + "'")
		run("SELECT 1")
		run(s.end)
		enc := s.start
		if s.end == "COMMIT" {
			enc = s.inTx
		}
		for utf, lat := range latin1 {
			i++
			key := utf
			if enc == "LATIN1" {
				key = lat
			}
			run(fmt.Sprintf("INSERT INTO f8_enc (k, v) VALUES ('%s%d', %d)", key, i, i))
			run("RESET client_encoding")
			if got := tableRows(t, c, fmt.Sprintf("SELECT v FROM f8_enc WHERE k = '%s%d'", utf, i)); got != fmt.Sprintf("%d\n", i) {
				t.Errorf("%v: key %q inserted under %s, read back by key: %q", s, utf, enc, got)
			}
			run("SET client_encoding = '" + enc + "'")
		}
		run("RESET client_encoding")
	}
}

// TestReadOnlyCopy: COPY FROM into a distributed or reference table in a
// read-only session gets PostgreSQL's 25006 before any data is read:
// with no rows (it used to answer COPY 0), rows a WHERE filters out, or
// rows that would fail to parse (it used to answer 22P04 or 22P02).
func TestReadOnlyCopy(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	o := connect(t, cl.Servers[1].Addr())
	testTable(t, c, "f8_rocopy", "(k int PRIMARY KEY, v int)", "SELECT create_distributed_table('f8_rocopy', 'k', shard_count => 4)")
	testTable(t, c, "f8_rocopy_ref", "(k int PRIMARY KEY, v int)", "SELECT create_reference_table('f8_rocopy_ref')")
	exec(t, o, "DROP TABLE IF EXISTS f8_rocopy, f8_rocopy_ref")
	exec(t, o, "CREATE TABLE f8_rocopy (k int PRIMARY KEY, v int)")
	exec(t, o, "CREATE TABLE f8_rocopy_ref (k int PRIMARY KEY, v int)")
	t.Cleanup(func() { _, _ = o.Exec(context.Background(), "DROP TABLE IF EXISTS f8_rocopy, f8_rocopy_ref") })
	for _, table := range []string{"f8_rocopy", "f8_rocopy_ref"} {
		for _, data := range []string{"", "1\t2\n", "1\t2\t3\n", "x\t1\n", "1\t2\n3\t4\n5\t6\n7\t8\n"} {
			for _, opt := range []string{"", " WHERE v > 100"} {
				for _, ro := range []string{"on", "off"} {
					var res [2]string
					for i, pc := range []*pgconn.PgConn{c.PgConn(), o.PgConn()} {
						if _, err := pc.Exec(ctx, "SET default_transaction_read_only = "+ro).ReadAll(); err != nil {
							t.Fatal(err)
						}
						tag, err := pc.CopyFrom(ctx, strings.NewReader(data), "COPY "+table+" FROM STDIN"+opt)
						res[i] = tag.String() + " " + sqlState(err)
						for _, q := range []string{"RESET default_transaction_read_only", "TRUNCATE " + table} {
							if _, err := pc.Exec(ctx, q).ReadAll(); err != nil {
								t.Fatal(err)
							}
						}
					}
					if res[0] != res[1] {
						t.Errorf("read only %s, COPY %s%s %q: got %s, PostgreSQL %s", ro, table, opt, data, res[0], res[1])
					}
				}
			}
		}
	}
}
