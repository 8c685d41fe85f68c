package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestMultiRowInsertExtended: multi-row INSERTs into a distributed table
// over the extended protocol (pgx's prepared statements, binary
// parameters), as bulk inserts of ORMs and drivers send them, store what
// plain PostgreSQL stores and fail as it fails: rows over several shards
// (parameters used by one row, shared by rows of several shards, in ON
// CONFLICT), rows of one shard with RETURNING, inside transaction blocks
// that commit or roll back, a duplicate key on one shard (nothing
// stored), a prepared statement run again with other values.
func TestMultiRowInsertExtended(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	c := connect(t, srv.Addr())
	plain := oracleDB(t, cl.Servers[1].Addr(), "ieoracle")
	testTable(t, c, "ie_d", "(id int8 PRIMARY KEY, v text, n numeric, b bool)", "SELECT create_distributed_table('ie_d', 'id', shard_count => 8)")
	testTable(t, c, "ie_one", "(id int8 PRIMARY KEY, v text)", "SELECT create_distributed_table('ie_one', 'id', shard_count => 1)")
	for _, q := range []string{"DROP TABLE IF EXISTS ie_d, ie_one",
		"CREATE TABLE ie_d (id int8 PRIMARY KEY, v text, n numeric, b bool)", "CREATE TABLE ie_one (id int8 PRIMARY KEY, v text)"} {
		exec(t, plain, q, simple)
	}

	type step struct {
		sql  string
		args []any
	}
	steps := []step{
		{"INSERT INTO ie_d (id, v, n) VALUES ($1, $2, $3), ($4, $5, $6), ($7, $8, $9)",
			[]any{int64(1), "één", "12.50", int64(2), "ß", nil, int64(3), nil, "-7"}},
		{"INSERT INTO ie_d (id, v, n) VALUES ($1, $2, $3), ($4, $5, $6), ($7, $8, $9)",
			[]any{int64(11), "a", "1", int64(12), "b", "2", int64(13), "c", "3"}},
		{"INSERT INTO ie_d (id, v, b) VALUES ($1, $3, true), ($2, $3, $4)", []any{int64(21), int64(22), "shared", false}},
		{"INSERT INTO ie_d (id, v) VALUES ($1, 'x'), ($2, 'y') ON CONFLICT (id) DO UPDATE SET v = $3 || excluded.v",
			[]any{int64(1), int64(2), "updated-"}},
		{"INSERT INTO ie_d (id, v) VALUES ($1, 'dup'), ($2, 'dup'), ($3, 'dup')", []any{int64(31), int64(32), int64(11)}},
		{"INSERT INTO ie_d (id, v) VALUES ($1, 'null id'), ($2, 'x')", []any{nil, int64(41)}},
		{"INSERT INTO ie_d VALUES ($1, $2, $3, $4), ($5, $6, $7, $8)",
			[]any{int64(51), "no column list", "0.1", true, int64(52), "no column list", "0.2", false}},
		{"INSERT INTO ie_d (id, v) VALUES ($1, $2), ($3, $4)", []any{int64(61), "two", int64(62)}},
		// A parameter typed by one row's cast and assigned in rows of
		// other shards: every shard reads it by the whole statement's
		// type (a shard inferring text read int8's bytes as 'ABCDEFGH').
		{"INSERT INTO ie_d (id, v) VALUES ($1, ($5::int8)::text), ($2, $5), ($3, $5), ($4, $5)",
			[]any{int64(201), int64(202), int64(203), int64(204), int64(4702394921427289928)}},
		{"INSERT INTO ie_d (id, n) VALUES ($1, $5::float8), ($2, $5), ($3, $5), ($4, $5)",
			[]any{int64(211), int64(212), int64(213), int64(214), 1.5}},
		{"INSERT INTO ie_d (id, v) VALUES ($1, $5::int || 'x'), ($2, $5), ($3, $5), ($4, $5)",
			[]any{int64(221), int64(222), int64(223), int64(224), int32(5)}},
	}
	for _, s := range steps {
		_, gerr := c.Exec(ctx, s.sql, s.args...)
		_, werr := plain.Exec(ctx, s.sql, s.args...)
		if sqlState(gerr) != sqlState(werr) || (gerr == nil) != (werr == nil) {
			t.Errorf("%s %v:\n got %v\n PostgreSQL %v", s.sql, s.args, gerr, werr)
		}
	}

	// Rows of one shard: routed, RETURNING as PostgreSQL's.
	q := "INSERT INTO ie_one (id, v) VALUES ($1, $2), ($3, $4) RETURNING id, v, length(v)"
	got := rowsText(t, c, q, int64(1), "ü", int64(2), "two")
	want := rowsText(t, plain, q, int64(1), "ü", int64(2), "two")
	if got != want {
		t.Errorf("RETURNING from one shard: got %q, want %q", got, want)
	}
	// Rows of several shards with RETURNING: in VALUES order, in binary
	// and text, outside and inside a transaction block.
	q = "INSERT INTO ie_d (id, v, n) VALUES ($1, $2, 1.5), ($3, $4, NULL), ($5, $2, 2) RETURNING n, id, v || '!' AS w, b"
	args := []any{int64(73), "r", int64(71), "s", int64(72)}
	if got, want := rowsText(t, c, q, args...), rowsText(t, plain, q, args...); got != want {
		t.Errorf("RETURNING from several shards: got %q, want %q", got, want)
	}
	for _, conn := range []*pgx.Conn{c, plain} {
		exec(t, conn, "BEGIN", simple)
	}
	args = []any{int64(76), "t", int64(74), "u", int64(75)}
	if got, want := rowsText(t, c, q, args...), rowsText(t, plain, q, args...); got != want {
		t.Errorf("RETURNING from several shards in a transaction block: got %q, want %q", got, want)
	}
	for _, conn := range []*pgx.Conn{c, plain} {
		exec(t, conn, "COMMIT", simple)
	}
	// ON CONFLICT DO NOTHING returns fewer rows than VALUES: refused.
	if _, err := c.Exec(ctx, "INSERT INTO ie_d (id, v) VALUES ($1, 'r'), ($2, 'r') ON CONFLICT DO NOTHING RETURNING id", int64(71), int64(77)); sqlState(err) != "0A000" {
		t.Errorf("RETURNING with ON CONFLICT DO NOTHING from several shards: %v, want 0A000", err)
	}
	// The protocol as JDBC and libpq speak it: Describe of the portal,
	// binary results, and a row limit (refused).
	raw := func(conn *pgx.Conn, limit uint32) []string {
		h, err := conn.PgConn().Hijack()
		if err != nil {
			t.Fatal(err)
		}
		defer h.Conn.Close()
		fe := h.Frontend
		fe.Send(&pgproto3.Parse{Query: "INSERT INTO ie_d (id, v) VALUES ($1, 'raw'), ($2, 'raw') RETURNING id, v"})
		fe.Send(&pgproto3.Bind{ParameterFormatCodes: []int16{0}, Parameters: [][]byte{[]byte(fmt.Sprint(91 + limit*10)), []byte(fmt.Sprint(92 + limit*10))},
			ResultFormatCodes: []int16{1, 0}})
		fe.Send(&pgproto3.Describe{ObjectType: 'P'})
		fe.Send(&pgproto3.Execute{MaxRows: limit})
		fe.Send(&pgproto3.Sync{})
		if err := fe.Flush(); err != nil {
			t.Fatal(err)
		}
		var got []string
		for {
			m, err := fe.Receive()
			if err != nil {
				t.Fatal(err)
			}
			switch m := m.(type) {
			case *pgproto3.RowDescription:
				got = append(got, fmt.Sprintf("T %s:%d %s:%d", m.Fields[0].Name, m.Fields[0].Format, m.Fields[1].Name, m.Fields[1].Format))
			case *pgproto3.DataRow:
				got = append(got, fmt.Sprintf("D %x %s", m.Values[0], m.Values[1]))
			case *pgproto3.CommandComplete:
				got = append(got, "C "+string(m.CommandTag))
			case *pgproto3.ErrorResponse:
				got = append(got, "E "+m.Code)
			case *pgproto3.ReadyForQuery:
				return append(got, "Z")
			}
		}
	}
	if got, want := raw(connect(t, srv.Addr()), 0), raw(oracleDB(t, cl.Servers[1].Addr(), "ieoracle"), 0); len(want) != 5 || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Describe of the portal, binary results:\n got %v\nwant %v", got, want)
	}
	if got := raw(connect(t, srv.Addr()), 1); len(got) < 2 || got[len(got)-2] != "E 0A000" {
		t.Errorf("Execute with a row limit: %v, want 0A000", got)
	}

	// Transaction blocks: ROLLBACK undoes every shard's rows, COMMIT keeps them.
	for _, end := range []string{"ROLLBACK", "COMMIT"} {
		for _, conn := range []*pgx.Conn{c, plain} {
			exec(t, conn, "BEGIN", simple)
			if _, err := conn.Exec(ctx, "INSERT INTO ie_d (id, v) VALUES ($1, $3), ($2, $3)", int64(81), int64(82), end); err != nil {
				t.Fatalf("in a transaction block: %v", err)
			}
			var n int
			if err := conn.QueryRow(ctx, "SELECT count(*) FROM ie_d WHERE id IN (81, 82)").Scan(&n); err != nil || n != 2 {
				t.Fatalf("the transaction's own rows: %d, %v; want 2", n, err)
			}
			exec(t, conn, end, simple)
		}
	}

	// A pipeline (pgx.Batch, one Sync) outside a transaction block whose
	// multi-shard write comes before other statements: one implicit
	// transaction, as on PostgreSQL: the second statement's duplicate key
	// fails it and nothing of the batch is stored (the write was refused
	// with 0A000 before pipelines could span workers).
	for _, conn := range []*pgx.Conn{c, plain} {
		b := &pgx.Batch{}
		b.Queue("INSERT INTO ie_d (id, v) VALUES ($1, 'batch'), ($2, 'batch')", int64(301), int64(302))
		b.Queue("INSERT INTO ie_d (id, v) VALUES ($1, 'batch'), ($2, 'batch')", int64(303), int64(1))
		br := conn.SendBatch(ctx, b)
		if tag, err := br.Exec(); err != nil || tag.String() != "INSERT 0 2" {
			t.Errorf("multi-shard write before other statements in a batch: %v %v, want INSERT 0 2", tag, err)
		}
		if _, err := br.Exec(); sqlState(err) != "23505" {
			t.Errorf("duplicate key after a multi-shard write in a batch: %v, want 23505", err)
		}
		_ = br.Close()
		var stored int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM ie_d WHERE id BETWEEN 301 AND 303").Scan(&stored); err != nil || stored != 0 {
			t.Errorf("a failed batch stored %d rows (%v), want none", stored, err)
		}
	}
	// The same write alone in its pipeline runs.
	b := &pgx.Batch{}
	b.Queue("INSERT INTO ie_d (id, v) VALUES ($1, 'batch'), ($2, 'batch')", int64(301), int64(302))
	if err := c.SendBatch(ctx, b).Close(); err != nil {
		t.Errorf("a batch of one multi-shard write: %v", err)
	}
	for _, conn := range []*pgx.Conn{plain} {
		if _, err := conn.Exec(ctx, "INSERT INTO ie_d (id, v) VALUES ($1, 'batch'), ($2, 'batch')", int64(301), int64(302)); err != nil {
			t.Fatal(err)
		}
	}

	dump := "SELECT id, v, n::text, b FROM ie_d ORDER BY id"
	if got, want := rowsText(t, c, dump), rowsText(t, plain, dump); got != want {
		t.Errorf("table after the inserts:\n got %s\nwant %s", got, want)
	}
}

