package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestSetConfigLocal: a statement of set_config(name, value, true) calls
// in a transaction block (PostgREST's start of every request: search_path,
// role and request settings; a tenant for row-level security) is followed
// as the SET LOCALs it makes. Multi-shard reads in the block run under it
// on every worker, unqualified names resolve under its search_path, and
// the session is not pinned after the block (it was pinned for good, and
// every later multi-shard query refused; custom names made multi-shard
// reads in the block refused). In every pgx mode, with the names and
// values as parameters or literals.
func TestSetConfigLocal(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(2))
	ctx := context.Background()
	setup := connect(t, srv.Addr())
	for _, s := range cl.Servers {
		// (Roles are each worker's: CREATE ROLE through the
		// coordinator reaches the first only.)
		d := connect(t, s.Addr())
		exec(t, d, "DO $$BEGIN CREATE ROLE slc_reader NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END$$")
	}
	freshTables(t, setup, []string{"slc", "slc_s2.slc", "slc_s3.slc3"},
		"CREATE TABLE slc (k int PRIMARY KEY, tenant text)",
		"SELECT create_distributed_table('slc', 'k')",
		"INSERT INTO slc SELECT g, CASE WHEN g <= 10 THEN 'u1' ELSE 'u2' END FROM generate_series(1, 100) g",
		"GRANT SELECT ON slc TO slc_reader",
		"CREATE SCHEMA IF NOT EXISTS slc_s2",
		"CREATE TABLE slc_s2.slc (k int)",
		"INSERT INTO slc_s2.slc VALUES (1), (2), (3)",
		"GRANT USAGE ON SCHEMA slc_s2 TO slc_reader",
		"GRANT SELECT ON slc_s2.slc TO slc_reader",
		"CREATE SCHEMA IF NOT EXISTS slc_s3",
		"CREATE TABLE slc_s3.slc3 (k int PRIMARY KEY)",
		"SELECT create_distributed_table('slc_s3.slc3', 'k')",
		"INSERT INTO slc_s3.slc3 SELECT generate_series(1, 50)")
	if len(cl.Servers) < 2 {
		t.Fatalf("the shared cluster has %d workers: the test needs reads over two", len(cl.Servers))
	}

	// What PostgreSQL says of the placeholder after the block: SET LOCAL
	// leaves it defined, empty.
	direct := connect(t, cl.Servers[0].Addr())
	exec(t, direct, "BEGIN")
	exec(t, direct, "SELECT set_config('slc.probe', 'x', true)")
	exec(t, direct, "COMMIT")
	afterBlock := queryString(t, direct, "SELECT coalesce(current_setting('slc.probe', true), '<null>')")

	// The tenant's rows where every shard reads the block's role and
	// tenant: 10 of 100 when all of them do.
	tenantRows := "SELECT count(*)::text FROM slc WHERE tenant = current_setting('app.slc_tenant') AND current_user = 'slc_reader'"
	modes := []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement,
		pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec}
	for _, mode := range modes {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			c := connMode(t, pgtest.URL(srv.Addr()), mode)
			check := func(what, sql, want string, args ...any) {
				t.Helper()
				if got := queryString(t, c, sql, args...); got != want {
					t.Errorf("%s: %s, want %s", what, got, want)
				}
			}
			for round := 0; round < 2; round++ { // (the second on statements pgx keeps)
				exec(t, c, "BEGIN")
				exec(t, c, "SELECT set_config('search_path', $1, true), set_config('role', $2, true), set_config('app.slc_tenant', $3, true)",
					"public", "slc_reader", "u1")
				check("a multi-shard read under the block's role and tenant", tenantRows, "10")
				check("the role on the default node", "SELECT current_user::text", "slc_reader")
				exec(t, c, "SELECT pg_catalog.set_config('app.slc_tenant', 'u2', true)")
				check("a second set_config", tenantRows, "90")
				exec(t, c, "COMMIT")
				check("the role after COMMIT", "SELECT current_user::text", "postgres")
				check("a multi-shard read after COMMIT (the session is not pinned)",
					"SELECT count(*)::text FROM slc WHERE current_user = 'postgres' AND coalesce(current_setting('app.slc_tenant', true), '') = ''", "100")
				check("the placeholder after COMMIT", "SELECT coalesce(current_setting('app.slc_tenant', true), '<null>')", afterBlock)

				// search_path: unqualified names resolve under it as
				// under SET LOCAL search_path, where the coordinator plans
				// them as public's only when they resolve there: a
				// distributed table of another schema, and a local table
				// before a distributed one, are refused (never public.slc's
				// rows for slc_s2.slc's).
				exec(t, c, "BEGIN")
				exec(t, c, "SELECT set_config('search_path', $1, true)", "slc_s3, public")
				check("slc3 qualified under the block's search_path", "SELECT count(*)::text FROM slc_s3.slc3", "50")
				check("public.slc under the block's search_path", "SELECT count(*)::text FROM slc", "100")
				exec(t, c, "ROLLBACK")
				for _, q := range []struct{ path, sql, want string }{
					{"slc_s3, public", "SELECT count(*)::text FROM slc3", "50"},
					{"slc_s2, public", "SELECT count(*)::text FROM slc", "3"},
				} {
					for _, set := range []string{"SET LOCAL search_path = " + q.path, "SELECT set_config('search_path', '" + q.path + "', true)"} {
						exec(t, c, "BEGIN")
						exec(t, c, set)
						var n string
						err := c.QueryRow(ctx, q.sql).Scan(&n)
						if err == nil && n != q.want || err != nil && sqlState(err) != "0A000" {
							t.Errorf("%s after %s: %q, %v; want %s, or 0A000", q.sql, set, n, err, q.want)
						}
						exec(t, c, "ROLLBACK")
					}
				}
				if _, err := c.Exec(ctx, "SELECT count(*) FROM slc3"); sqlState(err) != "42P01" {
					t.Errorf("slc3 after ROLLBACK: %v, want 42P01", err)
				}

				// A name given as a parameter (sqlx's begin_with).
				exec(t, c, "BEGIN")
				exec(t, c, "SELECT set_config($1, $2, true)", "app.slc_tenant", "u1")
				check("a name given as a parameter", "SELECT count(*)::text FROM slc WHERE tenant = current_setting('app.slc_tenant')", "10")
				exec(t, c, "COMMIT")

				// ROLLBACK TO SAVEPOINT undoes a set_config as a SET
				// LOCAL: the same answer, or the same refusal.
				var outcome []string
				for _, set := range []string{"SET LOCAL app.slc_tenant = 'u2'", "SELECT set_config('app.slc_tenant', 'u2', true)"} {
					exec(t, c, "BEGIN")
					exec(t, c, "SELECT set_config('app.slc_tenant', 'u1', true)")
					exec(t, c, "SAVEPOINT a")
					exec(t, c, set)
					exec(t, c, "ROLLBACK TO SAVEPOINT a")
					var n string
					err := c.QueryRow(ctx, "SELECT count(*)::text FROM slc WHERE tenant = current_setting('app.slc_tenant')").Scan(&n)
					if err == nil && n != "10" || err != nil && sqlState(err) != "0A000" {
						t.Errorf("after %s and ROLLBACK TO: %q, %v; want 10, or 0A000", set, n, err)
					}
					outcome = append(outcome, n+sqlState(err))
					exec(t, c, "ROLLBACK")
				}
				if outcome[0] != outcome[1] {
					t.Errorf("ROLLBACK TO after SET LOCAL: %s; after set_config: %s", outcome[0], outcome[1])
				}
			}
			// Another session, which set nothing, sees nothing of it on
			// the connections the reads used.
			othersRead(t, srv.Addr(), "SELECT count(*)::text FROM slc WHERE current_user = 'postgres' AND current_setting('search_path') = '\"$user\", public' AND coalesce(current_setting('app.slc_tenant', true), '') = ''", "100")
		})
	}
}

