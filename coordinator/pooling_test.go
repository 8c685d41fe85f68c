package coordinator_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/internal/pgcluster"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

func connect(t testing.TB, addr string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, pgtest.URL(addr))
	if err != nil {
		t.Fatalf("connect %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// connMode connects to url with pgx statements sent in mode.
func connMode(t testing.TB, url string, mode pgx.QueryExecMode) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = mode
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func queryString(t *testing.T, c *pgx.Conn, sql string, args ...any) string {
	t.Helper()
	var s string
	if err := c.QueryRow(context.Background(), sql, args...).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

// queryStrings runs a query of one text column (in the simple protocol)
// and returns its rows.
func queryStrings(t *testing.T, c *pgx.Conn, sql string) []string {
	t.Helper()
	rows, err := c.Query(context.Background(), sql, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return out
}

func exec(t testing.TB, c *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := c.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

func poolSize(n int) func(*coordinator.Config) {
	return func(c *coordinator.Config) { c.PoolSize = n }
}

// With one server connection, two sessions' settings must not leak into
// each other, and each must see its own.
func TestSetCarriedAcrossServerConnections(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(1))
	a, b := connect(t, srv.Addr()), connect(t, srv.Addr())

	exec(t, a, "SET work_mem = '7MB'")
	exec(t, a, "SET search_path TO pg_catalog, public")
	if got := queryString(t, b, "SHOW work_mem"); got != "4MB" {
		t.Errorf("other session sees work_mem %q, want the default 4MB", got)
	}
	if got := queryString(t, a, "SHOW work_mem"); got != "7MB" {
		t.Errorf("work_mem after SET = %q, want 7MB", got)
	}
	if got := queryString(t, a, "SHOW search_path"); got != "pg_catalog, public" {
		t.Errorf("search_path = %q", got)
	}
	exec(t, b, "SET statement_timeout = '12s'")
	if got := queryString(t, a, "SHOW statement_timeout"); got != "0" {
		t.Errorf("statement_timeout leaked to another session: %q", got)
	}

	// A SET in a rolled-back transaction is undone; a committed one stays.
	exec(t, a, "BEGIN")
	exec(t, a, "SET work_mem = '9MB'")
	exec(t, a, "ROLLBACK")
	_ = queryString(t, b, "SHOW work_mem")
	if got := queryString(t, a, "SHOW work_mem"); got != "7MB" {
		t.Errorf("work_mem after rolled-back SET = %q, want 7MB", got)
	}
	exec(t, a, "BEGIN; SET work_mem = '11MB'; COMMIT")
	_ = queryString(t, b, "SHOW work_mem")
	if got := queryString(t, a, "SHOW work_mem"); got != "11MB" {
		t.Errorf("work_mem after committed SET = %q, want 11MB", got)
	}

	// ROLLBACK TO SAVEPOINT keeps a SET made before the savepoint on the
	// server: it must not reach another session.
	exec(t, a, "BEGIN; SET statement_timeout = '77s'; SAVEPOINT s; ROLLBACK TO s; COMMIT")
	if got := queryString(t, b, "SHOW statement_timeout"); got == "77s" {
		t.Errorf("a SET before ROLLBACK TO SAVEPOINT leaked into another session")
	}

	// RESET goes back to the default, also after another session ran.
	exec(t, a, "RESET work_mem")
	_ = queryString(t, b, "SHOW work_mem")
	if got := queryString(t, a, "SHOW work_mem"); got != "4MB" {
		t.Errorf("work_mem after RESET = %q, want 4MB", got)
	}
	// DISCARD ALL drops prepared statements too, pgx's cached ones among
	// them (as on PostgreSQL), so the next query uses the simple protocol.
	exec(t, a, "DISCARD ALL")
	if got := queryString(t, a, "SHOW search_path", pgx.QueryExecModeSimpleProtocol); got != `"$user", public` {
		t.Errorf("search_path after DISCARD ALL = %q", got)
	}
	// Startup parameters are session settings too.
	ctx := context.Background()
	cfg, _ := pgx.ParseConfig(pgtest.URL(srv.Addr()) + "&application_name=app_one&timezone=Asia/Tokyo")
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	_ = queryString(t, b, "SHOW application_name")
	if got := queryString(t, c, "SHOW application_name"); got != "app_one" {
		t.Errorf("application_name = %q, want app_one", got)
	}
	if got := queryString(t, c, "SHOW TimeZone"); got != "Asia/Tokyo" {
		t.Errorf("TimeZone = %q", got)
	}
	if got := queryString(t, b, "SHOW TimeZone"); got == "Asia/Tokyo" {
		t.Errorf("TimeZone leaked into another session")
	}
}

func TestPoolTimeoutIsAClearError(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, func(c *coordinator.Config) {
		c.PoolSize = 1
		c.PoolTimeout = 300 * time.Millisecond
	})
	a, b := connect(t, srv.Addr()), connect(t, srv.Addr())
	exec(t, a, "BEGIN")
	exec(t, a, "SELECT 1")
	start := time.Now()
	_, err := b.Exec(context.Background(), "SELECT 1")
	if sqlState(err) != "53300" {
		t.Fatalf("query while the pool is busy: err %v, want SQLSTATE 53300", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("pool timeout took %v, configured 300ms", d)
	}
	exec(t, a, "COMMIT")
	exec(t, b, "SELECT 1") // and the session still works
}

func TestCancelReachesWorker(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := c.PgConn().Exec(context.Background(), "SELECT pg_sleep(30)").ReadAll()
		done <- err
	}()
	// The cancel is sent once the worker runs the statement: like
	// PostgreSQL's, a cancel that arrives before the statement started
	// does nothing (and on a loaded machine 300 ms was not always enough).
	w := connect(t, cl.Servers[0].Addr())
	for running := false; !running; {
		if err := w.QueryRow(context.Background(), "SELECT count(*) > 0 FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(30)' AND state = 'active'").Scan(&running); err != nil {
			t.Fatal(err)
		}
		if time.Since(start) > 20*time.Second {
			t.Fatal("the statement did not reach the worker")
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.PgConn().CancelRequest(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if sqlState(err) != "57014" {
			t.Fatalf("canceled statement: err %v, want SQLSTATE 57014", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cancel did not stop pg_sleep(30)")
	}
	if got := queryString(t, c, "SELECT 'still usable'"); got != "still usable" {
		t.Error(got)
	}
}

func TestClientDisconnectMidTransactionRollsBack(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(1))
	setup := connect(t, srv.Addr())
	exec(t, setup, "DROP TABLE IF EXISTS disconnect_t")
	exec(t, setup, "CREATE TABLE disconnect_t (id int primary key)")
	exec(t, setup, "INSERT INTO disconnect_t VALUES (1)")

	ctx := context.Background()
	a, err := pgx.Connect(ctx, pgtest.URL(srv.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	exec(t, a, "BEGIN")
	exec(t, a, "INSERT INTO disconnect_t VALUES (2)")
	exec(t, a, "UPDATE disconnect_t SET id = 10 WHERE id = 1") // holds a row lock
	// Drop the TCP connection without a Terminate message.
	_ = a.PgConn().Conn().Close()

	b := connect(t, srv.Addr())
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var n int
	if err := b.QueryRow(cctx, "SELECT count(*) FROM disconnect_t WHERE id IN (2, 10)").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("rows of the abandoned transaction visible: %d", n)
	}
	if _, err := b.Exec(cctx, "UPDATE disconnect_t SET id = 20 WHERE id = 1"); err != nil {
		t.Errorf("row lock of the abandoned transaction still held: %v", err)
	}
	exec(t, b, "DROP TABLE disconnect_t")
}

func TestBrokenServerConnectionIsReplaced(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(1))
	c := connect(t, srv.Addr())
	pid := queryString(t, c, "SELECT pg_backend_pid()::text")
	direct := connect(t, cl.Servers[0].Addr())
	exec(t, direct, "SELECT pg_terminate_backend($1::int)", pid)
	time.Sleep(300 * time.Millisecond)
	if got := queryString(t, c, "SELECT pg_backend_pid()::text"); got == pid {
		t.Errorf("still on the terminated backend %s", pid)
	}
}

func TestIdleClientsHoldNoServerConnections(t *testing.T) {
	cl := pgtest.Start(t, 1)
	const pool = 4
	srv := pgtest.Coordinator(t, cl, poolSize(pool))
	ctx := context.Background()
	conns := make([]*pgconn.PgConn, 0, 1000)
	defer func() {
		for _, c := range conns {
			_ = c.Close(ctx)
		}
	}()
	for i := 0; i < 1000; i++ {
		c, err := pgconn.Connect(ctx, pgtest.URL(srv.Addr()))
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		conns = append(conns, c)
	}
	// Every tenth client runs a statement, so idle and used sessions mix.
	for i := 0; i < len(conns); i += 10 {
		if _, err := conns[i].Exec(ctx, "SELECT 1").ReadAll(); err != nil {
			t.Fatal(err)
		}
	}
	direct := connect(t, cl.Servers[0].Addr())
	var n int
	if err := direct.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n > pool {
		t.Errorf("1000 idle clients hold %d server connections, pool allows %d", n, pool)
	}
	if n == 0 {
		t.Errorf("no server connections at all: the count query is not measuring the coordinator")
	}
}

// Session state that cannot be multiplexed pins the session to its server
// connection, so it keeps working while other sessions use the pool. (A
// pool of 3: with 2 workers the last connection of each pool is kept for
// sessions that hold another worker's, so with a pool of 2 the pinned
// session would leave other single-worker statements none.)
func TestTemporaryTablePinsSession(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(3))
	a, b := connect(t, srv.Addr()), connect(t, srv.Addr())
	exec(t, a, "CREATE TEMP TABLE pinned_tmp (v int)")
	exec(t, a, "INSERT INTO pinned_tmp VALUES (42)")
	for i := 0; i < 5; i++ {
		exec(t, b, "SELECT 1")
	}
	if got := queryString(t, a, "SELECT v::text FROM pinned_tmp"); got != "42" {
		t.Errorf("temp table row = %q", got)
	}
	exec(t, a, "SELECT pg_advisory_lock(4711)")
	exec(t, a, "SELECT pg_advisory_unlock(4711)")
}

// rawStartup opens a TCP connection and writes b as the first bytes.
func rawStartup(t *testing.T, addr string, b []byte) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	return c
}

func packet(code uint32, body []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(8+len(body)))
	b = binary.BigEndian.AppendUint32(b, code)
	return append(b, body...)
}

// readError reads one message and returns the SQLSTATE if it is an ErrorResponse.
func readError(t *testing.T, c net.Conn) string {
	t.Helper()
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(c, hdr); err != nil {
		t.Fatalf("no answer: %v", err)
	}
	if hdr[0] != 'E' {
		t.Fatalf("answer type %q, want ErrorResponse", hdr[0])
	}
	body := make([]byte, binary.BigEndian.Uint32(hdr[1:])-4)
	if _, err := io.ReadFull(c, body); err != nil {
		t.Fatal(err)
	}
	for len(body) > 1 && body[0] != 0 {
		f := body[0]
		end := 1
		for end < len(body) && body[end] != 0 {
			end++
		}
		if f == 'C' {
			return string(body[1:end])
		}
		body = body[end+1:]
	}
	return ""
}

func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 16)); err == nil {
		t.Errorf("connection still open, read %d more bytes", n)
	}
}

