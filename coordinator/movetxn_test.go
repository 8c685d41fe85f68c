package coordinator_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestMoveInTransactions moves every shard group of a colocated pair of
// tables to the other worker and back (logical replication, then holding
// writes) while clients of three coordinators joined by gossip run
// transaction blocks over the groups (txnLoad). Statements inside a
// transaction block cannot be run again by the coordinator, so a cut-over
// must not fail them: the fleet holds the group's statements while it
// cuts over (hold.go). No client gets an error, and every acknowledged
// transaction is there exactly once.
func TestMoveInTransactions(t *testing.T) {
	cl := pgtest.Shared(t)
	coords := startFleet(t, cl, 3, nil)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	c := connect(t, coords[0].Addr())
	load := startTxnLoad(t, c, "mt", 4, coords)
	workers := []*pgx.Conn{connect(t, cl.Servers[0].Addr()), connect(t, cl.Servers[1].Addr())}
	type group struct {
		shard int64
		port  int
	}
	groups := func() []group {
		t.Helper()
		var gs []group
		r, err := workers[0].Query(ctx, `SELECT s.shardid, n.port FROM pgfleet.shards s JOIN pgfleet.placements p USING (shardid)
			JOIN pgfleet.nodes n USING (nodeid) WHERE s.table_name = 'public.mt_a' ORDER BY s.min_hash`)
		if err != nil {
			t.Fatal(err)
		}
		for r.Next() {
			var g group
			if err := r.Scan(&g.shard, &g.port); err != nil {
				t.Fatal(err)
			}
			gs = append(gs, g)
		}
		if err := r.Err(); err != nil || len(gs) != 4 {
			t.Fatalf("mt_a's shards: %v, %v", gs, err)
		}
		return gs
	}
	other := func(port int) (string, int) {
		for _, s := range cl.Servers {
			if s.Port != port {
				return s.Host, s.Port
			}
		}
		t.Fatalf("no worker but %d", port)
		return "", 0
	}
	before := groups()
	for _, mode := range []string{"force_logical", "block_writes"} {
		for _, g := range groups() {
			th, tp := other(g.port)
			if _, err := c.Exec(ctx, fmt.Sprintf("SELECT citus_move_shard_placement(%d, '127.0.0.1', %d, '%s', %d, shard_transfer_mode => '%s')",
				g.shard, g.port, th, tp, mode), simple); err != nil {
				t.Fatalf("moving shard %d from port %d to %d (%s): %v", g.shard, g.port, tp, mode, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	load.stop(c)
	if !slices.Equal(groups(), before) {
		t.Errorf("after moving every group there and back the placements are %v, want %v", groups(), before)
	}
}

// TestSplitInTransactions splits shards of a colocated pair of tables
// (each of the first two shard groups at its middle, the halves on both
// workers) while clients of three coordinators run transaction blocks over
// them (txnLoad): statements held during a split are planned again for
// the new shards, and none fails.
func TestSplitInTransactions(t *testing.T) {
	cl := pgtest.Shared(t)
	coords := startFleet(t, cl, 3, nil)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	c := connect(t, coords[0].Addr())
	load := startTxnLoad(t, c, "st", 2, coords)
	w0 := connect(t, cl.Servers[0].Addr())
	var nodes []int32
	r, err := w0.Query(ctx, "SELECT nodeid FROM pgfleet.nodes WHERE active ORDER BY nodeid")
	if err == nil {
		nodes, err = pgx.CollectRows(r, pgx.RowTo[int32])
	}
	if err != nil || len(nodes) != 2 {
		t.Fatalf("nodes %v, %v", nodes, err)
	}
	for i := 0; i < 2; i++ {
		var shard int64
		var lo, hi int64
		if err := w0.QueryRow(ctx, `SELECT shardid, min_hash, max_hash FROM pgfleet.shards WHERE table_name = 'public.st_a'
			ORDER BY min_hash OFFSET $1 LIMIT 1`, 2*i).Scan(&shard, &lo, &hi); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Exec(ctx, fmt.Sprintf("SELECT citus_split_shard_by_split_points(%d, ARRAY['%d'], ARRAY[%d, %d])",
			shard, lo+(hi-lo)/2, nodes[0], nodes[1]), simple); err != nil {
			t.Fatalf("splitting shard %d: %v", shard, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	load.stop(c)
	var n int
	if err := w0.QueryRow(ctx, "SELECT count(*)::int FROM pgfleet.shards WHERE table_name = 'public.st_b'").Scan(&n); err != nil || n != 4 {
		t.Errorf("st_b has %d shards after two splits, %v; want 4", n, err)
	}
}

// txnLoad is clients of a fleet running transaction blocks over a
// colocated pair of tables, <prefix>_a (id, v) and <prefix>_b (id, a):
// six writers (two per coordinator, the simple protocol and prepared
// statements) each update a row of _a, insert a row into _b and read
// another row of _a, and commit; a reader counts and sums both in a block.
// Any error fails the test.
type txnLoad struct {
	t             *testing.T
	prefix        string
	stopc         chan struct{}
	wg            sync.WaitGroup
	mu            sync.Mutex
	updates, txns atomic.Int64
	readerRan     atomic.Bool
	inserted      []int64
	took          []time.Duration
	failures      []string
	coords        []*coordinator.Server
}

const txnLoadRows = 2000

// startTxnLoad makes the tables through c, distributed in shards shards,
// and starts the clients, one writer pair per coordinator and the reader
// on the last.
func startTxnLoad(t *testing.T, c *pgx.Conn, prefix string, shards int, coords []*coordinator.Server) *txnLoad {
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	a, b := prefix+"_a", prefix+"_b"
	drop := func() {
		for _, tb := range []string{a, b} {
			_, _ = c.Exec(ctx, "DROP TABLE IF EXISTS "+tb, simple)
		}
	}
	drop()
	t.Cleanup(drop)
	exec(t, c, "CREATE TABLE "+a+" (id bigint PRIMARY KEY, v int NOT NULL DEFAULT 0)", simple)
	exec(t, c, "CREATE TABLE "+b+" (id bigint PRIMARY KEY, a bigint NOT NULL)", simple)
	exec(t, c, fmt.Sprintf("SELECT create_distributed_table('%s', 'id', shard_count => %d)", a, shards), simple)
	exec(t, c, fmt.Sprintf("SELECT create_distributed_table('%s', 'id', colocate_with => '%s')", b, a), simple)
	exec(t, c, fmt.Sprintf("INSERT INTO %s SELECT g, 0 FROM generate_series(1, %d) g", a, txnLoadRows), simple)
	l := &txnLoad{t: t, prefix: prefix, stopc: make(chan struct{}), coords: coords}
	fail := func(who string, err error) {
		l.mu.Lock()
		l.failures = append(l.failures, fmt.Sprintf("%s: %v (SQLSTATE %s)", who, err, sqlState(err)))
		l.mu.Unlock()
	}
	for n := 0; n < 2*len(coords); n++ {
		wc := connect(t, coords[n%len(coords)].Addr())
		mode := pgx.QueryExecModeCacheStatement
		if n%2 == 0 {
			mode = simple
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := int64(0); ; i++ {
				select {
				case <-l.stopc:
					return
				default:
				}
				id := int64(1_000_000*(n+1)) + i
				k := (i*7+int64(n)*131)%txnLoadRows + 1
				began := time.Now()
				err := pgx.BeginTxFunc(ctx, wc, pgx.TxOptions{}, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, "UPDATE "+a+" SET v = v + 1 WHERE id = $1", mode, k); err != nil {
						return err
					}
					if _, err := tx.Exec(ctx, "INSERT INTO "+b+" (id, a) VALUES ($1, $2)", mode, id, k); err != nil {
						return err
					}
					var v int
					return tx.QueryRow(ctx, "SELECT v FROM "+a+" WHERE id = $1", mode, (k+txnLoadRows/2)%txnLoadRows+1).Scan(&v)
				})
				if err != nil {
					fail(fmt.Sprintf("writer %d transaction %d", n, i), err)
					return
				}
				l.mu.Lock()
				l.took = append(l.took, time.Since(began))
				l.inserted = append(l.inserted, id)
				l.mu.Unlock()
				l.updates.Add(1)
				l.txns.Add(1)
			}
		}()
	}
	rc := connect(t, coords[len(coords)-1].Addr())
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for i := 0; ; i++ {
			select {
			case <-l.stopc:
				return
			default:
			}
			err := pgx.BeginTxFunc(ctx, rc, pgx.TxOptions{}, func(tx pgx.Tx) error {
				var n, sum int64
				if err := tx.QueryRow(ctx, "SELECT count(*), coalesce(sum(v), 0) FROM "+a, simple).Scan(&n, &sum); err != nil {
					return err
				}
				if n != txnLoadRows {
					return fmt.Errorf("%s has %d rows, want %d", a, n, txnLoadRows)
				}
				return tx.QueryRow(ctx, "SELECT count(*) FROM "+b, simple).Scan(&n)
			})
			if err != nil {
				fail(fmt.Sprintf("reader transaction %d", i), err)
				return
			}
			l.txns.Add(1)
			l.readerRan.Store(true)
		}
	}()
	// Running: each writer and the reader committed (their first
	// statements' plans and checks are made; a statement that passed the
	// hold's check before the hold came may still meet the cut-over, see
	// hold.go).
	for deadline := time.Now().Add(30 * time.Second); !l.readerRan.Load() || l.updates.Load() < int64(2*len(coords)); {
		if time.Now().After(deadline) || len(l.failed()) > 0 {
			t.Fatalf("the load did not start: %v", l.failed())
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	return l
}

func (l *txnLoad) failed() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.failures)
}

// stop stops the clients, fails the test for any error, checks through c
// that every acknowledged transaction is there once, and logs the
// transactions' p50, p99 and longest time and the statements each
// coordinator held.
func (l *txnLoad) stop(c *pgx.Conn) {
	t := l.t
	t.Helper()
	close(l.stopc)
	l.wg.Wait()
	for _, f := range l.failures {
		t.Error(f)
	}
	if len(l.inserted) == 0 {
		t.Fatal("the writers committed nothing")
	}
	var nB, found, sumV int64
	if err := c.QueryRow(context.Background(), fmt.Sprintf("SELECT (SELECT count(*) FROM %[1]s_b), (SELECT count(*) FROM %[1]s_b WHERE id = ANY($1)), (SELECT sum(v) FROM %[1]s_a)", l.prefix),
		l.inserted).Scan(&nB, &found, &sumV); err != nil {
		t.Fatal(err)
	}
	if nB != int64(len(l.inserted)) || found != nB || sumV != l.updates.Load() {
		t.Errorf("%s_b has %d rows, %d of the %d acknowledged; sum(%s_a.v) %d, want %d", l.prefix, nB, found, len(l.inserted), l.prefix, sumV, l.updates.Load())
	}
	took := slices.Clone(l.took)
	slices.Sort(took)
	var waits []string
	for _, s := range l.coords {
		waits = append(waits, fmt.Sprint(s.HoldWaits()))
	}
	t.Logf("%d transactions committed (%d written): p50 %v, p99 %v, longest %v; statements held per coordinator: %s",
		l.txns.Load(), len(took), took[len(took)/2], took[len(took)*99/100], took[len(took)-1], strings.Join(waits, ", "))
}

// TestMoveReadThenWrite: a transaction block that read a row of a shard
// group and then, while a logical move of the group waits for it, updates
// the row, commits, and so does the move. (The move once locked the
// source's shards EXCLUSIVE, which a reader does not block, and then
// waited for the reader to drop them, while the reader's update waited
// for the move: a deadlock that PostgreSQL ended by failing one of them.)
func TestMoveReadThenWrite(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	c := connect(t, srv.Addr())
	pairTable(t, c, "rw_a", 100, "0")
	w0 := connect(t, cl.Servers[0].Addr())
	shard, src := shardOfOne(t, w0, cl, "rw_a")
	source := connect(t, cl.Servers[src].Addr())
	dst := cl.Servers[1-src]

	tx := connect(t, srv.Addr())
	exec(t, tx, "BEGIN", simple)
	var v int
	if err := tx.QueryRow(ctx, "SELECT v FROM rw_a WHERE id = 1", simple).Scan(&v); err != nil {
		t.Fatal(err)
	}
	moved := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, fmt.Sprintf("SELECT citus_move_shard_placement(%d, '%s', %d, '%s', %d, shard_transfer_mode => 'force_logical')",
			shard, cl.Servers[src].Host, cl.Servers[src].Port, dst.Host, dst.Port), simple)
		moved <- err
	}()
	// Until the move locks, or waits to lock, the shard on the source.
	rel := fmt.Sprintf("pgfleet_shards.rw_a_%d", shard)
	awaitMoveLock(t, source, rel, moved)
	if _, err := tx.Exec(ctx, "UPDATE rw_a SET v = v + 1 WHERE id = 1", simple); err != nil {
		t.Fatalf("the update in the block that read the row before the move: %v (SQLSTATE %s)", err, sqlState(err))
	}
	if _, err := tx.Exec(ctx, "COMMIT", simple); err != nil {
		t.Fatalf("COMMIT: %v", err)
	}
	if err := <-moved; err != nil {
		t.Fatalf("the move: %v", err)
	}
	if err := c.QueryRow(ctx, "SELECT v FROM rw_a WHERE id = 1", simple).Scan(&v); err != nil || v != 1 {
		t.Errorf("after the move v = %d, %v; want 1", v, err)
	}
}

// TestMoveHeldStatements: while a block_writes move of a shard group waits
// for a transaction that read a row of it, statements of other blocks on
// the group wait at the coordinator and then run on the new placement: one
// whose block only read the table with a multi-shard read, one whose block
// read the group in a savepoint it rolled back (neither holds a lock the
// move waits for), and a Parse/Describe of a statement on the table. The
// reading transaction then updates its row (let in ahead of the move) and
// commits. Found by an adversary: the first three got 40001, and the
// last deadlocked with the move (then locked EXCLUSIVE).
func TestMoveHeldStatements(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, func(c *coordinator.Config) { c.PoolSize = 16 }) // a connection per open block
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	c := connect(t, srv.Addr())
	pairTable(t, c, "kh", 100, "0")
	// The group of the table's first shard, and a key in it.
	w0 := connect(t, cl.Servers[0].Addr())
	var shard int64
	var port int
	var key, key2 int64
	if err := w0.QueryRow(ctx, `SELECT s.shardid, n.port, (SELECT min(g) FROM generate_series(1, 100) g WHERE hashint8(g) <= s.max_hash),
			(SELECT max(g) FROM generate_series(1, 100) g WHERE hashint8(g) <= s.max_hash)
		FROM pgfleet.shards s JOIN pgfleet.placements p USING (shardid) JOIN pgfleet.nodes n USING (nodeid)
		WHERE s.table_name = 'public.kh' ORDER BY s.min_hash LIMIT 1`).Scan(&shard, &port, &key, &key2); err != nil {
		t.Fatal(err)
	}
	var source *pgx.Conn
	var dst int
	for i, s := range cl.Servers {
		if s.Port == port {
			source = connect(t, s.Addr())
		} else {
			dst = i
		}
	}
	begin := func(stmts ...string) *pgx.Conn {
		conn := connect(t, srv.Addr())
		for _, sql := range append([]string{"BEGIN"}, stmts...) {
			exec(t, conn, sql, simple)
		}
		return conn
	}
	reader := begin(fmt.Sprintf("SELECT v FROM kh WHERE id = %d", key))
	// A block that wrote the row before a savepoint it rolled back: it
	// keeps its lock, which the move waits for.
	writer := begin(fmt.Sprintf("UPDATE kh SET v = v + 100 WHERE id = %d", key2), "SAVEPOINT s", "ROLLBACK TO SAVEPOINT s")
	multi := begin("SELECT count(*) FROM kh")
	saved := begin("SAVEPOINT s", fmt.Sprintf("SELECT v FROM kh WHERE id = %d", key), "ROLLBACK TO SAVEPOINT s")
	describer := begin()
	timed := connect(t, srv.Addr())
	exec(t, timed, "SET statement_timeout = 300", simple)

	moved := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, fmt.Sprintf("SELECT citus_move_shard_placement(%d, '127.0.0.1', %d, '%s', %d, shard_transfer_mode => 'block_writes')",
			shard, port, cl.Servers[dst].Host, cl.Servers[dst].Port), simple)
		moved <- err
	}()
	awaitMoveLock(t, source, fmt.Sprintf("pgfleet_shards.kh_%d", shard), moved)
	type result struct {
		who string
		err error
	}
	results := make(chan result, 4)
	go func() {
		var n int64
		err := multi.QueryRow(ctx, "SELECT count(*) FROM kh", simple).Scan(&n)
		if err == nil && n != 100 {
			err = fmt.Errorf("count %d, want 100", n)
		}
		results <- result{"the multi-shard reader's second read", err}
	}()
	go func() {
		_, err := saved.Exec(ctx, fmt.Sprintf("UPDATE kh SET v = v + 1 WHERE id = %d", key), simple)
		results <- result{"the update after ROLLBACK TO SAVEPOINT", err}
	}()
	go func() {
		_, err := describer.Prepare(ctx, "p", "SELECT v FROM kh WHERE id = $1")
		if err == nil {
			var v int
			err = describer.QueryRow(ctx, "p", key).Scan(&v)
		}
		results <- result{"Parse and Describe in a block", err}
	}()
	go func() {
		// Its statement_timeout ends the wait, as it would a lock wait.
		began := time.Now()
		_, err := timed.Exec(ctx, fmt.Sprintf("UPDATE kh SET v = v + 1000 WHERE id = %d", key), simple)
		if sqlState(err) == "57014" && time.Since(began) < 5*time.Second {
			err = nil
		} else {
			err = fmt.Errorf("%v after %v, want 57014 after 300 ms", err, time.Since(began))
		}
		results <- result{"a statement with statement_timeout 300 ms", err}
	}()
	time.Sleep(300 * time.Millisecond)
	// Not held: it goes on to the source, where its lock lets it in
	// (forgetting the rows it wrote before the savepoint, it waited at
	// the hold for the move, which waited for it; found by an
	// adversary: the move failed on its lock timeout 10 s later).
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	if _, err := writer.Exec(wctx, fmt.Sprintf("UPDATE kh SET v = v + 100 WHERE id = %d", key2), simple); err != nil {
		t.Errorf("the block that wrote before a rolled-back savepoint, writing again: %v (SQLSTATE %s)", err, sqlState(err))
	}
	cancel()
	if _, err := writer.Exec(ctx, "COMMIT", simple); err != nil {
		t.Errorf("COMMIT: %v", err)
	}
	if _, err := reader.Exec(ctx, fmt.Sprintf("UPDATE kh SET v = v + 10 WHERE id = %d", key), simple); err != nil {
		t.Errorf("the reader's update while the move waits for it: %v (SQLSTATE %s)", err, sqlState(err))
	}
	if _, err := reader.Exec(ctx, "COMMIT", simple); err != nil {
		t.Errorf("the reader's COMMIT: %v", err)
	}
	for range 4 {
		r := <-results
		if r.err != nil {
			t.Errorf("%s: %v (SQLSTATE %s)", r.who, r.err, sqlState(r.err))
		}
	}
	for _, conn := range []*pgx.Conn{multi, saved, describer} {
		if _, err := conn.Exec(ctx, "COMMIT", simple); err != nil {
			t.Errorf("COMMIT: %v", err)
		}
	}
	if err := <-moved; err != nil {
		t.Fatalf("the move: %v", err)
	}
	var v int
	if err := c.QueryRow(ctx, fmt.Sprintf("SELECT v FROM kh WHERE id = %d", key), simple).Scan(&v); err != nil || v != 11 {
		t.Errorf("v = %d, %v; want 11", v, err)
	}
}

