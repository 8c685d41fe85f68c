package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// spanningTable creates a distributed table name (aid bigint, n int >= 0)
// with rows 1..100 at n = 100 and returns two keys on different workers.
func spanningTable(t *testing.T, c *pgx.Conn, name string) (k1, k2 int) {
	t.Helper()
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	drop := func() {
		_, _ = c.Exec(ctx, "SELECT undistribute_table('"+name+"')", simple)
		_, _ = c.Exec(ctx, "DROP TABLE IF EXISTS "+name, simple)
	}
	drop()
	t.Cleanup(drop)
	exec(t, c, "CREATE TABLE "+name+" (aid bigint PRIMARY KEY, n int CHECK (n >= 0))", simple)
	exec(t, c, "INSERT INTO "+name+" SELECT g, 100 FROM generate_series(1, 100) g", simple)
	exec(t, c, "SELECT create_distributed_table('"+name+"', 'aid', shard_count => 4)", simple)
	k1, w1 := 1, workerOfAid(t, c, name, 1)
	k2 = 2
	for ; workerOfAid(t, c, name, k2) == w1; k2++ {
		if k2 > 100 {
			t.Fatal("every key on one worker")
		}
	}
	return k1, k2
}

// txnRunner runs statements in one protocol: the simple one, or the
// extended one (unnamed statements, as libpq's PQexecParams and pgx do).
type txnRunner struct {
	t        *testing.T
	c        *pgx.Conn
	extended bool
}

func (r txnRunner) run(sql string, args ...any) (string, error) {
	ctx := context.Background()
	if !r.extended {
		tag, err := r.c.Exec(ctx, sql, append([]any{pgx.QueryExecModeSimpleProtocol}, args...)...)
		return tag.String(), err
	}
	if len(args) == 0 {
		tag, err := r.c.PgConn().ExecParams(ctx, sql, nil, nil, nil, nil).Close()
		return tag.String(), err
	}
	tag, err := r.c.Exec(ctx, sql, append([]any{pgx.QueryExecModeExec}, args...)...)
	return tag.String(), err
}

func (r txnRunner) must(sql string, args ...any) string {
	r.t.Helper()
	tag, err := r.run(sql, args...)
	if err != nil {
		r.t.Fatalf("%s: %v", sql, err)
	}
	return tag
}

func (r txnRunner) status() byte { return r.c.PgConn().TxStatus() }

func (r txnRunner) name() string {
	if r.extended {
		return "extended"
	}
	return "simple"
}