func TestMalformedStartupPackets(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, func(c *coordinator.Config) { c.StartupTimeout = 500 * time.Millisecond })
	// PostgreSQL itself closes some of these silently or answers in the
	// old protocol; the coordinator answers every one with a FATAL error.
	targets := map[string]string{"coordinator": srv.Addr()}
	user := []byte("user\x00postgres\x00\x00")
	cases := []struct {
		name string
		pkt  []byte
		code string // "" means: closed without an answer
	}{
		{"protocol 2.0", packet(2<<16, user), "08P01"},
		{"unknown request code", packet(1234<<16|4321, nil), "08P01"},
		{"length too small", []byte{0, 0, 0, 2, 0, 3, 0, 0}, "08P01"},
		{"length too large", []byte{0x7f, 0, 0, 0, 0, 3, 0, 0}, "08P01"},
		{"no user", packet(3<<16, []byte("database\x00postgres\x00\x00")), "28000"},
	}
	for _, tc := range cases {
		for name, addr := range targets {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				c := rawStartup(t, addr, tc.pkt)
				if got := readError(t, c); got != tc.code {
					t.Errorf("SQLSTATE %q, want %q", got, tc.code)
				}
				expectClosed(t, c)
			})
		}
	}
	t.Run("SSLRequest and GSSENCRequest answered N", func(t *testing.T) {
		for _, code := range []uint32{80877103, 80877104} {
			c := rawStartup(t, srv.Addr(), packet(code, nil))
			one := make([]byte, 1)
			if _, err := io.ReadFull(c, one); err != nil || one[0] != 'N' {
				t.Fatalf("answer %q %v, want N", one, err)
			}
		}
		// libpq's default sslmode=prefer falls back to plain text after 'N'.
		ctx := context.Background()
		pc, err := pgconn.Connect(ctx, "postgres://postgres@"+srv.Addr()+"/postgres?sslmode=prefer")
		if err != nil {
			t.Fatal(err)
		}
		pc.Close(ctx)
	})
	t.Run("silent client is dropped", func(t *testing.T) {
		c, err := net.Dial("tcp", srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		expectClosed(t, c)
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("silent client kept %v, startup timeout is 500ms", d)
		}
	})
	t.Run("truncated startup packet", func(t *testing.T) {
		c := rawStartup(t, srv.Addr(), []byte{0, 0, 0, 40, 0, 3, 0, 0})
		expectClosed(t, c)
	})
}

