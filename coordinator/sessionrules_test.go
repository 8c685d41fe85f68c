package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// accounts makes table name (aid bigint PRIMARY KEY, n int) with rows
// 1..100 of n = 0 through c, distributed over 4 shards of two workers,
// and drops it when the test ends.
func accounts(t *testing.T, c *pgx.Conn, name string) {
	t.Helper()
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	drop := func() {
		_, _ = c.Exec(ctx, "SELECT undistribute_table('"+name+"')", simple)
		_, _ = c.Exec(ctx, "DROP TABLE IF EXISTS "+name, simple)
	}
	drop()
	t.Cleanup(drop)
	exec(t, c, "CREATE TABLE "+name+" (aid bigint PRIMARY KEY, n int)", simple)
	exec(t, c, "INSERT INTO "+name+" SELECT g, 0 FROM generate_series(1, 100) g", simple)
	exec(t, c, "SELECT create_distributed_table('"+name+"', 'aid', shard_count => 4)", simple)
}

// keyOff is the first key of accounts table name not on worker addr.
func keyOff(t *testing.T, c *pgx.Conn, name, addr string) int {
	t.Helper()
	for k := 1; k <= 100; k++ {
		if workerOfAid(t, c, name, k) != addr {
			return k
		}
	}
	t.Fatalf("every key of %s on worker %s", name, addr)
	return 0
}

// TestAdvisoryLocksOneNode: advisory locks exclude each other whatever
// worker the statement or block that takes them runs on (adversary 143:
// a session lock taken in a block on the second worker did not exclude
// one taken through the first).
func TestAdvisoryLocksOneNode(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(8))
	ctx := context.Background()
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	accounts(t, c, "adv_acc")
	k := keyOff(t, c, "adv_acc", cl.Servers[0].Addr())
	tryLock := func(fn string, key int) string {
		t.Helper()
		b := connect(t, srv.Addr())
		defer b.Close(ctx)
		return queryString(t, b, "SELECT "+fn+"("+strconv.Itoa(key)+")::text", simple)
	}
	for m, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeCacheStatement} {
		for i, tc := range []struct {
			take, try string
			block     bool
		}{
			{"SELECT pg_advisory_xact_lock($1)", "pg_try_advisory_xact_lock", true},
			{"SELECT pg_advisory_lock($1)", "pg_try_advisory_lock", true},
			{"SELECT pg_advisory_lock($1) FROM adv_acc WHERE aid = $2", "pg_try_advisory_lock", false},
			{"SELECT pg_advisory_xact_lock($1) FROM adv_acc WHERE aid = $2", "pg_try_advisory_xact_lock", true},
			// Taken on the default worker, then the block goes on elsewhere.
			{"SELECT pg_advisory_lock($1)", "pg_try_advisory_lock", false},
			// Attribute notation calls the function too (adversary 145).
			{"SELECT (($1)::bigint).pg_advisory_xact_lock", "pg_try_advisory_xact_lock", true},
			{"SELECT (($1)::bigint).pg_advisory_lock", "pg_try_advisory_lock", true},
		} {
			key := 9100 + 10*m + i
			a := connect(t, srv.Addr())
			if tc.block {
				exec(t, a, "BEGIN", mode)
				exec(t, a, "UPDATE adv_acc SET n = n + 1 WHERE aid = $1", mode, k)
			}
			args := []any{mode, key}
			if strings.Contains(tc.take, "$2") {
				args = append(args, k)
			}
			_, err := a.Exec(ctx, tc.take, args...)
			var pe *pgconn.PgError
			switch {
			case err == nil:
				if got := tryLock(tc.try, key); got != "false" {
					t.Errorf("%q (block: %v) held it; another session's %s(%d): %s, want false", tc.take, tc.block, tc.try, key, got)
				}
			case errors.As(err, &pe) && pe.Code == "0A000" && pe.Hint != "" && tc.take != "SELECT pg_advisory_xact_lock($1)":
				// Refused where it would be taken on the second worker.
				if got := tryLock(tc.try, key); got != "true" {
					t.Errorf("%q was refused, but the lock is held: %s", tc.take, got)
				}
			default:
				t.Errorf("%v %q (block: %v): %v", mode, tc.take, tc.block, err)
			}
			a.Close(ctx)
		}
	}
}