// TestTransactionChain: COMMIT AND CHAIN and ROLLBACK AND CHAIN (in every
// spelling) end a transaction over two workers on both and start the next
// one, as PostgreSQL does; AND NO CHAIN is a plain end.
func TestTransactionChain(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(8))
	ctx := context.Background()
	c := connect(t, srv.Addr())
	k1, k2 := spanningTable(t, c, "ch_acc")
	reader := connect(t, srv.Addr())
	val := func(k int) int {
		t.Helper()
		var n int
		if err := reader.QueryRow(ctx, "SELECT n FROM ch_acc WHERE aid = $1", k).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, extended := range []bool{false, true} {
		r := txnRunner{t: t, c: c, extended: extended}
		check := func(what string, want1, want2 int) {
			t.Helper()
			if r.status() != 'I' {
				t.Fatalf("%s %s: status %c, want I", r.name(), what, r.status())
			}
			if a, b := val(k1), val(k2); a != want1 || b != want2 {
				t.Errorf("%s %s: n = %d, %d; want %d, %d", r.name(), what, a, b, want1, want2)
			}
			r.must("UPDATE ch_acc SET n = 100 WHERE aid = $1", k1)
			r.must("UPDATE ch_acc SET n = 100 WHERE aid = $1", k2)
		}
		both := func(d int) {
			t.Helper()
			r.must("UPDATE ch_acc SET n = n + $2 WHERE aid = $1", k1, d)
			r.must("UPDATE ch_acc SET n = n + $2 WHERE aid = $1", k2, d)
		}
		for _, sp := range []struct{ commit, rollback string }{
			{"COMMIT AND CHAIN", "ROLLBACK AND CHAIN"},
			{"commit work and chain", "rollback work and chain"},
			{"END TRANSACTION AND CHAIN", "ABORT TRANSACTION AND CHAIN"},
			{"/* c */ Commit -- why\n  And Chain ;", "abort/**/and\tchain"},
		} {
			what := fmt.Sprintf("%q", sp.commit)
			// ROLLBACK AND CHAIN, then COMMIT: nothing of the first
			// transaction, all of the second.
			r.must("BEGIN")
			both(1)
			if tag := r.must(sp.rollback); tag != "ROLLBACK" || r.status() != 'T' {
				t.Errorf("%s %q: tag %q status %c, want ROLLBACK T", r.name(), sp.rollback, tag, r.status())
			}
			r.must("UPDATE ch_acc SET n = n + 2 WHERE aid = $1", k2)
			r.must("COMMIT")
			check(what+" rollback chain then commit", 100, 102)

			// COMMIT AND CHAIN, then ROLLBACK: all of the first, nothing
			// of the second.
			r.must("BEGIN")
			both(3)
			if tag := r.must(sp.commit); tag != "COMMIT" || r.status() != 'T' {
				t.Errorf("%s %q: tag %q status %c, want COMMIT T", r.name(), sp.commit, tag, r.status())
			}
			if a, b := val(k1), val(k2); a != 103 || b != 103 {
				t.Errorf("%s %s: after COMMIT AND CHAIN another session reads %d, %d; want 103, 103", r.name(), what, a, b)
			}
			both(5)
			r.must("ROLLBACK")
			check(what+" commit chain then rollback", 103, 103)

			// Chained twice, over both workers each time.
			r.must("BEGIN")
			both(1)
			r.must(sp.commit)
			both(1)
			r.must(sp.commit)
			both(1)
			r.must("COMMIT")
			check(what+" chained twice", 103, 103)
		}

		// AND NO CHAIN is a plain end.
		r.must("BEGIN")
		both(4)
		if tag := r.must("COMMIT AND NO CHAIN"); tag != "COMMIT" || r.status() != 'I' {
			t.Errorf("%s COMMIT AND NO CHAIN: %q %c", r.name(), tag, r.status())
		}
		check("COMMIT AND NO CHAIN", 104, 104)
		r.must("BEGIN")
		both(4)
		if tag := r.must("rollback work and no chain"); tag != "ROLLBACK" || r.status() != 'I' {
			t.Errorf("%s ROLLBACK AND NO CHAIN: %q %c", r.name(), tag, r.status())
		}
		check("ROLLBACK AND NO CHAIN", 100, 100)

		// The chained transaction keeps the characteristics.
		r.must("BEGIN ISOLATION LEVEL REPEATABLE READ")
		both(1)
		r.must("COMMIT AND CHAIN")
		if got := queryString(t, c, "SHOW transaction_isolation", pgx.QueryExecModeSimpleProtocol); got != "repeatable read" {
			t.Errorf("%s: chained transaction's isolation %q, want repeatable read", r.name(), got)
		}
		r.must("UPDATE ch_acc SET n = n + 1 WHERE aid = $1", k1)
		r.must("ROLLBACK AND CHAIN")
		r.must("UPDATE ch_acc SET n = n + 1 WHERE aid = $1", k2)
		if got := queryString(t, c, "SHOW transaction_isolation", pgx.QueryExecModeSimpleProtocol); got != "repeatable read" {
			t.Errorf("%s: isolation after ROLLBACK AND CHAIN %q, want repeatable read", r.name(), got)
		}
		r.must("COMMIT")
		check("chained characteristics", 101, 102)

		r.must("BEGIN READ ONLY")
		r.must("SELECT n FROM ch_acc WHERE aid = $1", k1)
		r.must("SELECT n FROM ch_acc WHERE aid = $1", k2)
		r.must("COMMIT AND CHAIN")
		if _, err := r.run("UPDATE ch_acc SET n = 0 WHERE aid = $1", k2); sqlState(err) != "25006" {
			t.Errorf("%s: write in the chained READ ONLY transaction: %v, want 25006", r.name(), err)
		}
		r.must("ROLLBACK")
		check("chained read only", 100, 100)

		// A failed transaction: COMMIT AND CHAIN answers ROLLBACK and
		// starts a transaction with the session's defaults (PostgreSQL
		// 15), as on a plain server (below).
		for _, end := range []string{"COMMIT AND CHAIN", "ROLLBACK AND CHAIN"} {
			r.must("BEGIN ISOLATION LEVEL SERIALIZABLE")
			both(1)
			if _, err := r.run("UPDATE ch_acc SET n = n - 1000 WHERE aid = $1", k2); sqlState(err) != "23514" {
				t.Fatalf("%s: check violation: %v", r.name(), err)
			}
			if tag := r.must(end); tag != "ROLLBACK" || r.status() != 'T' {
				t.Errorf("%s %s of a failed transaction: %q %c, want ROLLBACK T", r.name(), end, tag, r.status())
			}
			if got := queryString(t, c, "SHOW transaction_isolation", pgx.QueryExecModeSimpleProtocol); got != "read committed" {
				t.Errorf("%s: isolation after %s of a failed transaction %q, want read committed", r.name(), end, got)
			}
			both(2)
			r.must("COMMIT")
			check(end+" of a failed transaction", 102, 102)
		}

		// One worker only: the worker chains itself.
		r.must("BEGIN")
		r.must("UPDATE ch_acc SET n = n + 1 WHERE aid = $1", k1)
		r.must("SET work_mem = '9MB'")
		r.must("COMMIT AND CHAIN")
		r.must("UPDATE ch_acc SET n = n + 1 WHERE aid = $1", k1)
		r.must("ROLLBACK AND CHAIN")
		r.must("UPDATE ch_acc SET n = n + 5 WHERE aid = $1", k1)
		r.must("ROLLBACK")
		check("one worker", 101, 100)
		if got := queryString(t, c, "SHOW work_mem", pgx.QueryExecModeSimpleProtocol); got != "9MB" {
			t.Errorf("%s: SET committed by COMMIT AND CHAIN then ROLLBACK: work_mem %q, want 9MB", r.name(), got)
		}
		r.must("RESET work_mem")

		// One worker, failed: the worker answers ROLLBACK and starts the
		// next transaction; a second worker in it is refused (its
		// characteristics are the worker's to know), not wrong.
		r.must("BEGIN")
		if _, err := r.run("UPDATE ch_acc SET n = n - 1000 WHERE aid = $1", k1); sqlState(err) != "23514" {
			t.Fatalf("%s: check violation: %v", r.name(), err)
		}
		if tag := r.must("COMMIT AND CHAIN"); tag != "ROLLBACK" || r.status() != 'T' {
			t.Errorf("%s: one worker, failed, COMMIT AND CHAIN: %q %c", r.name(), tag, r.status())
		}
		r.must("UPDATE ch_acc SET n = n + 3 WHERE aid = $1", k1)
		if _, err := r.run("UPDATE ch_acc SET n = n + 3 WHERE aid = $1", k2); err != nil && sqlState(err) != "0A000" {
			t.Errorf("%s: second worker after a chain from a failed transaction: %v", r.name(), err)
		} else if err == nil {
			r.must("ROLLBACK")
			check("one worker failed chain, second worker", 100, 100)
		} else {
			r.must("ROLLBACK")
			check("one worker failed chain", 100, 100)
		}
		r.must("BEGIN")
		r.run("UPDATE ch_acc SET n = n - 1000 WHERE aid = $1", k1)
		r.must("ROLLBACK AND CHAIN")
		r.must("UPDATE ch_acc SET n = n + 3 WHERE aid = $1", k1)
		r.must("COMMIT")
		check("one worker failed, rollback chain", 103, 100)

		// The chained transaction has the ended one's characteristics,
		// not those of the defaults its SETs changed: a second worker
		// taken in after the chain gets the same (difftest seed 54 found
		// a write refused with 25006 on it after RESET ALL of a startup
		// default_transaction_read_only; the other way round a write
		// went through in a READ ONLY transaction).
		r.must("BEGIN")
		r.must("UPDATE ch_acc SET n = n + 1 WHERE aid = $1", k1)
		r.must("SET default_transaction_read_only = on")
		r.must("COMMIT AND CHAIN")
		if _, err := r.run("UPDATE ch_acc SET n = n + 1 WHERE aid = $1", k2); err != nil {
			t.Errorf("%s: write on a second worker in a transaction chained from a read-write one: %v", r.name(), err)
		}
		r.must("COMMIT")
		// The session's default is read only now.
		r.must("BEGIN")
		r.must("SELECT n FROM ch_acc WHERE aid = $1", k1)
		r.must("RESET default_transaction_read_only")
		r.must("COMMIT AND CHAIN")
		if _, err := r.run("UPDATE ch_acc SET n = 0 WHERE aid = $1", k2); sqlState(err) != "25006" {
			t.Errorf("%s: write on a second worker in a transaction chained from a read-only one: %v, want 25006", r.name(), err)
		}
		r.must("ROLLBACK")
		check("chains after SET and RESET of default_transaction_read_only", 101, 101)

		// No worker touched yet (BEGIN deferred).
		r.must("BEGIN ISOLATION LEVEL SERIALIZABLE")
		if tag := r.must("COMMIT AND CHAIN"); tag != "COMMIT" || r.status() != 'T' {
			t.Errorf("%s: deferred COMMIT AND CHAIN: %q %c", r.name(), tag, r.status())
		}
		if got := queryString(t, c, "SHOW transaction_isolation", pgx.QueryExecModeSimpleProtocol); got != "serializable" {
			t.Errorf("%s: deferred chain isolation %q, want serializable", r.name(), got)
		}
		r.must("ROLLBACK")
		r.must("BEGIN")
		r.must("ROLLBACK AND CHAIN")
		both(7)
		r.must("ROLLBACK AND CHAIN")
		r.must("UPDATE ch_acc SET n = n + 1 WHERE aid = $1", k1)
		r.must("COMMIT")
		check("deferred chains", 101, 100)

		// Outside a transaction block: PostgreSQL's error.
		if _, err := r.run("COMMIT AND CHAIN"); sqlState(err) != "25P01" {
			t.Errorf("%s: COMMIT AND CHAIN outside a transaction: %v, want 25P01", r.name(), err)
		}
		if r.status() != 'I' {
			t.Errorf("%s: status %c after COMMIT AND CHAIN outside a transaction", r.name(), r.status())
		}
	}
}

