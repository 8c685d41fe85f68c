package coordinator_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestAdvisoryLockAside: a session holding session advisory locks (a
// migration tool's: Rails' pg_try_advisory_lock, golang-migrate's and
// Prisma's pg_advisory_lock) runs what any session runs while it holds
// them (multi-shard reads and writes, DDL and create_distributed_table in
// a block, blocks over both workers), as on PostgreSQL; the locks exclude
// other sessions until it releases them or ends; a transaction lock in a
// block that begins with it is the session's own (no wait on its session
// lock); in a block already on another connection an advisory lock
// function is refused (0A000); a session whose lock connection was
// terminated ends (FATAL), as one whose backend was.
func TestAdvisoryLockAside(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	setup := connect(t, srv.Addr())
	accounts(t, setup, "aside_acc")
	k := keyOff(t, setup, "aside_acc", cl.Servers[0].Addr())
	for i, extended := range []bool{false, true} {
		key := 7100 + i
		exec(t, setup, "UPDATE aside_acc SET n = 0", simple)
		lockKey := strconv.Itoa(key)
		c := connect(t, srv.Addr())
		r := txnRunner{t: t, c: c, extended: extended}
		lockSQL := "SELECT pg_try_advisory_lock(" + lockKey + ")::text"
		if got := queryString(t, c, lockSQL); got != "true" {
			t.Fatalf("%s: lock: %s", r.name(), got)
		}
		held := func(when string, want string) {
			t.Helper()
			if got := tryLockOf(t, srv.Addr(), key); got != want {
				t.Errorf("%s, %s: another session's pg_try_advisory_lock: %s, want %s", r.name(), when, got, want)
			}
		}
		held("after the lock", "false")
		// A migration's statements.
		tbl := "aside_new" + strconv.Itoa(i)
		_, _ = setup.Exec(ctx, "DROP TABLE IF EXISTS "+tbl, simple)
		t.Cleanup(func() {
			_, _ = setup.Exec(ctx, "SELECT undistribute_table('"+tbl+"')", simple)
			_, _ = setup.Exec(ctx, "DROP TABLE IF EXISTS "+tbl, simple)
		})
		r.must("BEGIN")
		r.must("CREATE TABLE " + tbl + " (id bigint PRIMARY KEY, v int)")
		r.must("SELECT create_distributed_table('" + tbl + "', 'id')")
		r.must("ALTER TABLE aside_acc ADD COLUMN m" + lockKey + " int DEFAULT 1")
		r.must("UPDATE aside_acc SET n = n + 1")
		r.must("COMMIT")
		if got := queryString(t, c, "SELECT sum(n + m"+lockKey+")::text FROM aside_acc"); got != "200" {
			t.Errorf("%s: sum after the migration's block: %s, want 200", r.name(), got)
		}
		r.must("BEGIN")
		r.must("UPDATE aside_acc SET n = n + 1 WHERE aid = $1", 1)
		r.must("UPDATE aside_acc SET n = n + 1 WHERE aid = $1", k)
		r.must("COMMIT")
		if got := queryString(t, c, "SELECT count(*)::text FROM aside_acc WHERE n = 2"); got != "2" && workerOfAid(t, setup, "aside_acc", 1) != workerOfAid(t, setup, "aside_acc", k) {
			t.Errorf("%s: rows of the block over both workers: %s, want 2", r.name(), got)
		}
		held("after the statements", "false")
		// A transaction lock in a block that begins with it: the
		// session's own key is granted at once.
		r.must("BEGIN")
		if got := queryString(t, c, "SELECT pg_try_advisory_xact_lock("+lockKey+")::text"); got != "true" {
			t.Errorf("%s: pg_try_advisory_xact_lock of the session's own key: %s, want true", r.name(), got)
		}
		r.must("COMMIT")
		// In a block already on another connection: refused.
		r.must("BEGIN")
		r.must("UPDATE aside_acc SET n = n + 1 WHERE aid = $1", k)
		if _, err := r.run("SELECT pg_advisory_unlock(" + lockKey + ")"); sqlState(err) != "0A000" {
			t.Errorf("%s: an advisory function in a block on another connection: %v, want 0A000", r.name(), err)
		}
		r.run("ROLLBACK")
		held("after the refusal", "false")
		if got := queryString(t, c, "SELECT pg_advisory_unlock("+lockKey+")::text"); got != "true" {
			t.Errorf("%s: unlock: %s, want true", r.name(), got)
		}
		held("after the unlock", "true")
		// The session is free: a multi-shard read, and the lock again,
		// which ends with the session.
		if got := queryString(t, c, "SELECT count(*)::text FROM aside_acc"); got != "100" {
			t.Errorf("%s: count after the unlock: %s", r.name(), got)
		}
		// (held's own session took the lock and closed: its end follows
		// the close, as a PostgreSQL backend's exit does: a bounded wait.)
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			got := queryString(t, c, lockSQL)
			if got == "true" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: lock again: %s for 10 s", r.name(), got)
			}
		}
		if got := queryString(t, c, "SELECT count(*)::text FROM aside_acc"); got != "100" {
			t.Errorf("%s: count under the lock: %s", r.name(), got)
		}
		held("locked again", "false")
		c.Close(ctx)
		// (The session's end and its backend's exit follow the client's
		// close, as a PostgreSQL backend's exit does: a bounded wait.)
		freed(t, srv.Addr(), key, r.name()+", after the session ended")
	}

	// The lock's connection terminated while set aside: the session ends
	// at its next statement, as a PostgreSQL session whose backend was
	// terminated does.
	c := connect(t, srv.Addr())
	if got := queryString(t, c, "SELECT pg_advisory_lock(7200)::text", simple); got != "" {
		t.Fatalf("lock: %q", got)
	}
	if got := queryString(t, c, "SELECT count(*)::text FROM aside_acc", simple); got != "100" {
		t.Fatalf("count: %s", got)
	}
	w := connect(t, cl.Servers[0].Addr())
	exec(t, w, "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND objid = 7200", simple)
	for deadline := time.Now().Add(10 * time.Second); queryString(t, w, "SELECT count(*)::text FROM pg_locks WHERE locktype = 'advisory' AND objid = 7200", simple) != "0"; {
		if time.Now().After(deadline) {
			t.Fatal("the terminated backend kept its lock for 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var n int
	err := c.QueryRow(ctx, "SELECT count(*)::int FROM aside_acc", simple).Scan(&n)
	if err == nil || c.PgConn().IsClosed() == false && sqlState(err) != "57P01" {
		t.Errorf("after the lock's connection was terminated: %d, %v; want the session ended (57P01)", n, err)
	}
	freed(t, srv.Addr(), 7200, "the terminated session's lock")
}

// freed waits up to 10 s for another session's pg_try_advisory_lock of
// key to succeed.
func freed(t *testing.T, addr string, key int, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got := tryLockOf(t, addr, key)
		if got == "true" {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: another session's pg_try_advisory_lock: %s for 10 s, want true", what, got)
			return
		}
	}
}

// TestAdvisoryLockAsideDiscardAll: DISCARD ALL releases the session's
// advisory locks, set aside or not, as PostgreSQL's does.
func TestAdvisoryLockAsideDiscardAll(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		c := connect(t, srv.Addr())
		exec(t, c, "SELECT pg_advisory_lock(7300)", mode)
		exec(t, c, "SELECT 1", mode)
		if got := tryLockOf(t, srv.Addr(), 7300); got != "false" {
			t.Fatalf("%v: the lock is not held: %s", mode, got)
		}
		exec(t, c, "DISCARD ALL", mode)
		if got := tryLockOf(t, srv.Addr(), 7300); got != "true" {
			t.Errorf("%v: after DISCARD ALL another session's try: %s, want true", mode, got)
		}
		c.Close(context.Background())
	}
}

