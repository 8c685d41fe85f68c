package coordinator_test

import (
	"context"
	"fmt"
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
