package coordinator_test

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestWritesDuringDistribution inserts rows through two coordinators (one
// that runs the Citus function, one whose catalog lags behind, in both
// protocols) while create_distributed_table and create_reference_table move
// the table: every INSERT that was acknowledged is readable through the
// coordinator afterwards, and none is left in the hidden table on the
// default node.
func TestWritesDuringDistribution(t *testing.T) {
	cl := pgtest.Shared(t)
	a := pgtest.Coordinator(t, cl, nil)
	b := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	for fi, fn := range []string{"create_distributed_table('%s', 'id', shard_count => 4)", "create_reference_table('%s')"} {
		for round := 0; round < 2; round++ {
			table := fmt.Sprintf("wd_t%d%d", fi, round)
			c := connect(t, a.Addr())
			exec(t, c, "DROP TABLE IF EXISTS "+table)
			exec(t, c, "CREATE TABLE "+table+" (id bigint PRIMARY KEY, v text)")
			exec(t, c, "INSERT INTO "+table+" SELECT g, 'old' FROM generate_series(1, 20000) g")

			var mu sync.Mutex
			var acked []int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for w, addr := range []string{a.Addr(), b.Addr(), a.Addr(), b.Addr()} {
				wc := connect(t, addr)
				mode := pgx.QueryExecModeCacheStatement
				if w >= 2 {
					mode = simple
				}
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					for i := int64(0); ; i++ {
						select {
						case <-stop:
							if i > 50 {
								return
							}
						default:
						}
						id := 1000000*int64(w+1) + i
						if _, err := wc.Exec(ctx, "INSERT INTO "+table+" (id, v) VALUES ($1, 'new')", mode, id); err == nil {
							mu.Lock()
							acked = append(acked, id)
							mu.Unlock()
						}
					}
				}(w)
			}
			// The writers are under way (25 acknowledged) before the
			// function starts: on a loaded machine they may otherwise
			// have written little when it ends.
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				mu.Lock()
				n := len(acked)
				mu.Unlock()
				if n >= 25 {
					break
				}
			}
			mu.Lock()
			before := len(acked)
			mu.Unlock()
			_, err := c.Exec(ctx, "SELECT "+fmt.Sprintf(fn, table), simple)
			close(stop)
			wg.Wait()
			if err != nil {
				t.Fatalf("%s: %v", fn, err)
			}
			t.Cleanup(func() {
				_, _ = c.Exec(ctx, "SELECT undistribute_table('"+table+"')", simple)
				_, _ = c.Exec(ctx, "DROP TABLE IF EXISTS "+table, simple)
			})
			var hidden int
			if err := connect(t, cl.Servers[0].Addr()).QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&hidden); err != nil {
				t.Fatal(err)
			}
			if hidden != 0 {
				t.Errorf("%s: %d rows in the hidden table on the default node", fn, hidden)
			}
			rows, err := c.Query(ctx, "SELECT id FROM "+table+" WHERE id >= 1000000", simple)
			if err != nil {
				t.Fatal(err)
			}
			got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil {
				t.Fatal(err)
			}
			have := map[int64]bool{}
			for _, id := range got {
				have[id] = true
			}
			var lost []int64
			for _, id := range acked {
				if !have[id] {
					lost = append(lost, id)
				}
			}
			sort.Slice(lost, func(i, j int) bool { return lost[i] < lost[j] })
			// (At least 10 acknowledged once the function started: 25
			// more were asked, and a loaded machine once gave 17.)
			if len(lost) > 0 || len(acked)-before < 10 {
				t.Errorf("%s: %d of %d acknowledged rows lost (%d acknowledged once it started): %v", fn, len(lost), len(acked), len(acked)-before, lost)
			}
			var old int
			if err := c.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE id < 1000000", simple).Scan(&old); err != nil || old != 20000 {
				t.Errorf("%s: %d old rows (%v), want 20000", fn, old, err)
			}
		}
	}
}