// rowsText runs a query and returns its rows as text, one line each.
func rowsText(t *testing.T, c *pgx.Conn, sql string, args ...any) string {
	t.Helper()
	rows, err := c.Query(context.Background(), sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			if i > 0 {
				b.WriteByte('|')
			}
			b.WriteString(fmt.Sprint(v))
		}
		b.WriteByte('\n')
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return b.String()
}

// TestWritePortalAfterOtherDDL: a multi-shard write portal bound before
// another client's catalog change (create_distributed_table of another
// table) runs at Execute on the current catalog; it used to fail with
// 40001 for any table's change.
func TestWritePortalAfterOtherDDL(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	ctx := context.Background()
	c := connect(t, srv.Addr())
	other := connect(t, srv.Addr())
	testTable(t, c, "wp_d", "(id int8 PRIMARY KEY, v text)", "SELECT create_distributed_table('wp_d', 'id', shard_count => 8)")
	h, err := connect(t, srv.Addr()).PgConn().Hijack()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Conn.Close()
	fe := h.Frontend
	receive := func(want byte) {
		t.Helper()
		for {
			m, err := fe.Receive()
			if err != nil {
				t.Fatal(err)
			}
			if e, ok := m.(*pgproto3.ErrorResponse); ok {
				t.Fatalf("error: %s %s", e.Code, e.Message)
			}
			b, _ := m.Encode(nil)
			if b[0] == want {
				return
			}
		}
	}
	for i, q := range []string{"INSERT INTO wp_d (id, v) VALUES ($1, 'a'), ($2, 'b'), ($3, 'c')", "UPDATE wp_d SET v = v || '!'"} {
		var params [][]byte
		if i == 0 {
			params = [][]byte{[]byte("1"), []byte("2"), []byte("3")}
		}
		fe.Send(&pgproto3.Parse{Query: q})
		fe.Send(&pgproto3.Bind{Parameters: params})
		fe.Send(&pgproto3.Flush{})
		if err := fe.Flush(); err != nil {
			t.Fatal(err)
		}
		receive('2') // BindComplete
		table := fmt.Sprintf("wp_other%d", i)
		testTable(t, other, table, "(id int PRIMARY KEY)", "SELECT create_distributed_table('"+table+"', 'id')")
		fe.Send(&pgproto3.Execute{})
		fe.Send(&pgproto3.Sync{})
		if err := fe.Flush(); err != nil {
			t.Fatal(err)
		}
		receive('C')
		receive('Z')
	}
	var got string
	if err := c.QueryRow(ctx, "SELECT string_agg(id || v, ',' ORDER BY id) FROM wp_d").Scan(&got); err != nil || got != "1a!,2b!,3c!" {
		t.Errorf("rows after the portals: %q, %v; want 1a!,2b!,3c!", got, err)
	}
}