func TestAuthentication(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := context.Background()
	for _, method := range []string{"scram-sha-256", "md5"} {
		t.Run(method, func(t *testing.T) {
			srv := pgtest.Coordinator(t, cl, func(c *coordinator.Config) {
				c.Auth = method
				c.Users = map[string]string{"postgres": "s3cret"}
			})
			url := func(pw string) string {
				return fmt.Sprintf("postgres://postgres:%s@%s/postgres?sslmode=disable", pw, srv.Addr())
			}
			c, err := pgx.Connect(ctx, url("s3cret"))
			if err != nil {
				t.Fatalf("right password: %v", err)
			}
			if got := queryString(t, c, "SELECT current_user::text"); got != "postgres" {
				t.Errorf("current_user %q", got)
			}
			c.Close(ctx)
			_, err = pgx.Connect(ctx, url("wrong"))
			if sqlState(err) != "28P01" {
				t.Errorf("wrong password: err %v, want SQLSTATE 28P01", err)
			}
			_, err = pgx.Connect(ctx, fmt.Sprintf("postgres://nobody:x@%s/postgres?sslmode=disable", srv.Addr()))
			if sqlState(err) != "28P01" {
				t.Errorf("unknown user: err %v, want SQLSTATE 28P01", err)
			}
		})
	}
}

