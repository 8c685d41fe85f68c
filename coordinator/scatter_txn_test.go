package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestMultiShardSelectInTransaction runs multi-shard SELECTs inside
// transaction blocks, in every protocol mode: under READ COMMITTED they
// see the transaction's own writes (the part for its worker runs on its
// connection) and give what the same statements give on an unsharded copy
// of the table, directly on a worker; under REPEATABLE READ or
// SERIALIZABLE they are refused, and the transaction fails; errors fail
// the transaction, as on PostgreSQL.
func TestMultiShardSelectInTransaction(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	direct := connect(t, cl.Servers[0].Addr())
	simple := pgx.QueryExecModeSimpleProtocol

	const schema = `
CREATE TABLE %[1]s_acc (aid bigint PRIMARY KEY, bid int NOT NULL, abalance int);
INSERT INTO %[1]s_acc SELECT g, g %% 7 + 1, (g * 37) %% 1000 - 300 FROM generate_series(1, 200) g;`
	twinTables(t, c, direct, "stx", schema, []string{"acc"}, []string{"SELECT create_distributed_table('stx_acc', 'aid', shard_count => 8)"})

	// Statements run the same way on both sides ({acc} is the table).
	type step struct {
		sql  string
		args []any
	}
	queries := []string{
		"SELECT count(*), sum(abalance) FROM {acc}",
		"SELECT aid, abalance FROM {acc} ORDER BY aid DESC LIMIT 3",
		"SELECT bid, count(*) FROM {acc} GROUP BY bid ORDER BY bid",
		"SELECT aid FROM {acc} WHERE abalance = 4242 ORDER BY aid",
	}
	compare := func(what string, mode pgx.QueryExecMode, before []step) {
		t.Helper()
		// The same statements in a transaction directly on PostgreSQL.
		dtx, err := direct.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = dtx.Rollback(ctx) }()
		for _, s := range before {
			if _, err := dtx.Exec(ctx, strings.ReplaceAll(s.sql, "{acc}", "stxp_acc"), append([]any{mode}, s.args...)...); err != nil {
				t.Fatalf("%s on PostgreSQL: %s: %v", what, s.sql, err)
			}
		}
		for _, q := range queries {
			got, err := scatterQuery(ctx, c, mode, strings.ReplaceAll(q, "{acc}", "stx_acc"), nil)
			if err != nil {
				t.Errorf("%s (%v): %s: %v", what, mode, q, err)
				continue
			}
			want, err := scatterQuery(ctx, direct, mode, strings.ReplaceAll(q, "{acc}", "stxp_acc"), nil)
			if err != nil {
				t.Fatalf("%s on PostgreSQL: %s: %v", what, q, err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s (%v): %s\n got %v\nwant %v", what, mode, q, got, want)
			}
		}
	}
	count := func(mode pgx.QueryExecMode) (string, error) {
		res, err := scatterQuery(ctx, c, mode, "SELECT count(*)::text FROM stx_acc", nil)
		if err != nil {
			return "", err
		}
		if len(res.rows) != 1 {
			return "", fmt.Errorf("%d rows", len(res.rows))
		}
		return res.rows[0], nil
	}
	hex := func(s string) string { return fmt.Sprintf("%x", s) }
	status := func() byte { return c.PgConn().TxStatus() }
	mustFail := func(what string, mode pgx.QueryExecMode, code string) {
		t.Helper()
		if _, err := scatterQuery(ctx, c, mode, "SELECT count(*) FROM stx_acc", nil); sqlState(err) != code {
			t.Errorf("%s (%v): multi-shard query: %v, want %s", what, mode, err, code)
		}
		if st := status(); st != 'E' {
			t.Errorf("%s (%v): transaction status %c, want E", what, mode, st)
		}
		// Later statements fail until ROLLBACK: multi-shard and others
		// (a routed one for another worker than the transaction's gets
		// 0A000 for that first).
		if _, err := scatterQuery(ctx, c, mode, "SELECT count(*) FROM stx_acc", nil); sqlState(err) != "25P02" {
			t.Errorf("%s (%v): then a multi-shard query: %v, want 25P02", what, mode, err)
		}
		if _, err := scatterQuery(ctx, c, mode, "SELECT $1::int", []any{7}); sqlState(err) != "25P02" {
			t.Errorf("%s (%v): then another query: %v, want 25P02", what, mode, err)
		}
		if _, err := scatterQuery(ctx, c, mode, "SELECT abalance FROM stx_acc WHERE aid = $1", []any{7}); sqlState(err) != "25P02" && sqlState(err) != "0A000" {
			t.Errorf("%s (%v): then a routed query: %v, want 25P02", what, mode, err)
		}
		if _, err := c.Exec(ctx, "ROLLBACK"); err != nil {
			t.Fatalf("%s (%v): ROLLBACK: %v", what, mode, err)
		}
		if got, err := count(mode); err != nil || got != hex("200") || status() != 'I' {
			t.Errorf("%s (%v): after ROLLBACK: %q, %v, status %c", what, mode, got, err, status())
		}
	}

	for _, mode := range scatterModes {
		// Rows of several shards (and so, with 8 shards on two workers,
		// both workers): the transaction's worker is the first shard's
		// (where the merge runs) or another.
		for _, aid := range []int{1001, 1002, 1003, 1004, 1005} {
			what := fmt.Sprintf("INSERT %d then multi-shard", aid)
			if _, err := c.Exec(ctx, "BEGIN"); err != nil {
				t.Fatal(err)
			}
			ins := step{"INSERT INTO {acc} (aid, bid, abalance) VALUES ($1, 3, 4242)", []any{aid}}
			if _, err := c.Exec(ctx, strings.ReplaceAll(ins.sql, "{acc}", "stx_acc"), mode, aid); err != nil {
				t.Fatalf("%s (%v): %v", what, mode, err)
			}
			compare(what, mode, []step{ins})
			if got, err := count(mode); err != nil || got != hex("201") {
				t.Errorf("%s (%v): count %q, %v, want 201", what, mode, got, err)
			}
			if st := status(); st != 'T' {
				t.Errorf("%s (%v): transaction status %c, want T", what, mode, st)
			}
			// A routed statement after it still runs in the transaction.
			if _, err := c.Exec(ctx, "UPDATE stx_acc SET abalance = abalance + 1 WHERE aid = $1", mode, aid); err != nil {
				t.Errorf("%s (%v): UPDATE after: %v", what, mode, err)
			}
			if _, err := c.Exec(ctx, "ROLLBACK"); err != nil {
				t.Fatal(err)
			}
			if got, err := count(mode); err != nil || got != hex("200") {
				t.Errorf("%s (%v): after ROLLBACK: count %q, %v, want 200", what, mode, got, err)
			}
		}

		// A transaction that spans both workers (rows of five shards):
		// the query reads on the transaction's connection to each, and
		// sees all its writes; an error in it fails the transaction,
		// whose ROLLBACK undoes the writes everywhere; COMMIT keeps them.
		for _, end := range []string{"ROLLBACK", "error", "COMMIT"} {
			what := "spanning, then " + end
			if _, err := c.Exec(ctx, "BEGIN"); err != nil {
				t.Fatal(err)
			}
			var steps []step
			for _, aid := range []int{1001, 1002, 1003, 1004, 1005} {
				ins := step{"INSERT INTO {acc} (aid, bid, abalance) VALUES ($1, 3, 4242)", []any{aid}}
				if _, err := c.Exec(ctx, strings.ReplaceAll(ins.sql, "{acc}", "stx_acc"), mode, aid); err != nil {
					t.Fatalf("%s (%v): %v", what, mode, err)
				}
				steps = append(steps, ins)
			}
			upd := step{"UPDATE {acc} SET abalance = abalance + 1 WHERE aid = $1", []any{7}}
			if _, err := c.Exec(ctx, strings.ReplaceAll(upd.sql, "{acc}", "stx_acc"), mode, 7); err != nil {
				t.Fatalf("%s (%v): %v", what, mode, err)
			}
			compare(what, mode, append(steps, upd))
			if got, err := count(mode); err != nil || got != hex("205") {
				t.Errorf("%s (%v): count %q, %v, want 205", what, mode, got, err)
			}
			switch end {
			case "error":
				if _, err := scatterQuery(ctx, c, mode, "SELECT sum(100 / (aid - 1003)) FROM stx_acc", nil); sqlState(err) != "22012" {
					t.Errorf("%s (%v): %v, want 22012", what, mode, err)
				}
				mustFail(what, mode, "25P02") // and rolls back
			default:
				if _, err := c.Exec(ctx, end); err != nil {
					t.Fatalf("%s (%v): %v", what, mode, err)
				}
			}
			want := "0"
			if end == "COMMIT" {
				want = "5"
			}
			if got := queryString(t, c, "SELECT count(*)::text FROM stx_acc WHERE aid > 1000"); got != want {
				t.Errorf("%s (%v): %s rows left, want %s", what, mode, got, want)
			}
			if end == "COMMIT" {
				exec(t, c, "DELETE FROM stx_acc WHERE aid > 1000", simple)
				exec(t, c, "UPDATE stx_acc SET abalance = abalance - 1 WHERE aid = 7", simple)
			}
		}

		// Multi-shard first, while BEGIN is deferred; then a routed write
		// and COMMIT.
		what := "multi-shard then UPDATE"
		if _, err := c.Exec(ctx, "BEGIN"); err != nil {
			t.Fatal(err)
		}
		compare(what, mode, nil)
		if st := status(); st != 'T' {
			t.Errorf("%s (%v): transaction status %c, want T", what, mode, st)
		}
		if _, err := c.Exec(ctx, "UPDATE stx_acc SET abalance = 4242 WHERE aid = $1", mode, 11); err != nil {
			t.Errorf("%s (%v): UPDATE: %v", what, mode, err)
		}
		compare(what+" (after the UPDATE)", mode, []step{{"UPDATE {acc} SET abalance = 4242 WHERE aid = $1", []any{11}}})
		if _, err := c.Exec(ctx, "COMMIT"); err != nil {
			t.Fatalf("%s (%v): COMMIT: %v", what, mode, err)
		}
		if got := queryString(t, c, "SELECT aid::text FROM stx_acc WHERE abalance = 4242"); got != "11" {
			t.Errorf("%s (%v): committed: %q", what, mode, got)
		}
		exec(t, c, "UPDATE stx_acc SET abalance = (11 * 37) % 1000 - 300 WHERE aid = 11", simple)

		// A transaction whose snapshot spans its statements: refused.
		for _, begin := range []string{
			"BEGIN ISOLATION LEVEL REPEATABLE READ",
			"START TRANSACTION READ ONLY, ISOLATION LEVEL SERIALIZABLE",
			"BEGIN; SET TRANSACTION ISOLATION LEVEL REPEATABLE READ",
			"BEGIN ISOLATION LEVEL SERIALIZABLE; SELECT abalance FROM stx_acc WHERE aid = 5",
		} {
			for _, stmt := range strings.Split(begin, "; ") {
				if _, err := c.Exec(ctx, stmt); err != nil {
					t.Fatalf("%s: %v", stmt, err)
				}
			}
			mustFail(begin, mode, "0A000")
		}
		// ... by the session's default.
		exec(t, c, "SET default_transaction_isolation = 'repeatable read'")
		for _, begin := range []string{"BEGIN", "BEGIN; SELECT abalance FROM stx_acc WHERE aid = 5"} {
			for _, stmt := range strings.Split(begin, "; ") {
				if _, err := c.Exec(ctx, stmt); err != nil {
					t.Fatalf("%s: %v", stmt, err)
				}
			}
			mustFail("default_transaction_isolation, "+begin, mode, "0A000")
		}
		exec(t, c, "RESET default_transaction_isolation")
		// READ COMMITTED said explicitly works.
		if _, err := c.Exec(ctx, "BEGIN ISOLATION LEVEL READ COMMITTED"); err != nil {
			t.Fatal(err)
		}
		compare("BEGIN ISOLATION LEVEL READ COMMITTED", mode, nil)
		if _, err := c.Exec(ctx, "COMMIT"); err != nil {
			t.Fatal(err)
		}
		// After a SET in the block, a multi-shard read reads under the
		// block's settings on every worker, as PostgreSQL's one backend.
		for _, set := range []string{"SET LOCAL search_path = pg_catalog, public", "SET search_path = pg_catalog, public"} {
			if _, err := c.Exec(ctx, "BEGIN"); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Exec(ctx, set); err != nil {
				t.Fatal(err)
			}
			compare(set, mode, []step{{set, nil}})
			if _, err := c.Exec(ctx, "ROLLBACK"); err != nil {
				t.Fatal(err)
			}
		}
		// Custom settings too, which pg_settings does not list
		// (adversary: after SET LOCAL app.tenant a multi-shard count
		// filtered on it counted only the transaction's worker's rows).
		counted := func(what, sql, want string) {
			t.Helper()
			res, err := scatterQuery(ctx, c, mode, sql, nil)
			if err != nil || len(res.rows) != 1 || res.rows[0] != hex(want) {
				t.Errorf("%s (%v): %s: %v, %v, want %s", what, mode, sql, res, err, want)
			}
		}
		for _, set := range []string{"SET LOCAL app.stx = '5'", "SET app.stx = '5'"} {
			if _, err := c.Exec(ctx, "BEGIN"); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Exec(ctx, set); err != nil {
				t.Fatal(err)
			}
			counted(set, "SELECT count(*)::text FROM stx_acc WHERE current_setting('app.stx', true) = '5'", "200")
			if _, err := c.Exec(ctx, "ROLLBACK"); err != nil {
				t.Fatal(err)
			}
			counted(set+", rolled back", "SELECT count(*)::text FROM stx_acc WHERE current_setting('app.stx', true) = '5'", "0")
		}
		// RESET ALL empties the session's custom settings (adversary
		// round 15: the count read 'a' on the other workers).
		exec(t, c, "SET app.stx = 'a'")
		if _, err := c.Exec(ctx, "BEGIN"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Exec(ctx, "RESET ALL"); err != nil {
			t.Fatal(err)
		}
		counted("RESET ALL after SET app.stx", "SELECT count(*)::text FROM stx_acc WHERE current_setting('app.stx', true) = ''", "200")
		if _, err := c.Exec(ctx, "ROLLBACK"); err != nil {
			t.Fatal(err)
		}
		counted("RESET ALL rolled back", "SELECT count(*)::text FROM stx_acc WHERE current_setting('app.stx', true) = 'a'", "200")
		exec(t, c, "RESET app.stx")
		// The session's own value set again in the block is the value
		// every connection has.
		exec(t, c, "SET app.stx = '5'")
		if _, err := c.Exec(ctx, "BEGIN"); err != nil {
			t.Fatal(err)
		}
		exec(t, c, "SET LOCAL app.stx = '5'")
		res, err := scatterQuery(ctx, c, mode, "SELECT count(*)::text FROM stx_acc WHERE current_setting('app.stx', true) = '5'", nil)
		if err != nil || len(res.rows) != 1 || res.rows[0] != hex("200") {
			t.Errorf("SET LOCAL app.stx to the session's value (%v): %v, %v, want 200 rows counted", mode, res, err)
		}
		exec(t, c, "COMMIT")
		exec(t, c, "RESET app.stx")

		// A shard's error fails the transaction, on the transaction's
		// worker or another; BEGIN held or deferred.
		for _, aid := range []int{0, 1001, 1002, 1003} {
			what := fmt.Sprintf("division by zero after INSERT %d", aid)
			if _, err := c.Exec(ctx, "BEGIN"); err != nil {
				t.Fatal(err)
			}
			if aid != 0 {
				if _, err := c.Exec(ctx, "INSERT INTO stx_acc (aid, bid, abalance) VALUES ($1, 3, 4242)", mode, aid); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := scatterQuery(ctx, c, mode, "SELECT sum(100 / (aid - 5)) FROM stx_acc", nil); sqlState(err) != "22012" {
				t.Errorf("%s (%v): %v, want 22012", what, mode, err)
			}
			if _, err := scatterQuery(ctx, c, mode, "SELECT aid / (aid - 5) FROM stx_acc", nil); sqlState(err) != "25P02" {
				t.Errorf("%s (%v): then: %v, want 25P02", what, mode, err)
			}
			mustFail(what, mode, "25P02")
			if got := queryString(t, c, "SELECT count(*)::text FROM stx_acc WHERE aid > 1000"); got != "0" {
				t.Errorf("%s (%v): rolled back rows: %s", what, mode, got)
			}
		}
	}
	if got := queryString(t, c, "SELECT 'still usable'"); got != "still usable" {
		t.Error(got)
	}
}