// TestAdvisoryLockAsideRound2: what adversary 149 found. A session sees
// its own locks in pg_locks; one pinned to another connection since its
// locks went aside (a temporary table made in a block) still releases
// them, takes more, and DISCARD ALL releases them; idle_session_timeout
// does not end the locks' connection while the session works elsewhere.
func TestAdvisoryLockAsideRound2(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	ctx := context.Background()
	setup := connect(t, srv.Addr())
	accounts(t, setup, "aside2_acc")
	onDefault := keyOn(t, setup, "aside2_acc", cl.Servers[0].Addr())
	for i, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		key := 7400 + 10*i
		c := connect(t, srv.Addr())
		exec(t, c, "SET idle_session_timeout = '1s'", mode)
		exec(t, c, "SELECT pg_advisory_lock($1)", mode, key)
		if got := queryString(t, c, "SELECT count(*)::text FROM aside2_acc", mode); got != "100" {
			t.Fatalf("%v: count: %s", mode, got)
		}
		mine := "SELECT count(*)::text FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
		if got := queryString(t, c, mine, mode); got != "1" {
			t.Errorf("%v: the session's own advisory locks in pg_locks: %s, want 1", mode, got)
		}
		// idle_session_timeout (set before the lock): the session is
		// busy elsewhere.
		exec(t, c, "SELECT pg_sleep(1.5)", mode)
		if got := queryString(t, c, "SELECT count(*)::text FROM aside2_acc", mode); got != "100" {
			t.Errorf("%v: count after idle_session_timeout elapsed on the locks' connection: %s", mode, got)
		}
		if got := tryLockOf(t, srv.Addr(), key); got != "false" {
			t.Errorf("%v: the lock after idle_session_timeout elapsed: another session's try %s, want false", mode, got)
		}
		exec(t, c, "RESET idle_session_timeout", mode)
		// Pinned to another connection: a temporary table made in a
		// block on the default worker.
		exec(t, c, "BEGIN", mode)
		exec(t, c, "UPDATE aside2_acc SET n = n + 1 WHERE aid = $1", mode, onDefault)
		exec(t, c, "CREATE TEMP TABLE aside2_tmp (x int)", mode)
		exec(t, c, "COMMIT", mode)
		exec(t, c, "INSERT INTO aside2_tmp VALUES (1)", mode)
		// Taking another lock there is refused; so is a release in
		// the extended protocol (the statements after it in its batch
		// would run on the locks' connection: adversary 150).
		if _, err := c.Exec(ctx, "SELECT pg_advisory_lock($1)", mode, key+1); sqlState(err) != "0A000" {
			t.Errorf("%v: a lock taken while pinned elsewhere: %v, want 0A000", mode, err)
		}
		if mode != pgx.QueryExecModeSimpleProtocol {
			if _, err := c.Exec(ctx, "SELECT pg_advisory_unlock($1)", mode, key); sqlState(err) != "0A000" {
				t.Errorf("%v: an extended-protocol unlock while pinned elsewhere: %v, want 0A000", mode, err)
			}
		}
		// A simple Query of unlock calls releases them.
		if got := queryString(t, c, "SELECT pg_advisory_unlock("+strconv.Itoa(key)+")::text", pgx.QueryExecModeSimpleProtocol); got != "true" {
			t.Errorf("%v: unlock while pinned elsewhere: %s, want true", mode, got)
		}
		if got := tryLockOf(t, srv.Addr(), key); got != "true" {
			t.Errorf("%v: after the unlock another session's try %s, want true", mode, got)
		}
		if got := queryString(t, c, "SELECT count(*)::text FROM aside2_tmp", mode); got != "1" {
			t.Errorf("%v: the temporary table after the unlock: %s rows, want 1", mode, got)
		}
		c.Close(ctx)

		// DISCARD ALL releases them too (a simple Query).
		c = connect(t, srv.Addr())
		exec(t, c, "SELECT pg_advisory_lock($1)", mode, key+1)
		exec(t, c, "SELECT count(*) FROM aside2_acc", mode)
		exec(t, c, "BEGIN", mode)
		exec(t, c, "UPDATE aside2_acc SET n = n + 1 WHERE aid = $1", mode, onDefault)
		exec(t, c, "CREATE TEMP TABLE aside2_tmp (x int)", mode)
		exec(t, c, "COMMIT", mode)
		if got := tryLockOf(t, srv.Addr(), key+1); got != "false" {
			t.Errorf("%v: the lock before DISCARD ALL: another session's try %s, want false", mode, got)
		}
		exec(t, c, "DISCARD ALL", pgx.QueryExecModeSimpleProtocol)
		if got := tryLockOf(t, srv.Addr(), key+1); got != "true" {
			t.Errorf("%v: after DISCARD ALL another session's try %s, want true", mode, got)
		}
		if _, err := c.Exec(ctx, "SELECT count(*) FROM aside2_tmp", pgx.QueryExecModeSimpleProtocol); sqlState(err) != "42P01" {
			t.Errorf("%v: the temporary table after DISCARD ALL: %v, want 42P01", mode, err)
		}
		c.Close(ctx)
	}
}

