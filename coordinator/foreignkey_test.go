package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/internal/pgcluster"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestForeignKeys: foreign keys between catalog tables, as Citus allows
// them (from a distributed table to a reference table, between reference
// tables, between colocated distributed tables that pair their
// distribution columns), added with ALTER TABLE, answer as on a plain
// PostgreSQL database that runs the same statements: violations (23503),
// ON DELETE CASCADE and SET NULL across a reference table's copies and the
// shards on their nodes, TRUNCATE and DROP refused while referenced, and
// allowed together. Each shard and copy has its keys, also after a shard
// group moves (both transfer modes), splits, and after a node is added
// with the reference tables' copies. Keys a shard could not check are
// refused with 0A000.
func TestForeignKeys(t *testing.T) {
	cl := pgtest.Start(t, 3)
	two := func(c *coordinator.Config) { c.Workers = c.Workers[:2] }
	srv := pgtest.Coordinator(t, cl, two)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	c := connect(t, srv.Addr())
	w0 := connect(t, cl.Servers[0].Addr())
	exec(t, w0, "CREATE DATABASE fk_oracle")
	oracle := connectURL(t, "postgres://postgres@"+cl.Servers[0].Addr()+"/fk_oracle?sslmode=disable")

	// both runs sql through the coordinator and on the oracle and wants
	// the same rows (as text) or the same SQLSTATE.
	both := func(sql string) {
		t.Helper()
		for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeExec} {
			if mode == pgx.QueryExecModeExec && (strings.HasPrefix(sql, "BEGIN") || strings.Contains(sql, ";")) {
				continue
			}
			got, gerr := textRows(ctx, c, sql, mode)
			want, werr := textRows(ctx, oracle, sql, mode)
			if sqlState(gerr) != sqlState(werr) || (gerr == nil) != (werr == nil) {
				t.Fatalf("%s (%v): pgfleet %v, PostgreSQL %v", sql, mode, gerr, werr)
			}
			if got != want {
				t.Fatalf("%s (%v): pgfleet\n%s\nPostgreSQL\n%s", sql, mode, got, want)
			}
			if gerr != nil || !strings.HasPrefix(strings.ToUpper(sql), "SELECT") {
				break // a write runs once
			}
		}
	}
	// ddl runs statements through the coordinator and on the oracle.
	ddl := func(stmts ...string) {
		t.Helper()
		for _, s := range stmts {
			exec(t, c, s, simple)
			exec(t, oracle, s, simple)
		}
	}
	// refused wants 0A000 for sql through conn (the coordinator's).
	refused := func(conn *pgx.Conn, sql, what string) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, simple); sqlState(err) != "0A000" {
			t.Errorf("%s: %s: %v, want 0A000", what, sql, err)
		}
	}
	schema := []string{
		"CREATE TABLE fk_country (id int PRIMARY KEY, name text)",
		"CREATE TABLE fk_tag (id int PRIMARY KEY, country_id int, label text)",
		"CREATE TABLE fk_org (id bigint PRIMARY KEY, country_id int NOT NULL, name text)",
		"CREATE TABLE fk_user (org_id bigint, id bigint, country_id int, name text, PRIMARY KEY (org_id, id))",
	}
	ddl(schema...)
	exec(t, c, "SELECT create_reference_table('fk_country')", simple)
	exec(t, c, "SELECT create_reference_table('fk_tag')", simple)
	exec(t, c, "SELECT create_distributed_table('fk_org', 'id', shard_count => 4)", simple)
	exec(t, c, "SELECT create_distributed_table('fk_user', 'org_id', colocate_with => 'fk_org')", simple)
	ddl("ALTER TABLE fk_org ADD CONSTRAINT fk_org_country FOREIGN KEY (country_id) REFERENCES fk_country (id)",
		"ALTER TABLE fk_user ADD FOREIGN KEY (org_id) REFERENCES fk_org ON DELETE CASCADE",
		"ALTER TABLE fk_user ADD COLUMN tag_id int REFERENCES fk_tag ON DELETE SET NULL",
		"ALTER TABLE fk_tag ADD FOREIGN KEY (country_id) REFERENCES fk_country ON DELETE CASCADE")
	// keys counts the foreign keys of table's shards (or copies) on every
	// worker; perShard is what each should have.
	keys := func(table string) (shards, fks int) {
		t.Helper()
		for _, s := range cl.Servers {
			w := connect(t, s.Addr())
			var n, k int
			if err := w.QueryRow(ctx, `SELECT count(DISTINCT c.oid)::int, count(k.oid)::int FROM pg_catalog.pg_class c
				JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
				LEFT JOIN pg_catalog.pg_constraint k ON k.conrelid = c.oid AND k.contype = 'f'
				WHERE n.nspname = 'pgfleet_shards' AND c.relkind = 'r' AND c.relname ~ ('^' || $1 || '_[0-9]+$')`, table).Scan(&n, &k); err != nil {
				t.Fatal(err)
			}
			shards += n
			fks += k
			_ = w.Close(ctx)
		}
		return shards, fks
	}
	perTable := map[string]int{"fk_org": 1, "fk_user": 2, "fk_tag": 1, "fk_country": 0}
	checkKeys := func(when string) {
		t.Helper()
		for table, per := range perTable {
			n, k := keys(table)
			if n == 0 || k != n*per {
				t.Errorf("%s: %s has %d foreign keys on %d shards or copies, want %d each", when, table, k, n, per)
			}
		}
	}
	checkKeys("after ALTER TABLE")
	// PostgreSQL's own errors come before a refusal (adversary 141: 0A000
	// where PostgreSQL gives 42703 and 42830).
	both("ALTER TABLE fk_user ADD FOREIGN KEY (nosuch) REFERENCES fk_org (id)")
	both("ALTER TABLE fk_user ADD FOREIGN KEY (org_id) REFERENCES fk_org (nosuch)")
	both("ALTER TABLE fk_user ADD FOREIGN KEY (name) REFERENCES fk_org (name)")

	rounds := func() {
		t.Helper()
		both("DELETE FROM fk_user")
		both("DELETE FROM fk_org")
		both("DELETE FROM fk_tag")
		both("DELETE FROM fk_country")
		both("INSERT INTO fk_country VALUES (1, 'one'), (2, 'two'), (3, 'three')")
		both("INSERT INTO fk_tag VALUES (1, 1, 'a'), (2, 2, 'b'), (3, 3, 'c')")
		both("INSERT INTO fk_org SELECT g, 1 + g % 2, 'org' || g FROM generate_series(1, 20) g")
		both("INSERT INTO fk_user SELECT o, u, 1, 'u', 1 + (o + u) % 3 FROM generate_series(1, 20) o, generate_series(1, 3) u")
		both("INSERT INTO fk_org VALUES (100, 9, 'no such country')")
		both("INSERT INTO fk_user VALUES (999, 1, 1, 'no such org', NULL)")
		both("INSERT INTO fk_user VALUES (5, 9, 1, 'no such tag', 7)")
		both("INSERT INTO fk_org VALUES (101, 1, 'x'), (102, 9, 'y'), (103, 2, 'z')")
		both("UPDATE fk_org SET country_id = 9 WHERE id = 4")
		both("UPDATE fk_org SET country_id = 3 WHERE id = 4")
		both("DELETE FROM fk_country WHERE id = 1")
		both("DELETE FROM fk_org WHERE id IN (2, 7)")
		both("DELETE FROM fk_tag WHERE id = 2")
		both("DELETE FROM fk_country WHERE id = 3")
		both("UPDATE fk_org SET country_id = 2 WHERE id = 4")
		both("DELETE FROM fk_country WHERE id = 3")
		both("BEGIN; INSERT INTO fk_country VALUES (10, 'ten'); INSERT INTO fk_org VALUES (110, 10, 'o'); INSERT INTO fk_user VALUES (110, 1, 10, 'u', 1); COMMIT")
		both("BEGIN; INSERT INTO fk_org VALUES (111, 10, 'o'); INSERT INTO fk_user VALUES (112, 1, 10, 'u', 1); COMMIT")
		both("ROLLBACK") // the error left the block open, failed
		both("SELECT count(*) FROM fk_org WHERE id = 111")
		both("TRUNCATE fk_country")
		both("TRUNCATE fk_org")
		both("SELECT count(*), sum(id), sum(country_id) FROM fk_org")
		both("SELECT org_id, id, country_id, tag_id FROM fk_user ORDER BY org_id, id")
		both("SELECT id, country_id FROM fk_tag ORDER BY id")
		both("SELECT id FROM fk_country ORDER BY id")
	}
	rounds()

	// SET CONSTRAINTS: ALL right after BEGIN holds on every worker the
	// block takes in; named constraints (a shard's have names of their
	// own), and ALL once the block runs on another worker than the
	// first, are refused (adversary: a named one reached the shell only,
	// and the block committed a row its key refused).
	ddl("CREATE TABLE fk_def (org bigint, id int, country_id int, PRIMARY KEY (org, id))")
	exec(t, c, "SELECT create_distributed_table('fk_def', 'org', colocate_with => 'fk_org')", simple)
	ddl("ALTER TABLE fk_def ADD CONSTRAINT fk_def_c FOREIGN KEY (country_id) REFERENCES fk_country DEFERRABLE")
	both("BEGIN")
	both("SET CONSTRAINTS ALL DEFERRED")
	both("INSERT INTO fk_def SELECT g, 1, 50 FROM generate_series(1, 20) g")
	both("INSERT INTO fk_country VALUES (50, 'fifty')")
	both("COMMIT")
	both("SELECT count(*), sum(org) FROM fk_def")
	both("BEGIN")
	both("SET CONSTRAINTS ALL DEFERRED")
	both("INSERT INTO fk_def SELECT g, 2, 51 FROM generate_series(1, 20) g")
	both("COMMIT")
	for _, s := range []string{"SET CONSTRAINTS fk_def_c IMMEDIATE", "SET CONSTRAINTS public.fk_def_c DEFERRED"} {
		exec(t, c, "BEGIN", simple)
		refused(c, s, "in a block")
		exec(t, c, "ROLLBACK", simple)
	}
	// In a DO block or a function it would reach one worker (adversary
	// 141: a transaction PostgreSQL aborts committed).
	refused(c, "DO $$ BEGIN SET CONSTRAINTS ALL DEFERRED; END $$", "SET CONSTRAINTS in a DO block")
	refused(c, "CREATE FUNCTION fk_immed() RETURNS void LANGUAGE sql AS $$ SET CONSTRAINTS ALL IMMEDIATE $$", "SET CONSTRAINTS in a function")
	// After a deferred violation on the first worker, the deferred check
	// runs there (23503, as on PostgreSQL); on the other, refused.
	codes := map[string]int{}
	for org := 1; org <= 8; org++ {
		exec(t, c, "BEGIN", simple)
		exec(t, c, "SET CONSTRAINTS ALL DEFERRED", simple)
		exec(t, c, fmt.Sprintf("INSERT INTO fk_def VALUES (%d, 3, 52)", org), simple)
		_, err := c.Exec(ctx, "SET CONSTRAINTS ALL IMMEDIATE", simple)
		codes[sqlState(err)]++
		exec(t, c, "ROLLBACK", simple)
	}
	if len(codes) != 2 || codes["23503"] == 0 || codes["0A000"] == 0 {
		t.Errorf("SET CONSTRAINTS ALL IMMEDIATE after a deferred violation, by SQLSTATE: %v; want 23503 (first worker) and 0A000 (the other)", codes)
	}
	// ALTER CONSTRAINT makes the key deferred on every shard; a key to a
	// table that does not exist is PostgreSQL's 42P01.
	both("ALTER TABLE fk_def ALTER CONSTRAINT fk_def_c DEFERRABLE INITIALLY DEFERRED")
	both("BEGIN")
	both("INSERT INTO fk_def SELECT g, 4, 53 FROM generate_series(1, 20) g")
	both("INSERT INTO fk_country VALUES (53, 'x')")
	both("COMMIT")
	both("SELECT count(*) FROM fk_def WHERE country_id = 53")
	both("ALTER TABLE fk_def ADD FOREIGN KEY (country_id) REFERENCES fk_nosuch")
	both("ALTER TABLE fk_def ADD COLUMN x int REFERENCES public.fk_nosuch")
	ddl("DROP TABLE fk_def")

	// A self-referencing INSERT ... SELECT of more rows than the
	// coordinator's parts hold (1,000): one statement, as on PostgreSQL
	// (adversary: 23503 when a row's parent came in a later part).
	ddl("CREATE TABLE fk_rself (id int PRIMARY KEY, parent int REFERENCES fk_rself)",
		"CREATE TABLE fk_dself (org int, id int, parent int, PRIMARY KEY (org, id), FOREIGN KEY (org, parent) REFERENCES fk_dself (org, id))")
	exec(t, c, "SELECT create_reference_table('fk_rself')", simple)
	exec(t, c, "SELECT create_distributed_table('fk_dself', 'org', colocate_with => 'none')", simple)
	both("INSERT INTO fk_rself SELECT g, CASE WHEN g < 1501 THEN g + 1 END FROM generate_series(1, 1501) g")
	both("INSERT INTO fk_dself SELECT 7, g, CASE WHEN g < 2500 THEN g + 1 END FROM generate_series(1, 2500) g ORDER BY g")
	both("INSERT INTO fk_dself SELECT g % 3, g, NULL FROM generate_series(1, 1200) g")
	both("SELECT count(*), count(parent) FROM fk_rself")
	both("SELECT org, count(*), count(parent) FROM fk_dself GROUP BY org ORDER BY org")
	// A key's action that fails names the user's table in its context, as
	// PostgreSQL's (adversary 141: the shard's).
	ddl("CREATE TABLE fk_kp (t int, id int, PRIMARY KEY (t, id))", "CREATE TABLE fk_kc (t int, id int, pid int NOT NULL, PRIMARY KEY (t, id))")
	exec(t, c, "SELECT create_distributed_table('fk_kp', 't', colocate_with => 'none')", simple)
	exec(t, c, "SELECT create_distributed_table('fk_kc', 't', colocate_with => 'fk_kp')", simple)
	ddl("ALTER TABLE fk_kc ADD FOREIGN KEY (t, pid) REFERENCES fk_kp ON DELETE SET NULL (pid)",
		"INSERT INTO fk_kp VALUES (1, 1)", "INSERT INTO fk_kc VALUES (1, 1, 1)")
	_, gerr := c.Exec(ctx, "DELETE FROM fk_kp WHERE t = 1", simple)
	_, werr := oracle.Exec(ctx, "DELETE FROM fk_kp WHERE t = 1", simple)
	var gpe, wpe *pgconn.PgError
	if !errors.As(gerr, &gpe) || !errors.As(werr, &wpe) || gpe.Code != wpe.Code || gpe.Where != wpe.Where || gpe.Message != wpe.Message {
		t.Errorf("a key's failing action: pgfleet %v (context %q), PostgreSQL %v (context %q)", gerr, whereOf(gpe), werr, whereOf(wpe))
	}
	ddl("DROP TABLE fk_kc, fk_kp")

	// A self-reference added in the same block (adversary 141: the
	// check read the committed keys).
	both("BEGIN")
	both("ALTER TABLE fk_dself ADD CONSTRAINT fk_dself_again FOREIGN KEY (org, parent) REFERENCES fk_dself (org, id)")
	both("INSERT INTO fk_dself SELECT 9, g, CASE WHEN g < 1500 THEN g + 1 END FROM generate_series(1, 1500) g")
	both("COMMIT")
	both("SELECT count(*) FROM fk_dself WHERE org = 9")
	exec(t, c, "DROP TABLE fk_rself, fk_dself", simple)

	// Refused: keys a shard could not check, and a table that others reference
	// or that references others leaving the catalog.
	exec(t, c, "CREATE TABLE fk_plain (id int PRIMARY KEY)", simple)
	exec(t, c, "INSERT INTO fk_plain VALUES (1)", simple)
	exec(t, c, "CREATE TABLE fk_other (id bigint PRIMARY KEY, org_id bigint)", simple)
	exec(t, c, "SELECT create_distributed_table('fk_other', 'id', colocate_with => 'none')", simple)
	exec(t, c, "CREATE TABLE fk_col (org_id bigint, id bigint, other bigint, PRIMARY KEY (org_id, id))", simple)
	exec(t, c, "SELECT create_distributed_table('fk_col', 'org_id', colocate_with => 'fk_org')", simple)
	t.Cleanup(func() {
		_, _ = c.Exec(context.Background(), "DROP TABLE IF EXISTS fk_plain, fk_other, fk_col, fk_inv, fk_alt, fk_campaign, fk_company, fk_b2, fk_b1, fk_user, fk_org, fk_tag, fk_country", simple)
	})
	for _, s := range []string{
		"ALTER TABLE fk_org ADD FOREIGN KEY (country_id) REFERENCES fk_plain",
		"ALTER TABLE fk_other ADD FOREIGN KEY (org_id) REFERENCES fk_org",
		"ALTER TABLE fk_col ADD FOREIGN KEY (other) REFERENCES fk_org",
		"ALTER TABLE fk_col ADD FOREIGN KEY (id, org_id) REFERENCES fk_user (org_id, id)",
		"ALTER TABLE fk_tag ADD FOREIGN KEY (id) REFERENCES fk_org",
		"ALTER TABLE fk_col ADD FOREIGN KEY (org_id) REFERENCES fk_country ON UPDATE CASCADE",
		"ALTER TABLE fk_col ADD FOREIGN KEY (org_id, id) REFERENCES fk_user ON DELETE SET NULL",
		"ALTER TABLE fk_tag ADD FOREIGN KEY (country_id) REFERENCES fk_country ON DELETE SET DEFAULT",
		"ALTER TABLE fk_plain ADD FOREIGN KEY (id) REFERENCES fk_country", // it has rows
		"SELECT undistribute_table('fk_user')",
		"SELECT undistribute_table('fk_country')",
	} {
		refused(c, s, "a key a shard could not check")
	}
	// ON DELETE SET NULL of columns other than the distribution column is
	// not refused.
	exec(t, c, "ALTER TABLE fk_col ADD FOREIGN KEY (org_id, other) REFERENCES fk_user ON DELETE SET NULL (other)", simple)
	exec(t, c, "ALTER TABLE fk_col DROP CONSTRAINT fk_col_org_id_other_fkey", simple)
	if n, k := keys("fk_col"); k != 0 || n != 4 {
		t.Errorf("fk_col after DROP CONSTRAINT: %d foreign keys on %d shards", k, n)
	}

	// A table made with keys to catalog tables, or given them by ALTER
	// TABLE while it is empty, takes no rows (0A000) until it is
	// distributed too; then its shards get the keys. So does one that
	// references a table distributed after it was made (Citus' tutorial:
	// every table made first, then distributed in order).
	ddl("CREATE TABLE fk_inv (org_id bigint REFERENCES fk_org, id bigint, country_id int REFERENCES fk_country, PRIMARY KEY (org_id, id))",
		"CREATE TABLE fk_alt (org_id bigint, id bigint, PRIMARY KEY (org_id, id))",
		"ALTER TABLE fk_alt ADD CONSTRAINT fk_alt_org FOREIGN KEY (org_id) REFERENCES fk_org DEFERRABLE INITIALLY DEFERRED",
		"CREATE TABLE fk_company (id bigint PRIMARY KEY, name text)",
		"CREATE TABLE fk_campaign (company_id bigint REFERENCES fk_company, id bigint, PRIMARY KEY (company_id, id))")
	exec(t, c, "SELECT create_distributed_table('fk_company', 'id', colocate_with => 'fk_org')", simple)
	for _, s := range []string{
		"INSERT INTO fk_inv VALUES (1, 1, 1)",
		"INSERT INTO fk_alt VALUES (1, 1)",
		"INSERT INTO fk_campaign VALUES (1, 1)",
	} {
		refused(c, s, "a table with a key to a distributed table, not distributed itself")
	}
	if _, err := c.CopyFrom(ctx, pgx.Identifier{"fk_inv"}, []string{"org_id", "id", "country_id"}, pgx.CopyFromRows([][]any{{int64(1), int64(1), int32(1)}})); sqlState(err) != "0A000" {
		t.Errorf("COPY into a table with a key to a distributed table, not distributed itself: %v, want 0A000", err)
	}
	both("SELECT count(*) FROM fk_inv")
	// Its key dropped, a plain table takes rows again; one made in the
	// schema a temporary table of its name hides is guarded too.
	exec(t, c, "CREATE TABLE fk_gone (id int PRIMARY KEY, country_id int CONSTRAINT fk_gone_c REFERENCES fk_country)", simple)
	refused(c, "INSERT INTO fk_gone VALUES (1, 1)", "a plain table with a key to a reference table")
	exec(t, c, "ALTER TABLE fk_gone DROP CONSTRAINT fk_gone_c", simple)
	exec(t, c, "INSERT INTO fk_gone VALUES (1, 1)", simple)
	exec(t, c, "DROP TABLE fk_gone", simple)
	exec(t, c, "CREATE TABLE fk_parted (id int, country_id int) PARTITION BY HASH (id)", simple)
	refused(c, "ALTER TABLE fk_parted ADD FOREIGN KEY (country_id) REFERENCES fk_country", "a key from a partitioned plain table")
	exec(t, c, "DROP TABLE fk_parted", simple)
	exec(t, c, "CREATE UNLOGGED TABLE fk_gone (id int, country_id int REFERENCES fk_country)", simple)
	refused(c, "INSERT INTO fk_gone VALUES (1, 1)", "an unlogged plain table with a key to a reference table")
	exec(t, c, "DROP TABLE fk_gone", simple)
	tc := connect(t, srv.Addr())
	exec(t, tc, "CREATE TEMP TABLE fk_gone (id int)", simple)
	exec(t, tc, "CREATE TABLE public.fk_gone (id int PRIMARY KEY, country_id int REFERENCES fk_country)", simple)
	refused(tc, "INSERT INTO public.fk_gone VALUES (1, 1)", "a plain table made beside a temporary table of its name")
	exec(t, tc, "DROP TABLE public.fk_gone", simple)
	exec(t, c, "SELECT create_distributed_table('fk_inv', 'org_id', colocate_with => 'fk_org')", simple)
	exec(t, c, "BEGIN", simple)
	exec(t, c, "SELECT create_distributed_table('fk_alt', 'org_id', colocate_with => 'fk_org')", simple)
	exec(t, c, "COMMIT", simple)
	exec(t, c, "SELECT create_distributed_table('fk_campaign', 'company_id', colocate_with => 'fk_org')", simple)
	// As migration tools send it: one block makes and distributes a table,
	// then makes one referencing it and distributes that.
	for _, s := range []string{
		"BEGIN",
		"CREATE TABLE fk_b1 (id bigint PRIMARY KEY)",
		"SELECT create_distributed_table('fk_b1', 'id', colocate_with => 'fk_org')",
		"CREATE TABLE fk_b2 (b1 bigint REFERENCES fk_b1 ON DELETE CASCADE, id bigint, PRIMARY KEY (b1, id))",
		"SELECT create_distributed_table('fk_b2', 'b1', colocate_with => 'fk_b1')",
		"COMMIT",
	} {
		exec(t, c, s, simple)
		if !strings.Contains(s, "create_distributed_table") {
			exec(t, oracle, s, simple)
		}
	}
	both("INSERT INTO fk_b1 SELECT generate_series(1, 10)")
	both("INSERT INTO fk_b2 SELECT g, 1 FROM generate_series(1, 10) g")
	both("INSERT INTO fk_b2 VALUES (11, 1)")
	both("DELETE FROM fk_b1 WHERE id < 4")
	both("SELECT b1 FROM fk_b2 ORDER BY b1")
	perTable["fk_b2"], perTable["fk_b1"] = 1, 0
	perTable["fk_inv"], perTable["fk_alt"], perTable["fk_campaign"], perTable["fk_company"] = 2, 1, 1, 0
	checkKeys("after the tables that referenced them were distributed")
	both("INSERT INTO fk_company SELECT g, 'c' FROM generate_series(1, 10) g")
	both("INSERT INTO fk_campaign SELECT g, 1 FROM generate_series(1, 10) g")
	both("INSERT INTO fk_campaign VALUES (11, 1)")
	both("INSERT INTO fk_inv SELECT id, 1, 2 FROM fk_org ORDER BY id LIMIT 3")
	both("INSERT INTO fk_inv VALUES (1, 9, 77)")
	both("BEGIN; INSERT INTO fk_alt VALUES (555, 1); INSERT INTO fk_alt VALUES (1, 2); COMMIT")
	both("BEGIN; INSERT INTO fk_alt VALUES (1, 3); INSERT INTO fk_org VALUES (556, 1, 'late'); INSERT INTO fk_alt VALUES (556, 1); COMMIT")
	both("SELECT org_id, id FROM fk_alt ORDER BY 1, 2")
	both("SELECT count(*) FROM fk_inv")
	both("DELETE FROM fk_company WHERE id = 1")
	ddl("DELETE FROM fk_inv; DELETE FROM fk_alt; DELETE FROM fk_campaign; DELETE FROM fk_company; DELETE FROM fk_org WHERE id = 556")

	// Shard groups moved, in both modes, and split (the catalog is in the
	// first worker's postgres database).
	var shard, lo, hi int64
	var port, node int
	group := func(order string) {
		t.Helper()
		if err := w0.QueryRow(ctx, `SELECT s.shardid, s.min_hash::bigint, s.max_hash::bigint, n.port, n.nodeid::int
			FROM pgfleet.shards s JOIN pgfleet.placements p USING (shardid) JOIN pgfleet.nodes n USING (nodeid)
			WHERE s.table_name = 'public.fk_org' ORDER BY s.shardid `+order+` LIMIT 1`).Scan(&shard, &lo, &hi, &port, &node); err != nil {
			t.Fatal(err)
		}
	}
	other := func(port int) *pgcluster.Server {
		if cl.Servers[0].Port == port {
			return cl.Servers[1]
		}
		return cl.Servers[0]
	}
	for _, mode := range []string{"block_writes", "force_logical"} {
		group("")
		dst := other(port)
		exec(t, c, fmt.Sprintf("SELECT citus_move_shard_placement(%d, '%s', %d, '%s', %d, shard_transfer_mode => '%s')",
			shard, dst.Host, port, dst.Host, dst.Port, mode), simple)
		checkKeys("after a " + mode + " move")
		rounds()
	}
	group("")
	exec(t, c, fmt.Sprintf("SELECT citus_split_shard_by_split_points(%d, ARRAY['%d'], ARRAY[%d, %d])", shard, lo+(hi-lo)/2, node, node), simple)
	checkKeys("after a split")
	rounds()

	// A third node gets the reference tables' copies with their keys, and
	// a shard group moved there checks against them.
	third := cl.Servers[2]
	exec(t, c, fmt.Sprintf("SELECT citus_add_node('%s', %d)", third.Host, third.Port), simple)
	checkKeys("after citus_add_node")
	group("DESC")
	exec(t, c, fmt.Sprintf("SELECT citus_move_shard_placement(%d, '%s', %d, '%s', %d)", shard, third.Host, port, third.Host, third.Port), simple)
	checkKeys("after a move to the new node")
	rounds()

	// Drained (its groups move back) and removed with its copies.
	exec(t, c, fmt.Sprintf("SELECT citus_drain_node('%s', %d)", third.Host, third.Port), simple)
	exec(t, c, fmt.Sprintf("SELECT citus_remove_node('%s', %d)", third.Host, third.Port), simple)
	checkKeys("after the new node was drained and removed")
	rounds()
	both("TRUNCATE fk_country CASCADE")
	both("SELECT (SELECT count(*) FROM fk_org), (SELECT count(*) FROM fk_user), (SELECT count(*) FROM fk_tag)")

	// DROP TABLE ... CASCADE of a referenced table (Django's DeleteModel):
	// the keys that reference it go, on the shards and copies too.
	both("DROP TABLE fk_country CASCADE")
	perTable["fk_org"], perTable["fk_tag"], perTable["fk_inv"] = 0, 0, 1
	delete(perTable, "fk_country")
	checkKeys("after DROP TABLE fk_country CASCADE")
	both("INSERT INTO fk_org VALUES (900, 12345, 'no country needed')")
	if n, _ := keys("fk_country"); n != 0 {
		t.Errorf("fk_country has %d copies left after DROP TABLE ... CASCADE", n)
	}

	// Dropped together, in any order.
	exec(t, c, "DROP TABLE fk_col, fk_org, fk_tag, fk_user, fk_inv, fk_alt, fk_campaign, fk_company, fk_b1, fk_b2", simple)
	for _, table := range []string{"fk_org", "fk_user", "fk_tag"} {
		if n, _ := keys(table); n != 0 {
			t.Errorf("%s has %d shards or copies left after DROP TABLE", table, n)
		}
	}
}

func whereOf(e *pgconn.PgError) string {
	if e == nil {
		return ""
	}
	return e.Where
}

// textRows runs sql and renders its rows as text, or returns its error.
func textRows(ctx context.Context, c *pgx.Conn, sql string, mode pgx.QueryExecMode) (string, error) {
	rows, err := c.Query(ctx, sql, mode)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			rows.Close()
			return "", err
		}
		fmt.Fprintln(&b, vals...)
	}
	rows.Close()
	return b.String() + rows.CommandTag().String(), rows.Err()
}
