package coordinator_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestScalarSubqueriesOverReferenceTables: a query made only of scalar
// subqueries over two reference tables (issue 10 found it crashing the
// session with XX000) answers what PostgreSQL answers, in both protocols.
func TestScalarSubqueriesOverReferenceTables(t *testing.T) {
	cl := pgtest.Shared(t)
	co := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, co.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	exec(t, c, "DROP TABLE IF EXISTS sq_ref1, sq_ref2, sq_dist")
	exec(t, c, "CREATE TABLE sq_ref1 (id int PRIMARY KEY)")
	exec(t, c, "CREATE TABLE sq_ref2 (id int PRIMARY KEY)")
	exec(t, c, "CREATE TABLE sq_dist (id int PRIMARY KEY, v int)")
	exec(t, c, "INSERT INTO sq_ref1 SELECT generate_series(1, 3)")
	exec(t, c, "INSERT INTO sq_ref2 SELECT generate_series(1, 5)")
	exec(t, c, "INSERT INTO sq_dist SELECT g, g FROM generate_series(1, 7) g")
	exec(t, c, "SELECT create_reference_table('sq_ref1')", simple)
	exec(t, c, "SELECT create_reference_table('sq_ref2')", simple)
	exec(t, c, "SELECT create_distributed_table('sq_dist', 'id')", simple)
	t.Cleanup(func() {
		for _, q := range []string{"SELECT undistribute_table('sq_ref1')", "SELECT undistribute_table('sq_ref2')",
			"SELECT undistribute_table('sq_dist')", "DROP TABLE IF EXISTS sq_ref1, sq_ref2, sq_dist"} {
			_, _ = c.Exec(ctx, q, simple)
		}
	})
	for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeCacheStatement} {
		var a, b int64
		err := c.QueryRow(ctx, "SELECT (SELECT count(*) FROM sq_ref1), (SELECT count(*) FROM sq_ref2)", mode).Scan(&a, &b)
		if err != nil || a != 3 || b != 5 {
			t.Errorf("mode %v: got %d, %d, %v; want 3, 5", mode, a, b, err)
		}
		var n int64
		if err := c.QueryRow(ctx, "WITH x AS (SELECT count(*) AS c FROM sq_ref2) SELECT c FROM x", mode).Scan(&n); err != nil || n != 5 {
			t.Errorf("mode %v: CTE over a reference table: %d, %v; want 5", mode, n, err)
		}
		if err := c.QueryRow(ctx, "SELECT sum(id) FROM (SELECT id FROM sq_ref2 WHERE id > 1) s", mode).Scan(&n); err != nil || n != 14 {
			t.Errorf("mode %v: FROM-subquery over a reference table: %d, %v; want 14", mode, n, err)
		}
		// With a distributed table among them it is answered or refused
		// (0A000), never a crash.
		err = c.QueryRow(ctx, "SELECT (SELECT count(*) FROM sq_ref1), (SELECT count(*) FROM sq_dist)", mode).Scan(&a, &b)
		if err != nil && sqlState(err) != "0A000" {
			t.Errorf("mode %v: ref and dist scalar subqueries: %v, want the answer or 0A000", mode, err)
		} else if err == nil && (a != 3 || b != 7) {
			t.Errorf("mode %v: got %d, %d; want 3, 7", mode, a, b)
		}
		if err := c.QueryRow(ctx, "SELECT 1", mode).Scan(&a); err != nil {
			t.Fatalf("mode %v: the session did not survive: %v", mode, err)
		}
	}
}