func TestUnknownDatabaseIsReportedAtConnect(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	_, err := pgx.Connect(context.Background(), "postgres://postgres@"+srv.Addr()+"/no_such_db?sslmode=disable")
	if sqlState(err) != "3D000" {
		t.Errorf("err %v, want SQLSTATE 3D000", err)
	}
}

// TestLoginWithPoolFull: a client logs in at once while every pooled
// connection it may take is held by other sessions' transactions
// (adversary finding: pgbench -C, whose one thread connects while its
// other clients' transactions wait for it, got 53300 after the pool
// timeout: the login waited for those transactions, and they for
// pgbench), answered from the record of the earlier logins with the same
// settings (welcome.go); the new session then waits for a connection like
// any statement, and gets one when a transaction ends. A login with
// settings no earlier login had waits for a connection. The pool never
// goes past its size. (Two transactions take what a client outside a
// transaction may of a pool of 3: the last connection is kept for
// transactions spanning workers.)
func TestLoginWithPoolFull(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, func(c *coordinator.Config) { c.PoolSize, c.PoolTimeout = 3, 3*time.Second })
	ctx := context.Background()
	holders := []*pgx.Conn{connect(t, srv.Addr()), connect(t, srv.Addr())}
	for _, h := range holders {
		exec(t, h, "BEGIN")
		exec(t, h, "SELECT 1")
	}
	start := time.Now()
	c := connect(t, srv.Addr())
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("login with the pool full took %v", d)
	}
	done := make(chan string, 2)
	go func() {
		var s string
		if err := c.QueryRow(ctx, "SELECT 'served'").Scan(&s); err != nil {
			s = err.Error()
		}
		done <- s
	}()
	cfg, err := pgx.ParseConfig(pgtest.URL(srv.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = "fresh"
	go func() {
		var s string
		f, err := pgx.ConnectConfig(ctx, cfg)
		if err == nil {
			defer f.Close(ctx)
			err = f.QueryRow(ctx, "SELECT current_setting('application_name')").Scan(&s)
		}
		if err != nil {
			s = err.Error()
		}
		done <- s
	}()
	time.Sleep(300 * time.Millisecond)
	select {
	case got := <-done:
		t.Errorf("with the pool full, before a transaction ended: %s", got)
	default:
	}
	exec(t, holders[0], "COMMIT")
	got := []string{<-done, <-done}
	slices.Sort(got)
	if fmt.Sprint(got) != "[fresh served]" {
		t.Errorf("the new sessions' statements: %v, want [fresh served]", got)
	}
	exec(t, holders[1], "COMMIT")
	rows, err := c.Query(ctx, "SHOW POOLS", pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	open := 0
	for rows.Next() {
		v, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		open += int(v[3].(int32) + v[4].(int32)) // sv_active, sv_idle
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if open > 3 {
		t.Errorf("connections of the pool after the transactions: %d, want at most its size 3", open)
	}
}

// TestLoginAfterRoleChange: a change of what a login gets, made through
// the coordinator, reaches the next login, as PostgreSQL applies it at
// login (adversary finding: pooled connections opened before kept the old
// role settings and let a NOLOGIN role in): ALTER ROLE ... SET, ALTER
// ROLE ... NOLOGIN. (ALTER DATABASE is left out: the tests share the
// database.)
// A role's settings changed on the workers directly, not through a
// coordinator, reach new sessions once the connections opened before reach
// --server-lifetime.
func TestLoginAfterServerLifetime(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, func(c *coordinator.Config) { c.PoolSize, c.ServerLifetime = 4, 500*time.Millisecond })
	ctx := context.Background()
	admin := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	exec(t, admin, "DROP ROLE IF EXISTS lsl_erin", simple)
	exec(t, admin, "CREATE ROLE lsl_erin LOGIN", simple)
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP ROLE IF EXISTS lsl_erin", simple)
	})
	url := "postgres://lsl_erin@" + srv.Addr() + "/postgres?sslmode=disable"
	c := connectURL(t, url)
	if got := queryString(t, c, "SHOW TimeZone"); got == "Pacific/Auckland" {
		t.Fatalf("TimeZone before the change: %s", got)
	}
	c.Close(ctx) // its connection stays in the pool
	for _, w := range cl.Servers {
		direct := connectURL(t, w.URL())
		if queryString(t, direct, "SELECT count(*)::text FROM pg_roles WHERE rolname = 'lsl_erin'") == "1" {
			exec(t, direct, "ALTER ROLE lsl_erin SET TimeZone = 'Pacific/Auckland'", simple)
		}
		direct.Close(ctx)
	}
	time.Sleep(700 * time.Millisecond)
	c = connectURL(t, url)
	defer c.Close(ctx)
	if got := c.PgConn().ParameterStatus("TimeZone"); got != "Pacific/Auckland" {
		t.Errorf("TimeZone reported to a login past the server lifetime: %q, want Pacific/Auckland", got)
	}
	if got := queryString(t, c, "SHOW TimeZone"); got != "Pacific/Auckland" {
		t.Errorf("SHOW TimeZone at a login past the server lifetime: %q, want Pacific/Auckland", got)
	}
}

