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

// TestGatherLocalTables: a read that joins a local table (one only the
// default node has) with distributed and reference tables is gathered and
// run on the default node (with reference tables only, it reads the
// default node's copies): it gives exactly what PostgreSQL gives over the
// oracle tables, in both protocols, in a transaction block that wrote the
// local table too. Before, every such read was refused (0A000); Django's
// and SQLAlchemy's joins of a distributed table to a plain one met it.
func TestGatherLocalTables(t *testing.T) {
	c := gatherEnv(t)
	ctx := context.Background()
	plainTables(t, c, "gl (g int, label text)")
	exec(t, c, "INSERT INTO gl VALUES (0, 'zero'), (1, 'one'), (1, 'uno'), (3, 'three'), (NULL, 'none')")
	fleet, oracle := strings.NewReplacer("{t}", "ga", "{r}", "gr"), strings.NewReplacer("{t}", "gao", "{r}", "gro")
	queries := []string{
		"SELECT x.id, l.label FROM {t} x JOIN gl l ON l.g = x.g ORDER BY 1, 2",
		"SELECT l.label, count(*), sum(x.n) FROM gl l LEFT JOIN {t} x ON x.g = l.g GROUP BY l.label ORDER BY 1",
		"SELECT x.id, l.label FROM {t} x JOIN gl l ON l.g = x.g WHERE x.id = 5",
		"SELECT id FROM {t} WHERE g IN (SELECT g FROM gl WHERE label LIKE 'o%') ORDER BY id",
		"SELECT x.id, r.name, l.label FROM {t} x JOIN {r} r ON r.id = x.g JOIN gl l ON l.g = r.id WHERE x.id < 20 ORDER BY 1, 3",
		"SELECT l, x.id FROM gl l JOIN {t} x ON x.id = l.g ORDER BY 2, 1",
		"SELECT (SELECT count(*) FROM gl), count(*) FROM {t}",
		"SELECT r.name, count(l.g) FROM {r} r LEFT JOIN gl l ON l.g = r.id GROUP BY 1 ORDER BY 1", // a reference table only
		"SELECT x.id / (l.g - 1) FROM {t} x JOIN gl l ON l.g = x.g",                               // 22012, as PostgreSQL
		// Grouped by the key, unqualified beside the local table
		// (adversary: 42803, groupByKeys took one FROM item only).
		"SELECT id, n, count(*) FROM {t} JOIN gl ON true GROUP BY id ORDER BY 1 LIMIT 7",
		"SELECT {t}.id, t, count(label) FROM {t} JOIN gl USING (g) GROUP BY id ORDER BY 1",
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		for _, q := range queries {
			gatherBoth(t, c, fleet, oracle, q, mode)
		}
		gatherBoth(t, c, fleet, oracle, "SELECT x.id, l.label FROM {t} x JOIN gl l ON l.g = x.g WHERE x.id > $1 AND l.label <> $2 ORDER BY 1, 2", mode, 10, "uno")
	}
	// In a transaction block that wrote the local table and the
	// distributed one: the gathering sees both writes.
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	exec(t, c, "INSERT INTO gl VALUES (2, 'two')")
	exec(t, c, "INSERT INTO ga (id, g) VALUES (1000, 2)")
	exec(t, c, "INSERT INTO gao (id, g) VALUES (1000, 2)")
	gatherBoth(t, c, fleet, oracle, "SELECT x.id, l.label FROM {t} x JOIN gl l ON l.g = x.g WHERE l.g = 2 ORDER BY 1", pgx.QueryExecModeSimpleProtocol)
	// Beside a reference table only: the default node's copy, in the
	// block (which holds the other worker too now).
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		gatherBoth(t, c, fleet, oracle, "SELECT r.name, l.label FROM {r} r JOIN gl l ON l.g = r.id ORDER BY 1, 2", mode)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM ga x JOIN gl l ON l.g = x.g WHERE l.g = 2").Scan(&n); err != nil || n != 0 {
		t.Errorf("after ROLLBACK: %d, %v; want 0 rows", n, err)
	}
	// Writes reading a local table stay refused.
	for _, q := range []string{
		"UPDATE ga SET g = 1 WHERE id = 5 AND g IN (SELECT g FROM gl)",
		"SELECT x.id FROM ga x JOIN gl l ON l.g = x.g WHERE x.id = 5 FOR UPDATE",
	} {
		if _, err := c.Exec(ctx, q); sqlState(err) != "0A000" {
			t.Errorf("%s: %v, want 0A000", q, err)
		}
	}
}

// TestGatherLocalTablesFirstShardMoved: the gathered statement runs where
// the first shard is; with a local table it must be the default node, and
// when it is not the read is refused with 0A000 and a hint, not answered
// from a node without the local table.
func TestGatherLocalTablesFirstShardMoved(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	ctx := context.Background()
	testTable(t, c, "glm", "(id int PRIMARY KEY, g int)", "SELECT create_distributed_table('glm', 'id', shard_count => 4, colocate_with => 'none')")
	plainTables(t, c, "glm_l (g int)")
	exec(t, c, "INSERT INTO glm SELECT i, i % 3 FROM generate_series(1, 30) i")
	exec(t, c, "INSERT INTO glm_l VALUES (1), (2)")
	q := "SELECT count(*) FROM glm x JOIN glm_l l ON l.g = x.g"
	var n int
	if err := c.QueryRow(ctx, q).Scan(&n); err != nil || n != 20 {
		t.Fatalf("first shard on the default node: %d, %v; want 20", n, err)
	}
	moveFirstShard(t, c, cl, "glm")
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		err := c.QueryRow(ctx, q, mode).Scan(&n)
		if sqlState(err) != "0A000" {
			t.Errorf("%v: first shard moved off the default node: %d, %v; want 0A000", mode, n, err)
		}
	}
}

// TestGatherLocalTablesExtendedInBlock: over the extended protocol, a
// local join first described inside a transaction block or a pinned
// session is refused with 0A000: it would be described on another
// connection of the default node, which waited for the block's lock on
// the local table (adversary: TRUNCATE, then the join hung past the
// client's cancel, and kept the table locked), did not see a table the
// block made, nor a temporary table (42P01 for both).
func TestGatherLocalTablesExtendedInBlock(t *testing.T) {
	c := gatherEnv(t)
	plainTables(t, c, "glx (g int, label text)")
	exec(t, c, "INSERT INTO glx VALUES (1, 'one')")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cached := pgx.QueryExecModeCacheStatement
	for i, setup := range []string{"TRUNCATE glx", "CREATE TABLE glx_new (g int)"} {
		tx, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		exec(t, c, setup)
		rel := []string{"glx", "glx_new"}[i]
		_, err = c.Exec(ctx, fmt.Sprintf("SELECT count(*) FROM ga x JOIN %s l ON l.g = x.g WHERE x.id < $1", rel), cached, 100+i)
		if sqlState(err) != "0A000" {
			t.Errorf("after %s in a block: %v, want 0A000", setup, err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM ga x JOIN glx l ON l.g = x.g").Scan(&n); err != nil || n == 0 {
		t.Errorf("after the blocks: %d, %v; want the rows (the table not left locked)", n, err)
	}
	exec(t, c, "CREATE TEMP TABLE glx_tmp (g int)")
	if _, err := c.Exec(ctx, "SELECT count(*) FROM ga x JOIN glx_tmp l ON l.g = x.g WHERE x.id < $1", cached, 7); sqlState(err) != "0A000" {
		t.Errorf("a temporary table: %v, want 0A000", err)
	}
}