// TestCopyWhere loads rows with COPY ... FROM STDIN WHERE into a
// distributed and a reference table: the rows stored and the command tag
// are plain PostgreSQL's.
func TestCopyWhere(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	testTable(t, c, "cw_d", "(id bigint PRIMARY KEY, v int, s text)", "SELECT create_distributed_table('cw_d', 'id', shard_count => 4)")
	testTable(t, c, "cw_r", "(id bigint PRIMARY KEY, v int, s text)", "SELECT create_reference_table('cw_r')")
	plain := connect(t, cl.Servers[1].Addr())
	exec(t, plain, "DROP TABLE IF EXISTS cw_plain")
	exec(t, plain, "CREATE TABLE cw_plain (id bigint PRIMARY KEY, v int, s text)")
	t.Cleanup(func() { _, _ = plain.Exec(context.Background(), "DROP TABLE IF EXISTS cw_plain") })
	var data strings.Builder
	for i := 1; i <= 40; i++ {
		if i%7 == 0 {
			fmt.Fprintf(&data, "%d\t\\N\tn%d\n", i, i)
		} else {
			fmt.Fprintf(&data, "%d\t%d\ts%d\n", i, i, i)
		}
	}
	for _, where := range []string{"v > 15", "v > 15 AND s LIKE 's2%'", "v IS NULL OR id < 3", "false"} {
		exec(t, plain, "TRUNCATE cw_plain")
		want, err := plain.PgConn().CopyFrom(ctx, strings.NewReader(data.String()), "COPY cw_plain FROM STDIN WHERE "+where)
		if err != nil {
			t.Fatal(err)
		}
		wantRows := tableRows(t, plain, "SELECT id, v, s FROM cw_plain ORDER BY id")
		for _, table := range []string{"cw_d", "cw_r"} {
			exec(t, c, "TRUNCATE "+table, pgx.QueryExecModeSimpleProtocol)
			got, err := c.PgConn().CopyFrom(ctx, strings.NewReader(data.String()), "COPY "+table+" FROM STDIN WHERE "+where)
			if err != nil {
				t.Fatalf("COPY %s WHERE %s: %v", table, where, err)
			}
			if got.String() != want.String() {
				t.Errorf("COPY %s WHERE %s: tag %q, PostgreSQL %q", table, where, got, want)
			}
			gotRows := tableRows(t, c, "SELECT id, v, s FROM "+table+" ORDER BY id")
			if gotRows != wantRows {
				t.Errorf("COPY %s WHERE %s stored\n%s\nPostgreSQL:\n%s", table, where, gotRows, wantRows)
			}
		}
	}
}

