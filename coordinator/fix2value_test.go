package coordinator_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestUnparsedNotOnShell: a statement naming a distributed table that
// pgfleet's parser cannot read (client_encoding LATIN1 or SJIS with
// non-ASCII text, string continuations pg_query rejects) or that a text scan
// could miss (U&"..." names) never runs on the default node's empty shell
// table: it gets PostgreSQL's answer, PostgreSQL's syntax error, or 0A000.
func TestUnparsedNotOnShell(t *testing.T) {
	e := newDistEnv(t)
	e.same("INSERT INTO {t}text (id, v) VALUES ('Abc', 'x'), ('b', 'y'), ('c', 'z'), ('d', 'w')", nil, nil, nil)
	// String continuation: one literal 'Abc' in PostgreSQL.
	e.once("SELECT v FROM {t}text WHERE id = 'A' -- comment\n 'bc'", nil, nil)
	e.once("SELECT v FROM {t}text WHERE id = 'A'\n'bc'", nil, nil)
	e.once("SELECT v FROM {t}text WHERE id = 'A'\n-- c\n'b' -- d\n   'c'", nil, nil)
	e.once("INSERT INTO {t}text (id, v) VALUES ('q' -- c\n 'r', 'cont')", nil, nil)
	e.once("UPDATE {t}text SET v = 'upd' WHERE id = 'A' -- c\n 'bc'", nil, nil)
	e.once("SELECT v FROM {t}text WHERE id = 'A' /* c */ 'bc'", nil, nil) // 42601 in PostgreSQL
	// PostgreSQL's own syntax errors, with their position.
	e.same("SELECT v FROM {t}text WHERE id = = 'x'", nil, nil, nil)
	e.same("SELECT v FROM {t}text WHERE id = 'x' ORDER", nil, nil, nil)
	// Unicode-escaped names.
	e.same(`SELECT count(*) FROM U&"{t}\0074ext"`, nil, nil, nil)
	e.same(`SELECT count(*) FROM U&"{t}!0074ext" UESCAPE '!'`, nil, nil, nil)
	e.once(`UPDATE U&"{t}\0074ext" SET v = 'u' WHERE id = 'b'`, nil, nil)
	e.once(`DELETE FROM u&"{t}\0074ext" WHERE id = 'c'`, nil, nil)
	// LATIN1 with non-ASCII text the literal lifter leaves in place.
	e.same("SET client_encoding = 'LATIN1'", nil, nil, nil)
	e.same("INSERT INTO {t}text (id, v) VALUES ('caf\xe9', 'l1')", nil, nil, nil)
	for _, q := range []string{
		"SELECT count(*) FROM {t}text WHERE id = E'caf\xe9'",
		"SELECT count(*) FROM {t}text WHERE id = U&'caf\xe9'",
		"SELECT count(*) FROM {t}text WHERE id = $$caf\xe9$$",
		"SELECT count(*) FROM {t}text WHERE id = 'caf\xe9'::varchar(10)",
		"SELECT count(*) FROM {t}text WHERE v = E'l1' AND id = 'caf\xe9' || ''",
		"INSERT INTO {t}text (id, v) VALUES (E'\xe9\xe9', 'l2')",
		"UPDATE {t}text SET v = E'\xe9' WHERE id = 'd'",
	} {
		e.once(q, nil, nil)
	}
	// Extended protocol: the same statements, prepared.
	e.once("SELECT count(*) FROM {t}text WHERE id = E'caf\xe9' AND v = $1", [][]byte{[]byte("l1")}, []uint32{25})
	e.once(`SELECT count(*) FROM U&"{t}\0074ext" WHERE v = $1`, [][]byte{[]byte("x")}, []uint32{25})
	e.same("SELECT count(*) FROM {t}text WHERE id = E'caf\xe9' ORDER", nil, nil, nil) // 42601
	// Statements that only mention the name in a string still run.
	if got := rawRun(e.c.PgConn(), "SELECT E'dv_text \xe9'", nil, nil, nil); len(got.Rows) != 1 || got.Rows[0][0] != "dv_text \xe9" {
		t.Errorf("LATIN1 string naming a table: %+v", got)
	}
	e.same("RESET client_encoding", nil, nil, nil)
	// SJIS: 0x95 0x5c is one character whose second byte is a backslash.
	e.same("SET client_encoding = 'SJIS'", nil, nil, nil)
	e.once("INSERT INTO {t}text (id, v) VALUES ('\x95\x5c', 'sjis')", nil, nil)
	e.once("SELECT count(*) FROM {t}text WHERE v = E'\x95\x5c'", nil, nil)
	e.once("SELECT count(*) FROM {t}text WHERE id = '\x95\x5c'", nil, nil)
	e.same("RESET client_encoding", nil, nil, nil)
	// In a transaction block: a syntax error fails it as on PostgreSQL.
	a, b := connect(t, e.addr), connect(t, e.addr)
	e.script(a, b, []string{"BEGIN", "INSERT INTO {t}text (id, v) VALUES ('t1', 'x')",
		"SELECT v FROM {t}text WHERE id = = 'x'", "SELECT 1", "ROLLBACK",
		"BEGIN", "INSERT INTO {t}text (id, v) VALUES ('t2', 'x')",
		"SELECT v FROM {t}text WHERE id = 'A' -- c\n 'bc' OR", "ROLLBACK",
		"SELECT count(*) FROM {t}text WHERE id IN ('t1', 't2')"})
	e.placed()
}

