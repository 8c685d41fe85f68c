package coordinator_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestSearchPathFindsPublic: with a search_path other than public, a
// distributed table named without its schema is read where PostgreSQL
// finds it: in public when no schema before it has a relation of that
// name (SET search_path = nothere, public: psycopg's and postgres.js's
// smoke checks got 0A000); another schema's table of that name is not
// read as the distributed one (0A000, as before).
func TestSearchPathFindsPublic(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	c := connect(t, srv.Addr())
	testTable(t, c, "sp_d", "(id int PRIMARY KEY, v int)", "SELECT create_distributed_table('sp_d', 'id', shard_count => 4)")
	exec(t, c, "INSERT INTO sp_d SELECT g, g FROM generate_series(1, 20) g", simple)
	exec(t, c, "DROP SCHEMA IF EXISTS sp_other CASCADE", simple)
	exec(t, c, "CREATE SCHEMA sp_other", simple)
	exec(t, c, "CREATE TABLE sp_other.sp_d (id int, v int)", simple)
	t.Cleanup(func() { _, _ = c.Exec(context.Background(), "DROP SCHEMA IF EXISTS sp_other CASCADE", simple) })

	for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeCacheStatement} {
		s := connect(t, srv.Addr())
		exec(t, s, "SET search_path = nothere, public", simple)
		var n int
		if err := s.QueryRow(ctx, "SELECT count(*) FROM sp_d WHERE id > $1", mode, 5).Scan(&n); err != nil || n != 15 {
			t.Errorf("%v: search_path nothere, public: %d, %v; want 15", mode, n, err)
		}
		if err := s.QueryRow(ctx, "SELECT v FROM sp_d WHERE id = $1", mode, 7).Scan(&n); err != nil || n != 7 {
			t.Errorf("%v: routed read under search_path nothere, public: %d, %v", mode, n, err)
		}
		exec(t, s, "SET search_path = sp_other, public", simple)
		if err := s.QueryRow(ctx, "SELECT count(*) FROM sp_d", mode).Scan(&n); sqlState(err) != "0A000" {
			t.Errorf("%v: search_path with another sp_d first: %d, %v; want 0A000 (PostgreSQL reads sp_other.sp_d)", mode, n, err)
		}
		s.Close(ctx)
	}

	// The default search_path ("$user", public) with a schema of the
	// role's name holding a table of that name: PostgreSQL reads that one.
	exec(t, c, "DROP SCHEMA IF EXISTS postgres CASCADE", simple)
	exec(t, c, "CREATE SCHEMA postgres", simple)
	exec(t, c, "CREATE TABLE postgres.sp_d (id int)", simple)
	s := connect(t, srv.Addr())
	var n int
	if err := s.QueryRow(ctx, "SELECT count(*) FROM sp_d", simple).Scan(&n); sqlState(err) != "0A000" {
		t.Errorf("default search_path with a schema postgres holding sp_d: %d, %v; want 0A000", n, err)
	}
	exec(t, c, "DROP TABLE postgres.sp_d", simple)
	exec(t, c, "DROP SCHEMA postgres", simple)
	if err := s.QueryRow(ctx, "SELECT count(*) FROM sp_d", simple).Scan(&n); err != nil || n != 20 {
		t.Errorf("default search_path, schema postgres dropped: %d, %v; want 20", n, err)
	}

	// A search_path the role sets (ALTER ROLE ... SET) counts as the
	// session's own.
	for _, w := range cl.Servers {
		wc := connect(t, w.Addr())
		exec(t, wc, "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'sp_alice') THEN CREATE ROLE sp_alice LOGIN SUPERUSER; END IF; END $$", simple)
		exec(t, wc, "ALTER ROLE sp_alice SET search_path = sp_other, public", simple)
	}
	a, err := pgx.Connect(ctx, "postgres://sp_alice@"+srv.Addr()+"/postgres?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	if err := a.QueryRow(ctx, "SELECT count(*) FROM sp_d", simple).Scan(&n); sqlState(err) != "0A000" {
		t.Errorf("role search_path sp_other, public (sp_other.sp_d exists): %d, %v; want 0A000", n, err)
	}
	// (Another role: a pooled connection keeps the role's settings of
	// when it was opened, as PgBouncer's.)
	for _, w := range cl.Servers {
		wc := connect(t, w.Addr())
		exec(t, wc, "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'sp_bob') THEN CREATE ROLE sp_bob LOGIN SUPERUSER; END IF; END $$", simple)
		exec(t, wc, "ALTER ROLE sp_bob SET search_path = nothere, public", simple)
	}
	a2, err := pgx.Connect(ctx, "postgres://sp_bob@"+srv.Addr()+"/postgres?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close(ctx)
	if err := a2.QueryRow(ctx, "SELECT count(*) FROM sp_d", simple).Scan(&n); err != nil || n != 20 {
		t.Errorf("role search_path nothere, public: %d, %v; want 20", n, err)
	}
}