// TestPreparedInsertAfterAlterType: a prepared INSERT keeps the parameter
// types PostgreSQL fixed when it was prepared, as PostgreSQL does: after
// ALTER COLUMN ... TYPE the same statement, run again with the values
// encoded by those types (binary int4), stores them cast to the new type
// (workers preparing it again inferred int8 and text: 08P01, and int4's
// bytes stored as 'ABCD'; adversary).
func TestPreparedInsertAfterAlterType(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	c := connect(t, srv.Addr())
	plain := oracleDB(t, cl.Servers[1].Addr(), "atoracle")
	testTable(t, c, "at_d", "(k int PRIMARY KEY, v int)", "SELECT create_distributed_table('at_d', 'k', shard_count => 8)")
	exec(t, plain, "DROP TABLE IF EXISTS at_d", simple)
	exec(t, plain, "CREATE TABLE at_d (k int PRIMARY KEY, v int)", simple)
	multi, one := "INSERT INTO at_d VALUES ($1, $2), ($3, $4)", "INSERT INTO at_d VALUES ($1, $2)"
	k := int32(0)
	run := func(what string) {
		t.Helper()
		for _, conn := range []*pgx.Conn{c, plain} {
			if _, err := conn.Exec(ctx, multi, k+1, int32(10), k+2, int32(0x41424344)); err != nil {
				t.Errorf("%s: multi-row: %v", what, err)
			}
			if _, err := conn.Exec(ctx, one, k+3, int32(0x41424344)); err != nil {
				t.Errorf("%s: one row: %v", what, err)
			}
		}
		k += 3
	}
	run("before")
	for _, typ := range []string{"bigint", "text"} {
		for _, conn := range []*pgx.Conn{c, plain} {
			exec(t, conn, "ALTER TABLE at_d ALTER COLUMN v TYPE "+typ, simple)
		}
		run("after ALTER COLUMN v TYPE " + typ)
	}
	dump := "SELECT k, v::text FROM at_d ORDER BY k"
	if got, want := rowsText(t, c, dump), rowsText(t, plain, dump); got != want {
		t.Errorf("rows:\n got %s\nwant %s", got, want)
	}
}