// TestDistributionValueClock: a distribution value PostgreSQL reads as the
// current time from a constant ('now') is refused, not evaluated on another
// connection (whose 'now' is another moment); a function of the clock is
// evaluated once, apart from the INSERT, and the row placed by that value.
func TestDistributionValueClock(t *testing.T) {
	e := newDistEnv(t)
	for _, q := range []string{
		"INSERT INTO {t}text (id, v) VALUES ('now'::timestamptz::text, 'a')",
		"INSERT INTO {t}text (id, v) VALUES ('today'::date::text, 'a')",
		"INSERT INTO {t}text (id, v) VALUES (' Tomorrow '::date::text, 'a')",
		"INSERT INTO {t}text (id, v) VALUES ('yesterday 10:00'::timestamp::text, 'a')",
		"SELECT v FROM {t}text WHERE id = 'now'::timestamptz::text",
		"SELECT v FROM {t}int8 WHERE id = extract(epoch FROM 'now'::timestamptz)::int8",
		"INSERT INTO {t}text (id, v) VALUES ('today'::date::text, 'a'), ('x', 'b')",
		"UPDATE {t}text SET v = 'u' WHERE id = 'now'::date::text",
		"DELETE FROM {t}text WHERE id = 'now'::timestamptz::text",
	} {
		got := rawRun(e.c.PgConn(), replaceT(q, "dv_"), nil, nil, nil)
		if got.State != "0A000" && got.State != "42601" {
			// The last one has a function: not a value the router reads,
			// so it may be planned otherwise, but never misplaced.
			if q != "SELECT v FROM {t}int8 WHERE id = extract(epoch FROM 'now'::timestamptz)::int8" {
				t.Errorf("%s: %+v, want 0A000", q, got)
			}
		}
	}
	// A function of the clock (or random()) is not a value the router
	// reads: PostgreSQL evaluates it once, apart from the INSERT (as
	// Citus does), and the row goes where that value belongs.
	for _, q := range []string{
		"INSERT INTO {t}text (id, v) VALUES (now()::text, 'clock')",
		"INSERT INTO {t}text (id, v) VALUES (CURRENT_DATE::text, 'clock')",
		"INSERT INTO {t}text (id, v) VALUES (random()::text, 'clock')",
	} {
		if got := rawRun(e.c.PgConn(), replaceT(q, "dv_"), nil, nil, nil); got.State != "" || got.Tag != "INSERT 0 1" {
			t.Errorf("%s: %+v, want INSERT 0 1", q, got)
		}
	}
	clock := rawRun(e.c.PgConn(), "SELECT id FROM dv_text WHERE v = 'clock'", nil, nil, nil)
	if len(clock.Rows) != 3 {
		t.Errorf("the clock rows: %+v, want 3", clock)
	}
	for _, r := range clock.Rows {
		// A read routed by the value finds the row.
		if got := rawRun(e.c.PgConn(), "SELECT v FROM dv_text WHERE id = $1", [][]byte{[]byte(r[0])}, []uint32{25}, nil); len(got.Rows) != 1 {
			t.Errorf("routed read of %q: %+v", r[0], got)
		}
	}
	if got := rawRun(e.c.PgConn(), "DELETE FROM dv_text WHERE v = 'clock'", nil, nil, nil); got.Tag != "DELETE 3" {
		t.Errorf("the clock rows: %+v, want DELETE 3", got)
	}
	p := func(s string) [][]byte { return [][]byte{[]byte(s)} }
	for _, c := range []struct {
		q   string
		oid uint32
	}{
		{"INSERT INTO {t}text (id, v) VALUES ($1::timestamptz::text, 'p')", 0},
		{"INSERT INTO {t}text (id, v) VALUES ($1::text, 'p')", 1184},
		{"INSERT INTO {t}text (id, v) VALUES ($1::date::text, 'p')", 25},
	} {
		got := rawRun(e.c.PgConn(), replaceT(c.q, "dv_"), p("now"), []uint32{c.oid}, []int16{0})
		if got.State != "0A000" {
			t.Errorf("%s with 'now' (oid %d): %+v, want 0A000", c.q, c.oid, got)
		}
	}
	// Values that only look like time words are computed as before.
	e.same("INSERT INTO {t}text (id, v) VALUES ('2020-01-03'::date::text, 'd')", nil, nil, nil)
	e.same("INSERT INTO {t}text (id, v) VALUES ('snow'::varchar(10), 's')", nil, nil, nil)
	e.same("INSERT INTO {t}text (id, v) VALUES ($1::date::text, 'p')", p("2021-02-03"), []uint32{0}, []int16{0})
	e.same("SELECT v FROM {t}text WHERE id = '2021-02-03'", nil, nil, nil)
	e.placed()
}

