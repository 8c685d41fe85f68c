package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// connectWith connects to addr with extra connection-string parameters.
func connectExtra(t *testing.T, addr, extra string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(pgtest.URL(addr) + extra)
	if err != nil {
		t.Fatal(err)
	}
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect %s%s: %v", addr, extra, err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// A statement is parsed under its session's settings: PostgreSQL folds a
// constant's input (a timestamptz literal under TimeZone, a date under
// DateStyle) and resolves names (search_path) at Parse. Sessions with other
// settings sharing one server connection must each get their own reading,
// as on PostgreSQL (class 7 of issue 8).
func TestPreparedStatementsFollowSessionSettings(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(1))
	ctx := context.Background()
	setup := connect(t, cl.Servers[0].Addr())
	for _, q := range []string{"DROP SCHEMA IF EXISTS st7a CASCADE", "DROP SCHEMA IF EXISTS st7b CASCADE",
		"CREATE SCHEMA st7a", "CREATE SCHEMA st7b", "CREATE TABLE st7a.t (v int)", "CREATE TABLE st7b.t (v text)",
		"INSERT INTO st7a.t VALUES (1)", "INSERT INTO st7b.t VALUES ('b')"} {
		exec(t, setup, q)
	}
	t.Cleanup(func() { _, _ = setup.Exec(ctx, "DROP SCHEMA IF EXISTS st7a, st7b CASCADE") })

	utc := connectExtra(t, srv.Addr(), "&timezone=UTC&datestyle=ISO,MDY")
	pathA := connectExtra(t, srv.Addr(), "&search_path=st7a")
	tokyo := connectExtra(t, srv.Addr(), "&timezone=Asia/Tokyo&datestyle=ISO,DMY")
	setPath := connect(t, srv.Addr())
	exec(t, setPath, "SET search_path = st7b")
	const epoch = "SELECT extract(epoch FROM '2020-01-01 00:00'::timestamptz)::bigint::text"
	const doy = "SELECT extract(doy FROM '01/02/2020'::date)::int::text"
	for i := 0; i < 3; i++ {
		for _, m := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec} {
			if got := queryString(t, utc, epoch, m); got != "1577836800" {
				t.Fatalf("round %d, %v: epoch under UTC = %s", i, m, got)
			}
			if got := queryString(t, tokyo, epoch, m); got != "1577804400" {
				t.Fatalf("round %d, %v: epoch under Asia/Tokyo = %s (the other session's reading)", i, m, got)
			}
			if got := queryString(t, utc, doy, m); got != "2" {
				t.Fatalf("round %d, %v: day of year under MDY = %s", i, m, got)
			}
			if got := queryString(t, tokyo, doy, m); got != "32" {
				t.Fatalf("round %d, %v: day of year under DMY = %s", i, m, got)
			}
			var v any
			if err := pathA.QueryRow(ctx, "SELECT v FROM t", m).Scan(&v); err != nil || fmt.Sprint(v) != "1" {
				t.Fatalf("round %d, %v: search_path st7a: %v, %v", i, m, v, err)
			}
			if err := setPath.QueryRow(ctx, "SELECT v FROM t", m).Scan(&v); err != nil || fmt.Sprint(v) != "b" {
				t.Fatalf("round %d, %v: search_path st7b: %v, %v", i, m, v, err)
			}
		}
	}
	// A SET inside a transaction that rolls back: statements prepared under
	// it must not serve the session afterwards.
	// PostgreSQL reads the statement pgx prepared earlier (under
	// Asia/Tokyo) as it was: pgfleet gives that or refuses (0A000).
	exec(t, tokyo, "BEGIN")
	exec(t, tokyo, "SET TimeZone = 'UTC'")
	var got string
	if err := tokyo.QueryRow(ctx, epoch).Scan(&got); sqlState(err) != "0A000" && (err != nil || got != "1577804400") {
		t.Errorf("prepared epoch after SET TimeZone UTC in a transaction = %s, %v (PostgreSQL: 1577804400)", got, err)
	}
	exec(t, tokyo, "ROLLBACK")
	if got := queryString(t, tokyo, epoch, pgx.QueryExecModeSimpleProtocol); got != "1577804400" {
		t.Errorf("epoch after ROLLBACK of SET TimeZone (simple protocol) = %s", got)
	}
	exec(t, tokyo, "BEGIN")
	exec(t, tokyo, "SET TimeZone = 'UTC'")
	if got := queryString(t, tokyo, epoch, pgx.QueryExecModeSimpleProtocol); got != "1577836800" {
		t.Errorf("epoch after SET TimeZone UTC in a transaction (simple protocol) = %s", got)
	}
	exec(t, tokyo, "ROLLBACK")
	if got := queryString(t, tokyo, epoch); got != "1577804400" {
		t.Errorf("epoch after ROLLBACK of SET TimeZone = %s", got)
	}
}