// TestAdvisoryLocksInUserCode: a function that takes an advisory lock,
// called in a statement over a distributed table, is refused as a direct
// call is (adversary 145: the lock was taken on the shard's worker, where
// no other session's is, and excluded nothing); called alone it runs on
// the default worker and excludes.
func TestAdvisoryLocksInUserCode(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(8))
	ctx := context.Background()
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	accounts(t, c, "advf_acc")
	k := keyOff(t, c, "advf_acc", cl.Servers[0].Addr())
	funcs := []string{
		"CREATE FUNCTION advf_lk(k bigint) RETURNS bool LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_advisory_lock(k); RETURN true; END $$",
		"CREATE FUNCTION advf_sql(k bigint) RETURNS bool LANGUAGE sql AS 'SELECT pg_try_advisory_lock(k)'",
		"CREATE FUNCTION advf_wrap(k bigint) RETURNS bool LANGUAGE plpgsql AS $$ BEGIN RETURN advf_lk(k); END $$",
		"CREATE FUNCTION advf_deff() RETURNS int LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_advisory_lock(9399); RETURN 1; END $$",
		"CREATE TABLE advf_def (aid bigint PRIMARY KEY, v int DEFAULT advf_deff())",
		"SELECT create_distributed_table('advf_def', 'aid', shard_count => 4)",
	}
	drop := func() {
		_, _ = c.Exec(ctx, "SELECT undistribute_table('advf_def')", simple)
		_, _ = c.Exec(ctx, "DROP TABLE IF EXISTS advf_def", simple)
		_, _ = c.Exec(ctx, "DROP FUNCTION IF EXISTS advf_deff()", simple)
		_, _ = c.Exec(ctx, "DROP FUNCTION IF EXISTS advf_blk(bigint)", simple)
		for _, f := range []string{"advf_wrap", "advf_lk", "advf_sql"} {
			_, _ = c.Exec(ctx, "DROP FUNCTION IF EXISTS "+f+"(bigint)", simple)
		}
	}
	drop()
	t.Cleanup(drop)
	for _, f := range funcs {
		exec(t, c, f, simple)
	}
	// A column default that takes one, through a row on either worker.
	for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeCacheStatement} {
		for _, key := range []int{1, k} {
			_, err := c.Exec(ctx, "INSERT INTO advf_def (aid) VALUES ($1)", mode, key)
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "0A000" || pe.Hint == "" {
				t.Errorf("%v: INSERT whose column default takes an advisory lock, key %d: %v, want 0A000 with a hint", mode, key, err)
			}
		}
	}
	if got := tryLockOf(t, srv.Addr(), 9399); got != "true" {
		t.Errorf("the column default's INSERT was refused, but the lock is held: %s", got)
	}
	// Code made or changed in the same block, which the committed catalog
	// the refusal reads does not show yet (adversary 146).
	for m, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeCacheStatement} {
		key := 9390 + m
		a := connect(t, srv.Addr())
		exec(t, a, "BEGIN", simple)
		exec(t, a, "CREATE FUNCTION advf_blk(k bigint) RETURNS bool LANGUAGE sql AS 'SELECT pg_try_advisory_lock(k)'", simple)
		_, err := a.Exec(ctx, "SELECT advf_blk($1) FROM advf_acc WHERE aid = $2", mode, key, k)
		if sqlState(err) != "0A000" {
			t.Errorf("%v: a function made in the block, over a distributed table: %v, want 0A000", mode, err)
		}
		exec(t, a, "ROLLBACK", simple)
		exec(t, a, "BEGIN", simple)
		exec(t, a, "ALTER TABLE advf_acc ALTER COLUMN n SET DEFAULT advf_deff()", simple)
		if _, err := a.Exec(ctx, "INSERT INTO advf_acc (aid) VALUES ($1)", mode, 1000+k); sqlState(err) != "0A000" {
			t.Errorf("%v: an INSERT after the block changed the column default: %v, want 0A000", mode, err)
		}
		exec(t, a, "ROLLBACK", simple)
		if got := tryLockOf(t, srv.Addr(), key); got != "true" {
			t.Errorf("%v: the block's statement was refused, but its lock is held: %s", mode, got)
		}
		a.Close(ctx)
	}
	// After such DDL, statements over no table still run, wherever the
	// block's connection is (adversary 148: SELECT 1 was refused).
	a1 := connect(t, srv.Addr())
	exec(t, a1, "BEGIN", simple)
	exec(t, a1, "UPDATE advf_acc SET n = n + 1 WHERE aid = $1", simple, k)
	exec(t, a1, "CREATE FUNCTION advf_blk(k bigint) RETURNS bool LANGUAGE sql AS 'SELECT pg_try_advisory_lock(k)'", simple)
	for _, q := range []string{"SELECT 1", "SELECT now()"} {
		for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeCacheStatement} {
			if _, err := a1.Exec(ctx, q, mode); err != nil {
				t.Fatalf("%v: %s after the block made code taking advisory locks: %v", mode, q, err)
			}
		}
	}
	exec(t, a1, "ROLLBACK", simple)
	a1.Close(ctx)
	// A COMMENT that only mentions one refuses nothing (adversary 147).
	a0 := connect(t, srv.Addr())
	exec(t, a0, "BEGIN", simple)
	exec(t, a0, "COMMENT ON TABLE advf_acc IS 'we use pg_advisory_lock elsewhere'", simple)
	exec(t, a0, "UPDATE advf_acc SET n = n + 1 WHERE aid = $1", simple, k)
	exec(t, a0, "ROLLBACK", simple)
	a0.Close(ctx)
	// Nor does such a block's DDL keep the next transaction from its rows.
	a := connect(t, srv.Addr())
	exec(t, a, "BEGIN", simple)
	exec(t, a, "CREATE FUNCTION advf_blk(k bigint) RETURNS bool LANGUAGE sql AS 'SELECT pg_try_advisory_lock(k)'", simple)
	exec(t, a, "ROLLBACK", simple)
	exec(t, a, "SELECT n FROM advf_acc WHERE aid = $1", simple, k)
	a.Close(ctx)
	tryLock := func(key int) string {
		t.Helper()
		return tryLockOf(t, srv.Addr(), key)
	}
	for m, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeCacheStatement} {
		for i, fn := range []string{"advf_lk", "advf_sql", "advf_wrap"} {
			key := 9300 + 10*m + i
			a := connect(t, srv.Addr())
			_, err := a.Exec(ctx, "SELECT "+fn+"($1) FROM advf_acc WHERE aid = $2", mode, key, k)
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "0A000" || pe.Hint == "" {
				t.Errorf("%v: %s over a distributed table's row on the second worker: %v, want 0A000 with a hint", mode, fn, err)
			}
			if got := tryLock(key); got != "true" {
				t.Errorf("%v: %s was refused, but the lock is held: %s", mode, fn, got)
			}
			// Alone it runs on the default worker, where other sessions'
			// locks are.
			if got := queryString(t, a, "SELECT "+fn+"($1)::text", mode, key+5); got != "true" {
				t.Errorf("%v: %s alone: %s, want true", mode, fn, got)
			}
			if got := tryLock(key + 5); got != "false" {
				t.Errorf("%v: %s alone took the lock; another session's pg_try_advisory_lock: %s, want false", mode, fn, got)
			}
			a.Close(ctx)
		}
	}
}