// once runs sql on the distributed table; unless pgfleet refuses it
// (0A000), it runs on the oracle too and the outcomes must agree. Unlike
// sameOr0A000, a write runs once on each.
func (e *distEnv) once(sql string, args [][]byte, oids []uint32) {
	e.t.Helper()
	got := rawRun(e.c.PgConn(), replaceT(sql, "dv_"), args, oids, nil)
	if got.State == "0A000" {
		return
	}
	want := rawRun(e.c.PgConn(), replaceT(sql, "dvo_"), args, oids, nil)
	if !reflect.DeepEqual(got, want) {
		e.t.Errorf("%s %q:\n got %+v\nwant %+v (plain PostgreSQL)", sql, args, got, want)
	}
}

// script runs steps on the distributed tables over connection a, then on
// the oracle over b, and compares each step's outcome.
func (e *distEnv) script(a, b *pgx.Conn, steps []string) {
	e.t.Helper()
	var got []oracleRun
	for _, s := range steps {
		got = append(got, rawRun(a.PgConn(), replaceT(s, "dv_"), nil, nil, nil))
	}
	for i, s := range steps {
		if want := rawRun(b.PgConn(), replaceT(s, "dvo_"), nil, nil, nil); !reflect.DeepEqual(got[i], want) {
			e.t.Errorf("%s:\n got %+v\nwant %+v (plain PostgreSQL)", s, got[i], want)
		}
	}
}

func replaceT(q, pre string) string {
	out := []byte{}
	for i := 0; i < len(q); i++ {
		if i+3 <= len(q) && q[i:i+3] == "{t}" {
			out = append(out, pre...)
			i += 2
			continue
		}
		out = append(out, q[i])
	}
	return string(out)
}

