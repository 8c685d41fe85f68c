package coordinator_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// oracleDB is a database of its own on a test server, standing for plain
// PostgreSQL: tables there have the names the coordinator's have, without
// shards beside them.
func oracleDB(t *testing.T, addr, name string) *pgx.Conn {
	t.Helper()
	admin := connect(t, addr)
	_, _ = admin.Exec(context.Background(), "CREATE DATABASE "+name)
	ctx := context.Background()
	c, err := pgx.Connect(ctx, strings.Replace(pgtest.URL(addr), "/postgres?", "/"+name+"?", 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// compareOracle runs each statement in the simple protocol on the
// coordinator and on plain PostgreSQL and reports where the rows or the
// SQLSTATE differ. allowRefusal lists statements where 0A000 is also an
// allowed answer.
func compareOracle(t *testing.T, c, plain *pgx.Conn, stmts []string, allowRefusal map[string]bool) {
	t.Helper()
	ctx := context.Background()
	run := func(conn *pgx.Conn, sql string) (string, string) {
		res, err := conn.PgConn().Exec(ctx, sql).ReadAll()
		var b strings.Builder
		for _, r := range res {
			if r.Err != nil {
				return r.Err.Error(), sqlState(r.Err)
			}
			b.WriteString(r.CommandTag.String() + "\n")
			for _, row := range r.Rows {
				for i, v := range row {
					if i > 0 {
						b.WriteByte('|')
					}
					b.Write(v)
				}
				b.WriteByte('\n')
			}
		}
		if err != nil {
			return err.Error(), sqlState(err)
		}
		return b.String(), ""
	}
	for _, sql := range stmts {
		got, gerr := run(c, sql)
		want, werr := run(plain, sql)
		if allowRefusal[sql] && gerr == "0A000" {
			continue
		}
		if gerr != werr || gerr == "" && got != want {
			t.Errorf("%s\n got %q %s\n PostgreSQL %q %s", sql, got, gerr, want, werr)
		}
	}
}

// TestQualifiedColumnReferences: schema-qualified column references
// (schema.table.column, schema.table.*) to distributed and reference
// tables, in routed and multi-shard reads and writes, answer as plain
// PostgreSQL does.
func TestQualifiedColumnReferences(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	plain := oracleDB(t, cl.Servers[1].Addr(), "qoracle")
	for _, conn := range []*pgx.Conn{c, plain} {
		exec(t, conn, "DROP TABLE IF EXISTS qc_t, qc_r")
		exec(t, conn, "CREATE TABLE qc_t (id int PRIMARY KEY, v text)")
		exec(t, conn, "CREATE TABLE qc_r (id int PRIMARY KEY, w text)")
	}
	testTable(t, c, "qc_t", "(id int PRIMARY KEY, v text)", "SELECT create_distributed_table('qc_t', 'id', shard_count => 4)")
	testTable(t, c, "qc_r", "(id int PRIMARY KEY, w text)", "SELECT create_reference_table('qc_r')")
	t.Cleanup(func() { _, _ = plain.Exec(context.Background(), "DROP TABLE IF EXISTS qc_t, qc_r") })
	for _, conn := range []*pgx.Conn{c, plain} {
		exec(t, conn, "INSERT INTO qc_t (id, v) VALUES (15, 'f'), (16, 's'), (100, 'h'), (-7, 'm')", pgx.QueryExecModeSimpleProtocol)
		exec(t, conn, "INSERT INTO qc_r (id, w) VALUES (16, 'r16'), (100, 'r100')", pgx.QueryExecModeSimpleProtocol)
	}
	compareOracle(t, c, plain, []string{
		"SELECT qc_t.v FROM qc_t WHERE qc_t.id = 16",
		"SELECT public.qc_t.v FROM public.qc_t WHERE id = 16",
		"SELECT public.qc_t.v FROM qc_t WHERE public.qc_t.id = 16",
		"SELECT public.qc_t.* FROM public.qc_t WHERE id = 16",
		"SELECT count(*) FROM public.qc_t WHERE public.qc_t.id > 0",
		"SELECT public.qc_t.v FROM public.qc_t ORDER BY public.qc_t.id",
		"SELECT public.qc_t.v, public.qc_r.w FROM public.qc_t JOIN public.qc_r ON public.qc_r.id = public.qc_t.id ORDER BY 1",
		"SELECT public.qc_t.v FROM public.qc_t x WHERE x.id = 16",
		"SELECT other.qc_t.v FROM public.qc_t WHERE id = 16",
		"UPDATE public.qc_t SET v = 's2' WHERE public.qc_t.id = 16 RETURNING public.qc_t.v",
		"UPDATE public.qc_t SET v = public.qc_t.v || '!' WHERE public.qc_t.id = 100 AND public.qc_t.v > ''",
		"DELETE FROM public.qc_t WHERE public.qc_t.id = 15 RETURNING public.qc_t.v",
		"SELECT public.qc_r.w FROM public.qc_r WHERE public.qc_r.id = 100",
		"SELECT id, v FROM qc_t ORDER BY id",
		"SELECT qoracle.public.qc_t.v FROM qc_t WHERE id = 16",
	}, map[string]bool{"SELECT qoracle.public.qc_t.v FROM qc_t WHERE id = 16": true})
}

// TestShardNamesDoNotLeak: what would name a shard where PostgreSQL names
// the table (tableoid, pg_typeof of a whole row) is refused with 0A000;
// whole rows as values read as PostgreSQL's.
func TestShardNamesDoNotLeak(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	plain := oracleDB(t, cl.Servers[1].Addr(), "qoracle")
	exec(t, plain, "DROP TABLE IF EXISTS sn_t")
	exec(t, plain, "CREATE TABLE sn_t (id int PRIMARY KEY, v text)")
	t.Cleanup(func() { _, _ = plain.Exec(context.Background(), "DROP TABLE IF EXISTS sn_t") })
	testTable(t, c, "sn_t", "(id int PRIMARY KEY, v text)", "SELECT create_distributed_table('sn_t', 'id', shard_count => 4)")
	for _, conn := range []*pgx.Conn{c, plain} {
		exec(t, conn, "INSERT INTO sn_t (id, v) VALUES (16, 's'), (100, 'h')", pgx.QueryExecModeSimpleProtocol)
	}
	refused := []string{
		"SELECT tableoid::regclass FROM sn_t WHERE id = 16",
		"SELECT tableoid::regclass, count(*) FROM sn_t GROUP BY 1",
		"SELECT pg_typeof(sn_t) FROM sn_t WHERE id = 16",
		"SELECT pg_typeof(x) FROM sn_t x WHERE id = 16",
		"SELECT pg_typeof(sn_t.*) FROM sn_t",
		"SELECT pg_typeof(array_agg(sn_t)) FROM sn_t",
		"SELECT (sn_t::sn_t).v FROM sn_t WHERE id = 100",
		"SELECT (x::public.sn_t).v FROM sn_t x WHERE id = 100",
	}
	for _, sql := range refused {
		_, err := c.Exec(context.Background(), sql, pgx.QueryExecModeSimpleProtocol)
		if sqlState(err) != "0A000" {
			t.Errorf("%s: %v, want 0A000", sql, err)
		}
	}
	compareOracle(t, c, plain, []string{
		"SELECT sn_t FROM sn_t WHERE id = 16",
		"SELECT sn_t::text FROM sn_t ORDER BY id",
		"SELECT row_to_json(sn_t) FROM sn_t WHERE id = 16",
		"SELECT (sn_t).v FROM sn_t WHERE id = 16",
		"SELECT pg_typeof(v) FROM sn_t WHERE id = 16",
		"SELECT array_agg(sn_t)::text FROM sn_t WHERE id = 16",
		"SELECT to_jsonb(x) FROM sn_t x WHERE id = 100",
		"SELECT format('%s', sn_t) FROM sn_t WHERE id = 100",
		"SELECT sn_t IS NULL FROM sn_t WHERE id = 100",
		"SELECT sn_t = sn_t FROM sn_t WHERE id = 100",
	}, nil)
}
