package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/coordinator"
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
	// (Pool sizes: with 2 workers the last connection of each pool serves
	// only sessions that hold another worker's (pooling.Pool's classes);
	// the pinned sessions here hold connections for good.)
	srv := pgtest.Coordinator(t, cl, poolSize(3))
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
	simple := pgx.QueryExecModeSimpleProtocol
	// A multi-shard query calling user code on every worker's pooled
	// connections: no later query sees what it set there.
	t.Run("multi-shard query", func(t *testing.T) {
		for _, w := range cl.Servers {
			exec(t, connect(t, w.Addr()), `CREATE OR REPLACE FUNCTION iso13_f() RETURNS int LANGUAGE plpgsql AS $$
			 BEGIN PERFORM set_config('statement_timeout', '1234', false); RETURN 1; END $$`)
		}
		a := connect(t, srv.Addr())
		testTable(t, a, "iso13_d", "(id int PRIMARY KEY)", "SELECT create_distributed_table('iso13_d', 'id', shard_count => 4)")
		exec(t, a, "INSERT INTO iso13_d (id) VALUES (1), (2), (3), (4), (5), (6), (7), (8)", simple)
		for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeCacheStatement} {
			if _, err := a.Exec(ctx, "SELECT iso13_f() FROM iso13_d", mode); err != nil {
				t.Fatal(err)
			}
			b := connect(t, srv.Addr())
			for i := 0; i < 4; i++ {
				rows, err := b.Query(ctx, "SELECT DISTINCT current_setting('statement_timeout') FROM iso13_d", simple)
				if err != nil {
					t.Fatal(err)
				}
				got, err := pgx.CollectRows(rows, pgx.RowTo[string])
				if err != nil || len(got) != 1 || got[0] != "0" {
					t.Fatalf("after a multi-shard query calling user code (%v), another client's shards see statement_timeout %v (%v)", mode, got, err)
				}
			}
		}
	})
	// User code in a transaction that spans both workers.
	t.Run("transaction across workers", func(t *testing.T) {
		a := connect(t, srv.Addr())
		testTable(t, a, "iso13_t", "(id int PRIMARY KEY, v int)", "SELECT create_distributed_table('iso13_t', 'id', shard_count => 4)")
		exec(t, a, "INSERT INTO iso13_t (id, v) VALUES (1, 0), (2, 0), (3, 0), (4, 0), (5, 0), (6, 0), (7, 0), (8, 0)", simple)
		exec(t, a, "BEGIN", simple)
		exec(t, a, "DO $$ BEGIN PERFORM set_config('statement_timeout', '4321', false); END $$", simple)
		refused := false
		for id := 1; id <= 8; id++ {
			// The other worker would run without the change: refused
			// (0A000), which fails the transaction (pgx then re-prepares
			// in it, which fails too).
			if _, err := a.Exec(ctx, "UPDATE iso13_t SET v = v + 1 WHERE id = $1", id); err != nil && !refused {
				if sqlState(err) != "0A000" {
					t.Fatal(err)
				}
				refused = true
			}
		}
		exec(t, a, "COMMIT", simple)
		for i := 0; i < 4; i++ {
			if got := queryString(t, connect(t, srv.Addr()), "SHOW statement_timeout", simple); got != "0" {
				t.Fatalf("after user code in a transaction across workers, a new client sees statement_timeout %s", got)
			}
		}
	})
	// The state check reads the connection under the client's search_path:
	// a role's own "=" ahead of pg_catalog's must not hide a change.
	t.Run("the client's own operators", func(t *testing.T) {
		for _, w := range cl.Servers {
			wc := connect(t, w.Addr())
			for _, q := range []string{"DROP SCHEMA IF EXISTS iso13_ops CASCADE", "CREATE SCHEMA iso13_ops",
				"CREATE FUNCTION iso13_ops.never(text, text) RETURNS bool LANGUAGE sql IMMUTABLE AS 'SELECT false'",
				"CREATE OPERATOR iso13_ops.= (LEFTARG = text, RIGHTARG = text, FUNCTION = iso13_ops.never)",
				"GRANT USAGE ON SCHEMA iso13_ops TO PUBLIC"} {
				exec(t, wc, q)
			}
			t.Cleanup(func() { _, _ = connect(t, w.Addr()).Exec(ctx, "DROP SCHEMA IF EXISTS iso13_ops CASCADE") })
		}
		const path = "SET search_path = iso13_ops, pg_catalog, public"
		a := connect(t, srv.Addr())
		exec(t, a, path, simple)
		exec(t, a, "SELECT iso13_f()", simple)
		if got := queryString(t, a, "SHOW statement_timeout", simple); got != "1234ms" {
			t.Fatalf("the client's own statement_timeout after its function: %s", got)
		}
		for i := 0; i < 4; i++ {
			b := connect(t, srv.Addr())
			exec(t, b, path, simple)
			if got := queryString(t, b, "SHOW statement_timeout", simple); got != "0" {
				t.Fatalf("another client with the same search_path sees statement_timeout %s", got)
			}
		}
	})
	fresh := connect(t, srv.Addr())
	clean := sessionState(t, fresh)
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
}

