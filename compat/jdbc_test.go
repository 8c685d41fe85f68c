package compat_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// jdbcJar is where Debian's libpostgresql-jdbc-java puts the driver
// (scripts/test installs it with a JDK).
const jdbcJar = "/usr/share/java/postgresql.jar"

// TestJDBC: the PostgreSQL JDBC driver, as Java applications and their
// transaction managers use it, runs compat/jdbc/JdbcCheck.java through a
// coordinator and against plain PostgreSQL (the oracle, without the Citus
// calls), in a JVM time zone other than UTC; the two must print the same.
// The check distributes a table with driver-typed (varchar) parameters and
// covers batches in a transaction, rewritten multi-row batches, a batch
// that fails midway in autocommit (none of it stays), point reads past the
// driver's prepare threshold (named statements, binary results) with int8,
// int4 and setObject keys, = ANY(array) joins with a reference table,
// aggregates over every shard, fetch sizes (results in parts), a transfer
// over two shards with savepoints, errors' SQLSTATE and fields,
// generated keys (the driver's RETURNING *), upserts, several statements in
// one execute, DatabaseMetaData as ORMs read it, isolation and read-only
// as the driver sets them, cancel and query timeouts, XA prepare, commit,
// recover and rollback, preferQueryMode=simple and forced binary transfer.
// Then the workers' shards must hold what the table shows, and no prepared
// transaction may be left.
func TestJDBC(t *testing.T) {
	javac, err1 := exec.LookPath("javac")
	java, err2 := exec.LookPath("java")
	_, err3 := os.Stat(jdbcJar)
	if err1 != nil || err2 != nil || err3 != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("a JDK and the JDBC driver are needed (scripts/test installs them with apt): %v %v %v", err1, err2, err3)
		}
		t.Skip("a JDK or the JDBC driver is not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join("jdbc", "JdbcCheck.java"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "JdbcCheck.java"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, javac, "-cp", jdbcJar, "-d", dir, filepath.Join(dir, "JdbcCheck.java")).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}

	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	w := cl.Servers[0].Addr()
	admin, err := pgx.Connect(ctx, pgtest.URL(w))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	for _, q := range []string{"DROP DATABASE IF EXISTS jdbc_plain", "CREATE DATABASE jdbc_plain"} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS jdbc_plain WITH (FORCE)")
		c, err := pgx.Connect(context.Background(), pgtest.URL(srv.Addr()))
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP TABLE IF EXISTS jevents, jaccounts, jbranches")
			c.Close(context.Background())
		}
	})
	run := func(url string, env ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, java, "-Duser.timezone=Asia/Kolkata", "-cp", jdbcJar+string(os.PathListSeparator)+dir, "JdbcCheck", url)
		cmd.Env = append(os.Environ(), env...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("java JdbcCheck %s: %v\n%s\n%s", url, err, out, stderr.String())
		}
		return string(out)
	}
	got := run("jdbc:postgresql://" + srv.Addr() + "/postgres?sslmode=disable")
	want := run("jdbc:postgresql://"+w+"/jdbc_plain?sslmode=disable", "PLAIN=1")
	if got != want {
		t.Errorf("through the coordinator:\n%s\nplain PostgreSQL:\n%s", got, want)
	}
	for _, line := range []string{"batch: 200 200", "failed batch: 23505 [0]", "xa recover: 1", "cancel: 57014", "total: [251,"} {
		if !strings.Contains(got, line) {
			t.Errorf("the check's own figures: %q missing from\n%s", line, got)
		}
	}

	// The workers' shards hold what the table shows.
	var total int64
	for _, s := range cl.Servers {
		c, err := pgx.Connect(ctx, pgtest.URL(s.Addr()))
		if err != nil {
			t.Fatal(err)
		}
		rows, err := c.Query(ctx, `SELECT table_name FROM information_schema.tables
			WHERE table_schema = 'pgfleet_shards' AND table_name ~ '^jaccounts_[0-9]+$'`)
		if err != nil {
			t.Fatal(err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			var k int64
			if err := c.QueryRow(ctx, "SELECT count(*) FROM pgfleet_shards."+pgx.Identifier{n}.Sanitize()).Scan(&k); err != nil {
				t.Fatal(err)
			}
			total += k
		}
		var prepared int
		if err := c.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_xacts").Scan(&prepared); err != nil {
			t.Fatal(err)
		}
		if prepared != 0 {
			t.Errorf("worker %s: %d prepared transactions left", s.Addr(), prepared)
		}
		_ = c.Close(ctx)
	}
	if total != 251 {
		t.Errorf("rows in jaccounts's shards on the workers: %d, want 251", total)
	}
}
