package coordinator_test

import (
	"context"
	"fmt"
	osexec "os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// workerOf is the worker a key of a distributed table lives on, from the
// first line of the coordinator's EXPLAIN.
func workerOfAid(t *testing.T, c *pgx.Conn, table string, key int) string {
	t.Helper()
	line := queryString(t, c, fmt.Sprintf("EXPLAIN SELECT * FROM %s WHERE aid = %d", table, key), pgx.QueryExecModeSimpleProtocol)
	i := strings.LastIndex(line, " on worker ")
	if i < 0 {
		t.Fatalf("EXPLAIN: %q", line)
	}
	return line[i+len(" on worker "):]
}

// TestTransactionAcrossWorkers: a client transaction that touches rows on
// both workers commits on both or on neither, through both protocols.
func TestTransactionAcrossWorkers(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(8))
	ctx := context.Background()
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	drop := func() {
		for _, q := range []string{"SELECT undistribute_table('mw_acc')", "SELECT undistribute_table('mw_ref')", "DROP TABLE IF EXISTS mw_acc, mw_ref"} {
			_, _ = c.Exec(ctx, q, simple)
		}
	}
	drop()
	t.Cleanup(drop)
	exec(t, c, "CREATE TABLE mw_acc (aid bigint PRIMARY KEY, n int CHECK (n >= 0))", simple)
	exec(t, c, "INSERT INTO mw_acc SELECT g, 100 FROM generate_series(1, 100) g", simple)
	exec(t, c, "CREATE TABLE mw_ref (bid int PRIMARY KEY, total int)", simple)
	exec(t, c, "INSERT INTO mw_ref VALUES (1, 0)", simple)
	exec(t, c, "SELECT create_distributed_table('mw_acc', 'aid', shard_count => 4)", simple)
	exec(t, c, "SELECT create_reference_table('mw_ref')", simple)

	// Two keys on different workers.
	k1, w1 := 1, workerOfAid(t, c, "mw_acc", 1)
	k2 := 2
	for ; workerOfAid(t, c, "mw_acc", k2) == w1; k2++ {
		if k2 > 100 {
			t.Fatal("every key on one worker")
		}
	}
	val := func(k int) int {
		t.Helper()
		var n int
		if err := c.QueryRow(ctx, "SELECT n FROM mw_acc WHERE aid = $1", k).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	check := func(what string, want1, want2 int) {
		t.Helper()
		if a, b := val(k1), val(k2); a != want1 || b != want2 {
			t.Errorf("%s: n = %d, %d; want %d, %d", what, a, b, want1, want2)
		}
	}
	for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeCacheStatement} {
		exec(t, c, "UPDATE mw_acc SET n = 100 WHERE aid = $1", mode, k1)
		exec(t, c, "UPDATE mw_acc SET n = 100 WHERE aid = $1", mode, k2)

		// COMMIT: both updated.
		exec(t, c, "BEGIN", mode)
		exec(t, c, "UPDATE mw_acc SET n = n - 10 WHERE aid = $1", mode, k1)
		exec(t, c, "UPDATE mw_acc SET n = n + 10 WHERE aid = $1", mode, k2)
		// Back on the first worker: its transaction sees its own write.
		if n := val(k1); n != 90 {
			t.Errorf("%v: inside the transaction n = %d, want 90", mode, n)
		}
		exec(t, c, "COMMIT", mode)
		check(fmt.Sprintf("%v after COMMIT", mode), 90, 110)

		// ROLLBACK: neither.
		exec(t, c, "BEGIN", mode)
		exec(t, c, "UPDATE mw_acc SET n = n - 10 WHERE aid = $1", mode, k1)
		exec(t, c, "UPDATE mw_acc SET n = n + 10 WHERE aid = $1", mode, k2)
		exec(t, c, "ROLLBACK", mode)
		check(fmt.Sprintf("%v after ROLLBACK", mode), 90, 110)

		// An error on the second worker: COMMIT answers ROLLBACK.
		exec(t, c, "BEGIN", mode)
		exec(t, c, "UPDATE mw_acc SET n = n - 10 WHERE aid = $1", mode, k1)
		if _, err := c.Exec(ctx, "UPDATE mw_acc SET n = n - 1000 WHERE aid = $1", mode, k2); sqlState(err) != "23514" {
			t.Errorf("%v: check violation on the second worker: %v", mode, err)
		}
		if _, err := c.Exec(ctx, "SELECT n FROM mw_acc WHERE aid = $1", mode, k1); sqlState(err) != "25P02" {
			t.Errorf("%v: first worker after the error: %v, want 25P02", mode, err)
		}
		tag, err := c.Exec(ctx, "COMMIT", mode)
		if err != nil || tag.String() != "ROLLBACK" {
			t.Errorf("%v: COMMIT of the failed transaction: %q, %v; want ROLLBACK", mode, tag, err)
		}
		check(fmt.Sprintf("%v after the failed transaction", mode), 90, 110)

		// SAVEPOINT in a transaction over both workers, and a second
		// worker after a savepoint: ROLLBACK TO undoes both workers' work
		// after it (TestSavepointsAcrossWorkers compares more with
		// PostgreSQL).
		exec(t, c, "BEGIN", mode)
		exec(t, c, "UPDATE mw_acc SET n = n + 1 WHERE aid = $1", mode, k1)
		exec(t, c, "UPDATE mw_acc SET n = n + 1 WHERE aid = $1", mode, k2)
		exec(t, c, "SAVEPOINT s1", mode)
		exec(t, c, "UPDATE mw_acc SET n = n + 5 WHERE aid = $1", mode, k2)
		exec(t, c, "ROLLBACK TO SAVEPOINT s1", mode)
		exec(t, c, "ROLLBACK", mode)
		exec(t, c, "BEGIN", mode)
		exec(t, c, "UPDATE mw_acc SET n = n - 1 WHERE aid = $1", mode, k1)
		exec(t, c, "SAVEPOINT s1", mode)
		exec(t, c, "UPDATE mw_acc SET n = n + 1 WHERE aid = $1", mode, k2)
		exec(t, c, "ROLLBACK TO SAVEPOINT s1", mode)
		exec(t, c, "UPDATE mw_acc SET n = n + 1 WHERE aid = $1", mode, k1)
		exec(t, c, "COMMIT", mode)
		check(fmt.Sprintf("%v after the savepoints", mode), 90, 110)
	}

	// pgx's own transactions (BEGIN, COMMIT through its Tx).
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []int{k1, k2} {
		if _, err := tx.Exec(ctx, "UPDATE mw_acc SET n = n + 5 WHERE aid = $1", k); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	check("after pgx Tx commit", 95, 115)

	// A reference-table write in a transaction runs on every copy and
	// commits (or rolls back) with the transaction.
	exec(t, c, "BEGIN", simple)
	exec(t, c, "UPDATE mw_ref SET total = total + 1 WHERE bid = 1", simple)
	exec(t, c, "UPDATE mw_acc SET n = n + 1 WHERE aid = $1", simple, k1)
	exec(t, c, "ROLLBACK", simple)
	exec(t, c, "BEGIN", simple)
	exec(t, c, "UPDATE mw_acc SET n = n + 1 WHERE aid = $1", simple, k1)
	exec(t, c, "UPDATE mw_ref SET total = total + 1 WHERE bid = 1", simple)
	exec(t, c, "COMMIT", simple)
	check("after the reference write", 96, 115)
	for _, w := range cl.Servers {
		d := connect(t, w.Addr())
		var shard string
		if err := d.QueryRow(ctx, `SELECT oid::regclass::text FROM pg_class WHERE relname LIKE 'mw\_ref\_%' AND relkind = 'r' LIMIT 1`).Scan(&shard); err != nil {
			shard = "mw_ref"
		}
		var total int
		if err := d.QueryRow(ctx, "SELECT total FROM "+shard+" WHERE bid = 1").Scan(&total); err != nil || total != 1 {
			t.Errorf("reference copy %s on %s: total = %d (%v), want 1", shard, w.Addr(), total, err)
		}
	}

	// Once COMMIT has returned, another session sees both workers' parts.
	exec(t, c, "UPDATE mw_acc SET n = 100 WHERE aid = $1", simple, k1)
	exec(t, c, "UPDATE mw_acc SET n = 100 WHERE aid = $1", simple, k2)
	reader := connect(t, srv.Addr())
	for i := 1; i <= 20; i++ {
		exec(t, c, "BEGIN", simple)
		exec(t, c, "UPDATE mw_acc SET n = n - 1 WHERE aid = $1", simple, k1)
		exec(t, c, "UPDATE mw_acc SET n = n + 1 WHERE aid = $1", simple, k2)
		if i%2 == 0 {
			// COMMIT through the extended protocol.
			if _, err := c.PgConn().ExecParams(ctx, "COMMIT", nil, nil, nil, nil).Close(); err != nil {
				t.Fatal(err)
			}
		} else {
			exec(t, c, "COMMIT", simple)
		}
		var a, b int
		if err := reader.QueryRow(ctx, "SELECT n FROM mw_acc WHERE aid = $1", k1).Scan(&a); err != nil {
			t.Fatal(err)
		}
		if err := reader.QueryRow(ctx, "SELECT n FROM mw_acc WHERE aid = $1", k2).Scan(&b); err != nil {
			t.Fatal(err)
		}
		if a != 100-i || b != 100+i {
			t.Fatalf("after transfer %d another session reads %d, %d", i, a, b)
		}
	}
}

// TestTransactionAcrossWorkersPgbench runs pgbench's TPC-B-like script
// (accounts and history distributed, tellers and branches reference
// tables, so that every transaction spans both workers) and checks the
// balances agree.
func TestTransactionAcrossWorkersPgbench(t *testing.T) {
	tpcbAcrossWorkers(t, "simple")
}

// tpcbAcrossWorkers runs pgbench's TPC-B-like script in the given protocol
// modes with accounts and history distributed and tellers and branches
// reference tables, and checks that no transaction failed and that the
// balances agree.
func tpcbAcrossWorkers(t *testing.T, modes ...string) {
	tpcbAcrossWorkersPool(t, 8, []string{"-c", "4", "-j", "2", "-T", "3"}, modes...)
}

// tpcbAcrossWorkersPool is tpcbAcrossWorkers with the given pool size and
// pgbench client options.
func tpcbAcrossWorkersPool(t *testing.T, pool int, clients []string, modes ...string) {
	pgbench, url, c := pgbenchTablesPool(t, pool,
		"SELECT create_distributed_table('pgbench_accounts', 'aid', shard_count => 8)",
		"SELECT create_distributed_table('pgbench_history', 'aid', shard_count => 8)",
		"SELECT create_reference_table('pgbench_branches')",
		"SELECT create_reference_table('pgbench_tellers')")
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	failed := regexp.MustCompile(`number of failed transactions: (\d+)`)
	done := regexp.MustCompile(`number of transactions actually processed: (\d+)`)
	for _, mode := range modes {
		args := append(append([]string{"-n", "-M", mode}, clients...), url)
		out, err := osexec.Command(pgbench, args...).CombinedOutput()
		if err != nil {
			t.Errorf("pgbench -M %s: %v\n%s", mode, err, out)
			continue
		}
		f, d := failed.FindSubmatch(out), done.FindSubmatch(out)
		if d == nil || string(d[1]) == "0" || (f != nil && string(f[1]) != "0") {
			t.Errorf("pgbench -M %s:\n%s", mode, out)
		}
		if m := regexp.MustCompile(`number of transactions per client: (\d+)`).FindSubmatch(out); m != nil {
			// -t: every client commits every one of its transactions.
			per, _ := strconv.Atoi(string(m[1]))
			if n, _ := strconv.Atoi(string(d[1])); n != per*clientCount(clients) {
				t.Errorf("pgbench -M %s: %d transactions processed, want %d:\n%s", mode, n, per*clientCount(clients), out)
			}
		}
		t.Logf("tpcb-like across workers, pgbench -M %s %v, pool %d: %s", mode, clients, pool, regexp.MustCompile(`tps = [0-9.]+`).Find(out))
	}
	// Every transfer is in all four tables or in none.
	var acc, tel, br, hist int64
	for q, v := range map[string]*int64{
		"SELECT sum(abalance) FROM pgbench_accounts": &acc, "SELECT sum(tbalance) FROM pgbench_tellers": &tel,
		"SELECT sum(bbalance) FROM pgbench_branches": &br, "SELECT coalesce(sum(delta), 0) FROM pgbench_history": &hist,
	} {
		if err := c.QueryRow(ctx, q, simple).Scan(v); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if acc != tel || acc != br || acc != hist {
		t.Errorf("balances disagree: accounts %d, tellers %d, branches %d, history %d", acc, tel, br, hist)
	}
}

func clientCount(opts []string) int {
	for i, o := range opts {
		if o == "-c" && i+1 < len(opts) {
			n, _ := strconv.Atoi(opts[i+1])
			return n
		}
	}
	return 1
}

// TestTransactionAcrossWorkersPoolQuarter: tpcb-like (every transaction
// spans both workers) with four times as many clients as each worker's pool
// has connections: no transaction waits for connections forever or fails
// (it used to: each worker's connections held by transactions waiting for
// the other worker's, 40P01 after a second), every client commits all its
// transactions and the balances agree.
func TestTransactionAcrossWorkersPoolQuarter(t *testing.T) {
	tpcbAcrossWorkersPool(t, 2, []string{"-c", "8", "-j", "2", "-t", "25"}, "simple", "extended")
}

// TestTransactionAcrossWorkersSmallPool: clients far outnumbering the pools
// run transactions that take one worker then the other, in both orders
// (distinct rows, so no lock waits): every one commits.
func TestTransactionAcrossWorkersSmallPool(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(2))
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	a := connect(t, srv.Addr())
	drop := func() {
		_, _ = a.Exec(ctx, "SELECT undistribute_table('mws_acc')", simple)
		_, _ = a.Exec(ctx, "DROP TABLE IF EXISTS mws_acc", simple)
	}
	drop()
	t.Cleanup(drop)
	exec(t, a, "CREATE TABLE mws_acc (aid bigint PRIMARY KEY, n int)", simple)
	exec(t, a, "INSERT INTO mws_acc SELECT g, 0 FROM generate_series(1, 200) g", simple)
	exec(t, a, "SELECT create_distributed_table('mws_acc', 'aid', shard_count => 4)", simple)
	const clients, txns = 10, 15
	byWorker := map[string][]int{}
	for k := 1; k <= 200; k++ {
		w := workerOfAid(t, a, "mws_acc", k)
		byWorker[w] = append(byWorker[w], k)
	}
	var keys [][]int
	for _, ks := range byWorker {
		if len(ks) < clients {
			t.Fatalf("%d keys on a worker, want %d", len(ks), clients)
		}
		keys = append(keys, ks)
	}
	if len(keys) != 2 {
		t.Fatalf("keys on %d workers, want 2", len(keys))
	}
	errs := make(chan error, clients)
	for i := 0; i < clients; i++ {
		c := connect(t, srv.Addr())
		first, second := keys[0][i], keys[1][i]
		if i%2 == 1 {
			first, second = second, first
		}
		go func() {
			for j := 0; j < txns; j++ {
				tx, err := c.Begin(ctx)
				if err == nil {
					_, err = tx.Exec(ctx, "UPDATE mws_acc SET n = n + 1 WHERE aid = $1", first)
				}
				if err == nil {
					_, err = tx.Exec(ctx, "UPDATE mws_acc SET n = n + 1 WHERE aid = $1", second)
				}
				if err == nil {
					err = tx.Commit(ctx)
				}
				if err != nil {
					errs <- fmt.Errorf("client %d, transaction %d: %w", i, j, err)
					return
				}
			}
			errs <- nil
		}()
	}
	for i := 0; i < clients; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if got := queryString(t, a, "SELECT sum(n)::text FROM mws_acc", simple); got != strconv.Itoa(2*clients*txns) {
		t.Errorf("sum %s, want %d", got, 2*clients*txns)
	}
}

// TestTransactionAcrossWorkersConnectionWait: two transactions that each
// hold the only connection to one worker and want the other's do not wait
// for each other forever: the one that asks second gets a retryable 40P01
// within about a second, and the other then goes on.
func TestTransactionAcrossWorkersConnectionWait(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(1))
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	a, b := connect(t, srv.Addr()), connect(t, srv.Addr())
	drop := func() {
		_, _ = a.Exec(ctx, "SELECT undistribute_table('mwc_acc')", simple)
		_, _ = a.Exec(ctx, "DROP TABLE IF EXISTS mwc_acc", simple)
	}
	drop()
	t.Cleanup(drop)
	exec(t, a, "CREATE TABLE mwc_acc (aid bigint PRIMARY KEY, n int)", simple)
	exec(t, a, "INSERT INTO mwc_acc SELECT g, 0 FROM generate_series(1, 50) g", simple)
	exec(t, a, "SELECT create_distributed_table('mwc_acc', 'aid', shard_count => 4)", simple)
	k1, w1 := 1, workerOfAid(t, a, "mwc_acc", 1)
	k2 := 2
	for ; workerOfAid(t, a, "mwc_acc", k2) == w1; k2++ {
		if k2 > 50 {
			t.Fatal("every key on one worker")
		}
	}

	exec(t, a, "BEGIN", simple)
	exec(t, a, "UPDATE mwc_acc SET n = n + 1 WHERE aid = $1", simple, k1) // a holds worker 1's connection
	exec(t, b, "BEGIN", simple)
	exec(t, b, "UPDATE mwc_acc SET n = n + 1 WHERE aid = $1", simple, k2) // b holds worker 2's
	start := time.Now()
	_, err := a.Exec(ctx, "UPDATE mwc_acc SET n = n + 1 WHERE aid = $1", simple, k2)
	if sqlState(err) != "40P01" || time.Since(start) > 4*time.Second {
		t.Fatalf("waiting for the other worker's only connection: %v after %v, want 40P01 within about 1 s", err, time.Since(start))
	}
	exec(t, a, "ROLLBACK", simple)
	exec(t, b, "UPDATE mwc_acc SET n = n + 1 WHERE aid = $1", simple, k1) // a released worker 1's
	exec(t, b, "COMMIT", simple)
	if got := queryString(t, a, "SELECT sum(n)::text FROM mwc_acc", simple); got != "2" {
		t.Errorf("after b's commit the sum is %s, want 2 (b's two updates, none of a's)", got)
	}
}
