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

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestMultiShardWrite: an UPDATE or DELETE without an equality on the
// distribution column changes exactly the rows PostgreSQL changes (command
// tag and table contents against an oracle table), on every shard or on
// none: an error on one shard leaves every shard as it was, and no
// prepared transaction is left behind.
func TestMultiShardWrite(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	c := connect(t, srv.Addr())
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	const cols = "(id int PRIMARY KEY, g int, v numeric(8,2) CHECK (v < 1000), t text, ts timestamptz DEFAULT now(), k int DEFAULT 42)"
	testTable(t, c, "mw", cols, "SELECT create_distributed_table('mw', 'id', shard_count => 6)")
	testTable(t, c, "mwr", "(g int PRIMARY KEY, bonus numeric)", "SELECT create_reference_table('mwr')")
	plainTables(t, c, "mwo "+cols, "mwro (g int PRIMARY KEY, bonus numeric)")
	var rows []string
	for i := 1; i <= 80; i++ {
		g := fmt.Sprint(i % 5)
		if i%11 == 0 {
			g = "NULL"
		}
		rows = append(rows, fmt.Sprintf("(%d, %s, %d.%02d, '%s', '2024-05-01 10:00:00+00')", i, g, i%13-4, i%100, []string{"a", "é", "日本", ""}[i%4]))
	}
	for _, tb := range []string{"mw", "mwo"} {
		exec(t, c, "INSERT INTO "+tb+" (id, g, v, t, ts) VALUES "+strings.Join(rows, ", "))
	}
	exec(t, c, "CREATE TABLE IF NOT EXISTS mw_local (g int)")
	exec(t, c, "CREATE SEQUENCE IF NOT EXISTS mw_seq")
	t.Cleanup(func() {
		_, _ = c.Exec(context.Background(), "DROP TABLE IF EXISTS mw_local; DROP SEQUENCE IF EXISTS mw_seq", simple)
	})
	for _, tb := range []string{"mwr", "mwro"} {
		exec(t, c, "INSERT INTO "+tb+" (g, bonus) VALUES (1, 0.5), (2, 1.25), (4, -3)")
	}
	fleet, oracle := strings.NewReplacer("{t}", "mw", "{r}", "mwr"), strings.NewReplacer("{t}", "mwo", "{r}", "mwro")
	contents := func(tb string) oracleRun {
		return gatherRun(t, c, "SELECT * FROM "+tb+" ORDER BY id", simple)
	}
	same := func(what string) {
		t.Helper()
		if got, want := contents("mw"), contents("mwo"); !reflect.DeepEqual(got, want) {
			t.Fatalf("after %s: contents differ:\n got %v\nwant %v", what, got, want)
		}
	}
	for _, q := range []string{
		"UPDATE {t} SET v = v + 1 WHERE g = 2",
		"UPDATE {t} SET t = t || '!', v = -v WHERE t <> '' AND id % 3 = 0",
		"UPDATE {t} AS x SET v = x.v + r.bonus FROM {r} r WHERE r.g = x.g",
		"UPDATE {t} SET g = NULL WHERE g IN (SELECT g FROM {r} WHERE bonus < 0)",
		"UPDATE {t} SET v = 0 WHERE false",
		"DELETE FROM {t} WHERE v < 0 AND g IS NOT NULL",
		"DELETE FROM {t} x USING {r} r WHERE r.g = x.g AND r.bonus > 1",
		"UPDATE {t} SET v = 1.5",
		"UPDATE {t} SET k = DEFAULT WHERE g = 3", // an immutable default
		// length(text) is immutable; a stable length(bytea, name) beside it
		// has another argument count (was refused, found by an adversary).
		"UPDATE {t} SET k = length(t) WHERE g = 4 RETURNING id, length(t)",
		"UPDATE {t} SET v = v * 2 WHERE g = 1 RETURNING id, v, t",
		"DELETE FROM {t} WHERE v > 20 AND g = 0 RETURNING *",
		"UPDATE {t} SET v = v WHERE false RETURNING id",
		// Reads the transaction's time: the moment is read once and
		// written into the statement (freeze.go).
		"UPDATE {t} SET v = v + 1 WHERE now() > '2000-01-01' AND g = 2 RETURNING id, now() > '2000-01-01'",
	} {
		got := gatherRun(t, c, fleet.Replace(q), simple)
		want := gatherRun(t, c, oracle.Replace(q), simple)
		// RETURNING's rows come in no defined order.
		byID := func(a, b []string) int { return strings.Compare(a[0], b[0]) }
		slices.SortFunc(got.Rows, byID)
		slices.SortFunc(want.Rows, byID)
		if !reflect.DeepEqual(got, want) || got.State != "" {
			t.Fatalf("%s:\n got %+v\nwant %+v (plain PostgreSQL)", q, got, want)
		}
		same(q)
	}
	// An error on one shard: every shard stays as it was.
	exec(t, c, "UPDATE mw SET v = id WHERE id < 40", simple)
	exec(t, c, "UPDATE mwo SET v = id WHERE id < 40", simple)
	for _, q := range []struct{ sql, state string }{
		{"UPDATE {t} SET v = 100 / (id - 43)", "22012"}, // division by zero on one row
		{"UPDATE {t} SET v = v * 30", "23514"},          // the CHECK fails for ids over 33
		{"UPDATE {t} SET nope = 1", "42703"},
		{"DELETE FROM {t} WHERE 1 / (id - 50) > 0", "22012"},
	} {
		_, err := c.Exec(ctx, fleet.Replace(q.sql), simple)
		_, oerr := c.Exec(ctx, oracle.Replace(q.sql), simple)
		if sqlState(err) != q.state || sqlState(oerr) != q.state {
			t.Errorf("%s: %v (PostgreSQL: %v), want %s", q.sql, err, oerr, q.state)
		}
		same(q.sql)
	}
	// Refused with a hint, nothing changed.
	for _, q := range []struct {
		sql  string
		mode pgx.QueryExecMode
	}{
		{"UPDATE mw SET t = 'now'::timestamptz::text", simple},
		// (A subquery over shards runs first: TestSubqueriesFirst,
		// TestRowsFirstExtended.)
		// Each shard would answer for itself (adversary findings):
		{"DELETE FROM mw WHERE ctid = '(0,1)'", simple},                  // every shard has a (0,1)
		{"UPDATE mw SET ts = DEFAULT", simple},                           // now() per worker
		{"UPDATE mw SET k = txid_current()::int", simple},                // one per worker transaction
		{"UPDATE mw SET k = nextval('mw_seq')", simple},                  // a sequence on each worker
		{"UPDATE mw SET v = 1 FROM mw_local l WHERE l.g = mw.g", simple}, // only the default node has it
		{"DELETE FROM mw WHERE g IN (SELECT g FROM mw_local)", simple},
	} {
		var args []any
		if q.mode != simple {
			args = []any{1}
		}
		_, err := c.Exec(ctx, q.sql, append([]any{q.mode}, args...)...)
		wantRefusal(t, q.sql, err)
		same(q.sql)
	}
	// RETURNING over the extended protocol, as ORMs send it (parameters,
	// binary results where pgx knows the types, or text), in and out of a
	// transaction block: the rows PostgreSQL returns, in the client's
	// formats, and the same writes.
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec} {
		for _, txn := range []bool{false, true} {
			for _, q := range []string{
				"UPDATE {t} SET v = v + $1 WHERE g = $2 RETURNING id, v, t, ts",
				"DELETE FROM {t} WHERE v > $1 AND g = 4 RETURNING *",
				"UPDATE {t} AS x SET v = x.v - r.bonus FROM {r} r WHERE r.g = x.g AND x.id > $1 RETURNING x.id, x.v * 2 AS twice, r.bonus",
				"UPDATE {t} SET v = v WHERE id < $1 AND false RETURNING id",
			} {
				args := []any{1, 3}
				if !strings.Contains(q, "$2") {
					args = args[:1]
				}
				var outs [2]oracleRun
				for i, r := range []*strings.Replacer{fleet, oracle} {
					if txn {
						exec(t, c, "BEGIN")
					}
					outs[i] = gatherRun(t, c, r.Replace(q), mode, args...)
					slices.SortFunc(outs[i].Rows, func(a, b []string) int { return strings.Compare(a[0], b[0]) })
					if txn {
						exec(t, c, "COMMIT")
					}
				}
				if !reflect.DeepEqual(outs[0], outs[1]) || outs[0].State != "" {
					t.Fatalf("%s (mode %v, transaction block %v):\n got %+v\nwant %+v (plain PostgreSQL)", q, mode, txn, outs[0], outs[1])
				}
				same(q)
			}
		}
	}
	// In a transaction block: the write joins every worker into the
	// transaction; ROLLBACK undoes it everywhere, COMMIT keeps it, and the
	// transaction sees its own write in between.
	for _, end := range []string{"ROLLBACK", "COMMIT"} {
		var outs [2]oracleRun
		for i, r := range []*strings.Replacer{fleet, oracle} {
			exec(t, c, "BEGIN")
			exec(t, c, r.Replace("INSERT INTO {t} (id, g, v, ts) VALUES (90, 2, 0, '2024-01-01')"), simple)
			got := gatherRun(t, c, r.Replace("UPDATE {t} SET v = v + 2 WHERE g = 2 RETURNING id, v"), simple)
			slices.SortFunc(got.Rows, func(a, b []string) int { return strings.Compare(a[0], b[0]) })
			// A read routed to each worker (a multi-shard read is refused
			// in a transaction spanning workers).
			seen := gatherRun(t, c, r.Replace("SELECT v FROM {t} WHERE id = 90"), simple)
			seen2 := gatherRun(t, c, r.Replace("SELECT v FROM {t} WHERE id = 91"), simple)
			seen.Rows = append(seen.Rows, seen2.Rows...)
			outs[i] = oracleRun{Rows: append(got.Rows, seen.Rows...), State: got.State + seen.State, Tag: got.Tag}
			exec(t, c, end)
		}
		if !reflect.DeepEqual(outs[0], outs[1]) || outs[0].State != "" {
			t.Errorf("in a transaction block ending with %s:\n got %+v\nwant %+v", end, outs[0], outs[1])
		}
		same("a multi-shard UPDATE in a transaction block ending with " + end)
	}
	// A failing shard fails the transaction; nothing stays.
	exec(t, c, "BEGIN")
	_, err := c.Exec(ctx, "UPDATE mw SET v = 100 / (id - 43)", simple)
	if sqlState(err) != "22012" {
		t.Errorf("failing multi-shard UPDATE in a transaction block: %v, want 22012", err)
	}
	if _, err := c.Exec(ctx, "SELECT 1", simple); sqlState(err) != "25P02" {
		t.Errorf("after the failure: %v, want 25P02", err)
	}
	exec(t, c, "ROLLBACK")
	same("a failed multi-shard UPDATE in a transaction block")
	exec(t, c, "BEGIN ISOLATION LEVEL REPEATABLE READ")
	_, err = c.Exec(ctx, "UPDATE mw SET v = 4", simple)
	exec(t, c, "ROLLBACK")
	if sqlState(err) != "0A000" {
		t.Errorf("under REPEATABLE READ: %v, want 0A000", err)
	}
	same("a refusal under REPEATABLE READ")
	// RETURNING's rows are bounded by --max-gather: past it, 54000 and
	// nothing written, in and out of a transaction block.
	small := pgtest.Coordinator(t, cl, func(cfg *coordinator.Config) { cfg.PoolSize = 2; cfg.MaxGather = 300 })
	sc := connect(t, small.Addr())
	for _, txn := range []bool{false, true} {
		if txn {
			exec(t, sc, "BEGIN")
		}
		_, err := sc.Exec(ctx, "UPDATE mw SET k = k + 1 RETURNING *", simple)
		if txn {
			exec(t, sc, "ROLLBACK")
			exec(t, sc, "BEGIN")
		}
		_, xerr := sc.Exec(ctx, "UPDATE mw SET k = k + $1 RETURNING *", 1)
		if txn {
			exec(t, sc, "ROLLBACK")
		}
		if sqlState(err) != "54000" || sqlState(xerr) != "54000" {
			t.Errorf("RETURNING past --max-gather (transaction block %v): %v; extended protocol %v; want 54000", txn, err, xerr)
		}
		same("RETURNING past --max-gather")
	}
	for _, w := range cl.Servers {
		wc := connect(t, w.Addr())
		if n := queryString(t, wc, "SELECT count(*) FROM pg_prepared_xacts"); n != "0" {
			t.Errorf("worker %s: %s prepared transactions left", w.Addr(), n)
		}
		wc.Close(ctx)
	}
}