// TestTransactionChainOracle: a plain PostgreSQL server answers the
// statements TestTransactionChain expects as it expects them.
func TestTransactionChainOracle(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := context.Background()
	c := connect(t, cl.Servers[0].Addr())
	exec(t, c, "CREATE TEMP TABLE ch_oracle (n int CHECK (n >= 0))")
	r := txnRunner{t: t, c: c}
	r.must("BEGIN ISOLATION LEVEL SERIALIZABLE")
	if _, err := r.run("INSERT INTO ch_oracle VALUES (-1)"); sqlState(err) != "23514" {
		t.Fatal(err)
	}
	if tag := r.must("COMMIT AND CHAIN"); tag != "ROLLBACK" || r.status() != 'T' {
		t.Errorf("oracle: %q %c", tag, r.status())
	}
	if got := queryString(t, c, "SHOW transaction_isolation"); got != "read committed" {
		t.Errorf("oracle: isolation after chain of a failed transaction %q", got)
	}
	r.must("ROLLBACK")
	for _, ro := range []string{"on", "off"} {
		r.must("BEGIN")
		r.must("SET default_transaction_read_only = " + ro)
		r.must("COMMIT AND CHAIN")
		want := map[string]string{"on": "off", "off": "on"}[ro]
		if got := queryString(t, c, "SHOW transaction_read_only"); got != want {
			t.Errorf("oracle: transaction_read_only after SET default_transaction_read_only = %s and a chain: %q, want %q", ro, got, want)
		}
		r.must("COMMIT")
	}
	if _, err := c.Exec(ctx, "COMMIT AND CHAIN"); sqlState(err) != "25P01" {
		t.Errorf("oracle: COMMIT AND CHAIN outside: %v", err)
	}
}