// The session-isolation tester (issue 8): many clients share one
// coordinator with a small pool, each setting its own session state by every
// means PostgreSQL offers (SET, SET in committed and rolled-back
// transactions, SET LOCAL, RESET, set_config in a query, a DO block, a
// function and a procedure, roles, session authorization, temporary tables
// and sequences, SQL and protocol-level prepared statements, holdable
// cursors, advisory locks, LISTEN), and after every statement checks that
// it sees exactly its own state, while fresh clients check they see none of
// anyone's. It runs for PGFLEET_ISOLATION_DURATION (default 20s) with seed
// PGFLEET_ISOLATION_SEED (default: the time), printed to reproduce a
// failure. scripts/isolation runs it for longer.
func TestSessionIsolation(t *testing.T) {
	duration := 20 * time.Second
	if v := os.Getenv("PGFLEET_ISOLATION_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("PGFLEET_ISOLATION_DURATION: %v", err)
		}
		duration = d
	}
	seed := time.Now().UnixNano()
	if v := os.Getenv("PGFLEET_ISOLATION_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseInt(v, 10, 64); err != nil {
			t.Fatalf("PGFLEET_ISOLATION_SEED: %v", err)
		}
	}
	t.Logf("session isolation: seed %d (PGFLEET_ISOLATION_SEED=%d to repeat), %v", seed, seed, duration)
	const clients, pool = 8, 4
	cl := pgtest.Shared(t)
	// The session's SQL-level prepared statements, read on its worker
	// connection: pgfleet refuses pg_prepared_statements itself (on a
	// pooled connection it lists others' statements), a function's body
	// reaches it.
	w := connect(t, cl.Servers[0].Addr())
	exec(t, w, "CREATE OR REPLACE FUNCTION iso_sql_prepared() RETURNS text LANGUAGE sql "+
		"AS $f$SELECT coalesce(string_agg(name, ',' ORDER BY name), '') FROM pg_prepared_statements WHERE from_sql$f$")
	srv := pgtest.Coordinator(t, cl, func(c *coordinator.Config) { c.PoolSize = pool; c.PoolTimeout = 20 * time.Second })
	ctx := context.Background()
	setup := connect(t, cl.Servers[0].Addr())
	for _, q := range []string{
		"DROP ROLE IF EXISTS iso_r0", "DROP ROLE IF EXISTS iso_r1",
		"CREATE ROLE iso_r0 SUPERUSER", "CREATE ROLE iso_r1 SUPERUSER",
		`CREATE OR REPLACE FUNCTION iso_setcfg(n text, v text) RETURNS text LANGUAGE plpgsql AS $$
		 BEGIN RETURN set_config(n, v, false); END $$`,
		`CREATE OR REPLACE PROCEDURE iso_setcfg_p(n text, v text) LANGUAGE plpgsql AS $$
		 BEGIN PERFORM set_config(n, v, false); END $$`,
		"CREATE SEQUENCE IF NOT EXISTS iso_shared_seq",
	} {
		exec(t, setup, q)
	}
	t.Cleanup(func() {
		for _, q := range []string{"DROP FUNCTION IF EXISTS iso_setcfg(text, text)", "DROP PROCEDURE IF EXISTS iso_setcfg_p(text, text)",
			"DROP SEQUENCE IF EXISTS iso_shared_seq",
			"DROP ROLE IF EXISTS iso_r0", "DROP ROLE IF EXISTS iso_r1"} {
			_, _ = setup.Exec(ctx, q)
		}
	})
	base := isoRead(ctx, connect(t, srv.Addr()), false)
	if base.err != nil {
		t.Fatal(base.err)
	}
	// At most pool-1 clients hold pinned connections at once, so that the
	// others always get one.
	pins := make(chan struct{}, pool-1)
	deadline := time.Now().Add(duration)
	var failed atomic.Bool
	var statements atomic.Int64
	var wg sync.WaitGroup
	fail := func(format string, args ...any) {
		if failed.CompareAndSwap(false, true) {
			t.Errorf("seed %d: "+format, append([]any{seed}, args...)...)
		}
	}
	for id := 0; id < clients; id++ {
		wg.Add(1)
		go func(id int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(seed), uint64(id)))
			for time.Now().Before(deadline) && !failed.Load() {
				isoClient(ctx, r, srv.Addr(), id, base.state, pins, deadline, &failed, &statements, fail)
			}
		}(id)
	}
	// Fresh clients see nobody's state.
	for time.Now().Before(deadline) && !failed.Load() {
		c, err := pgx.Connect(ctx, pgtest.URL(srv.Addr()))
		if err != nil {
			fail("fresh client: %v", err)
			break
		}
		got := isoRead(ctx, c, rand.IntN(2) == 0)
		_ = c.Close(ctx)
		if got.err != nil {
			fail("fresh client: %v", got.err)
		} else if got.state != base.state {
			fail("a fresh client sees\n  %s\nwant\n  %s", got.state, base.state)
		}
		time.Sleep(50 * time.Millisecond)
	}
	wg.Wait()
	t.Logf("session isolation: %d statements, %d clients, pool %d, seed %d", statements.Load(), clients, pool, seed)
}

// isoState is a client's view of its session, as one string.
type isoState struct {
	state string
	err   error
}

const isoStateSQL = `SELECT concat_ws(' | ', current_setting('search_path'), current_setting('statement_timeout'),
 current_setting('work_mem'), current_setting('TimeZone'), current_setting('DateStyle'),
 coalesce(current_setting('iso.owner', true), ''), current_user, session_user,
 (SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema()),
 (SELECT coalesce(string_agg(c, ',' ORDER BY c), '') FROM pg_listening_channels() c),
 (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()),
 iso_sql_prepared(),
 (SELECT coalesce(string_agg(name, ',' ORDER BY name), '') FROM pg_cursors WHERE is_holdable), '')`

func isoRead(ctx context.Context, c *pgx.Conn, extended bool) isoState {
	mode := pgx.QueryExecModeSimpleProtocol
	if extended {
		mode = pgx.QueryExecModeCacheStatement
	}
	var s string
	err := c.QueryRow(ctx, isoStateSQL, mode).Scan(&s)
	return isoState{state: s, err: err}
}

// isoModel is what a client's session should look like.
type isoModel struct {
	gucs     map[string]string // search_path, statement_timeout, work_mem, TimeZone, DateStyle, iso.owner
	user     string
	sessUser string
	temps    int
	channels []string
	locks    int
	prepared []string
	cursors  []string
}

var isoGUCs = []string{"search_path", "statement_timeout", "work_mem", "TimeZone", "DateStyle", "iso.owner"}

func isoParse(state string) isoModel {
	f := strings.Split(state, " | ")
	m := isoModel{gucs: map[string]string{}}
	for i, g := range isoGUCs {
		m.gucs[g] = f[i]
	}
	m.user, m.sessUser = f[6], f[7]
	m.temps, _ = strconv.Atoi(f[8])
	m.locks, _ = strconv.Atoi(f[10])
	split := func(s string) []string {
		if s == "" {
			return nil
		}
		return strings.Split(s, ",")
	}
	m.channels, m.prepared, m.cursors = split(f[9]), split(f[11]), split(f[12])
	return m
}

func (m *isoModel) String() string {
	sorted := func(l []string) string {
		l = slices.Clone(l)
		slices.Sort(l)
		return strings.Join(l, ",")
	}
	parts := []string{}
	for _, g := range isoGUCs {
		parts = append(parts, m.gucs[g])
	}
	parts = append(parts, m.user, m.sessUser, strconv.Itoa(m.temps), sorted(m.channels), strconv.Itoa(m.locks),
		sorted(m.prepared), sorted(m.cursors), "")
	return strings.Join(parts, " | ")
}

// isoValue is a random value for a setting, written as PostgreSQL shows it.
func isoValue(r *rand.Rand, id int, g string) string {
	switch g {
	case "search_path":
		return fmt.Sprintf("iso_c%d_%d, public", id, r.IntN(100))
	case "statement_timeout":
		return fmt.Sprintf("%dms", 1+r.IntN(998)+1000*(10+r.IntN(50)))
	case "work_mem":
		return fmt.Sprintf("%dkB", 1024*(1+r.IntN(16))+1+r.IntN(1022))
	case "TimeZone":
		return []string{"UTC", "Asia/Tokyo", "America/New_York", "Europe/Berlin", "Australia/Adelaide"}[r.IntN(5)]
	case "DateStyle":
		return []string{"ISO, MDY", "ISO, DMY", "SQL, DMY", "German, DMY", "Postgres, YMD"}[r.IntN(5)]
	default:
		return fmt.Sprintf("c%d-%d", id, r.IntN(1_000_000))
	}
}

