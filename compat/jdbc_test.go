package compat_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
	dir := copied(t, "jdbc", "JdbcCheck.java")
	if out, err := exec.CommandContext(ctx, javac, "-cp", jdbcJar, "-d", dir, filepath.Join(dir, "JdbcCheck.java")).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}

	o := newOracle(t, ctx, "jdbc_plain", "jevents, jaccounts, jbranches")
	run := func(url string, env ...string) string {
		t.Helper()
		return output(t, exec.CommandContext(ctx, java, "-Duser.timezone=Asia/Kolkata", "-cp", jdbcJar+string(os.PathListSeparator)+dir, "JdbcCheck", url), env...)
	}
	got := run("jdbc:postgresql://" + o.srv.Addr() + "/postgres?sslmode=disable")
	want := run("jdbc:postgresql://"+o.plain+"/jdbc_plain?sslmode=disable", "PLAIN=1")
	if got != want {
		t.Errorf("through the coordinator:\n%s\nplain PostgreSQL:\n%s", got, want)
	}
	for _, line := range []string{"batch: 200 200", "failed batch: 23505 [0]", "xa recover: 1", "cancel: 57014", "total: [251,"} {
		if !strings.Contains(got, line) {
			t.Errorf("the check's own figures: %q missing from\n%s", line, got)
		}
	}
	// The workers' shards hold what the table shows.
	if n := o.shardRows(t, ctx, "jaccounts"); n != 251 {
		t.Errorf("rows in jaccounts's shards on the workers: %d, want 251", n)
	}
	o.noPrepared(t, ctx)
}
