package coordinator_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestSettingsAcrossTxnEndInString: a query string (or a pipeline before
// its Sync) whose COMMIT or ROLLBACK ends a transaction in its middle keeps
// the settings PostgreSQL keeps: those of a committed transaction stay,
// those of a rolled-back one go, whatever the rest of the string does
// (adversary: after "SET TimeZone = 'Asia/Tokyo'; COMMIT; SELECT 1/0" the
// worker connection kept Asia/Tokyo while the session forgot it, and the
// pool gave it to the next client, with search_path and custom settings
// too; and the client itself lost settings a later statement changed).
// One pooled connection, so every client gets the one A used; each
// client's settings are checked against plain PostgreSQL's.
func TestSettingsAcrossTxnEndInString(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(1))
	_ = oracleDB(t, cl.Servers[1].Addr(), "settxnend_oracle")
	oracleURL := strings.Replace(pgtest.URL(cl.Servers[1].Addr()), "/postgres?", "/settxnend_oracle?", 1)
	ctx := context.Background()
	show := "SELECT current_setting('TimeZone') || ' ' || current_setting('DateStyle') || ' ' || '2026-03-04'::date::text || ' ' || current_setting('search_path') || ' ' || current_setting('extra_float_digits') || ' ' || coalesce(nullif(current_setting('app.tenant', true), ''), '-')"
	// Each case: what client A sends (in one string), then what A and a
	// new client B see, as on PostgreSQL (where B's is the defaults).
	cases := []struct{ name, setup, str, after string }{
		{"committed then error", "", "SET TimeZone = 'Asia/Tokyo'; COMMIT; SELECT 1/0", ""},
		{"block committed then error", "", "BEGIN; SET search_path = pg_catalog; COMMIT; SELECT 1/0", ""},
		{"end then error", "", "START TRANSACTION; SET TimeZone = 'Asia/Tokyo'; END; SELECT 1/0", ""},
		{"committed then set then error", "", "SET DateStyle = 'German'; COMMIT; SET TimeZone = 'Asia/Tokyo'; SELECT 1/0", ""},
		{"committed then set local", "", "SET extra_float_digits = 0; COMMIT; SET LOCAL TimeZone = 'Asia/Tokyo'; SELECT 1/0", ""},
		{"committed then reset", "", "SET TimeZone = 'Asia/Tokyo'; COMMIT; RESET TimeZone; SELECT 1/0", ""},
		{"custom", "SET app.tenant = '0'", "SET app.tenant = '7'; COMMIT; SELECT 1/0", ""},
		{"rolled back then set", "", "SET TimeZone = 'Asia/Tokyo'; ROLLBACK; SET DateStyle = 'German'", ""},
		{"committed block then failed block", "", "BEGIN; SET TimeZone = 'Asia/Tokyo'; COMMIT; BEGIN; SELECT 1/0", "ROLLBACK"},
		{"reset committed then error", "SET search_path = pg_catalog", "RESET search_path; COMMIT; SELECT 1/0", ""},
		{"failed block rolled back then set", "BEGIN; SELECT 1/0", "ROLLBACK; SET TimeZone = 'Asia/Tokyo'", ""},
		// A partial DateStyle committed, the string ending in a block:
		// the value is the worker's (SQL, DMY), known at the block's end.
		{"partial datestyle then failed block", "SET DateStyle = 'German'", "SET DateStyle = 'SQL'; COMMIT; BEGIN; SELECT 1/0", "ROLLBACK"},
		{"partial datestyle then chain", "SET DateStyle = 'German'", "BEGIN; SET DateStyle = 'SQL'; COMMIT AND CHAIN", "ROLLBACK"},
		{"partial order then block", "SET DateStyle = 'German'", "SET DateStyle = 'ymd'; COMMIT; BEGIN", "COMMIT"},
	}
	for _, tc := range cases {
		var got, want [2]string
		for i, addr := range []string{srv.Addr(), ""} {
			var a *pgx.Conn
			if addr != "" {
				a = connect(t, addr)
			} else {
				var err error
				if a, err = pgx.Connect(ctx, oracleURL); err != nil {
					t.Fatal(err)
				}
				defer a.Close(ctx)
			}
			run := func(sql string) {
				if sql != "" {
					_, _ = a.PgConn().Exec(ctx, sql).ReadAll() // errors are part of the case
				}
			}
			run(tc.setup)
			run(tc.str)
			run(tc.after)
			var s string
			if err := a.QueryRow(ctx, show, pgx.QueryExecModeSimpleProtocol).Scan(&s); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			got[i] = s
			if addr != "" {
				// B: a new client on the same coordinator, after A.
				b := connect(t, addr)
				if err := b.QueryRow(ctx, show, pgx.QueryExecModeSimpleProtocol).Scan(&s); err != nil {
					t.Fatalf("%s: B: %v", tc.name, err)
				}
				want[0] = s
				// A again, after B used the connection.
				if err := a.QueryRow(ctx, show, pgx.QueryExecModeSimpleProtocol).Scan(&s); err != nil {
					t.Fatalf("%s: A again: %v", tc.name, err)
				}
				want[1] = s
				_ = b.Close(ctx)
				_ = a.Close(ctx)
			}
		}
		// got[0]: A through the coordinator; got[1]: A on PostgreSQL.
		// want[0]: B (the defaults); want[1]: A after B.
		if got[0] != got[1] {
			t.Errorf("%s: A sees %q, PostgreSQL %q", tc.name, got[0], got[1])
		}
		if want[1] != got[1] {
			t.Errorf("%s: A after another client sees %q, PostgreSQL %q", tc.name, want[1], got[1])
		}
		var def string
		fresh := connect(t, cl.Servers[0].Addr())
		if err := fresh.QueryRow(ctx, show, pgx.QueryExecModeSimpleProtocol).Scan(&def); err != nil {
			t.Fatal(err)
		}
		_ = fresh.Close(ctx)
		if want[0] != def {
			t.Errorf("%s: a new client sees %q, want the defaults %q", tc.name, want[0], def)
		}
	}
}
