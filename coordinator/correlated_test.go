package coordinator_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestCorrelatedSubqueryWrite: an UPDATE or DELETE whose correlated
// subquery reads a colocated table restricted to the outer row's
// distribution value (Django's Subquery/OuterRef in update(), NOT EXISTS)
// runs on every shard with its colocated shards, as PostgreSQL computes
// it; it was refused (0A000). Checked against the counts each key's routed
// reads give.
func TestCorrelatedSubqueryWrite(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	ctx := context.Background()
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	// Customer k has k % 4 orders; customers 4, 8, ... none.
	freshTables(t, c, []string{"cs_o", "cs_c"},
		"CREATE TABLE cs_c (id bigint PRIMARY KEY, visits int NOT NULL DEFAULT -1)",
		"SELECT create_distributed_table('cs_c', 'id', shard_count => 4)",
		"CREATE TABLE cs_o (cid bigint, id bigint, PRIMARY KEY (cid, id))",
		"SELECT create_distributed_table('cs_o', 'cid', colocate_with => 'cs_c')",
		"INSERT INTO cs_c (id) SELECT g FROM generate_series(1, 30) g",
		"INSERT INTO cs_o SELECT g, n FROM generate_series(1, 30) g, generate_series(1, 3) n WHERE n <= g % 4")
	// Customers 1 to 10 keep -1; the others have their order count, or
	// are gone once deleted for having none.
	check := func(what string, deleted bool) {
		t.Helper()
		for k := 1; k <= 30; k++ {
			want := "-1"
			switch {
			case k > 10 && deleted && k%4 == 0:
				want = "gone"
			case k > 10:
				want = queryString(t, c, "SELECT count(*)::text FROM cs_o WHERE cid = $1", pgx.QueryExecModeExec, k)
			}
			if got := queryString(t, c, "SELECT coalesce(max(visits)::text, 'gone') FROM cs_c WHERE id = $1", pgx.QueryExecModeExec, k); got != want {
				t.Errorf("%s: customer %d: visits %s, want %s", what, k, got, want)
			}
		}
	}
	for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeExec} {
		exec(t, c, "UPDATE cs_c SET visits = -1", simple)
		tag, err := c.Exec(ctx, "UPDATE cs_c SET visits = COALESCE((SELECT count(*) FROM cs_o o WHERE o.cid = cs_c.id), 0) WHERE id > $1", mode, 10)
		if err != nil || tag.RowsAffected() != 20 {
			t.Fatalf("%v: the correlated UPDATE: %v, %v", mode, tag, err)
		}
		// Pinned by the outer WHERE: one shard.
		if _, err := c.Exec(ctx, "UPDATE cs_c c SET visits = (SELECT count(*) FROM cs_o o WHERE c.id = o.cid) WHERE c.id = $1", mode, 3); err != nil {
			t.Fatalf("%v: the routed correlated UPDATE: %v", mode, err)
		}
		if got := queryString(t, c, "SELECT visits::text FROM cs_c WHERE id = 3"); got != "3" {
			t.Errorf("%v: the routed correlated UPDATE: visits %s, want 3", mode, got)
		}
		exec(t, c, "UPDATE cs_c SET visits = -1 WHERE id = 3", simple)
		check(mode.String()+" UPDATE", false)
	}
	// In a block, then NOT EXISTS: the customers with no order go.
	exec(t, c, "BEGIN", simple)
	exec(t, c, "UPDATE cs_c SET visits = (SELECT count(*) FROM cs_o o WHERE o.cid = cs_c.id) WHERE id > 10", simple)
	tag, err := c.Exec(ctx, "DELETE FROM cs_c WHERE id > 10 AND NOT EXISTS (SELECT 1 FROM cs_o o WHERE o.cid = cs_c.id)", simple)
	if err != nil || tag.RowsAffected() != 5 {
		t.Fatalf("the correlated DELETE: %v, %v; want 5 rows", tag, err)
	}
	exec(t, c, "COMMIT", simple)
	check("DELETE", true)
	if got := queryString(t, c, "SELECT count(*)::text FROM cs_c"); got != "25" {
		t.Errorf("customers left: %s, want 25", got)
	}
}
