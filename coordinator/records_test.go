package coordinator_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/coordinator/twophase"
	"github.com/pgfleet/pgfleet/internal/pgtest"
	"github.com/pgfleet/pgfleet/metadata"
)

// nodeID is the catalog's id of the worker at addr ("host:port").
func nodeID(t *testing.T, meta *pgx.Conn, addr string) int32 {
	t.Helper()
	port := addr[strings.LastIndexByte(addr, ':')+1:]
	return int32(atoi(t, queryString(t, meta, "SELECT nodeid::text FROM pgfleet.nodes WHERE port = "+port)))
}

// TestRecordedCommit: a transaction block that wrote on two workers
// commits the first worker's part in one phase, with a commit record in
// the same transaction, after preparing the second's: between the two,
// the first has no prepared transaction and holds the record, the second
// holds a prepared transaction named after it. A deferred constraint that
// fails at that commit rolls back the prepared part too, and the client
// gets the constraint's error; a recovery that records an abort before the
// coordinator's record is written wins, and the client gets 40001 with
// nothing committed.
func TestRecordedCommit(t *testing.T) {
	e := newRestartEnv(t, nil)
	w1, w2 := connect(t, e.cl.Servers[0].Addr()), connect(t, e.cl.Servers[1].Addr())
	// The first worker is the default node (NOTIFY runs there), which is
	// always prepared: the record is kept on the second.
	n2 := nodeID(t, w1, e.cl.Servers[1].Addr())
	c := connect(t, e.srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	value := func(k int) string { return queryString(t, c, "SELECT n FROM rr WHERE aid = $1", k) }
	prepared := func(w *pgx.Conn, base string) int {
		return atoi(t, queryString(t, w, "SELECT count(*) FROM pg_prepared_xacts WHERE starts_with(gid, $1)", base+"_"))
	}

	t.Run("commit", func(t *testing.T) {
		// The coordinator's first commit over the workers makes sure of
		// the records table, and records its own decision in the metadata
		// database (its transaction may not see the table yet).
		exec(t, c, "BEGIN")
		exec(t, c, "UPDATE rr SET n = n + 0 WHERE aid = $1", e.k1)
		exec(t, c, "UPDATE rr SET n = n + 0 WHERE aid = $1", e.k2)
		exec(t, c, "COMMIT")
		var seen []string
		ran := false
		e.srv.SetDecideHooks(nil, func(base string) {
			ran = true
			node, hash, ok := twophase.RecordOf(base)
			if !ok || node != n2 {
				seen = append(seen, fmt.Sprintf("base %s is not decided by a record on node %d", base, n2))
				return
			}
			if n := prepared(w1, base); n != 1 {
				seen = append(seen, fmt.Sprintf("%d prepared transactions on the first worker, want 1", n))
			}
			if n := prepared(w2, base); n != 0 {
				seen = append(seen, fmt.Sprintf("%d prepared transactions on the second worker", n))
			}
			var secret *string
			if err := w2.QueryRow(context.Background(), "SELECT secret FROM pgfleet_txn.commits WHERE h = $1", hash).Scan(&secret); err != nil {
				seen = append(seen, "the record: "+err.Error())
			} else if twophase.RecordDecision(hash, secret) != metadata.CommitDecision {
				seen = append(seen, "the record does not stand for a commit")
			}
		})
		defer e.srv.SetDecideHooks(nil, nil)
		exec(t, c, "BEGIN")
		exec(t, c, "UPDATE rr SET n = n + 1 WHERE aid = $1", e.k1)
		exec(t, c, "UPDATE rr SET n = n + 1 WHERE aid = $1", e.k2)
		exec(t, c, "COMMIT")
		if !ran {
			t.Error("COMMIT PREPARED was not reached")
		}
		if len(seen) > 0 {
			t.Errorf("between the commit record and COMMIT PREPARED: %v", seen)
		}
		if value(e.k1) != "101" || value(e.k2) != "101" {
			t.Errorf("after COMMIT: %s and %s, want 101 and 101", value(e.k1), value(e.k2))
		}
	})

	t.Run("the records table is pgfleet's own", func(t *testing.T) {
		exec(t, w1, twophase.RecordsDDL, simple) // as if the first worker kept records
		for _, sql := range []string{"SELECT create_distributed_table('pgfleet_txn.commits', 'h')", "SELECT create_reference_table('pgfleet_txn.commits')"} {
			if _, err := c.Exec(context.Background(), sql, simple); sqlState(err) != "0A000" {
				t.Errorf("%s: %s %v, want 0A000", sql, sqlState(err), err)
			}
		}
	})

	t.Run("deferred constraint fails", func(t *testing.T) {
		exec(t, c, "CREATE TABLE rdef (aid bigint PRIMARY KEY DEFERRABLE INITIALLY DEFERRED, v int)", simple)
		exec(t, c, "SELECT create_distributed_table('rdef', 'aid', colocate_with => 'rr')", simple)
		// On the second worker at the record's commit, on the first at its
		// PREPARE: either way nothing commits.
		for _, keys := range [][2]int{{e.k1, e.k2}, {e.k2, e.k1}} {
			write, dup := keys[0], keys[1]
			exec(t, c, "BEGIN")
			exec(t, c, "UPDATE rr SET n = n + 1 WHERE aid = $1", write)
			exec(t, c, "INSERT INTO rdef VALUES ($1, 1)", dup)
			exec(t, c, "INSERT INTO rdef VALUES ($1, 2)", dup)
			_, err := c.Exec(context.Background(), "COMMIT")
			if sqlState(err) != "23505" {
				t.Errorf("COMMIT with a deferred duplicate of %d: %s %v, want 23505", dup, sqlState(err), err)
			}
			if value(write) != "101" {
				t.Errorf("the other worker's write: n = %s, want 101 (rolled back)", value(write))
			}
			if n := queryString(t, c, "SELECT count(*) FROM rdef"); n != "0" {
				t.Errorf("%s rows in rdef, want 0", n)
			}
		}
	})

	t.Run("read only after the writes", func(t *testing.T) {
		// PostgreSQL commits it; the record could not be written in it.
		for _, set := range []string{"SET TRANSACTION READ ONLY", "SET LOCAL transaction_read_only = on"} {
			exec(t, c, "BEGIN")
			exec(t, c, "UPDATE rr SET n = n + 1 WHERE aid = $1", e.k1)
			exec(t, c, "UPDATE rr SET n = n + 1 WHERE aid = $1", e.k2)
			exec(t, c, set)
			if _, err := c.Exec(context.Background(), "COMMIT"); err != nil {
				t.Errorf("COMMIT after %s: %v", set, err)
			}
		}
		if value(e.k1) != "103" || value(e.k2) != "103" {
			t.Errorf("after two read-only commits: %s and %s, want 103 and 103", value(e.k1), value(e.k2))
		}
		exec(t, c, "UPDATE rr SET n = 101 WHERE aid IN ($1, $2)", e.k1, e.k2)
	})

	t.Run("the secret is in no statement text", func(t *testing.T) {
		// The record's commit waits in a deferred unique check behind
		// another transaction: meanwhile the worker shows its statements.
		other := connect(t, e.srv.Addr())
		exec(t, other, "BEGIN")
		exec(t, other, "INSERT INTO rdef VALUES ($1, 0)", e.k2)
		exec(t, c, "BEGIN")
		exec(t, c, "UPDATE rr SET n = n + 1 WHERE aid = $1", e.k1)
		exec(t, c, "INSERT INTO rdef VALUES ($1, 1)", e.k2)
		done := make(chan error, 1)
		go func() {
			_, err := c.Exec(context.Background(), "COMMIT")
			done <- err
		}()
		waiting := ""
		for i := 0; i < 200 && waiting == ""; i++ {
			time.Sleep(25 * time.Millisecond)
			waiting = queryString(t, w2, "SELECT coalesce(string_agg(query, ' | '), '') FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
		}
		texts := queryString(t, w2, "SELECT coalesce(string_agg(query, ' | '), '') FROM pg_stat_activity WHERE query LIKE '%record(%'")
		exec(t, other, "ROLLBACK")
		if err := <-done; err != nil {
			t.Errorf("COMMIT once the other transaction rolled back: %v", err)
		}
		if waiting != "COMMIT" {
			t.Errorf("statements waiting on the second worker: %q, want COMMIT", waiting)
		}
		if strings.Contains(texts, "record('") {
			t.Errorf("the record's secret is in pg_stat_activity: %s", texts)
		}
		if value(e.k1) != "102" || queryString(t, c, "SELECT v FROM rdef WHERE aid = $1", e.k2) != "1" {
			t.Errorf("after COMMIT: n = %s, want 102, and rdef's row", value(e.k1))
		}
		exec(t, c, "UPDATE rr SET n = 101 WHERE aid = $1", e.k1)
		exec(t, c, "DELETE FROM rdef")
	})

	t.Run("the records table dropped by hand", func(t *testing.T) {
		exec(t, w2, "DROP SCHEMA pgfleet_txn CASCADE")
		for i, want := range []string{"3F000", ""} {
			exec(t, c, "BEGIN")
			exec(t, c, "UPDATE rr SET n = n + 1 WHERE aid = $1", e.k1)
			exec(t, c, "UPDATE rr SET n = n + 1 WHERE aid = $1", e.k2)
			_, err := c.Exec(context.Background(), "COMMIT")
			if got := sqlState(err); got != want && !(i == 0 && got == "42883") {
				t.Errorf("COMMIT %d after the drop: %s %v, want %q", i+1, got, err, want)
			}
		}
		// The first rolled back on both workers, the second committed.
		if value(e.k1) != "102" || value(e.k2) != "102" {
			t.Errorf("after the drop: %s and %s, want 102 and 102", value(e.k1), value(e.k2))
		}
		exec(t, c, "UPDATE rr SET n = 101 WHERE aid IN ($1, $2)", e.k1, e.k2)
	})

	t.Run("the record's answer lost", func(t *testing.T) {
		// Settled from the record: it stands, so the block commits.
		lost := 0
		e.srv.SetDecideHooks(func(ctx context.Context, base string, err error) error {
			if err != nil {
				return err
			}
			lost++
			return fmt.Errorf("the answer was lost")
		}, nil)
		defer e.srv.SetDecideHooks(nil, nil)
		exec(t, c, "BEGIN")
		exec(t, c, "UPDATE rr SET n = n + 1 WHERE aid = $1", e.k1)
		exec(t, c, "UPDATE rr SET n = n + 1 WHERE aid = $1", e.k2)
		if _, err := c.Exec(context.Background(), "COMMIT"); err != nil || lost != 1 {
			t.Errorf("COMMIT whose record's answer was lost (%d times): %v", lost, err)
		}
		if value(e.k1) != "102" || value(e.k2) != "102" {
			t.Errorf("after COMMIT: %s and %s, want 102 and 102", value(e.k1), value(e.k2))
		}
		exec(t, c, "UPDATE rr SET n = 101 WHERE aid IN ($1, $2)", e.k1, e.k2)
	})

	t.Run("another coordinator finishes it", func(t *testing.T) {
		// The coordinator stops after the record: another's recovery
		// commits the prepared part from it, without waiting the grace.
		other := pgtest.Coordinator(t, e.cl, func(c *coordinator.Config) { c.RecoveryInterval = -1 })
		e.srv.SetDecideHooks(nil, func(base string) {
			time.Sleep(1100 * time.Millisecond) // recovery leaves a decided one to its coordinator for a second
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if c, a := other.RecoverPrepared(ctx, time.Hour); c != 1 || a != 0 {
				t.Errorf("the other coordinator's recovery committed %d and rolled back %d, want 1 and 0", c, a)
			}
		})
		defer e.srv.SetDecideHooks(nil, nil)
		exec(t, c, "BEGIN")
		exec(t, c, "UPDATE rr SET n = n + 1 WHERE aid = $1", e.k1)
		exec(t, c, "UPDATE rr SET n = n + 1 WHERE aid = $1", e.k2)
		if _, err := c.Exec(context.Background(), "COMMIT"); err != nil {
			t.Errorf("COMMIT finished by another coordinator: %v", err)
		}
		if value(e.k1) != "102" || value(e.k2) != "102" {
			t.Errorf("after COMMIT: %s and %s, want 102 and 102", value(e.k1), value(e.k2))
		}
		exec(t, c, "UPDATE rr SET n = 101 WHERE aid IN ($1, $2)", e.k1, e.k2)
	})

	t.Run("recovery records an abort first", func(t *testing.T) {
		other := pgtest.Coordinator(t, e.cl, func(c *coordinator.Config) { c.RecoveryInterval = -1 })
		ran := false
		e.srv.SetBeforeDecideHook(func(base string) {
			if ran {
				return
			}
			ran = true
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, a := other.RecoverPrepared(ctx, 0); a != 1 {
				t.Errorf("the other coordinator's recovery rolled back %d prepared transactions, want 1", a)
			}
		})
		defer e.srv.SetBeforeDecideHook(nil)
		exec(t, c, "BEGIN")
		exec(t, c, "UPDATE rr SET n = n + 1 WHERE aid = $1", e.k1)
		exec(t, c, "UPDATE rr SET n = n + 1 WHERE aid = $1", e.k2)
		_, err := c.Exec(context.Background(), "COMMIT")
		if sqlState(err) != "40001" {
			t.Errorf("COMMIT after recovery aborted the transaction: %s %v, want 40001", sqlState(err), err)
		}
		if !ran {
			t.Fatal("the hook did not run")
		}
		if value(e.k1) != "101" || value(e.k2) != "101" {
			t.Errorf("after the aborted COMMIT: %s and %s, want 101 and 101", value(e.k1), value(e.k2))
		}
	})
	if n := e.preparedLeft(t); n != 0 {
		t.Errorf("%d prepared transactions left", n)
	}
}

// TestMetadataCommitsSynchronously: the metadata database's sessions
// commit synchronously (decisions, catalog changes) although the test
// clusters' servers run with synchronous_commit off.
func TestMetadataCommitsSynchronously(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	if server := queryString(t, connect(t, cl.Servers[0].Addr()), "SHOW synchronous_commit"); server != "off" {
		t.Fatalf("the test cluster runs with synchronous_commit %s, want off (the case this test is about)", server)
	}
	if got, err := srv.MetadataSetting("synchronous_commit"); err != nil || got != "on" {
		t.Errorf("metadata sessions' synchronous_commit: %q %v, want on", got, err)
	}
}

// TestRecoverRecorded leaves prepared transactions on the second worker
// as a coordinator that died around its record on the first would, in a
// database of their own, and runs recovery rounds: the one whose record
// is there is committed at once; one whose record someone else wrote
// (without the secret) is rolled back; one without a record is left alone
// within the grace, then rolled back with an abort record that a commit
// record arriving late cannot beat.
func TestRecoverRecorded(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, func(c *coordinator.Config) { c.RecoveryInterval = -1 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conns := scratchDB(t, cl, fmt.Sprintf("pgfleet_records_%d", os.Getpid()))
	first, second := conns[0], conns[1]
	exec(t, first, twophase.RecordsDDL, pgx.QueryExecModeSimpleProtocol)
	n1 := nodeID(t, connect(t, cl.Servers[0].Addr()), cl.Servers[0].Addr())

	// prepare leaves the second worker's part of a group decided by a
	// record on the first prepared, inserting id.
	prepare := func(id int) twophase.Record {
		t.Helper()
		rec := twophase.NewRecord(n1)
		exec(t, second, fmt.Sprintf("BEGIN; INSERT INTO r VALUES (%d); PREPARE TRANSACTION '%s_2'", id, rec.Base()), pgx.QueryExecModeSimpleProtocol)
		return rec
	}
	// record commits id on the first worker with a record, as the last
	// part does (secret), or as someone without the secret might write
	// one (h and a wrong secret, as a superuser).
	record := func(id int, h, secret string) error {
		write := fmt.Sprintf("SELECT pgfleet_txn.record('%s')", secret)
		if h != "" {
			write = fmt.Sprintf("INSERT INTO pgfleet_txn.commits (h, secret) VALUES ('%s', '%s')", h, secret)
		}
		_, err := first.Exec(ctx, fmt.Sprintf("BEGIN; INSERT INTO r VALUES (%d); %s; COMMIT", id, write), pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			_, _ = first.Exec(ctx, "ROLLBACK")
		}
		return err
	}
	rows := func(c *pgx.Conn, id int) string {
		return queryString(t, c, "SELECT count(*) FROM r WHERE id = $1", id)
	}
	left := func(rec twophase.Record) string {
		return queryString(t, second, "SELECT count(*) FROM pg_prepared_xacts WHERE starts_with(gid, $1)", rec.Base()+"_")
	}

	committed := prepare(1)
	if err := record(1, "", committed.Secret); err != nil {
		t.Fatal(err)
	}
	forged := prepare(2)
	if err := record(2, forged.Hash, "not the secret"); err != nil {
		t.Fatal(err)
	}
	undecided := prepare(3)

	time.Sleep(1100 * time.Millisecond) // decided ones are left to their coordinator for a second
	if c, a := srv.RecoverPrepared(ctx, time.Hour); c != 1 || a != 1 {
		t.Errorf("recovery within the grace committed %d and rolled back %d, want 1 and 1", c, a)
	}
	if left(committed) != "0" || left(forged) != "0" || left(undecided) != "1" {
		t.Errorf("prepared transactions left: %s of the recorded one, %s of the forged one, %s of the undecided one; want 0, 0, 1",
			left(committed), left(forged), left(undecided))
	}
	if rows(second, 1) != "1" || rows(second, 2) != "0" {
		t.Errorf("the second worker has %s rows of the recorded one and %s of the forged one, want 1 and 0", rows(second, 1), rows(second, 2))
	}

	if _, a := srv.RecoverPrepared(ctx, 0); a != 1 {
		t.Errorf("recovery past the grace rolled back %d, want 1", a)
	}
	if left(undecided) != "0" || rows(second, 3) != "0" {
		t.Errorf("the undecided one: %s prepared left, %s rows; want 0 and 0", left(undecided), rows(second, 3))
	}
	if got := queryString(t, first, "SELECT coalesce(secret, 'NULL') FROM pgfleet_txn.commits WHERE h = $1", undecided.Hash); got != "NULL" {
		t.Errorf("the undecided one's record: %s, want an abort (NULL)", got)
	}
	// Its coordinator, waking up, cannot commit its part.
	if err := record(3, "", undecided.Secret); sqlState(err) != "23505" {
		t.Errorf("a commit record after recovery's abort: %s %v, want 23505", sqlState(err), err)
	}
	if rows(first, 3) != "0" {
		t.Errorf("the first worker has %s rows of the aborted one, want 0", rows(first, 3))
	}

	// A role without privileges can write a record only under the hash
	// of a secret it knows, and neither read nor write the table itself.
	role := fmt.Sprintf("pgfleet_records_role_%d", os.Getpid())
	exec(t, first, "DROP ROLE IF EXISTS "+role)
	exec(t, first, "CREATE ROLE "+role+" LOGIN")
	t.Cleanup(func() {
		_, _ = connect(t, cl.Servers[0].Addr()).Exec(context.Background(), "DROP ROLE IF EXISTS "+role)
	})
	rc, err := pgx.Connect(ctx, fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", role, cl.Servers[0].Addr(), first.Config().Database))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close(context.Background())
	mine := twophase.NewRecord(n1)
	for sql, want := range map[string]string{
		fmt.Sprintf("INSERT INTO pgfleet_txn.commits (h, secret) VALUES ('%s', 'x')", forged.Hash): "42501",
		"SELECT count(*) FROM pgfleet_txn.commits":                                                 "42501",
		fmt.Sprintf("SELECT pgfleet_txn.record('%s')", mine.Secret):                                "",
	} {
		if _, err := rc.Exec(ctx, sql); sqlState(err) != want {
			t.Errorf("as %s: %s: %s %v, want %q", role, sql, sqlState(err), err, want)
		}
	}
	if got := queryString(t, first, "SELECT h FROM pgfleet_txn.commits WHERE secret = $1", mine.Secret); got != mine.Hash {
		t.Errorf("the record written through the function has hash %s, want %s", got, mine.Hash)
	}

	// The record's transaction commits synchronously, whatever the
	// session's synchronous_commit (but a stricter one stays).
	for set, want := range map[string]string{"off": "on", "local": "local", "remote_apply": "remote_apply", "on": "on"} {
		tx, err := first.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		exec(t, tx.Conn(), "SET LOCAL synchronous_commit = "+set)
		exec(t, tx.Conn(), twophase.SyncCommitSQL(true))
		if got := queryString(t, tx.Conn(), "SHOW synchronous_commit"); got != want {
			t.Errorf("synchronous_commit %s: %s after SyncCommitSQL(true), want %s", set, got, want)
		}
		_ = tx.Rollback(ctx)
	}
}

// TestRecordFunctionReplaced: a records schema an older version made, with
// its LANGUAGE sql function, gets the current PL/pgSQL function from the
// next coordinator that decides by a record there, and commits across
// workers go on being recorded and committed.
func TestRecordFunctionReplaced(t *testing.T) {
	e := newRestartEnv(t, nil)
	w2 := connect(t, e.cl.Servers[1].Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	lang := func() string {
		return queryString(t, w2, "SELECT l.lanname::text FROM pg_proc f JOIN pg_language l ON l.oid = f.prolang WHERE f.oid = 'pgfleet_txn.record(text)'::regprocedure")
	}
	exec(t, w2, twophase.RecordsDDL, simple)
	exec(t, w2, `CREATE OR REPLACE FUNCTION pgfleet_txn.record(secret text) RETURNS void
	LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
	AS $$INSERT INTO pgfleet_txn.commits (h, secret)
		VALUES (pg_catalog.left(pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(secret, 'UTF8')), 'hex'), 32), secret)$$`, simple)
	if got := lang(); got != "sql" {
		t.Fatalf("the older function's language: %s", got)
	}
	c := connect(t, e.srv.Addr())
	for i := 0; i < 3; i++ {
		exec(t, c, "BEGIN")
		exec(t, c, "UPDATE rr SET n = n + 1 WHERE aid = $1", e.k1)
		exec(t, c, "UPDATE rr SET n = n + 1 WHERE aid = $1", e.k2)
		exec(t, c, "COMMIT")
	}
	if got := lang(); got != "plpgsql" {
		t.Errorf("after commits across workers the record function's language is %s, want plpgsql", got)
	}
	if got := queryString(t, w2, "SELECT count(*) FROM pgfleet_txn.commits"); atoi(t, got) < 2 {
		t.Errorf("%s commit records on the second worker, want at least 2 (the first commit decides in the metadata database)", got)
	}
	e.wantCommitted(t, c, "103") // three commits
}

// TestRecordsNotTrusted: a role that made schema pgfleet_txn itself (a
// table of that name with a trigger) before pgfleet did cannot have
// recovery run its code as the superuser: recovery neither reads nor
// writes such a table, and leaves the prepared transaction that names it
// alone.
func TestRecordsNotTrusted(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, func(c *coordinator.Config) { c.RecoveryInterval = -1 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conns := scratchDB(t, cl, fmt.Sprintf("pgfleet_untrusted_%d", os.Getpid()))
	first, second := conns[0], conns[1]
	db := first.Config().Database
	role := fmt.Sprintf("pgfleet_untrusted_role_%d", os.Getpid())
	exec(t, first, "DROP ROLE IF EXISTS "+role)
	exec(t, first, "CREATE ROLE "+role+" LOGIN")
	t.Cleanup(func() {
		_, _ = connect(t, cl.Servers[0].Addr()).Exec(context.Background(), "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
		_, _ = connect(t, cl.Servers[0].Addr()).Exec(context.Background(), "DROP ROLE IF EXISTS "+role)
	})
	exec(t, first, "GRANT CREATE ON DATABASE "+db+" TO "+role)
	exec(t, first, "CREATE TABLE ran (who text)")
	exec(t, first, "GRANT INSERT ON ran TO "+role)
	rc, err := pgx.Connect(ctx, fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", role, cl.Servers[0].Addr(), db))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close(context.Background())
	for _, sql := range []string{
		"CREATE SCHEMA pgfleet_txn",
		"CREATE TABLE pgfleet_txn.commits (h text PRIMARY KEY, secret text, recorded_at timestamptz DEFAULT now())",
		`CREATE FUNCTION pgfleet_txn.record(secret text) RETURNS void LANGUAGE sql AS $$ SELECT $$`,
		`CREATE FUNCTION pgfleet_txn.spy() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN INSERT INTO public.ran VALUES (current_user); RETURN NEW; END $$`,
		"CREATE TRIGGER spy BEFORE INSERT ON pgfleet_txn.commits FOR EACH ROW EXECUTE FUNCTION pgfleet_txn.spy()",
	} {
		exec(t, rc, sql, pgx.QueryExecModeSimpleProtocol)
	}
	n1 := nodeID(t, connect(t, cl.Servers[0].Addr()), cl.Servers[0].Addr())
	rec := twophase.NewRecord(n1)
	exec(t, second, "BEGIN; INSERT INTO r VALUES (5); PREPARE TRANSACTION '"+rec.Base()+"_2'", pgx.QueryExecModeSimpleProtocol)

	time.Sleep(1100 * time.Millisecond)
	if c, a := srv.RecoverPrepared(ctx, 0); c != 0 || a != 0 {
		t.Errorf("recovery resolved %d and %d prepared transactions from a table a role made, want none", c, a)
	}
	if got := queryString(t, first, "SELECT count(*) FROM ran"); got != "0" {
		t.Errorf("the role's trigger ran %s times during recovery", got)
	}
	if got := queryString(t, second, "SELECT count(*) FROM pg_prepared_xacts WHERE gid = $1", rec.Base()+"_2"); got != "1" {
		t.Errorf("%s prepared transactions left, want 1 (in doubt)", got)
	}
	if got := queryString(t, first, "SELECT rolsuper::text FROM pg_roles WHERE rolname = $1", role); got != "false" {
		t.Errorf("the role's rolsuper: %s", got)
	}
}

// TestOwnGIDRefused: a client cannot prepare, commit or roll back a
// prepared transaction in pgfleet's namespace, however it spells the id.
func TestOwnGIDRefused(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	for _, sql := range []string{
		"PREPARE TRANSACTION 'pgfleet_lx9_0123456789abcdef0123456789abcdef_1'",
		`PREPARE TRANSACTION E'\x70gfleet_tx_0123_1'`,
		"COMMIT PREPARED 'pgfleet_tx_0123_1'",
		"ROLLBACK PREPARED 'pgfleet_tx_0123_1'",
	} {
		if strings.HasPrefix(sql, "PREPARE") {
			exec(t, c, "BEGIN", simple)
			exec(t, c, "SELECT 1", simple)
		}
		_, err := c.Exec(context.Background(), sql, simple)
		if sqlState(err) != "42939" {
			t.Errorf("%s: %s %v, want 42939", sql, sqlState(err), err)
		}
		_, _ = c.Exec(context.Background(), "ROLLBACK", simple)
	}
	// Other ids reach the worker.
	if _, err := c.Exec(context.Background(), "COMMIT PREPARED 'no_such_gid'", simple); sqlState(err) != "42704" {
		t.Errorf("COMMIT PREPARED of another id: %s %v, want the worker's 42704", sqlState(err), err)
	}
	// With standard_conforming_strings off a backslash escapes: 'pgfleet\_x'
	// is pgfleet_x there. Refused then, and in a string that may turn it
	// off first.
	if _, err := c.Exec(context.Background(), `SET standard_conforming_strings = off; ROLLBACK PREPARED 'pgfleet\_x'`, simple); sqlState(err) != "0A000" {
		t.Errorf("ROLLBACK PREPARED with a backslash after turning standard_conforming_strings off: %s %v, want 0A000", sqlState(err), err)
	}
	exec(t, c, "SET standard_conforming_strings = off", simple)
	exec(t, c, "BEGIN", simple)
	exec(t, c, "SELECT 1", simple)
	if _, err := c.Exec(context.Background(), `PREPARE TRANSACTION 'pgfleet\_x'`, simple); sqlState(err) != "0A000" {
		t.Errorf("PREPARE TRANSACTION with a backslash, standard_conforming_strings off: %s %v, want 0A000", sqlState(err), err)
	}
	_, _ = c.Exec(context.Background(), "ROLLBACK", simple)
	exec(t, c, "RESET standard_conforming_strings", simple)
}

// TestRecoveryResolvesInCatalog: recovery, as the superuser, resolves its
// functions in pg_catalog only: a role's make_interval(text) in schema
// public of the database it lists prepared transactions from is not
// called (it would run with the superuser's rights).
func TestRecoveryResolvesInCatalog(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, func(c *coordinator.Config) { c.RecoveryInterval = -1 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := connect(t, cl.Servers[0].Addr())
	role := fmt.Sprintf("pgfleet_path_role_%d", os.Getpid())
	for _, sql := range []string{
		"DROP FUNCTION IF EXISTS public.make_interval(text)",
		"DROP FUNCTION IF EXISTS public.pgfleet_path_log()",
		"DROP TABLE IF EXISTS public.pgfleet_path_ran",
		"DROP ROLE IF EXISTS " + role,
		"CREATE ROLE " + role + " LOGIN",
		"CREATE TABLE public.pgfleet_path_ran (who text)",
		"GRANT INSERT ON public.pgfleet_path_ran TO " + role,
		"GRANT CREATE ON SCHEMA public TO " + role,
	} {
		exec(t, admin, sql)
	}
	t.Cleanup(func() {
		for _, sql := range []string{"DROP FUNCTION IF EXISTS public.make_interval(text)", "DROP FUNCTION IF EXISTS public.pgfleet_path_log()",
			"DROP TABLE IF EXISTS public.pgfleet_path_ran",
			"REVOKE CREATE ON SCHEMA public FROM " + role, "DROP ROLE IF EXISTS " + role} {
			_, _ = connect(t, cl.Servers[0].Addr()).Exec(context.Background(), sql)
		}
	})
	rc, err := pgx.Connect(ctx, fmt.Sprintf("postgres://%s@%s/postgres?sslmode=disable", role, cl.Servers[0].Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close(context.Background())
	// (Immutable, so that it runs when the statement is planned, even
	// with no row; the insert is in a volatile function it calls.)
	exec(t, rc, `CREATE FUNCTION public.pgfleet_path_log() RETURNS void LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO public.pgfleet_path_ran VALUES (current_user); END $$`, pgx.QueryExecModeSimpleProtocol)
	exec(t, rc, `CREATE FUNCTION public.make_interval(secs text) RETURNS interval LANGUAGE plpgsql IMMUTABLE AS $$
		BEGIN PERFORM public.pgfleet_path_log(); RETURN pg_catalog.make_interval(secs => secs::float8); END $$`,
		pgx.QueryExecModeSimpleProtocol)
	srv.RecoverPrepared(ctx, time.Hour)
	if got := queryString(t, admin, "SELECT coalesce(string_agg(who, ' '), '') FROM public.pgfleet_path_ran"); got != "" {
		t.Errorf("a role's make_interval ran during recovery, as %q", got)
	}
}

// TestRecoveryIgnoresDatabaseRole: a database whose default role is
// another (ALTER DATABASE ... SET role, which its owner may run) does not
// make recovery act as that role there: it reads the commit record as
// the superuser and commits the prepared part.
func TestRecoveryIgnoresDatabaseRole(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, func(c *coordinator.Config) { c.RecoveryInterval = -1 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conns := scratchDB(t, cl, fmt.Sprintf("pgfleet_dbrole_%d", os.Getpid()))
	first, second := conns[0], conns[1]
	db := first.Config().Database
	role := fmt.Sprintf("pgfleet_dbrole_role_%d", os.Getpid())
	admin := connect(t, cl.Servers[0].Addr())
	exec(t, admin, "DROP ROLE IF EXISTS "+role)
	exec(t, admin, "CREATE ROLE "+role)
	exec(t, first, twophase.RecordsDDL, pgx.QueryExecModeSimpleProtocol)
	exec(t, admin, "ALTER DATABASE "+db+" SET role = "+role)
	t.Cleanup(func() {
		_, _ = connect(t, cl.Servers[0].Addr()).Exec(context.Background(), "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
		_, _ = connect(t, cl.Servers[0].Addr()).Exec(context.Background(), "DROP ROLE IF EXISTS "+role)
	})
	n1 := nodeID(t, admin, cl.Servers[0].Addr())
	rec := twophase.NewRecord(n1)
	exec(t, second, "BEGIN; INSERT INTO r VALUES (7); PREPARE TRANSACTION '"+rec.Base()+"_2'", pgx.QueryExecModeSimpleProtocol)
	exec(t, first, "SELECT pgfleet_txn.record($1)", rec.Secret)
	time.Sleep(1100 * time.Millisecond)
	if c, a := srv.RecoverPrepared(ctx, time.Hour); c != 1 || a != 0 {
		t.Errorf("recovery committed %d and rolled back %d, want 1 and 0", c, a)
	}
	if got := queryString(t, second, "SELECT count(*) FROM r WHERE id = 7"); got != "1" {
		t.Errorf("%s rows of the recorded transaction on the second worker, want 1", got)
	}
}

// TestRecordsDefaultPrivileges: default privileges that give a role the
// tables the superuser makes do not reach the commit records table (with
// them the role could read the secrets, or add a trigger that the record's
// insert runs as the superuser); a privilege granted on it later makes the
// schema untrusted, and commits across workers decide in the metadata
// database instead.
func TestRecordsDefaultPrivileges(t *testing.T) {
	e := newRestartEnv(t, nil)
	meta, w2 := connect(t, e.cl.Servers[0].Addr()), connect(t, e.cl.Servers[1].Addr())
	role := fmt.Sprintf("pgfleet_dp_%d", os.Getpid())
	for _, w := range []*pgx.Conn{meta, w2} {
		exec(t, w, "CREATE ROLE "+role)
	}
	exec(t, w2, "ALTER DEFAULT PRIVILEGES FOR ROLE postgres GRANT ALL ON TABLES TO "+role)
	records := func() int { return atoi(t, queryString(t, w2, "SELECT count(*) FROM pgfleet_txn.commits")) }
	decisions := func() int { return atoi(t, queryString(t, meta, "SELECT count(*) FROM pgfleet.transaction_decisions")) }
	commit := func(c *pgx.Conn) {
		exec(t, c, "BEGIN")
		exec(t, c, "UPDATE rr SET n = n + 1 WHERE aid = $1", e.k1)
		exec(t, c, "UPDATE rr SET n = n + 1 WHERE aid = $1", e.k2)
		exec(t, c, "COMMIT")
	}
	c := connect(t, e.srv.Addr())
	for range 3 {
		commit(c) // the first makes the table and decides in the metadata database
	}
	if got := queryString(t, w2, "SELECT has_table_privilege($1, 'pgfleet_txn.commits', 'SELECT, INSERT, TRIGGER')::text", role); got != "false" {
		t.Errorf("the role has privileges on the commit records table (default privileges): %s", got)
	}
	if n := records(); n < 2 {
		t.Fatalf("%d commit records, want at least 2", n)
	}

	exec(t, w2, "GRANT SELECT ON pgfleet_txn.commits TO "+role)
	later := pgtest.Coordinator(t, e.cl, func(c *coordinator.Config) { c.PoolSize, c.RecoveryInterval = 4, -1 })
	lc := connect(t, later.Addr())
	r0, d0 := records(), decisions()
	commit(lc)
	if r, d := records(), decisions(); r != r0 || d != d0+1 {
		t.Errorf("with a role's privilege on the table: %d new commit records and %d new decisions in the metadata database, want 0 and 1", r-r0, d-d0)
	}
	e.wantCommitted(t, lc, "104")
}
