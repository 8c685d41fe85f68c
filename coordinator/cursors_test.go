package coordinator_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	osexec "os/exec"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestCursorsOverDistributedTables: DECLARE, FETCH, MOVE and CLOSE of
// cursors over distributed and reference tables (what psql's FETCH_COUNT
// sends) answer as plain PostgreSQL does: every direction, NO SCROLL,
// savepoints, failed transactions, cursors over local tables beside them;
// WITH HOLD ones outlive a committed transaction; BINARY cursors over
// distributed tables may be refused with 0A000.
func TestCursorsOverDistributedTables(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	plain := oracleDB(t, cl.Servers[1].Addr(), "cursors_oracle")
	simple := pgx.QueryExecModeSimpleProtocol
	for _, conn := range []*pgx.Conn{c, plain} {
		exec(t, conn, "DROP TABLE IF EXISTS cu_t, cu_r, cu_l")
		exec(t, conn, "CREATE TABLE cu_t (id int PRIMARY KEY, v text, g int)")
		exec(t, conn, "CREATE TABLE cu_r (id int PRIMARY KEY, w text)")
		exec(t, conn, "CREATE TABLE cu_l (id int PRIMARY KEY)")
	}
	testTable(t, c, "cu_t", "(id int PRIMARY KEY, v text, g int)", "SELECT create_distributed_table('cu_t', 'id', shard_count => 4)")
	testTable(t, c, "cu_r", "(id int PRIMARY KEY, w text)", "SELECT create_reference_table('cu_r')")
	t.Cleanup(func() {
		exec(t, plain, "DROP TABLE IF EXISTS cu_t, cu_r, cu_l")
		exec(t, c, "DROP TABLE IF EXISTS cu_l")
	})
	for _, conn := range []*pgx.Conn{c, plain} {
		exec(t, conn, "INSERT INTO cu_t SELECT i, 'v' || i, i % 3 FROM generate_series(1, 25) i", simple)
		exec(t, conn, "INSERT INTO cu_r VALUES (1, 'x'), (2, 'y'), (3, NULL)", simple)
		exec(t, conn, "INSERT INTO cu_l VALUES (1), (2)", simple)
	}
	allow := map[string]bool{
		"DECLARE b BINARY CURSOR FOR SELECT * FROM cu_t ORDER BY id": true,
	}
	compareOracle(t, c, plain, []string{
		"DECLARE o CURSOR FOR SELECT * FROM cu_t ORDER BY id", // outside a block: 25P01
		"BEGIN",
		"DECLARE c SCROLL CURSOR FOR SELECT id, v FROM cu_t ORDER BY id",
		"FETCH 3 FROM c", "FETCH NEXT FROM c", "FETCH PRIOR FROM c", "FETCH FIRST FROM c", "FETCH LAST FROM c",
		"FETCH ABSOLUTE 10 FROM c", "FETCH ABSOLUTE -2 FROM c", "FETCH ABSOLUTE 0 FROM c", "FETCH ABSOLUTE 99 FROM c",
		"FETCH RELATIVE -3 FROM c", "FETCH RELATIVE 0 FROM c", "FETCH RELATIVE 2 FROM c", "FETCH BACKWARD 4 FROM c",
		"FETCH FORWARD 0 FROM c", "FETCH BACKWARD 0 FROM c", "FETCH -2 FROM c", "FETCH FORWARD ALL FROM c",
		"FETCH 1 FROM c", "FETCH BACKWARD ALL FROM c", "FETCH BACKWARD 1 FROM c", "FETCH ALL IN c",
		"MOVE ABSOLUTE 5 IN c", "FETCH c", "MOVE BACKWARD ALL IN c", "MOVE 3 IN c", "MOVE FORWARD ALL IN c", "FETCH PRIOR IN c",
		"DECLARE g CURSOR FOR SELECT g, count(*), string_agg(v, ',' ORDER BY id) FROM cu_t GROUP BY g ORDER BY g",
		"FETCH ALL FROM g",
		"DECLARE r CURSOR FOR SELECT t.id, r.w FROM cu_t t JOIN cu_r r ON r.id = t.g ORDER BY t.id",
		"FETCH 5 FROM r",
		"DECLARE one CURSOR FOR SELECT * FROM cu_t WHERE id = 7",
		"FETCH ALL FROM one",
		"DECLARE l CURSOR FOR SELECT * FROM cu_l ORDER BY id",
		"FETCH ALL FROM l",
		"DECLARE c CURSOR FOR SELECT 1 FROM cu_t", // 42P03
		"ROLLBACK",
		// NO SCROLL, as psql's FETCH_COUNT declares it.
		"BEGIN",
		"DECLARE _psql_cursor NO SCROLL CURSOR FOR\nSELECT * FROM cu_t ORDER BY id",
		"FETCH FORWARD 10 FROM _psql_cursor", "FETCH FORWARD 10 FROM _psql_cursor", "FETCH FORWARD 10 FROM _psql_cursor",
		"FETCH FORWARD 10 FROM _psql_cursor",
		"CLOSE _psql_cursor",
		"FETCH 1 FROM _psql_cursor", // 34000, the transaction fails
		"FETCH 1 FROM _psql_cursor", // 25P02
		"COMMIT",
		"BEGIN",
		"DECLARE n NO SCROLL CURSOR FOR SELECT * FROM cu_t ORDER BY id",
		"FETCH 2 FROM n",
		"FETCH BACKWARD 1 FROM n", // 55000
		"ROLLBACK",
		// Savepoints: ROLLBACK TO closes cursors declared after the
		// savepoint, not those before; RELEASE keeps them.
		"BEGIN",
		"DECLARE a CURSOR FOR SELECT id FROM cu_t ORDER BY id",
		"SAVEPOINT s1",
		"DECLARE b2 CURSOR FOR SELECT id FROM cu_t ORDER BY id DESC",
		"FETCH 2 FROM a",
		"FETCH 2 FROM b2",
		"ROLLBACK TO SAVEPOINT s1",
		"FETCH 2 FROM a",
		"SAVEPOINT s2",
		"DECLARE b3 CURSOR FOR SELECT id FROM cu_t ORDER BY id DESC",
		"RELEASE SAVEPOINT s2",
		"SAVEPOINT s3",
		"FETCH 1 FROM b3",
		"ROLLBACK TO SAVEPOINT s3",
		"FETCH 1 FROM b3",
		"FETCH 1 FROM b2",
		"ROLLBACK TO SAVEPOINT s1",
		"FETCH 1 FROM b3",
		"ROLLBACK",
		// Cursors end with their transaction; errors in their query are
		// the query's.
		"BEGIN",
		"DECLARE e CURSOR FOR SELECT nope FROM cu_t",
		"ROLLBACK",
		"BEGIN",
		"DECLARE k CURSOR FOR SELECT id FROM cu_t ORDER BY id",
		"COMMIT",
		"BEGIN",
		"FETCH 1 FROM k",
		"ROLLBACK",
		"BEGIN",
		"DECLARE h CURSOR WITH HOLD FOR SELECT * FROM cu_t ORDER BY id",
		"ROLLBACK",
		"FETCH 1 FROM h", // gone with its transaction
		// WITH HOLD (Django's iterator() in autocommit, psycopg's
		// withhold cursors): it outlives its committed transaction.
		"BEGIN",
		"DECLARE hh CURSOR WITH HOLD FOR SELECT id FROM cu_t ORDER BY id",
		"FETCH 2 FROM hh",
		"COMMIT",
		"FETCH 2 FROM hh",
		"BEGIN",
		"FETCH 1 FROM hh",
		"ROLLBACK",
		"FETCH 1 FROM hh",
		"CLOSE hh",
		"FETCH 1 FROM hh",
		"DECLARE ho SCROLL CURSOR WITH HOLD FOR SELECT id, v FROM cu_t WHERE g = 1 ORDER BY id",
		"FETCH 3 FROM ho",
		"FETCH PRIOR FROM ho",
		"FETCH ALL FROM ho",
		"CLOSE ho",
		// A name in use, outside a block too; DISCARD ALL closes them all.
		"DECLARE d1 CURSOR WITH HOLD FOR SELECT id FROM cu_t ORDER BY id",
		"DECLARE d1 CURSOR WITH HOLD FOR SELECT id FROM cu_t ORDER BY id DESC",
		"FETCH 1 FROM d1",
		"DISCARD ALL",
		"FETCH 1 FROM d1",
		"BEGIN",
		"DECLARE b BINARY CURSOR FOR SELECT * FROM cu_t ORDER BY id",
		"ROLLBACK",
		// CLOSE ALL closes them all, the workers' too.
		"BEGIN",
		"DECLARE x CURSOR FOR SELECT id FROM cu_t ORDER BY id",
		"DECLARE y CURSOR FOR SELECT id FROM cu_l ORDER BY id",
		"CLOSE ALL",
		"FETCH 1 FROM x",
		"ROLLBACK",
		"BEGIN",
		"DECLARE y CURSOR FOR SELECT id FROM cu_l ORDER BY id",
		"CLOSE ALL",
		"FETCH 1 FROM y",
		"ROLLBACK",
	}, allow)

	// From an adversary: PostgreSQL's fetch algorithm for NO SCROLL
	// cursors (MOVE 0 on a row, LAST, ABSOLUTE that rewinds), failed
	// portals, transaction ends with AND CHAIN, cursors after statements
	// that pin the session, CLOSE ALL refused in a failed transaction,
	// DDL of a table an open cursor reads (55006).
	compareOracle(t, c, plain, []string{
		"BEGIN",
		"DECLARE n NO SCROLL CURSOR FOR SELECT id FROM cu_t ORDER BY id",
		"FETCH 2 FROM n", "MOVE 0 IN n", "MOVE FORWARD 0 IN n", "MOVE RELATIVE 0 IN n", "MOVE BACKWARD 0 IN n",
		"FETCH ABSOLUTE 5 FROM n", "SAVEPOINT s", "FETCH ABSOLUTE 5 FROM n", "ROLLBACK TO SAVEPOINT s",
		"FETCH 1 FROM n", // the portal failed: 55000
		"ROLLBACK",
		"BEGIN", "DECLARE n NO SCROLL CURSOR FOR SELECT id FROM cu_t ORDER BY id", "FETCH LAST FROM n", "ROLLBACK",
		"BEGIN", "DECLARE n NO SCROLL CURSOR FOR SELECT id FROM cu_t ORDER BY id", "FETCH ABSOLUTE -1 FROM n", "ROLLBACK",
		"BEGIN", "DECLARE n NO SCROLL CURSOR FOR SELECT id FROM cu_t ORDER BY id", "FETCH 1 FROM n", "FETCH FIRST FROM n", "ROLLBACK",
		"BEGIN", "DECLARE n NO SCROLL CURSOR FOR SELECT id FROM cu_t WHERE id < 0", "FETCH 1 FROM n", "FETCH FIRST FROM n", "ROLLBACK",
		"BEGIN", "DECLARE k CURSOR FOR SELECT id FROM cu_t ORDER BY id", "FETCH 1 FROM k", "COMMIT AND CHAIN", "FETCH 1 FROM k", "ROLLBACK",
		"BEGIN", "DECLARE k CURSOR FOR SELECT id FROM cu_t ORDER BY id", "ROLLBACK AND CHAIN", "FETCH 1 FROM k", "ROLLBACK",
		"BEGIN", "DECLARE k CURSOR FOR SELECT id FROM cu_t ORDER BY id", "COMMIT; BEGIN", "FETCH 1 FROM k", "ROLLBACK",
		"BEGIN", "DECLARE k CURSOR FOR SELECT id FROM cu_t ORDER BY id", "SAVEPOINT s", "SELECT 1/0", "CLOSE ALL",
		"ROLLBACK TO SAVEPOINT s", "FETCH 1 FROM k", "ROLLBACK",
		"BEGIN", "DECLARE k CURSOR FOR SELECT id FROM cu_t ORDER BY id", "SAVEPOINT s", "TRUNCATE cu_t", "ROLLBACK TO SAVEPOINT s",
		"ALTER TABLE cu_t ADD COLUMN zz int", "ROLLBACK TO SAVEPOINT s", "FETCH 2 FROM k", "ROLLBACK",
		"BEGIN", `DECLARE "a""b" CURSOR FOR SELECT id FROM cu_t`, `DECLARE "a""b" CURSOR FOR SELECT id FROM cu_t`, "ROLLBACK",
	}, nil)
	compareOracle(t, c, plain, []string{
		"BEGIN", "DECLARE k CURSOR FOR SELECT id FROM cu_t ORDER BY id", "FETCH 1 FROM k; SELECT 1", "ROLLBACK",
		"BEGIN", "DECLARE k CURSOR FOR SELECT id FROM cu_t ORDER BY id", "CLOSE ALL; SELECT 1", "ROLLBACK",
		"BEGIN", "DECLARE k CURSOR FOR SELECT id, v FROM cu_t ORDER BY id", "SET LOCAL extra_float_digits = 1", "FETCH 1 FROM k", "ROLLBACK",
		"BEGIN", "DECLARE k CURSOR FOR SELECT id FROM cu_t ORDER BY id", "FETCH 1 FROM k", "UPDATE cu_t SET v = 'x' WHERE CURRENT OF k", "ROLLBACK",
	}, map[string]bool{"FETCH 1 FROM k; SELECT 1": true, "CLOSE ALL; SELECT 1": true, "FETCH 1 FROM k": true,
		"UPDATE cu_t SET v = 'x' WHERE CURRENT OF k": true})

	// A DECLARE refused before the block reached a worker fails only
	// that block (the difftest, seed 51: the session's next SET was taken
	// for one in a failed transaction, and its IntervalStyle was lost).
	exec(t, c, "BEGIN", simple)
	exec(t, c, "COMMIT AND CHAIN", simple)
	if _, err := c.Exec(context.Background(), "DECLARE b BINARY CURSOR FOR SELECT * FROM cu_t ORDER BY id", simple); sqlState(err) != "0A000" {
		t.Errorf("DECLARE BINARY over a distributed table: %v, want 0A000", err)
	}
	exec(t, c, "COMMIT", simple)
	compareOracle(t, c, plain, []string{
		"SET IntervalStyle TO 'postgres_verbose'",
		"SELECT id, interval '-1 month -2 days' FROM cu_t WHERE id = 3",
		"SELECT id, interval '-1 month -2 days' FROM cu_t ORDER BY id LIMIT 2",
		"RESET IntervalStyle",
	}, nil)

	// Random moves over NO SCROLL cursors, a few at a time.
	rngN := rand.New(rand.NewPCG(3, 5))
	var nstmts []string
	for range 60 {
		nstmts = append(nstmts, "BEGIN", "DECLARE w NO SCROLL CURSOR FOR SELECT id FROM cu_t WHERE id % 3 = 0 ORDER BY id")
		nstmts = append(append(nstmts, randomMoves(rngN, "w", 4, 13, 4)...), "ROLLBACK")
	}
	compareOracle(t, c, plain, nstmts, nil)

	// An error the query meets on a row: PostgreSQL says it at the FETCH
	// that reaches the row, pgfleet at DECLARE (it runs the query then);
	// the code is the same, and the transaction fails either way.
	exec(t, c, "BEGIN")
	_, err := c.Exec(context.Background(), "DECLARE e CURSOR FOR SELECT 1 / (id - 3) FROM cu_t", simple)
	if sqlState(err) != "22012" {
		t.Errorf("DECLARE of a cursor whose query divides by zero: %v, want 22012", err)
	}
	if _, err := c.Exec(context.Background(), "SELECT 1", simple); sqlState(err) != "25P02" {
		t.Errorf("after it: %v, want 25P02", err)
	}
	exec(t, c, "ROLLBACK")

	// Random moves over a SCROLL cursor, against PostgreSQL's.
	rng := rand.New(rand.NewPCG(7, 11))
	stmts := []string{"BEGIN", "DECLARE z SCROLL CURSOR FOR SELECT id, v FROM cu_t WHERE id % 2 = 1 ORDER BY id"}
	stmts = append(stmts, randomMoves(rng, "z", 300, 31, 15)...)
	compareOracle(t, c, plain, append(stmts, "COMMIT"), nil)
	// Statements that pin the session leave its cursors (last: the
	// session stays pinned).
	compareOracle(t, c, plain, []string{
		"BEGIN", "DECLARE k CURSOR FOR SELECT id FROM cu_t ORDER BY id", "CREATE TEMP TABLE cu_tmp (x int)", "PREPARE cu_q AS SELECT 1",
		"FETCH 2 FROM k", "CLOSE k", "ROLLBACK",
	}, nil)
}

