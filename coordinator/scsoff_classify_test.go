package coordinator_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// Under standard_conforming_strings = off a backslash escapes a quote in
// a plain string, so 'a\” is the string a' and what follows is a
// statement of its own: a SET there changes the session and must stay
// with its client, as every SET does.
func TestSetAfterBackslashQuoteUnderSCSOffStaysWithItsClient(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(1))
	a, b := connect(t, srv.Addr()), connect(t, srv.Addr())
	exec(t, a, "SET standard_conforming_strings = off")
	exec(t, a, `SELECT 'a\'' ; SET statement_timeout = '77s'; --'`, pgx.QueryExecModeSimpleProtocol)
	if got := queryString(t, b, "SHOW statement_timeout"); got == "77s" {
		t.Errorf("a SET after 'a\\'' under standard_conforming_strings off leaked into another session")
	}
	if got := queryString(t, a, "SHOW statement_timeout"); got != "77s" {
		t.Errorf("statement_timeout = %q in the session that set it, want 77s", got)
	}
	if got := queryString(t, b, "SHOW standard_conforming_strings"); got != "on" {
		t.Errorf("standard_conforming_strings = %q in another session", got)
	}
}

// The same on the extended protocol: a statement is classified once for
// every session with the setting on; one whose backslashes make it read
// otherwise (a set_config call outside the string) is refused.
func TestPreparedStatementReadingOtherwiseUnderSCSOffIsRefused(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(1))
	a, b := connect(t, srv.Addr()), connect(t, srv.Addr())
	exec(t, a, "SET standard_conforming_strings = off")
	_, err := a.Exec(context.Background(), `SELECT 'a\'' , set_config('statement_timeout', '77s', false), $1::int --'`, 1)
	if sqlState(err) != "0A000" {
		t.Errorf("prepared statement calling set_config after 'a\\'': err %v, want 0A000", err)
	}
	if got := queryString(t, b, "SHOW statement_timeout"); got == "77s" {
		t.Errorf("statement_timeout leaked into another session")
	}
	// A backslash that changes nothing is served.
	if got := queryString(t, a, `SELECT 'x\\y' || $1::text`, ""); got != `x\y` {
		t.Errorf("SELECT 'x\\\\y' = %q, want x\\y", got)
	}
}
