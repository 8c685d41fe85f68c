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
}
