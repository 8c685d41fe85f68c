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

// TestTableDDLInTransactionBlock: ALTER TABLE, CREATE INDEX, DROP INDEX
// and TRUNCATE of distributed and reference tables inside a transaction
// block (as migration tools send them) answer as plain PostgreSQL does:
// later statements of the transaction see the change, COMMIT keeps it on
// every shard, ROLLBACK (also to a savepoint) undoes it on every shard, an
// error on any shard fails the transaction. A DROP TABLE there that rolls
// back leaves the table (TestDropTableInTransactionBlock commits them).
func TestTableDDLInTransactionBlock(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	plain := oracleDB(t, cl.Servers[1].Addr(), "ddltxn_oracle")
	for _, conn := range []*pgx.Conn{c, plain} {
		exec(t, conn, "DROP TABLE IF EXISTS dx_t, dx_r")
		exec(t, conn, "CREATE TABLE dx_t (id int PRIMARY KEY, v text)")
		exec(t, conn, "CREATE TABLE dx_r (id int PRIMARY KEY, w text)")
	}
	t.Cleanup(func() { _, _ = plain.Exec(context.Background(), "DROP TABLE IF EXISTS dx_t, dx_r") })
	testTable(t, c, "dx_t", "(id int PRIMARY KEY, v text)", "SELECT create_distributed_table('dx_t', 'id', shard_count => 4)")
	testTable(t, c, "dx_r", "(id int PRIMARY KEY, w text)", "SELECT create_reference_table('dx_r')")
	rows := "INSERT INTO dx_t (id, v) VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd'), (5, 'e'), (6, 'f'), (7, 'g'), (8, 'h')"
	for _, conn := range []*pgx.Conn{c, plain} {
		exec(t, conn, rows, pgx.QueryExecModeSimpleProtocol)
		exec(t, conn, "INSERT INTO dx_r (id, w) VALUES (1, 'x'), (2, 'y')", pgx.QueryExecModeSimpleProtocol)
	}

	// Another session's multi-shard SELECT * before and after the
	// transaction commits sees the table as it is then.
	other := connect(t, srv.Addr())
	compareOracle(t, other, plain, []string{"SELECT * FROM dx_t ORDER BY id"}, nil)
	compareOracle(t, c, plain, []string{
		// A migration: a column, rows using it, an index; committed.
		"BEGIN",
		"ALTER TABLE dx_t ADD COLUMN n int DEFAULT 7",
		"SELECT id, v, n FROM dx_t ORDER BY id",
		"UPDATE dx_t SET n = id * 10 WHERE id > 4",
		"INSERT INTO dx_t (id, v, n) VALUES (9, 'i', 90)",
		"CREATE INDEX dx_t_n ON dx_t (n)",
		"ALTER TABLE dx_r ADD COLUMN k int NOT NULL DEFAULT 0",
		"SELECT id, w, k FROM dx_r ORDER BY id",
		"COMMIT",
	}, nil)
	compareOracle(t, other, plain, []string{"SELECT * FROM dx_t ORDER BY id"}, nil)
	compareOracle(t, c, plain, []string{
		"SELECT id, v, n FROM dx_t ORDER BY id",
		"SELECT sum(n) FROM dx_t",
		// Rolled back: the column stays.
		"SELECT * FROM dx_t ORDER BY id",
		"BEGIN",
		"ALTER TABLE dx_t DROP COLUMN n",
		"SELECT * FROM dx_t ORDER BY id",
		"SELECT * FROM dx_t WHERE id = 2",
		"INSERT INTO dx_t VALUES (30, 'dd')",
		"SELECT * FROM dx_t ORDER BY id",
		"ROLLBACK",
		"SELECT * FROM dx_t ORDER BY id",
		"BEGIN",
		"ALTER TABLE dx_t ADD COLUMN m text DEFAULT 'm'",
		"INSERT INTO dx_t VALUES (31, 'ee', 1, 'mm')",
		"SELECT * FROM dx_t ORDER BY id",
		"SELECT v, count(*) FROM dx_t GROUP BY v ORDER BY v",
		"ROLLBACK",
		"SELECT * FROM dx_t ORDER BY id",
		// A constraint the rows of some shard break: the transaction fails.
		"BEGIN",
		"ALTER TABLE dx_t ADD CONSTRAINT dx_small CHECK (id < 3)",
		"SELECT 1",
		"COMMIT",
		"INSERT INTO dx_t (id, v, n) VALUES (50, 'z', 1)",
		// A constraint later statements of the transaction meet.
		"BEGIN",
		"ALTER TABLE dx_t ADD CONSTRAINT dx_v CHECK (v <> '')",
		"INSERT INTO dx_t (id, v, n) VALUES (60, '', 1)",
		"ROLLBACK",
		"INSERT INTO dx_t (id, v, n) VALUES (60, '', 1)",
		// Savepoints.
		"BEGIN",
		"SAVEPOINT a",
		"ALTER TABLE dx_t ADD COLUMN z int",
		"UPDATE dx_t SET z = 1",
		"SELECT * FROM dx_t ORDER BY id",
		"ROLLBACK TO SAVEPOINT a",
		"SELECT * FROM dx_t ORDER BY id",
		"ALTER TABLE dx_t RENAME COLUMN v TO label",
		"SELECT label FROM dx_t WHERE id = 2",
		"COMMIT",
		"SELECT id, label, n FROM dx_t ORDER BY id",
		// TRUNCATE of a reference table, undone and then kept.
		"BEGIN",
		"TRUNCATE dx_r",
		"SELECT count(*) FROM dx_r",
		"ROLLBACK",
		"SELECT count(*) FROM dx_r",
		"BEGIN",
		"INSERT INTO dx_t (id, label, n) VALUES (70, 'q', 1)",
		"TRUNCATE dx_r",
		"COMMIT",
		"SELECT count(*) FROM dx_r",
		"SELECT count(*) FROM dx_t",
		// Indexes made and dropped in one transaction.
		"BEGIN",
		"CREATE INDEX ON dx_t (label)",
		"DROP INDEX dx_t_n",
		"COMMIT",
	}, nil)

	// Every shard has what the transactions committed, and only that.
	shardCols := "SELECT count(*)::text FROM information_schema.columns WHERE table_schema = 'pgfleet_shards' AND table_name ~ '^dx_t_[0-9]+$' AND column_name = %s"
	shardIdx := "SELECT count(*)::text FROM pg_indexes WHERE schemaname = 'pgfleet_shards' AND tablename ~ '^dx_t_[0-9]+$' AND indexname ~ %s"
	count := func(q string) int {
		n := 0
		for _, s := range cl.Servers {
			var k int
			if _, err := fmt.Sscan(queryString(t, connect(t, s.Addr()), q), &k); err != nil {
				t.Fatal(err)
			}
			n += k
		}
		return n
	}
	for _, chk := range []struct {
		what string
		q    string
		want int
	}{
		{"shards with column n", fmt.Sprintf(shardCols, "'n'"), 4},
		{"shards with column label", fmt.Sprintf(shardCols, "'label'"), 4},
		{"shards with column v", fmt.Sprintf(shardCols, "'v'"), 0},
		{"shards with column z", fmt.Sprintf(shardCols, "'z'"), 0},
		{"shard indexes dx_t_n", fmt.Sprintf(shardIdx, "'^dx_t_n'"), 0},
		{"shard indexes on label", fmt.Sprintf(shardIdx, "'^dx_t_label_idx'"), 4},
		{"shard constraints dx_small", "SELECT count(*)::text FROM pg_constraint WHERE conname ~ '^dx_small'", 0},
		{"reference copies with column k", "SELECT count(*)::text FROM information_schema.columns WHERE table_schema = 'pgfleet_shards' AND table_name ~ '^dx_r_[0-9]+$' AND column_name = 'k'", 2},
	} {
		if got := count(chk.q); got != chk.want {
			t.Errorf("%s on the workers: %d, want %d", chk.what, got, chk.want)
		}
	}

	// DROP TABLE inside a transaction block that rolls back: the table
	// is gone within it, and back with its rows after.
	compareOracle(t, c, plain, []string{
		"BEGIN",
		"DROP TABLE dx_r",
		"ROLLBACK",
		"SELECT * FROM dx_r ORDER BY id",
		"SELECT count(*) FROM dx_t",
	}, nil)
	exec(t, c, "BEGIN")
	exec(t, c, "DROP TABLE dx_r", pgx.QueryExecModeSimpleProtocol)
	if _, err := c.Exec(ctx, "SELECT * FROM dx_r", pgx.QueryExecModeSimpleProtocol); sqlState(err) != "42P01" {
		t.Errorf("reading a reference table dropped in the transaction block: %v, want 42P01", err)
	}
	exec(t, c, "ROLLBACK")
	if got, want := queryString(t, c, "SELECT count(*)::text FROM dx_r"), queryString(t, plain, "SELECT count(*)::text FROM dx_r"); got != want {
		t.Errorf("dx_r after a rolled back DROP TABLE: %s rows, PostgreSQL %s", got, want)
	}

	// The extended protocol in such a transaction: routed statements as
	// on PostgreSQL; multi-shard ones refused (they are described on
	// another connection).
	for _, conn := range []*pgx.Conn{c, plain} {
		exec(t, conn, "BEGIN")
		exec(t, conn, "ALTER TABLE dx_t ADD COLUMN e int DEFAULT 5", pgx.QueryExecModeSimpleProtocol)
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec, pgx.QueryExecModeDescribeExec} {
		var got, want []any
		for i, conn := range []*pgx.Conn{c, plain} {
			rows, err := conn.Query(ctx, "SELECT * FROM dx_t WHERE id = $1", mode, 2)
			if err != nil {
				t.Fatalf("routed SELECT * in mode %v: %v", mode, err)
			}
			vals, err := pgx.CollectOneRow(rows, func(r pgx.CollectableRow) ([]any, error) { return r.Values() })
			if err != nil {
				t.Fatalf("routed SELECT * in mode %v: %v", mode, err)
			}
			if i == 0 {
				got = vals
			} else {
				want = vals
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("routed SELECT * in mode %v: %v, PostgreSQL %v", mode, got, want)
		}
	}
	if _, err := c.Exec(ctx, "SELECT * FROM dx_t WHERE id > $1", 0); sqlState(err) != "0A000" {
		t.Errorf("multi-shard SELECT * over the extended protocol after ALTER TABLE in the transaction: %v, want 0A000", err)
	}
	exec(t, c, "ROLLBACK")
	exec(t, plain, "ROLLBACK")
}

// TestTableDDLInTransactionBlockEdges (from an adversary): DDL in a block
// that runs on the default node only (DROP INDEX IF EXISTS of nothing, a
// table whose one shard is on the default node) keeps the transaction
// open (COMMIT committed nothing and answered ROLLBACK, later DDL ran on
// its own); CONCURRENTLY in a block gets PostgreSQL's 25001; another
// session's multi-shard SELECT * waiting on the transaction's lock sees
// the table as COMMIT left it (was 08P01 from the old column count).
func TestTableDDLInTransactionBlockEdges(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	plain := oracleDB(t, cl.Servers[1].Addr(), "ddltxn2_oracle")
	for _, conn := range []*pgx.Conn{c, plain} {
		exec(t, conn, "DROP TABLE IF EXISTS de_t, de_solo, de_p")
		exec(t, conn, "CREATE TABLE de_t (id int PRIMARY KEY, a int)")
		exec(t, conn, "CREATE TABLE de_solo (id int PRIMARY KEY, a int)")
		exec(t, conn, "CREATE TABLE de_p (x int)")
	}
	t.Cleanup(func() {
		_, _ = plain.Exec(context.Background(), "DROP TABLE IF EXISTS de_t, de_solo, de_p")
		_, _ = c.Exec(context.Background(), "DROP TABLE IF EXISTS de_p")
	})
	testTable(t, c, "de_t", "(id int PRIMARY KEY, a int)", "SELECT create_distributed_table('de_t', 'id', shard_count => 4)")
	testTable(t, c, "de_solo", "(id int PRIMARY KEY, a int)", "SELECT create_distributed_table('de_solo', 'id', shard_count => 1)")
	for _, conn := range []*pgx.Conn{c, plain} {
		exec(t, conn, "INSERT INTO de_t SELECT i, i FROM generate_series(1, 8) i", pgx.QueryExecModeSimpleProtocol)
		exec(t, conn, "INSERT INTO de_solo SELECT i, i FROM generate_series(1, 3) i", pgx.QueryExecModeSimpleProtocol)
	}
	compareOracle(t, c, plain, []string{
		"BEGIN",
		"INSERT INTO de_p VALUES (1)",
		"DROP INDEX IF EXISTS de_nosuch",
		"COMMIT",
		"SELECT count(*) FROM de_p",
		"BEGIN",
		"UPDATE de_t SET a = 100 WHERE id = 1",
		"DROP INDEX IF EXISTS de_nosuch",
		"CREATE INDEX de_t_a ON de_t (a)",
		"ROLLBACK",
		"SELECT a FROM de_t WHERE id = 1",
		"SELECT count(*) FROM pg_indexes WHERE indexname = 'de_t_a'",
		"BEGIN",
		"ALTER TABLE de_solo ADD COLUMN y int DEFAULT 5",
		"COMMIT",
		"SELECT * FROM de_solo ORDER BY id",
		"BEGIN",
		"CREATE INDEX CONCURRENTLY de_t_c ON de_t (a)",
		"ROLLBACK",
		// Two constant defaults in one statement (each checked with a
		// column of its own: was refused as not immutable).
		"BEGIN",
		"ALTER TABLE de_t ADD COLUMN p int DEFAULT 1, ADD COLUMN q int DEFAULT 2",
		"SELECT * FROM de_t ORDER BY id",
		"ROLLBACK",
		// Unnamed constraints PostgreSQL names alike: which is which on
		// the shards cannot be told, refused (0A000 allowed below).
		"ALTER TABLE de_t ADD CHECK (a > -1), ADD CHECK (a < 100)",
		"BEGIN",
		"DROP INDEX CONCURRENTLY IF EXISTS de_t_pkey",
		"ROLLBACK",
	}, map[string]bool{"ALTER TABLE de_t ADD CHECK (a > -1), ADD CHECK (a < 100)": true})
	if got := queryString(t, c, "SELECT count(*)::text FROM pg_constraint WHERE conname LIKE 'de_t_a_check%'"); got != "0" && got != "2" {
		t.Errorf("constraints of the two unnamed CHECKs on the shell: %s, want none (refused) or both", got)
	}
	_, _ = plain.Exec(ctx, "ALTER TABLE de_t DROP CONSTRAINT IF EXISTS de_t_a_check, DROP CONSTRAINT IF EXISTS de_t_a_check1")

	// Another session's SELECT * waits on the DDL's lock, then reads the
	// new columns.
	other := connect(t, srv.Addr())
	compareOracle(t, other, plain, []string{"SELECT * FROM de_t ORDER BY id LIMIT 2"}, nil)
	exec(t, c, "BEGIN")
	exec(t, c, "ALTER TABLE de_t ADD COLUMN x int DEFAULT 7", pgx.QueryExecModeSimpleProtocol)
	done := make(chan string, 1)
	go func() {
		res, err := other.PgConn().Exec(ctx, "SELECT * FROM de_t ORDER BY id LIMIT 2").ReadAll()
		if err != nil {
			done <- err.Error()
			return
		}
		done <- fmt.Sprint(len(res[0].FieldDescriptions), " columns")
	}()
	time.Sleep(300 * time.Millisecond) // it waits on the shards' lock
	exec(t, c, "COMMIT")
	select {
	case got := <-done:
		if got != "3 columns" {
			t.Errorf("another session's SELECT * that waited on the ALTER TABLE: %s, want 3 columns", got)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("another session's SELECT * still waits after the COMMIT")
	}
}

// TestTableDDLInTransactionBlockNotices: the notices DDL of distributed
// tables gives in a block (IF EXISTS ... skipping) reach the client.
func TestTableDDLInTransactionBlockNotices(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	testTable(t, c, "dn_t", "(id int PRIMARY KEY, a int)", "SELECT create_distributed_table('dn_t', 'id', shard_count => 4)")
	pc, notices := noticeConn(t, srv.Addr())
	runString(t, pc, notices, "BEGIN")
	got := runString(t, pc, notices, "ALTER TABLE dn_t DROP COLUMN IF EXISTS nope")
	runString(t, pc, notices, "ROLLBACK")
	if len(got.Notices) != 1 || !strings.Contains(got.Notices[0], `column "nope" of relation "dn_t" does not exist, skipping`) {
		t.Errorf("notices of ALTER TABLE ... DROP COLUMN IF EXISTS in a block: %+v", got)
	}
	// Outside a block too (an adversary: the notice was dropped there).
	got = runString(t, pc, notices, "ALTER TABLE dn_t DROP COLUMN IF EXISTS nope")
	if len(got.Notices) != 1 || !strings.Contains(got.Notices[0], `column "nope" of relation "dn_t" does not exist, skipping`) {
		t.Errorf("notices of ALTER TABLE ... DROP COLUMN IF EXISTS outside a block: %+v", got)
	}
	got = runString(t, pc, notices, "CREATE INDEX IF NOT EXISTS dn_t_pkey ON dn_t (id)")
	if len(got.Notices) != 1 || !strings.Contains(got.Notices[0], `relation "dn_t_pkey" already exists, skipping`) {
		t.Errorf("notices of CREATE INDEX IF NOT EXISTS outside a block: %+v", got)
	}
}
