package coordinator_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestMultiShardReadAfterSetInBlock: a multi-shard read in a transaction
// block after SET or SET LOCAL reads under the block's settings on every
// worker, as PostgreSQL's one backend would (it was refused with 0A000: a
// tenant set with SET LOCAL before a report, or a statement_timeout for
// the transaction), and the pooled connections it used keep none of them:
// later sessions read with their own settings.
func TestMultiShardReadAfterSetInBlock(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(2))
	c := connect(t, srv.Addr())
	// Tenant 1: keys 1-10; tenant 2: 11-100, over every shard.
	freshTables(t, c, []string{"mrs"},
		"CREATE TABLE mrs (k int PRIMARY KEY, tenant int)",
		"SELECT create_distributed_table('mrs', 'k')",
		"INSERT INTO mrs SELECT g, CASE WHEN g <= 10 THEN 1 ELSE 2 END FROM generate_series(1, 100) g")
	count := "SELECT count(*)::text FROM mrs WHERE tenant = current_setting('app.tenant')::int"
	check := func(what, sql, want string) {
		t.Helper()
		if got := queryString(t, c, sql); got != want {
			t.Errorf("%s: %s, want %s", what, got, want)
		}
	}

	exec(t, c, "BEGIN")
	exec(t, c, "SET LOCAL app.tenant = '1'")
	check("SET LOCAL, then a multi-shard read", count, "10")
	exec(t, c, "SET LOCAL app.tenant = '2'")
	check("a second SET LOCAL", count, "90")
	exec(t, c, "ROLLBACK")

	// A SET (not LOCAL) in a block holds after COMMIT, and not after
	// ROLLBACK, on every worker.
	exec(t, c, "SET app.tenant = '1'")
	exec(t, c, "BEGIN")
	exec(t, c, "SET app.tenant = '2'")
	check("SET in a block", count, "90")
	exec(t, c, "ROLLBACK")
	check("after ROLLBACK", count, "10")
	exec(t, c, "BEGIN")
	exec(t, c, "SET app.tenant = '2'")
	check("SET in a block, again", count, "90")
	exec(t, c, "COMMIT")
	check("after COMMIT", count, "90")

	// After a write on one worker and under a server setting.
	exec(t, c, "BEGIN")
	exec(t, c, "UPDATE mrs SET tenant = tenant WHERE k = 5")
	exec(t, c, "SET LOCAL work_mem = '8MB'")
	exec(t, c, "SET LOCAL app.tenant = '1'")
	check("after a write, SET LOCAL", count, "10")
	check("a server setting on every shard", "SELECT count(*)::text FROM mrs WHERE current_setting('work_mem') = '8MB'", "100")
	exec(t, c, "COMMIT")

	// The pooled connections the reads used are as they were: another
	// session, which set nothing, reads its own settings everywhere.
	c2 := connect(t, srv.Addr())
	for i := 0; i < 4; i++ {
		if got := queryString(t, c2, "SELECT count(*)::text FROM mrs WHERE current_setting('work_mem') <> '8MB' AND current_setting('app.tenant', true) IS NULL"); got != "100" {
			t.Fatalf("another session, read %d: %s rows see no leftover setting, want 100", i, got)
		}
	}
	check("the first session's own setting", count, "90")
}