// TestInvalidEncodingCheckedFirst: PostgreSQL checks a Query's or Parse's
// text against the client encoding as it arrives, before the failed
// transaction's 25P02 and before any row is written; the coordinator,
// answering a failed transaction itself or splitting a statement between
// workers, gives the same 22021 (and the transaction stays failed).
func TestInvalidEncodingCheckedFirst(t *testing.T) {
	cl := pgtest.Shared(t)
	co := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c0 := connect(t, co.Addr())
	testTable(t, c0, "enc_dist", "(id int PRIMARY KEY, t text)", "SELECT create_distributed_table('enc_dist', 'id')")
	bad := "SELECT 'caf\xc3'''"
	// A multi-row INSERT over several shards with a duplicate key in one
	// row and bad text in another: the text is reported, nothing written.
	exec(t, c0, "INSERT INTO enc_dist (id) VALUES (1)")
	for _, via := range []string{"coordinator", "postgres"} {
		c := c0.PgConn()
		if via == "postgres" {
			c = connect(t, cl.Servers[0].Addr()).PgConn()
			if _, err := c.Exec(ctx, "CREATE TEMP TABLE enc_dist (id int PRIMARY KEY, t text); INSERT INTO enc_dist (id) VALUES (1)").ReadAll(); err != nil {
				t.Fatal(err)
			}
		}
		ins := "INSERT INTO enc_dist (id, t) VALUES (1, 'a')"
		for i := 2; i <= 20; i++ {
			ins += fmt.Sprintf(", (%d, 'x')", i)
		}
		ins += ", (21, 'caf\xc3''')"
		if _, err := c.Exec(ctx, ins).ReadAll(); sqlState(err) != "22021" {
			t.Errorf("%s: multi-row INSERT with a duplicate key and bad text: %v, want 22021", via, err)
		}
	}
	var n int
	if err := c0.QueryRow(ctx, "SELECT count(*) FROM enc_dist").Scan(&n); err != nil || n != 1 {
		t.Errorf("%d rows after the failed INSERT (%v), want 1", n, err)
	}
	// The transaction fails on the coordinator (a refusal before any
	// worker saw the transaction, or after one did), or on a worker.
	for _, fail := range []string{"BEGIN", "BEGIN; SELECT 1", "BEGIN; SELECT 1/0"} {
		for _, via := range []string{"coordinator", "postgres"} {
			addr := co.Addr()
			if via == "postgres" {
				addr = cl.Servers[0].Addr()
			}
			c := connect(t, addr).PgConn()
			if _, err := c.Exec(ctx, fail).ReadAll(); err != nil && sqlState(err) != "22012" {
				t.Fatalf("%s: %s: %v", via, fail, err)
			}
			switch {
			case fail == "BEGIN; SELECT 1/0":
			case via == "coordinator":
				// A refusal fails the transaction.
				if _, err := c.Exec(ctx, "SELECT * FROM enc_dist FOR UPDATE").ReadAll(); sqlState(err) != "0A000" {
					t.Fatalf("refusal: %v", err)
				}
			default:
				_, _ = c.Exec(ctx, "SELECT 1/0").ReadAll()
			}
			what := via + " after " + fail
			if _, err := c.Exec(ctx, bad).ReadAll(); sqlState(err) != "22021" {
				t.Errorf("%s: invalid UTF-8 Query in a failed transaction: %v, want 22021", what, err)
			}
			if _, err := c.Prepare(ctx, "", bad, nil); sqlState(err) != "22021" {
				t.Errorf("%s: invalid UTF-8 Parse in a failed transaction: %v, want 22021", what, err)
			}
			if _, err := c.Exec(ctx, "SELECT 1").ReadAll(); sqlState(err) != "25P02" {
				t.Errorf("%s: the transaction is no longer failed: %v", what, err)
			}
			if _, err := c.Exec(ctx, "ROLLBACK").ReadAll(); err != nil {
				t.Errorf("%s: %v", what, err)
			}
		}
	}
}

