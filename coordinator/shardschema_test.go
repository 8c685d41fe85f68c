package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	osexec "os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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

	list := func(conn *pgx.Conn, sql string) []string { t.Helper(); return queryStrings(t, conn, sql) }
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

// TestShardsSchemaIsTheSuperusers: the shards' schema is made by the
// superuser the coordinator reaches workers as, whoever distributes first
// (made by the session's role, that role would own it and could drop every
// other role's shards); what would change it through a coordinator, from
// a statement or a DO block, is refused; reads of shards work.
func TestShardsSchemaIsTheSuperusers(t *testing.T) {
	cl := pgtest.Start(t, 2)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	admin := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	for i := range cl.Servers { // roles are each server's
		exec(t, connect(t, cl.Servers[i].Addr()), "CREATE ROLE so_app LOGIN; GRANT CREATE ON DATABASE postgres TO so_app", simple)
	}
	exec(t, admin, "CREATE SCHEMA so_app AUTHORIZATION so_app", simple)
	cfg, err := pgx.ParseConfig(pgtest.URL(srv.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	cfg.User = "so_app"
	app, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close(ctx)
	exec(t, app, "CREATE TABLE so_app.t (id int PRIMARY KEY)", simple)
	exec(t, app, "SELECT create_distributed_table('so_app.t', 'id', shard_count => 2)", simple)
	exec(t, app, "INSERT INTO so_app.t SELECT generate_series(1, 10)", simple)
	if got := queryString(t, app, "SELECT count(*)::text FROM so_app.t"); got != "10" {
		t.Errorf("so_app's table: %s rows, want 10", got)
	}
	for i := range cl.Servers {
		w := connect(t, cl.Servers[i].Addr())
		if got := queryString(t, w, "SELECT coalesce((SELECT nspowner::regrole::text || ' ' || nspacl::text FROM pg_namespace WHERE nspname = 'pgfleet_shards'), 'missing')"); got != "postgres {postgres=UC/postgres,=UC/postgres}" {
			t.Errorf("worker %d: pgfleet_shards is %s, want the superuser's with USAGE and CREATE for every role", i, got)
		}
	}

	testTable(t, admin, "so_guard", "(id int PRIMARY KEY)", "SELECT create_distributed_table('so_guard', 'id', shard_count => 2)")
	exec(t, admin, "INSERT INTO so_guard VALUES (1), (2), (3)", simple)
	shard := queryString(t, connect(t, cl.Servers[0].Addr()), "SELECT min(shardid)::text FROM pgfleet.shards s JOIN pgfleet.placements p USING (shardid) WHERE table_name = 'public.so_guard' AND nodeid = (SELECT min(nodeid) FROM pgfleet.nodes)")
	for _, sql := range []string{
		"DO $$ BEGIN EXECUTE 'ALTER SCHEMA pgfleet_shards RENAME TO x'; END $$",
		"DROP TABLE pgfleet_shards.so_guard_" + shard,
		"TRUNCATE PGFLEET_SHARDS.so_guard_" + shard,
		`INSERT INTO "pgfleet_shards".so_guard_` + shard + " VALUES (1000)",
		"CREATE FUNCTION so_f() RETURNS void LANGUAGE sql AS 'DROP TABLE pgfleet_shards.so_guard_" + shard + "'",
	} {
		if _, err := admin.Exec(ctx, sql, simple); sqlState(err) != "0A000" {
			t.Errorf("%s: %v, want 0A000", sql, err)
		}
	}
	if got := queryString(t, admin, "SELECT count(*)::text FROM so_guard"); got != "3" {
		t.Errorf("rows after the refused statements: %s, want 3", got)
	}
	queryString(t, admin, "SELECT count(*)::text FROM pgfleet_shards.so_guard_"+shard) // a read of a shard works

	// Another role cannot drop the shards, even on the worker directly.
	wcfg, err := pgx.ParseConfig(pgtest.URL(cl.Servers[0].Addr()))
	if err != nil {
		t.Fatal(err)
	}
	wcfg.User = "so_app"
	wapp, err := pgx.ConnectConfig(ctx, wcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer wapp.Close(ctx)
	if _, err := wapp.Exec(ctx, "DROP TABLE pgfleet_shards.so_guard_"+shard, simple); sqlState(err) != "42501" {
		t.Errorf("so_app dropping postgres's shard on the worker: %v, want 42501", err)
	}
}

// TestDottedTableName: a table whose name has a dot is found in its schema
// (COPY, joins that gather, error fields).
func TestDottedTableName(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	testTable(t, c, `"so.d"`, "(id int PRIMARY KEY, k int)", `SELECT create_distributed_table('"so.d"', 'id', shard_count => 4)`)
	testTable(t, c, `"so.r"`, "(k int)", `SELECT create_reference_table('"so.r"')`)
	if _, err := c.PgConn().CopyFrom(ctx, strings.NewReader("1\t1\n2\t2\n3\t2\n"), `COPY "so.d" FROM STDIN`); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PgConn().CopyFrom(ctx, strings.NewReader("2\n"), `COPY "so.r" FROM STDIN`); err != nil {
		t.Fatal(err)
	}
	if got := queryString(t, c, `SELECT string_agg(d.id::text, ',' ORDER BY d.id) FROM "so.d" d JOIN "so.r" p ON p.k = d.k`); got != "2,3" {
		t.Errorf("join with a reference table not on the distribution column: %s, want 2,3", got)
	}
	_, err := c.Exec(ctx, `INSERT INTO "so.d" VALUES (1, 1)`, simple)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "23505" || pe.SchemaName != "public" || pe.TableName != "so.d" {
		t.Errorf("duplicate key: %v (%+v), want 23505 on public.\"so.d\"", err, pe)
	}
}
