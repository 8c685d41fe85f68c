package compat_test

import (
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

// debianPython is the interpreter Debian's python3-psycopg2 and
// python3-psycopg install for (scripts/test installs them).
const debianPython = "/usr/bin/python3"

// TestPython: psycopg2 and psycopg 3, as Python applications use them, run
// compat/python/check.py through a coordinator and against plain
// PostgreSQL (the oracle, without the Citus calls); the two must print the
// same, twice over (the second run drops and makes the tables again in
// psycopg2's implicit transaction block). psycopg2 runs every statement in
// a block it opens and sends its own literals (the simple protocol): DDL
// and DROP TABLE of distributed tables in those blocks, execute_values and
// executemany over every shard, joins with a reference table, jsonb, uuid,
// bytea and arrays, server-side cursors (DECLARE, FETCH, WITH HOLD), COPY
// in and out (inside the block), a COPY with a bad row that leaves nothing,
// errors' fields and the aborted block, transfers and rollbacks over two
// shards, set_session's isolation and read-only, the time zone, two-phase
// commit with tpc_recover, LISTEN/NOTIFY and cancel. psycopg 3 binds on the
// server (prepared statements, binary results), and runs executemany,
// nested transactions (savepoints), pipeline mode, COPY by rows and named
// cursors. Then the workers' shards must hold what the tables show, and no
// prepared transaction may be left.
func TestPython(t *testing.T) {
	check := exec.Command(debianPython, "-c", "import psycopg2, psycopg")
	if out, err := check.CombinedOutput(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("psycopg2 and psycopg are needed (scripts/test installs them with apt): %v\n%s", err, out)
		}
		t.Skip("psycopg2 or psycopg is not installed for " + debianPython)
	}
	script, err := filepath.Abs(filepath.Join("python", "check.py"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	o := newOracle(t, ctx, "py_plain", "pyaccounts, pyitems, pyref")
	run := func(url string, env ...string) string {
		t.Helper()
		return output(t, exec.CommandContext(ctx, debianPython, script, url), env...)
	}
	want := run("postgresql://postgres@"+o.plain+"/py_plain?sslmode=disable", "PLAIN=1")
	for i := 1; i <= 2; i++ {
		got := run("postgresql://postgres@" + o.srv.Addr() + "/postgres?sslmode=disable")
		if got != want {
			t.Errorf("run %d through the coordinator:\n%s\nplain PostgreSQL:\n%s", i, got, want)
		}
	}
	for _, line := range []string{"execute_values: 100", "bad copy left: (0,)", "tpc recover: ['py-check-2']", "notify: ['hello', 'again']", "pg3 total: (340,"} {
		if !strings.Contains(want, line) {
			t.Errorf("the check's own figures: %q missing from\n%s", line, want)
		}
	}
	// The workers' shards hold what the tables show.
	c, err := pgx.Connect(ctx, pgtest.URL(o.srv.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	for _, tb := range []string{"pyaccounts", "pyitems"} {
		var shown int64
		if err := c.QueryRow(ctx, "SELECT count(*) FROM "+tb).Scan(&shown); err != nil {
			t.Fatal(err)
		}
		if n := o.shardRows(t, ctx, tb); n != shown {
			t.Errorf("%s: %d rows in the shards on the workers, %d through the coordinator", tb, n, shown)
		}
	}
	o.noPrepared(t, ctx)
}
