package coordinator_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// stringRun is what a client sees of a simple Query string: each
// statement's tag, rows or error, the notices, and the transaction status
// of the ReadyForQuery.
type stringRun struct {
	Results []string
	Notices []string
	Status  byte
}

// runString sends sql as one Query message on pc, whose notices go to
// *notices.
func runString(t *testing.T, pc *pgconn.PgConn, notices *[]string, sql string) stringRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	*notices = nil
	var out stringRun
	mrr := pc.Exec(ctx, sql)
	for mrr.NextResult() {
		rr := mrr.ResultReader()
		var rows []string
		for rr.NextRow() {
			var cells []string
			for _, v := range rr.Values() {
				if v == nil {
					cells = append(cells, "NULL")
				} else {
					cells = append(cells, string(v))
				}
			}
			rows = append(rows, strings.Join(cells, "|"))
		}
		tag, err := rr.Close()
		if err != nil {
			if sqlState(err) == "0A000" {
				t.Log(err) // a refusal says why
			}
			out.Results = append(out.Results, "error "+sqlState(err))
			continue
		}
		out.Results = append(out.Results, fmt.Sprintf("%s %v", tag, rows))
	}
	if err := mrr.Close(); err != nil {
		if sqlState(err) == "0A000" {
			t.Log(err) // a refusal says why
		}
		out.Results = append(out.Results, "error "+sqlState(err))
	}
	out.Notices = *notices
	out.Status = pc.TxStatus()
	return out
}

// noticeConn connects to addr and collects the notices it receives.
func noticeConn(t *testing.T, addr string) (*pgconn.PgConn, *[]string) {
	t.Helper()
	cfg, err := pgconn.ParseConfig(pgtest.URL(addr))
	if err != nil {
		t.Fatal(err)
	}
	notices := new([]string)
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		*notices = append(*notices, n.Severity+" "+n.Code+" "+n.Message)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pc, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close(context.Background()) })
	return pc, notices
}