// TestAdvisoryLockAsideRound3: adversary 150 on a session pinned to
// another connection since its locks went aside. Only a simple Query of
// unlock calls alone runs on the locks' connection; in an
// extended-protocol batch it is refused, and nothing after it runs on the
// locks' connection (a DELETE there emptied the permanent table a
// temporary one shadowed); a lock call is refused rather than read
// another key or ignore a lock_timeout set_config set.
func TestAdvisoryLockAsideRound3(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	setup := connect(t, srv.Addr())
	accounts(t, setup, "aside3_acc")
	onDefault := keyOn(t, setup, "aside3_acc", cl.Servers[0].Addr())
	exec(t, setup, "DROP TABLE IF EXISTS aside3_keep", simple)
	exec(t, setup, "CREATE TABLE aside3_keep (a int)", simple)
	exec(t, setup, "INSERT INTO aside3_keep VALUES (1), (2), (3)", simple)
	t.Cleanup(func() { _, _ = setup.Exec(ctx, "DROP TABLE IF EXISTS aside3_keep", simple) })
	pinnedElsewhere := func(key int) *pgx.Conn {
		c := connect(t, srv.Addr())
		exec(t, c, "SELECT pg_advisory_lock($1)", simple, key)
		exec(t, c, "SELECT count(*) FROM aside3_acc", simple)
		exec(t, c, "BEGIN", simple)
		exec(t, c, "UPDATE aside3_acc SET n = n WHERE aid = $1", simple, onDefault)
		exec(t, c, "CREATE TEMP TABLE aside3_keep (a int)", simple)
		exec(t, c, "INSERT INTO aside3_keep VALUES (100)", simple)
		exec(t, c, "COMMIT", simple)
		return c
	}
	keep := func(when string) {
		t.Helper()
		if got := queryString(t, setup, "SELECT string_agg(a::text, ',' ORDER BY a) FROM aside3_keep", simple); got != "1,2,3" {
			t.Errorf("%s: public.aside3_keep has %s, want 1,2,3", when, got)
		}
	}

	// A batch of the extended protocol: the lock call refused, the
	// DELETE after it not run.
	c := pinnedElsewhere(7500)
	b := &pgx.Batch{}
	b.Queue("SELECT pg_try_advisory_lock(7501)")
	b.Queue("DELETE FROM aside3_keep")
	err := c.SendBatch(ctx, b).Close()
	if sqlState(err) != "0A000" {
		t.Errorf("an advisory lock call in a batch while pinned elsewhere: %v, want 0A000", err)
	}
	keep("after the batch")
	if got := queryString(t, c, "SELECT count(*)::text FROM aside3_keep", simple); got != "1" {
		t.Errorf("the session's temporary table after the batch: %s rows, want 1", got)
	}
	// A simple Query of its own runs on the locks' connection; the
	// statements after it on the pinned one.
	if got := queryString(t, c, "SELECT pg_advisory_unlock(7500)::text", simple); got != "true" {
		t.Errorf("a simple Query of an unlock while pinned elsewhere: %s, want true", got)
	}
	exec(t, c, "DELETE FROM aside3_keep", simple)
	keep("after the DELETE of the temporary table")
	if got := queryString(t, c, "SELECT count(*)::text FROM aside3_keep", simple); got != "0" {
		t.Errorf("the session's temporary table after its DELETE: %s rows, want 0", got)
	}
	if got := tryLockOf(t, srv.Addr(), 7500); got != "true" {
		t.Errorf("the lock released while pinned elsewhere: another session's try %s, want true", got)
	}
	c.Close(ctx)

	// A key read from the catalog (a table's oid, through search_path
	// and the temporary schema): refused, not another key's unlock
	// (adversary 151: the unlock of 'kt'::regclass released the
	// permanent table's lock where a temporary kt shadowed it).
	c = connect(t, srv.Addr())
	oid := queryString(t, setup, "SELECT 'aside3_keep'::regclass::oid::bigint::text", simple)
	exec(t, c, "SELECT pg_advisory_lock('aside3_keep'::regclass::oid::bigint)", simple)
	exec(t, c, "SELECT count(*) FROM aside3_acc", simple)
	exec(t, c, "BEGIN", simple)
	exec(t, c, "UPDATE aside3_acc SET n = n WHERE aid = $1", simple, onDefault)
	exec(t, c, "CREATE TEMP TABLE aside3_keep (a int)", simple)
	exec(t, c, "COMMIT", simple)
	var released string
	err = c.QueryRow(ctx, "SELECT pg_advisory_unlock('aside3_keep'::regclass::oid::bigint)::text", simple).Scan(&released)
	if err == nil && released != "false" || err != nil && sqlState(err) != "0A000" {
		t.Errorf("unlock of a key read through a shadowed name: %q, %v; want false (PostgreSQL's) or 0A000", released, err)
	}
	key, _ := strconv.Atoi(oid)
	if got := tryLockOf(t, srv.Addr(), key); got != "false" {
		t.Errorf("the permanent table's oid lock after that unlock: another session's try %s, want false (still held)", got)
	}
	c.Close(ctx)

	// Settings set_config changed: refused, not another key's lock.
	c = pinnedElsewhere(7510)
	exec(t, c, "SET app.k = '1'", simple)
	exec(t, c, "SELECT set_config('app.k', '7511', false)", simple)
	_, err = c.Exec(ctx, "SELECT pg_advisory_lock(current_setting('app.k')::bigint)", simple)
	switch {
	case err == nil:
		if got := tryLockOf(t, srv.Addr(), 7511); got != "false" {
			t.Errorf("pg_advisory_lock of app.k after set_config: key 7511 free (%s): another key was locked", got)
		}
	case sqlState(err) != "0A000":
		t.Errorf("pg_advisory_lock of app.k after set_config: %v, want the lock or 0A000", err)
	}
	// A lock_timeout set_config set: the wait ends as PostgreSQL's (55P03),
	// or the call is refused, never a wait past it.
	holder := connect(t, srv.Addr())
	exec(t, holder, "SELECT pg_advisory_lock(7512)", simple)
	exec(t, c, "SELECT set_config('lock_timeout', '300ms', false)", simple)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = c.Exec(wctx, "SELECT pg_advisory_lock(7512)", simple)
	cancel()
	if s := sqlState(err); s != "55P03" && s != "0A000" {
		t.Errorf("pg_advisory_lock under a set_config lock_timeout: %v, want 55P03 or 0A000", err)
	}
	holder.Close(ctx)
	c.Close(ctx)
}