// TestMultiShardWriteExtended: multi-shard UPDATE, DELETE and INSERT ...
// SELECT over the extended protocol (as ORMs send them: parameters, in and
// out of transaction blocks) change exactly what PostgreSQL changes.
func TestMultiShardWriteExtended(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	c := connect(t, srv.Addr())
	ctx := context.Background()
	const cols = "(id int PRIMARY KEY, g int, v numeric, t text, d date)"
	testTable(t, c, "mx", cols, "SELECT create_distributed_table('mx', 'id', shard_count => 5)")
	testTable(t, c, "mx2", cols, "SELECT create_distributed_table('mx2', 'id', colocate_with => 'mx')")
	plainTables(t, c, "mxo "+cols, "mx2o "+cols)
	var rows []string
	for i := 1; i <= 40; i++ {
		rows = append(rows, fmt.Sprintf("(%d, %d, %d.25, 't%d', '2024-01-%02d')", i, i%4, i%9-3, i%3, i%28+1))
	}
	for _, tb := range []string{"mx", "mxo"} {
		exec(t, c, "INSERT INTO "+tb+" (id, g, v, t, d) VALUES "+strings.Join(rows, ", "))
	}
	fleet := strings.NewReplacer("{t}", "mx", "{t2}", "mx2")
	oracle := strings.NewReplacer("{t}", "mxo", "{t2}", "mx2o")
	same := func(what string) {
		t.Helper()
		for _, tb := range [][2]string{{"mx", "mxo"}, {"mx2", "mx2o"}} {
			got := gatherRun(t, c, "SELECT * FROM "+tb[0]+" ORDER BY id", pgx.QueryExecModeSimpleProtocol)
			want := gatherRun(t, c, "SELECT * FROM "+tb[1]+" ORDER BY id", pgx.QueryExecModeSimpleProtocol)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("after %s: %s differs:\n got %v\nwant %v", what, tb[0], got, want)
			}
		}
	}
	type q struct {
		sql  string
		args []any
	}
	steps := []q{
		{"UPDATE {t} SET v = v * $1, t = $2 WHERE g = $3", []any{2, "x", 1}},
		{"DELETE FROM {t} WHERE v < $1 AND d > $2", []any{-1, "2024-01-10"}},
		{"INSERT INTO {t2} (id, g, v, t) SELECT id, g, v + $1, t FROM {t} WHERE g <> $2 ON CONFLICT (id) DO UPDATE SET v = excluded.v + 1", []any{0.5, 3}},
		{"UPDATE {t2} SET d = $1::date + g WHERE t LIKE $2", []any{"2025-02-01", "t%"}},
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec} {
		for _, inTxn := range []bool{false, true} {
			for _, st := range steps {
				var tags [2]string
				for i, r := range []*strings.Replacer{fleet, oracle} {
					if inTxn {
						exec(t, c, "BEGIN")
					}
					tag, err := c.Exec(ctx, r.Replace(st.sql), append([]any{mode}, st.args...)...)
					if err != nil {
						t.Fatalf("%s (%v, in a transaction block: %v): %v", r.Replace(st.sql), mode, inTxn, err)
					}
					if inTxn {
						exec(t, c, "COMMIT")
					}
					tags[i] = tag.String()
				}
				if tags[0] != tags[1] {
					t.Errorf("%s (%v): tag %q, want %q", st.sql, mode, tags[0], tags[1])
				}
				same(st.sql)
			}
		}
	}
	// Prepared (Parse, Describe) in a transaction block that holds a
	// worker: described there, on a shard it holds (difftest seed 1: the
	// first shard's statement was sent there, 42P01).
	for id := 1; id <= 8; id++ {
		exec(t, c, "BEGIN")
		exec(t, c, "SELECT * FROM mx WHERE id = $1", id)
		name := fmt.Sprintf("held%d", id)
		if _, err := c.PgConn().Prepare(ctx, name, "UPDATE mx SET v = v WHERE g = $1", nil); err != nil {
			t.Errorf("prepare holding the worker of id %d: %v", id, err)
		} else if r := c.PgConn().ExecPrepared(ctx, name, [][]byte{[]byte("1")}, nil, nil).Read(); r.Err != nil {
			t.Errorf("execute holding the worker of id %d: %v", id, r.Err)
		}
		exec(t, c, "ROLLBACK")
	}
	// A batch (pgx.Batch: one pipeline) with a multi-shard write in a
	// transaction block, rolled back.
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue("UPDATE mx SET v = 0 WHERE g = $1", 2)
	b.Queue("ROLLBACK")
	if err := c.SendBatch(ctx, b).Close(); err != nil {
		t.Fatalf("batch: %v", err)
	}
	same("a rolled-back batch")
	// A failing shard inside a transaction block fails it.
	exec(t, c, "BEGIN")
	if _, err := c.Exec(ctx, "UPDATE mx SET v = 1 / (id - $1)", 7); sqlState(err) != "22012" {
		t.Errorf("failing extended multi-shard UPDATE: %v, want 22012", err)
	}
	exec(t, c, "ROLLBACK")
	same("a failed write")
	// 'now' as a text parameter for a date: each worker would read its own.
	if _, err := c.Exec(ctx, "UPDATE mx SET d = $1 WHERE g = 1", "now"); sqlState(err) != "0A000" {
		t.Errorf("'now' parameter for a date: %v, want 0A000", err)
	}
	same("a refused 'now'")
}