// TestMultiStatementString: a simple Query string of several statements
// naming distributed and reference tables gives exactly what PostgreSQL
// gives for the same string over plain tables (each statement's answer,
// the notices, the ReadyForQuery status) and leaves the same rows: one
// implicit transaction, rolled back whole at the first error; the
// string's BEGIN, COMMIT and ROLLBACK as PostgreSQL takes them.
func TestMultiStatementString(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	c := connect(t, srv.Addr())
	testTable(t, c, "ms", "(id int PRIMARY KEY, v text)", "SELECT create_distributed_table('ms', 'id', shard_count => 4)")
	testTable(t, c, "msr", "(k int PRIMARY KEY, name text)", "SELECT create_reference_table('msr')")
	plainTables(t, c, "mso (id int PRIMARY KEY, v text)", "msro (k int PRIMARY KEY, name text)")
	fleet := strings.NewReplacer("{t}", "ms", "{r}", "msr")
	oracle := strings.NewReplacer("{t}", "mso", "{r}", "msro")
	// One connection for the fleet's tables, one for the oracle's: a
	// string may leave its connection in a transaction block.
	pc, notices := noticeConn(t, srv.Addr())
	po, onotices := noticeConn(t, srv.Addr())
	both := func(q string) {
		t.Helper()
		got := runString(t, pc, notices, fleet.Replace(q))
		want := runString(t, po, onotices, oracle.Replace(q))
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v (plain PostgreSQL)", q, got, want)
		}
		for _, r := range got.Results {
			if r == "error 0A000" {
				t.Errorf("%s: refused", q)
			}
		}
		// The rows left behind are the same.
		if got.Status != 'I' {
			return // the block the string opened is still open
		}
		got = runString(t, pc, notices, fleet.Replace("SELECT * FROM {t} ORDER BY id; SELECT * FROM {r} ORDER BY k"))
		want = runString(t, po, onotices, oracle.Replace("SELECT * FROM {t} ORDER BY id; SELECT * FROM {r} ORDER BY k"))
		if !reflect.DeepEqual(got, want) {
			t.Errorf("after %s:\n got %+v\nwant %+v (plain PostgreSQL)", q, got, want)
		}
	}
	for _, q := range []string{
		"INSERT INTO {t} VALUES (1, 'a'); SELECT * FROM {t} WHERE id = 1",
		"INSERT INTO {r} VALUES (1, 'one'), (2, 'two'); SELECT name FROM {r} ORDER BY k",
		"SELECT t.id, r.name FROM {t} t JOIN {r} r ON r.k = t.id; SELECT count(*) FROM {t}",
		// The first error rolls back what came before it; nothing after
		// it runs.
		"INSERT INTO {t} VALUES (2, 'b'); INSERT INTO {t} VALUES (1, 'dup'); INSERT INTO {t} VALUES (3, 'c')",
		"INSERT INTO {t} VALUES (4, 'd'); INSERT INTO {r} VALUES (3, 'three'); SELECT 1/0; INSERT INTO {t} VALUES (5, 'e')",
		"SELECT count(*) FROM {t} WHERE v LIKE 'a%'; UPDATE {t} SET v = v || '!'; DELETE FROM {t} WHERE id = 1; INSERT INTO {t} VALUES (1, 'a')",
		"UPDATE {t} SET v = 'x'; SELECT * FROM {t} WHERE id = 99999999999",
		"UPDATE {t} SET v = v || '#'; SELECT count(*) FROM {t} WHERE v LIKE '%#'; UPDATE {t} SET v = rtrim(v, '#')",
		// The string's own transaction control.
		"BEGIN; INSERT INTO {t} VALUES (6, 'f'); INSERT INTO {t} VALUES (7, 'g'); COMMIT",
		"BEGIN; INSERT INTO {t} VALUES (8, 'h'); ROLLBACK; SELECT count(*) FROM {t}",
		"INSERT INTO {t} VALUES (9, 'i'); COMMIT; INSERT INTO {t} VALUES (10, 'j'); SELECT 1/0",
		"INSERT INTO {t} VALUES (11, 'k'); ROLLBACK; SELECT count(*) FROM {t}",
		"SELECT * FROM {t} WHERE id = 6; SAVEPOINT a; INSERT INTO {t} VALUES (12, 'l')",
		"SELECT * FROM {t} WHERE id = 6; COMMIT AND CHAIN",
		"START TRANSACTION ISOLATION LEVEL READ COMMITTED; INSERT INTO {t} VALUES (13, 'm'); SELECT count(*) FROM {t}; END",
		"INSERT INTO {t} VALUES (14, 'n'); BEGIN; INSERT INTO {t} VALUES (15, 'o'); COMMIT; SELECT count(*) FROM {t}",
		"SELECT v FROM {t} WHERE id = 6; SELECT 2; SELECT name FROM {r} ORDER BY k",
		// Settings and statements on no table between them.
		"SELECT v FROM {t} WHERE id = 7; SET LOCAL statement_timeout = '5s'; SHOW statement_timeout",
		"SELECT * FROM {t} WHERE id = 7; SELECT * FROM no_such_table; SELECT 3",
		// Results larger than the coordinator's output buffer (sent to
		// the client before the statement ends): the error after them
		// still ends the string and rolls it back.
		"SELECT id, repeat(v, 20000) FROM {t} ORDER BY id; INSERT INTO {t} VALUES (16, 'big'); SELECT 1/0",
		"INSERT INTO {t} VALUES (17, 'big'); SELECT id, repeat(v, 20000) FROM {t} WHERE id > 1 ORDER BY id; SELECT id FROM {t} WHERE id = 17",
	} {
		both(q)
	}
	// A string that ends inside the block it opened: the block stays
	// open, and the client's ROLLBACK undoes everything in it (the
	// statements before the BEGIN too).
	both("INSERT INTO {t} VALUES (20, 'p'); BEGIN; INSERT INTO {t} VALUES (21, 'q'); SELECT count(*) FROM {t}")
	both("INSERT INTO {t} VALUES (22, 'r'); ROLLBACK")
	both("SELECT count(*) FROM {t} WHERE id >= 20")
	// A failed block fails the rest of the string (25P02) and stays
	// failed until ROLLBACK; a string starting with ROLLBACK ends it.
	both("BEGIN; INSERT INTO {t} VALUES (30, 's'); SELECT 1/0; INSERT INTO {t} VALUES (31, 't'); COMMIT")
	both("SELECT * FROM {t}; SELECT 1")
	both("ROLLBACK")
	both("ROLLBACK; INSERT INTO {t} VALUES (32, 'u'); SELECT count(*) FROM {t}")
	// A transaction failed by the coordinator's own refusal or a
	// multi-shard error ends with a string that starts with ROLLBACK, whose
	// next statements run (adversary: 25P02 for the whole string).
	for _, fail := range []string{"SELECT count(*) / 0 FROM {t}", "SELECT * FROM {t} FOR UPDATE"} {
		for _, end := range []string{"ROLLBACK; SELECT 3", "COMMIT; SELECT 3", "ABORT; SELECT count(*) FROM {t}"} {
			got, want := runString(t, pc, notices, "BEGIN"), runString(t, po, onotices, "BEGIN")
			got = runString(t, pc, notices, fleet.Replace(fail))
			want = runString(t, po, onotices, oracle.Replace("SELECT 1/0"))
			if got.Status != 'E' || want.Status != 'E' {
				t.Fatalf("%s: %+v / %+v", fail, got, want)
			}
			got, want = runString(t, pc, notices, fleet.Replace(end)), runString(t, po, onotices, oracle.Replace(end))
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s then %s:\n got %+v\nwant %+v (plain PostgreSQL)", fail, end, got, want)
			}
		}
	}
	// An error at the implicit transaction's commit (a deferred
	// constraint) comes instead of the last statement's CommandComplete.
	for _, tb := range []string{"msd", "msdo"} {
		exec(t, c, "DROP TABLE IF EXISTS "+tb)
		exec(t, c, "CREATE TABLE "+tb+" (k int, u int, CONSTRAINT "+tb+"_u UNIQUE (k, u) DEFERRABLE INITIALLY DEFERRED)")
		t.Cleanup(func() { _, _ = c.Exec(context.Background(), "DROP TABLE IF EXISTS "+tb) })
	}
	exec(t, c, "SELECT create_distributed_table('msd', 'k', shard_count => 4)")
	for _, tb := range []string{"msd", "msdo"} {
		exec(t, c, "INSERT INTO "+tb+" VALUES (2, 1)")
	}
	dfleet, doracle := strings.NewReplacer("{d}", "msd"), strings.NewReplacer("{d}", "msdo")
	for _, q := range []string{
		"INSERT INTO {d} VALUES (2, 1); SELECT 42",
		"SELECT 41; INSERT INTO {d} VALUES (2, 1)",
		"SELECT count(*) FROM {d}; INSERT INTO {d} VALUES (2, 1)",
	} {
		got, want := runString(t, pc, notices, dfleet.Replace(q)), runString(t, po, onotices, doracle.Replace(q))
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v (plain PostgreSQL)", q, got, want)
		}
	}
	// Inside a block the client opened, the statements join it.
	for _, tb := range []string{"ms", "mso"} {
		runString(t, pc, notices, "BEGIN")
		got := runString(t, pc, notices, "INSERT INTO "+tb+" VALUES (40, 'v'); SELECT count(*) FROM "+tb+" WHERE id = 40")
		if got.Status != 'T' || !reflect.DeepEqual(got.Results, []string{"INSERT 0 1 []", "SELECT 1 [1]"}) {
			t.Errorf("%s: a string inside a block: %+v", tb, got)
		}
		runString(t, pc, notices, "ROLLBACK")
	}
	both("SELECT count(*) FROM {t} WHERE id = 40")

	// A statement refused after others of the string ran (a multi-row
	// INSERT over several shards with now()) ends the string like any
	// error: what ran before it is rolled back; so is a DROP TABLE in the
	// string's transaction before an error.
	before := runString(t, pc, notices, "SELECT * FROM ms ORDER BY id")
	for _, q := range []struct{ sql, last string }{
		{"UPDATE ms SET v = v || '?'; SELECT count(*) FROM ms WHERE v LIKE '%?'; INSERT INTO ms VALUES (60, now()::text), (61, now()::text), (62, 'c'), (63, 'd')", "error 0A000"},
		{"INSERT INTO ms VALUES (50, 'w'), (51, 'x'); INSERT INTO msr VALUES (50, 'fifty'); DROP TABLE ms; SELECT 1/0", "error 22012"},
	} {
		got := runString(t, pc, notices, q.sql)
		if got.Status != 'I' || got.Results[len(got.Results)-1] != q.last {
			t.Errorf("%s: %+v, want %s last", q.sql, got, q.last)
		}
	}
	if after := runString(t, pc, notices, "SELECT * FROM ms ORDER BY id"); !reflect.DeepEqual(after, before) {
		t.Errorf("the refused strings changed the table:\n%+v\n%+v", before, after)
	}
	if n := runString(t, pc, notices, "SELECT count(*) FROM msr WHERE k = 50"); n.Results[0] != "SELECT 1 [0]" {
		t.Errorf("the refused string's reference-table write stayed: %+v", n)
	}
	// DDL of the tables in a string runs in its transaction, as on
	// PostgreSQL: kept with the rest, or rolled back with it.
	both("INSERT INTO {t} VALUES (70, 'w'); ALTER TABLE {t} ADD COLUMN zz int; SELECT 1/0")
	both("INSERT INTO {t} VALUES (71, 'w'); ALTER TABLE {t} ADD COLUMN z int DEFAULT 3; UPDATE {t} SET z = 4 WHERE id = 71; SELECT * FROM {t} WHERE id > 70")
}

