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
