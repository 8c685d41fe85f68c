package coordinator_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestReferenceWriteTakesInWorker: a transaction that runs on one worker
// and then writes a reference table takes the other worker in with the
// write (its BEGIN sent ahead of it, one round trip). In both protocols
// the transaction's mode reaches the worker taken in, the write commits
// or rolls back with the transaction on every copy, and a write that
// fails there fails the transaction as PostgreSQL's does.
func TestReferenceWriteTakesInWorker(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	testTable(t, c, "jp_dist", "(id int PRIMARY KEY, v int)", "SELECT create_distributed_table('jp_dist', 'id', shard_count => 2)")
	testTable(t, c, "jp_ref", "(id int PRIMARY KEY, n int)", "SELECT create_reference_table('jp_ref')")
	exec(t, c, "INSERT INTO jp_dist SELECT g, 0 FROM generate_series(1, 20) g", simple)
	exec(t, c, "INSERT INTO jp_ref SELECT g, 0 FROM generate_series(1, 3) g", simple)
	keys := keysByWorker(t, c, "jp_dist", 20)
	var on []int
	for _, k := range keys {
		on = append(on, k)
	}
	refCopies := func() []string {
		var out []string
		for _, s := range cl.Servers {
			shard := queryString(t, connect(t, cl.Servers[0].Addr()), "SELECT shardid::text FROM pgfleet.shards WHERE table_name = 'public.jp_ref'")
			out = append(out, queryString(t, connect(t, s.Addr()), "SELECT string_agg(id || ':' || n, ',' ORDER BY id) FROM pgfleet_shards.jp_ref_"+shard))
		}
		return out
	}
	for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeCacheStatement} {
		for _, first := range on { // the transaction starts on each worker in turn
			tx, err := c.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "UPDATE jp_dist SET v = v + 1 WHERE id = $1", mode, first); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "UPDATE jp_ref SET n = n + 1 WHERE id = 1", mode); err != nil {
				t.Fatalf("%v: reference write taking in the other worker: %v", mode, err)
			}
			for _, k := range on {
				var iso string
				if err := tx.QueryRow(ctx, "SELECT current_setting('transaction_isolation') FROM jp_dist WHERE id = $1", mode, k).Scan(&iso); err != nil {
					t.Fatal(err)
				}
				if iso != "repeatable read" {
					t.Errorf("%v: transaction_isolation on the worker of key %d: %s", mode, k, iso)
				}
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatalf("%v: commit: %v", mode, err)
			}

			// A write that fails on the worker taken in.
			before := refCopies()
			tx, err = c.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "UPDATE jp_dist SET v = v + 100 WHERE id = $1", mode, first); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "UPDATE jp_ref SET id = 2 WHERE id = 1", mode); sqlState(err) != "23505" {
				t.Errorf("%v: duplicate key on the worker taken in: %v, want 23505", mode, err)
			}
			if _, err := tx.Exec(ctx, "SELECT 1", mode); sqlState(err) != "25P02" {
				t.Errorf("%v: statement after the failure: %v, want 25P02", mode, err)
			}
			_ = tx.Rollback(ctx)
			if after := refCopies(); after[0] != before[0] || after[1] != before[1] {
				t.Errorf("%v: reference copies after the rolled back transaction: %v, before %v", mode, after, before)
			}
		}
	}
	copies := refCopies()
	if copies[0] != "1:4,2:0,3:0" || copies[1] != copies[0] {
		t.Errorf("reference copies: %v, want 1:4,2:0,3:0 on both", copies)
	}
	if got := queryString(t, c, "SELECT sum(v)::text FROM jp_dist"); got != "4" {
		t.Errorf("distributed rows' sum: %s, want 4 (the failed transactions rolled back)", got)
	}
	for _, s := range cl.Servers {
		if got := queryString(t, connect(t, s.Addr()), "SELECT count(*)::text FROM pg_prepared_xacts"); got != "0" {
			t.Errorf("%s: %s prepared transactions left", s.Addr(), got)
		}
	}
}

// keysByWorker is a key of table (an int distribution column id, keys 1
// to n) on each of two workers, by the worker's port.
func keysByWorker(t *testing.T, c *pgx.Conn, table string, n int) map[string]int {
	t.Helper()
	keys := map[string]int{}
	for k := 1; k <= n && len(keys) < 2; k++ {
		keys[queryString(t, c, "SELECT inet_server_port()::text FROM "+table+" WHERE id = $1", k)] = k
	}
	if len(keys) != 2 {
		t.Fatalf("keys of %s by worker: %v", table, keys)
	}
	return keys
}

