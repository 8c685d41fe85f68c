package coordinator_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestUpdateKeepsDistValue: an UPDATE that assigns the distribution column
// the value its WHERE clause pins it to (an ORM saving every column of a
// row, django-multitenant's form), or the column itself, runs as on
// PostgreSQL, as Citus allows; one that could change it is still refused
// (0A000) and changes nothing. Each was refused.
func TestUpdateKeepsDistValue(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	ctx := context.Background()
	c := connect(t, srv.Addr())
	k1, k2 := spanningTable(t, c, "dk_acc")
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		for _, s := range []struct {
			sql  string
			args []any
		}{
			{"UPDATE dk_acc SET aid = $1, n = n + 1 WHERE aid = $1", []any{k1}},
			{"UPDATE dk_acc AS a SET aid = a.aid, n = n + 1 WHERE a.aid = $1", []any{k2}},
			{"UPDATE dk_acc SET aid = aid, n = n + 1 WHERE aid IN ($1, $2)", []any{k1, k2}},
		} {
			tag, err := c.Exec(ctx, s.sql, append([]any{mode}, s.args...)...)
			if err != nil || tag.RowsAffected() != int64(len(s.args)) {
				t.Errorf("%v: %s: %v, %v; want %d rows", mode, s.sql, tag, err, len(s.args))
			}
		}
		if _, err := c.Exec(ctx, "UPDATE dk_acc SET aid = $2 WHERE aid = $1", mode, k1, k2); sqlState(err) != "0A000" {
			t.Errorf("%v: an UPDATE that could move a row: %v, want 0A000", mode, err)
		}
	}
	// Each key's row was updated four times, found by a routed read, and
	// no row moved or doubled.
	for _, k := range []int{k1, k2} {
		if got := queryString(t, c, "SELECT n::text FROM dk_acc WHERE aid = $1", pgx.QueryExecModeExec, k); got != "104" {
			t.Errorf("n(%d) = %s, want 104", k, got)
		}
	}
	if got := queryString(t, c, "SELECT count(*)::text || ' ' || sum(n)::text FROM dk_acc"); got != "100 10008" {
		t.Errorf("rows and sum: %s, want 100 10008", got)
	}

	// A cast may change the value: '01'::int4::text is '1' (adversary
	// 155: the row '1' became '01' on the shard of '1', beside another
	// '01', the primary key broken).
	simple := pgx.QueryExecModeSimpleProtocol
	_, _ = c.Exec(ctx, "DROP TABLE IF EXISTS dk_t", simple)
	t.Cleanup(func() { _, _ = c.Exec(context.Background(), "DROP TABLE IF EXISTS dk_t", simple) })
	exec(t, c, "CREATE TABLE dk_t (k text PRIMARY KEY, v text)", simple)
	exec(t, c, "SELECT create_distributed_table('dk_t', 'k')", simple)
	exec(t, c, "INSERT INTO dk_t VALUES ('1', 'one'), ('01', 'zero-one')", simple)
	for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeExec} {
		if _, err := c.Exec(ctx, "UPDATE dk_t SET k = '01', v = 'moved' WHERE k = '01'::int4::text", mode); sqlState(err) != "0A000" {
			t.Errorf("%v: SET k = '01' WHERE k = '01'::int4::text: %v, want 0A000", mode, err)
		}
		if _, err := c.Exec(ctx, "UPDATE dk_t SET k = $1::int4, v = 'moved' WHERE k = $1", mode, "01"); sqlState(err) != "0A000" {
			t.Errorf("%v: SET k = $1::int4 WHERE k = $1: %v, want 0A000", mode, err)
		}
	}
	if got := queryString(t, c, "SELECT string_agg(k || '=' || v, ',' ORDER BY k) FROM dk_t"); got != "01=zero-one,1=one" {
		t.Errorf("rows: %s, want 01=zero-one,1=one", got)
	}
}