func TestLoginAfterRoleChange(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	roleChangeSeen(t, cl, connect(t, srv.Addr()), srv.Addr(), "lrc_carol", "Asia/Tokyo")
}

// roleChangeSeen makes role on every worker (roles are made on each),
// logs it in through login (a coordinator's address) and out, so that its
// connection stays in the pool, then through admin gives it TimeZone zone
// and checks the next login through login gets it, then makes it NOLOGIN
// and checks the next login fails with 28000.
func roleChangeSeen(t *testing.T, cl *pgcluster.Cluster, admin *pgx.Conn, login, role, zone string) {
	t.Helper()
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	onWorkers := func(sql string) {
		for _, w := range cl.Servers {
			if direct, err := pgx.Connect(context.Background(), w.URL()); err == nil {
				_, _ = direct.Exec(context.Background(), sql, simple)
				direct.Close(context.Background())
			}
		}
	}
	onWorkers("DROP ROLE IF EXISTS " + role)
	onWorkers("CREATE ROLE " + role + " LOGIN")
	t.Cleanup(func() { onWorkers("DROP ROLE IF EXISTS " + role) })
	url := "postgres://" + role + "@" + login + "/postgres?sslmode=disable"
	connectAs := func() (*pgx.Conn, error) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return pgx.Connect(cctx, url)
	}
	c, err := connectAs()
	if err != nil {
		t.Fatal(err)
	}
	if got := queryString(t, c, "SHOW TimeZone"); got == zone {
		t.Fatalf("TimeZone before the change: %s", got)
	}
	c.Close(ctx) // its connection stays in the pool
	exec(t, admin, "ALTER ROLE "+role+" SET TimeZone = '"+zone+"'", simple)
	c, err = connectAs()
	if err != nil {
		t.Fatal(err)
	}
	if got := c.PgConn().ParameterStatus("TimeZone"); got != zone {
		t.Errorf("TimeZone reported to the next login: %q, want %s", got, zone)
	}
	if got := queryString(t, c, "SHOW TimeZone"); got != zone {
		t.Errorf("SHOW TimeZone at the next login: %q, want %s", got, zone)
	}
	c.Close(ctx)
	exec(t, admin, "ALTER ROLE "+role+" NOLOGIN", simple)
	if c, err := connectAs(); err == nil {
		c.Close(ctx)
		t.Error("a NOLOGIN role logged in")
	} else if sqlState(err) != "28000" {
		t.Errorf("login of a NOLOGIN role: %v, want 28000", err)
	}
}