// TestSetConfigLocalSpanningAndBatch: set_config(..., true) in a block
// that already spans two workers reaches the other worker's connection
// when the block goes back to it, and in a pgx batch (one pipeline, one
// Sync) a multi-shard read after it reads under it on every shard, as
// after SET LOCAL.
func TestSetConfigLocalSpanningAndBatch(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(2))
	ctx := context.Background()
	c := connect(t, srv.Addr())
	k1, k2 := spanningTable(t, c, "slcspan")
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec} {
		exec(t, c, "BEGIN", mode)
		exec(t, c, "UPDATE slcspan SET n = n + 1 WHERE aid = $1", mode, k1)
		exec(t, c, "UPDATE slcspan SET n = n + 1 WHERE aid = $1", mode, k2)
		exec(t, c, "SELECT set_config('app.slc_mark', $1, true)", mode, "m")
		for _, k := range []int{k1, k2} {
			if got := queryString(t, c, "SELECT current_setting('app.slc_mark') || n FROM slcspan WHERE aid = $1", mode, k); got != "m101" {
				t.Errorf("%v: key %d on its worker: %s, want m101", mode, k, got)
			}
		}
		if got := queryString(t, c, "SELECT count(*)::text FROM slcspan WHERE current_setting('app.slc_mark') = 'm'", mode); got != "100" {
			t.Errorf("%v: a multi-shard read in the spanning block: %s, want 100", mode, got)
		}
		exec(t, c, "ROLLBACK", mode)
	}

	for _, set := range []string{"SET LOCAL app.slc_mark = 'b'", "SELECT set_config('app.slc_mark', 'b', true)"} {
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		b.Queue(set)
		b.Queue("SELECT count(*)::text FROM slcspan WHERE current_setting('app.slc_mark', true) = 'b'")
		b.Queue("COMMIT")
		br := c.SendBatch(ctx, b)
		var got string
		_, err1 := br.Exec()
		_, err2 := br.Exec()
		err3 := br.QueryRow().Scan(&got)
		_, err4 := br.Exec()
		if err := br.Close(); err != nil || err1 != nil || err2 != nil || err3 != nil || err4 != nil {
			// (A refusal is allowed if it is SET LOCAL's too.)
			t.Logf("batch with %s: %v %v %v %v %v", set, err1, err2, err3, err4, err)
			if sqlState(err3) != "0A000" {
				t.Errorf("batch with %s: %v, want rows or 0A000", set, err3)
			}
			continue
		}
		if got != "100" {
			t.Errorf("batch with %s: %s rows read the setting, want 100", set, got)
		}
	}
	if got := queryString(t, c, "SELECT count(*)::text FROM slcspan WHERE coalesce(current_setting('app.slc_mark', true), '') = ''"); got != "100" {
		t.Errorf("after the blocks: %s rows read no setting, want 100", got)
	}
}

