package coordinator_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestTypeOIDsAcrossWorkers: an enum made through the coordinator has
// another OID on each worker. Clients learn the default node's (psycopg's
// EnumInfo, pgx's LoadType), and see it in every RowDescription and
// ParameterDescription whichever worker answers; a parameter typed with
// it works on every worker. Before, rows from the second worker carried
// its own OID (psycopg returned them as text, postgres.js got 0A000
// "cached plan must not change result type"), and an INSERT typed with
// the default node's OID failed there with XX000 "cache lookup failed for
// type". A shard's row type is its table's.
func TestTypeOIDsAcrossWorkers(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	// Skew the second worker's OID counter, so that the OIDs differ.
	w2 := connect(t, cl.Servers[1].Addr())
	for i := 0; i < 3; i++ {
		exec(t, w2, fmt.Sprintf("CREATE TYPE pg_temp.to_skew%d AS (a int)", i), simple)
	}
	exec(t, c, "DROP TYPE IF EXISTS to_status", simple)
	exec(t, c, "CREATE TYPE to_status AS ENUM ('new', 'shipped')", simple)
	t.Cleanup(func() { _, _ = c.Exec(context.Background(), "DROP TYPE IF EXISTS to_status", simple) })
	testTable(t, c, "to_orders", "(id int PRIMARY KEY, status to_status)", "SELECT create_distributed_table('to_orders', 'id', shard_count => 4)")
	exec(t, c, "INSERT INTO to_orders VALUES (1, 'new'), (2, 'new'), (3, 'new'), (4, 'new'), (5, 'new'), (6, 'new')", simple)

	canon := queryString(t, c, "SELECT 'to_status'::regtype::oid::text")
	rowType := queryString(t, c, "SELECT 'to_orders'::regtype::oid::text")
	var oids []string
	for _, s := range cl.Servers {
		oids = append(oids, queryString(t, connect(t, s.Addr()), "SELECT 'to_status'::regtype::oid::text"))
	}
	if oids[0] == oids[1] {
		t.Fatalf("the enum has OID %s on both workers: the test needs them to differ", oids[0])
	}
	// Which worker answers for each key.
	nodes := map[string]bool{}
	for k := 1; k <= 6; k++ {
		var port string
		if err := c.QueryRow(ctx, "SELECT inet_server_port()::text FROM to_orders WHERE id = $1", k).Scan(&port); err != nil {
			t.Fatal(err)
		}
		nodes[port] = true
	}
	if len(nodes) != 2 {
		t.Fatalf("keys 1 to 6 fall on %d workers, want both", len(nodes))
	}

	pc := c.PgConn()
	typeOf := func(fds []pgconn.FieldDescription, i int) string {
		if i >= len(fds) {
			return "none"
		}
		return fmt.Sprint(fds[i].DataTypeOID)
	}
	for k := 1; k <= 6; k++ {
		key := fmt.Sprint(k)
		// Simple protocol.
		rr := pc.Exec(ctx, "SELECT status, to_orders FROM to_orders WHERE id = "+key)
		res, err := rr.ReadAll()
		if err != nil || len(res) != 1 {
			t.Fatalf("key %d: %v", k, err)
		}
		if got := typeOf(res[0].FieldDescriptions, 0); got != canon {
			t.Errorf("key %d, simple: status has type OID %s, want the default node's %s", k, got, canon)
		}
		if got := typeOf(res[0].FieldDescriptions, 1); got != rowType {
			t.Errorf("key %d, simple: the row has type OID %s, want to_orders' %s", k, got, rowType)
		}
		// Extended protocol: the portal's description and an INSERT whose
		// parameter is typed with the default node's OID.
		r := pc.ExecParams(ctx, "SELECT status FROM to_orders WHERE id = $1", [][]byte{[]byte(key)}, nil, nil, nil).Read()
		if r.Err != nil || typeOf(r.FieldDescriptions, 0) != canon {
			t.Errorf("key %d, extended: %v, type OID %s, want %s", k, r.Err, typeOf(r.FieldDescriptions, 0), canon)
		}
		var st uint32
		fmt.Sscan(canon, &st)
		r = pc.ExecParams(ctx, "INSERT INTO to_orders VALUES ($1, $2)", [][]byte{[]byte(fmt.Sprint(k + 100)), []byte("shipped")}, []uint32{23, st}, nil, nil).Read()
		if r.Err != nil {
			t.Errorf("key %d: INSERT with a parameter of the enum's OID: %v", k+100, r.Err)
		}
	}
	// A prepared statement's parameter and result descriptions.
	sd, err := pc.Prepare(ctx, "to_ins", "INSERT INTO to_orders VALUES ($1, $2) RETURNING status", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(sd.ParamOIDs) != 2 || fmt.Sprint(sd.ParamOIDs[1]) != canon || typeOf(sd.Fields, 0) != canon {
		t.Errorf("prepared INSERT: parameters %v, result %v; want the enum as %s", sd.ParamOIDs, sd.Fields, canon)
	}
	for k := 200; k < 206; k++ {
		r := pc.ExecPrepared(ctx, "to_ins", [][]byte{[]byte(fmt.Sprint(k)), []byte("new")}, nil, nil).Read()
		if r.Err != nil || len(r.Rows) != 1 || string(r.Rows[0][0]) != "new" {
			t.Errorf("prepared INSERT of key %d: %v %q", k, r.Err, r.Rows)
		}
	}
	// Over every shard.
	r := pc.ExecParams(ctx, "SELECT status FROM to_orders ORDER BY id", nil, nil, nil, nil).Read()
	if r.Err != nil || typeOf(r.FieldDescriptions, 0) != canon || len(r.Rows) != 18 {
		t.Errorf("multi-shard: %v, type OID %s, %d rows; want %s, 18 rows", r.Err, typeOf(r.FieldDescriptions, 0), len(r.Rows), canon)
	}
	if got := queryString(t, c, "SELECT count(*)::text FROM to_orders WHERE status = 'shipped'"); got != "6" {
		t.Errorf("rows shipped: %s, want 6", got)
	}
}

// TestRowDescriptionNamesTable: the columns of a distributed or reference
// table are described to the client with the table's OID and column
// number on the default node, as PostgreSQL describes them (JDBC's
// getTableName and isAutoIncrement, node-postgres's tableID read them),
// not a shard's, which no relation or another one has there: routed,
// multi-shard and reference reads, both protocols, a column dropped
// before distributing (the shard's numbers differ), after a shard moved
// (a new OID on its new worker); a local table's stay its own.
func TestRowDescriptionNamesTable(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	c := connect(t, srv.Addr())
	exec(t, c, "DROP TABLE IF EXISTS rd_local")
	// (A column dropped before distributing: the shards number name 2.)
	testTable(t, c, "rd_t", "(id bigint PRIMARY KEY, gone int, name text)", "ALTER TABLE rd_t DROP COLUMN gone")
	// (Not colocated: the shard moved below would move other tests' too.)
	exec(t, c, "SELECT create_distributed_table('rd_t', 'id', shard_count => 4, colocate_with => 'none')", simple)
	testTable(t, c, "rd_r", "(code int PRIMARY KEY, label text)", "SELECT create_reference_table('rd_r')")
	exec(t, c, "CREATE TABLE rd_local (k int, v text)")
	t.Cleanup(func() { _, _ = c.Exec(context.Background(), "DROP TABLE IF EXISTS rd_local") })
	exec(t, c, "INSERT INTO rd_t SELECT g, 'n' || g FROM generate_series(1, 20) g", simple)
	exec(t, c, "INSERT INTO rd_r VALUES (1, 'one')", simple)
	exec(t, c, "INSERT INTO rd_local VALUES (1, 'x')", simple)

	// The default node's answer, as a client would look it up.
	col := func(table, column string) string {
		return queryString(t, c, "SELECT attrelid::oid::text || '/' || attnum FROM pg_attribute WHERE attrelid = $1::regclass AND attname = $2", table, column)
	}
	described := func(sql string, mode pgx.QueryExecMode) []string {
		t.Helper()
		rows, err := c.Query(ctx, sql, mode)
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		var out []string
		for _, f := range rows.FieldDescriptions() {
			out = append(out, fmt.Sprintf("%d/%d", f.TableOID, f.TableAttributeNumber))
		}
		rows.Close()
		if rows.Err() != nil {
			t.Fatalf("%s: %v", sql, rows.Err())
		}
		return out
	}
	check := func(sql string, want ...string) {
		t.Helper()
		for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeExec} {
			if got := described(sql, mode); !slices.Equal(got, want) {
				t.Errorf("%s (%v): columns described as %v, want %v", sql, mode, got, want)
			}
		}
	}
	id, name := col("rd_t", "id"), col("rd_t", "name")
	if !strings.HasSuffix(name, "/3") {
		t.Fatalf("rd_t.name is %s, want column 3", name)
	}
	check("SELECT id, name FROM rd_t WHERE id = 7", id, name)
	check("SELECT name, id FROM rd_t", name, id)
	check("SELECT name, count(*) FROM rd_t GROUP BY name", name, "0/0")
	check("SELECT * FROM rd_r", col("rd_r", "code"), col("rd_r", "label"))
	check("SELECT * FROM rd_local", col("rd_local", "k"), col("rd_local", "v"))

	// Writes' RETURNING: over several shards and every copy of a
	// reference table (the simple protocol's answers were made from
	// another connection's description, the shard's).
	check("UPDATE rd_t SET name = name RETURNING id, name", id, name)
	check("DELETE FROM rd_t WHERE id > 100 RETURNING name", name)
	check("INSERT INTO rd_r VALUES (2, 'two') ON CONFLICT (code) DO UPDATE SET label = excluded.label RETURNING label, code",
		col("rd_r", "label"), col("rd_r", "code"))
	check("UPDATE rd_r SET label = label WHERE code = 1 RETURNING code", col("rd_r", "code"))

	// A column added since the tables were read is read for (it was
	// described as column 0), and so is one dropped and added again.
	exec(t, c, "ALTER TABLE rd_t ADD COLUMN extra int", simple)
	check("SELECT extra, name FROM rd_t", col("rd_t", "extra"), name)
	check("SELECT extra FROM rd_t WHERE id = 3", col("rd_t", "extra"))
	exec(t, c, "ALTER TABLE rd_t DROP COLUMN extra", simple)
	exec(t, c, "ALTER TABLE rd_t ADD COLUMN extra text", simple)
	check("SELECT name, extra FROM rd_t", name, col("rd_t", "extra"))
	exec(t, c, "BEGIN", simple)
	exec(t, c, "ALTER TABLE rd_t ADD COLUMN later int", simple)
	exec(t, c, "COMMIT", simple)
	check("SELECT later FROM rd_t", col("rd_t", "later"))

	// After a move, the shard has a new OID on its new worker.
	moveFirstShard(t, c, cl, "rd_t")
	check("SELECT name, id FROM rd_t", name, id)
	for i := 1; i <= 20; i++ {
		if got := described(fmt.Sprintf("SELECT name FROM rd_t WHERE id = %d", i), simple); !slices.Equal(got, []string{name}) {
			t.Errorf("id %d after a move: described as %v, want %s", i, got, name)
		}
	}
}

