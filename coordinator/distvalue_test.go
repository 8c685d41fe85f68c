package coordinator_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// distTables are the tables of the distribution-value tests: each is
// created distributed (dv_*) and plain (dvo_*, the oracle: plain
// PostgreSQL on the default node), and every statement runs on both.
var distTables = []struct{ name, cols string }{
	{"int8", "(id bigint PRIMARY KEY, v text)"},
	{"int4", "(id int PRIMARY KEY, v text)"},
	{"text", "(id text PRIMARY KEY, v text)"},
	{"vc", "(id varchar(4) PRIMARY KEY, v text)"},
	{"bp", "(id char(4) PRIMARY KEY, v text)"},
}

// oracleRun is one statement's outcome: rows as text, or the SQLSTATE.
type oracleRun struct {
	Rows  [][]string
	State string
	Tag   string
}

func rawRun(c *pgconn.PgConn, sql string, args [][]byte, oids []uint32, formats []int16) oracleRun {
	ctx := context.Background()
	var rr *pgconn.ResultReader
	if args == nil && oids == nil {
		res, err := c.Exec(ctx, sql).ReadAll()
		if err != nil {
			return oracleRun{State: sqlState(err)}
		}
		var out oracleRun
		for _, r := range res {
			if r.Err != nil {
				return oracleRun{State: sqlState(r.Err)}
			}
			out.Tag = r.CommandTag.String()
			for _, row := range r.Rows {
				out.Rows = append(out.Rows, texts(row))
			}
		}
		return out
	}
	rr = c.ExecParams(ctx, sql, args, oids, formats, nil)
	res := rr.Read()
	if res.Err != nil {
		return oracleRun{State: sqlState(res.Err)}
	}
	out := oracleRun{Tag: res.CommandTag.String()}
	for _, row := range res.Rows {
		out.Rows = append(out.Rows, texts(row))
	}
	return out
}

func texts(row [][]byte) []string {
	out := make([]string, len(row))
	for i, v := range row {
		if v == nil {
			out[i] = "<NULL>"
		} else {
			out[i] = string(v)
		}
	}
	return out
}

// distEnv holds a coordinator connection whose statements run against the
// distributed tables (dv_) and the oracle tables (dvo_).
type distEnv struct {
	t    *testing.T
	c    *pgx.Conn
	meta string
	addr string // the coordinator's
}

// same runs sql ({t} names the table) on the distributed table and on the
// oracle and fails unless rows (sorted as sent), command tag and SQLSTATE
// agree. It returns the distributed outcome.
func (e *distEnv) same(sql string, args [][]byte, oids []uint32, formats []int16) oracleRun {
	e.t.Helper()
	got := rawRun(e.c.PgConn(), strings.ReplaceAll(sql, "{t}", "dv_"), args, oids, formats)
	want := rawRun(e.c.PgConn(), strings.ReplaceAll(sql, "{t}", "dvo_"), args, oids, formats)
	if !reflect.DeepEqual(got, want) {
		e.t.Errorf("%s %q (oids %v formats %v):\n got %+v\nwant %+v (plain PostgreSQL)", sql, args, oids, formats, got, want)
	}
	return got
}

// sameOr0A000 is same, but a refusal (0A000) on pgfleet's side is allowed.
func (e *distEnv) sameOr0A000(sql string, args [][]byte, oids []uint32, formats []int16) {
	e.t.Helper()
	got := rawRun(e.c.PgConn(), strings.ReplaceAll(sql, "{t}", "dv_"), args, oids, formats)
	if got.State == "0A000" {
		return
	}
	e.same(sql, args, oids, formats)
}

func (e *distEnv) refused(sql string) {
	e.t.Helper()
	got := rawRun(e.c.PgConn(), strings.ReplaceAll(sql, "{t}", "dv_"), nil, nil, nil)
	if got.State != "0A000" {
		e.t.Errorf("%s: got %+v, want 0A000", sql, got)
	}
}

// placed checks every row is in the shard PostgreSQL's own hash gives and
// the tables hold what the oracle holds.
func (e *distEnv) placed() {
	e.t.Helper()
	for _, tb := range distTables {
		shardRows(e.t, e.meta, "public.dv_"+tb.name, "id")
		e.same("SELECT id, v FROM {t}"+tb.name+" ORDER BY id, v", nil, nil, nil)
	}
}