// TestSetLocalThenUserCode: a user function called in a block after SET
// LOCAL, SET LOCAL ROLE or set_config(..., true) left the session pinned
// for good (every later multi-shard query refused), since the state read
// before the function showed the block's values, gone after COMMIT;
// PostgREST's RPC calls a function after its set_config. The session now
// goes on unpinned when the function changed nothing, and a function that
// did change those settings for the session still keeps its connection,
// with the change, as on PostgreSQL.
func TestSetLocalThenUserCode(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(6))
	ctx := context.Background()
	c := connect(t, srv.Addr())
	for _, s := range cl.Servers {
		d := connect(t, s.Addr())
		exec(t, d, "DO $$BEGIN CREATE ROLE slu_reader NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END$$")
	}
	freshTables(t, c, []string{"slu"},
		"CREATE TABLE slu (k int PRIMARY KEY)",
		"SELECT create_distributed_table('slu', 'k')",
		"INSERT INTO slu SELECT generate_series(1, 40)",
		"GRANT SELECT ON slu TO slu_reader",
		"CREATE OR REPLACE FUNCTION slu_noop() RETURNS int LANGUAGE plpgsql AS $$BEGIN RETURN 1; END$$",
		"CREATE OR REPLACE FUNCTION slu_workmem() RETURNS int LANGUAGE plpgsql AS $$BEGIN PERFORM set_config('work_mem', '12MB', false); RETURN 1; END$$",
		"CREATE OR REPLACE FUNCTION slu_role() RETURNS int LANGUAGE plpgsql AS $$BEGIN PERFORM set_config('role', 'slu_reader', false); RETURN 1; END$$",
		"CREATE OR REPLACE FUNCTION slu_workmem8() RETURNS int LANGUAGE plpgsql AS $$BEGIN PERFORM set_config('work_mem', '8MB', false); RETURN 1; END$$",
		"CREATE OR REPLACE FUNCTION slu_appx() RETURNS int LANGUAGE plpgsql AS $$BEGIN PERFORM set_config('app.sluv', '1', false); RETURN 1; END$$",
		"CREATE OR REPLACE FUNCTION slu_role_pg() RETURNS int LANGUAGE plpgsql AS $$BEGIN PERFORM set_config('role', 'postgres', false); RETURN 1; END$$",
		"GRANT EXECUTE ON FUNCTION slu_noop() TO slu_reader",
		"GRANT EXECUTE ON FUNCTION slu_role() TO slu_reader")
	multi := "SELECT count(*)::text FROM slu"
	for _, set := range []string{
		"SET LOCAL work_mem = '8MB'",
		"SET LOCAL ROLE slu_reader",
		"SET LOCAL search_path = public, pg_catalog",
		"SET LOCAL TimeZone = 'Asia/Tokyo'",
		"SET LOCAL TIME ZONE 'UTC'",
		"SELECT set_config('role', 'slu_reader', true), set_config('search_path', 'public', true), set_config('statement_timeout', '5s', true)",
	} {
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
			exec(t, c, "SET work_mem = '6MB'", mode) // (a session value the check must restore)
			exec(t, c, "BEGIN", mode)
			exec(t, c, set, mode)
			exec(t, c, "SELECT slu_noop()", mode)
			if got := queryString(t, c, multi, mode); got != "40" {
				t.Errorf("%s, a function, %v: %s rows, want 40", set, mode, got)
			}
			exec(t, c, "COMMIT", mode)
			var n string
			if err := c.QueryRow(ctx, multi, mode).Scan(&n); err != nil || n != "40" {
				t.Errorf("%s, a function that changed nothing, then COMMIT, %v: %q, %v; want 40 (the session was pinned)", set, mode, n, err)
			}
			exec(t, c, "RESET work_mem", mode)
		}
	}

	// A pipeline (pgx batch): the snapshot is queued before the SET LOCAL
	// is answered. And ROLLBACK after SET LOCAL ROLE.
	for _, set := range []string{"SET LOCAL work_mem = '8MB'", "SELECT set_config('role', 'slu_reader', true), set_config('app.sluv_claims', '{}', true)"} {
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		b.Queue(set)
		b.Queue("SELECT slu_noop()")
		b.Queue("COMMIT")
		if err := c.SendBatch(ctx, b).Close(); err != nil {
			t.Fatalf("batch with %s: %v", set, err)
		}
		var n string
		if err := c.QueryRow(ctx, multi).Scan(&n); err != nil || n != "40" {
			t.Errorf("a batch of %s, a function, COMMIT: %q, %v; want 40 (the session was pinned)", set, n, err)
		}
	}
	exec(t, c, "BEGIN")
	exec(t, c, "SET LOCAL ROLE slu_reader")
	exec(t, c, "SELECT slu_noop()")
	exec(t, c, "ROLLBACK")
	if got := queryString(t, c, "SELECT count(*)::text FROM slu WHERE current_user = 'postgres'"); got != "40" {
		t.Errorf("SET LOCAL ROLE, a function, ROLLBACK: %s of 40 rows read as postgres", got)
	}

	// A function that makes the SET LOCAL value the session's: the same
	// value, which PostgreSQL keeps after COMMIT (adversary 164: the
	// session went back to 4MB, and a role dropped so was postgres
	// again). A custom setting is taken into the session.
	for _, tc := range []struct{ set, call, check, want string }{
		{"SET LOCAL work_mem = '8MB'", "SELECT slu_workmem8()", "SHOW work_mem", "8MB"},
		{"SET LOCAL ROLE slu_reader", "SELECT slu_role()", "SELECT current_user::text", "slu_reader"},
		{"SELECT set_config('role', 'slu_reader', true)", "SELECT slu_role()", "SELECT current_user::text", "slu_reader"},
		{"SET LOCAL app.sluv = '1'", "SELECT slu_appx()", "SELECT current_setting('app.sluv')", "1"},
		// Adversary 165: a custom name in capitals, an old name of
		// work_mem, a ROLLBACK AND CHAIN before the function.
		{`SET LOCAL "App.SluV" = '1'`, "SELECT slu_appx()", "SELECT current_setting('app.sluv')", "1"},
		{"SET LOCAL sort_mem = '8MB'", "SELECT slu_workmem8()", "SHOW work_mem", "8MB"},
		{"SELECT slu_noop(); ROLLBACK AND CHAIN", "SELECT slu_workmem8()", "SHOW work_mem", "8MB"},
	} {
		s := connect(t, srv.Addr())
		exec(t, s, "SET app.sluv = 's'")
		exec(t, s, "BEGIN")
		exec(t, s, tc.set)
		exec(t, s, tc.call)
		exec(t, s, "COMMIT")
		if got := queryString(t, s, tc.check); got != tc.want {
			t.Errorf("%s, then %s, COMMIT: %s gives %s, want %s", tc.set, tc.call, tc.check, got, tc.want)
		}
		s.Close(ctx) // (its pinned connection back to the pool)
	}
	// A role from the startup packet is the session's: a function that
	// makes the SET LOCAL ROLE the session's changes it.
	r := connectWith(t, srv.Addr(), map[string]string{"role": "slu_reader"})
	exec(t, r, "BEGIN")
	exec(t, r, "SET LOCAL ROLE postgres")
	exec(t, r, "SELECT slu_role_pg()")
	exec(t, r, "COMMIT")
	if got := queryString(t, r, "SELECT current_user::text"); got != "postgres" {
		t.Errorf("a startup role, SET LOCAL ROLE postgres, a function setting it for the session: current_user %s, want postgres", got)
	}
	r.Close(ctx)
	r = connectWith(t, srv.Addr(), map[string]string{"role": "slu_reader"})
	exec(t, r, "BEGIN")
	exec(t, r, "SET LOCAL ROLE postgres")
	exec(t, r, "SELECT slu_noop()")
	exec(t, r, "COMMIT")
	if got := queryString(t, r, "SELECT count(*)::text FROM slu WHERE current_user = 'slu_reader'"); got != "40" {
		t.Errorf("a startup role, SET LOCAL ROLE, a function that changed nothing: %s of 40 rows read as slu_reader", got)
	}
	r.Close(ctx)

	s := connect(t, srv.Addr())
	exec(t, s, "BEGIN")
	exec(t, s, "SET LOCAL app.sluv = '1'")
	exec(t, s, "SELECT slu_appx()")
	exec(t, s, "COMMIT")
	if got := queryString(t, s, "SELECT count(*)::text FROM slu WHERE current_setting('app.sluv') = '1'"); got != "40" {
		t.Errorf("a custom setting a function made the session's: %s of 40 rows read it", got)
	}

	// A block begun with its characteristics, which pg_settings lists as
	// the session's settings inside it (PostgREST's BEGIN ISOLATION LEVEL
	// READ COMMITTED READ WRITE).
	for _, begin := range []string{"BEGIN ISOLATION LEVEL READ COMMITTED READ WRITE", "BEGIN ISOLATION LEVEL SERIALIZABLE, READ ONLY, DEFERRABLE", "BEGIN; SET TRANSACTION READ ONLY"} {
		exec(t, c, begin, pgx.QueryExecModeSimpleProtocol)
		exec(t, c, "SELECT slu_noop()")
		exec(t, c, "COMMIT")
		var n string
		if err := c.QueryRow(ctx, multi).Scan(&n); err != nil || n != "40" {
			t.Errorf("%s, a function that changed nothing, then COMMIT: %q, %v; want 40 (the session was pinned)", begin, n, err)
		}
	}

	// A function that changes, for the session, a setting the block had
	// SET LOCAL: PostgreSQL keeps its value after COMMIT. The session
	// keeps its connection (pinned) and the value; no other session sees it.
	d := connect(t, srv.Addr())
	exec(t, d, "BEGIN")
	exec(t, d, "SET LOCAL work_mem = '8MB'")
	exec(t, d, "SELECT slu_workmem()")
	exec(t, d, "COMMIT")
	if got := queryString(t, d, "SHOW work_mem"); got != "12MB" {
		t.Errorf("work_mem after a function set it for the session: %s, want 12MB", got)
	}
	exec(t, d, "BEGIN")
	exec(t, d, "SET LOCAL ROLE slu_reader")
	exec(t, d, "SELECT slu_role()")
	exec(t, d, "COMMIT")
	if got := queryString(t, d, "SELECT current_user::text"); got != "slu_reader" {
		t.Errorf("current_user after a function set the role for the session: %s, want slu_reader", got)
	}
	othersRead(t, srv.Addr(), "SELECT current_user || ' ' || current_setting('work_mem')", "postgres 4MB")
}