// TestDistributionValueSessionSettings: a value PostgreSQL computes is
// computed under the session's true settings: set_config() in a
// transaction, SET LOCAL, and a session pinned by set_config().
func TestDistributionValueSessionSettings(t *testing.T) {
	e := newDistEnv(t)
	a, b := connect(t, e.addr), connect(t, e.addr)
	e.script(a, b, []string{"BEGIN", "SELECT set_config('DateStyle', 'SQL, DMY', true)",
		"INSERT INTO {t}text (id, v) VALUES ('2020-01-03'::date::text, 'r1')",
		"SELECT v FROM {t}text WHERE id = '2020-01-04'::date::text",
		"COMMIT",
		"SELECT v FROM {t}text WHERE id = '03/01/2020'",
	})
	// set_config() keeps a session on its worker: fresh sessions.
	a, b = connect(t, e.addr), connect(t, e.addr)
	e.script(a, b, []string{"BEGIN", "SET LOCAL DateStyle = 'German'",
		"INSERT INTO {t}text (id, v) VALUES ('2020-01-05'::date::text, 'r2')",
		"INSERT INTO {t}text (id, v) VALUES ('2020-01-06'::date::text, 'r3')",
		"SELECT v FROM {t}text WHERE id = '2020-01-05'::date::text",
		"COMMIT",
		"SELECT v FROM {t}text WHERE id = '05.01.2020'",
		"SELECT v FROM {t}text WHERE id = '06.01.2020'",
	})
	a, b = connect(t, e.addr), connect(t, e.addr)
	e.script(a, b, []string{
		// A value that fails fails the transaction as in PostgreSQL; one
		// that works leaves it as it was.
		"BEGIN", "SELECT v FROM {t}text WHERE id = ' 16'::int::text",
		"INSERT INTO {t}text (id, v) VALUES (' 17'::int::text, 'r4')",
		"SELECT v FROM {t}text WHERE id = '17'",
		"INSERT INTO {t}text (id, v) VALUES ('x'::int::text, 'bad')",
		"SELECT 1",
		"ROLLBACK",
		"SELECT v FROM {t}text WHERE id = '17'",
	})
	// Extended protocol in a transaction after SET LOCAL: PostgreSQL's
	// answer or 0A000, never a misplaced row.
	exec(t, a, "BEGIN")
	exec(t, a, "SET LOCAL DateStyle = 'SQL, DMY'")
	res := rawRun(a.PgConn(), "INSERT INTO dv_text (id, v) VALUES ($1::date::text, 'r5')", [][]byte{[]byte("2020-01-07")}, []uint32{0}, nil)
	exec(t, a, "COMMIT")
	if res.State == "" {
		exec(t, e.c, "INSERT INTO dvo_text (id, v) VALUES ('07/01/2020', 'r5')")
	} else if res.State != "0A000" {
		t.Errorf("extended INSERT after SET LOCAL: %+v", res)
	}
	// A session pinned by set_config(): its values are computed on its own
	// connection; a row on another worker is refused (the session is kept
	// on one), never misplaced.
	exec(t, a, "SELECT set_config('DateStyle', 'SQL, DMY', false)")
	for _, d := range []string{"2020-01-08", "2020-01-09", "2020-01-10", "2020-01-11", "2020-01-12"} {
		res := rawRun(a.PgConn(), "INSERT INTO dv_text (id, v) VALUES ('"+d+"'::date::text, 'pin')", nil, nil, nil)
		switch res.State {
		case "":
			exec(t, e.c, "INSERT INTO dvo_text (id, v) VALUES ($1, 'pin')", d[8:]+"/01/2020")
		case "0A000":
		default:
			t.Errorf("pinned INSERT %s: %+v", d, res)
		}
	}
	e.placed()
}

