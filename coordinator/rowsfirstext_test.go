package coordinator_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestRowsFirstExtended: over the extended protocol, as pgx, JDBC and
// psycopg 3 send them (parameters, in text or binary, binary results where
// the driver knows the types), UPDATE and DELETE with subqueries over
// distributed tables off their shards and INSERT ... SELECT that does not
// push down (the bulk insert from unnest($1::bigint[], ...)) give what
// plain PostgreSQL gives: the command tag, the RETURNING rows, the
// SQLSTATE of an error, the tables' contents after it, in and out of a
// transaction block. Before, each was refused (0A000).
func TestRowsFirstExtended(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	c := connect(t, srv.Addr())
	ctx := context.Background()
	fleet, oracle, state := rowsFirstTables(t, c, "rfx", "n numeric, ts timestamptz, u uuid, b bytea, tags text[]")
	both := func(q string, mode pgx.QueryExecMode, txn bool, args ...any) oracleRun {
		t.Helper()
		run := func(r *strings.Replacer) oracleRun {
			if !txn {
				return gatherRun(t, c, r.Replace(q), mode, args...)
			}
			tx, err := c.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			out := gatherRun(t, c, r.Replace(q), mode, args...)
			if out.State == "" {
				if err := tx.Commit(ctx); err != nil {
					t.Fatalf("%s: COMMIT: %v", q, err)
				}
			}
			return out
		}
		got, want := run(fleet), run(oracle)
		for _, r := range []*oracleRun{&got, &want} { // RETURNING rows come in no set order
			slices.SortFunc(r.Rows, func(a, b []string) int { return slices.Compare(a, b) })
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s (%v, block %v):\n got %+v\nwant %+v (plain PostgreSQL)", q, mode, txn, got, want)
		}
		if g, w := state(fleet), state(oracle); !reflect.DeepEqual(g, w) {
			t.Fatalf("%s (%v, block %v): the table is\n%v\nwant\n%v", q, mode, txn, g, w)
		}
		return got
	}
	ts := time.Date(2024, 3, 1, 12, 30, 0, 0, time.UTC)
	id := 1000
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec} {
		for _, txn := range []bool{false, true} {
			id += 100
			for _, q := range []struct {
				sql  string
				args []any
			}{
				{"UPDATE {o} SET amount = amount + $1 WHERE acct IN (SELECT id FROM {a} WHERE name = $2)", []any{1, "n1"}},
				{"UPDATE {o} SET amount = amount - 1 WHERE acct = ANY (SELECT id FROM {a} WHERE id < $1) RETURNING id, amount", []any{int64(4)}},
				{"DELETE FROM {o} WHERE acct > (SELECT max(id) FROM {a} WHERE name <> $1) RETURNING id", []any{"n0"}},
				{"UPDATE {o} SET amount = (SELECT count(*) FROM {a} WHERE id < $1) WHERE id < $2", []any{7, int64(5)}},
				{"DELETE FROM {o} WHERE acct NOT IN (SELECT id FROM {a} WHERE id <= $1) AND id > $2", []any{11, 30}},
				{"UPDATE {o} SET amount = 0 WHERE acct IN (SELECT id FROM {a} WHERE name = $1)", []any{nil}},
				// pgx's bulk insert: arrays in binary.
				{"INSERT INTO {o} (id, acct, amount) SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::int[])",
					[]any{[]int64{int64(id), int64(id + 1), int64(id + 2)}, []int64{1, 2, 3}, []int32{5, 0, -7}}},
				{"INSERT INTO {o} (id, acct, tags) SELECT * FROM unnest($1::bigint[], $2::bigint[]) AS u(i, a), LATERAL (SELECT $3::text[]) t",
					[]any{[]int64{int64(id + 10), int64(id + 11)}, []int64{4, 5}, []string{"it's", "a \"tag\"", "é"}}},
				// Values of many types, typed by PostgreSQL, sent as the
				// driver chooses.
				{"INSERT INTO {o} (id, acct, n, ts, u, b) SELECT id + $1, id, $2, $3, $4, $5 FROM {a} WHERE id < 3 RETURNING id, acct",
					[]any{int64(id + 20), "12.50", ts, "6f2c7c1e-0000-4000-8000-000000000001", []byte{0, 1, 2, 255}}},
				{"INSERT INTO {o} (id, acct) SELECT $1 + id, $2 FROM {a} WHERE id = $3", []any{int64(id + 30), nil, 2}},
				// RETURNING columns pgx asks for in binary (CacheStatement
				// and DescribeExec), NULLs among them: the default node
				// gives them in binary.
				{"INSERT INTO {o} (id, acct, n, ts, u, b, tags) SELECT id + $1, id, CASE WHEN id = 1 THEN NULL ELSE $2::numeric END, $3, $4, $5, $6 FROM {a} WHERE id < 4 RETURNING *",
					[]any{int64(id + 40), "-0.125", ts, "6f2c7c1e-0000-4000-8000-000000000002", []byte{9, 0}, []string{"x", "NULL", ""}}},
				{"UPDATE {o} SET n = n + $1 WHERE acct IN (SELECT id FROM {a} WHERE id < $2) RETURNING id, n, ts, u, b, tags, amount::float8 / 3, n::real, ts::date, interval '1 day' * amount, '{\"a\": [1, null]}'::jsonb",
					[]any{"0.5", 4}},
				// Errors: analysis (at the Parse), a value's (at the Bind),
				// a constraint's (at the Execute).
				{"UPDATE {o} SET amount = 1 WHERE acct IN (SELECT nope FROM {a} WHERE id < $1)", []any{3}},
				{"UPDATE {o} SET amount = 1 WHERE acct IN (SELECT id FROM {a} WHERE id < $1)", []any{"abc"}},
				{"INSERT INTO {o} (id, acct) SELECT id, id FROM {a} WHERE id < $1", []any{3}},
				{"UPDATE {o} SET amount = 1 / (SELECT count(*) - $1 FROM {a})", []any{12}},
			} {
				both(q.sql, mode, txn, q.args...)
			}
		}
	}
	// A RETURNING column the driver asks for in binary whose text does not
	// read back as the same value under the session's settings (float8
	// with extra_float_digits 0): refused before anything is written.
	before := state(fleet)
	exec(t, c, "SET extra_float_digits = 0")
	rows, err := c.Query(ctx, "INSERT INTO rfx_o (id, acct, n) SELECT id + 5000, id, 1.5 FROM rfx_a RETURNING n::float8", pgx.QueryExecModeCacheStatement)
	if err == nil {
		rows.Close()
		err = rows.Err()
	}
	wantRefusal(t, "RETURNING float8 in binary under extra_float_digits 0", err)
	exec(t, c, "RESET extra_float_digits")
	if after := state(fleet); !reflect.DeepEqual(before, after) {
		t.Fatalf("a refused INSERT ... SELECT wrote: %v", after)
	}
	// After another statement in the same pipeline outside a block: refused,
	// and the pipeline's earlier statement is not kept either.
	b := &pgx.Batch{}
	b.Queue("UPDATE rfx_o SET amount = 99 WHERE id = 1")
	b.Queue("DELETE FROM rfx_o WHERE acct IN (SELECT id FROM rfx_a WHERE id < $1)", 3)
	err = c.SendBatch(ctx, b).Close()
	wantRefusal(t, "in a pipeline after another statement", err)
	if after := state(fleet); !reflect.DeepEqual(before, after) {
		t.Fatalf("a refused pipeline wrote: %v", after)
	}
	// In a block, a pipeline of several: run, as PostgreSQL runs them.
	for _, r := range []*strings.Replacer{fleet, oracle} {
		tx, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b := &pgx.Batch{}
		b.Queue(r.Replace("UPDATE {o} SET amount = 98 WHERE id = 2"))
		b.Queue(r.Replace("DELETE FROM {o} WHERE acct IN (SELECT id FROM {a} WHERE id < $1)"), 3)
		b.Queue(r.Replace("INSERT INTO {o} (id, acct) SELECT id + 7000, id FROM {a} WHERE id < $1"), 4)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			t.Fatalf("batch in a block: %v", err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if g, w := state(fleet), state(oracle); !reflect.DeepEqual(g, w) {
		t.Fatalf("after a batch in a block: the table is\n%v\nwant\n%v", g, w)
	}
	// A batch that begins and commits itself, which pgx prepares whole
	// first (a pipeline of Parses before any statement runs).
	for _, r := range []*strings.Replacer{fleet, oracle} {
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		b.Queue(r.Replace("UPDATE {o} SET amount = 97 WHERE id = $1"), 3)
		b.Queue(r.Replace("DELETE FROM {o} WHERE acct IN (SELECT id FROM {a} WHERE id > $1)"), 10)
		b.Queue("COMMIT")
		if err := c.SendBatch(ctx, b).Close(); err != nil {
			t.Fatalf("a batch with its own BEGIN: %v", err)
		}
	}
	if g, w := state(fleet), state(oracle); !reflect.DeepEqual(g, w) {
		t.Fatalf("after a batch with its own BEGIN: the table is\n%v\nwant\n%v", g, w)
	}
	// A prepared statement whose table changed after its Parse: checked
	// again at each Bind, as PostgreSQL checks it (0A000 when its result
	// columns changed, the analysis error when a column it names went).
	var codes [2][]string
	for i, r := range []*strings.Replacer{fleet, oracle} {
		prep := func(name, q string) {
			if _, err := c.Prepare(ctx, name, r.Replace(q)); err != nil {
				t.Fatalf("prepare %s: %v", q, err)
			}
		}
		prep(fmt.Sprintf("rfx_ret%d", i), "INSERT INTO {o} (id, acct) SELECT id + $1, id FROM {a} WHERE id < 3 RETURNING *")
		prep(fmt.Sprintf("rfx_upd%d", i), "UPDATE {o} SET amount = $1 WHERE acct IN (SELECT id FROM {a} WHERE name = 'n1')")
		exec(t, c, r.Replace("ALTER TABLE {o} ADD COLUMN extra int"))
		exec(t, c, r.Replace("ALTER TABLE {o} DROP COLUMN amount"))
		for _, name := range []string{"rfx_ret", "rfx_upd"} {
			_, err := c.Exec(ctx, fmt.Sprintf("%s%d", name, i), 9000)
			codes[i] = append(codes[i], sqlState(err))
		}
		exec(t, c, r.Replace("ALTER TABLE {o} DROP COLUMN extra"))
		exec(t, c, r.Replace("ALTER TABLE {o} ADD COLUMN amount int"))
	}
	t.Logf("after the table changed: %v (plain PostgreSQL: %v)", codes[0], codes[1])
	if !reflect.DeepEqual(codes[0], codes[1]) || codes[1][0] == "" {
		t.Errorf("prepared statements after their table changed: %v, want %v (plain PostgreSQL)", codes[0], codes[1])
	}
	if g, w := state(fleet), state(oracle); !reflect.DeepEqual(g, w) {
		t.Fatalf("after statements whose table changed: the table is\n%v\nwant\n%v", g, w)
	}
}

// TestRowsFirstExtendedPortals: the protocol around rows-first writes over
// the extended protocol, message by message, against plain PostgreSQL
// (adversary findings): result formats that do not match the columns
// (08P01, nothing written), a named portal that exists (42P03), a
// RETURNING portal executed in parts (PortalSuspended whenever the limit
// is reached; each part's own count in the tag), a finished portal without
// rows executed again (55000), a pipeline that only prepares before the
// statement's Parse (not refused), and the client's statement name in a
// wrong parameter count's message.
func TestRowsFirstExtendedPortals(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	c := connect(t, srv.Addr())
	ctx := context.Background()
	fleet, oracle, state := rowsFirstTables(t, c, "rfp", "")
	pf, po := protoDial(t, srv.Addr(), "rfp_f"), protoDial(t, srv.Addr(), "rfp_o")
	const (
		ret   = "UPDATE {o} SET amount = amount + $1 WHERE acct IN (SELECT id FROM {a} WHERE id < 4) RETURNING id, amount, acct"
		noRet = "DELETE FROM {o} WHERE acct IN (SELECT id FROM {a} WHERE name = $1)"
	)
	text := func(s string) [][]byte { return [][]byte{[]byte(s)} }
	for _, step := range []struct {
		what string
		zs   int
		msgs func(r *strings.Replacer) []pgproto3.FrontendMessage
	}{
		{"result formats for 2 of 3 columns", 1, func(r *strings.Replacer) []pgproto3.FrontendMessage {
			return []pgproto3.FrontendMessage{&pgproto3.Parse{Query: r.Replace(ret)},
				&pgproto3.Bind{Parameters: text("5"), ResultFormatCodes: []int16{0, 1}}, &pgproto3.Execute{}, &pgproto3.Sync{}}
		}},
		{"result formats for 2 of 3 columns in a block", 3, func(r *strings.Replacer) []pgproto3.FrontendMessage {
			return []pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN"}, &pgproto3.Parse{Query: r.Replace(ret)},
				&pgproto3.Bind{Parameters: text("5"), ResultFormatCodes: []int16{1, 1, 1, 1}}, &pgproto3.Execute{}, &pgproto3.Sync{},
				&pgproto3.Query{String: "COMMIT"}}
		}},
		{"a named portal that exists", 4, func(r *strings.Replacer) []pgproto3.FrontendMessage {
			return []pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN"},
				&pgproto3.Parse{Query: "SELECT 1"}, &pgproto3.Bind{DestinationPortal: "p"}, &pgproto3.Execute{Portal: "p"}, &pgproto3.Sync{},
				&pgproto3.Parse{Query: r.Replace(noRet)}, &pgproto3.Bind{DestinationPortal: "p", Parameters: text("n1")}, &pgproto3.Execute{Portal: "p"}, &pgproto3.Sync{},
				&pgproto3.Query{String: "COMMIT"}}
		}},
		{"a named portal that exists, the other way", 4, func(r *strings.Replacer) []pgproto3.FrontendMessage {
			return []pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN"},
				&pgproto3.Parse{Query: r.Replace(noRet)}, &pgproto3.Bind{DestinationPortal: "p", Parameters: text("n2")}, &pgproto3.Execute{Portal: "p"}, &pgproto3.Sync{},
				&pgproto3.Parse{Query: "SELECT 1"}, &pgproto3.Bind{DestinationPortal: "p"}, &pgproto3.Execute{Portal: "p"}, &pgproto3.Sync{},
				&pgproto3.Query{String: "COMMIT"}}
		}},
		{"RETURNING in parts", 3, func(r *strings.Replacer) []pgproto3.FrontendMessage {
			return []pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN"},
				&pgproto3.Parse{Query: r.Replace(ret)}, &pgproto3.Bind{DestinationPortal: "q", Parameters: text("1")},
				&pgproto3.Execute{Portal: "q", MaxRows: 3}, &pgproto3.Execute{Portal: "q", MaxRows: 3}, &pgproto3.Execute{Portal: "q", MaxRows: 3},
				&pgproto3.Execute{Portal: "q", MaxRows: 3}, &pgproto3.Execute{Portal: "q", MaxRows: 3}, &pgproto3.Execute{Portal: "q"}, &pgproto3.Sync{},
				&pgproto3.Query{String: "COMMIT"}}
		}},
		{"RETURNING in parts of exactly its rows", 3, func(r *strings.Replacer) []pgproto3.FrontendMessage {
			return []pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN"},
				&pgproto3.Parse{Query: r.Replace(ret)}, &pgproto3.Bind{DestinationPortal: "q", Parameters: text("1")},
				&pgproto3.Execute{Portal: "q", MaxRows: 10}, &pgproto3.Execute{Portal: "q", MaxRows: 10}, &pgproto3.Sync{},
				&pgproto3.Query{String: "COMMIT"}}
		}},
		{"a finished portal without rows again", 3, func(r *strings.Replacer) []pgproto3.FrontendMessage {
			return []pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN"},
				&pgproto3.Parse{Query: r.Replace(noRet)}, &pgproto3.Bind{DestinationPortal: "d", Parameters: text("n3")},
				&pgproto3.Execute{Portal: "d", MaxRows: 1}, &pgproto3.Execute{Portal: "d", MaxRows: 1}, &pgproto3.Sync{},
				&pgproto3.Query{String: "COMMIT"}}
		}},
		// Adversary round 2: a portal ends with its transaction or
		// savepoint, even one ended earlier in the same pipeline (the
		// write ran and was kept); in a failed block, 25P02.
		{"a portal after ROLLBACK in the same pipeline", 3, func(r *strings.Replacer) []pgproto3.FrontendMessage {
			return []pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN"},
				&pgproto3.Parse{Name: "s", Query: r.Replace(noRet)}, &pgproto3.Bind{DestinationPortal: "p", PreparedStatement: "s", Parameters: text("n1")},
				&pgproto3.Parse{Query: "ROLLBACK"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Execute{Portal: "p"}, &pgproto3.Sync{},
				&pgproto3.Close{ObjectType: 'S', Name: "s"}, &pgproto3.Sync{}}
		}},
		{"a portal after COMMIT in the same pipeline, the block on a worker", 2, func(r *strings.Replacer) []pgproto3.FrontendMessage {
			return []pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN; UPDATE " + r.Replace("{o}") + " SET amount = 5 WHERE id = 1"},
				&pgproto3.Parse{Query: r.Replace(ret)}, &pgproto3.Bind{DestinationPortal: "p", Parameters: text("3")}, &pgproto3.Execute{Portal: "p", MaxRows: 1},
				&pgproto3.Parse{Query: "COMMIT"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Execute{Portal: "p"}, &pgproto3.Sync{}}
		}},
		{"a portal after ROLLBACK TO its savepoint", 5, func(r *strings.Replacer) []pgproto3.FrontendMessage {
			return []pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN; SAVEPOINT a"},
				&pgproto3.Parse{Query: r.Replace(noRet)}, &pgproto3.Bind{DestinationPortal: "p", Parameters: text("n2")}, &pgproto3.Sync{},
				&pgproto3.Query{String: "ROLLBACK TO a"}, &pgproto3.Execute{Portal: "p"}, &pgproto3.Sync{},
				&pgproto3.Query{String: "COMMIT"}}
		}},
		{"a portal bound before the savepoint, after ROLLBACK TO", 5, func(r *strings.Replacer) []pgproto3.FrontendMessage {
			return []pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN"},
				&pgproto3.Parse{Query: r.Replace(noRet)}, &pgproto3.Bind{DestinationPortal: "p", Parameters: text("n2")}, &pgproto3.Sync{},
				&pgproto3.Query{String: "SAVEPOINT a; UPDATE " + r.Replace("{o}") + " SET amount = 6 WHERE id = 2; ROLLBACK TO a"}, &pgproto3.Execute{Portal: "p"}, &pgproto3.Sync{},
				&pgproto3.Query{String: "COMMIT"}}
		}},
		{"a portal in a failed block", 5, func(r *strings.Replacer) []pgproto3.FrontendMessage {
			return []pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN"},
				&pgproto3.Parse{Name: "s", Query: r.Replace(ret)}, &pgproto3.Bind{DestinationPortal: "p", PreparedStatement: "s", Parameters: text("4")},
				&pgproto3.Execute{Portal: "p", MaxRows: 1}, &pgproto3.Sync{},
				&pgproto3.Query{String: "SELECT 1/0"},
				&pgproto3.Execute{Portal: "p", MaxRows: 1}, &pgproto3.Describe{ObjectType: 'S', Name: "s"}, &pgproto3.Sync{},
				&pgproto3.Query{String: "ROLLBACK"}}
		}},
		// Adversary round 3.
		{"a portal bound before a SAVEPOINT in its pipeline, after ROLLBACK TO", 5, func(r *strings.Replacer) []pgproto3.FrontendMessage {
			return []pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN"},
				&pgproto3.Parse{Query: r.Replace(ret)}, &pgproto3.Bind{DestinationPortal: "p", Parameters: text("7")},
				&pgproto3.Parse{Query: "SAVEPOINT a"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{},
				&pgproto3.Query{String: "ROLLBACK TO a"}, &pgproto3.Execute{Portal: "p", MaxRows: 1}, &pgproto3.Sync{},
				&pgproto3.Query{String: "COMMIT"}}
		}},
		{"a multi-shard portal refused in a failed block, after ROLLBACK TO", 9, func(r *strings.Replacer) []pgproto3.FrontendMessage {
			return []pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN"},
				&pgproto3.Parse{Query: r.Replace("SELECT id, amount FROM {o} WHERE amount > $1 ORDER BY id")}, &pgproto3.Bind{DestinationPortal: "m", Parameters: text("20")}, &pgproto3.Sync{},
				&pgproto3.Query{String: "SAVEPOINT a"}, &pgproto3.Query{String: "SELECT 1/0"},
				&pgproto3.Execute{Portal: "m", MaxRows: 1}, &pgproto3.Sync{},
				&pgproto3.Query{String: "ROLLBACK TO a"},
				&pgproto3.Execute{Portal: "m", MaxRows: 1}, &pgproto3.Sync{}, &pgproto3.Execute{Portal: "m"}, &pgproto3.Sync{},
				&pgproto3.Query{String: "COMMIT"}}
		}},
		{"a portal bound in a block that then takes in the other worker", 5, func(r *strings.Replacer) []pgproto3.FrontendMessage {
			ups := ""
			for id := 2; id <= 9; id++ {
				ups += fmt.Sprintf("UPDATE {o} SET amount = amount + 1 WHERE id = %d; ", id)
			}
			return []pgproto3.FrontendMessage{&pgproto3.Query{String: r.Replace("BEGIN; UPDATE {o} SET amount = 0 WHERE id = 1")},
				&pgproto3.Parse{Query: r.Replace(ret)}, &pgproto3.Bind{DestinationPortal: "p", Parameters: text("10")}, &pgproto3.Sync{},
				&pgproto3.Query{String: r.Replace(ups)},
				&pgproto3.Execute{Portal: "p"}, &pgproto3.Sync{},
				&pgproto3.Query{String: "COMMIT"}}
		}},
		{"a named statement parsed after a statement ran in its pipeline", 3, func(r *strings.Replacer) []pgproto3.FrontendMessage {
			return []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "SELECT 1"}, &pgproto3.Bind{}, &pgproto3.Execute{},
				&pgproto3.Parse{Name: "s9", Query: r.Replace(noRet)}, &pgproto3.Sync{},
				&pgproto3.Bind{PreparedStatement: "s9", Parameters: text("n0")}, &pgproto3.Execute{}, &pgproto3.Sync{},
				&pgproto3.Close{ObjectType: 'S', Name: "s9"}, &pgproto3.Sync{}}
		}},
		{"prepared after another statement's Parse", 2, func(r *strings.Replacer) []pgproto3.FrontendMessage {
			return []pgproto3.FrontendMessage{&pgproto3.Parse{Name: "pi", Query: r.Replace("INSERT INTO {o} VALUES ($1, 1, 1)")}, &pgproto3.Describe{ObjectType: 'S', Name: "pi"},
				&pgproto3.Parse{Name: "pr", Query: r.Replace(ret)}, &pgproto3.Describe{ObjectType: 'S', Name: "pr"}, &pgproto3.Sync{},
				&pgproto3.Bind{PreparedStatement: "pr", Parameters: text("2")}, &pgproto3.Execute{}, &pgproto3.Sync{}}
		}},
	} {
		got := pipeRaw(t, pf, step.zs, step.msgs(fleet)...)
		want := pipeRaw(t, po, step.zs, step.msgs(oracle)...)
		// (RETURNING rows come in no set order: compared by the table.)
		count := func(s []string) []string {
			var out []string
			for _, x := range s {
				if strings.HasPrefix(x, "row ") {
					x = "row"
				}
				out = append(out, x)
			}
			return out
		}
		if !reflect.DeepEqual(count(got), count(want)) {
			t.Errorf("%s:\n got %q\nwant %q (plain PostgreSQL)", step.what, got, want)
		}
		for _, p := range []*protoClient{pf, po} {
			// Every answer of the step was read: a Sync's is next.
			if z := pipeRaw(t, p, 1, &pgproto3.Sync{}); len(z) != 1 || z[0] != "Z I" {
				t.Fatalf("%s: after the step's answers, a Sync got %q", step.what, z)
			}
		}
		if g, w := state(fleet), state(oracle); !reflect.DeepEqual(g, w) {
			t.Fatalf("%s: the table is\n%v\nwant\n%v", step.what, g, w)
		}
	}
	// The client's name for the statement in PostgreSQL's message.
	if _, err := c.PgConn().Prepare(ctx, "rfp_named", "DELETE FROM rfp_o WHERE acct IN (SELECT id FROM rfp_a WHERE name = $1)", nil); err != nil {
		t.Fatal(err)
	}
	err := c.PgConn().ExecPrepared(ctx, "rfp_named", nil, nil, nil).Read().Err
	if sqlState(err) != "08P01" || !strings.Contains(err.Error(), `prepared statement "rfp_named" requires 1`) {
		t.Errorf("Bind without the parameter: %v, want 08P01 naming rfp_named", err)
	}
}