// tableRows runs a query in the simple protocol and returns its rows as
// text, one line each, NULL as -.
func tableRows(t *testing.T, c *pgx.Conn, sql string) string {
	t.Helper()
	res, err := c.PgConn().Exec(context.Background(), sql).ReadAll()
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	var b strings.Builder
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("%s: %v", sql, r.Err)
		}
		for _, row := range r.Rows {
			for i, v := range row {
				if i > 0 {
					b.WriteByte('|')
				}
				if v == nil {
					b.WriteByte('-')
				} else {
					b.Write(v)
				}
			}
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// TestSessionSettingsReachDistributedWrites writes through every path that
// runs on dedicated worker connections (multi-row INSERT over several
// shards, COPY, reference-table writes in both protocols, DDL) under a
// session's TimeZone and DateStyle: values are read as PostgreSQL reads
// them in that session; under default_transaction_read_only every write is
// refused with 25006.
func TestSessionSettingsReachDistributedWrites(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	c := connect(t, srv.Addr())
	testTable(t, c, "ss_d", "(id bigint PRIMARY KEY, ts timestamptz, d date)", "SELECT create_distributed_table('ss_d', 'id', shard_count => 4)")
	testTable(t, c, "ss_r", "(id bigint PRIMARY KEY, ts timestamptz, d date)", "SELECT create_reference_table('ss_r')")
	exec(t, c, "SET TimeZone = 'America/New_York'", simple)
	exec(t, c, "SET DateStyle = 'ISO, DMY'", simple)
	exec(t, c, "INSERT INTO ss_d (id, ts, d) VALUES (1, '2020-01-01 00:00', '01/02/2020'), (2, '2020-01-01 00:00', '01/02/2020'), (3, '2020-01-01 00:00', '01/02/2020'), (4, '2020-01-01 00:00', '01/02/2020')", simple)
	exec(t, c, "INSERT INTO ss_r (id, ts, d) VALUES (1, '2020-01-01 00:00', '01/02/2020')", simple)
	exec(t, c, "INSERT INTO ss_r (id, ts, d) VALUES ($1, $2::text::timestamptz, $3::text::date)", int64(2), "2020-01-01 00:00", "01/02/2020")
	if _, err := c.PgConn().CopyFrom(ctx, strings.NewReader("5\t2020-01-01 00:00\t01/02/2020\n6\t2020-01-01 00:00\t01/02/2020\n7\t2020-01-01 00:00\t01/02/2020\n"), "COPY ss_d FROM STDIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PgConn().CopyFrom(ctx, strings.NewReader("3\t2020-01-01 00:00\t01/02/2020\n"), "COPY ss_r FROM STDIN"); err != nil {
		t.Fatal(err)
	}
	exec(t, c, "ALTER TABLE ss_d ADD COLUMN d2 date DEFAULT '03/04/2020'", simple)
	exec(t, c, "ALTER TABLE ss_r ADD COLUMN d2 date DEFAULT '03/04/2020'", simple)

	wantTS := time.Date(2020, 1, 1, 5, 0, 0, 0, time.UTC)
	wantD := time.Date(2020, 2, 1, 0, 0, 0, 0, time.UTC)
	wantD2 := time.Date(2020, 4, 3, 0, 0, 0, 0, time.UTC)
	r := connect(t, srv.Addr())
	for table, ids := range map[string]int{"ss_d": 7, "ss_r": 3} {
		for id := 1; id <= ids; id++ {
			var ts, d, d2 time.Time
			if err := r.QueryRow(ctx, "SELECT ts, d, d2 FROM "+table+" WHERE id = $1", id).Scan(&ts, &d, &d2); err != nil {
				t.Fatalf("%s %d: %v", table, id, err)
			}
			if !ts.Equal(wantTS) || !d.Equal(wantD) || !d2.Equal(wantD2) {
				t.Errorf("%s row %d: ts %v, d %v, d2 %v; want %v, %v, %v", table, id, ts.UTC(), d, d2, wantTS, wantD, wantD2)
			}
		}
	}

	exec(t, c, "SET default_transaction_read_only = on", simple)
	for _, q := range []string{
		"INSERT INTO ss_d (id) VALUES (11), (12), (13), (14)",
		"INSERT INTO ss_r (id) VALUES (11)",
		"UPDATE ss_r SET d = NULL",
		"ALTER TABLE ss_d ADD COLUMN x int",
	} {
		if _, err := c.Exec(ctx, q, simple); sqlState(err) != "25006" {
			t.Errorf("%s under default_transaction_read_only: %v, want 25006", q, err)
		}
	}
	if _, err := c.Exec(ctx, "INSERT INTO ss_r (id) VALUES ($1)", 11); sqlState(err) != "25006" {
		t.Errorf("extended reference insert under default_transaction_read_only: %v, want 25006", err)
	}
	for _, table := range []string{"ss_d", "ss_r"} {
		if _, err := c.PgConn().CopyFrom(ctx, strings.NewReader("21\t\\N\t\\N\n"), "COPY "+table+" (id, ts, d) FROM STDIN"); sqlState(err) != "25006" {
			t.Errorf("COPY %s under default_transaction_read_only: %v, want 25006", table, err)
		}
	}
	var n int
	if err := r.QueryRow(ctx, "SELECT count(*) FROM ss_d WHERE id > 10", simple).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d rows written under read-only (%v)", n, err)
	}
	exec(t, c, "RESET default_transaction_read_only", simple)
}