// TestPreparedParsedSettings: PostgreSQL reads a prepared statement's
// constants under the settings of its Parse. After a change of those
// settings, a Bind gets PostgreSQL's answer or 0A000; statements without
// string constants are unaffected.
func TestPreparedParsedSettings(t *testing.T) {
	e := newDistEnv(t)
	ctx := context.Background()
	pc := e.c.PgConn()
	e.same("SET DateStyle = 'ISO, MDY'", nil, nil, nil)
	e.same("SET TimeZone = 'UTC'", nil, nil, nil)
	prep := func(name, sql string) {
		if _, err := pc.Prepare(ctx, name, sql, nil); err != nil {
			t.Fatalf("prepare %s: %v", sql, err)
		}
	}
	for _, pre := range []string{"dv_", "dvo_"} {
		prep("ins_"+pre, "INSERT INTO "+pre+"int8 (id, v) VALUES ($1, '01/02/2020'::date::text)")
		prep("sel_"+pre, "SELECT v FROM "+pre+"int8 WHERE id = $1")
	}
	prep("lit", "SELECT '01/02/2020'::date::text, '2020-01-01 00:00'::timestamptz::text")
	e.same("SET DateStyle = 'ISO, DMY'", nil, nil, nil)
	e.same("SET TimeZone = 'Asia/Tokyo'", nil, nil, nil)
	res := pc.ExecPrepared(ctx, "lit", nil, nil, nil).Read()
	if st := sqlState(res.Err); st != "0A000" && !(res.Err == nil && len(res.Rows) == 1 &&
		string(res.Rows[0][0]) == "2020-01-02" && string(res.Rows[0][1]) == "2020-01-01 09:00:00+09") {
		t.Errorf("prepared literals after SET: %v %q, want PostgreSQL's 2020-01-02, 2020-01-01 09:00:00+09 or 0A000", res.Err, res.Rows)
	}
	var got, want []string
	for i, pre := range []string{"dv_", "dvo_"} {
		res := pc.ExecPrepared(ctx, "ins_"+pre, [][]byte{[]byte("5")}, nil, nil).Read()
		if i == 0 && sqlState(res.Err) == "0A000" {
			break
		}
		for _, id := range []string{"5"} {
			r := pc.ExecPrepared(ctx, "sel_"+pre, [][]byte{[]byte(id)}, nil, nil).Read()
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			for _, row := range r.Rows {
				if i == 0 {
					got = append(got, string(row[0]))
				} else {
					want = append(want, string(row[0]))
				}
			}
		}
		if i == 1 && len(got) > 0 && (len(got) != len(want) || got[0] != want[0]) {
			t.Errorf("prepared INSERT after SET DateStyle stored %q, PostgreSQL %q", got, want)
		}
	}
	// After a change of TimeZone alone, a constant that names its own
	// offset is read the same (pgx's TestTimestamptzCodecPOSIXTimezones);
	// one that does not gets PostgreSQL's reading or 0A000.
	prep("own", "SELECT '2024-07-01 00:00:00+00'::timestamptz = '2024-07-01 00:00:00+00'::timestamptz, '2024-07-01 00:00:00+00'::timestamptz::text")
	prep("bare", "SELECT '2024-07-01 00:00:00'::timestamptz::text")
	e.same("SET TimeZone = 'XXX16'", nil, nil, nil)
	if r := pc.ExecPrepared(ctx, "own", nil, nil, nil).Read(); r.Err != nil || len(r.Rows) != 1 || string(r.Rows[0][1]) != "2024-06-30 08:00:00-16" {
		t.Errorf("prepared constant with its own offset after SET TimeZone: %v %q, want 2024-06-30 08:00:00-16", r.Err, r.Rows)
	}
	if r := pc.ExecPrepared(ctx, "bare", nil, nil, nil).Read(); sqlState(r.Err) != "0A000" &&
		!(r.Err == nil && len(r.Rows) == 1 && string(r.Rows[0][0]) == "2024-06-29 23:00:00-16") {
		t.Errorf("prepared constant without offset after SET TimeZone: %v %q, want PostgreSQL's 2024-06-29 23:00:00-16 or 0A000", r.Err, r.Rows)
	}
	// Statements without string constants run under any settings.
	for _, pre := range []string{"dv_", "dvo_"} {
		if r := pc.ExecPrepared(ctx, "sel_"+pre, [][]byte{[]byte("5")}, nil, nil).Read(); r.Err != nil {
			t.Errorf("prepared statement without string constants after SET: %v", r.Err)
		}
	}
	// A statement prepared in a transaction after SET LOCAL of a setting
	// that reads no constant runs after it as before.
	exec(t, e.c, "BEGIN")
	exec(t, e.c, "SET LOCAL statement_timeout = '50s'")
	prep("lit3", "SELECT '01/02/2020'::date::text")
	exec(t, e.c, "COMMIT")
	for i := 0; i < 2; i++ {
		if r := pc.ExecPrepared(ctx, "lit3", nil, nil, nil).Read(); r.Err != nil || len(r.Rows) != 1 || string(r.Rows[0][0]) != "2020-02-01" {
			t.Errorf("prepared in a transaction after SET LOCAL statement_timeout: %v %q, want 2020-02-01", r.Err, r.Rows)
		}
	}
	// One pipeline: Parse, then SET DateStyle, then Bind: PostgreSQL's
	// reading of the Parse, or 0A000.
	exec(t, e.c, "SET DateStyle = 'ISO, MDY'")
	pl := pc.StartPipeline(ctx)
	pl.SendPrepare("pl1", "SELECT '01/02/2020'::date::text", nil)
	pl.SendQueryParams("SET DateStyle = 'ISO, DMY'", nil, nil, nil, nil)
	pl.SendQueryPrepared("pl1", nil, nil, nil)
	pl.SendPipelineSync()
	if err := pl.Flush(); err != nil {
		t.Fatal(err)
	}
	var answers []string
	for {
		r, err := pl.GetResults()
		if err != nil {
			answers = append(answers, "error "+sqlState(err))
			continue
		}
		if r == nil {
			break
		}
		if rr, ok := r.(*pgconn.ResultReader); ok {
			res := rr.Read()
			switch {
			case res.Err != nil:
				answers = append(answers, "error "+sqlState(res.Err))
			case len(res.Rows) == 1:
				answers = append(answers, string(res.Rows[0][0]))
			default:
				answers = append(answers, res.CommandTag.String())
			}
		}
		if _, ok := r.(*pgconn.PipelineSync); ok {
			break
		}
	}
	if err := pl.Close(); err != nil && sqlState(err) != "0A000" {
		t.Fatal(err)
	}
	if last := answers[len(answers)-1]; last != "2020-01-02" && last != "error 0A000" {
		t.Errorf("pipeline Parse, SET DateStyle, Bind: %q, want PostgreSQL's 2020-01-02 or 0A000", answers)
	}
	// (A refusal fails the pipeline's implicit transaction, SET included.)
	exec(t, e.c, "SET DateStyle = 'ISO, DMY'")
	// Prepared again under the new settings: PostgreSQL's answer.
	prep("lit2", "SELECT '01/02/2020'::date::text")
	if r := pc.ExecPrepared(ctx, "lit2", nil, nil, nil).Read(); r.Err != nil || len(r.Rows) != 1 || string(r.Rows[0][0]) != "2020-02-01" {
		t.Errorf("prepared after SET: %v %q, want 2020-02-01", r.Err, r.Rows)
	}
	e.same("RESET DateStyle", nil, nil, nil)
	e.same("RESET TimeZone", nil, nil, nil)
	e.placed()
}

