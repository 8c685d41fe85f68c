package coordinator_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// sessionState is what a client can see of its session: settings, role,
// temporary relations.
func sessionState(t *testing.T, c *pgx.Conn) string {
	t.Helper()
	return queryString(t, c, `SELECT concat_ws(' ', current_setting('search_path'), current_setting('statement_timeout'),
		current_setting('work_mem'), current_user, session_user,
		(SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema()))`, pgx.QueryExecModeSimpleProtocol)
}

// Session state that user code changes where the statement's text does not
// show it (set_config in a function or DO block, quoted names, roles, the
// pg_temp schema) stays with its client: a later client on the same pooled
// server connection sees none of it, and the client itself keeps seeing
// it, as on PostgreSQL (class 13 of issue 8).
func TestSessionStateChangedByUserCodeStaysWithItsClient(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(2))
	ctx := context.Background()
	setup := connect(t, cl.Servers[0].Addr())
	for _, q := range []string{
		"DROP ROLE IF EXISTS iso13", "CREATE ROLE iso13",
		`CREATE OR REPLACE FUNCTION iso13_f() RETURNS int LANGUAGE plpgsql AS $$
		 BEGIN PERFORM set_config('statement_timeout', '1234', false); RETURN 1; END $$`,
		`CREATE OR REPLACE PROCEDURE iso13_p() LANGUAGE plpgsql AS $$
		 BEGIN PERFORM set_config('work_mem', '3MB', false); END $$`,
		`CREATE OR REPLACE FUNCTION iso13_temp() RETURNS int LANGUAGE plpgsql AS $$
		 BEGIN CREATE TEMP TABLE IF NOT EXISTS iso13_tt (v int); RETURN 1; END $$`,
	} {
		exec(t, setup, q)
	}
	t.Cleanup(func() {
		for _, q := range []string{"DROP FUNCTION IF EXISTS iso13_f()", "DROP PROCEDURE IF EXISTS iso13_p()",
			"DROP FUNCTION IF EXISTS iso13_temp()", "DROP ROLE IF EXISTS iso13"} {
			_, _ = setup.Exec(ctx, q)
		}
	})
	fresh := connect(t, srv.Addr())
	clean := sessionState(t, fresh)
	simple := pgx.QueryExecModeSimpleProtocol
	for _, tc := range []struct {
		name string
		sql  string
		mode pgx.QueryExecMode
	}{
		{"DO block", "DO $$ BEGIN PERFORM set_config('search_path', 'iso13_schema', false); END $$", simple},
		{"DO block, extended", "DO $$ BEGIN PERFORM set_config('search_path', 'iso13_schema', false); END $$", pgx.QueryExecModeExec},
		{"plpgsql function", "SELECT iso13_f()", simple},
		{"plpgsql function, extended", "SELECT iso13_f()", pgx.QueryExecModeCacheStatement},
		{"procedure", "CALL iso13_p()", simple},
		{"quoted set_config", `SELECT "set_config"('work_mem', '5MB', false)`, simple},
		{"quoted set_config, extended", `SELECT pg_catalog."set_config"('work_mem', '5MB', false)`, pgx.QueryExecModeCacheStatement},
		{"SET session_authorization", "SET session_authorization = 'iso13'", simple},
		{`SET "role"`, `SET "role" = 'iso13'`, simple},
		{"SET SESSION ROLE", `SET SESSION ROLE iso13`, simple},
		{"pg_temp table", "CREATE TABLE pg_temp.iso13_t (v int)", simple},
		{"temp table made by a function", "SELECT iso13_temp()", simple},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := connect(t, srv.Addr())
			b := connect(t, srv.Addr())
			if _, err := a.Exec(ctx, tc.sql, tc.mode); err != nil {
				t.Fatalf("%s: %v", tc.sql, err)
			}
			mine := sessionState(t, a)
			if mine == clean {
				t.Fatalf("%s changed nothing the test can see: %q", tc.sql, mine)
			}
			// Other clients, before and after a's statements, on every
			// connection of the pool.
			for i := 0; i < 4; i++ {
				if got := sessionState(t, b); got != clean {
					t.Fatalf("another client sees %q after %s, want %q", got, tc.sql, clean)
				}
				c := connect(t, srv.Addr())
				if got := sessionState(t, c); got != clean {
					t.Fatalf("a new client sees %q after %s, want %q", got, tc.sql, clean)
				}
				if got := sessionState(t, a); got != mine {
					t.Fatalf("the client's own state went from %q to %q", mine, got)
				}
			}
			_ = a.Close(ctx)
			for i := 0; i < 3; i++ {
				if got := sessionState(t, connect(t, srv.Addr())); got != clean {
					t.Fatalf("after the client left, a new client sees %q, want %q", got, clean)
				}
			}
		})
	}
	_ = fmt.Sprint()
}
