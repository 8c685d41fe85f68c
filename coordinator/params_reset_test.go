package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// connectWith connects with startup parameters.
func connectWith(t *testing.T, addr string, params map[string]string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(pgtest.URL(addr))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range params {
		cfg.RuntimeParams[k] = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// answer runs sql and gives its first value, or "error <SQLSTATE>".
func answer(c *pgx.Conn, sql string, mode pgx.QueryExecMode) string {
	rows, err := c.Query(context.Background(), sql, mode)
	if err != nil {
		return "error " + sqlState(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		v, err := rows.Values()
		if err != nil || len(v) == 0 {
			break
		}
		s, _ := v[0].(string)
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return "error " + sqlState(err)
	}
	if rows.CommandTag().String() != "" && len(out) == 0 {
		return rows.CommandTag().String()
	}
	return strings.Join(out, "|")
}

// TestSessionSettingsMatchPostgres: SET, RESET, SET ... TO DEFAULT, RESET
// ALL and DISCARD ALL leave the session's settings as PostgreSQL leaves
// them (the startup packet's values after RESET, the value the server
// reports after SETs that combine, custom placeholders that stay defined),
// on whatever server connection the next statement gets: another client
// uses the only pooled connection between any two statements. A plain
// PostgreSQL session with the same startup packet is the oracle.
func TestSessionSettingsMatchPostgres(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(1))
	startup := map[string]string{"DateStyle": "SQL, DMY", "options": "-c custom.z=7 -c extra_float_digits=2"}
	scripts := [][]string{
		{"SET datestyle = iso", "RESET datestyle", "SHOW datestyle"},
		{"SET datestyle TO iso", "SET datestyle TO ymd", "SHOW datestyle", "SELECT '01/02/03'::date::text"},
		{"SET datestyle TO german", "SET datestyle TO DEFAULT", "SHOW datestyle"},
		{"SET custom.x = 42", "RESET custom.x", "SHOW custom.x"},
		{"SET custom.x = 42", "SHOW custom.x", "RESET ALL", "SHOW custom.x", "SHOW datestyle", "SHOW extra_float_digits", "SHOW custom.z"},
		{"SET custom.z = 8", "RESET custom.z", "SHOW custom.z"},
		{"SET custom.a = 1", "SET custom.b = 2", "SHOW custom.a", "SHOW custom.b"},
		{"SET extra_float_digits = 0", "SET datestyle = postgres", "DISCARD ALL", "SHOW extra_float_digits", "SHOW datestyle"},
		{"BEGIN", "SET datestyle = iso", "RESET datestyle", "SHOW datestyle", "COMMIT", "SHOW datestyle"},
		{"BEGIN", "RESET datestyle", "ROLLBACK", "SHOW datestyle"},
		{"BEGIN", "SET LOCAL custom.l = 5", "COMMIT", "SHOW custom.l"},
		{"SET TIME ZONE 'Asia/Tokyo'", "SET TIME ZONE LOCAL", "SHOW timezone"},
		{"SET auto_explain.log_min_duration = 'bogus'", "LOAD 'auto_explain'", "SHOW auto_explain.log_min_duration"},
	}
	other := connect(t, srv.Addr())
	run := 0
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		for _, interleave := range []bool{false, true} {
			for _, script := range scripts {
				// Placeholders stay defined on a pooled connection:
				// fresh names for each run.
				run++
				fresh := strings.NewReplacer("custom.x", fmt.Sprintf("custom.x%d", run), "custom.a", fmt.Sprintf("custom.a%d", run),
					"custom.b", fmt.Sprintf("custom.b%d", run), "custom.l", fmt.Sprintf("custom.l%d", run))
				c := connectWith(t, srv.Addr(), startup)
				oracle := connectWith(t, cl.Servers[0].Addr(), startup)
				for _, sql := range script {
					sql = fresh.Replace(sql)
					want := answer(oracle, sql, mode)
					if interleave && (strings.HasPrefix(sql, "SHOW") || strings.HasPrefix(sql, "SELECT")) {
						// Another client takes the connection in between.
						answer(other, "SHOW datestyle", mode)
					}
					if got := answer(c, sql, mode); got != want {
						t.Errorf("%v interleaved %v %q: %s: got %q, PostgreSQL %q", mode, interleave, script, sql, got, want)
					}
				}
				_ = c.Close(context.Background())
				_ = oracle.Close(context.Background())
			}
		}
	}

	// RESET of a startup setting followed by other statements in one
	// query: refused (the statements would run with the server's default).
	c := connectWith(t, srv.Addr(), startup)
	if _, err := c.Exec(context.Background(), "RESET datestyle; SELECT 1", pgx.QueryExecModeSimpleProtocol); sqlState(err) != "0A000" {
		t.Errorf("RESET then another statement in one query: %v, want 0A000", err)
	}
	if got := answer(c, "SHOW datestyle", pgx.QueryExecModeSimpleProtocol); got != "SQL, DMY" {
		t.Errorf("after the refused query: datestyle %q", got)
	}
}

// TestResetInTransactionAcrossWorkers: RESET in a transaction holds on a
// worker the transaction takes in after it (set again there after BEGIN,
// as SET is), back to the client's startup value, and ROLLBACK undoes it
// on both.
func TestResetInTransactionAcrossWorkers(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(8))
	c := connectWith(t, srv.Addr(), map[string]string{"DateStyle": "SQL, DMY"})
	k1, k2 := spanningTable(t, c, "rs_acc")
	simple := pgx.QueryExecModeSimpleProtocol
	exec(t, c, "SET datestyle = 'German'", simple)
	exec(t, c, "BEGIN", simple)
	exec(t, c, "UPDATE rs_acc SET n = n + 1 WHERE aid = $1", simple, k1)
	exec(t, c, "RESET datestyle", simple)
	if got := answer(c, "SHOW datestyle", simple); got != "SQL, DMY" {
		t.Errorf("RESET in a transaction: datestyle %q, want the startup value SQL, DMY", got)
	}
	if got := queryString(t, c, "SELECT current_setting('datestyle') FROM rs_acc WHERE aid = $1", simple, k2); got != "SQL, DMY" {
		t.Errorf("second worker after RESET: datestyle %q, want the startup value SQL, DMY", got)
	}
	exec(t, c, "ROLLBACK", simple)
	if got := answer(c, "SHOW datestyle", simple); got != "German, DMY" {
		t.Errorf("after ROLLBACK: datestyle %q, want German, DMY", got)
	}

	// SET LOCAL ... TO DEFAULT is the startup value too, for the
	// transaction, on both workers (adversary round 15: the server's).
	exec(t, c, "BEGIN", simple)
	exec(t, c, "UPDATE rs_acc SET n = n + 1 WHERE aid = $1", simple, k1)
	exec(t, c, "SET LOCAL datestyle TO DEFAULT", simple)
	if got := answer(c, "SHOW datestyle", simple); got != "SQL, DMY" {
		t.Errorf("SET LOCAL datestyle TO DEFAULT: %q, want the startup value SQL, DMY", got)
	}
	if got := queryString(t, c, "SELECT current_setting('datestyle') FROM rs_acc WHERE aid = $1", simple, k2); got != "SQL, DMY" {
		t.Errorf("second worker after SET LOCAL TO DEFAULT: datestyle %q, want SQL, DMY", got)
	}
	exec(t, c, "COMMIT", simple)
	if got := answer(c, "SHOW datestyle", simple); got != "German, DMY" {
		t.Errorf("after COMMIT of SET LOCAL TO DEFAULT: datestyle %q, want German, DMY", got)
	}
	if _, err := c.Exec(context.Background(), "BEGIN; SET LOCAL datestyle TO DEFAULT; SELECT 1", simple); sqlState(err) != "0A000" {
		t.Errorf("SET LOCAL TO DEFAULT then another statement in one query: %v, want 0A000", err)
	}
}