// isoResetStartup: RESET of a setting the client gave at startup returns
// to the startup value (class 12 of issue 8).
const isoResetStartup = true

// isoSharedSequences: currval() of a shared sequence after a switch of
// server connection gives this session's value or 0A000, never another's
// (class 11 of issue 8).
const isoSharedSequences = true

func isoQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// isoSetValue is a value as SET takes it (search_path: a list of names).
func isoSetValue(g, v string) string {
	if g == "search_path" {
		return v
	}
	return isoQuote(v)
}

// isoClient runs one client connection: random statements, each followed by
// a check of the whole session state.
func isoClient(ctx context.Context, r *rand.Rand, addr string, id int, base string, pins chan struct{}, deadline time.Time,
	failed *atomic.Bool, statements *atomic.Int64, fail func(string, ...any)) {
	m := isoParse(base)
	// Startup parameters are session state too.
	url := pgtest.URL(addr)
	if r.IntN(3) == 0 {
		m.gucs["TimeZone"] = isoValue(r, id, "TimeZone")
		url += "&timezone=" + strings.ReplaceAll(m.gucs["TimeZone"], "/", "%2F")
	}
	startup := map[string]bool{"TimeZone": strings.Contains(url, "timezone=")}
	defaults := map[string]string{}
	for k, v := range m.gucs {
		defaults[k] = v
	}
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		fail("client %d: connect: %v", id, err)
		return
	}
	defer c.Close(ctx)
	pinned, hasTable, hasSeq := false, false, false
	defer func() {
		if pinned {
			_ = c.Close(ctx)
			<-pins
		}
	}()
	var history []string
	run := func(sql string, extended bool) error {
		history = append(history, sql)
		statements.Add(1)
		mode := pgx.QueryExecModeSimpleProtocol
		if extended {
			mode = pgx.QueryExecModeExec
		}
		_, err := c.Exec(ctx, sql, mode)
		return err
	}
	pin := func() bool {
		if pinned {
			return true
		}
		select {
		case pins <- struct{}{}:
			pinned = true
			return true
		default:
			return false
		}
	}
	// A protocol-level prepared statement of this client's own, under a
	// name every client uses for another text.
	if _, err := c.Prepare(ctx, "iso_q", fmt.Sprintf("SELECT $1::text || '-c%d'", id)); err != nil {
		fail("client %d: prepare: %v", id, err)
		return
	}
	ops := 5 + r.IntN(40)
	for n := 0; n < ops && time.Now().Before(deadline) && !failed.Load(); n++ {
		ext := r.IntN(2) == 0
		g := isoGUCs[r.IntN(len(isoGUCs))]
		v := isoValue(r, id, g)
		setc := fmt.Sprintf("set_config(%s, %s, false)", isoQuote(g), isoQuote(v))
		var err error
		switch op := r.IntN(21); {
		case op < 4:
			err = run(fmt.Sprintf("SET %s = %s", g, isoSetValue(g, v)), ext)
			m.gucs[g] = v
		case op == 4 && (isoResetStartup || !startup[g]):
			err = run("RESET "+g, ext)
			m.gucs[g] = defaults[g]
		case op == 5:
			commit := r.IntN(2) == 0
			end := "ROLLBACK"
			if commit {
				end = "COMMIT"
			}
			err = run(fmt.Sprintf("BEGIN; SET %s = %s; SELECT 1; %s", g, isoSetValue(g, v), end), false)
			if commit {
				m.gucs[g] = v
			}
		case op == 6:
			err = run(fmt.Sprintf("BEGIN; SET LOCAL %s = %s; COMMIT", g, isoSetValue(g, v)), false)
		case op == 7 && pin():
			err = run([]string{"SELECT " + setc, `SELECT "set_config"` + setc[10:], "SELECT pg_catalog." + setc}[r.IntN(3)], ext)
			m.gucs[g] = v
		case op == 8 && pin():
			err = run("DO $$ BEGIN PERFORM "+setc+"; END $$", ext)
			m.gucs[g] = v
		case op == 9 && pin():
			if r.IntN(2) == 0 {
				err = run(fmt.Sprintf("SELECT iso_setcfg(%s, %s)", isoQuote(g), isoQuote(v)), ext)
			} else {
				err = run(fmt.Sprintf("CALL iso_setcfg_p(%s, %s)", isoQuote(g), isoQuote(v)), false)
			}
			m.gucs[g] = v
		case op == 10 && pin():
			role := fmt.Sprintf("iso_r%d", r.IntN(2))
			switch r.IntN(4) {
			case 0:
				err = run("SET ROLE "+role, false)
				m.user = role
			case 1:
				err = run(`SET "role" = `+isoQuote(role), false)
				m.user = role
			case 2:
				err = run("SET SESSION AUTHORIZATION "+role, false)
				m.user, m.sessUser = role, role
			default:
				err = run("RESET ROLE", false)
				m.user = m.sessUser
			}
		case op == 11 && pin():
			if !hasTable {
				err = run([]string{"CREATE TEMP TABLE iso_tmp (owner text)", "CREATE TABLE pg_temp.iso_tmp (owner text)"}[r.IntN(2)], false)
				hasTable = true
				m.temps++
			}
			if err == nil {
				err = run(fmt.Sprintf("INSERT INTO pg_temp.iso_tmp VALUES ('c%d')", id), ext)
			}
			if err == nil {
				var others int
				err = c.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM pg_temp.iso_tmp WHERE owner <> 'c%d'", id)).Scan(&others)
				if err == nil && others > 0 {
					fail("client %d reads %d temporary rows of other clients", id, others)
				}
			}
		case op == 12 && pin():
			ch := fmt.Sprintf("iso_c%d_%d", id, r.IntN(3))
			if r.IntN(4) == 0 {
				err = run("UNLISTEN *", false)
				m.channels = nil
			} else {
				err = run("LISTEN "+ch, false)
				if !slices.Contains(m.channels, ch) {
					m.channels = append(m.channels, ch)
				}
			}
		case op == 13 && pin():
			if r.IntN(3) == 0 {
				err = run("SELECT pg_advisory_unlock_all()", false)
				m.locks = 0
			} else {
				err = run(fmt.Sprintf("SELECT pg_advisory_lock(%d)", 7000+id*10+m.locks), ext)
				m.locks++
			}
		case op == 14 && pin():
			name := fmt.Sprintf("iso_p%d", r.IntN(3))
			if slices.Contains(m.prepared, name) {
				var got string
				err = c.QueryRow(ctx, "EXECUTE "+name, pgx.QueryExecModeSimpleProtocol).Scan(&got)
				if err == nil && got != fmt.Sprintf("c%d", id) {
					fail("client %d: EXECUTE %s gives %q", id, name, got)
				}
				if err == nil {
					err = run("DEALLOCATE "+name, false)
					m.prepared = slices.DeleteFunc(m.prepared, func(s string) bool { return s == name })
				}
			} else {
				err = run(fmt.Sprintf("PREPARE %s AS SELECT 'c%d'", name, id), false)
				m.prepared = append(m.prepared, name)
			}
		case op == 15 && pin():
			name := fmt.Sprintf("iso_cur%d", r.IntN(2))
			if slices.Contains(m.cursors, name) {
				var got string
				err = c.QueryRow(ctx, "FETCH ABSOLUTE 1 FROM "+name, pgx.QueryExecModeSimpleProtocol).Scan(&got)
				if err == nil && got != fmt.Sprintf("c%d", id) {
					fail("client %d: FETCH from %s gives %q", id, name, got)
				}
				if err == nil {
					err = run("CLOSE "+name, false)
					m.cursors = slices.DeleteFunc(m.cursors, func(s string) bool { return s == name })
				}
			} else {
				err = run(fmt.Sprintf("DECLARE %s SCROLL CURSOR WITH HOLD FOR SELECT 'c%d'", name, id), false)
				m.cursors = append(m.cursors, name)
			}
		case op == 16 && pin():
			if !hasSeq {
				err = run("CREATE TEMP SEQUENCE iso_seq", false)
				hasSeq = true
				m.temps++
			}
			var a, b int64
			if err == nil {
				err = c.QueryRow(ctx, "SELECT nextval('pg_temp.iso_seq')").Scan(&a)
			}
			if err == nil {
				err = c.QueryRow(ctx, "SELECT currval('pg_temp.iso_seq')").Scan(&b)
				var pe *pgconn.PgError
				if errors.As(err, &pe) && pe.Code == "0A000" {
					err = nil // refused (class 11): pgfleet cannot tell whose nextval the connection remembers
				} else if err == nil && a != b {
					fail("client %d: currval %d after nextval %d", id, b, a)
				}
			}
		case op == 17 && isoSharedSequences:
			// nextval of a shared sequence, then currval: this session's
			// value, whatever connection it is on.
			var a, b int64
			if err = c.QueryRow(ctx, "SELECT nextval('iso_shared_seq')").Scan(&a); err == nil {
				err = c.QueryRow(ctx, "SELECT currval('iso_shared_seq')").Scan(&b)
				var pe *pgconn.PgError
				if errors.As(err, &pe) && pe.Code == "0A000" {
					err = nil // refused: it cannot be sure which connection's value it would read
				} else if err == nil && a != b {
					fail("client %d: currval(iso_shared_seq) %d after its nextval %d", id, b, a)
				}
			}
		default:
			var got string
			err = c.QueryRow(ctx, "iso_q", "x").Scan(&got)
			if err == nil && got != fmt.Sprintf("x-c%d", id) {
				fail("client %d: its prepared statement iso_q gives %q", id, got)
			}
		}
		if err != nil {
			fail("client %d: %v\nhistory:\n  %s", id, err, strings.Join(history, "\n  "))
			return
		}
		got := isoRead(ctx, c, r.IntN(2) == 0)
		if got.err != nil {
			fail("client %d: reading its state: %v", id, got.err)
			return
		}
		if want := m.String(); got.state != want {
			fail("client %d sees\n  %s\nwant\n  %s\nhistory:\n  %s", id, got.state, want, strings.Join(history, "\n  "))
			return
		}
	}
}