// TestReferenceWritesStayIdentical: writes to a reference table whose
// values each copy would compute on its own (volatile and stable functions,
// CURRENT_TIMESTAMP, 'now', non-immutable defaults) are refused with
// 0A000 in both protocols, in and outside transaction blocks, and through
// COPY; immutable ones run; every worker's copy is the same afterwards.
func TestReferenceWritesStayIdentical(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	c := connect(t, srv.Addr())
	testTable(t, c, "mv_r", "(id int PRIMARY KEY, v float8, t timestamptz, u uuid, s text)", "SELECT create_reference_table('mv_r')")
	testTable(t, c, "mv_d", "(id int PRIMARY KEY, created timestamptz DEFAULT now(), u uuid DEFAULT gen_random_uuid(), note text DEFAULT 'x')", "SELECT create_reference_table('mv_d')")
	exec(t, c, "CREATE OR REPLACE FUNCTION mv_f() RETURNS float8 LANGUAGE sql VOLATILE AS 'SELECT random()'", simple)
	t.Cleanup(func() { _, _ = c.Exec(ctx, "DROP FUNCTION IF EXISTS mv_f()", simple) })
	refused := []string{
		"INSERT INTO mv_r (id, v) VALUES (1, random())",
		"INSERT INTO mv_r (id, u) VALUES (2, gen_random_uuid())",
		"INSERT INTO mv_r (id, t) VALUES (3, clock_timestamp())",
		"INSERT INTO mv_r (id, t) VALUES (6, 'now')",
		"INSERT INTO mv_r (id, v) VALUES (7, mv_f())",
		"INSERT INTO mv_r (id, v) VALUES (8, 1) ON CONFLICT (id) DO UPDATE SET v = random()",
		"UPDATE mv_r SET v = random()",
		"DELETE FROM mv_r WHERE v < random()",
		"INSERT INTO mv_d (id) VALUES (1)",
		"INSERT INTO mv_d (id, created) VALUES (2, '2020-01-01')",
		"INSERT INTO mv_d VALUES (3, '2020-01-01')",
		"INSERT INTO mv_d VALUES (4, '2020-01-01', DEFAULT, 'y')",
		"UPDATE mv_d SET created = DEFAULT",
	}
	for _, q := range refused {
		for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeCacheStatement} {
			if _, err := c.Exec(ctx, q, mode); sqlState(err) != "0A000" {
				t.Errorf("%s (%v): %v, want 0A000", q, mode, err)
			}
			exec(t, c, "BEGIN", simple)
			if _, err := c.Exec(ctx, q, mode); sqlState(err) != "0A000" {
				t.Errorf("%s (%v) in a transaction block: %v, want 0A000", q, mode, err)
			}
			exec(t, c, "ROLLBACK", simple)
		}
	}
	if _, err := c.Exec(ctx, "INSERT INTO mv_r (id, t) VALUES ($1, $2)", 9, "now"); sqlState(err) != "0A000" {
		t.Errorf("'now' as a text parameter: %v, want 0A000", err)
	}
	if _, err := c.PgConn().CopyFrom(ctx, strings.NewReader("10\tnow\n"), "COPY mv_r (id, t) FROM STDIN"); sqlState(err) != "0A000" {
		t.Errorf("COPY of 'now': %v, want 0A000", err)
	}
	if _, err := c.PgConn().CopyFrom(ctx, strings.NewReader("11\n"), "COPY mv_d (id) FROM STDIN"); sqlState(err) != "0A000" {
		t.Errorf("COPY taking the now() and gen_random_uuid() defaults: %v, want 0A000", err)
	}
	if _, err := c.PgConn().CopyFrom(ctx, strings.NewReader("12\n"), "COPY mv_r (id) FROM STDIN WHERE random() < 0.5"); sqlState(err) != "0A000" {
		t.Errorf("COPY WHERE random(): %v, want 0A000", err)
	}
	// Immutable expressions and defaults run.
	for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeCacheStatement} {
		exec(t, c, "DELETE FROM mv_r", mode)
		exec(t, c, "INSERT INTO mv_r (id, v, s, t) VALUES (20, abs(-1.5), upper('a'), '2020-01-01 00:00'::timestamptz + interval '1 hour')", mode)
		exec(t, c, "UPDATE mv_r SET v = v + 1 WHERE id = 20", mode)
		exec(t, c, "BEGIN", simple)
		exec(t, c, "UPDATE mv_r SET v = v + 1 WHERE id = 20", mode)
		exec(t, c, "COMMIT", simple)
		exec(t, c, "INSERT INTO mv_d (id, created, u) VALUES (20, '2020-01-01', '6ba7b810-9dad-11d1-80b4-00c04fd430c8') ON CONFLICT DO NOTHING", mode)
	}
	if _, err := c.PgConn().CopyFrom(ctx, strings.NewReader("21\t2020-01-01\t6ba7b810-9dad-11d1-80b4-00c04fd430c8\n"), "COPY mv_d (id, created, u) FROM STDIN"); err != nil {
		t.Errorf("COPY with every non-immutable default given: %v", err)
	}
	// Writes that read the transaction's time get one moment on every
	// copy outside a transaction block (freeze.go); inside one they are
	// refused (the block's time began on its first worker).
	for k, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeCacheStatement} {
		id := 40 + 10*k
		for _, q := range []string{
			fmt.Sprintf("INSERT INTO mv_r (id, t) VALUES (%d, now())", id),
			fmt.Sprintf("INSERT INTO mv_r (id, t) VALUES (%d, CURRENT_TIMESTAMP)", id+1),
			fmt.Sprintf("UPDATE mv_r SET t = now() + interval '1 day' WHERE id = %d", id),
		} {
			exec(t, c, q, mode)
			exec(t, c, "BEGIN", simple)
			if _, err := c.Exec(ctx, q, mode); sqlState(err) != "0A000" {
				t.Errorf("%s (%v) in a transaction block: %v, want 0A000", q, mode, err)
			}
			exec(t, c, "ROLLBACK", simple)
		}
	}

	// Locking reads write nothing: a time word there is fine.
	exec(t, c, "SELECT id FROM mv_r WHERE t < 'now' FOR UPDATE", simple)
	exec(t, c, "UPDATE mv_r SET s = 'b' WHERE id = 20", simple)
	if got := queryString(t, c, "SELECT v::text FROM mv_r WHERE id = 20"); got != "3.5" {
		t.Errorf("v = %s, want 3.5", got)
	}
	for _, table := range []string{"mv_r", "mv_d"} {
		var shard string
		meta := connect(t, cl.Servers[0].Addr())
		if err := meta.QueryRow(ctx, "SELECT shardid::text FROM pgfleet.shards WHERE table_name = $1", "public."+table).Scan(&shard); err != nil {
			t.Fatal(err)
		}
		var copies []string
		for _, s := range cl.Servers {
			copies = append(copies, tableRows(t, connect(t, s.Addr()), "SELECT * FROM pgfleet_shards."+table+"_"+shard+" ORDER BY id"))
		}
		if copies[0] != copies[1] || copies[0] == "" {
			t.Errorf("copies of %s differ:\n%s\n---\n%s", table, copies[0], copies[1])
		}
	}
}