// TestAdvisoryUnlockUnpins: a session whose only pin is its session
// advisory locks reaches every worker while it holds one (the locks'
// connection set aside: advisorylock.go), and gives that connection back
// once it released the last (a migration
// tool's lock on a pooled connection an application then uses: it was
// kept there for good); a refused lock in a block on another worker pins
// nothing (adversary 145: a refused Parse left the session pinned).
func TestAdvisoryUnlockUnpins(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(8))
	ctx := context.Background()
	c := connect(t, srv.Addr())
	accounts(t, c, "unp_acc")
	k := keyOff(t, c, "unp_acc", cl.Servers[0].Addr())
	read := func(a *pgx.Conn, mode pgx.QueryExecMode) error {
		_, err := a.Exec(ctx, "SELECT n FROM unp_acc WHERE aid = $1", mode, k)
		return err
	}
	spans := func(t *testing.T, a *pgx.Conn, mode pgx.QueryExecMode) {
		t.Helper()
		exec(t, a, "BEGIN", mode)
		exec(t, a, "UPDATE unp_acc SET n = n + 1 WHERE aid = $1", mode, 1)
		exec(t, a, "UPDATE unp_acc SET n = n + 1 WHERE aid = $1", mode, k)
		exec(t, a, "COMMIT", mode)
	}
	for m, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		k1, k2 := 9500+10*m, 9501+10*m
		a := connect(t, srv.Addr())
		exec(t, a, "SELECT pg_advisory_lock($1)", mode, k1)
		exec(t, a, "SELECT pg_advisory_lock($1)", mode, k2)
		exec(t, a, "SET work_mem = '3MB'", mode)
		// Prepared and run while pinned, run again once free.
		if got := queryString(t, a, "SELECT current_setting('work_mem') || n FROM unp_acc WHERE aid = $1", mode, 1); !strings.HasPrefix(got, "3MB") {
			t.Fatalf("%v: read while pinned: %s", mode, got)
		}
		// The locks' connection set aside, the session reaches every
		// worker with its settings while it holds them (it was refused:
		// 0A000).
		if got := queryString(t, a, "SELECT current_setting('work_mem') || n FROM unp_acc WHERE aid = $1", mode, k); !strings.HasPrefix(got, "3MB") {
			t.Fatalf("%v: a read on the second worker while holding a session lock: %s", mode, got)
		}
		exec(t, a, "SELECT pg_advisory_unlock($1)", mode, k1)
		if err := read(a, mode); err != nil {
			t.Fatalf("%v: a read on the second worker while holding one of two locks: %v", mode, err)
		}
		if got := tryLockOf(t, srv.Addr(), k2); got != "false" {
			t.Fatalf("%v: another session's try of the lock held: %s", mode, got)
		}
		exec(t, a, "SELECT pg_advisory_unlock($1)", mode, k2)
		if err := read(a, mode); err != nil {
			t.Fatalf("%v: a read on the second worker after the last unlock: %v", mode, err)
		}
		for _, key := range []int{1, k} {
			if got := queryString(t, a, "SELECT current_setting('work_mem') || n FROM unp_acc WHERE aid = $1", mode, key); !strings.HasPrefix(got, "3MB") {
				t.Fatalf("%v: the session's setting after the unlock, key %d: %s", mode, key, got)
			}
		}
		spans(t, a, mode)
		if got := tryLockOf(t, srv.Addr(), k2); got != "true" {
			t.Fatalf("%v: another session's try of the released lock: %s", mode, got)
		}

		// A migration under the lock: DDL and pgfleet's own functions
		// (adversary 146: create_distributed_table kept it pinned).
		exec(t, a, "SELECT pg_advisory_lock($1)", mode, k1)
		exec(t, a, "DROP TABLE IF EXISTS unp_new", pgx.QueryExecModeSimpleProtocol)
		exec(t, a, "CREATE TABLE unp_new (id int PRIMARY KEY)", pgx.QueryExecModeSimpleProtocol)
		exec(t, a, "SELECT create_distributed_table('unp_new', 'id', shard_count => 4)", pgx.QueryExecModeSimpleProtocol)
		exec(t, a, "SELECT pg_advisory_unlock($1)", mode, k1)
		if err := read(a, mode); err != nil {
			t.Fatalf("%v: a read on the second worker after a migration under the lock: %v", mode, err)
		}
		exec(t, a, "INSERT INTO unp_new SELECT generate_series(1, 20)", pgx.QueryExecModeSimpleProtocol)
		exec(t, a, "DROP TABLE unp_new", pgx.QueryExecModeSimpleProtocol)

		// Something else pinning beside the lock keeps the session pinned.
		exec(t, a, "SELECT pg_advisory_lock($1)", mode, k1)
		exec(t, a, "SELECT set_config('work_mem', '5MB', false)", mode)
		exec(t, a, "SELECT pg_advisory_unlock($1)", mode, k1)
		if err := read(a, mode); sqlState(err) != "0A000" {
			t.Fatalf("%v: a read on the second worker after set_config and the unlock: %v, want 0A000", mode, err)
		}
		a.Close(ctx)

		// A try that fails takes nothing, and one that succeeds is
		// released: each time the session is free again, the statements
		// prepared (and cached by pgx) or not (adversary 146: the second
		// run of a cached try left the session pinned).
		holder := connect(t, srv.Addr())
		exec(t, holder, "SELECT pg_advisory_lock($1)", mode, k1)
		a = connect(t, srv.Addr())
		for i := 0; i < 3; i++ {
			if got := queryString(t, a, "SELECT pg_try_advisory_lock($1)::text", mode, k1); got != "false" {
				t.Fatalf("%v: try %d of a lock another session holds: %s", mode, i, got)
			}
			if err := read(a, mode); err != nil {
				t.Fatalf("%v: a read on the second worker after failed try %d: %v", mode, i, err)
			}
			if got := queryString(t, a, "SELECT pg_try_advisory_lock($1)::text", mode, k2); got != "true" {
				t.Fatalf("%v: try %d of a free lock: %s", mode, i, got)
			}
			if got := queryString(t, a, "SELECT pg_advisory_unlock($1)::text", mode, k2); got != "true" {
				t.Fatalf("%v: unlock %d: %s", mode, i, got)
			}
			if err := read(a, mode); err != nil {
				t.Fatalf("%v: a read on the second worker after unlock %d: %v", mode, i, err)
			}
		}
		a.Close(ctx)
		holder.Close(ctx)

		// Nor in a block over both workers, current on the default one:
		// the lock's connection would go back to the pool at its end
		// (adversary 147: the next client of the pool held it).
		a = connect(t, srv.Addr())
		exec(t, a, "BEGIN", mode)
		exec(t, a, "UPDATE unp_acc SET n = n + 1 WHERE aid = $1", mode, k)
		exec(t, a, "UPDATE unp_acc SET n = n + 1 WHERE aid = $1", mode, 1)
		if _, err := a.Exec(ctx, "SELECT pg_advisory_lock($1)", mode, k1); sqlState(err) != "0A000" {
			t.Fatalf("%v: a session lock in a block over both workers: %v, want 0A000", mode, err)
		}
		exec(t, a, "ROLLBACK", mode)
		if got := tryLockOf(t, srv.Addr(), k1); got != "true" {
			t.Fatalf("%v: another session's try after the refused lock: %s", mode, got)
		}
		spans(t, a, mode)
		a.Close(ctx)

		// One a DO block takes in a block over both workers stays the
		// session's after COMMIT or ROLLBACK, as on PostgreSQL (adversary
		// 148: it went with the block's connections, closed, and the
		// client's unlock found none).
		for _, end := range []string{"COMMIT", "ROLLBACK"} {
			a = connect(t, srv.Addr())
			exec(t, a, "BEGIN", mode)
			exec(t, a, "UPDATE unp_acc SET n = n + 1 WHERE aid = $1", mode, k)
			exec(t, a, "UPDATE unp_acc SET n = n + 1 WHERE aid = $1", mode, 1)
			exec(t, a, "DO $$ BEGIN PERFORM pg_advisory_lock("+strconv.Itoa(k1)+"); END $$", pgx.QueryExecModeSimpleProtocol)
			exec(t, a, end, mode)
			if got := tryLockOf(t, srv.Addr(), k1); got != "false" {
				t.Fatalf("%v, %s: another session's try of the lock the DO block took: %s, want false", mode, end, got)
			}
			if got := queryString(t, a, "SELECT pg_advisory_unlock($1)::text", mode, k1); got != "true" {
				t.Fatalf("%v, %s: the session's unlock: %s, want true", mode, end, got)
			}
			a.Close(ctx)
		}

		// A session lock refused in a block on the second worker pins
		// nothing.
		a = connect(t, srv.Addr())
		exec(t, a, "BEGIN", mode)
		exec(t, a, "UPDATE unp_acc SET n = n + 1 WHERE aid = $1", mode, k)
		if _, err := a.Exec(ctx, "SELECT pg_advisory_lock($1)", mode, k1); sqlState(err) != "0A000" {
			t.Fatalf("%v: a session lock in a block on the second worker: %v, want 0A000", mode, err)
		}
		exec(t, a, "ROLLBACK", mode)
		spans(t, a, mode)
		a.Close(ctx)
	}
}

