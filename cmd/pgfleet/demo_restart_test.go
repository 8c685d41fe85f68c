package main

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestDemoRestart: `pgfleet demo --data-dir D` started again on D finds its
// distributed tables and their rows (the workers keep their ports, which
// the catalog names them by; an adversary round found a restarted demo
// unable to reach its shards), and leaves no server running on exit.
func TestDemoRestart(t *testing.T) {
	bin := buildDemo(t)
	dir, err := os.MkdirTemp("", "pgfleet-restart-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // the postgres user's way in
		t.Fatal(err)
	}
	data := dir + "/data"
	ctx := context.Background()
	run := func(sql ...string) string {
		d := startDemo(t, bin, "--workers", "2", "--port", "0", "--data-dir", data)
		defer d.stop(t)
		c, err := pgx.Connect(ctx, d.URL)
		if err != nil {
			t.Fatalf("connect %s: %v", d.URL, err)
		}
		defer c.Close(ctx)
		var last string
		for _, q := range sql {
			res, err := c.PgConn().Exec(ctx, q).ReadAll()
			if err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			if rows := res[0].Rows; len(rows) > 0 {
				last = string(rows[0][0])
			}
		}
		return last
	}
	run("CREATE TABLE dr_t (id int PRIMARY KEY, v text)",
		"SELECT create_distributed_table('dr_t', 'id', shard_count => 4)",
		"INSERT INTO dr_t SELECT g, 'v' || g FROM generate_series(1, 20) g")
	if got := run("SELECT count(*) FROM dr_t", "SELECT v FROM dr_t WHERE id = 17"); got != "v17" {
		t.Errorf("after a restart: %q, want v17", got)
	}
	if got := run("SELECT string_agg(v, ',' ORDER BY id) FROM dr_t WHERE id < 4"); got != "v1,v2,v3" {
		t.Errorf("after a second restart: %q", got)
	}
	if pids := postgresUnder(data); len(pids) > 0 {
		t.Errorf("postgres still running from %s: %v", data, pids)
	}
}
