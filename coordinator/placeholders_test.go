package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// A custom setting (app.tenant) that one client defined with SET stays
// defined in the worker's backend after the client is gone: RESET ALL
// leaves it, with an empty value. The next client on that server
// connection must see what a fresh PostgreSQL session shows: no such
// setting (current_setting(name, true) NULL, SHOW 42704), not an empty
// string. Each case runs its statements on a client, disconnects it and
// asks the next one, with a pool of one connection; the client's own
// session keeps PostgreSQL's answers, checked against the worker.
func TestPlaceholderStaysWithItsClient(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	srv := pgtest.Coordinator(t, cl, poolSize(1))
	direct := connect(t, cl.Servers[0].Addr())

	// read is what a client sees of the setting: its value, "<null>", or
	// the SQLSTATE of SHOW's error.
	read := func(t *testing.T, c *pgx.Conn, name string, mode pgx.QueryExecMode) (value, show string) {
		t.Helper()
		var v *string
		if err := c.QueryRow(ctx, "SELECT current_setting($1, true)", mode, name).Scan(&v); err != nil {
			t.Fatalf("current_setting(%q, true): %v", name, err)
		}
		value = "<null>"
		if v != nil {
			value = "'" + *v + "'"
		}
		var s string
		if err := c.QueryRow(ctx, "SHOW "+name, simple).Scan(&s); err != nil {
			show = sqlState(err)
		} else {
			show = "'" + s + "'"
		}
		return value, show
	}

	for i, tc := range []struct {
		name string
		qs   []string // the first client's statements, name app.<name>
	}{
		{"session SET", []string{"SET app.%s = '7'"}},
		{"SET then RESET", []string{"SET app.%s = '7'", "RESET app.%s"}},
		{"RESET ALL", []string{"SET app.%s = '7'", "RESET ALL"}},
		{"DISCARD ALL", []string{"SET app.%s = '7'", "DISCARD ALL"}},
		{"SET LOCAL committed", []string{"BEGIN", "SET LOCAL app.%s = '7'", "COMMIT"}},
		{"SET rolled back", []string{"BEGIN", "SET app.%s = '7'", "ROLLBACK"}},
		{"SET in a failed block", []string{"BEGIN", "SET app.%s = '7'", "SELECT 1/0", "ROLLBACK"}},
		{"SET TO DEFAULT", []string{"SET app.%s TO DEFAULT"}},
		{"left in an open block", []string{"BEGIN", "SET LOCAL app.%s = '7'"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("app.ph%d", i)
			a := connect(t, srv.Addr())
			for _, q := range tc.qs {
				q = strings.ReplaceAll(q, "app.%s", name)
				if _, err := a.Exec(ctx, q, simple); err != nil && q != "SELECT 1/0" {
					t.Fatalf("%q: %v", q, err)
				}
			}
			// The client's own session first, as PostgreSQL's after the
			// same statements (in a block left open: after its ROLLBACK).
			if tc.name == "left in an open block" {
				exec(t, a, "ROLLBACK", simple)
				exec(t, direct, "BEGIN", simple)
				exec(t, direct, "SET LOCAL "+name+" = '7'", simple)
				exec(t, direct, "ROLLBACK", simple)
			} else {
				for _, q := range tc.qs {
					_, _ = direct.Exec(ctx, strings.ReplaceAll(q, "app.%s", name), simple)
				}
			}
			wantV, wantS := read(t, direct, name, simple)
			if v, s := read(t, a, name, simple); v != wantV || s != wantS {
				t.Errorf("the client itself: current_setting %s, SHOW %s; PostgreSQL: %s, %s", v, s, wantV, wantS)
			}
			if tc.name == "left in an open block" {
				exec(t, a, "BEGIN", simple)
				exec(t, a, "SET LOCAL "+name+" = '8'", simple)
			}
			if err := a.Close(ctx); err != nil {
				t.Fatal(err)
			}
			for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeExec} {
				b := connect(t, srv.Addr())
				if v, s := read(t, b, name, mode); v != "<null>" || s != "42704" {
					t.Errorf("the next client (%v): current_setting %s, SHOW %s; want <null>, 42704 as in a fresh session", mode, v, s)
				}
				_ = b.Close(ctx)
			}
		})
	}

	// A client whose statement only sets the name cannot tell whether
	// the connection had it: it takes the same connection (no new
	// backend), in either protocol and as the first statement of a block,
	// and reads its own value.
	pid := func(c *pgx.Conn) string { return queryString(t, c, "SELECT pg_backend_pid()::text", simple) }
	a0 := connect(t, srv.Addr())
	exec(t, a0, "SET app.reuse = '1'", simple)
	was := pid(a0)
	_ = a0.Close(ctx)
	for i, qs := range [][]string{{"SET app.reuse = '2'"}, {"BEGIN", "SET LOCAL app.reuse = '2'"}, {"RESET app.reuse", "SET app.reuse = '2'"}} {
		for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeExec} {
			c := connect(t, srv.Addr())
			for _, q := range qs {
				if _, err := c.Exec(ctx, q, mode); err != nil {
					t.Fatalf("%q: %v", q, err)
				}
			}
			if got := queryString(t, c, "SELECT current_setting('app.reuse')", simple); got != "2" {
				t.Errorf("case %d (%v): the client's own value reads %q, want 2", i, mode, got)
			}
			if now := pid(c); now != was {
				t.Errorf("case %d (%v): %v took a new backend (%s, was %s)", i, mode, qs, now, was)
			}
			_ = c.Close(ctx)
		}
	}

	// A client that defined the name keeps getting its value, and one
	// that did not, when every pooled connection defines it, still gets
	// served.
	a := connect(t, srv.Addr())
	exec(t, a, "SET app.kept = 'x'", simple)
	for i := 0; i < 3; i++ {
		if got := queryString(t, a, "SELECT current_setting('app.kept')"); got != "x" {
			t.Fatalf("the client's own setting reads %q, want x", got)
		}
	}
	b := connect(t, srv.Addr())
	var n int
	if err := b.QueryRow(ctx, "SELECT count(*) FROM pg_settings WHERE name = 'app.kept'").Scan(&n); err != nil {
		t.Fatalf("a client without the setting, its own one connection held by nobody: %v", err)
	}
	if got := queryString(t, a, "SELECT current_setting('app.kept')"); got != "x" {
		t.Fatalf("after another client's statement the setting reads %q, want x", got)
	}
}