// tryLockOf is another session's pg_try_advisory_lock(key) through addr;
// its session ends at once, releasing what it took.
func tryLockOf(t *testing.T, addr string, key int) string {
	t.Helper()
	b := connect(t, addr)
	defer b.Close(context.Background())
	return queryString(t, b, "SELECT pg_try_advisory_lock("+strconv.Itoa(key)+")::text", pgx.QueryExecModeSimpleProtocol)
}

// TestListenOneNode: a LISTEN hears the NOTIFYs of the worker it runs on;
// every session's notifications go through the default worker, so a
// LISTEN in a block on another worker, which heard nothing, is refused
// (adversary 143), and one made before it hears them.
func TestListenOneNode(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(8))
	ctx := context.Background()
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	accounts(t, c, "lsn_acc")
	k := keyOff(t, c, "lsn_acc", cl.Servers[0].Addr())
	for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeCacheStatement} {
		a := connect(t, srv.Addr())
		exec(t, a, "BEGIN", mode)
		exec(t, a, "UPDATE lsn_acc SET n = n + 1 WHERE aid = $1", mode, k)
		_, err := a.Exec(ctx, "LISTEN lsn_ch", mode)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "0A000" || pe.Hint == "" {
			t.Errorf("%v: LISTEN in a block on the second worker: %v, want 0A000 with a hint", mode, err)
		}
		exec(t, a, "ROLLBACK", mode)

		// LISTEN first, then the block on the other worker: it hears.
		exec(t, a, "LISTEN lsn_ch", mode)
		b := connect(t, srv.Addr())
		exec(t, b, "NOTIFY lsn_ch, 'hello'", simple)
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		n, err := a.WaitForNotification(wctx)
		cancel()
		if err != nil || n.Payload != "hello" {
			t.Errorf("%v: notification: %+v, %v", mode, n, err)
		}
		a.Close(ctx)
		b.Close(ctx)
	}
}

