package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestAuthWorkers: a coordinator started with --auth workers and no users
// lets in a role made on the workers (CREATE ROLE ... PASSWORD) with its
// own password, over SCRAM-SHA-256, and logs into every worker as that
// role with the key the client's proof reveals, on workers that ask for
// SCRAM themselves (pg_hba.conf: scram-sha-256 for every role but
// postgres). A wrong password, an unknown role and a role without a SCRAM
// password get PostgreSQL's 28P01; a role whose verifier differs on a
// worker (made there with the same password: another salt) gets 28P01
// naming the cause when a statement needs that worker; a changed password
// takes effect at once.
func TestAuthWorkers(t *testing.T) {
	dir, err := os.MkdirTemp("", "pgfleet-auth-") // readable by the postgres user, which t.TempDir's parent is not
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	hba := filepath.Join(dir, "pg_hba.conf")
	if err := os.WriteFile(hba, []byte("host all postgres 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 scram-sha-256\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cl := pgtest.Start(t, 2, "hba_file="+hba)
	ctx := context.Background()
	var admins []*pgx.Conn
	for _, s := range cl.Servers {
		admins = append(admins, connect(t, s.Addr()))
	}
	w1, w2 := admins[0], admins[1]
	verifier := func(role string) string {
		t.Helper()
		var v string
		if err := w1.QueryRow(ctx, "SELECT rolpassword FROM pg_authid WHERE rolname = $1", role).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	exec(t, w1, "CREATE ROLE aw_user LOGIN SUPERUSER PASSWORD 'right-horse'")
	exec(t, w2, "CREATE ROLE aw_user LOGIN SUPERUSER PASSWORD '"+verifier("aw_user")+"'")
	for _, w := range admins { // the same password, made on each: two salts
		exec(t, w, "CREATE ROLE aw_salted LOGIN SUPERUSER PASSWORD 'right-horse'")
	}
	exec(t, w1, "SET password_encryption = 'md5'")
	exec(t, w1, "CREATE ROLE aw_md5 LOGIN PASSWORD 'right-horse'")
	exec(t, w1, "RESET password_encryption")

	srv := pgtest.Coordinator(t, cl, func(c *coordinator.Config) { c.Auth = "workers" })
	url := func(user, pw string) string {
		return fmt.Sprintf("postgres://%s:%s@%s/postgres?sslmode=disable", user, pw, srv.Addr())
	}
	login := func(user, pw string) (*pgx.Conn, error) {
		c, err := pgx.Connect(ctx, url(user, pw))
		if err == nil {
			t.Cleanup(func() { c.Close(context.Background()) })
		}
		return c, err
	}
	c, err := login("aw_user", "right-horse")
	if err != nil {
		t.Fatalf("the role's own password: %v", err)
	}
	simple := pgx.QueryExecModeSimpleProtocol
	exec(t, c, "CREATE TABLE aw_t (id int PRIMARY KEY, v text)", simple)
	exec(t, c, "SELECT create_distributed_table('aw_t', 'id', shard_count => 4)", simple)
	exec(t, c, "INSERT INTO aw_t SELECT g, 'r' || g FROM generate_series(1, 100) g", simple)
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM aw_t").Scan(&n); err != nil || n != 100 {
		t.Fatalf("count over both workers: %d, %v", n, err)
	}
	if s := queryString(t, c, "SELECT current_user::text || ' ' || session_user::text"); s != "aw_user aw_user" {
		t.Errorf("current_user and session_user on the worker: %q, want aw_user twice", s)
	}
	// Logged into the second worker as the role, with no password given.
	var onW2 int
	if err := w2.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE usename = 'aw_user'").Scan(&onW2); err != nil || onW2 == 0 {
		t.Errorf("aw_user's connections on worker 2: %d, %v; want some", onW2, err)
	}

	for _, bad := range []struct{ user, pw string }{{"aw_user", "wrong-horse"}, {"aw_nobody", "right-horse"}, {"aw_md5", "right-horse"}} {
		_, err := login(bad.user, bad.pw)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "28P01" || pe.Message != fmt.Sprintf("password authentication failed for user %q", bad.user) {
			t.Errorf("%s with %s: %v, want 28P01 password authentication failed", bad.user, bad.pw, err)
		}
	}

	// Another verifier on worker 2: the login works (worker 1), a
	// statement on worker 2 gets 28P01 with the cause.
	cs, err := login("aw_salted", "right-horse")
	if err != nil {
		t.Fatalf("aw_salted: %v", err)
	}
	_, err = cs.Exec(ctx, "SELECT count(*) FROM aw_t")
	if sqlState(err) != "28P01" || !strings.Contains(err.Error(), "another SCRAM verifier") {
		t.Errorf("aw_salted reading worker 2: %v, want 28P01 naming another SCRAM verifier", err)
	}

	// A new password, given to both workers: the old one fails, the new
	// one logs in and reaches both workers.
	exec(t, w1, "ALTER ROLE aw_user PASSWORD 'new-horse'")
	exec(t, w2, "ALTER ROLE aw_user PASSWORD '"+verifier("aw_user")+"'")
	if _, err := login("aw_user", "right-horse"); sqlState(err) != "28P01" {
		t.Errorf("the old password after ALTER ROLE: %v, want 28P01", err)
	}
	exec(t, w2, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'aw_user'")
	// pg_terminate_backend only signals: wait until the backends are gone
	// (under load one still answered, with 57P01, the statement below).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var left int
		if err := w2.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE usename = 'aw_user'").Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d backends of aw_user still run 10 s after pg_terminate_backend", left)
		}
	}
	cn, err := login("aw_user", "new-horse")
	if err != nil {
		t.Fatalf("the new password: %v", err)
	}
	if err := cn.QueryRow(ctx, "SELECT count(*) FROM aw_t").Scan(&n); err != nil || n != 100 {
		t.Errorf("count over both workers with the new password: %d, %v", n, err)
	}
}
