package coordinator_test

import (
	"context"
	"testing"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// A list setting given at startup (search_path "$user", public, as psql,
// JDBC's currentSchema and difftest send it) is replayed as a list on every
// pooled connection, not as one quoted schema name: routed statements find
// their shards and SHOW gives PostgreSQL's answer. (Before: 42P01 on the
// shard tables.)
func TestStartupListSetting(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(1))
	admin := connectWith(t, srv.Addr(), nil)
	testTable(t, admin, "startup_list", "(id int PRIMARY KEY, v text)",
		"SELECT create_distributed_table('startup_list', 'id', shard_count => 4)")
	exec(t, admin, "INSERT INTO startup_list (id, v) VALUES (1, 'a'), (2, 'b'), (3, 'c')")

	c := connectWith(t, srv.Addr(), map[string]string{"search_path": `"$user", public`})
	ctx := context.Background()
	var path string
	if err := c.QueryRow(ctx, "SHOW search_path").Scan(&path); err != nil || path != `"$user", public` {
		t.Fatalf("SHOW search_path = %q, %v; want \"$user\", public", path, err)
	}
	for id, want := range map[int]string{1: "a", 2: "b", 3: "c"} {
		var v string
		if err := c.QueryRow(ctx, "SELECT v FROM startup_list WHERE id = $1", id).Scan(&v); err != nil || v != want {
			t.Fatalf("id %d: %q, %v; want %q", id, v, err, want)
		}
	}
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM startup_list").Scan(&n); err != nil || n != 3 {
		t.Fatalf("count = %d, %v; want 3", n, err)
	}
	// Another client with other settings takes the only pooled connection
	// in between; the list comes back with this client's next statement.
	_ = admin.QueryRow(ctx, "SELECT 1").Scan(&n)
	if err := c.QueryRow(ctx, "SHOW search_path").Scan(&path); err != nil || path != `"$user", public` {
		t.Fatalf("after a switch: SHOW search_path = %q, %v", path, err)
	}
}