// TestSplitInsertAnalysisFirstInTransaction: a multi-row INSERT over
// several shards in a transaction block of a read-only session answers
// PostgreSQL's first error, the analysis of a constant in the last row
// (22008 under DateStyle YMD), not a shard's read-only refusal (25006)
// (difftest seed 7, statement 4798).
func TestSplitInsertAnalysisFirstInTransaction(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	admin := connect(t, srv.Addr())
	testTable(t, admin, "af_d", "(k int PRIMARY KEY, ts timestamp)", "SELECT create_distributed_table('af_d', 'k', shard_count => 8)")
	c, err := pgx.Connect(ctx, pgtest.URL(srv.Addr())+"&options=-c%20DateStyle%3DISO,YMD%20-c%20default_transaction_read_only%3Don")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var rows []string
	for k := 1; k <= 12; k++ {
		rows = append(rows, fmt.Sprintf("(%d, '2020-01-01')", k))
	}
	rows = append(rows, "(13, '03/05/2022 03:26:27')")
	q := "INSERT INTO af_d (k, ts) VALUES " + strings.Join(rows, ", ")
	for _, block := range []bool{false, true} {
		if block {
			exec(t, c, "BEGIN", simple)
		}
		if _, err := c.Exec(ctx, q, simple); sqlState(err) != "22008" {
			t.Errorf("in a transaction block %v: %v, want 22008", block, err)
		}
		if block {
			exec(t, c, "ROLLBACK", simple)
		}
	}
}

// TestSplitInsertAnalysisFirstExtended: the same over the extended
// protocol, outside and inside a transaction block: PostgreSQL's planner
// folds -9223372036854775808::text::int8 and fails (22003) before any
// shard's read-only refusal (difftest seed 11, statement 29546).
func TestSplitInsertAnalysisFirstExtended(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	admin := connect(t, srv.Addr())
	testTable(t, admin, "afx_d", "(k int8 PRIMARY KEY, v text)", "SELECT create_distributed_table('afx_d', 'k', shard_count => 8)")
	c, err := pgx.Connect(ctx, pgtest.URL(srv.Addr())+"&options=-c%20default_transaction_read_only%3Don")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	q := "INSERT INTO afx_d (k, v) VALUES ($1, $2), ($3, $2), ($4, $2), ($5, $2), (-9223372036854775808::text::int8, $2)"
	for _, block := range []bool{false, true} {
		if block {
			exec(t, c, "BEGIN", simple)
		}
		if _, err := c.Exec(ctx, q, int64(1), "x", int64(2), int64(3), int64(4)); sqlState(err) != "22003" {
			t.Errorf("in a transaction block %v: %v, want 22003", block, err)
		}
		if block {
			exec(t, c, "ROLLBACK", simple)
		}
	}
}