// rowsFirstTables makes accounts {a} (distributed, 12 rows) and orders {o}
// (distributed, not colocated, 40 rows; more columns after amount), and
// their plain twins for the oracle; state is {o}'s contents.
func rowsFirstTables(t *testing.T, c *pgx.Conn, prefix, more string) (fleet, oracle *strings.Replacer, state func(*strings.Replacer) []string) {
	acols := "(id bigint PRIMARY KEY, name text)"
	ocols, shown := "(id bigint PRIMARY KEY, acct bigint, amount int)", "id, acct, amount"
	if more != "" {
		ocols = "(id bigint PRIMARY KEY, acct bigint, amount int, " + more + ")"
		for _, col := range strings.Split(more, ", ") {
			name, _, _ := strings.Cut(col, " ")
			shown += ", " + name
		}
	}
	a, o := prefix+"_a", prefix+"_o"
	testTable(t, c, a, acols, "SELECT create_distributed_table('"+a+"', 'id', shard_count => 4)")
	testTable(t, c, o, ocols, "SELECT create_distributed_table('"+o+"', 'id', shard_count => 3, colocate_with => 'none')")
	plainTables(t, c, a+"o "+acols, o+"o "+ocols)
	for _, s := range []string{"", "o"} {
		exec(t, c, "INSERT INTO "+a+s+" SELECT g, 'n' || g % 4 FROM generate_series(1, 12) g")
		exec(t, c, "INSERT INTO "+o+s+" (id, acct, amount) SELECT g, g % 13 + 1, g * 7 % 50 FROM generate_series(1, 40) g")
	}
	fleet = strings.NewReplacer("{a}", a, "{o}", o)
	oracle = strings.NewReplacer("{a}", a+"o", "{o}", o+"o")
	state = func(r *strings.Replacer) []string {
		return queryStrings(t, c, r.Replace("SELECT concat_ws(',', "+shown+") FROM {o} ORDER BY id"))
	}
	return fleet, oracle, state
}