// TestEncodingInsertCopy: multi-row INSERT and COPY in client_encoding
// LATIN1, and COPY ... (ENCODING 'LATIN1'), store and place rows as
// PostgreSQL does (or are refused).
func TestEncodingInsertCopy(t *testing.T) {
	e := newDistEnv(t)
	ctx := context.Background()
	e.same("SET client_encoding = 'LATIN1'", nil, nil, nil)
	e.once("INSERT INTO {t}text (id, v) VALUES ('\xe9a', 'm1'), ('\xe9b', 'm2'), ('\xe9c', 'm3'), ('q', 'm4'), ('\xc3\xa9', 'm5')", nil, nil)
	e.once("INSERT INTO {t}vc (id, v) VALUES ('\xe9t\xe9 ', 'v1'), ('\xe0  ', 'v2'), ('x', 'v3')", nil, nil)
	for _, id := range []string{"\xe9a", "\xe9b", "\xe9c", "q", "\xc3\xa9"} {
		e.same("SELECT v FROM {t}text WHERE id = '"+id+"'", nil, nil, nil)
	}
	copyBoth := func(data, opts string) {
		t.Helper()
		var states [2]string
		for i, pre := range []string{"dv_", "dvo_"} {
			_, err := e.c.PgConn().CopyFrom(ctx, strings.NewReader(data), "COPY "+pre+"text (id, v) FROM STDIN"+opts)
			states[i] = sqlState(err)
			if i == 0 && states[0] == "0A000" {
				return
			}
		}
		if states[0] != states[1] {
			t.Errorf("COPY%s %q: SQLSTATE %q, plain PostgreSQL %q", opts, data, states[0], states[1])
		}
	}
	copyBoth("\xe8a\tc1\n\xe8b\tc2\n\xe8c\tc3\n", "")
	e.same("RESET client_encoding", nil, nil, nil)
	copyBoth("\xeca\te1\n\xecb\te2\n\xecc\te3\nplain\te4\n", " (ENCODING 'LATIN1')")
	copyBoth("\xeca\te1\n", " (ENCODING 'UTF8')") // 22021 on both
	copyBoth("\xc3\xaca,e5\n", " (FORMAT csv, ENCODING 'LATIN1')")
	copyBoth("\xc3\xacb\te6\n", " WITH ENCODING 'UTF8'")
	e.same("INSERT INTO {t}text (id, v) VALUES ('\xe9z', 'bad'), ('y', 'bad')", nil, nil, nil) // 22021
	for _, id := range []string{"èa", "èb", "èc", "ìa", "ìb", "ìc", "plain", "Ã¬a", "ìb", "éa", "Ã©"} {
		e.same("SELECT v FROM {t}text WHERE id = '"+id+"'", nil, nil, nil)
	}
	e.placed()
}