// TestCancelWriteOverWorkers: a cancel request stops a multi-shard or
// reference-table write that waits on a worker outside a transaction block
// (it runs through pgx on the session's pooled connections, in a
// two-phase-commit group), with 57014, nothing written, nothing prepared
// left; found by an adversary: the request reached no worker and the write
// committed once the lock went.
func TestCancelWriteOverWorkers(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	testTable(t, c, "cw_d", "(id int PRIMARY KEY, v int)", "SELECT create_distributed_table('cw_d', 'id', shard_count => 4)")
	testTable(t, c, "cw_r", "(id int PRIMARY KEY, v int)", "SELECT create_reference_table('cw_r')")
	exec(t, c, "INSERT INTO cw_d SELECT g, 0 FROM generate_series(1, 40) g", simple)
	exec(t, c, "INSERT INTO cw_r SELECT g, 0 FROM generate_series(1, 5) g", simple)
	w := connect(t, cl.Servers[0].Addr())
	contents := func() string {
		return queryString(t, c, "SELECT (SELECT sum(v) FROM cw_d)::text || '/' || (SELECT sum(v) FROM cw_r)::text")
	}
	before := contents()
	for _, q := range []struct {
		sql  string
		mode pgx.QueryExecMode
	}{
		{"UPDATE cw_d SET v = v + 1", simple},
		// Described (a multi-shard statement) or parsed (a routed one) by
		// a worker at its Parse, which waits for the lock too.
		{"UPDATE cw_d SET v = v + 1 RETURNING id", pgx.QueryExecModeCacheStatement},
		{"UPDATE cw_d SET v = v + 1 WHERE id = $1 RETURNING id", pgx.QueryExecModeCacheStatement},
		{"UPDATE cw_r SET v = v + 1", simple},
		{"UPDATE cw_r SET v = v + 1 RETURNING id", pgx.QueryExecModeExec},
	} {
		// Every shard table of both on the first worker is locked there.
		exec(t, w, "BEGIN")
		rows, err := w.Query(ctx, "SELECT schemaname || '.' || tablename FROM pg_tables WHERE tablename ~ '^cw_[dr]_[0-9]+$'")
		if err != nil {
			t.Fatal(err)
		}
		tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(tables) == 0 {
			t.Fatalf("shard tables on the first worker: %v, %v", tables, err)
		}
		exec(t, w, "LOCK TABLE "+strings.Join(tables, ", ")+" IN EXCLUSIVE MODE")
		var args []any
		if strings.Contains(q.sql, "$1") {
			// A row of a shard on the first worker.
			id := ""
			for _, tb := range tables {
				if id == "" && strings.Contains(tb, "cw_d_") {
					id = queryString(t, w, "SELECT coalesce(min(id)::text, '') FROM "+tb)
				}
			}
			args = append(args, q.mode, id)
		} else {
			args = append(args, q.mode)
		}
		errc := make(chan error, 1)
		go func() {
			rows, err := c.Query(ctx, q.sql, args...)
			if err == nil {
				rows.Close()
				err = rows.Err()
			}
			errc <- err
		}()
		err2 := cancelUntil(t, c, errc, q.sql, func() { exec(t, w, "ROLLBACK") })
		exec(t, w, "ROLLBACK")
		if sqlState(err2) != "57014" {
			t.Errorf("%s: %v, want 57014", q.sql, err2)
		}
		if got := contents(); got != before {
			t.Errorf("%s: after the cancel the tables are %s, were %s", q.sql, got, before)
		}
	}
	for _, s := range cl.Servers {
		wc := connect(t, s.Addr())
		if n := queryString(t, wc, "SELECT count(*)::text FROM pg_prepared_xacts"); n != "0" {
			t.Errorf("worker %s: %s prepared transactions left", s.Addr(), n)
		}
	}
}

// cancelUntil sends c's cancel request every half second until errc gives
// the outcome of the statement c runs (one sent before the statement
// reached its workers cancels nothing, as on PostgreSQL); after 10 s it
// calls release, which ends what the statement waits for, and fails.
func cancelUntil(t *testing.T, c *pgx.Conn, errc chan error, what string, release func()) error {
	t.Helper()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case err := <-errc:
			return err
		case <-tick.C:
			if err := c.PgConn().CancelRequest(context.Background()); err != nil {
				t.Fatal(err)
			}
		case <-timeout:
			release()
			<-errc
			t.Fatalf("%s: not cancelled", what)
		}
	}
}