// TestTransactionCharacteristicsOracle: statements that set transaction
// characteristics (SET SESSION CHARACTERISTICS and the default_transaction_*
// settings it sets, SET TRANSACTION before AND CHAIN) give through a
// coordinator, with writes on both workers, what a plain PostgreSQL gives
// (found by an adversary: writes accepted in READ ONLY transactions, and
// refused in read-write ones, after RESET of a setting SET SESSION
// CHARACTERISTICS had set, and after SET TRANSACTION READ ONLY; COMMIT AND
// CHAIN).
func TestTransactionCharacteristicsOracle(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(8))
	ctx := context.Background()
	c := connect(t, srv.Addr())
	k1, k2 := spanningTable(t, c, "chc_acc")
	w := connect(t, cl.Servers[0].Addr())
	_, _ = w.Exec(ctx, "DROP DATABASE IF EXISTS chc_oracle WITH (FORCE)")
	exec(t, w, "CREATE DATABASE chc_oracle")
	t.Cleanup(func() { _, _ = w.Exec(context.Background(), "DROP DATABASE IF EXISTS chc_oracle WITH (FORCE)") })
	oc, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@%s/chc_oracle?sslmode=disable", cl.Servers[0].Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer oc.Close(ctx)
	exec(t, oc, "CREATE TABLE chc_acc (aid bigint PRIMARY KEY, n int CHECK (n >= 0))")
	exec(t, oc, "INSERT INTO chc_acc SELECT g, 100 FROM generate_series(1, 100) g")
	sequences := [][]string{
		{"SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE", "RESET default_transaction_isolation",
			"BEGIN", "SELECT n FROM chc_acc WHERE aid = $1", "SHOW transaction_isolation", "UPDATE chc_acc SET n = n + 1 WHERE aid = $2", "COMMIT"},
		{"SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY", "RESET default_transaction_read_only",
			"UPDATE chc_acc SET n = n + 1 WHERE aid = $1", "BEGIN", "UPDATE chc_acc SET n = n + 1 WHERE aid = $2", "COMMIT"},
		{"SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY, DEFERRABLE", "SHOW default_transaction_deferrable",
			"UPDATE chc_acc SET n = n + 1 WHERE aid = $1", "BEGIN", "SHOW transaction_read_only", "UPDATE chc_acc SET n = n + 1 WHERE aid = $2",
			"ROLLBACK", "SET default_transaction_read_only = off", "UPDATE chc_acc SET n = n + 1 WHERE aid = $2", "RESET ALL"},
		{"BEGIN", "SELECT n FROM chc_acc WHERE aid = $1", "SET TRANSACTION READ ONLY", "COMMIT AND CHAIN",
			"UPDATE chc_acc SET n = n + 1 WHERE aid = $2", "ROLLBACK"},
		{"BEGIN", "SELECT n FROM chc_acc WHERE aid = $1", "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ", "COMMIT AND CHAIN",
			"SELECT n FROM chc_acc WHERE aid = $2", "SELECT current_setting('transaction_isolation') FROM chc_acc WHERE aid = $2", "COMMIT"},
		// A transaction begun by AND CHAIN keeps its characteristics
		// through a failure; one begun by BEGIN with modes does not.
		{"BEGIN READ ONLY", "COMMIT AND CHAIN", "SELECT 1/0", "ROLLBACK AND CHAIN", "SHOW transaction_read_only",
			"UPDATE chc_acc SET n = n + 1 WHERE aid = $1", "ROLLBACK AND CHAIN", "SHOW transaction_read_only", "COMMIT"},
		{"BEGIN ISOLATION LEVEL SERIALIZABLE, READ ONLY, DEFERRABLE", "COMMIT AND CHAIN", "SELECT n FROM chc_acc WHERE aid = $1",
			"SELECT n FROM chc_acc WHERE aid = $2", "SELECT 1/0", "COMMIT AND CHAIN", "SELECT current_setting('transaction_isolation') FROM chc_acc WHERE aid = $2",
			"SHOW transaction_deferrable", "UPDATE chc_acc SET n = n + 1 WHERE aid = $2", "ROLLBACK"},
		{"BEGIN READ ONLY", "SELECT n FROM chc_acc WHERE aid = $1", "SELECT 1/0", "ROLLBACK AND CHAIN", "SHOW transaction_read_only",
			"UPDATE chc_acc SET n = n + 1 WHERE aid = $2", "COMMIT"},
		{"BEGIN READ ONLY", "SELECT n FROM chc_acc WHERE aid = $1", "COMMIT AND CHAIN", "UPDATE chc_acc SET n = n + 1 WHERE aid = $1",
			"ROLLBACK AND CHAIN", "UPDATE chc_acc SET n = n + 1 WHERE aid = $2", "ROLLBACK"},
	}
	for _, extended := range []bool{false, true} {
		for i, seq := range sequences {
			got := runSequence(txnRunner{t: t, c: c, extended: extended}, seq, k1, k2)
			want := runSequence(txnRunner{t: t, c: oc, extended: extended}, seq, k1, k2)
			for j := range seq {
				if got[j] != want[j] {
					t.Errorf("extended %v, sequence %d, %s: coordinator %q, PostgreSQL %q", extended, i, seq[j], got[j], want[j])
				}
			}
			for _, x := range []*pgx.Conn{c, oc} {
				_, _ = x.Exec(ctx, "ROLLBACK", pgx.QueryExecModeSimpleProtocol)
				_, _ = x.Exec(ctx, "RESET ALL", pgx.QueryExecModeSimpleProtocol)
			}
		}
	}
}

