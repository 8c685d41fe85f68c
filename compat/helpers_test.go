package compat_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/internal/pgcluster"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// oracle is what a tool's check runs against: a coordinator over the
// shared cluster, and a database of its own on the first worker for the
// same check on plain PostgreSQL (made afresh, dropped after the test with
// the tables the check leaves behind the coordinator).
type oracle struct {
	cl    *pgcluster.Cluster
	srv   *coordinator.Server
	plain string // the plain database's host:port
}

func newOracle(t *testing.T, ctx context.Context, db string, leftTables string) *oracle {
	t.Helper()
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	w := cl.Servers[0].Addr()
	admin, err := pgx.Connect(ctx, pgtest.URL(w))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"DROP DATABASE IF EXISTS " + db, "CREATE DATABASE " + db} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
		_ = admin.Close(context.Background())
		c, err := pgx.Connect(context.Background(), pgtest.URL(srv.Addr()))
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP TABLE IF EXISTS "+leftTables)
			_ = c.Close(context.Background())
		}
	})
	return &oracle{cl: cl, srv: srv, plain: w}
}

// copied copies files (paths under the directory src of this package)
// into a directory of the test's, keeping their paths, and returns it: a
// tool writes its own files beside them (npm's packages, Python's
// bytecode, javac's classes).
func copied(t *testing.T, src string, files ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// output runs a check's command and returns what it printed; a failure
// ends the test with its output.
func output(t *testing.T, cmd *exec.Cmd, env ...string) string {
	t.Helper()
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s\n%s", strings.Join(cmd.Args, " "), err, out, stderr.String())
	}
	return string(out)
}

// shardRows counts the rows of table's shards on every worker.
func (o *oracle) shardRows(t *testing.T, ctx context.Context, table string) int64 {
	t.Helper()
	var total int64
	for _, s := range o.cl.Servers {
		wc, err := pgx.Connect(ctx, pgtest.URL(s.Addr()))
		if err != nil {
			t.Fatal(err)
		}
		rows, err := wc.Query(ctx, `SELECT tablename FROM pg_catalog.pg_tables
			WHERE schemaname = 'pgfleet_shards' AND tablename ~ ('^' || $1 || '_[0-9]+$')`, table)
		if err != nil {
			t.Fatal(err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			var k int64
			if err := wc.QueryRow(ctx, "SELECT count(*) FROM pgfleet_shards."+pgx.Identifier{n}.Sanitize()).Scan(&k); err != nil {
				t.Fatal(err)
			}
			total += k
		}
		_ = wc.Close(ctx)
	}
	return total
}

// noPrepared reports prepared transactions left on any worker.
func (o *oracle) noPrepared(t *testing.T, ctx context.Context) {
	t.Helper()
	for _, s := range o.cl.Servers {
		wc, err := pgx.Connect(ctx, pgtest.URL(s.Addr()))
		if err != nil {
			t.Fatal(err)
		}
		var prepared int
		if err := wc.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_xacts").Scan(&prepared); err != nil {
			t.Fatal(err)
		}
		if prepared != 0 {
			t.Errorf("worker %s: %d prepared transactions left", s.Addr(), prepared)
		}
		_ = wc.Close(ctx)
	}
}