// User code that deallocates every prepared statement of its connection
// (EXECUTE 'DEALLOCATE ALL' in a DO block) takes pgfleet's statements there
// with it, the session-state read among them. The connection must not go
// back to the pool as if they were there: the next client's prepared
// statements run (on PostgreSQL nobody else shares that connection).
func TestDeallocateInUserCode(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	setup := connect(t, pgtest.Coordinator(t, cl, nil).Addr())
	testTable(t, setup, "dealloc_t", "(id int PRIMARY KEY, v int)", "SELECT create_distributed_table('dealloc_t', 'id', shard_count => 4)")
	exec(t, setup, "INSERT INTO dealloc_t SELECT g, 10 * g FROM generate_series(1, 20) g", simple)
	exec(t, setup, "INSERT INTO dealloc_t VALUES (100, 0)", simple)
	// One connection per worker: the next client gets the one the DO
	// block ran on.
	srv := pgtest.Coordinator(t, cl, poolSize(1))
	read := func(c *pgx.Conn, who string) {
		t.Helper()
		for id := 1; id <= 20; id++ {
			var v int
			if err := c.QueryRow(ctx, "SELECT v FROM dealloc_t WHERE id = $1", id).Scan(&v); err != nil || v != 10*id {
				t.Fatalf("%s: id %d: got %d, %v; want %d", who, id, v, err, 10*id)
			}
		}
	}
	for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeCacheStatement} {
		a := connect(t, srv.Addr())
		read(a, "before")
		// (A DO block runs user code: its connection's state is read
		// before and after.)
		if _, err := a.Exec(ctx, "DO $$BEGIN EXECUTE 'DEALLOCATE ALL'; END$$", mode); err != nil {
			t.Fatal(err)
		}
		if err := a.Close(ctx); err != nil {
			t.Fatal(err)
		}
		read(connect(t, srv.Addr()), fmt.Sprintf("a client after DEALLOCATE ALL in user code (%v)", mode))
	}
	for _, q := range []string{
		"CREATE OR REPLACE FUNCTION dealloc_all() RETURNS int LANGUAGE plpgsql AS $$BEGIN EXECUTE 'DEALLOCATE ALL'; RETURN 1; END$$",
		"CREATE OR REPLACE FUNCTION dealloc_state() RETURNS int LANGUAGE plpgsql AS $$BEGIN EXECUTE 'DEALLOCATE pgfleet_state'; RETURN 1; END$$",
		"CREATE OR REPLACE FUNCTION dealloc_setv(n text, v text) RETURNS int LANGUAGE plpgsql AS $$BEGIN PERFORM set_config(n, v, false); RETURN 1; END$$",
	} {
		exec(t, setup, q, simple)
	}
	t.Cleanup(func() {
		for _, q := range []string{"DROP FUNCTION IF EXISTS dealloc_all()", "DROP FUNCTION IF EXISTS dealloc_state()", "DROP FUNCTION IF EXISTS dealloc_setv(text, text)"} {
			_, _ = setup.Exec(ctx, q, simple)
		}
	})
	// In a block, then a SET: the block commits (adversary: the SET's
	// comparison bound the deallocated read, which aborted the block).
	t.Run("in a block", func(t *testing.T) {
		for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeCacheStatement} {
			a := connect(t, srv.Addr())
			var before, after int
			if err := a.QueryRow(ctx, "SELECT v FROM dealloc_t WHERE id = 100", simple).Scan(&before); err != nil {
				t.Fatal(err)
			}
			for _, q := range []string{"BEGIN", "SELECT dealloc_all()", "SET application_name = 'dealloc'",
				"UPDATE dealloc_t SET v = v + 1 WHERE id = 100", "COMMIT"} {
				if _, err := a.Exec(ctx, q, mode); err != nil {
					t.Fatalf("%v: %s: %v", mode, q, err)
				}
			}
			if err := a.QueryRow(ctx, "SELECT v FROM dealloc_t WHERE id = 100", simple).Scan(&after); err != nil || after != before+1 {
				t.Fatalf("%v: v went from %d to %d (%v): the block's UPDATE was lost", mode, before, after, err)
			}
			_ = a.Close(ctx)
		}
	})
	// Only pgfleet's read deallocated: the other statements stay, and the
	// client's prepared statements run on (adversary: 42P05 after the
	// whole cache was forgotten).
	t.Run("only the state read", func(t *testing.T) {
		a := connect(t, srv.Addr())
		read(a, "before")
		if _, err := a.Exec(ctx, "SELECT dealloc_state()"); err != nil {
			t.Fatal(err)
		}
		// (The client itself is kept on the default node, whose state
		// could not be read: rows elsewhere get 0A000.)
		served := 0
		for id := 1; id <= 20; id++ {
			var v int
			err := a.QueryRow(ctx, "SELECT v FROM dealloc_t WHERE id = $1", id).Scan(&v)
			var pe *pgconn.PgError
			switch {
			case err == nil && v == 10*id:
				served++
			case errors.As(err, &pe) && pe.Code == "0A000":
			default:
				t.Fatalf("the client itself after DEALLOCATE pgfleet_state in user code: id %d: got %d, %v", id, v, err)
			}
		}
		if served == 0 {
			t.Fatal("the client itself read no row")
		}
		_ = a.Close(ctx)
		read(connect(t, srv.Addr()), "a client after DEALLOCATE pgfleet_state in user code")
	})
	// Settings user code changes, named in the text, are read apart: a
	// value with the separator in it is not taken for two (adversary:
	// app.x = 'a | b' with app.y undefined read as app.x = 'a', app.y =
	// 'b', and the function's change was lost).
	t.Run("custom settings read apart", func(t *testing.T) {
		a := connect(t, srv.Addr())
		exec(t, a, "SET dealloc.x = 'a | b'", simple)
		exec(t, a, "SELECT dealloc_setv('dealloc.x', 'a') + dealloc_setv('dealloc.y', 'b')", simple)
		if got := queryString(t, a, "SELECT current_setting('dealloc.x', true) || ',' || coalesce(current_setting('dealloc.y', true), '')", simple); got != "a,b" {
			t.Fatalf("the client's settings after the function: %q, want a,b", got)
		}
	})
}