// randomMoves are n random FETCH and MOVE statements of cursor name, their
// counts drawn from spread values starting at -below.
func randomMoves(rng *rand.Rand, name string, n, spread, below int) []string {
	dirs := []string{"NEXT", "PRIOR", "FIRST", "LAST", "ABSOLUTE %d", "RELATIVE %d", "FORWARD %d", "BACKWARD %d", "%d", "ALL", "FORWARD ALL", "BACKWARD ALL"}
	var out []string
	for range n {
		d := dirs[rng.IntN(len(dirs))]
		if d[len(d)-1] == 'd' {
			d = fmt.Sprintf(d, rng.IntN(spread)-below)
		}
		verb := "FETCH"
		if rng.IntN(3) == 0 {
			verb = "MOVE"
		}
		out = append(out, verb+" "+d+" FROM "+name)
	}
	return out
}

// TestPsqlFetchCount: psql with FETCH_COUNT set (a cursor under the hood)
// prints a multi-shard query's rows as without it.
func TestPsqlFetchCount(t *testing.T) {
	psql := psqlPath(t)
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	testTable(t, c, "cu_p", "(id int PRIMARY KEY, v text)", "SELECT create_distributed_table('cu_p', 'id', shard_count => 4)")
	exec(t, c, "INSERT INTO cu_p SELECT i, 'v' || i FROM generate_series(1, 50) i", pgx.QueryExecModeSimpleProtocol)
	run := func(fetchCount string) string {
		out, err := osexec.Command(psql, pgtest.URL(srv.Addr()), "-X", "-At", "-v", "ON_ERROR_STOP=1", "-v", "FETCH_COUNT="+fetchCount,
			"-c", "SELECT id, v FROM cu_p ORDER BY id").CombinedOutput()
		if err != nil {
			t.Fatalf("psql with FETCH_COUNT=%s: %v\n%s", fetchCount, err, out)
		}
		return string(out)
	}
	want := run("0")
	if n := strings.Count(want, "\n"); n != 50 {
		t.Fatalf("psql without FETCH_COUNT printed %d lines, want 50", n)
	}
	if got := run("7"); got != want {
		t.Errorf("psql with FETCH_COUNT=7 printed\n%s\nwant\n%s", got, want)
	}
}