// TestMultiStatementFunctions: create_distributed_table and
// create_reference_table in a query string with other statements run in its
// implicit transaction (citustxn.go): the table is distributed with the
// rest, and an error of the call rolls the string back. The other catalog
// functions commit on their own and are refused with 0A000 and a hint before
// anything in the string runs, and inside a transaction block.
func TestMultiStatementFunctions(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	c := connect(t, srv.Addr())
	testTable(t, c, "msf", "(id int PRIMARY KEY)", "SELECT create_distributed_table('msf', 'id', shard_count => 2)")
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	t.Cleanup(func() {
		_, _ = c.Exec(ctx, "SELECT undistribute_table('msf_new')", simple)
		_, _ = c.Exec(ctx, "DROP TABLE IF EXISTS msf_new", simple)
	})
	exec(t, c, "CREATE TABLE msf_new (id int); INSERT INTO msf_new VALUES (1), (2); SELECT create_distributed_table('msf_new', 'id')", simple)
	if n := queryString(t, c, "SELECT count(*)::text FROM citus_tables WHERE table_name::text = 'msf_new'"); n != "1" {
		t.Errorf("msf_new is not distributed after its string: %s", n)
	}
	if n := queryString(t, c, "SELECT count(*)::text FROM msf_new"); n != "2" {
		t.Errorf("msf_new holds %s rows, want 2", n)
	}
	if _, err := c.Exec(ctx, "INSERT INTO msf VALUES (1); SELECT create_reference_table('msf_other')", simple); sqlState(err) != "42P01" {
		t.Errorf("create_reference_table of a missing table in a string: %v, want 42P01", err)
	}
	_, err := c.Exec(ctx, "INSERT INTO msf VALUES (2); SELECT undistribute_table('msf')", simple)
	wantRefusal(t, "undistribute_table in a string", err)
	if n := queryString(t, c, "SELECT count(*)::text FROM msf"); n != "0" {
		t.Errorf("the failed strings' INSERTs ran: %s rows", n)
	}
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, "SELECT undistribute_table('msf')", simple)
	wantRefusal(t, "a catalog function in a transaction block", err)
	_ = tx.Rollback(ctx)
}