// runSequence runs statements ($1 and $2 bound to k1 and k2 where they
// appear) and returns each one's outcome: the SQLSTATE, or the first
// value of its first row, or its tag.
func runSequence(r txnRunner, seq []string, k1, k2 int) []string {
	ctx := context.Background()
	out := make([]string, len(seq))
	for i, q := range seq {
		var args []any
		switch {
		case strings.Contains(q, "$2") && strings.Contains(q, "$1"):
			args = []any{k1, k2}
		case strings.Contains(q, "$2"):
			q = strings.ReplaceAll(q, "$2", "$1")
			args = []any{k2}
		case strings.Contains(q, "$1"):
			args = []any{k1}
		}
		if strings.HasPrefix(q, "SELECT") || strings.HasPrefix(q, "SHOW") {
			mode := pgx.QueryExecModeExec
			if !r.extended {
				mode = pgx.QueryExecModeSimpleProtocol
			}
			var v any
			if err := r.c.QueryRow(ctx, q, append([]any{mode}, args...)...).Scan(&v); err != nil {
				out[i] = "error " + sqlState(err)
			} else {
				out[i] = fmt.Sprint(v)
			}
			continue
		}
		tag, err := r.run(q, args...)
		if err != nil {
			out[i] = "error " + sqlState(err)
		} else {
			out[i] = tag
		}
	}
	return out
}
