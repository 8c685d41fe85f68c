package coordinator_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestDedicatedConnectionsKeepRoleAndSettings: statements that run on new
// worker connections (multi-row INSERT over several shards, COPY,
// reference-table writes, DDL on distributed and reference tables) in a
// session whose role or settings live on its pinned connection (SET ROLE,
// set_config(), a DO block) get PostgreSQL's answer (permission denied)
// or 0A000, never run as the login user or under other settings
// (adversary 2, items 1 and 2).
func TestDedicatedConnectionsKeepRoleAndSettings(t *testing.T) {
	cl := pgtest.Shared(t)
	// (Pool sizes: with 2 workers the last connection of each pool serves
	// only sessions that hold another worker's (pooling.Pool's classes);
	// the pinned sessions here hold connections for good.)
	a := pgtest.Coordinator(t, cl, poolSize(6))
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	for _, s := range cl.Servers {
		w := connect(t, s.Addr())
		exec(t, w, "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ds_ro') THEN CREATE ROLE ds_ro; END IF; END $$")
		t.Cleanup(func() { _, _ = w.Exec(context.Background(), "DROP ROLE IF EXISTS ds_ro") })
	}
	c := connect(t, a.Addr())
	for _, q := range []string{
		"DROP TABLE IF EXISTS ds_d", "DROP TABLE IF EXISTS ds_r",
		"CREATE TABLE ds_d (id int PRIMARY KEY, ts timestamptz, dt date)", "CREATE TABLE ds_r (id int PRIMARY KEY, v text)",
		"INSERT INTO ds_r VALUES (1, 'a')",
		"SELECT create_distributed_table('ds_d', 'id')", "SELECT create_reference_table('ds_r')",
	} {
		exec(t, c, q, simple)
	}
	t.Cleanup(func() {
		for _, q := range []string{"SELECT undistribute_table('ds_d')", "SELECT undistribute_table('ds_r')",
			"DROP TABLE IF EXISTS ds_d", "DROP TABLE IF EXISTS ds_r"} {
			_, _ = c.Exec(ctx, q, simple)
		}
	})
	for _, s := range cl.Servers {
		w := connect(t, s.Addr())
		for _, q := range []string{"GRANT SELECT ON ds_d, ds_r TO ds_ro"} {
			_, _ = w.Exec(ctx, q)
		}
	}
	state := func() string {
		t.Helper()
		f := connect(t, a.Addr())
		var d, r string
		rows, err := f.Query(ctx, `SELECT id || '/' || coalesce(ts::text, '') || '/' || coalesce(dt::text, '') FROM ds_d ORDER BY id`, simple)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var v string
			_ = rows.Scan(&v)
			d += v + ","
		}
		rows.Close()
		if rows.Err() != nil {
			t.Fatal(rows.Err())
		}
		if err := f.QueryRow(ctx, `SELECT coalesce(string_agg(id || v, ',' ORDER BY id), '') FROM ds_r`, simple).Scan(&r); err != nil {
			t.Fatal(err)
		}
		var cols int
		if err := f.QueryRow(ctx, `SELECT count(*) FROM information_schema.columns WHERE table_name = 'ds_d'`, simple).Scan(&cols); err != nil {
			t.Fatal(err)
		}
		return d + " | " + r + " | " + string(rune('0'+cols))
	}
	before := state()
	ro := connect(t, a.Addr())
	exec(t, ro, "SET ROLE ds_ro", simple)
	for _, q := range []string{
		"INSERT INTO ds_d (id) VALUES (50), (51), (52), (53)",
		"INSERT INTO ds_r (id, v) VALUES (50, 'x')",
		"DELETE FROM ds_r WHERE id = 1",
		"ALTER TABLE ds_d ADD COLUMN zz int",
		"TRUNCATE ds_r",
		"COPY ds_d (id) FROM STDIN",
	} {
		var err error
		if strings.HasPrefix(q, "COPY") {
			_, err = ro.PgConn().CopyFrom(ctx, strings.NewReader("60\n61\n62\n63\n"), q)
		} else {
			_, err = ro.Exec(ctx, q, simple)
		}
		if st := sqlState(err); st != "42501" && st != "0A000" {
			t.Errorf("SET ROLE ds_ro; %s: %v, want 42501 or 0A000", q, err)
		}
	}
	if got := state(); got != before {
		t.Fatalf("writes under a role without privileges changed the tables:\n%s\n%s", before, got)
	}
	// Settings changed where the text shows no SET: each write either
	// stores what PostgreSQL would under them or is refused.
	tz := connect(t, a.Addr())
	exec(t, tz, "SELECT set_config('TimeZone', 'Asia/Tokyo', false)", simple)
	ds := connect(t, a.Addr())
	exec(t, ds, "DO $$ BEGIN PERFORM set_config('DateStyle', 'SQL, DMY', false); END $$", simple)
	for _, w := range []struct {
		c    *pgx.Conn
		sql  string
		copy string
	}{
		{tz, "INSERT INTO ds_d (id, ts) VALUES (20, '2020-01-01 00:00'), (21, '2020-01-01 00:00'), (22, '2020-01-01 00:00'), (23, '2020-01-01 00:00')", ""},
		{tz, "COPY ds_d (id, ts) FROM STDIN", "24\t2020-01-01 00:00\n25\t2020-01-01 00:00\n26\t2020-01-01 00:00\n"},
		{ds, "INSERT INTO ds_d (id, dt) VALUES (30, '01/02/2020'), (31, '01/02/2020'), (32, '01/02/2020'), (33, '01/02/2020')", ""},
		{ds, "COPY ds_d (id, dt) FROM STDIN", "34\t01/02/2020\n35\t01/02/2020\n36\t01/02/2020\n"},
	} {
		var err error
		if w.copy != "" {
			_, err = w.c.PgConn().CopyFrom(ctx, strings.NewReader(w.copy), w.sql)
		} else {
			_, err = w.c.Exec(ctx, w.sql, simple)
		}
		if err != nil && sqlState(err) != "0A000" {
			t.Errorf("%s: %v, want success or 0A000", w.sql, err)
		}
	}
	f := connect(t, a.Addr())
	var bad int
	if err := f.QueryRow(ctx, `SELECT count(*) FROM ds_d WHERE (ts IS NOT NULL AND ts <> '2020-01-01 00:00+09')
		OR (dt IS NOT NULL AND dt <> '2020-02-01')`, simple).Scan(&bad); err != nil || bad != 0 {
		t.Fatalf("%d rows stored under the wrong settings (%v)", bad, err)
	}
}