// TestDescribeFetchAfterItsCursor: a FETCH prepared on a pooled
// connection while a session's cursor existed, then described for another
// session once the cursor is gone, crashed the worker (PostgreSQL 15's
// FetchStatementTargetList: every session on it lost its connection;
// found by running pgx's suite through a coordinator). FETCH statements
// are parsed again at every use; the second session gets what PostgreSQL
// gives for a FETCH of no cursor: no columns.
func TestDescribeFetchAfterItsCursor(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(1))
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	// A worker crash ends every backend on it: this one would see it.
	w := connect(t, cl.Servers[0].Addr())
	a := connect(t, srv.Addr())
	exec(t, a, "BEGIN", simple)
	exec(t, a, "DECLARE df_c CURSOR FOR SELECT 1 AS x", simple)
	sd, err := a.PgConn().Prepare(ctx, "df_1", "fetch all in df_c", nil)
	if err != nil || len(sd.Fields) != 1 {
		t.Fatalf("FETCH prepared while its cursor exists: %v %v", sd, err)
	}
	exec(t, a, "ROLLBACK", simple)
	for i, c := range []*pgx.Conn{connect(t, srv.Addr()), a} {
		sd, err := c.PgConn().Prepare(ctx, fmt.Sprintf("df_%d", i+2), "fetch all in df_c", nil)
		if err != nil || len(sd.Fields) != 0 {
			t.Errorf("session %d: FETCH of a cursor gone, described: %v, %v; want no columns", i, sd, err)
		}
	}
	if got := queryString(t, a, "SELECT 2"); got != "2" {
		t.Errorf("the session afterwards: %q", got)
	}
	if _, err := w.Exec(ctx, "SELECT 1"); err != nil {
		t.Errorf("a connection to the worker opened before: %v (the worker crashed)", err)
	}
}
