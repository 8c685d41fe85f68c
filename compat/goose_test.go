package compat_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// gooseMigrations are what a Citus user's migrations look like: tables
// distributed outside a transaction (NO TRANSACTION), then schema changes
// and data fixes in one transaction each, as goose runs them by default.
var gooseMigrations = fstest.MapFS{
	"00001_tables.sql": {Data: []byte(`-- +goose NO TRANSACTION
-- +goose Up
CREATE TABLE gz_accounts (id bigint PRIMARY KEY, name text NOT NULL, balance numeric NOT NULL DEFAULT 0);
SELECT create_distributed_table('gz_accounts', 'id', shard_count => 4);
CREATE TABLE gz_plans (id int PRIMARY KEY, title text NOT NULL);
SELECT create_reference_table('gz_plans');

-- +goose Down
DROP TABLE gz_accounts;
DROP TABLE gz_plans;
`)},
	"00002_plans.sql": {Data: []byte(`-- +goose Up
ALTER TABLE gz_accounts ADD COLUMN plan_id int;
CREATE INDEX gz_accounts_plan ON gz_accounts (plan_id);
INSERT INTO gz_plans (id, title) VALUES (1, 'free'), (2, 'pro');
UPDATE gz_accounts SET plan_id = CASE WHEN balance > 100 THEN 2 ELSE 1 END;
ALTER TABLE gz_accounts ALTER COLUMN plan_id SET NOT NULL;
ALTER TABLE gz_accounts ADD CONSTRAINT gz_balance CHECK (balance >= 0);

-- +goose Down
ALTER TABLE gz_accounts DROP CONSTRAINT gz_balance;
DROP INDEX gz_accounts_plan;
ALTER TABLE gz_accounts DROP COLUMN plan_id;
DELETE FROM gz_plans;
`)},
	"00003_rich.sql": {Data: []byte(`-- +goose Up
ALTER TABLE gz_accounts ADD COLUMN note text;
UPDATE gz_accounts SET note = 'checked';
ALTER TABLE gz_accounts ADD CONSTRAINT gz_rich CHECK (balance > 100);

-- +goose Down
ALTER TABLE gz_accounts DROP CONSTRAINT gz_rich;
ALTER TABLE gz_accounts DROP COLUMN note;
`)},
}

// TestGooseMigrations: goose (pressly/goose v3, through pgx's
// database/sql driver) migrates a schema of distributed and reference
// tables up and down through a coordinator, each migration in a
// transaction block over every worker: what commits is on every shard,
// a migration that fails midway leaves nothing (goose's version stays),
// and Down undoes Up.
func TestGooseMigrations(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	db, err := sql.Open("pgx", pgtest.URL(srv.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	cleanup := func() {
		for _, q := range []string{"DROP TABLE IF EXISTS gz_accounts", "DROP TABLE IF EXISTS gz_plans", "DROP TABLE IF EXISTS goose_db_version"} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				t.Logf("cleanup: %s: %v", q, err)
			}
		}
	}
	cleanup()
	t.Cleanup(cleanup)
	p, err := goose.NewProvider(goose.DialectPostgres, db, gooseMigrations)
	if err != nil {
		t.Fatal(err)
	}
	version := func() int64 {
		t.Helper()
		v, err := p.GetDBVersion(ctx)
		if err != nil {
			t.Fatalf("goose version: %v", err)
		}
		return v
	}
	// shardColumns counts, over every worker, the shards of gz_accounts
	// that have column col (4 when all have it, 0 when none).
	shardColumns := func(col string) int {
		t.Helper()
		n := 0
		for _, s := range cl.Servers {
			c, err := pgx.Connect(ctx, pgtest.URL(s.Addr()))
			if err != nil {
				t.Fatal(err)
			}
			var k int
			if err := c.QueryRow(ctx, `SELECT count(*) FROM information_schema.columns
				WHERE table_schema = 'pgfleet_shards' AND table_name ~ '^gz_accounts_[0-9]+$' AND column_name = $1`, col).Scan(&k); err != nil {
				t.Fatal(err)
			}
			n += k
			_ = c.Close(ctx)
		}
		return n
	}

	if _, err := p.UpTo(ctx, 1); err != nil {
		t.Fatalf("goose up to 1: %v", err)
	}
	for i := 1; i <= 40; i++ {
		if _, err := db.ExecContext(ctx, "INSERT INTO gz_accounts (id, name, balance) VALUES ($1, $2, $3)", i, "a", i*5); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.UpTo(ctx, 2); err != nil {
		t.Fatalf("goose up to 2: %v", err)
	}
	if v := version(); v != 2 {
		t.Errorf("goose version after up to 2: %d", v)
	}
	if n := shardColumns("plan_id"); n != 4 {
		t.Errorf("shards with plan_id after migration 2: %d, want 4", n)
	}
	var pro, free int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE p.title = 'pro'), count(*) FILTER (WHERE p.title = 'free')
		FROM gz_accounts a JOIN gz_plans p ON p.id = a.plan_id`).Scan(&pro, &free); err != nil {
		t.Fatal(err)
	}
	if pro != 20 || free != 20 {
		t.Errorf("accounts by plan after migration 2: pro %d, free %d; want 20 and 20", pro, free)
	}
	if _, err := db.ExecContext(ctx, "UPDATE gz_accounts SET balance = -1 WHERE id = 3"); sqlState(err) != "23514" {
		t.Errorf("a write against migration 2's constraint: %v, want 23514", err)
	}

	// Migration 3 fails at its constraint (rows with balance <= 100 on
	// every shard): nothing of it stays.
	_, err = p.UpTo(ctx, 3)
	if sqlState(err) != "23514" {
		t.Errorf("goose up to 3: %v, want 23514 from its constraint", err)
	}
	if v := version(); v != 2 {
		t.Errorf("goose version after the failed migration: %d, want 2", v)
	}
	if n := shardColumns("note"); n != 0 {
		t.Errorf("shards with the failed migration's column: %d, want 0", n)
	}
	var notes int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM information_schema.columns WHERE table_name = 'gz_accounts' AND column_name = 'note'").Scan(&notes); err != nil || notes != 0 {
		t.Errorf("the failed migration's column on the table: %d %v, want none", notes, err)
	}

	// Down undoes migration 2 everywhere, and up again redoes it.
	if _, err := p.Down(ctx); err != nil {
		t.Fatalf("goose down: %v", err)
	}
	if n := shardColumns("plan_id"); n != 0 {
		t.Errorf("shards with plan_id after down: %d, want 0", n)
	}
	if _, err := p.UpTo(ctx, 2); err != nil {
		t.Fatalf("goose up to 2 again: %v", err)
	}
	var count int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM gz_accounts WHERE plan_id IS NOT NULL").Scan(&count); err != nil || count != 40 {
		t.Errorf("accounts with a plan after up again: %d %v, want 40", count, err)
	}
	var prepared int
	for _, s := range cl.Servers {
		c, err := pgx.Connect(ctx, pgtest.URL(s.Addr()))
		if err != nil {
			t.Fatal(err)
		}
		var k int
		if err := c.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_xacts").Scan(&k); err != nil {
			t.Fatal(err)
		}
		prepared += k
		_ = c.Close(ctx)
	}
	if prepared != 0 {
		t.Errorf("prepared transactions left on the workers: %d", prepared)
	}
}

func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	if err != nil && strings.Contains(err.Error(), "SQLSTATE") {
		return "?"
	}
	return ""
}