// TestNewTypesOnOtherWorker: user types made one after another, each read
// at once from a shard on the second worker, are described with the
// default node's OIDs. The second worker gives a type a lower OID than
// the default node does (its counter runs behind), often one the default
// node uses for an older type: that number was taken as known and the
// older type reported (adversary: every new enum from the 22nd on).
func TestNewTypesOnOtherWorker(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	testTable(t, c, "nto_t", "(id int PRIMARY KEY)", "SELECT create_distributed_table('nto_t', 'id', shard_count => 4)")
	exec(t, c, "INSERT INTO nto_t SELECT generate_series(1, 20)", simple)
	key := ""
	if k := keysOn(t, cl.Servers[1].Addr(), "nto_t", "id"); len(k) > 0 {
		key = k[0]
	}
	if key == "" {
		t.Fatal("no row of nto_t on the second worker")
	}
	d := connect(t, cl.Servers[0].Addr()) // the default node
	for i := range 60 {
		name := fmt.Sprintf("nto_e%d", i)
		exec(t, c, "DROP TYPE IF EXISTS "+name, simple)
		exec(t, c, "CREATE TYPE "+name+" AS ENUM ('x')", simple)
		t.Cleanup(func() { _, _ = c.Exec(context.Background(), "DROP TYPE IF EXISTS "+name, simple) })
		want := []string{"23", queryString(t, d, "SELECT '"+name+"'::regtype::oid::text"), queryString(t, d, "SELECT '"+name+"[]'::regtype::oid::text")}
		for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeExec} {
			rows, err := c.Query(context.Background(), fmt.Sprintf("SELECT id, 'x'::%s AS v, '{x}'::%s[] AS a FROM nto_t WHERE id = %s", name, name, key), mode)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range rows.FieldDescriptions() {
				got = append(got, fmt.Sprint(f.DataTypeOID))
			}
			rows.Close()
			if !slices.Equal(got, want) {
				t.Fatalf("%s (%v): column types %v, the default node's %v", name, mode, got, want)
			}
		}
	}
}