// TestLargeInList: a 100,000-item IN list through the coordinator gives
// PostgreSQL's answer and costs the coordinator little memory (it used to
// plan, copy and deparse every item for every shard: 0.5 to 0.9 GB).
func TestLargeInList(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	c := connect(t, srv.Addr())
	exec(t, c, "DROP TABLE IF EXISTS il_t", simple)
	exec(t, c, "CREATE TABLE il_t (id bigint PRIMARY KEY, s text)", simple)
	exec(t, c, "INSERT INTO il_t (id, s) SELECT g, 'v' || g FROM generate_series(1, 1000) g", simple)
	exec(t, c, "SELECT create_distributed_table('il_t', 'id', shard_count => 4)", simple)
	t.Cleanup(func() { _, _ = c.Exec(ctx, "DROP TABLE IF EXISTS il_t", simple) })
	notSeven := 0
	for i := 1; i <= 1000; i++ {
		if i%3 == 0 && i%7 != 0 {
			notSeven++
		}
	}
	var ids, strs strings.Builder
	for i := 0; i < 100000; i++ {
		if i > 0 {
			ids.WriteString(", ")
			strs.WriteString(", ")
		}
		fmt.Fprintf(&ids, "%d", i*7)
		fmt.Fprintf(&strs, "'v%d'", i*3)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, q := range []struct {
		sql  string
		want int
	}{
		{"SELECT count(*) FROM il_t WHERE id IN (" + ids.String() + ")", 142},
		{"SELECT count(*) FROM il_t WHERE id NOT IN (" + ids.String() + ") AND s IN (" + strs.String() + ")", notSeven},
		{"SELECT count(*) FROM il_t WHERE id = 14 AND id IN (" + ids.String() + ")", 1},
	} {
		var n int
		if err := c.QueryRow(ctx, q.sql, simple).Scan(&n); err != nil || n != q.want {
			t.Errorf("%.60s...: %d, %v; want %d", q.sql, n, err, q.want)
		}
	}
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("allocated %d MiB", alloc>>20)
	if alloc > 300<<20 {
		t.Errorf("three 100,000-item IN lists allocated %d MiB in the test process", alloc>>20)
	}
}

// TestDistributeTableWithUserTypes distributes tables whose columns use an
// enum type, a domain over it, an array of it and a collation created
// through the coordinator (which exist only on the first worker): the
// shards on the other worker get them, and rows on keys of both workers
// read back.
func TestDistributeTableWithUserTypes(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	c := connect(t, srv.Addr())
	drop := func() {
		for _, s := range cl.Servers {
			w := connect(t, s.Addr())
			_, _ = w.Exec(ctx, "DROP TABLE IF EXISTS ty_t, ty_r")
			_, _ = w.Exec(ctx, "DROP DOMAIN IF EXISTS ty_happyish")
			_, _ = w.Exec(ctx, "DROP TYPE IF EXISTS ty_mood")
			_, _ = w.Exec(ctx, "DROP COLLATION IF EXISTS ty_c")
		}
	}
	drop()
	t.Cleanup(func() {
		_, _ = c.Exec(ctx, "SELECT undistribute_table('ty_t')", simple)
		_, _ = c.Exec(ctx, "SELECT undistribute_table('ty_r')", simple)
		drop()
	})
	exec(t, c, "CREATE TYPE ty_mood AS ENUM ('sad', 'ok', 'it''s happy')", simple)
	exec(t, c, "CREATE DOMAIN ty_happyish AS ty_mood CHECK (VALUE <> 'sad')", simple)
	exec(t, c, `CREATE COLLATION ty_c (provider = libc, locale = 'C')`, simple)
	exec(t, c, "CREATE TABLE ty_t (id bigint PRIMARY KEY, m ty_mood, h ty_happyish, ms ty_mood[], s text COLLATE ty_c)", simple)
	exec(t, c, "CREATE TABLE ty_r (id bigint PRIMARY KEY, m ty_mood)", simple)
	exec(t, c, "INSERT INTO ty_t VALUES (1, 'sad', 'ok', '{sad,ok}', 'a'), (2, 'ok', 'it''s happy', '{}', 'b')", simple)
	exec(t, c, "INSERT INTO ty_r VALUES (1, 'sad'), (2, 'ok')", simple)
	exec(t, c, "SELECT create_distributed_table('ty_t', 'id', shard_count => 4)", simple)
	exec(t, c, "SELECT create_reference_table('ty_r')", simple)
	for id := int64(3); id <= 20; id++ {
		exec(t, c, "INSERT INTO ty_t (id, m, h, ms, s) VALUES ($1, 'it''s happy', 'ok', '{ok}', 'x')", id)
	}
	if _, err := c.Exec(ctx, "INSERT INTO ty_t (id, h) VALUES (21, 'sad')"); sqlState(err) != "23514" {
		t.Errorf("domain CHECK on a shard: %v, want 23514", err)
	}
	_, _, nodes := shardRows(t, cl.Servers[0].Addr(), "public.ty_t", "id")
	if nodes != 2 {
		t.Fatalf("shards on %d nodes, want 2", nodes)
	}
	for id := int64(1); id <= 20; id++ {
		var m, h, s string
		if err := c.QueryRow(ctx, "SELECT m::text, h::text, s FROM ty_t WHERE id = $1", id).Scan(&m, &h, &s); err != nil {
			t.Fatalf("row %d: %v", id, err)
		}
		if id > 2 && (m != "it's happy" || h != "ok" || s != "x") {
			t.Errorf("row %d: %q %q %q", id, m, h, s)
		}
	}
	for _, s := range cl.Servers {
		if got := queryString(t, connect(t, s.Addr()), "SELECT string_agg(enumlabel, ',' ORDER BY enumsortorder) FROM pg_enum WHERE enumtypid = 'ty_mood'::regtype"); got != "sad,ok,it's happy" {
			t.Errorf("ty_mood on %s: %q", s.Addr(), got)
		}
	}
	if got := queryString(t, c, "SELECT r.m::text FROM ty_t d JOIN ty_r r ON r.id = d.id WHERE d.id = 2"); got != "ok" {
		t.Errorf("join with the reference table: %q", got)
	}

	// DDL on types, domains, collations and schemas reaches every worker.
	exec(t, c, "ALTER TYPE ty_mood ADD VALUE 'great' AFTER 'ok'", simple)
	for id := int64(1); id <= 20; id++ {
		exec(t, c, "UPDATE ty_t SET m = 'great' WHERE id = $1", id)
	}
	exec(t, c, "CREATE TYPE ty_other AS ENUM ('a')", simple)
	exec(t, c, "CREATE SCHEMA ty_s", simple)
	exec(t, c, "CREATE DOMAIN ty_s.d AS int CHECK (VALUE > 0)", simple)
	for _, s := range cl.Servers {
		w := connect(t, s.Addr())
		if got := queryString(t, w, "SELECT string_agg(enumlabel, ',' ORDER BY enumsortorder) FROM pg_enum WHERE enumtypid = 'ty_mood'::regtype"); got != "sad,ok,great,it's happy" {
			t.Errorf("ty_mood on %s after ADD VALUE: %q", s.Addr(), got)
		}
		if got := queryString(t, w, "SELECT count(*)::text FROM pg_type WHERE typname IN ('ty_other', 'd')"); got != "2" {
			t.Errorf("%s has %s of the new types", s.Addr(), got)
		}
	}
	exec(t, c, "CREATE FUNCTION ty_f(ty_mood) RETURNS text LANGUAGE sql IMMUTABLE AS $$ SELECT upper($1::text) $$", simple)
	for id := int64(1); id <= 20; id++ {
		if got := queryString(t, c, "SELECT ty_f(m) FROM ty_t WHERE id = $1", id); got != "GREAT" {
			t.Errorf("ty_f on row %d: %q", id, got)
		}
	}
	exec(t, c, "DROP FUNCTION ty_f(ty_mood)", simple)
	exec(t, c, "DROP DOMAIN ty_s.d", simple)
	exec(t, c, "DROP SCHEMA ty_s", simple)
	exec(t, c, "DROP TYPE ty_other", simple)
	if _, err := c.Exec(ctx, "DROP TYPE ty_other", simple); sqlState(err) != "42704" {
		t.Errorf("dropping a dropped type: %v, want 42704", err)
	}
	for _, s := range cl.Servers {
		if got := queryString(t, connect(t, s.Addr()), "SELECT count(*)::text FROM pg_namespace WHERE nspname = 'ty_s'"); got != "0" {
			t.Errorf("schema ty_s still on %s", s.Addr())
		}
	}
}

// TestAddNodeCopiesReferenceTables adds a third worker with citus_add_node
// while clients write a reference table through two coordinators: the new
// node gets every reference table (with its enum type), every copy holds
// the same rows, every acknowledged write among them, and a distributed
// table created afterwards joins the reference table on all three workers.
func TestAddNodeCopiesReferenceTables(t *testing.T) {
	cl := pgtest.Start(t, 2)
	third := pgtest.Start(t, 1)
	a := pgtest.Coordinator(t, cl, nil)
	b := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	c := connect(t, a.Addr())
	exec(t, c, "CREATE TYPE an_kind AS ENUM ('x', 'y')", simple)
	exec(t, c, "CREATE TABLE an_r (id bigint PRIMARY KEY, name text NOT NULL, k an_kind)", simple)
	exec(t, c, "CREATE INDEX an_r_name ON an_r (name)", simple)
	exec(t, c, "INSERT INTO an_r SELECT g, 'n' || g, 'x' FROM generate_series(1, 5000) g", simple)
	exec(t, c, "SELECT create_reference_table('an_r')", simple)

	var mu sync.Mutex
	var acked []int64
	stop := make(chan struct{})
	var wg, warm sync.WaitGroup
	warm.Add(4)
	for w, addr := range []string{a.Addr(), b.Addr(), a.Addr(), b.Addr()} {
		wc := connect(t, addr)
		mode := pgx.QueryExecModeCacheStatement
		if w >= 2 {
			mode = simple
		}
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			after := 0 // writes acknowledged after citus_add_node returned
			mine := 0
			for i := int64(0); i < 100000; i++ {
				stopped := false
				select {
				case <-stop:
					stopped = true
					if after >= 10 {
						return
					}
				default:
				}
				id := 1000000*int64(w+1) + i
				if _, err := wc.Exec(ctx, "INSERT INTO an_r (id, name, k) VALUES ($1, 'new', 'y')", mode, id); err == nil {
					mu.Lock()
					acked = append(acked, id)
					mu.Unlock()
					if stopped {
						after++
					}
					if mine++; mine == 3 {
						warm.Done() // three writes before citus_add_node
					}
				}
			}
		}(w)
	}
	warm.Wait()
	host, port, _ := net.SplitHostPort(third.Servers[0].Addr())
	var id int
	err := c.QueryRow(ctx, "SELECT citus_add_node('"+host+"', "+port+")", simple).Scan(&id)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("citus_add_node: %v", err)
	}

	var shard string
	if err := connect(t, cl.Servers[0].Addr()).QueryRow(ctx, "SELECT shardid::text FROM pgfleet.shards WHERE table_name = 'public.an_r'").Scan(&shard); err != nil {
		t.Fatal(err)
	}
	var copies []string
	for _, s := range append(cl.Servers, third.Servers...) {
		copies = append(copies, tableRows(t, connect(t, s.Addr()), "SELECT id, name, k FROM pgfleet_shards.an_r_"+shard+" ORDER BY id"))
	}
	if copies[0] != copies[1] || copies[0] != copies[2] {
		t.Errorf("copies differ: %d, %d and %d bytes", len(copies[0]), len(copies[1]), len(copies[2]))
	}
	for _, id := range acked {
		if !strings.Contains(copies[2], fmt.Sprintf("%d|new|y\n", id)) {
			t.Errorf("acknowledged row %d is not on the new node", id)
		}
	}
	if len(acked) < 4*13 {
		t.Errorf("only %d writes were acknowledged", len(acked))
	}
	if got := queryString(t, connect(t, third.Servers[0].Addr()), "SELECT count(*)::text FROM pg_indexes WHERE indexname LIKE 'an_r_name%'"); got != "1" {
		t.Errorf("index on the new copy: %s", got)
	}

	// A distributed table placed on all three workers joins the reference
	// table on each.
	exec(t, c, "CREATE TABLE an_d (id bigint PRIMARY KEY, rid bigint)", simple)
	exec(t, c, "INSERT INTO an_d SELECT g, g FROM generate_series(1, 60) g", simple)
	exec(t, c, "SELECT create_distributed_table('an_d', 'id', shard_count => 3)", simple)
	if _, _, nodes := shardRows(t, cl.Servers[0].Addr(), "public.an_d", "id"); nodes != 3 {
		t.Fatalf("an_d on %d nodes, want 3", nodes)
	}
	for k := int64(1); k <= 60; k++ {
		var name string
		if err := c.QueryRow(ctx, "SELECT r.name FROM an_d d JOIN an_r r ON r.id = d.rid WHERE d.id = $1", k).Scan(&name); err != nil || name != fmt.Sprint("n", k) {
			t.Errorf("join for %d: %q, %v", k, name, err)
		}
	}
	// Writes after the node is added reach all three copies.
	exec(t, c, "UPDATE an_r SET name = 'changed' WHERE id = 7", simple)
	exec(t, c, "UPDATE an_r SET name = $1 WHERE id = 8", "changed")
	for _, s := range append(cl.Servers, third.Servers...) {
		if got := queryString(t, connect(t, s.Addr()), "SELECT count(*)::text FROM pgfleet_shards.an_r_"+shard+" WHERE name = 'changed'"); got != "2" {
			t.Errorf("%s: %s changed rows, want 2", s.Addr(), got)
		}
		// A write planned for the two old copies (a coordinator that has
		// not seen the new node) is refused by every copy.
		if _, err := connect(t, s.Addr()).Exec(ctx, "UPDATE pgfleet_shards.an_r_"+shard+" SET name = 'stale' WHERE id = 9 /* pgfleet:copies=2 */", simple); sqlState(err) != "40001" {
			t.Errorf("%s: a write for 2 copies: %v, want 40001", s.Addr(), err)
		}
	}
	exec(t, c, "TRUNCATE an_r", simple)
	for _, s := range append(cl.Servers, third.Servers...) {
		if got := queryString(t, connect(t, s.Addr()), "SELECT count(*)::text FROM pgfleet_shards.an_r_"+shard); got != "0" {
			t.Errorf("%s: %s rows after TRUNCATE", s.Addr(), got)
		}
	}
}