func newDistEnv(t *testing.T) *distEnv {
	cl := pgtest.Shared(t)
	// (Pool sizes: with 2 workers the last connection of each pool serves
	// only sessions that hold another worker's (pooling.Pool's classes);
	// the pinned sessions here hold connections for good.)
	srv := pgtest.Coordinator(t, cl, poolSize(6))
	c := connect(t, srv.Addr())
	for _, tb := range distTables {
		testTable(t, c, "dv_"+tb.name, tb.cols, fmt.Sprintf("SELECT create_distributed_table('dv_%s', 'id', shard_count => 8)", tb.name))
		exec(t, c, "DROP TABLE IF EXISTS dvo_"+tb.name)
		exec(t, c, "CREATE TABLE dvo_"+tb.name+" "+tb.cols)
		name := tb.name
		t.Cleanup(func() { _, _ = c.Exec(context.Background(), "DROP TABLE IF EXISTS dvo_"+name) })
	}
	return &distEnv{t: t, c: c, meta: cl.Servers[0].Addr(), addr: srv.Addr()}
}

// TestDistributionValueConstants: constants are routed by the value
// PostgreSQL computes from them, not by their text (issue 8, class 5,
// simple protocol).
func TestDistributionValueConstants(t *testing.T) {
	e := newDistEnv(t)
	// Casts that change the value.
	e.same("INSERT INTO {t}text (id, v) VALUES (1.5e1::text, 'a')", nil, nil, nil)
	e.same("SELECT v FROM {t}text WHERE id = '15'", nil, nil, nil)
	e.same("SELECT v FROM {t}text WHERE id = 1.5e1::text", nil, nil, nil)
	e.same("INSERT INTO {t}text (id, v) VALUES (' 16'::int::text, 'b')", nil, nil, nil)
	e.same("SELECT v FROM {t}text WHERE id = '16'", nil, nil, nil)
	e.same("SELECT v FROM {t}text WHERE id = ' 16'::int::text", nil, nil, nil)
	e.same("INSERT INTO {t}text (id, v) VALUES ('16', 'dup')", nil, nil, nil) // 23505 on both
	e.same("INSERT INTO {t}text (id, v) VALUES ('abc'::char(2), 'c')", nil, nil, nil)
	e.same("SELECT v FROM {t}text WHERE id = 'ab'", nil, nil, nil)
	e.same("INSERT INTO {t}text (id, v) VALUES ('x'::int::text, 'bad')", nil, nil, nil) // 22P02 on both
	// varchar(4) stores 'abcd   ' as 'abcd'.
	e.same("INSERT INTO {t}vc (id, v) VALUES ('abcd   ', 'd')", nil, nil, nil)
	e.same("SELECT v FROM {t}vc WHERE id = 'abcd'", nil, nil, nil)
	e.same("INSERT INTO {t}vc (id, v) VALUES ('abcd', 'dup')", nil, nil, nil)
	e.same("INSERT INTO {t}vc (id, v) VALUES ('abcde', 'long')", nil, nil, nil) // 22001 on both
	e.same("INSERT INTO {t}vc (id, v) VALUES ('ab  ', 'spaces kept')", nil, nil, nil)
	e.same("SELECT v FROM {t}vc WHERE id = 'ab  '", nil, nil, nil)
	e.same("SELECT v FROM {t}vc WHERE id = 'ab'", nil, nil, nil)
	e.same("INSERT INTO {t}bp (id, v) VALUES ('a  ', 'e')", nil, nil, nil)
	e.same("SELECT v FROM {t}bp WHERE id = 'a'", nil, nil, nil)
	e.same("SELECT v FROM {t}bp WHERE id = 'a'::text", nil, nil, nil)
	// Multi-row INSERT over several shards hashes each row's value.
	e.same("INSERT INTO {t}text (id, v) VALUES (1e1::text, 'm1'), (2.0::text, 'm2'), ('x', 'm3')", nil, nil, nil)
	e.same("SELECT v FROM {t}text WHERE id = '10'", nil, nil, nil)
	e.same("SELECT v FROM {t}text WHERE id = '2.0'", nil, nil, nil)

	// Numeric literals against integer columns compare as numeric.
	e.same("INSERT INTO {t}int8 (id, v) VALUES (100, 'hundred'), (25, 'x')", nil, nil, nil)
	e.same("INSERT INTO {t}int4 (id, v) VALUES (100, 'hundred'), (5, 'five')", nil, nil, nil)
	for _, q := range []string{"= 100.0", "= 1e2", "= CAST(99.7 AS integer)", "= 99.5", "= '100'", "= 100::int2",
		"= 1e30", "= -100.0", "= 0x64", "= 1_00", "= 0o144", "= 3000000000", "= -9223372036854775808"} {
		e.same("SELECT v FROM {t}int8 WHERE id "+q, nil, nil, nil)
		e.same("SELECT v FROM {t}int4 WHERE id "+q, nil, nil, nil)
		e.same("UPDATE {t}int8 SET v = v || '!' WHERE id "+q, nil, nil, nil)
	}
	e.same("INSERT INTO {t}int8 (id, v) VALUES (2.5e1, 'dup')", nil, nil, nil)
	e.same("INSERT INTO {t}int8 (id, v) VALUES (26.4, 'rounded')", nil, nil, nil)
	e.same("SELECT v FROM {t}int8 WHERE id = 26", nil, nil, nil)
	e.same("INSERT INTO {t}int4 (id, v) VALUES (3000000000, 'too big')", nil, nil, nil) // 22003
	e.same("INSERT INTO {t}int8 (id, v) VALUES (0x10, 'hex')", nil, nil, nil)           // 42601 on PostgreSQL 15
	e.same("SELECT v FROM {t}int8 WHERE id = $0", nil, nil, nil)                        // 42P02, not a "?" from the deparser
	e.same("UPDATE {t}int8 SET v = v WHERE id = 5 AND v = $0", nil, nil, nil)

	// standard_conforming_strings = off: a backslash escapes.
	e.same("SET standard_conforming_strings = off", nil, nil, nil)
	e.same(`INSERT INTO {t}text (id, v) VALUES ('x\\', 'scs1')`, nil, nil, nil)
	e.same(`INSERT INTO {t}text (id, v) VALUES ('it\'s', 'scs2')`, nil, nil, nil)
	e.same(`SELECT v FROM {t}text WHERE id = 'it\'s'`, nil, nil, nil)
	e.same(`SELECT v FROM {t}text WHERE id = 'x\\'`, nil, nil, nil)
	e.same(`INSERT INTO {t}text (id, v) VALUES ('a\tb', 'scs3'), ('c\'d', 'scs4')`, nil, nil, nil)
	// An unterminated string ending in a backslash: PostgreSQL's syntax
	// error (escapeStrings once read past the end: XX000, connection lost).
	e.same(`SELECT v FROM {t}text WHERE id = 'x\`, nil, nil, nil)
	e.same(`SELECT v FROM {t}text WHERE id = 'x\'`, nil, nil, nil)
	// A prepared statement is planned once for every session: with a
	// backslash, under this setting, it is refused rather than misread.
	if got := rawRun(e.c.PgConn(), `SELECT v FROM dv_text WHERE id = 'it\'s' AND v = $1`, [][]byte{[]byte("scs2")}, []uint32{25}, nil); got.State != "0A000" {
		t.Errorf("prepared statement with a backslash under standard_conforming_strings off: %+v, want 0A000", got)
	}
	e.same("RESET standard_conforming_strings", nil, nil, nil)
	e.same(`SELECT v FROM {t}text WHERE id = 'x\'`, nil, nil, nil)
	e.same(`SELECT v FROM {t}text WHERE id = 'it''s'`, nil, nil, nil)
	e.same(`SELECT v FROM {t}text WHERE id = E'a\tb'`, nil, nil, nil)

	// client_encoding LATIN1: the worker converts the text to UTF-8.
	e.same("SET client_encoding = 'LATIN1'", nil, nil, nil)
	e.same("INSERT INTO {t}text (id, v) VALUES ('caf\xe9', 'latin1')", nil, nil, nil)
	e.same("SELECT v FROM {t}text WHERE id = 'caf\xe9'", nil, nil, nil)
	e.same("INSERT INTO {t}vc (id, v) VALUES ('\xe9t\xe9 ', 'latin1 vc')", nil, nil, nil)
	e.same("RESET client_encoding", nil, nil, nil)
	e.same("SELECT v FROM {t}text WHERE id = 'café'", nil, nil, nil)
	e.same("SELECT v FROM {t}vc WHERE id = 'été'", nil, nil, nil)
	e.placed()
}

func be32(v int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(v)) }
func be16(v int16) []byte { return binary.BigEndian.AppendUint16(nil, uint16(v)) }
func be64(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

// TestDistributionValueParameters: Bind parameters are routed by the value
// of their declared type, converted as PostgreSQL converts it, in text and
// binary (issue 8, class 5, extended protocol).
func TestDistributionValueParameters(t *testing.T) {
	e := newDistEnv(t)
	const (
		int2, int4, int8, text, varchar, bpchar, numeric, float8, unknown = 21, 23, 20, 25, 1043, 1042, 1700, 701, 705
	)
	p := func(s string) [][]byte { return [][]byte{[]byte(s)} }
	ins := "INSERT INTO {t}int8 (id, v) VALUES ($1, 'p')"
	sel := "SELECT id, v FROM {t}int8 WHERE id = $1"
	// Binary integers of every width against bigint (Npgsql, JDBC, psycopg 3).
	e.same(ins, [][]byte{be32(300)}, []uint32{int4}, []int16{1})
	e.same(sel, [][]byte{be32(300)}, []uint32{int4}, []int16{1})
	e.same(sel, [][]byte{be16(300)}, []uint32{int2}, []int16{1})
	e.same(sel, [][]byte{be64(300)}, []uint32{int8}, []int16{1})
	e.same(ins, [][]byte{be16(301)}, []uint32{int2}, []int16{1})
	e.same(sel, [][]byte{be16(301)}, []uint32{int2}, []int16{1})
	e.same(ins, [][]byte{be16(-5)}, []uint32{int2}, []int16{1})
	e.same(sel, p("-5"), []uint32{0}, []int16{0})
	e.same(sel, p("  -5 "), []uint32{int4}, []int16{0})
	e.same(sel, p("-5.0"), []uint32{numeric}, []int16{0})
	e.same(sel, p("abc"), []uint32{int8}, []int16{0})          // 22P02 on both
	e.same(sel, [][]byte{be32(1)}, []uint32{int8}, []int16{1}) // 22P03 on both
	e.sameOr0A000(sel, p("300"), []uint32{float8}, []int16{0})
	e.same("UPDATE {t}int8 SET v = 'q' WHERE id = $1", [][]byte{be16(301)}, []uint32{int2}, []int16{1})
	e.same("DELETE FROM {t}int8 WHERE id = $1 RETURNING id", [][]byte{be32(-5)}, []uint32{int4}, []int16{1})
	// bigint parameters against an int column: out of range matches nothing.
	e.same("INSERT INTO {t}int4 (id, v) VALUES ($1, 'p')", [][]byte{be64(7)}, []uint32{int8}, []int16{1})
	e.same("SELECT v FROM {t}int4 WHERE id = $1", [][]byte{be64(7)}, []uint32{int8}, []int16{1})
	e.same("SELECT v FROM {t}int4 WHERE id = $1", [][]byte{be64(3000000000)}, []uint32{int8}, []int16{1})
	e.same("SELECT v FROM {t}int4 WHERE id = $1", p("3000000000"), []uint32{int8}, []int16{0})
	e.same("INSERT INTO {t}int4 (id, v) VALUES ($1, 'p')", [][]byte{be64(3000000000)}, []uint32{int8}, []int16{1}) // 22003
	e.same("SELECT v FROM {t}int4 WHERE id = $1::int8", p("7"), []uint32{0}, []int16{0})
	// A parameter used elsewhere takes the type PostgreSQL infers from
	// its first use, not the column's: here int8.
	e.same("SELECT v FROM {t}int4 WHERE $1::int8 IS NOT NULL AND id = $1", [][]byte{be64(7)}, []uint32{0}, []int16{1})
	e.same("SELECT v FROM {t}int4 WHERE $1::int8 IS NOT NULL AND id = $1", [][]byte{be64(3000000000)}, []uint32{0}, []int16{1})
	e.same("SELECT v FROM {t}text WHERE v = $1 AND id = $1::int::text", p("017"), []uint32{0}, []int16{0})
	e.same("SELECT v FROM {t}int4 WHERE id = $1::int2", p("70000"), []uint32{0}, []int16{0}) // 22003

	// Text: a bpchar parameter against text is compared as text, without
	// its trailing spaces; varchar is text.
	e.same("INSERT INTO {t}text (id, v) VALUES ($1, 'bp')", p("a "), []uint32{bpchar}, []int16{0})
	e.same("SELECT id, v FROM {t}text WHERE id = $1", p("a "), []uint32{bpchar}, []int16{0})
	e.same("SELECT id, v FROM {t}text WHERE id = $1", p("a"), []uint32{varchar}, []int16{1})
	e.same("SELECT id, v FROM {t}text WHERE id = $1", p("a"), []uint32{unknown}, []int16{0})
	e.sameOr0A000("SELECT id, v FROM {t}vc WHERE id = $1", p("a "), []uint32{bpchar}, []int16{0})
	e.same("INSERT INTO {t}vc (id, v) VALUES ($1, 'bp')", p("a "), []uint32{bpchar}, []int16{0})
	e.same("INSERT INTO {t}vc (id, v) VALUES ($1, 'vc')", p("wxyz   "), []uint32{0}, []int16{0})
	e.same("INSERT INTO {t}vc (id, v) VALUES ($1, 'vc')", p("wxyz"), []uint32{text}, []int16{1}) // 23505
	e.same("SELECT id, v FROM {t}vc WHERE id = $1", p("wxyz"), []uint32{0}, []int16{0})
	e.same("INSERT INTO {t}bp (id, v) VALUES ($1, 'bp')", p("q "), []uint32{text}, []int16{1})
	e.same("SELECT id, v FROM {t}bp WHERE id = $1", p("q"), []uint32{text}, []int16{0})
	// Computed values: PostgreSQL computes them.
	e.same("INSERT INTO {t}text (id, v) VALUES ($1::int::text, 'cast')", p(" 17"), []uint32{0}, []int16{0})
	e.same("SELECT id, v FROM {t}text WHERE id = $1::int::text", p("17 "), []uint32{0}, []int16{0})
	e.same("SELECT id, v FROM {t}text WHERE id = $1::int::text", [][]byte{be32(17)}, []uint32{int4}, []int16{1})
	e.same("SELECT id, v FROM {t}text WHERE id = '17'", nil, nil, nil)
	e.same("INSERT INTO {t}text (id, v) VALUES ($1::int::text, 'cast')", p("x"), []uint32{0}, []int16{0}) // 22P02
	e.same("SELECT id, v FROM {t}int8 WHERE id = $1", p("100.0"), []uint32{numeric}, []int16{0})
	e.same("SELECT id, v FROM {t}int8 WHERE id = $1::numeric", p("300"), []uint32{text}, []int16{0})
	e.same("SELECT id, v FROM {t}text WHERE id = $1::text", [][]byte{be32(17)}, []uint32{int4}, []int16{1})
	e.same("SELECT id, v FROM {t}int8 WHERE id = $1::int8", p("300.4"), []uint32{numeric}, []int16{0})
	e.same("SELECT id, v FROM {t}int8 WHERE id = $1::int8", p("300.4"), []uint32{float8}, []int16{0})

	// Text parameters in another client_encoding, text and binary.
	e.same("SET client_encoding = 'LATIN1'", nil, nil, nil)
	e.same("INSERT INTO {t}text (id, v) VALUES ($1, 'latin1')", p("na\xefve"), []uint32{text}, []int16{0})
	e.same("INSERT INTO {t}vc (id, v) VALUES ($1, 'latin1')", p("\xe9t\xe9  "), []uint32{0}, []int16{1})
	e.same("SELECT v FROM {t}text WHERE id = $1", p("na\xefve"), []uint32{varchar}, []int16{1})
	e.same("RESET client_encoding", nil, nil, nil)
	e.same("SELECT v FROM {t}text WHERE id = $1", p("naïve"), []uint32{0}, []int16{0})
	e.same("SELECT v FROM {t}vc WHERE id = $1", p("été "), []uint32{0}, []int16{0})

	// A prepared statement with declared types, as drivers send it.
	pc := e.c.PgConn()
	for _, pre := range []string{"dv_", "dvo_"} {
		if _, err := pc.Prepare(context.Background(), "dvp_"+pre, "SELECT v FROM "+pre+"int8 WHERE id = $1", []uint32{int2}); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range []int16{300, 301, 302} {
		var got [2][]string
		for i, pre := range []string{"dv_", "dvo_"} {
			res := pc.ExecPrepared(context.Background(), "dvp_"+pre, [][]byte{be16(v)}, []int16{1}, nil).Read()
			if res.Err != nil {
				t.Fatalf("prepared %s: %v", pre, res.Err)
			}
			for _, r := range res.Rows {
				got[i] = append(got[i], string(r[0]))
			}
		}
		if !reflect.DeepEqual(got[0], got[1]) {
			t.Errorf("prepared int2 %d: %v, plain PostgreSQL %v", v, got[0], got[1])
		}
	}
	e.placed()
}

// TestDistributionColumnNotMoved: ON CONFLICT DO UPDATE (and UPDATE's other
// forms) may not assign the distribution column: the row would keep its
// shard under another key (issue 8, class 6).
func TestDistributionColumnNotMoved(t *testing.T) {
	e := newDistEnv(t)
	e.same("INSERT INTO {t}int8 (id, v) VALUES (1, 'one'), (2, 'two')", nil, nil, nil)
	e.refused("INSERT INTO {t}int8 (id, v) VALUES (1, 'x') ON CONFLICT (id) DO UPDATE SET id = 100")
	e.refused("INSERT INTO {t}int8 (id, v) VALUES (1, 'x') ON CONFLICT (id) DO UPDATE SET v = 'y', id = EXCLUDED.id + 1")
	e.refused("INSERT INTO {t}int8 (id, v) VALUES (1, 'x') ON CONFLICT (id) DO UPDATE SET (v, id) = ('y', 100)")
	e.refused("INSERT INTO {t}int8 (id, v) VALUES (1, 'x') ON CONFLICT ON CONSTRAINT dv_int8_pkey DO UPDATE SET id = EXCLUDED.id")
	e.refused("UPDATE {t}int8 SET id = 100 WHERE id = 1")
	e.refused("UPDATE {t}int8 SET (v, id) = ('y', 100) WHERE id = 1")
	e.refused("UPDATE {t}int8 SET (v, id) = (SELECT 'y', 100) WHERE id = 1")
	e.refused("UPDATE {t}int8 SET (v, id) = ROW('y', 100) WHERE id = 1")
	e.refused("MERGE INTO {t}int8 d USING (SELECT 1 AS k) s ON d.id = s.k WHEN MATCHED THEN UPDATE SET id = 100")
	// Keeping the value is fine, and so is updating the other columns.
	e.same("INSERT INTO {t}int8 (id, v) VALUES (1, 'x') ON CONFLICT (id) DO UPDATE SET id = EXCLUDED.id, v = 'kept'", nil, nil, nil)
	e.same("INSERT INTO {t}int8 (id, v) VALUES (2, 'x') ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v || '!'", nil, nil, nil)
	e.same("INSERT INTO {t}int8 (id, v) VALUES ($1, 'x') ON CONFLICT (id) DO UPDATE SET v = 'bound'", [][]byte{be32(2)}, []uint32{23}, []int16{1})
	e.same("SELECT id, v FROM {t}int8 WHERE id = 100", nil, nil, nil)
	e.placed()
}

// TestDistributionValueCopy: COPY's values are hashed as the column's input
// function stores them: varchar(n) cuts trailing spaces, bpchar ignores
// them, integers take white space.
func TestDistributionValueCopy(t *testing.T) {
	e := newDistEnv(t)
	ctx := context.Background()
	load := map[string]string{
		"vc":   "abcd   \tc1\nxy \tc2\n\u00e9t\u00e9   \tc3\nabcdefgh\tlong\n",
		"bp":   "a   \tc1\nbb\tc2\n",
		"int8": " 42 \tc1\n-7\tc2\n",
		"text": "a \tc1\na\tc2\n",
	}
	for _, name := range []string{"vc", "bp", "int8", "text"} {
		var got, want string
		for i, pre := range []string{"dv_", "dvo_"} {
			_, err := e.c.PgConn().CopyFrom(ctx, strings.NewReader(load[name]), "COPY "+pre+name+" (id, v) FROM STDIN")
			if i == 0 {
				got = sqlState(err)
			} else {
				want = sqlState(err)
			}
		}
		if got != want {
			t.Errorf("COPY into %s: SQLSTATE %q, plain PostgreSQL %q", name, got, want)
		}
	}
	// The load that failed (a value too long for varchar(4)) left nothing;
	// load the rest.
	for _, pre := range []string{"dv_", "dvo_"} {
		if _, err := e.c.PgConn().CopyFrom(ctx, strings.NewReader("abcd   \tc1\nxy \tc2\n\u00e9t\u00e9   \tc3\n"), "COPY "+pre+"vc (id, v) FROM STDIN"); err != nil {
			t.Fatal(err)
		}
	}
	e.same("SELECT v FROM {t}vc WHERE id = 'abcd'", nil, nil, nil)
	e.same("SELECT v FROM {t}vc WHERE id = 'été '", nil, nil, nil)
	// In another client_encoding the worker converts the values: a
	// non-ASCII one is PostgreSQL's or refused, never misplaced.
	e.same("SET client_encoding = 'LATIN1'", nil, nil, nil)
	_, err := e.c.PgConn().CopyFrom(ctx, strings.NewReader("caf\xe9\tl1\n"), "COPY dv_text (id, v) FROM STDIN")
	if _, oerr := e.c.PgConn().CopyFrom(ctx, strings.NewReader("caf\xe9\tl1\n"), "COPY dvo_text (id, v) FROM STDIN"); sqlState(err) != "0A000" && sqlState(err) != sqlState(oerr) {
		t.Errorf("COPY in LATIN1: %v, plain PostgreSQL %v", err, oerr)
	}
	if sqlState(err) == "0A000" {
		exec(t, e.c, "DELETE FROM dvo_text WHERE v = 'l1'")
	}
	e.same("RESET client_encoding", nil, nil, nil)
	e.same("SELECT v FROM {t}bp WHERE id = 'a'", nil, nil, nil)
	e.same("SELECT v FROM {t}int8 WHERE id = 42", nil, nil, nil)
	e.placed()
}

// TestVarcharPadHeldOnOtherWorker: a transaction holding a connection to a
// worker other than the default node inserts 'wxyz   ' into varchar(4).
// The column's type (with its length) was read from that worker, where
// only shards exist, found nothing and fell back to plain varchar: the
// value was hashed with its spaces and the row stored in the wrong shard
// (difftest seed 20261209, statement 4633). The type is read from a shard
// there now.
func TestVarcharPadHeldOnOtherWorker(t *testing.T) {
	e := newDistEnv(t)
	ctx := context.Background()
	key := e.keyElsewhere("public.dv_vc", "hashtext", func(i int) string { return fmt.Sprintf("h%03d", i) })
	for _, pre := range []string{"dv_", "dvo_"} {
		exec(t, e.c, "INSERT INTO "+pre+"vc (id, v) VALUES ('wxyz', 'first')")
	}
	for _, pre := range []string{"dv_", "dvo_"} {
		tx, err := e.c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SELECT v FROM "+pre+"vc WHERE id = '"+key+"'", pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatal(err)
		}
		tag, err := tx.Exec(ctx, "INSERT INTO "+pre+"vc (id, v) VALUES ('wxyz   ', 'padded') ON CONFLICT DO NOTHING", pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			t.Fatalf("%s: %v", pre, err)
		}
		if tag.String() != "INSERT 0 0" {
			t.Errorf("%s: %s, want INSERT 0 0 ('wxyz' is there)", pre, tag)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	e.same("SELECT id, v FROM {t}vc WHERE id = 'wxyz'", nil, nil, nil)
	e.placed()
}

// keyElsewhere returns the first of the keys key(0), key(1), ... of table
// whose shard is not on the default node (the metadata worker); hashFn is
// the column type's hash function.
func (e *distEnv) keyElsewhere(table, hashFn string, key func(int) string) string {
	e.t.Helper()
	meta := connect(e.t, e.meta)
	for i := 0; i < 200; i++ {
		var addr string
		if err := meta.QueryRow(context.Background(), `SELECT n.host || ':' || n.port FROM pgfleet.shards s
			JOIN pgfleet.placements p USING (shardid) JOIN pgfleet.nodes n USING (nodeid)
			WHERE s.table_name = $1 AND pg_catalog.`+hashFn+`($2) BETWEEN s.min_hash AND s.max_hash`, table, key(i)).Scan(&addr); err != nil {
			e.t.Fatal(err)
		}
		if addr != e.meta {
			return key(i)
		}
	}
	e.t.Fatalf("no key of %s has its shard on the second worker", table)
	return ""
}

// TestUnparsedLatin1AfterSetInTransaction: a transaction on the second
// worker sets client_encoding LATIN1, then sends a statement pgfleet
// cannot parse with LATIN1 text. Asking the default node to parse it on a
// pooled connection (without the transaction's SET) read the text as
// UTF-8 and answered 22021 where PostgreSQL reads it as LATIN1 (difftest
// seed 20261209, statement 12575). Such a statement is refused now.
func TestUnparsedLatin1AfterSetInTransaction(t *testing.T) {
	e := newDistEnv(t)
	ctx := context.Background()
	key := e.keyElsewhere("public.dv_int4", "hashint4", func(i int) string { return fmt.Sprint(i + 1) })
	pc := e.c.PgConn()
	var codes []string
	for _, q := range []string{"BEGIN", "SELECT v FROM dv_int4 WHERE id = " + key, "SET client_encoding TO 'LATIN1'",
		"XX INSERT INTO dv_int4 (id, v) VALUES (1, 'na\xefve')", "ROLLBACK", "SET client_encoding TO 'UTF8'"} {
		_, err := pc.Exec(ctx, q).ReadAll()
		codes = append(codes, sqlState(err))
	}
	if want := []string{"", "", "", "0A000", "", ""}; !reflect.DeepEqual(codes, want) {
		t.Errorf("SQLSTATEs %q, want %q (PostgreSQL: 42601 for the statement; 0A000 is pgfleet's refusal)", codes, want)
	}
	// Outside a transaction the default node still gives PostgreSQL's error.
	for _, q := range []string{"SET client_encoding TO 'LATIN1'", "XX INSERT INTO dv_int4 (id, v) VALUES (1, 'na\xefve')", "SET client_encoding TO 'UTF8'"} {
		_, err := pc.Exec(ctx, q).ReadAll()
		if got := sqlState(err); q[0] == 'X' && got != "42601" {
			t.Errorf("%q outside a transaction: %q, want 42601", q, got)
		}
	}
}

// sameInTx is same for a statement run in a transaction after pre, each
// side in its own transaction (an error aborts it), rolled back after.
func (e *distEnv) sameInTx(pre, sql string, args [][]byte, oids []uint32, formats []int16) {
	e.t.Helper()
	e.inTx(false, pre, sql, args, oids, formats)
}

// inTx is sameInTx; refusable allows pgfleet's 0A000.
func (e *distEnv) inTx(refusable bool, pre, sql string, args [][]byte, oids []uint32, formats []int16) {
	e.t.Helper()
	var outs [2]oracleRun
	for i, prefix := range []string{"dv_", "dvo_"} {
		for _, q := range []string{"BEGIN", strings.ReplaceAll(pre, "{t}", prefix)} {
			if r := rawRun(e.c.PgConn(), q, nil, nil, nil); r.State != "" {
				e.t.Fatalf("%s: %s", q, r.State)
			}
		}
		outs[i] = rawRun(e.c.PgConn(), strings.ReplaceAll(sql, "{t}", prefix), args, oids, formats)
		rawRun(e.c.PgConn(), "ROLLBACK", nil, nil, nil)
	}
	if !reflect.DeepEqual(outs[0], outs[1]) && !(refusable && outs[0].State == "0A000") {
		e.t.Errorf("after BEGIN; %s: %s %q (oids %v):\n got %+v\nwant %+v (plain PostgreSQL)", pre, sql, args, oids, outs[0], outs[1])
	}
}

// TestDistributionValueErrorOrder: a parameter its declared type rejects
// (-32769 as int2) fails at Bind, after any error of Parse (a constant the
// column rejects: '05/15/2001' as a date under DMY). The coordinator read
// the parameter itself and answered 22003 where PostgreSQL answers 22008
// (difftest seed 20261209, statement 150843); in a transaction it now asks
// PostgreSQL, and the worker decides which error comes first.
func TestDistributionValueErrorOrder(t *testing.T) {
	e := newDistEnv(t)
	exec(t, e.c, "SET DateStyle TO DMY")
	t.Cleanup(func() { exec(t, e.c, "RESET DateStyle") })
	const ins = "INSERT INTO {t}int4 (id, v) VALUES ($1, '%s'::date::text)"
	const uuidSel = "SELECT count(*) FROM {t}int4 WHERE v = '%s'::date::text AND $1::uuid IS NOT NULL"
	for _, pre := range []string{"SELECT 1", "SELECT v FROM {t}int4 WHERE id = 1", "SELECT v FROM {t}int4 WHERE id = 2", "SELECT count(*) FROM {t}int4"} {
		for _, date := range []string{"05/15/2001", "15/05/2001"} {
			for _, v := range []string{"-32769", "32768", "x", "7"} {
				e.sameInTx(pre, fmt.Sprintf(ins, date), [][]byte{[]byte(v)}, []uint32{21}, []int16{0})
				e.sameInTx(pre, fmt.Sprintf(ins, date), [][]byte{[]byte(v)}, []uint32{0}, []int16{0})
			}
			e.sameInTx(pre, fmt.Sprintf(uuidSel, date), [][]byte{[]byte("not-a-uuid")}, []uint32{2950}, []int16{0})
		}
		// A computed value failing outside the transaction proves
		// nothing (its casts may be the transaction's): refused or right.
		e.inTx(true, pre, "INSERT INTO {t}text (id, v) VALUES ($1::uuid::text, '05/15/2001'::date::text)", [][]byte{[]byte("zz")}, []uint32{0}, []int16{0})
	}
	// Outside a transaction too.
	for _, v := range []string{"-32769", "x"} {
		e.same(fmt.Sprintf(ins, "05/15/2001"), [][]byte{[]byte(v)}, []uint32{21}, []int16{0})
		e.same(fmt.Sprintf(ins, "15/05/2001"), [][]byte{[]byte(v)}, []uint32{21}, []int16{0})
	}
	e.placed()
}