// TestSetInBlockStartupAndParked: adversary 160's cases. A RESET ALL in a
// block of a session that sent startup parameters, before a multi-shard
// read (XX000 and the block aborted: the replayed startup values had
// rows of their own); a custom setting first defined after a worker's
// connection was parked, then set there again (catchUp), left defined on
// that connection for sessions that never set it (they read ” for
// NULL); and a SET LOCAL idle_in_transaction_session_timeout set again on
// a parked connection ended the session while its client was busy on the
// other worker.
func TestSetInBlockStartupAndParked(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(2))
	ctx := context.Background()
	c, err := pgx.Connect(ctx, pgtest.URL(srv.Addr())+"&application_name=sibsp")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	k1, k2 := spanningTable(t, c, "sibsp")
	check := func(conn *pgx.Conn, what, sql, want string) {
		t.Helper()
		if got := queryString(t, conn, sql); got != want {
			t.Errorf("%s: %s, want %s", what, got, want)
		}
	}

	exec(t, c, "BEGIN")
	exec(t, c, "SET LOCAL application_name = 'other'")
	exec(t, c, "RESET ALL")
	check(c, "RESET ALL, then a multi-shard read", "SELECT count(*)::text FROM sibsp WHERE current_setting('application_name') = 'sibsp'", "100")
	exec(t, c, "COMMIT")

	exec(t, c, "BEGIN")
	exec(t, c, "UPDATE sibsp SET n = n WHERE aid = $1", k1)
	exec(t, c, "UPDATE sibsp SET n = n WHERE aid = $1", k2) // the first worker's connection is parked
	exec(t, c, "SET LOCAL app.sibsp_later = '1'")
	check(c, "a setting first defined on the second worker", "SELECT count(*)::text FROM sibsp WHERE current_setting('app.sibsp_later') = '1'", "100")
	exec(t, c, "COMMIT")
	for i := 0; i < 6; i++ {
		c2 := connect(t, srv.Addr())
		check(c2, fmt.Sprintf("a session that never set it, %d", i), "SELECT count(*)::text FROM sibsp WHERE current_setting('app.sibsp_later', true) IS NULL", "100")
		c2.Close(ctx)
	}

	exec(t, c, "BEGIN")
	exec(t, c, "UPDATE sibsp SET n = n WHERE aid = $1", k1)
	exec(t, c, "UPDATE sibsp SET n = n WHERE aid = $1", k2)
	exec(t, c, "SET LOCAL idle_in_transaction_session_timeout = '400ms'")
	exec(t, c, "UPDATE sibsp SET n = n WHERE aid = $1", k1) // back on the first worker: the SET is set again there
	for i := 0; i < 4; i++ {
		exec(t, c, "SELECT pg_sleep(0.2) FROM sibsp WHERE aid = $1", k2) // the client is never idle 400 ms
	}
	exec(t, c, "UPDATE sibsp SET n = n + 1 WHERE aid = $1", k1)
	exec(t, c, "COMMIT")
	check(c, "the block's write", fmt.Sprintf("SELECT n::text FROM sibsp WHERE aid = %d", k1), "101")
}

// TestSetInBlockStatementsNotKept: a multi-shard read after SET LOCAL
// TimeZone or DateStyle in a block has its date/time literals read under
// the block's settings, and the workers' statements it prepared are not
// used by later sessions under their own settings (adversary 161: a
// statement parsed under the block's time zone was kept under the
// connection's usual settings, and a later session with the same query
// text counted the other zone's rows). Both protocols; the expected
// counts are PostgreSQL's, asked directly.
func TestSetInBlockStatementsNotKept(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(2))
	ctx := context.Background()
	c := connect(t, srv.Addr())
	direct := connect(t, cl.Servers[0].Addr())
	freshTables(t, c, []string{"sbk"},
		"CREATE TABLE sbk (k int PRIMARY KEY, ts timestamptz)",
		"SELECT create_distributed_table('sbk', 'k')",
		"INSERT INTO sbk SELECT g, '2020-01-01 00:00+00'::timestamptz + g * interval '1 hour' FROM generate_series(1, 100) g")
	oracle := func(set, cond string) string {
		t.Helper()
		tx, err := direct.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if set != "" {
			if _, err := tx.Exec(ctx, set); err != nil {
				t.Fatal(err)
			}
		}
		var n string // (simple protocol: pgx's cache would keep a statement parsed under set)
		if err := tx.QueryRow(ctx, "SELECT count(*)::text FROM generate_series(1, 100) g WHERE '2020-01-01 00:00+00'::timestamptz + g * interval '1 hour' "+cond, pgx.QueryExecModeSimpleProtocol).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	cases := []struct{ set, cond string }{
		{"SET LOCAL TimeZone = 'Pacific/Kiritimati'", "< '2020-01-02 00:00'"},
		{"SET LOCAL DateStyle = 'ISO, DMY'", "< '02/01/2020'"},
	}
	for m, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		for i, tc := range cases {
			// The pools' connections prepare it first under their usual
			// settings (before), or first in the block.
			before := i%2 == 0
			if mode == pgx.QueryExecModeCacheStatement {
				before = !before
			}
			sql := fmt.Sprintf("SELECT count(*)::text FROM sbk WHERE k > %d AND ts %s", -1-m*len(cases)-i, tc.cond) // (a text of its own)
			inBlock, outside := oracle(tc.set, tc.cond), oracle("", tc.cond)
			if inBlock == outside {
				t.Fatalf("%s: the oracle counts %s both ways: the case tests nothing", tc.set, inBlock)
			}
			count := func(conn *pgx.Conn) string {
				t.Helper()
				var n string
				if err := conn.QueryRow(ctx, sql, mode).Scan(&n); err != nil {
					t.Fatalf("%s (%v): %v", sql, mode, err)
				}
				return n
			}
			if before {
				if got := count(c); got != outside {
					t.Errorf("%s (%v), before the block: %s, want %s", sql, mode, got, outside)
				}
			}
			// A session that parses it in the block (c's own statement,
			// parsed before, would keep its constants from then, as on
			// PostgreSQL).
			b := connect(t, srv.Addr())
			exec(t, b, "BEGIN")
			exec(t, b, tc.set)
			for i := 0; i < 2; i++ {
				if got := count(b); got != inBlock {
					t.Errorf("%s (%v) after %s, read %d: %s, want %s", sql, mode, tc.set, i, got, inBlock)
				}
			}
			exec(t, b, "COMMIT")
			b.Close(ctx)
			for i := 0; i < 4; i++ {
				c2 := connect(t, srv.Addr())
				if got := count(c2); got != outside {
					t.Errorf("%s (%v), another session after the block, %d: %s, want %s", sql, mode, i, got, outside)
				}
				if got := count(c); got != outside {
					t.Errorf("%s (%v), the same session after the block, %d: %s, want %s", sql, mode, i, got, outside)
				}
				if got := count(c2); got != outside {
					t.Errorf("%s (%v), another session after the block, again, %d: %s, want %s", sql, mode, i, got, outside)
				}
				c2.Close(ctx)
			}

			// A multi-shard write's rows, likewise.
			upd := fmt.Sprintf("UPDATE sbk SET ts = ts WHERE k > %d AND ts %s", -1-m*len(cases)-i, tc.cond)
			updated := func(conn *pgx.Conn) string {
				t.Helper()
				tag, err := conn.Exec(ctx, upd, mode)
				if err != nil {
					t.Fatalf("%s (%v): %v", upd, mode, err)
				}
				return fmt.Sprint(tag.RowsAffected())
			}
			if before {
				if got := updated(c); got != outside {
					t.Errorf("%s (%v), before the block: %s, want %s", upd, mode, got, outside)
				}
			}
			b = connect(t, srv.Addr())
			exec(t, b, "BEGIN")
			exec(t, b, tc.set)
			if got := updated(b); got != inBlock {
				t.Errorf("%s (%v) after %s: %s, want %s", upd, mode, tc.set, got, inBlock)
			}
			exec(t, b, "COMMIT")
			b.Close(ctx)
			for i := 0; i < 4; i++ {
				c2 := connect(t, srv.Addr())
				if got := updated(c2); got != outside {
					t.Errorf("%s (%v), another session after the block, %d: %s, want %s", upd, mode, i, got, outside)
				}
				c2.Close(ctx)
			}
		}
	}
}