// TestMoveSnapshot: a REPEATABLE READ block that read on a worker before a
// move brought another shard group there does not read that group there
// with its old snapshot, which would not see the moved rows (found by an
// adversary: no row, UPDATE 0, and COMMIT): the statement fails with
// 40001. A READ COMMITTED block reads the rows.
func TestMoveSnapshot(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	c := connect(t, srv.Addr())
	pairTable(t, c, "ks", 100, "g")
	w0 := connect(t, cl.Servers[0].Addr())
	// Both shards on one worker first: a key of each.
	type shardAt struct {
		id   int64
		port int
		key  int64
	}
	var sh []shardAt
	rows, err := w0.Query(ctx, `SELECT s.shardid, n.port, (SELECT min(g) FROM generate_series(1, 100) g WHERE hashint8(g) BETWEEN s.min_hash AND s.max_hash)
		FROM pgfleet.shards s JOIN pgfleet.placements p USING (shardid) JOIN pgfleet.nodes n USING (nodeid)
		WHERE s.table_name = 'public.ks' ORDER BY s.min_hash`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var x shardAt
		if err := rows.Scan(&x.id, &x.port, &x.key); err != nil {
			t.Fatal(err)
		}
		sh = append(sh, x)
	}
	if rows.Err() != nil || len(sh) != 2 || sh[0].port == sh[1].port {
		t.Fatalf("ks's shards: %+v, %v (want two, on two workers)", sh, rows.Err())
	}
	move := func(s shardAt, from, to int) {
		t.Helper()
		if _, err := c.Exec(ctx, fmt.Sprintf("SELECT citus_move_shard_placement(%d, '127.0.0.1', %d, '127.0.0.1', %d, shard_transfer_mode => 'block_writes')",
			s.id, from, to), simple); err != nil {
			t.Fatal(err)
		}
	}
	for _, level := range []string{"REPEATABLE READ", "READ COMMITTED"} {
		tx := connect(t, srv.Addr())
		exec(t, tx, "BEGIN ISOLATION LEVEL "+level, simple)
		var v int64
		if err := tx.QueryRow(ctx, fmt.Sprintf("SELECT v FROM ks WHERE id = %d", sh[0].key), simple).Scan(&v); err != nil {
			t.Fatal(err)
		}
		// The other shard comes to the worker the block read on.
		move(sh[1], sh[1].port, sh[0].port)
		err := tx.QueryRow(ctx, fmt.Sprintf("SELECT v FROM ks WHERE id = %d", sh[1].key), simple).Scan(&v)
		switch {
		case level == "READ COMMITTED" && (err != nil || v != sh[1].key):
			t.Errorf("%s: the moved row: %d, %v; want %d", level, v, err, sh[1].key)
		case level == "REPEATABLE READ" && sqlState(err) != "40001":
			t.Errorf("%s: reading the moved group on the worker of the block's snapshot: v %d, %v; want 40001", level, v, err)
		}
		_, _ = tx.Exec(ctx, "ROLLBACK", simple)
		move(sh[1], sh[0].port, sh[1].port)
	}
}