// A trigger reading currval() is checked like any user code (its
// statement runs after DISCARD SEQUENCES): it never reads the sequence
// state another client left on the pooled connection (a trigger that
// looks harmless otherwise, harmlessBody).
func TestCurrvalInTrigger(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	setup := connect(t, cl.Servers[0].Addr())
	for _, q := range []string{
		"DROP TABLE IF EXISTS cvt_t", "DROP SEQUENCE IF EXISTS cvt_s",
		"CREATE SEQUENCE cvt_s",
		"CREATE OR REPLACE FUNCTION cvt_f() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.b := currval('cvt_s'); RETURN NEW; END $$",
		"CREATE TABLE cvt_t (a int, b bigint)",
		"CREATE TRIGGER cvt_tr BEFORE INSERT ON cvt_t FOR EACH ROW EXECUTE FUNCTION cvt_f()",
	} {
		exec(t, setup, q, simple)
	}
	t.Cleanup(func() {
		_, _ = setup.Exec(ctx, "DROP TABLE IF EXISTS cvt_t", simple)
		_, _ = setup.Exec(ctx, "DROP FUNCTION IF EXISTS cvt_f()", simple)
		_, _ = setup.Exec(ctx, "DROP SEQUENCE IF EXISTS cvt_s", simple)
	})
	srv := pgtest.Coordinator(t, cl, poolSize(1)) // (one connection: B's is A's)
	b := connect(t, srv.Addr())
	exec(t, b, "SELECT nextval('cvt_s')", simple)
	_ = b.Close(ctx)
	for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeCacheStatement} {
		a := connect(t, srv.Addr())
		// On PostgreSQL: 55000, currval is not yet defined in A's session.
		_, err := a.Exec(ctx, "INSERT INTO cvt_t (a) VALUES (1)", mode)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "55000" {
			t.Fatalf("%v: INSERT through a trigger reading currval in a session that drew none: %v, want 55000", mode, err)
		}
		_ = a.Close(ctx)
	}
}

// A replication origin set up for the session, and a temporary
// replication slot, live as long as the server connection: the session
// keeps its connection, which is closed when it ends, and the next client
// has neither (adversary).
func TestReplicationSessionStateStaysWithItsClient(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	setup := connect(t, cl.Servers[0].Addr())
	exec(t, setup, "SELECT pg_replication_origin_create('iso_ro')", simple)
	t.Cleanup(func() { _, _ = setup.Exec(ctx, "SELECT pg_replication_origin_drop('iso_ro')", simple) })
	srv := pgtest.Coordinator(t, cl, poolSize(1)) // (one connection: B's is A's)
	for _, q := range []string{
		"SELECT pg_replication_origin_session_setup('iso_ro')",
		"SELECT 1 FROM pg_create_physical_replication_slot('iso_rs', true, true)",
	} {
		b := nextClient(t, connect(t, srv.Addr()), srv.Addr(), q)
		got := queryString(t, b, "SELECT pg_replication_origin_session_is_setup()::text || ' ' || (SELECT count(*) FROM pg_replication_slots WHERE active_pid = pg_backend_pid())", simple)
		if got != "false 0" {
			t.Fatalf("after %s, the next client's connection has: %s (origin set up, slots)", q, got)
		}
		_ = b.Close(ctx)
	}
	// A backup started in a session is that session's until it stops it.
	a := connect(t, srv.Addr())
	exec(t, a, "SELECT 1 FROM pg_backup_start('iso_b1', true)", simple)
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	b := connect(t, srv.Addr())
	exec(t, b, "SELECT 1 FROM pg_backup_start('iso_b2', true)", simple)
	exec(t, b, "SELECT 1 FROM pg_backup_stop(false)", simple)
}