// TestOthersStatementTimeout: a client that set no statement_timeout never
// sees one, although the pooled connections it gets come from clients
// with a 1 ms one (adversary 143: the previous client's timer canceled the
// settings script of the next, which got 57014 "cannot apply session
// settings"). Load-dependent: the adversary's 24 clients ran into it a few
// times a minute, in transactions over both workers as here.
func TestOthersStatementTimeout(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(2))
	ctx := context.Background()
	c := connect(t, srv.Addr())
	accounts(t, c, "ost_acc")
	const clients = 20
	end := time.Now().Add(8 * time.Second)
	errs := make(chan error, clients)
	for i := 0; i < clients; i++ {
		timed := i%2 == 1
		go func() {
			c := connect(t, srv.Addr())
			defer c.Close(ctx)
			if timed {
				if _, err := c.Exec(ctx, "SET statement_timeout = '1ms'"); err != nil {
					errs <- err
					return
				}
			}
			for k := 0; time.Now().Before(end); k++ {
				base := int64(i)*1_000_000 + int64(k)*3
				var err error
				for j, q := range []string{"BEGIN", "INSERT INTO ost_acc VALUES ($1, 0)", "INSERT INTO ost_acc VALUES ($1, 0)", "INSERT INTO ost_acc VALUES ($1, 0)", "COMMIT"} {
					var args []any
					if strings.Contains(q, "$1") {
						args = []any{1000 + base + int64(j)}
					}
					if _, e := c.Exec(ctx, q, args...); e != nil && err == nil {
						err = e
					}
				}
				if err != nil && !timed {
					errs <- fmt.Errorf("a client without a statement_timeout: %w", err)
					return
				}
				if err != nil {
					_, _ = c.Exec(ctx, "ROLLBACK")
				}
			}
			errs <- nil
		}()
	}
	for i := 0; i < clients; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestIdleInTransactionTimeoutAcrossWorkers: a block that outlived the