// TestRowsFirstBinaryReturningEdges: adversary findings on RETURNING rows
// given in binary by the default node. A value whose text PostgreSQL
// cannot read back (the smallest interval, under IntervalStyle postgres)
// is refused with nothing written (the write had committed, the client
// got XX000); a result of many rows comes back whole (the conversion
// wrote them all before reading, both sockets filled, and the session
// hung with its write committed).
func TestRowsFirstBinaryReturningEdges(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	ctx := context.Background()
	testTable(t, c, "rfb_t", "(id int PRIMARY KEY, b bytea)", "SELECT create_distributed_table('rfb_t', 'id', shard_count => 4)")
	// The smallest interval's text does not read back under IntervalStyle
	// postgres.
	_, err := c.Exec(ctx, "INSERT INTO rfb_t (id) SELECT g FROM generate_series(1, $1::int) g RETURNING id, '-9223372036854775808 us'::interval",
		pgx.QueryExecModeCacheStatement, 3)
	wantRefusal(t, "RETURNING an interval whose text does not read back", err)
	if n := queryString(t, c, "SELECT count(*)::text FROM rfb_t"); n != "0" {
		t.Fatalf("the refused statement wrote %s rows", n)
	}
	// 200,000 rows: more messages each way than the sockets hold.
	const n, size = 200000, 1
	rows, err := c.Query(ctx, "INSERT INTO rfb_t (id, b) SELECT g, decode(repeat(lpad(to_hex(g % 256), 2, '0'), $2::int), 'hex') FROM generate_series(1, $1::int) g RETURNING id, b, id::numeric / 7",
		pgx.QueryExecModeCacheStatement, n, size)
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for rows.Next() {
		var id int
		var b []byte
		var q pgtype.Numeric
		if err := rows.Scan(&id, &b, &q); err != nil {
			t.Fatal(err)
		}
		if len(b) != size || b[0] != byte(id%256) || b[size-1] != byte(id%256) {
			t.Fatalf("row %d: %d bytes starting %x", id, len(b), b[:min(4, len(b))])
		}
		if f, _ := q.Float64Value(); f.Float64 < float64(id)/7-1e-6 || f.Float64 > float64(id)/7+1e-6 {
			t.Fatalf("row %d: %v / 7 = %v", id, id, f.Float64)
		}
		got++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if got != n || rows.CommandTag().String() != fmt.Sprintf("INSERT 0 %d", n) {
		t.Errorf("%d rows, tag %q; want %d, INSERT 0 %d", got, rows.CommandTag(), n, n)
	}
	if c := queryString(t, c, "SELECT count(*)::text FROM rfb_t"); c != fmt.Sprint(n) {
		t.Errorf("%s rows in the table, want %d", c, n)
	}
}
