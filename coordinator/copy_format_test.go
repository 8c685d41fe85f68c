package coordinator_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestCopyEndMarkerAndLineEnds: COPY FROM STDIN data with the \. end
// marker (psql sends it), CR and CRLF line ends, and line ends that do not
// match, in text and CSV, into distributed tables with an int and a text
// distribution column: the command tag or SQLSTATE and the rows stored are
// plain PostgreSQL's.
func TestCopyEndMarkerAndLineEnds(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	plain := connect(t, cl.Servers[1].Addr())
	for _, typ := range []string{"int", "text"} {
		name := "cpe_" + typ
		testTable(t, c, name, "(id "+typ+" PRIMARY KEY, v text)", "SELECT create_distributed_table('"+name+"', 'id', shard_count => 4)")
		exec(t, plain, "DROP TABLE IF EXISTS "+name+"_plain")
		exec(t, plain, "CREATE TABLE "+name+"_plain (id "+typ+" PRIMARY KEY, v text)")
		t.Cleanup(func() { _, _ = plain.Exec(context.Background(), "DROP TABLE IF EXISTS "+name+"_plain") })
	}
	cases := []struct{ opts, data string }{
		{"", "1\ta\n2\tb\n\\.\n"},
		{"", "1\ta\n2\tb\n\\.\n3\tignored\n"},
		{"", "1\ta\n2\tb\\.\n"},
		{"", "1\ta\n\\."},
		{"", "1\ta\n\\.x\n"},
		{"", "1\ta\r\n2\tb\r\n\\.\r\n"},
		{"", "1\ta\r\n2\tb\r\n\\.\n"},
		{"", "1\ta\n2\tb\n\\.\r\n"},
		{"", "1\ta\r2\tb\r3\tc\r"},
		{"", "1\ta\r2\tb\r\\.\r"},
		{"", "1\ta\r\n2\tb\n"},
		{"", "1\ta\n2\tb\r\n"},
		{"", "1\ta\\\nb\n2\tc\n"},
		{"", "1\ta\\\\.\n2\tb\n"},
		{" (FORMAT csv)", "1,a\n2,b\n\\.\n"},
		{" (FORMAT csv)", "1,a\n2,b\n\\.\n3,ignored\n"},
		{" (FORMAT csv)", "1,a\n2,b\n\\."},
		{" (FORMAT csv)", "1,a\n\\.x,b\n"},
		{" (FORMAT csv)", "1,\"x\n\\.\ny\"\n2,b\n"},
		{" (FORMAT csv)", "\"\\.\",a\n2,b\n"},
		{" (FORMAT csv)", "1,a\r\n2,b\r\n\\.\r\n"},
		{" (FORMAT csv)", "1,a\r\n2,b\r\n\\.\n"},
		{" (FORMAT csv)", "1,a\r2,\"b\r\nc\"\r"},
		{" (FORMAT csv)", "1,a\r\n2,b\n"},
		{" (FORMAT csv, HEADER)", "id,v\r\n1,a\n"},
		{" (FORMAT csv, HEADER)", "id,v\n1,a\n\\.\n"},
		{" (FORMAT csv, ESCAPE '\\')", "1,\"a\\\\\"\n2,\"b\\\"\"\n"},
		{" (FORMAT csv)", "1,\"a\n"},
		{"", "1\ta\tb\n"},
		{"", "x\ta\tb\n"},
		{" (FORMAT csv)", "x,a,b\n"},
		{" (FORMAT csv)", "1,\"a,\"\"b\",c\n"},
		{"", "1\ta\\"},
		{"", "5\\\ta\n"},
	}
	for _, typ := range []string{"int", "text"} {
		name := "cpe_" + typ
		for _, cs := range cases {
			exec(t, plain, "TRUNCATE "+name+"_plain")
			want, werr := plain.PgConn().CopyFrom(ctx, strings.NewReader(cs.data), "COPY "+name+"_plain FROM STDIN"+cs.opts)
			wantRows := tableRows(t, plain, "SELECT id, v FROM "+name+"_plain ORDER BY id")
			exec(t, c, "TRUNCATE "+name, pgx.QueryExecModeSimpleProtocol)
			got, gerr := c.PgConn().CopyFrom(ctx, strings.NewReader(cs.data), "COPY "+name+" FROM STDIN"+cs.opts)
			gotRows := tableRows(t, c, "SELECT id, v FROM "+name+" ORDER BY id")
			if sqlState(gerr) != sqlState(werr) || got.String() != want.String() || gotRows != wantRows {
				t.Errorf("%s%s %q:\n got %q %v rows\n%s\nPostgreSQL %q %v rows\n%s", name, cs.opts, cs.data, got, gerr, gotRows, want, werr, wantRows)
			}
		}
	}
}

// TestCopyEncodingEmbeddingASCII: in SJIS a character's second byte can be
// a backslash (0x5C); PostgreSQL converts before it splits fields, the
// splitter cannot: such a COPY into a distributed table is refused rather
// than a row placed by the wrong field.
func TestCopyEncodingEmbeddingASCII(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	plain := connect(t, cl.Servers[1].Addr())
	testTable(t, c, "cpe_sjis", "(a text, id int PRIMARY KEY, b int)", "SELECT create_distributed_table('cpe_sjis', 'id', shard_count => 4)")
	exec(t, plain, "DROP TABLE IF EXISTS cpe_sjis_plain")
	exec(t, plain, "CREATE TABLE cpe_sjis_plain (a text, id int PRIMARY KEY, b int)")
	t.Cleanup(func() { _, _ = plain.Exec(context.Background(), "DROP TABLE IF EXISTS cpe_sjis_plain") })
	data := "\x95\x5c\t1\t2\n" // 表 in SJIS, then id 1, b 2
	if _, err := plain.PgConn().CopyFrom(ctx, strings.NewReader(data), "COPY cpe_sjis_plain FROM STDIN (ENCODING 'SJIS')"); err != nil {
		t.Fatal(err)
	}
	if got := tableRows(t, plain, "SELECT a, id, b FROM cpe_sjis_plain"); got != "表|1|2\n" {
		t.Fatalf("PostgreSQL stored %q", got)
	}
	for _, setup := range []struct{ set, opts string }{{"RESET client_encoding", " (ENCODING 'SJIS')"}, {"SET client_encoding = 'SJIS'", ""}} {
		exec(t, c, setup.set, pgx.QueryExecModeSimpleProtocol)
		_, err := c.PgConn().CopyFrom(ctx, strings.NewReader(data), "COPY cpe_sjis FROM STDIN"+setup.opts)
		exec(t, c, "RESET client_encoding", pgx.QueryExecModeSimpleProtocol)
		if err == nil {
			if got := tableRows(t, c, "SELECT a, id, b FROM cpe_sjis WHERE id = 1"); got != "表|1|2\n" {
				t.Errorf("%s: COPY stored %q where PostgreSQL stores 表|1|2", setup.set, got)
			}
		} else if sqlState(err) != "0A000" {
			t.Errorf("%s: %v", setup.set, err)
		}
	}
}