// TestSetConfigLocalRowLimit: adversary 163. An Execute with a row limit
// (PgJDBC with a fetch size) runs the set_config calls and ends at
// PortalSuspended, with no CommandComplete: they were followed only at
// the tag, so the block's other workers and the pooled connections of a
// multi-shard read ran without them (24 of 40 rows read the tenant; the
// role was the login user's there) and the custom name stayed defined on a
// connection other sessions were given.
func TestSetConfigLocalRowLimit(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(2))
	c := connect(t, srv.Addr())
	spanningTable(t, c, "slcrl")
	p := protoDial(t, srv.Addr(), "slcrl")
	join := func(s []string) string { return strings.Join(s, " ") }
	setA := []pgproto3.FrontendMessage{
		&pgproto3.Parse{Name: "slcrl_s", Query: "SELECT set_config($1, $2, true)"},
		&pgproto3.Bind{DestinationPortal: "slcrl_p", PreparedStatement: "slcrl_s", Parameters: [][]byte{[]byte("app.slc_rl"), []byte("A")}},
		&pgproto3.Execute{Portal: "slcrl_p", MaxRows: 1},
	}
	read := "SELECT count(*) FILTER (WHERE current_setting('app.slc_rl', true) = 'A') FROM slcrl"

	pipeRaw(t, p, 1, &pgproto3.Query{String: "BEGIN"})
	if got := join(pipeRaw(t, p, 1, append(setA, &pgproto3.Execute{Portal: "slcrl_p"}, &pgproto3.Sync{})...)); got != "row A s C SELECT 0 Z T" {
		t.Errorf("set_config with a row limit in a block: %q", got)
	}
	if got := join(pipeRaw(t, p, 1, &pgproto3.Query{String: read})); got != "row 100 C SELECT 1 Z T" {
		t.Errorf("a multi-shard read after it: %q, want row 100", got)
	}
	pipeRaw(t, p, 1, &pgproto3.Query{String: "ROLLBACK"})

	// Outside a block: the pipeline's implicit transaction, to its Sync.
	setA[0] = &pgproto3.Parse{Name: "slcrl_s2", Query: "SELECT set_config($1, $2, true)"}
	setA[1].(*pgproto3.Bind).PreparedStatement = "slcrl_s2"
	msgs := append(setA, &pgproto3.Parse{Query: read}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{})
	if got := join(pipeRaw(t, p, 1, msgs...)); got != "row A s row 100 C SELECT 1 Z I" {
		t.Errorf("set_config with a row limit, then a multi-shard read, in one pipeline: %q, want row 100", got)
	}

	// Nobody else gets a connection with the name defined.
	othersRead(t, srv.Addr(), "SELECT count(*)::text FROM slcrl WHERE current_setting('app.slc_rl', true) IS NULL", "100")
}

