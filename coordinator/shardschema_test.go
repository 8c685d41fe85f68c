package coordinator_test

import (
	"context"
	"fmt"
	osexec "os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestShardsOutOfSight: shards live in schema pgfleet_shards on the
// workers, so what a user, psql or an ORM lists through a coordinator is
// the user's tables (psql's \dt, information_schema, pg_table_is_visible),
// as on PostgreSQL, and no shard table is in the user's schema on any
// worker.
func TestShardsOutOfSight(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	testTable(t, c, "so_d", "(id int PRIMARY KEY, v text)", "SELECT create_distributed_table('so_d', 'id', shard_count => 4)")
	testTable(t, c, "so_r", "(id int PRIMARY KEY, v text)", "SELECT create_reference_table('so_r')")
	exec(t, c, "INSERT INTO so_d SELECT g, 'v' || g FROM generate_series(1, 40) g", simple)
	exec(t, c, "INSERT INTO so_r VALUES (1, 'a'), (2, 'b')", simple)

	list := func(conn *pgx.Conn, sql string) []string {
		t.Helper()
		rows, err := conn.Query(context.Background(), sql, simple)
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return out
	}
	want := []string{"so_d", "so_r"}
	for _, q := range []string{
		`SELECT c.relname::text FROM pg_catalog.pg_class c WHERE c.relkind IN ('r', 'p')
			AND pg_catalog.pg_table_is_visible(c.oid) AND c.relname LIKE 'so\_%' ORDER BY 1`,
		`SELECT table_name::text FROM information_schema.tables
			WHERE table_schema = current_schema() AND table_name LIKE 'so\_%' ORDER BY 1`,
		`SELECT tablename::text FROM pg_catalog.pg_tables WHERE schemaname = 'public' AND tablename LIKE 'so\_%' ORDER BY 1`,
	} {
		if got := list(c, q); !slices.Equal(got, want) {
			t.Errorf("%s\nthrough the coordinator: %v, want %v", q, got, want)
		}
	}
	// On every worker the user's schema holds no shard, and the shards'
	// schema holds all of them.
	shards := 0
	for i := range cl.Servers {
		w := connect(t, cl.Servers[i].Addr())
		if got := list(w, `SELECT tablename::text FROM pg_catalog.pg_tables
				WHERE schemaname = 'public' AND tablename ~ '^so_[dr]_[0-9]+$'`); len(got) != 0 {
			t.Errorf("worker %d has shards in schema public: %v", i, got)
		}
		shards += len(list(w, `SELECT tablename::text FROM pg_catalog.pg_tables
				WHERE schemaname = 'pgfleet_shards' AND tablename ~ '^so_[dr]_[0-9]+$'`))
	}
	if want := 4 + len(cl.Servers); shards != want {
		t.Errorf("%d shard tables in pgfleet_shards on the workers, want %d", shards, want)
	}

	// psql's own \dt through the coordinator.
	psql := psqlPath(t)
	host, port, _ := strings.Cut(srv.Addr(), ":")
	out, err := osexec.Command(psql, "-X", "-At", "-h", host, "-p", port, "-U", "postgres", "-d", "postgres",
		"-c", `\dt so_*`).CombinedOutput()
	if err != nil {
		t.Fatalf("psql \\dt: %v\n%s", err, out)
	}
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Split(line, "|"); len(f) > 1 {
			names = append(names, f[1])
		}
	}
	if !slices.Equal(names, want) {
		t.Errorf("psql \\dt so_*: %q, want the tables %v", out, want)
	}

	// The shards' schema is not dropped or renamed under the tables.
	for _, sql := range []string{"DROP SCHEMA pgfleet_shards CASCADE", "ALTER SCHEMA pgfleet_shards RENAME TO x"} {
		if _, err := c.Exec(context.Background(), sql, simple); sqlState(err) != "0A000" {
			t.Errorf("%s: %v, want 0A000", sql, err)
		}
	}
	if got := queryString(t, c, "SELECT count(*)::text || ' ' || string_agg(v, ',' ORDER BY id) FROM so_d WHERE id <= 3"); got != "3 v1,v2,v3" {
		t.Errorf("rows after the refused statements: %s", got)
	}
}

// TestShardsOfOlderTables: a table distributed before shards had a schema
// of their own (catalog shard_schema NULL, shards in the table's schema)
// keeps working: routed and multi-shard reads and writes, COPY, DDL and
// undistribute_table find its shards where they are.
func TestShardsOfOlderTables(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	testTable(t, c, "so_old", "(id int PRIMARY KEY, v int)", "SELECT create_distributed_table('so_old', 'id', shard_count => 4)")
	exec(t, c, "INSERT INTO so_old SELECT g, g FROM generate_series(1, 40) g", simple)

	// Make it as an older version left it.
	meta := connect(t, cl.Servers[0].Addr())
	rows, err := meta.Query(ctx, `SELECT s.shardid, n.host || ':' || n.port FROM pgfleet.shards s
		JOIN pgfleet.placements p USING (shardid) JOIN pgfleet.nodes n USING (nodeid) WHERE s.table_name = 'public.so_old'`)
	if err != nil {
		t.Fatal(err)
	}
	type pl struct {
		ID   int64
		Addr string
	}
	pls, err := pgx.CollectRows(rows, pgx.RowToStructByPos[pl])
	if err != nil || len(pls) != 4 {
		t.Fatalf("placements %v: %v", pls, err)
	}
	for _, p := range pls {
		exec(t, connect(t, p.Addr), fmt.Sprintf("ALTER TABLE pgfleet_shards.so_old_%d SET SCHEMA public", p.ID))
	}
	exec(t, meta, "UPDATE pgfleet.tables SET shard_schema = NULL WHERE name = 'public.so_old'")
	exec(t, meta, "UPDATE pgfleet.catalog_version SET version = version + 1")
	if err := srv.ReloadCatalog(ctx); err != nil {
		t.Fatal(err)
	}

	exec(t, c, "INSERT INTO so_old VALUES (41, 41)")
	exec(t, c, "UPDATE so_old SET v = v + 1 WHERE id = 7")
	exec(t, c, "UPDATE so_old SET v = v * 10 WHERE v > 39", simple)
	if _, err := c.PgConn().CopyFrom(ctx, strings.NewReader("42\t42\n43\t43\n"), "COPY so_old FROM STDIN"); err != nil {
		t.Fatal(err)
	}
	exec(t, c, "CREATE INDEX so_old_v ON so_old (v)", simple)
	if got := queryString(t, c, "SELECT count(*) || ' ' || sum(v) FROM so_old"); got != "43 1676" {
		t.Errorf("count and sum: %s, want 43 1676", got)
	}
	if got := queryString(t, c, "SELECT v::text FROM so_old WHERE id = 7"); got != "8" {
		t.Errorf("routed read: %s, want 8", got)
	}
	exec(t, c, "SELECT undistribute_table('so_old')", simple)
	if got := queryString(t, c, "SELECT count(*) || ' ' || sum(v) FROM so_old"); got != "43 1676" {
		t.Errorf("after undistribute_table: %s, want 43 1676", got)
	}
}