// After ALTER TABLE changes a column's type (or the table is dropped and
// created again), a pgx client with cached statements gets at most one
// 0A000 "cached plan must not change result type" and then the right
// values, as with plain PostgreSQL, never rows decoded with the old types
// (class 8 of issue 8).
func TestCachedStatementAfterAlterType(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(3))
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	admin := connect(t, srv.Addr())
	testTable(t, admin, "st8_d", "(id int PRIMARY KEY, v int)", "SELECT create_distributed_table('st8_d', 'id', shard_count => 4)")
	exec(t, admin, "DROP TABLE IF EXISTS st8_l")
	exec(t, admin, "CREATE TABLE st8_l (id int PRIMARY KEY, v int)")
	t.Cleanup(func() { _, _ = admin.Exec(ctx, "DROP TABLE IF EXISTS st8_l", simple) })
	var vals []string
	for id := 1; id <= 20; id++ {
		vals = append(vals, fmt.Sprintf("(%d, %d)", id, id*10))
	}
	rows := strings.Join(vals, ", ")
	for _, tbl := range []string{"st8_d", "st8_l"} {
		exec(t, admin, "INSERT INTO "+tbl+" (id, v) VALUES "+rows, simple)
	}
	// Several clients warm several server connections with the statements.
	// One of them with other settings (its own settings key).
	clients := []*pgx.Conn{connect(t, srv.Addr()), connect(t, srv.Addr()), connectExtra(t, srv.Addr(), "&application_name=st8_other")}
	read := func(c *pgx.Conn, tbl string, id int) (string, error) {
		var v any
		err := c.QueryRow(ctx, "SELECT v FROM "+tbl+" WHERE id = $1", id).Scan(&v)
		if n, ok := v.(pgtype.Numeric); ok {
			f, _ := n.Float64Value()
			v = f.Float64
		}
		return fmt.Sprint(v), err
	}
	warm := func() {
		for round := 0; round < 3; round++ {
			for _, c := range clients {
				for id := 1; id <= 20; id++ {
					for _, tbl := range []string{"st8_d", "st8_l"} {
						if got, err := read(c, tbl, id); err != nil || got != fmt.Sprint(id*10) {
							t.Fatalf("%s id %d before ALTER: %s, %v", tbl, id, got, err)
						}
					}
				}
			}
		}
	}
	check := func(what string) {
		for ci, c := range clients {
			for _, tbl := range []string{"st8_d", "st8_l"} {
				errs := 0
				for id := 1; id <= 20; id++ {
					for try := 0; ; try++ {
						got, err := read(c, tbl, id)
						if err != nil {
							var pe *pgconn.PgError
							if !errors.As(err, &pe) || pe.Code != "0A000" || pe.Routine != "RevalidateCachedQuery" {
								// (postgres.js prepares again on this routine)
								t.Fatalf("%s: client %d %s id %d: %v (routine %q), want PostgreSQL's 0A000 from RevalidateCachedQuery", what, ci, tbl, id, err, routineOf(err))
							}
							errs++
							if errs > 1 {
								t.Fatalf("%s: client %d %s: a second error: %v", what, ci, tbl, err)
							}
							continue
						}
						if got != fmt.Sprint(id*10) {
							t.Fatalf("%s: client %d %s id %d = %s, want %d", what, ci, tbl, id, got, id*10)
						}
						break
					}
				}
			}
		}
	}
	warm()
	// A transaction holds the server connection the statements were
	// prepared on, so the next reads prepare them on another one.
	holder := connect(t, srv.Addr())
	exec(t, holder, "BEGIN")
	exec(t, holder, "SELECT 1")
	exec(t, admin, "ALTER TABLE st8_d ALTER COLUMN v TYPE real", simple)
	exec(t, admin, "ALTER TABLE st8_l ALTER COLUMN v TYPE real", simple)
	check("after ALTER TYPE real")
	exec(t, holder, "COMMIT")
	exec(t, admin, "ALTER TABLE st8_d ALTER COLUMN v TYPE bigint", simple)
	exec(t, admin, "ALTER TABLE st8_l ALTER COLUMN v TYPE bigint", simple)
	check("after ALTER TYPE bigint")
	// DROP and CREATE again, with another type.
	exec(t, admin, "DROP TABLE st8_l", simple)
	exec(t, admin, "CREATE TABLE st8_l (id int PRIMARY KEY, v numeric)", simple)
	exec(t, admin, "INSERT INTO st8_l (id, v) VALUES "+rows, simple)
	check("after DROP and CREATE")
}

// routineOf is an error's routine field, if it is a server's.
func routineOf(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Routine
	}
	return ""
}