// TestRoleSettingsOnEveryWorker: ALTER ROLE ... SET and ALTER DATABASE ...
// SET through the coordinator reach every worker, so that one query's rows
// are all read under the role's settings (adversary finding: they reached
// the first worker only, and rows of the other came back in UTC), inside
// a transaction block and out, and RESET likewise.
func TestRoleSettingsOnEveryWorker(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	admin := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	testTable(t, admin, "rsw", "(id int PRIMARY KEY)", "SELECT create_distributed_table('rsw', 'id', shard_count => 4)")
	exec(t, admin, "INSERT INTO rsw SELECT generate_series(1, 20)", simple)
	// Roles are made on each worker (README).
	for _, w := range cl.Servers {
		direct := connectURL(t, w.URL())
		exec(t, direct, "DROP ROLE IF EXISTS rsw_frank", simple)
		exec(t, direct, "CREATE ROLE rsw_frank LOGIN IN ROLE pg_read_all_data", simple)
		direct.Close(context.Background())
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "ALTER DATABASE postgres RESET pgfleet_test.rsw", simple)
		for _, w := range cl.Servers {
			if direct, err := pgx.Connect(context.Background(), w.URL()); err == nil {
				_, _ = direct.Exec(context.Background(), "DROP OWNED BY rsw_frank; DROP ROLE IF EXISTS rsw_frank", simple)
				direct.Close(context.Background())
			}
		}
	})
	seen := func(expr string) string {
		t.Helper()
		c := connectURL(t, "postgres://rsw_frank@"+srv.Addr()+"/postgres?sslmode=disable")
		defer c.Close(context.Background())
		rows, err := c.Query(context.Background(), "SELECT inet_server_port()::text || ' ' || coalesce("+expr+", '-') FROM rsw", simple)
		if err != nil {
			t.Fatal(err)
		}
		set := map[string]bool{}
		for rows.Next() {
			var v string
			if err := rows.Scan(&v); err != nil {
				t.Fatal(err)
			}
			set[v] = true
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return strings.Join(slices.Sorted(maps.Keys(set)), ", ")
	}
	workers := func(v string) string {
		var out []string
		for _, w := range cl.Servers {
			out = append(out, strconv.Itoa(w.Port)+" "+v)
		}
		slices.Sort(out)
		return strings.Join(out, ", ")
	}
	exec(t, admin, "ALTER ROLE rsw_frank SET TimeZone = 'Asia/Tokyo'", simple)
	if got, want := seen("current_setting('TimeZone')"), workers("Asia/Tokyo"); got != want {
		t.Errorf("after ALTER ROLE ... SET: %s, want %s", got, want)
	}
	tx, err := admin.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	exec(t, tx.Conn(), "ALTER ROLE rsw_frank IN DATABASE postgres SET DateStyle = 'German'", simple)
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := seen("current_setting('DateStyle')"), workers("German, DMY"); got != want {
		t.Errorf("after ALTER ROLE ... IN DATABASE ... SET in a block: %s, want %s", got, want)
	}
	exec(t, admin, "ALTER DATABASE postgres SET pgfleet_test.rsw = 'on'", simple)
	if got, want := seen("current_setting('pgfleet_test.rsw', true)"), workers("on"); got != want {
		t.Errorf("after ALTER DATABASE ... SET: %s, want %s", got, want)
	}
	exec(t, admin, "ALTER ROLE rsw_frank RESET TimeZone", simple)
	if got := seen("current_setting('TimeZone')"); strings.Contains(got, "Asia/Tokyo") {
		t.Errorf("after ALTER ROLE ... RESET: %s", got)
	}
}
