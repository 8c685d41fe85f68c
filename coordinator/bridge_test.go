package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestCoordinatorStatementsOverExtended: what only the simple protocol
// ran before (DDL on distributed tables and on types, the Citus functions,
// cursors over distributed tables) runs over the extended protocol, as
// JDBC, postgres.js and psycopg's named cursors send it: the same rows on
// every worker, PostgreSQL's answers (NoData, a void column, the cursor's
// rows, the errors' SQLSTATEs).
func TestCoordinatorStatementsOverExtended(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	pc := c.PgConn()
	simple := pgx.QueryExecModeSimpleProtocol
	ext := func(sql string, args ...string) (rows []string, tag string, err error) {
		t.Helper()
		var vals [][]byte
		for _, a := range args {
			vals = append(vals, []byte(a))
		}
		r := pc.ExecParams(ctx, sql, vals, nil, nil, nil).Read()
		for _, row := range r.Rows {
			var cols []string
			for _, v := range row {
				cols = append(cols, string(v))
			}
			rows = append(rows, strings.Join(cols, "|"))
		}
		return rows, r.CommandTag.String(), r.Err
	}
	mustExt := func(sql string, args ...string) ([]string, string) {
		t.Helper()
		rows, tag, err := ext(sql, args...)
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return rows, tag
	}
	onWorkers := func(sql string) []string {
		var out []string
		for _, s := range cl.Servers {
			out = append(out, queryString(t, connect(t, s.Addr()), sql))
		}
		return out
	}
	t.Cleanup(func() {
		for _, sql := range []string{"DROP TABLE IF EXISTS bx_orders", "DROP TYPE IF EXISTS bx_status"} {
			_, _ = c.Exec(context.Background(), sql, simple)
		}
	})
	exec(t, c, "DROP TABLE IF EXISTS bx_orders", simple)
	exec(t, c, "DROP TYPE IF EXISTS bx_status", simple)

	// A type, a table, and its distribution, all over the extended protocol.
	if _, tag := mustExt("CREATE TYPE bx_status AS ENUM ('new', 'paid')"); tag != "CREATE TYPE" {
		t.Errorf("CREATE TYPE: tag %q", tag)
	}
	if got := onWorkers("SELECT count(*)::text FROM pg_type WHERE typname = 'bx_status'"); strings.Join(got, ",") != "1,1" {
		t.Errorf("the type on the workers: %v, want it on both", got)
	}
	mustExt("CREATE TABLE bx_orders (id int PRIMARY KEY, customer int, status bx_status)")
	mustExt("INSERT INTO bx_orders SELECT g, g % 7, 'new' FROM generate_series(1, 40) g")
	rows, tag := mustExt("SELECT create_distributed_table($1, $2)", "bx_orders", "id")
	if strings.Join(rows, ",") != "" || len(rows) != 1 || tag != "SELECT 1" {
		t.Errorf("create_distributed_table with parameters: rows %q, tag %q; want one empty (void) row, SELECT 1", rows, tag)
	}
	if got := onWorkers("SELECT count(*)::text FROM pg_class WHERE relname LIKE 'bx_orders_%' AND relkind = 'r'"); got[0] == "0" || got[1] == "0" {
		t.Errorf("shards on the workers: %v, want some on both", got)
	}
	if got := queryString(t, c, "SELECT count(*)::text FROM bx_orders"); got != "40" {
		t.Errorf("rows after distribution: %s, want 40", got)
	}

	// ALTER TABLE on the distributed table: every shard; its error.
	mustExt("ALTER TABLE bx_orders ADD COLUMN note text DEFAULT 'x'")
	if got := queryString(t, c, "SELECT count(*)::text FROM bx_orders WHERE note = 'x'"); got != "40" {
		t.Errorf("rows with the new column's default: %s, want 40", got)
	}
	if _, _, err := ext("ALTER TABLE bx_orders ADD COLUMN must int NOT NULL"); sqlState(err) != "23502" {
		t.Errorf("ALTER TABLE violated by the shards' rows: %v, want 23502", err)
	}
	if got := queryString(t, c, "SELECT count(*)::text FROM bx_orders"); got != "40" {
		t.Errorf("the session after the failed ALTER: %s rows, want 40", got)
	}

	// A cursor over the distributed table, as psycopg's named cursor: DECLARE
	// with a parameter, FETCH in parts, CLOSE, in a transaction block.
	exec(t, c, "BEGIN", simple)
	mustExt(`DECLARE "bx_cur" CURSOR FOR SELECT id, status FROM bx_orders WHERE customer = $1 ORDER BY id`, "3")
	var got []string
	for {
		rows, tag := mustExt(`FETCH FORWARD 2 FROM "bx_cur"`)
		if !strings.HasPrefix(tag, "FETCH") {
			t.Fatalf("FETCH: tag %q", tag)
		}
		if len(rows) == 0 {
			break
		}
		got = append(got, rows...)
	}
	if strings.Join(got, ",") != "3|new,10|new,17|new,24|new,31|new,38|new" {
		t.Errorf("the cursor's rows: %q", got)
	}
	mustExt(`CLOSE "bx_cur"`)
	exec(t, c, "COMMIT", simple)

	// A cursor is a portal: psycopg's named cursor describes it by its
	// name after DECLARE, then FETCHes.
	pc0 := protoDial(t, srv.Addr(), "bx0")
	pc0.fe.Send(&pgproto3.Query{String: "BEGIN"})
	for _, m := range []pgproto3.FrontendMessage{
		&pgproto3.Parse{Query: `DECLARE "bx_c2" CURSOR FOR SELECT id, customer FROM bx_orders ORDER BY id`}, &pgproto3.Bind{}, &pgproto3.Execute{},
		&pgproto3.Describe{ObjectType: 'P', Name: "bx_c2"},
		&pgproto3.Parse{Query: `FETCH FORWARD 2 FROM "bx_c2"`}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{},
	} {
		pc0.fe.Send(m)
	}
	if err := pc0.fe.Flush(); err != nil {
		t.Fatal(err)
	}
	var seen []string
	for zs := 0; zs < 2; {
		msg, err := pc0.fe.Receive()
		if err != nil {
			t.Fatalf("receive: %v (so far %q)", err, seen)
		}
		switch m := msg.(type) {
		case *pgproto3.RowDescription:
			var names []string
			for _, f := range m.Fields {
				names = append(names, string(f.Name))
			}
			seen = append(seen, "T "+strings.Join(names, ","))
		case *pgproto3.DataRow:
			seen = append(seen, "D "+string(m.Values[0]))
		case *pgproto3.ErrorResponse:
			seen = append(seen, "E "+m.Code+" "+m.Message)
		case *pgproto3.ReadyForQuery:
			zs++
		}
	}
	if got := strings.Join(seen, "; "); got != "T id,customer; D 1; D 2" {
		t.Errorf("Describe of a cursor's portal, then FETCH: %q, want its columns and rows", got)
	}
	// CLOSE ALL over the extended protocol closes the coordinator's cursor.
	if got := strings.Join(pipeRaw(t, pc0, 1, &pgproto3.Parse{Query: "CLOSE ALL"}, &pgproto3.Bind{}, &pgproto3.Execute{},
		&pgproto3.Parse{Query: `FETCH 1 FROM "bx_c2"`}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{}), " "); got != "C CLOSE CURSOR ALL error 34000 Z E" {
		t.Errorf("CLOSE ALL, then FETCH: %q, want 34000", got)
	}

	// Outside a transaction block, with another statement before the
	// Sync: refused before it runs (it would commit on its own).
	p := protoDial(t, srv.Addr(), "bx")
	res := pipeRaw(t, p, 1,
		&pgproto3.Parse{Query: "ALTER TABLE bx_orders ADD COLUMN extra int"}, &pgproto3.Bind{}, &pgproto3.Execute{},
		&pgproto3.Parse{Query: "SELECT 1"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{})
	if strings.Join(res, " ") != "error 0A000 Z I" {
		t.Errorf("DDL in a pipeline with another statement: %q, want 0A000", res)
	}
	if got := queryString(t, c, "SELECT count(*)::text FROM information_schema.columns WHERE table_name = 'bx_orders' AND column_name = 'extra'"); got != "0" {
		t.Errorf("the refused ALTER ran: %s", got)
	}
	// Alone before its Sync: PostgreSQL's answers (JDBC's Describe portal: NoData).
	res = pipeRaw(t, p, 1,
		&pgproto3.Parse{Query: "ALTER TABLE bx_orders ADD COLUMN extra int"}, &pgproto3.Bind{}, &pgproto3.Describe{ObjectType: 'P'},
		&pgproto3.Execute{}, &pgproto3.Sync{})
	if strings.Join(res, " ") != "C ALTER TABLE Z I" {
		t.Errorf("DDL alone before its Sync: %q", res)
	}
	mustExt("DROP TABLE bx_orders")
	if got := onWorkers("SELECT count(*)::text FROM pg_class WHERE relname LIKE 'bx_orders%'"); strings.Join(got, ",") != "0,0" {
		t.Errorf("after DROP TABLE over the extended protocol: %v", got)
	}
}

// TestDropDatabaseAfterUse: a database used through the coordinator, then
// dropped through it once its clients left (a test runner's teardown, as
// Django's and Rails'), is dropped: the pools' idle connections to it no
// longer make PostgreSQL refuse ("is being accessed by other users",
// 55006). In both protocols.
func TestDropDatabaseAfterUse(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	for i, extended := range []bool{false, true} {
		db := fmt.Sprintf("bx_db%d", i)
		exec(t, c, "DROP DATABASE IF EXISTS "+db, simple)
		exec(t, c, "CREATE DATABASE "+db, simple)
		u := strings.Replace(pgtest.URL(srv.Addr()), "/postgres?", "/"+db+"?", 1)
		for k := 0; k < 3; k++ {
			uc, err := pgx.Connect(ctx, u)
			if err != nil {
				t.Fatal(err)
			}
			exec(t, uc, "CREATE TABLE IF NOT EXISTS t (a int)")
			exec(t, uc, "INSERT INTO t VALUES (1)")
			uc.Close(ctx)
		}
		var err error
		if extended {
			err = c.PgConn().ExecParams(ctx, "DROP DATABASE "+db, nil, nil, nil, nil).Read().Err
		} else {
			_, err = c.Exec(ctx, "DROP DATABASE "+db, simple)
		}
		if err != nil {
			t.Errorf("DROP DATABASE after its clients left (extended %v): %v", extended, err)
		}
		if got := queryString(t, c, "SELECT count(*)::text FROM pg_database WHERE datname = $1", db); got != "0" {
			t.Errorf("%s still exists", db)
		}
	}
}

// TestTimeoutBetweenParseAndDescribe: a client that pauses between Parse
// and Describe longer than statement_timeout gets 57014, as from
// PostgreSQL, whose timer starts at the Parse (pgx's
// Test*HandlesTimeoutBetweenParseAndDescribe). The coordinator passes
// what a client sent on when it pauses mid-batch, where it waited for the
// Sync and the worker saw no pause.
func TestTimeoutBetweenParseAndDescribe(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	for _, target := range []string{cl.Servers[0].Addr(), srv.Addr()} {
		p := protoDial(t, target, "pd")
		if got := strings.Join(pipeRaw(t, p, 1, &pgproto3.Query{String: "SET statement_timeout = '100ms'"}), " "); got != "C SET Z I" {
			t.Fatalf("%s: SET: %q", target, got)
		}
		pipeRaw(t, p, 0, &pgproto3.Parse{Name: "pd_s", Query: "SELECT $1::varchar"})
		time.Sleep(250 * time.Millisecond)
		got := strings.Join(pipeRaw(t, p, 1, &pgproto3.Describe{ObjectType: 'S', Name: "pd_s"}, &pgproto3.Sync{}), " ")
		if got != "error 57014 Z I" {
			t.Errorf("%s: Describe 250 ms after Parse with statement_timeout 100ms: %q, want 57014", target, got)
		}
		// Without a pause: no timeout.
		got = strings.Join(pipeRaw(t, p, 1, &pgproto3.Parse{Name: "pd_t", Query: "SELECT 1"}, &pgproto3.Describe{ObjectType: 'S', Name: "pd_t"},
			&pgproto3.Bind{PreparedStatement: "pd_t"}, &pgproto3.Execute{}, &pgproto3.Sync{}), " ")
		if got != "row 1 C SELECT 1 Z I" {
			t.Errorf("%s: a batch without a pause: %q", target, got)
		}
	}
}

// TestCoordinatorStatementsOverExtendedEdges: what the adversary found in
// them. In a block whose BEGIN went to a worker in the same pipeline, DDL
// runs in the block (it was refused as if outside one); a statement
// prepared before its table was distributed, or before its cursor was one
// over a distributed table, runs as what it is now; Execute's row limit
// on a FETCH of such a cursor gives its rows in parts; Describe gives the
// parameters PostgreSQL would (a Go int for shard_count, a cast).
func TestCoordinatorStatementsOverExtendedEdges(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	c := connect(t, srv.Addr())
	testTable(t, c, "bxe_d", "(id int PRIMARY KEY, v text)", "SELECT create_distributed_table('bxe_d', 'id', shard_count => 4)")
	exec(t, c, "INSERT INTO bxe_d SELECT g, 'v' || g FROM generate_series(1, 10) g", simple)
	p := protoDial(t, srv.Addr(), "bxe")
	ext := func(sql string, maxRows uint32, portal string) []pgproto3.FrontendMessage {
		return []pgproto3.FrontendMessage{&pgproto3.Parse{Query: sql}, &pgproto3.Bind{DestinationPortal: portal}, &pgproto3.Execute{Portal: portal, MaxRows: maxRows}}
	}
	join := func(s []string) string { return strings.Join(s, " ") }

	// DDL in a block, after a statement that went to a worker in the same pipeline.
	pipeRaw(t, p, 1, &pgproto3.Query{String: "BEGIN"})
	msgs := append(ext("SELECT v FROM bxe_d WHERE id = 1", 0, ""), ext("ALTER TABLE bxe_d ADD COLUMN x int", 0, "")...)
	if got := join(pipeRaw(t, p, 1, append(msgs, &pgproto3.Sync{})...)); got != "row v1 C SELECT 1 C ALTER TABLE Z T" {
		t.Errorf("DDL after a routed statement in a block's pipeline: %q", got)
	}
	pipeRaw(t, p, 1, &pgproto3.Query{String: "ROLLBACK"})
	if got := queryString(t, c, "SELECT count(*)::text FROM information_schema.columns WHERE table_name = 'bxe_d' AND column_name = 'x'"); got != "0" {
		t.Errorf("the rolled back ALTER left its column: %s", got)
	}

	// FETCH of a cursor over the distributed table, with a row limit.
	pipeRaw(t, p, 1, &pgproto3.Query{String: "BEGIN"})
	pipeRaw(t, p, 1, append(ext("DECLARE bxe_c CURSOR FOR SELECT id FROM bxe_d ORDER BY id", 0, ""), &pgproto3.Sync{})...)
	got := pipeRaw(t, p, 1, &pgproto3.Parse{Query: "FETCH 5 FROM bxe_c"}, &pgproto3.Bind{DestinationPortal: "bxe_p"},
		&pgproto3.Execute{Portal: "bxe_p", MaxRows: 2}, &pgproto3.Execute{Portal: "bxe_p", MaxRows: 2},
		&pgproto3.Execute{Portal: "bxe_p", MaxRows: 2}, &pgproto3.Execute{Portal: "bxe_p"}, &pgproto3.Sync{})
	if join(got) != "row 1 row 2 s row 3 row 4 s row 5 C FETCH 1 C FETCH 0 Z T" {
		t.Errorf("FETCH in parts: %q, want PostgreSQL's", got)
	}
	pipeRaw(t, p, 1, &pgproto3.Query{String: "COMMIT"})

	// A statement prepared while its table was local, run after it was
	// distributed; a FETCH prepared for a worker's cursor, run for one
	// over a distributed table.
	exec(t, c, "DROP TABLE IF EXISTS bxe_l", simple)
	exec(t, c, "CREATE TABLE bxe_l (a int PRIMARY KEY)", simple)
	t.Cleanup(func() {
		_, _ = c.Exec(context.Background(), "SELECT undistribute_table('bxe_l')", simple)
		_, _ = c.Exec(context.Background(), "DROP TABLE IF EXISTS bxe_l", simple)
	})
	exec(t, c, "INSERT INTO bxe_l SELECT generate_series(1, 5)", simple)
	pipeRaw(t, p, 1, &pgproto3.Parse{Name: "bxe_decl", Query: "DECLARE bxe_c2 CURSOR FOR SELECT a FROM bxe_l ORDER BY a"},
		&pgproto3.Parse{Name: "bxe_fetch", Query: "FETCH 2 FROM bxe_c2"}, &pgproto3.Sync{})
	exec(t, c, "SELECT create_distributed_table('bxe_l', 'a', shard_count => 4)", simple)
	pipeRaw(t, p, 1, &pgproto3.Query{String: "BEGIN"})
	got = pipeRaw(t, p, 1, &pgproto3.Bind{PreparedStatement: "bxe_decl"}, &pgproto3.Execute{},
		&pgproto3.Bind{PreparedStatement: "bxe_fetch"}, &pgproto3.Execute{}, &pgproto3.Sync{})
	if join(got) != "C DECLARE CURSOR row 1 row 2 C FETCH 2 Z T" {
		t.Errorf("prepared DECLARE and FETCH after the table was distributed: %q", got)
	}
	pipeRaw(t, p, 1, &pgproto3.Query{String: "COMMIT"})

	// Parameter types as PostgreSQL infers them.
	sd, err := c.PgConn().Prepare(ctx, "bxe_cdt", "SELECT create_distributed_table($1, $2, shard_count => $3)", nil)
	if err != nil || fmt.Sprint(sd.ParamOIDs) != "[25 25 23]" {
		t.Errorf("create_distributed_table's parameters: %v, %v; want [25 25 23]", sd, err)
	}
	exec(t, c, "BEGIN", simple)
	sd, err = c.PgConn().Prepare(ctx, "bxe_dc", "DECLARE bxe_c3 CURSOR FOR SELECT id FROM bxe_d WHERE id > $1::int AND v <> $2", nil)
	if err != nil || fmt.Sprint(sd.ParamOIDs) != "[23 25]" {
		t.Errorf("DECLARE's parameters: %v, %v; want [23 25]", sd, err)
	}
	exec(t, c, "ROLLBACK", simple)
}