// Comments and strings end where PostgreSQL's scanner ends them: a
// carriage return ends a -- comment, and a string continued on the next
// line keeps an E string's escapes. What follows is code, and a session
// change there is seen (adversary rounds 3 and 4: every later client got
// the role or setting).
func TestCommentsAndStringsEndAsPostgreSQLs(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	srv := pgtest.Coordinator(t, cl, poolSize(1)) // (one connection: B's is A's)
	for _, q := range []string{
		"SELECT 1 --x\r, set_config('work_mem', '5555kB', false)",
		"SELECT 1 --x\r; SET ROLE pg_monitor",
		"SELECT pg_backend_pid(), E'a'\n'\\''; SET ROLE pg_monitor; SELECT 'x'",
		"SELECT E'a'\n'\\'', set_config('work_mem', '5555kB', false), 'x'",
		// (A comment or a form feed between a name and its "(".)
		`SELECT "set_config" /**/ ('work_mem', '5555kB', false)`,
		"SELECT \"set_config\"\f('work_mem', '5555kB', false)",
		"SELECT \"set_config\" -- c\n('work_mem', '5555kB', false)",
	} {
		b := nextClient(t, connect(t, srv.Addr()), srv.Addr(), q)
		if got := queryString(t, b, "SELECT current_setting('work_mem') || ' ' || current_user", simple); got != "4MB postgres" {
			t.Fatalf("after %q, the next client has %s", q, got)
		}
		_ = b.Close(ctx)
	}
}

// The client-statement classifier sees session state however the
// statement spells it (adversary round 5): a built-in called in attribute
// notation, a temporary table made past the statement's first words or
// under a search_path that names pg_temp, and an extension's function that
// runs SQL text behind a schema named like a keyword. Every later client
// on the same server connection starts clean.
func TestClassifierSpellingsStayWithTheirClient(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	setup := connect(t, cl.Servers[0].Addr())
	exec(t, setup, `CREATE SCHEMA IF NOT EXISTS "type"`, simple)
	exec(t, setup, `CREATE EXTENSION IF NOT EXISTS tablefunc SCHEMA "type"`, simple)
	// (Built-in session functions called by a default and a domain.)
	exec(t, setup, "CREATE TABLE IF NOT EXISTS r5_d (a int, b bool DEFAULT pg_try_advisory_lock(4242))", simple)
	exec(t, setup, "DROP DOMAIN IF EXISTS r5_dom", simple)
	exec(t, setup, "CREATE DOMAIN r5_dom AS int CHECK (pg_try_advisory_lock(VALUE::bigint))", simple)
	t.Cleanup(func() {
		for _, q := range []string{`DROP SCHEMA IF EXISTS "type" CASCADE`, "DROP TABLE IF EXISTS r5_d", "DROP DOMAIN IF EXISTS r5_dom"} {
			_, _ = setup.Exec(ctx, q, simple)
		}
	})
	for _, qs := range [][]string{
		{`SELECT (42::bigint)."pg_advisory_lock"`},
		{"SELECT a, b, c, d, e, f, g, h, i, j, k, l INTO TEMP r5_wide FROM (SELECT 1 a, 2 b, 3 c, 4 d, 5 e, 6 f, 7 g, 8 h, 9 i, 10 j, 11 k, 12 l) x"},
		{"SELECT 1 AS a INTO LOCAL TEMP r5_local"},
		{"EXPLAIN ANALYZE CREATE TEMP TABLE r5_explain AS SELECT 1 AS a"},
		{"EXPLAIN (ANALYZE, COSTS false) CREATE TABLE pg_temp.r5_explain2 AS SELECT 1 AS a"},
		{"SET search_path = pg_temp, public", "CREATE TABLE r5_path (a int)"},
		{"BEGIN", "SET LOCAL search_path = nosuch_schema, pg_temp", "CREATE SEQUENCE r5_seq", "COMMIT"},
		{`SELECT * FROM type.crosstab('SELECT ''a''::text, ''b''::text, set_config(''work_mem'', ''5555kB'', false)') AS t(r text, b text)`},
		// Adversary round 6.
		{`select 1 as a into "pg_temp".r5_q`},
		{`select 1 as a into U&"pg\005Ftemp".r5_u`},
		{`select (42::bigint).U&"pg\005Fadvisory_lock"`},
		{`set search_path = E'pg\x5ftemp', public`, "create table r5_e (a int)"},
		{"INSERT INTO r5_d (a) VALUES (1)"},
		{"SELECT 7::r5_dom"},
		{"startup search_path", "create table r5_s (a int)"},
		{"startup search_path", "EXPLAIN ANALYZE CREATE TABLE r5_x AS SELECT 1 AS a"},
	} {
		t.Run(qs[len(qs)/2], func(t *testing.T) {
			srv := pgtest.Coordinator(t, cl, poolSize(1)) // (one connection: B's is A's)
			var a *pgx.Conn
			if qs[0] == "startup search_path" { // (PGOPTIONS='-c search_path=pg_temp,public')
				a, qs = connectWith(t, srv.Addr(), map[string]string{"search_path": "pg_temp, public"}), qs[1:]
			} else {
				a = connect(t, srv.Addr())
			}
			b := nextClient(t, a, srv.Addr(), qs...)
			got := queryString(t, b, `SELECT current_setting('work_mem') || ' ' || current_setting('search_path')
  || ' locks ' || (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid())
  || ' temp ' || (SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema())`, simple)
			if got != `4MB "$user", public locks 0 temp 0` {
				t.Errorf("after %q, the next client has %s", qs, got)
			}
			_ = b.Close(ctx)
		})
	}
}

// A database's own search_path naming pg_temp (ALTER DATABASE ... SET) makes
// CREATE TABLE make a temporary table in any database the coordinator
// serves, not only the catalog's (adversary round 7).
func TestDatabaseTempPathStaysWithItsClient(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	setup := connect(t, cl.Servers[0].Addr())
	_, _ = setup.Exec(ctx, "DROP DATABASE IF EXISTS r7db", simple)
	exec(t, setup, "CREATE DATABASE r7db", simple)
	exec(t, setup, "ALTER DATABASE r7db SET search_path = pg_temp, public", simple)
	srv := pgtest.Coordinator(t, cl, poolSize(1))
	url := "postgres://postgres@" + srv.Addr() + "/r7db?sslmode=disable"
	t.Cleanup(func() {
		srv.Close()
		_, _ = setup.Exec(ctx, "DROP DATABASE IF EXISTS r7db WITH (FORCE)", simple)
	})
	a := connectURL(t, url)
	exec(t, a, "CREATE TABLE r7_tt (a int)", simple)
	_ = a.Close(ctx)
	b := connectURL(t, url)
	if got := queryString(t, b, "SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema()", simple); got != "0" {
		t.Errorf("the next client in r7db has %s temporary tables", got)
	}
}