// TestLatin1TextNotCheckedAsUTF8: a session in client_encoding LATIN1 (at
// startup, or SET and then through RESET ALL rolled back) sends bytes that
// are not UTF-8; they are LATIN1 text, converted by the worker, never 22021.
func TestLatin1TextNotCheckedAsUTF8(t *testing.T) {
	cl := pgtest.Shared(t)
	co := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	testTable(t, connect(t, co.Addr()), "lat_d", "(k text PRIMARY KEY)", "SELECT create_distributed_table('lat_d', 'k')")
	inserted := 0
	for _, startup := range []bool{true, false} {
		params := map[string]string{}
		if startup {
			params["client_encoding"] = "LATIN1"
		}
		c := connectWith(t, co.Addr(), params).PgConn()
		script := []string{"BEGIN", "RESET ALL", "ROLLBACK"}
		if !startup {
			script = append([]string{"SET client_encoding TO LATIN1"}, script...)
		}
		for _, q := range append(script, "SELECT 'k\xfce'::text") {
			res, err := c.Exec(ctx, q).ReadAll()
			if err != nil {
				t.Fatalf("startup %v: %s: %v", startup, q, err)
			}
			if q[0] == 'S' && q[1] == 'E' && q[2] == 'L' && string(res[0].Rows[0][0]) != "k\xfce" {
				t.Errorf("startup %v: got %q", startup, res[0].Rows[0][0])
			}
		}
		// Keys in LATIN1 land in the shard of their server-encoded value.
		for _, k := range []string{"\xfc", "k\xfce", "\xe9t\xe9", "na\xefve"} {
			if _, err := c.Exec(ctx, fmt.Sprintf("INSERT INTO lat_d (k) VALUES ('%s%v')", k, startup)).ReadAll(); err != nil {
				t.Fatalf("startup %v: insert: %v", startup, err)
			}
			inserted++
		}
	}
	if total, _, _ := shardRows(t, cl.Servers[0].Addr(), "public.lat_d", "k"); total != inserted {
		t.Errorf("%d of %d rows in the shard PostgreSQL's hash gives", total, inserted)
	}
}

// TestStatementErrorBeforeParameterError: PostgreSQL parses a statement
// before it converts the Bind's parameters, so a constant that does not
// read under the session's DateStyle (22008) is reported before a
// distribution-value parameter out of range for its declared type (22003).
func TestStatementErrorBeforeParameterError(t *testing.T) {
	cl := pgtest.Shared(t)
	co := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	testTable(t, connect(t, co.Addr()), "bv_dist", "(k int8 PRIMARY KEY, d date)", "SELECT create_distributed_table('bv_dist', 'k')")
	for _, via := range []string{"coordinator", "postgres"} {
		addr := co.Addr()
		if via == "postgres" {
			addr = cl.Servers[1].Addr()
		}
		c := connectWith(t, addr, map[string]string{"DateStyle": "ISO, YMD"}).PgConn()
		if via == "postgres" {
			if _, err := c.Exec(ctx, "CREATE TEMP TABLE bv_dist (k int8 PRIMARY KEY, d date)").ReadAll(); err != nil {
				t.Fatal(err)
			}
		}
		for _, tc := range []struct{ sql, val, want string }{
			{"UPDATE bv_dist SET d = '12/19/2001' WHERE k = $1", "1099511627776", "22008"},
			{"UPDATE bv_dist SET d = '2001-12-19' WHERE k = $1", "1099511627776", "22003"},
			{"SELECT k FROM bv_dist WHERE k = $1 AND d = '12/19/2001'", "x", "22008"},
		} {
			res := c.ExecParams(ctx, tc.sql, [][]byte{[]byte(tc.val)}, []uint32{21}, nil, nil).Read()
			if sqlState(res.Err) != tc.want {
				t.Errorf("%s: %s with $1 = %s: %v, want %s", via, tc.sql, tc.val, res.Err, tc.want)
			}
		}
	}
}

// TestShardStatementThatWouldNotParse: pg_query deparses (0).a as 0.a,
// which does not parse; the statement is never sent so rewritten, and the
// client gets PostgreSQL's own error (42809) for it (fuzz finding).
func TestShardStatementThatWouldNotParse(t *testing.T) {
	cl := pgtest.Shared(t)
	co := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, co.Addr())
	testTable(t, c, "np_dist", "(k int8 PRIMARY KEY)", "SELECT create_distributed_table('np_dist', 'k')")
	direct := connect(t, cl.Servers[1].Addr())
	exec(t, direct, "CREATE TEMP TABLE np_dist (k int8 PRIMARY KEY)")
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		for _, q := range []string{"SELECT (0).a FROM np_dist", "SELECT (0).a FROM np_dist WHERE k = 1"} {
			_, want := direct.Exec(ctx, q, mode)
			if _, err := c.Exec(ctx, q, mode); sqlState(err) != sqlState(want) || want == nil {
				t.Errorf("%v: %s: %v, PostgreSQL %v", mode, q, err, want)
			}
		}
	}
}
