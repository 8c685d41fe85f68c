package coordinator_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestSetvalOverTable: Django's sequence reset (loaddata, sqlsequencereset:
// SELECT setval(pg_get_serial_sequence(...), coalesce(max(id), 1), max(id)
// IS NOT null) FROM t) over a distributed and a reference table sets the
// sequence as PostgreSQL does, in a block (seeing its rows) or not; the
// next row drawn follows. It was refused (0A000, adversary 152).
func TestSetvalOverTable(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	freshTables(t, c, []string{"sv_d", "sv_r"},
		"CREATE TABLE sv_d (tenant int, id bigserial, PRIMARY KEY (tenant, id))",
		"SELECT create_distributed_table('sv_d', 'tenant', shard_count => 4)",
		"CREATE TABLE sv_r (id serial PRIMARY KEY, name text)",
		"SELECT create_reference_table('sv_r')",
		"INSERT INTO sv_d (tenant, id) SELECT g % 7, g FROM generate_series(1, 40) g",
		"INSERT INTO sv_r (id, name) VALUES (5, 'a'), (9, 'b')")
	reset := func(table string) string {
		return queryString(t, c, `SELECT setval(pg_get_serial_sequence('"`+table+`"','id'), coalesce(max("id"), 1), max("id") IS NOT null) FROM "`+table+`"`, simple)
	}
	if got := reset("sv_d"); got != "40" {
		t.Errorf("sv_d: setval %s, want 40", got)
	}
	if got := reset("sv_r"); got != "9" {
		t.Errorf("sv_r: setval %s, want 9", got)
	}
	if got := queryString(t, c, "INSERT INTO sv_d (tenant) VALUES (3) RETURNING id", simple); got != "41" {
		t.Errorf("sv_d: next id %s, want 41", got)
	}
	if got := queryString(t, c, "INSERT INTO sv_r (name) VALUES ('c') RETURNING id", simple); got != "10" {
		t.Errorf("sv_r: next id %s, want 10", got)
	}
	// In a block, after a row of its own (loaddata's).
	exec(t, c, "BEGIN", simple)
	exec(t, c, "INSERT INTO sv_d (tenant, id) VALUES (2, 100)", simple)
	if got := reset("sv_d"); got != "100" {
		t.Errorf("in a block: setval %s, want 100", got)
	}
	exec(t, c, "COMMIT", simple)
	if got := queryString(t, c, "INSERT INTO sv_d (tenant) VALUES (3) RETURNING id", simple); got != "101" {
		t.Errorf("after the block: next id %s, want 101", got)
	}
	// Empty: is_called false, the next is 1.
	exec(t, c, "TRUNCATE sv_d", simple)
	if got := reset("sv_d"); got != "1" {
		t.Errorf("empty: setval %s, want 1", got)
	}
	if got := queryString(t, c, "INSERT INTO sv_d (tenant) VALUES (3) RETURNING id", simple); got != "1" {
		t.Errorf("empty: next id %s, want 1", got)
	}
	// An untyped argument stays as written (adversary 157: it came back
	// as text, 42883): setval(..., NULL) is NULL.
	var v *int64
	if err := c.QueryRow(context.Background(), `SELECT setval(pg_get_serial_sequence('sv_d','id'), max(id), NULL) FROM sv_d`, simple).Scan(&v); err != nil || v != nil {
		t.Errorf("setval with a NULL is_called: %v, %v; want NULL", v, err)
	}
	if _, err := c.Exec(context.Background(), `SELECT setval(pg_get_serial_sequence('sv_d','id'), max(nosuch)) FROM sv_d`, simple); sqlState(err) != "42703" {
		t.Errorf("an unknown column: %v, want 42703", err)
	}
}