// User code that changes what the session-state read cannot see (random()'s
// seed, dblink connections, a loaded module, a placeholder a function's SET
// clause defines) pins the client that runs it, however the code is
// reached: a call, a trigger, a function calling one, a DO block, SQL
// given as text. The next client on the server connection starts clean
// (found, not mended, last stop; mended here).
func TestUnseenUserCodeStateStaysWithItsClient(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	setup := connect(t, cl.Servers[0].Addr())
	// random()'s first value after setseed(0.5), on a fresh backend.
	seeded := queryString(t, setup, "SELECT random()::text FROM (SELECT setseed(0.5)) s", simple)
	for _, q := range []string{
		"CREATE EXTENSION IF NOT EXISTS dblink",
		"CREATE OR REPLACE FUNCTION r6_seed() RETURNS int LANGUAGE plpgsql AS $$ BEGIN PERFORM setseed(0.5); RETURN 1; END $$",
		"CREATE OR REPLACE FUNCTION r6_outer() RETURNS int LANGUAGE sql AS $$ SELECT r6_seed() + 1 $$",
		"CREATE OR REPLACE FUNCTION r6_trg() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM r6_seed(); RETURN NEW; END $$",
		"CREATE TABLE IF NOT EXISTS r6_t (id int)",
		"DROP TRIGGER IF EXISTS r6_t ON r6_t",
		"CREATE TRIGGER r6_t BEFORE INSERT ON r6_t FOR EACH ROW EXECUTE FUNCTION r6_trg()",
		"CREATE OR REPLACE FUNCTION r6_link() RETURNS text LANGUAGE sql AS $$ SELECT dblink_connect('r6c', 'host=127.0.0.1 port=" +
			strconv.Itoa(cl.Servers[0].Port) + " user=postgres dbname=postgres') $$",
		"CREATE OR REPLACE FUNCTION r6_load() RETURNS int LANGUAGE plpgsql AS $$ BEGIN LOAD 'auto_explain'; RETURN 1; END $$",
		"CREATE OR REPLACE FUNCTION r6_ph() RETURNS text LANGUAGE sql SET r6.x = 'on' AS $$ SELECT current_setting('r6.x') $$",
		// (Adversary round 6: a BEGIN ATOMIC body, a default calling
		// setseed itself, a column named like such a function.)
		"CREATE OR REPLACE FUNCTION r6_atom() RETURNS void LANGUAGE sql BEGIN ATOMIC SELECT setseed(0.5); END",
		"CREATE TABLE IF NOT EXISTS r6_d (a int, b text DEFAULT setseed(0.5)::text)",
		"CREATE TABLE IF NOT EXISTS r6_cols (r6_ph text)",
		// (Adversary round 7: the seed setting, attribute notation, an
		// aggregate, a function running the SQL text it is given.)
		"CREATE OR REPLACE FUNCTION r7_s1() RETURNS void LANGUAGE plpgsql AS $$ BEGIN PERFORM set_config('seed', '0.5', false); END $$",
		"CREATE OR REPLACE FUNCTION r7_s2() RETURNS int LANGUAGE sql SET seed = 0.5 AS 'SELECT 1'",
		"CREATE TABLE IF NOT EXISTS r7_r (a int)",
		"INSERT INTO r7_r SELECT 1 WHERE NOT EXISTS (SELECT FROM r7_r)",
		"CREATE OR REPLACE FUNCTION r7_useed(r7_r) RETURNS int LANGUAGE plpgsql AS $$ BEGIN PERFORM setseed(0.5); RETURN 1; END $$",
		"CREATE OR REPLACE FUNCTION r7_sfn(int, int) RETURNS int LANGUAGE plpgsql AS $$ BEGIN PERFORM setseed(0.5); RETURN 1; END $$",
		`CREATE OR REPLACE FUNCTION "r9_my""seed"() RETURNS void LANGUAGE sql AS 'SELECT setseed(0.5)'`,
		// (A function writing a table whose trigger reaches setseed.)
		"CREATE OR REPLACE FUNCTION r8_log() RETURNS int LANGUAGE plpgsql AS $$ BEGIN INSERT INTO r6_t VALUES (8); RETURN 1; END $$",
		"DROP AGGREGATE IF EXISTS r7_agg(int)",
		"CREATE AGGREGATE r7_agg(int) (sfunc = r7_sfn, stype = int, initcond = '0')",
	} {
		exec(t, setup, q, simple)
	}
	t.Cleanup(func() {
		for _, q := range []string{"DROP AGGREGATE IF EXISTS r7_agg(int)", "DROP FUNCTION IF EXISTS r7_useed(r7_r)", "DROP TABLE IF EXISTS r6_t, r6_d, r6_cols, r7_r",
			"DROP FUNCTION IF EXISTS r6_trg(), r6_outer(), r6_seed(), r6_link(), r6_load(), r6_ph(), r6_atom(), r7_s1(), r7_s2(), r7_sfn(int, int), r7_cnt(), r8_log()",
			`DROP FUNCTION IF EXISTS "r9_my""seed"()`, "DROP EXTENSION IF EXISTS dblink"} {
			_, _ = setup.Exec(ctx, q, simple)
		}
	})
	for _, tc := range []struct {
		name string
		q    string
		mode pgx.QueryExecMode
		args []any
	}{
		{"call", "SELECT r6_seed()", simple, nil},
		{"call extended", "SELECT r6_seed()", pgx.QueryExecModeCacheStatement, nil},
		{"function calling it", "SELECT r6_outer()", simple, nil},
		{"trigger", "INSERT INTO r6_t VALUES (1)", simple, nil},
		{"trigger extended", "INSERT INTO r6_t VALUES (1)", pgx.QueryExecModeExec, nil},
		{"DO", "DO $$ BEGIN PERFORM setseed(0.5); END $$", simple, nil},
		{"SQL text", "SELECT query_to_xml('SELECT setseed(0.5)', true, false, '')", simple, nil},
		{"dblink", "SELECT r6_link()", simple, nil},
		{"LOAD", "SELECT r6_load()", simple, nil},
		{"placeholder", "SELECT r6_ph()", simple, nil},
		{"BEGIN ATOMIC", "SELECT r6_atom()", simple, nil},
		{"default", "INSERT INTO r6_d (a) VALUES (1)", simple, nil},
		{"LOAD E string", "DO $$ BEGIN EXECUTE 'LOAD E''auto_explain'''; END $$", simple, nil},
		{"U& call", `SELECT U&"set\0073eed"(0.5)`, simple, nil},
		{"set_config seed", "SELECT r7_s1()", simple, nil},
		{"SET seed clause", "SELECT r7_s2()", simple, nil},
		{"DO SET seed", "DO $$ BEGIN SET LOCAL seed = 0.5; END $$", simple, nil},
		{"attribute notation", "SELECT r7_r.r7_useed FROM r7_r", simple, nil},
		{"aggregate", "SELECT r7_agg(a) FROM r7_r", simple, nil},
		{"SQL text parameter", "SELECT query_to_xml($1, true, true, '')", pgx.QueryExecModeCacheStatement, []any{"select setseed(0.5)"}},
		{"SET seed in dynamic SQL", "DO $$ BEGIN EXECUTE 'SET seed TO 0.5'; END $$", simple, nil},
		{"function writing a table with such a trigger", "SELECT r8_log()", simple, nil},
		{"quoted name with a quote in it", `SELECT "r9_my""seed"()`, simple, nil},
		{"attribute notation with blanks", "SELECT r . r7_useed FROM r7_r r", simple, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := pgtest.Coordinator(t, cl, poolSize(1)) // (one connection: B's is A's)
			a := connect(t, srv.Addr())
			if _, err := a.Exec(ctx, tc.q, append([]any{tc.mode}, tc.args...)...); err != nil {
				t.Fatalf("%s: %v", tc.q, err)
			}
			b := nextClient(t, a, srv.Addr())
			got := queryString(t, b, `SELECT (random()::text = $1)::text || ' links ' || COALESCE(array_length(dblink_get_connections(), 1), 0)
  || ' modules ' || (SELECT count(*) FROM pg_settings WHERE name LIKE 'auto_explain.%')
  || ' placeholder ' || COALESCE(current_setting('r6.x', true), 'null')`, simple, seeded)
			if got != "false links 0 modules 0 placeholder null" {
				t.Errorf("after %q, the next client has: %s", tc.q, got)
			}
			_ = b.Close(ctx)
		})
	}
	// A column named like such a function is a column: reading it does
	// not pin (the next client gets the same server connection). (Written
	// t.r6_ph it does: attribute notation would call the function when t
	// had no such column.)
	srv := pgtest.Coordinator(t, cl, poolSize(1))
	a := connect(t, srv.Addr())
	pid := queryString(t, a, "SELECT pg_backend_pid()", simple)
	exec(t, a, "SELECT r6_ph FROM r6_cols", simple)
	exec(t, a, "SELECT r6_ph FROM r6_cols WHERE r6_ph IS NOT NULL", pgx.QueryExecModeCacheStatement)
	_ = a.Close(ctx)
	if got := queryString(t, connect(t, srv.Addr()), "SELECT pg_backend_pid()", simple); got != pid {
		t.Errorf("reading a column named like r6_ph() pinned the client: the next client has backend %s, not %s", got, pid)
	}
	// A function whose stored body names such a table is made on every
	// worker, as any function is: storing it runs nothing (adversary:
	// 0A000, the session pinned by the name in the body).
	exec(t, connect(t, srv.Addr()), "CREATE OR REPLACE FUNCTION r7_cnt() RETURNS int LANGUAGE sql AS 'SELECT count(*)::int FROM r6_t'", simple)
	// Data that mentions seed, load or pgfleet_1 is data (adversary
	// round 8: each pinned, or was refused).
	c := connect(t, srv.Addr())
	pid = queryString(t, c, "SELECT pg_backend_pid()", simple)
	for _, q := range []string{"SELECT md5('seed'), 'load' AS kind, 'pgfleet_1' AS label, r6_ph FROM r6_cols",
		"DO $$ BEGIN RAISE NOTICE 'pgfleet_2 migration done: seed and load'; END $$"} {
		exec(t, c, q, simple)
	}
	exec(t, c, "SELECT query_to_xml('SELECT 1', true, true, $1)", "pgfleet_1 seed")
	_ = c.Close(ctx)
	if got := queryString(t, connect(t, srv.Addr()), "SELECT pg_backend_pid()", simple); got != pid {
		t.Errorf("data naming seed, load or pgfleet_1 pinned the client: the next client has backend %s, not %s", got, pid)
	}
}

