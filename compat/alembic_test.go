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

// TestAlembic: Alembic (Debian's, over SQLAlchemy and psycopg2) migrates
// through a coordinator as through plain PostgreSQL, compat/alembic/run.py
// printing the same for both: each upgrade and downgrade in one
// transaction (Alembic's way on PostgreSQL), with create_reference_table
// and create_distributed_table in the first migration, a column, an index
// and a check constraint in the second, a third that fails at the
// constraint and leaves nothing, downgrades that drop them and the tables
// (DROP TABLE in the migration's transaction), and the same again; between
// them SQLAlchemy's ORM reads, joins, updates and a transfer, and a write
// the constraint refuses. Then no prepared transaction is left and no
// shard of the dropped tables remains on the workers.
func TestAlembic(t *testing.T) {
	check := exec.Command(debianPython, "-c", "import alembic, sqlalchemy, psycopg2")
	if out, err := check.CombinedOutput(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("Alembic and SQLAlchemy are needed (scripts/test installs them with apt): %v\n%s", err, out)
		}
		t.Skip("Alembic or SQLAlchemy is not installed for " + debianPython)
	}
	// Alembic writes its bytecode beside the scripts: a copy of them.
	dir := copied(t, "alembic", "env.py", "script.py.mako", "run.py", "versions/001_tables.py", "versions/002_plan.py", "versions/003_fails.py")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	o := newOracle(t, ctx, "alembic_plain", "al_accounts, al_plans, alembic_version")
	run := func(url string, env ...string) string {
		t.Helper()
		return output(t, exec.CommandContext(ctx, debianPython, filepath.Join(dir, "run.py"), url), env...)
	}
	want := run("postgresql://postgres@"+o.plain+"/alembic_plain?sslmode=disable", "PLAIN=1")
	got := run("postgresql://postgres@" + o.srv.Addr() + "/postgres?sslmode=disable")
	if got != want {
		t.Errorf("through the coordinator:\n%s\nplain PostgreSQL:\n%s", got, want)
	}
	for _, line := range []string{"003: 23514", "after failed 003: ('002',", "after downgrade base: (None, None)", "down again: (None, None)"} {
		if !strings.Contains(want, line) {
			t.Errorf("the check's own figures: %q missing from\n%s", line, want)
		}
	}
	o.noPrepared(t, ctx)
	for _, s := range o.cl.Servers {
		wc, err := pgx.Connect(ctx, pgtest.URL(s.Addr()))
		if err != nil {
			t.Fatal(err)
		}
		var shards int
		if err := wc.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_tables
			WHERE schemaname = 'pgfleet_shards' AND tablename ~ '^al_(accounts|plans)_[0-9]+$'`).Scan(&shards); err != nil {
			t.Fatal(err)
		}
		if shards != 0 {
			t.Errorf("worker %s: %d shards of the dropped tables left", s.Addr(), shards)
		}
		_ = wc.Close(ctx)
	}
}