// TestSetInBlockUserCodeRead: a multi-shard read that calls a user's
// function after a SET in the block is refused before it takes any
// connection, and the session stays free: adversary 162 found it run on
// the transaction's connection, which then pinned the session for good
// (every later multi-shard query refused, after COMMIT too).
func TestSetInBlockUserCodeRead(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(2))
	ctx := context.Background()
	c := connect(t, srv.Addr())
	freshTables(t, c, []string{"sbu"},
		"CREATE TABLE sbu (k int PRIMARY KEY)",
		"SELECT create_distributed_table('sbu', 'k')",
		"INSERT INTO sbu SELECT g FROM generate_series(1, 100) g")
	exec(t, c, "CREATE OR REPLACE FUNCTION sbu_twice(int) RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT $1 * 2'")
	t.Cleanup(func() { _, _ = c.Exec(context.Background(), "DROP FUNCTION IF EXISTS sbu_twice(int)") })
	for _, end := range []string{"COMMIT", "ROLLBACK"} {
		exec(t, c, "BEGIN")
		exec(t, c, "SET LOCAL TimeZone = 'Asia/Tokyo'")
		var sum int64
		err := c.QueryRow(ctx, "SELECT sum(sbu_twice(k)) FROM sbu").Scan(&sum)
		if sqlState(err) != "0A000" {
			t.Errorf("a user's function in a multi-shard read after SET LOCAL: %v (sum %d), want 0A000", err, sum)
		}
		exec(t, c, end)
		for _, q := range []string{"SELECT count(*)::text FROM sbu", "SELECT sum(sbu_twice(k))::text FROM sbu"} {
			if got := queryString(t, c, q); got != map[bool]string{true: "100", false: "10100"}[q == "SELECT count(*)::text FROM sbu"] {
				t.Errorf("after %s: %s: %s", end, q, got)
			}
		}
		exec(t, c, "BEGIN")
		if got := queryString(t, c, "SELECT sum(sbu_twice(k))::text FROM sbu"); got != "10100" {
			t.Errorf("after %s, a block without SET: %s, want 10100", end, got)
		}
		exec(t, c, "COMMIT")
	}
}