// TestStatementsAfterDDLInTransaction: after DDL in a transaction block,
// a reference write's statement the worker connection prepared before
// (for another session) is parsed again, as the client's own Parse would
// be on PostgreSQL: a new overload of a function it calls is the one
// called, and a column type a ROLLBACK TO SAVEPOINT put back is the one
// its parameters take. Found by the adversary round on shared reference
// write statements.
func TestStatementsAfterDDLInTransaction(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	prepared := pgx.QueryExecModeCacheStatement
	c := connect(t, srv.Addr())
	testTable(t, c, "ov_ref", "(k int, v int)", "SELECT create_reference_table('ov_ref')")
	drop := "DROP FUNCTION IF EXISTS ov_f(numeric); DROP FUNCTION IF EXISTS ov_f(int)"
	exec(t, c, drop, simple)
	exec(t, c, "CREATE FUNCTION ov_f(numeric) RETURNS int IMMUTABLE LANGUAGE sql AS 'SELECT 100'", simple)
	t.Cleanup(func() { _, _ = c.Exec(ctx, drop, simple) })
	// write runs ddl (if any) and sql with k in a transaction block.
	write := func(conn *pgx.Conn, ddl, sql string, k int) {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ddl != "" {
			if _, err := tx.Exec(ctx, ddl, simple); err != nil {
				t.Fatal(err)
			}
		}
		rows, err := tx.Query(ctx, sql, prepared, strconv.Itoa(k), "1")
		if err == nil {
			rows.Close()
			err = rows.Err()
		}
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// (A routed statement still binds the connection's old copy there:
	// known, see the README.)
	for _, tc := range []struct{ sql, fn, rows string }{
		{"INSERT INTO ov_ref VALUES ($1::int, ov_f($2::int))", "ov_f", "SELECT string_agg(k || ':' || v, ',' ORDER BY k) FROM ov_ref"},
	} {
		for k := 1; k <= 2; k++ {
			write(c, "", tc.sql, k) // fn(numeric): 100
		}
		write(connect(t, srv.Addr()), "CREATE FUNCTION "+tc.fn+"(int) RETURNS int IMMUTABLE LANGUAGE sql AS 'SELECT 200'", tc.sql, 3)
		if got := queryString(t, c, tc.rows); got != "1:100,2:100,3:200" {
			t.Errorf("%s: rows %s, want 1:100,2:100,3:200 (%s(int) once it exists)", tc.sql, got, tc.fn)
		}
	}

	// A column type changed and put back by ROLLBACK TO SAVEPOINT.
	testTable(t, c, "rb_ref", "(k int, v int)", "SELECT create_reference_table('rb_ref')")
	describe := pgx.QueryExecModeDescribeExec // a Parse of the client's at every execution
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		sql  string
		args []any
	}{
		{"INSERT INTO rb_ref VALUES ($1, $2)", []any{1, 10}},
		{"SAVEPOINT s", nil},
		{"ALTER TABLE rb_ref ALTER COLUMN v TYPE text", nil},
		{"INSERT INTO rb_ref VALUES ($1, $2)", []any{2, "abc"}},
		{"ROLLBACK TO SAVEPOINT s", nil},
		{"INSERT INTO rb_ref VALUES ($1, $2)", []any{3, 30}},
	}
	for _, st := range steps {
		if _, err := tx.Exec(ctx, st.sql, append([]any{describe}, st.args...)...); err != nil {
			t.Fatalf("%s %v: %v", st.sql, st.args, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := queryString(t, c, "SELECT string_agg(k || ':' || v, ',' ORDER BY k) || ' ' || pg_typeof(min(v))::text FROM rb_ref"); got != "1:10,3:30 integer" {
		t.Errorf("rows after ROLLBACK TO SAVEPOINT undid the ALTER: %s, want 1:10,3:30 integer", got)
	}
}

// TestBeginTextEndingInComment: the client's BEGIN text, which the
// coordinator sends again to each worker the transaction takes in with
// what must follow it (savepoints to set again, COMMIT AND CHAIN), may
// end in a -- comment. Found by the adversary round: the comment hid
// the savepoint (3B001) and the chained READ ONLY.
func TestBeginTextEndingInComment(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	c := connect(t, srv.Addr())
	testTable(t, c, "bc_dist", "(id int PRIMARY KEY, v int)", "SELECT create_distributed_table('bc_dist', 'id', shard_count => 2)")
	testTable(t, c, "bc_ref", "(id int PRIMARY KEY, v int)", "SELECT create_reference_table('bc_ref')")
	exec(t, c, "INSERT INTO bc_dist SELECT g, 0 FROM generate_series(1, 20) g", simple)
	// A key on the second worker: the reference write then takes in the first.
	key := keysByWorker(t, c, "bc_dist", 20)[queryString(t, connect(t, cl.Servers[1].Addr()), "SELECT inet_server_port()::text")]
	run := func(sqls ...string) error {
		for _, q := range sqls {
			if _, err := c.Exec(ctx, q, simple); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		return nil
	}
	if err := run("BEGIN -- c", fmt.Sprintf("UPDATE bc_dist SET v = 1 WHERE id = %d", key), "SAVEPOINT s1",
		"INSERT INTO bc_ref VALUES (1, 1)", "ROLLBACK TO SAVEPOINT s1", "INSERT INTO bc_ref VALUES (2, 2)", "COMMIT"); err != nil {
		t.Errorf("savepoint after a BEGIN ending in a comment: %v", err)
		_ = run("ROLLBACK")
	}
	if got := queryString(t, c, "SELECT string_agg(id::text, ',' ORDER BY id) FROM bc_ref"); got != "2" {
		t.Errorf("reference rows: %s, want 2", got)
	}
	if err := run("BEGIN READ ONLY -- c", "COMMIT AND CHAIN", fmt.Sprintf("SELECT v FROM bc_dist WHERE id = %d", key)); err != nil {
		t.Fatal(err)
	}
	if err := run("SELECT 1/0"); sqlState(err) != "22012" {
		t.Errorf("1/0: %v", err)
	}
	if err := run("ROLLBACK AND CHAIN"); err != nil {
		t.Fatal(err)
	}
	if got := queryString(t, c, "SELECT current_setting('transaction_read_only')"); got != "on" {
		t.Errorf("transaction_read_only after ROLLBACK AND CHAIN: %s, want on", got)
	}
	if err := run("INSERT INTO bc_ref VALUES (3, 3)"); sqlState(err) != "25006" {
		t.Errorf("reference write in the chained READ ONLY transaction: %v, want 25006", err)
	}
	_ = run("ROLLBACK")
	if got := queryString(t, c, "SELECT string_agg(id::text, ',' ORDER BY id) FROM bc_ref"); got != "2" {
		t.Errorf("reference rows: %s, want 2", got)
	}
}

// TestOverloadInBatchRefused: a batch of several statements that creates
// functions makes them on the default node only; one that would add an
// overload of an existing function is refused (the other workers would
// call the old one: found beside the adversary round), new names still
// go through.
func TestOverloadInBatchRefused(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	c := connect(t, srv.Addr())
	drop := "DROP FUNCTION IF EXISTS bo_f(numeric); DROP FUNCTION IF EXISTS bo_f(int); DROP FUNCTION IF EXISTS bo_a(); DROP FUNCTION IF EXISTS bo_b()"
	for _, s := range cl.Servers {
		exec(t, connect(t, s.Addr()), drop, simple)
	}
	t.Cleanup(func() {
		for _, s := range cl.Servers {
			if w, err := pgx.Connect(ctx, pgtest.URL(s.Addr())); err == nil {
				_, _ = w.Exec(ctx, drop, simple)
				_ = w.Close(ctx)
			}
		}
	})
	exec(t, c, "CREATE FUNCTION bo_f(numeric) RETURNS int IMMUTABLE LANGUAGE sql AS 'SELECT 100'", simple)
	_, err := c.Exec(ctx, "CREATE FUNCTION bo_f(int) RETURNS int IMMUTABLE LANGUAGE sql AS 'SELECT 200'; "+
		"CREATE FUNCTION bo_a() RETURNS int LANGUAGE sql AS 'SELECT 1'", simple)
	if sqlState(err) != "0A000" {
		t.Errorf("a batch adding an overload: %v, want 0A000", err)
	}
	exec(t, c, "CREATE FUNCTION bo_a() RETURNS int LANGUAGE sql AS 'SELECT 1'; CREATE FUNCTION bo_b() RETURNS int LANGUAGE sql AS 'SELECT 2'", simple)
	for i, s := range cl.Servers {
		want := "bo_f(numeric)"
		if i == 0 {
			want = "bo_a(),bo_b(),bo_f(numeric)" // the batch of new names: the default node
		}
		got := queryString(t, connect(t, s.Addr()), "SELECT string_agg(oid::regprocedure::text, ',' ORDER BY 1) FROM pg_proc WHERE proname LIKE 'bo\\_%'")
		if got != want {
			t.Errorf("functions on %s: %s, want %s", s.Addr(), got, want)
		}
	}
}

// TestReferenceWritesBatchedInBlock: in a transaction block, batches of
// reference writes (each copy's answer read in its own round trip, so the
// batch's Sync is answered without the worker) mixed with statements
// relayed to a worker, and one failing, give PostgreSQL's answers, and the
// block commits or rolls back whole.
func TestReferenceWritesBatchedInBlock(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	testTable(t, c, "rwb_dist", "(id int PRIMARY KEY, v int)", "SELECT create_distributed_table('rwb_dist', 'id', shard_count => 2)")
	testTable(t, c, "rwb_ref", "(id int PRIMARY KEY, n int)", "SELECT create_reference_table('rwb_ref')")
	exec(t, c, "INSERT INTO rwb_dist SELECT g, 0 FROM generate_series(1, 10) g", simple)
	exec(t, c, "INSERT INTO rwb_ref SELECT g, 0 FROM generate_series(1, 3) g", simple)
	for round := 0; round < 3; round++ {
		tx, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b := &pgx.Batch{}
		b.Queue("UPDATE rwb_ref SET n = n + 1 WHERE id = 1")
		b.Queue("UPDATE rwb_ref SET n = n + 10 WHERE id = 2 RETURNING n")
		br := tx.SendBatch(ctx, b)
		if tag, err := br.Exec(); err != nil || tag.String() != "UPDATE 1" {
			t.Fatalf("round %d: first reference write: %q, %v", round, tag, err)
		}
		var n int
		if err := br.QueryRow().Scan(&n); err != nil || n != 10*(round+1) {
			t.Fatalf("round %d: second reference write: %d, %v, want %d", round, n, err, 10*(round+1))
		}
		if err := br.Close(); err != nil {
			t.Fatal(err)
		}
		// A batch mixing a worker's statements with a reference write.
		b = &pgx.Batch{}
		b.Queue("UPDATE rwb_dist SET v = v + 1 WHERE id = $1", round+1)
		b.Queue("UPDATE rwb_ref SET n = n + 100 WHERE id = 3")
		b.Queue("SELECT sum(v) FROM rwb_dist")
		br = tx.SendBatch(ctx, b)
		for i := 0; i < 2; i++ {
			if _, err := br.Exec(); err != nil {
				t.Fatalf("round %d: mixed batch statement %d: %v", round, i, err)
			}
		}
		var sum int
		if err := br.QueryRow().Scan(&sum); err != nil || sum != round+1 {
			t.Fatalf("round %d: sum in the block: %d, %v, want %d", round, sum, err, round+1)
		}
		if err := br.Close(); err != nil {
			t.Fatal(err)
		}
		if got := queryString(t, tx.Conn(), "SELECT string_agg(id || ':' || n, ',' ORDER BY id) FROM rwb_ref"); got != fmt.Sprintf("1:%d,2:%d,3:%d", round+1, 10*(round+1), 100*(round+1)) {
			t.Errorf("round %d: reference rows in the block: %s", round, got)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("round %d: commit: %v", round, err)
		}
	}
	// A batch whose second reference write fails: the block fails there,
	// and its rollback undoes the first.
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b := &pgx.Batch{}
	b.Queue("UPDATE rwb_ref SET n = n + 1 WHERE id = 1")
	b.Queue("UPDATE rwb_ref SET id = 2 WHERE id = 1")
	br := tx.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		t.Fatalf("first write of the failing batch: %v", err)
	}
	if _, err := br.Exec(); sqlState(err) != "23505" {
		t.Errorf("duplicate key in the batch: %v, want 23505", err)
	}
	_ = br.Close()
	if _, err := tx.Exec(ctx, "SELECT 1"); sqlState(err) != "25P02" {
		t.Errorf("statement after the failed batch: %v, want 25P02", err)
	}
	_ = tx.Rollback(ctx)
	if got := queryString(t, c, "SELECT string_agg(id || ':' || n, ',' ORDER BY id) FROM rwb_ref"); got != "1:3,2:30,3:300" {
		t.Errorf("reference rows at the end: %s, want 1:3,2:30,3:300", got)
	}
	if got := queryString(t, c, "SELECT sum(v)::text FROM rwb_dist"); got != "3" {
		t.Errorf("distributed rows' sum at the end: %s, want 3", got)
	}
}

// TestReferenceWriteInFailedBlockOneError: in a failed transaction block,
// an extended-protocol reference write (Parse, Bind, Execute, Sync) gets
// one 25P02, as from PostgreSQL, which skips the rest of the batch after
// the refused Parse (adversary finding: its Execute answered a second).
func TestReferenceWriteInFailedBlockOneError(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	testTable(t, c, "rfb_ref", "(k int PRIMARY KEY, v text)", "SELECT create_reference_table('rfb_ref')")
	testTable(t, c, "rfb_dist", "(k int PRIMARY KEY, v text)", "SELECT create_distributed_table('rfb_dist', 'k')")
	p := protoDial(t, srv.Addr(), "failed block")
	if got := pipeRaw(t, p, 1, &pgproto3.Query{String: "BEGIN"}); !slices.Equal(got, []string{"C BEGIN", "Z T"}) {
		t.Fatalf("BEGIN: %q", got)
	}
	got := pipeRaw(t, p, 1, &pgproto3.Parse{Query: "SELECT 1/0"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{})
	if !slices.Equal(got, []string{"error 22012", "Z E"}) {
		t.Fatalf("1/0: %q", got)
	}
	for _, q := range []string{"INSERT INTO rfb_ref VALUES ($1, 'x')", "UPDATE rfb_ref SET v = 'y' WHERE k = $1", "INSERT INTO rfb_dist VALUES ($1, 'x')"} {
		got := pipeRaw(t, p, 1, &pgproto3.Parse{Query: q}, &pgproto3.Bind{Parameters: [][]byte{[]byte("5")}},
			&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{})
		if !slices.Equal(got, []string{"error 25P02", "Z E"}) {
			t.Errorf("%s in a failed block: %q, want one 25P02 and Z E", q, got)
		}
	}
	if got := pipeRaw(t, p, 1, &pgproto3.Query{String: "ROLLBACK"}); !slices.Equal(got, []string{"C ROLLBACK", "Z I"}) {
		t.Errorf("ROLLBACK: %q", got)
	}
}

// TestParseAfterSetLocal: after SET LOCAL and its Sync, a statement
// parsed, bound and executed in one batch is read under the settings in
// force, as on PostgreSQL (adversary finding: refused with 0A000 "parsed
// under other settings", the coordinator counting its own Parse as a
// settings change still unanswered); also after a reference write took the
// block to a second worker.
func TestParseAfterSetLocal(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	testTable(t, c, "psl_ref", "(k int PRIMARY KEY, v text)", "SELECT create_reference_table('psl_ref')")
	p := protoDial(t, srv.Addr(), "set local")
	run := func(q string, args ...string) []string {
		var params [][]byte
		for _, a := range args {
			params = append(params, []byte(a))
		}
		return pipeRaw(t, p, 1, &pgproto3.Parse{Query: q}, &pgproto3.Bind{Parameters: params}, &pgproto3.Execute{}, &pgproto3.Sync{})
	}
	for _, first := range []string{"", "INSERT INTO psl_ref VALUES ($1, 'x')"} {
		for _, c := range []struct{ set, q, want string }{
			{"SET LOCAL work_mem = '7MB'", "SELECT '2024-01-01 00:00+00'::timestamptz::text", "row 2024-01-01 00:00:00+00"},
			{"SET LOCAL TimeZone = 'Asia/Tokyo'", "SELECT '2024-01-01 00:00+00'::timestamptz::text", "row 2024-01-01 09:00:00+09"},
			{"SET LOCAL DateStyle = 'German'", "SELECT '2024-01-01'::date::text", "row 01.01.2024"},
		} {
			pipeRaw(t, p, 1, &pgproto3.Query{String: "BEGIN"})
			if first != "" {
				if got := run(first, "1"); !slices.Equal(got, []string{"C INSERT 0 1", "Z T"}) {
					t.Fatalf("%s: %q", first, got)
				}
			}
			if got := run(c.set); !slices.Equal(got, []string{"C SET", "Z T"}) {
				t.Fatalf("%s: %q", c.set, got)
			}
			if got := run(c.q); !slices.Equal(got, []string{c.want, "C SELECT 1", "Z T"}) {
				t.Errorf("after %q (%s): %s: %q, want %s", first, c.set, c.q, got, c.want)
			}
			pipeRaw(t, p, 1, &pgproto3.Query{String: "ROLLBACK"})
		}
	}
}

// TestSetLocalReportedBackAcrossWorkers: a SET LOCAL of a reported setting
// in a block over several workers is reported back (ParameterStatus) when
// the block ends, by ROLLBACK or COMMIT, as PostgreSQL reports it; a driver
// that follows TimeZone from those reports otherwise kept the block's.
func TestSetLocalReportedBackAcrossWorkers(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	ctx := context.Background()
	testTable(t, c, "slr_ref", "(k int PRIMARY KEY, v text)", "SELECT create_reference_table('slr_ref')")
	zone := c.PgConn().ParameterStatus("TimeZone")
	if zone == "" || zone == "Asia/Tokyo" {
		t.Fatalf("TimeZone at login: %q", zone)
	}
	for i, end := range []string{"ROLLBACK", "COMMIT"} {
		tx, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO slr_ref VALUES ($1, 'x')", i); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SET LOCAL TimeZone = 'Asia/Tokyo'"); err != nil {
			t.Fatal(err)
		}
		if got := c.PgConn().ParameterStatus("TimeZone"); got != "Asia/Tokyo" {
			t.Errorf("TimeZone reported in the block: %q, want Asia/Tokyo", got)
		}
		if _, err := tx.Exec(ctx, end); err != nil {
			t.Fatalf("%s: %v", end, err)
		}
		if got := c.PgConn().ParameterStatus("TimeZone"); got != zone {
			t.Errorf("TimeZone reported after %s: %q, want %q", end, got, zone)
		}
		if got := queryString(t, c, "SHOW TimeZone"); got != zone {
			t.Errorf("SHOW TimeZone after %s: %q, want %q", end, got, zone)
		}
	}
	// On the wire: after the CommandComplete, before ReadyForQuery, as
	// PostgreSQL sends it.
	p := protoDial(t, srv.Addr(), "report order")
	for _, q := range []string{"BEGIN", "INSERT INTO slr_ref VALUES (10, 'x')", "SET LOCAL TimeZone = 'Asia/Tokyo'"} {
		pipeRaw(t, p, 1, &pgproto3.Query{String: q})
	}
	if got, want := reports(t, p, "ROLLBACK"), []string{"C ROLLBACK", "S TimeZone=" + zone, "Z I"}; !slices.Equal(got, want) {
		t.Errorf("ROLLBACK of the block on the wire: %q, want %q", got, want)
	}
	// The next block over both workers: a SAVEPOINT reports nothing (it
	// repeated the last block's end report, the zone before this block's
	// SET LOCAL).
	for _, q := range []string{"BEGIN", "INSERT INTO slr_ref VALUES (11, 'x')", "SET LOCAL TimeZone = 'Europe/Paris'"} {
		pipeRaw(t, p, 1, &pgproto3.Query{String: q})
	}
	if got, want := reports(t, p, "SAVEPOINT s"), []string{"C SAVEPOINT", "Z T"}; !slices.Equal(got, want) {
		t.Errorf("SAVEPOINT in the next block on the wire: %q, want %q", got, want)
	}
	pipeRaw(t, p, 1, &pgproto3.Query{String: "ROLLBACK"})
}

// reports sends sql as a simple Query and returns its CommandComplete,
// ParameterStatus and ReadyForQuery messages, in order.
func reports(t *testing.T, p *protoClient, sql string) []string {
	t.Helper()
	sendRaw(t, p, &pgproto3.Query{String: sql})
	var got []string
	for {
		msg, err := p.fe.Receive()
		if err != nil {
			t.Fatalf("%s: %v (so far %q)", sql, err, got)
		}
		switch m := msg.(type) {
		case *pgproto3.CommandComplete:
			got = append(got, "C "+string(m.CommandTag))
		case *pgproto3.ParameterStatus:
			got = append(got, "S "+m.Name+"="+m.Value)
		case *pgproto3.ReadyForQuery:
			return append(got, "Z "+string(m.TxStatus))
		}
	}
}