// TestDistributionValueVolatileCast: a computed distribution value whose
// cast calls a volatile function is refused; casts of user types with
// stable functions are computed as before.
func TestDistributionValueVolatileCast(t *testing.T) {
	e := newDistEnv(t)
	ctx := context.Background()
	for _, q := range []string{
		"DROP CAST IF EXISTS (dvmood AS text)", "DROP FUNCTION IF EXISTS dvmood_text(dvmood)",
		"DROP TYPE IF EXISTS dvmood", "DROP TYPE IF EXISTS dvplain",
		"CREATE TYPE dvmood AS ENUM ('a', 'b')", "CREATE TYPE dvplain AS ENUM ('a', 'b')",
		"CREATE FUNCTION dvmood_text(dvmood) RETURNS text LANGUAGE sql VOLATILE AS $$ SELECT 'v' || floor(random() * 1000)::int $$",
		"CREATE CAST (dvmood AS text) WITH FUNCTION dvmood_text(dvmood)",
	} {
		exec(t, e.c, q)
	}
	t.Cleanup(func() {
		for _, q := range []string{"DROP CAST IF EXISTS (dvmood AS text)", "DROP FUNCTION IF EXISTS dvmood_text(dvmood)",
			"DROP TYPE IF EXISTS dvmood", "DROP TYPE IF EXISTS dvplain"} {
			_, _ = e.c.Exec(ctx, q)
		}
	})
	e.refused("INSERT INTO {t}text (id, v) VALUES ('a'::dvmood::text, 'vol')")
	e.refused("SELECT v FROM {t}text WHERE id = 'b'::dvmood::text")
	e.same("INSERT INTO {t}text (id, v) VALUES ('a'::dvplain::text, 'stable')", nil, nil, nil)
	e.same("SELECT v FROM {t}text WHERE id = 'a'::dvplain::text", nil, nil, nil)
	e.placed()
}
