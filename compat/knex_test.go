package compat_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestKnex: a Node.js application stack, knex (its migrations, query
// builder and transactions) over node-postgres, as installed from npm
// (compat/knex/package-lock.json), runs compat/knex/run.js through a
// coordinator: migrations that distribute a table and make a reference
// table, then change them in a transaction; a multi-row insert over every
// shard, reads, updates, a transfer over two shards, a transaction that
// fails midway, a join with the reference table, paging, RETURNING, a
// duplicate key's error fields; an INSERT ... SELECT and an UPDATE with a
// subquery that run a query first, with bindings (the extended protocol);
// and the rollback of every migration. The
// same script on plain PostgreSQL (without the Citus calls) is the oracle:
// the two must print the same.
func TestKnex(t *testing.T) {
	node, err1 := exec.LookPath("node")
	npm, err2 := exec.LookPath("npm")
	if err1 != nil || err2 != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("node and npm are needed (scripts/test installs them with apt): %v %v", err1, err2)
		}
		t.Skip("node and npm are not installed")
	}
	// The project's files in a directory of the test's, with the locked
	// packages installed there.
	dir := copied(t, "knex", "package.json", "package-lock.json", "run.js", "migrations/001_tables.js", "migrations/002_plans.js")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	install := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
	install.Dir = dir
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("npm ci: %v\n%s", err, out)
	}

	o := newOracle(t, ctx, "knex_plain", "knex_migrations, knex_migrations_lock")
	run := func(url string, env ...string) (string, map[string]any) {
		t.Helper()
		cmd := exec.CommandContext(ctx, node, "run.js", url)
		cmd.Dir = dir
		line := strings.TrimSpace(output(t, cmd, env...))
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("node run.js %s printed %q: %v", url, line, err)
		}
		return line, m
	}
	got, m := run(pgtest.URL(o.srv.Addr()))
	want, _ := run("postgres://postgres@"+o.plain+"/knex_plain?sslmode=disable", "PLAIN=1")
	if got != want {
		t.Errorf("through the coordinator:\n%s\nplain PostgreSQL:\n%s", got, want)
	}
	if m["count"] != 50.0 || m["after"] != 40.0 || len(m["rolledBack"].([]any)) != 2 {
		t.Errorf("the script's own figures: %s", got)
	}
}