// TestStateReadFailsInBlock: adversary 166. The state read ahead of a
// function call in a block failing (here a statement_timeout of 1ms) was
// answered to the client, and the client's statement was sent all the
// same: a second answer, so every later result came one query late (or,
// over the extended protocol, the session stayed failed). Whether or not
// the read times out, the session stays in step: ROLLBACK ends the block
// and each query gets its own answer.
func TestStateReadFailsInBlock(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(8))
	ctx := context.Background()
	setup := connect(t, srv.Addr())
	exec(t, setup, "CREATE OR REPLACE FUNCTION srf_one() RETURNS int LANGUAGE sql AS 'SELECT 1'")
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec} {
		c := connMode(t, pgtest.URL(srv.Addr()), mode)
		for i := 0; i < 5; i++ {
			exec(t, c, "SET statement_timeout = '1ms'")
			exec(t, c, "BEGIN")
			if _, err := c.Exec(ctx, "SELECT srf_one()"); err != nil && sqlState(err) != "57014" {
				t.Errorf("%v: the function call: %v, want an answer or 57014", mode, err)
			}
			if _, err := c.Exec(ctx, "ROLLBACK"); err != nil {
				t.Fatalf("%v: ROLLBACK: %v", mode, err)
			}
			exec(t, c, "RESET statement_timeout")
			for _, want := range []string{"a", "b"} {
				if got := queryString(t, c, "SELECT '"+want+"'::text"); got != want {
					t.Fatalf("%v, round %d: SELECT '%s' answered %q", mode, i, want, got)
				}
			}
		}
		c.Close(ctx) // (a session whose read failed keeps its connection)
	}
}