// session's idle_in_transaction_session_timeout on the first worker, whose
// next statement goes to the other, is ended with PostgreSQL's FATAL 25P03,
// not 08006 "outcome unknown" (adversary 143), and rolled back.
func TestIdleInTransactionTimeoutAcrossWorkers(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(8))
	ctx := context.Background()
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	accounts(t, c, "iit_acc")
	k1 := 1
	k2 := keyOff(t, c, "iit_acc", workerOfAid(t, c, "iit_acc", k1))
	a := connect(t, srv.Addr())
	defer a.Close(ctx)
	exec(t, a, "SET idle_in_transaction_session_timeout = '100ms'", simple)
	exec(t, a, "BEGIN", simple)
	exec(t, a, "UPDATE iit_acc SET n = n + 1 WHERE aid = $1", simple, k1)
	time.Sleep(400 * time.Millisecond)
	_, err := a.Exec(ctx, "UPDATE iit_acc SET n = n + 1 WHERE aid = $1", simple, k2)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "25P03" || pe.Severity != "FATAL" {
		t.Fatalf("the block's statement after the timeout: %v, want FATAL 25P03", err)
	}
	if got := queryString(t, c, "SELECT sum(n)::text FROM iit_acc", simple); got != "0" {
		t.Errorf("sum after the timed-out block: %s, want 0", got)
	}
}