// SQL PREPARE, EXECUTE and DEALLOCATE of names pgfleet prepares its own
// statements under are refused with 0A000: PREPARE pgfleet_1 got 42P05
// where PostgreSQL succeeds, and EXECUTE pgfleet_1(41) ran pgfleet's
// statement, another client's text, where PostgreSQL says 26000.
func TestReservedStatementNames(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := context.Background()
	srv := pgtest.Coordinator(t, cl, poolSize(1))
	a := connect(t, srv.Addr())
	var n int
	if err := a.QueryRow(ctx, "SELECT $1::int + 1", 41).Scan(&n); err != nil || n != 42 { // (prepares pgfleet_1 on the connection)
		t.Fatal(n, err)
	}
	for _, q := range []string{"PREPARE pgfleet_1 AS SELECT 7", "EXECUTE pgfleet_1(41)", `execute "pgfleet_1" (41)`, "DEALLOCATE pgfleet_1",
		"DEALLOCATE PREPARE pgfleet_state", "EXPLAIN ANALYZE EXECUTE pgfleet_1(1)", "CREATE TABLE r7_t AS EXECUTE pgfleet_1(41)"} {
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
			_, err := a.Exec(ctx, q, mode)
			if code := sqlState(err); code != "0A000" {
				t.Errorf("%s (%v): %v, want 0A000", q, mode, err)
			}
		}
	}
	// Nor through dynamic SQL the client sends, or the function behind
	// pg_prepared_statements (adversary round 7).
	for _, q := range []string{"DO $$ BEGIN EXECUTE 'DEALLOCATE pgfleet_1'; END $$", "SELECT name, statement FROM pg_prepared_statement()"} {
		if _, err := a.Exec(ctx, q, pgx.QueryExecModeSimpleProtocol); sqlState(err) != "0A000" {
			t.Errorf("%s: %v, want 0A000", q, err)
		}
	}
	if _, err := a.Exec(ctx, "SELECT query_to_xml($1, true, true, '')", "EXECUTE pgfleet_1(41)"); sqlState(err) != "0A000" {
		t.Errorf("query_to_xml($1) of EXECUTE pgfleet_1: %v, want 0A000", err)
	}
	if err := a.QueryRow(ctx, "SELECT $1::int + 1", 41).Scan(&n); err != nil || n != 42 {
		t.Errorf("pgfleet's own statement after the refusals: %v %v", n, err)
	}
	// Other names work as on PostgreSQL.
	exec(t, a, "PREPARE pgfleet1 AS SELECT $1::int * 2", pgx.QueryExecModeSimpleProtocol)
	if got := queryString(t, a, "EXECUTE pgfleet1(21)", pgx.QueryExecModeSimpleProtocol); got != "42" {
		t.Errorf("EXECUTE pgfleet1(21) = %s", got)
	}
}

// nextClient runs qs on client a (simple protocol), disconnects it, and
// connects the client that comes after it: with a pool of one, on a's
// server connection unless a was pinned.
func nextClient(t *testing.T, a *pgx.Conn, addr string, qs ...string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	for _, q := range qs {
		if _, err := a.Exec(ctx, q, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("%q: %v", q, err)
		}
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return connect(t, addr)
}