// TestSetAndUserCodeInOneString: adversary 166 (older). "SET work_mem =
// '3MB'; SELECT f()" as one simple query, f setting work_mem back to what
// it was before: the snapshot, taken ahead of the string, saw no change,
// and the session took 3MB for its own where PostgreSQL has 2MB; a
// search_path so then resolved table names under the wrong path.
func TestSetAndUserCodeInOneString(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	simple := pgx.QueryExecModeSimpleProtocol
	c := connect(t, srv.Addr())
	exec(t, c, "CREATE OR REPLACE FUNCTION sos_wm(v text) RETURNS text LANGUAGE sql AS $$SELECT set_config('work_mem', v, false)$$")
	for _, tc := range []struct{ script, want string }{
		{"SET work_mem = '3MB'; SELECT sos_wm('2MB')", "2MB"},
		{"BEGIN; SET work_mem = '3MB'; SELECT sos_wm('2MB'); COMMIT", "2MB"},
	} {
		s := connect(t, srv.Addr())
		exec(t, s, "SET work_mem = '2MB'")
		exec(t, s, tc.script, simple)
		if got := queryString(t, s, "SHOW work_mem"); got != tc.want {
			t.Errorf("%s: work_mem %s, want %s", tc.script, got, tc.want)
		}
		if got := queryString(t, s, "SHOW work_mem"); got != tc.want {
			t.Errorf("%s: work_mem %s at the next statement, want %s", tc.script, got, tc.want)
		}
		s.Close(context.Background())
	}
}

// othersRead checks that a new session, which set nothing, reads want from
// sql four times over (the pooled connections other sessions used give it
// nothing of theirs).
func othersRead(t *testing.T, addr, sql, want string) {
	t.Helper()
	other := connect(t, addr)
	for i := 0; i < 4; i++ {
		if got := queryString(t, other, sql); got != want {
			t.Fatalf("another session, read %d: %s gives %s, want %s", i, sql, got, want)
		}
	}
}