// TestAdvisoryLockAsideDeadlock: a session whose advisory lock is set
// aside waits for a row another session holds, which waits for that lock:
// on PostgreSQL one session, so its deadlock detector answers 40P01; here
// the statement and the lock are two backends, which PostgreSQL's
// detector cannot join, and pgfleet's does (it waited for good).
func TestAdvisoryLockAsideDeadlock(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	ctx := context.Background()
	setup := connect(t, srv.Addr())
	accounts(t, setup, "asidedl_acc")
	k := keyOn(t, setup, "asidedl_acc", cl.Servers[0].Addr())
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		a, b := connect(t, srv.Addr()), connect(t, srv.Addr())
		exec(t, a, "SELECT pg_advisory_lock(7700)", mode)
		exec(t, a, "SELECT count(*) FROM asidedl_acc", mode)
		exec(t, b, "BEGIN", mode)
		exec(t, b, "SELECT n FROM asidedl_acc WHERE aid = $1 FOR UPDATE", mode, k)
		type res struct {
			who string
			err error
		}
		out := make(chan res, 2)
		go func() {
			_, err := a.Exec(ctx, "UPDATE asidedl_acc SET n = n + 1 WHERE aid = $1", mode, k)
			out <- res{"a", err}
		}()
		time.Sleep(300 * time.Millisecond) // (a waits for b's row)
		go func() {
			_, err := b.Exec(ctx, "SELECT pg_advisory_xact_lock(7700)", mode)
			out <- res{"b", err}
		}()
		var first res
		select {
		case first = <-out:
		case <-time.After(20 * time.Second):
			t.Fatalf("%v: a deadlock through a session's advisory lock set aside: no answer in 20 s", mode)
		}
		if sqlState(first.err) != "40P01" {
			t.Errorf("%v: %s answered first: %v, want 40P01", mode, first.who, first.err)
		}
		// The victim's side gives way: a releases its lock (b then has
		// it), or b ends its block (a then updates).
		if first.who == "a" {
			exec(t, a, "SELECT pg_advisory_unlock(7700)", pgx.QueryExecModeSimpleProtocol)
		} else {
			_, _ = b.Exec(ctx, "ROLLBACK", pgx.QueryExecModeSimpleProtocol)
		}
		select {
		case second := <-out:
			if second.err != nil {
				t.Errorf("%v: %s after the victim gave way: %v", mode, second.who, second.err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%v: the survivor still waits 20 s after the victim gave way", mode)
		}
		_, _ = b.Exec(ctx, "ROLLBACK", pgx.QueryExecModeSimpleProtocol)
		a.Close(ctx)
		b.Close(ctx)
	}
}

// keyOn is the first key of accounts table name on worker addr.
func keyOn(t *testing.T, c *pgx.Conn, name, addr string) int {
	t.Helper()
	for k := 1; k <= 100; k++ {
		if workerOfAid(t, c, name, k) == addr {
			return k
		}
	}
	t.Fatalf("no key of %s on worker %s", name, addr)
	return 0
}