// awaitMoveLock waits until the move sending its end on moved locks
// shard rel on source (a connection to its worker), or waits to; the test
// fails if the move ends first or in a minute.
func awaitMoveLock(t *testing.T, source *pgx.Conn, rel string, moved chan error) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		var n int
		if err := source.QueryRow(context.Background(), `SELECT count(*)::int FROM pg_locks
			WHERE relation = to_regclass($1) AND mode IN ('ExclusiveLock', 'AccessExclusiveLock')`, rel).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		select {
		case err := <-moved:
			t.Fatalf("the move ended before it locked %s: %v", rel, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the move did not lock %s in a minute", rel)
		}
	}
}

// TestMoveDescribeOneShard: a Parse and Describe in a block on a table of
// one shard whose move is cutting over waits for the move and describes on
// the new placement (every shard being held, it once described on the
// held one and met the drop: 40001, found by an adversary).
func TestMoveDescribeOneShard(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	c := connect(t, srv.Addr())
	_, _ = c.Exec(ctx, "DROP TABLE IF EXISTS ko", simple)
	t.Cleanup(func() { _, _ = c.Exec(ctx, "DROP TABLE IF EXISTS ko", simple) })
	exec(t, c, "CREATE TABLE ko (id bigint PRIMARY KEY, v int)", simple)
	exec(t, c, "SELECT create_distributed_table('ko', 'id', shard_count => 1)", simple)
	exec(t, c, "INSERT INTO ko SELECT g, g FROM generate_series(1, 10) g", simple)
	shard, src := shardOfOne(t, connect(t, cl.Servers[0].Addr()), cl, "ko")
	holder := connect(t, srv.Addr())
	exec(t, holder, "BEGIN", simple)
	exec(t, holder, "SELECT v FROM ko WHERE id = 1", simple) // the move waits for it
	moved := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, fmt.Sprintf("SELECT citus_move_shard_placement(%d, '%s', %d, '%s', %d, shard_transfer_mode => 'block_writes')",
			shard, cl.Servers[src].Host, cl.Servers[src].Port, cl.Servers[1-src].Host, cl.Servers[1-src].Port), simple)
		moved <- err
	}()
	awaitMoveLock(t, connect(t, cl.Servers[src].Addr()), fmt.Sprintf("pgfleet_shards.ko_%d", shard), moved)
	d := connect(t, srv.Addr())
	exec(t, d, "BEGIN", simple)
	described := make(chan error, 1)
	go func() {
		_, err := d.Prepare(ctx, "p", "SELECT v FROM ko WHERE id = $1")
		described <- err
	}()
	time.Sleep(300 * time.Millisecond)
	exec(t, holder, "COMMIT", simple)
	if err := <-described; err != nil {
		t.Fatalf("Parse and Describe in a block while the table's one shard cut over: %v (SQLSTATE %s)", err, sqlState(err))
	}
	var v int
	if err := d.QueryRow(ctx, "p", 3).Scan(&v); err != nil || v != 3 {
		t.Errorf("the prepared statement: %d, %v; want 3", v, err)
	}
	exec(t, d, "COMMIT", simple)
	if err := <-moved; err != nil {
		t.Fatalf("the move: %v", err)
	}
}
