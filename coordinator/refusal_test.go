package coordinator_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestRefusalsGivePostgreSQLAnswers: where PostgreSQL's own answer is
// known, a statement the coordinator cannot run gets it instead of 0A000:
// analysis errors of a refused statement (42883 operator does not exist,
// 42703, 22P02), in both protocols; CREATE TABLE of a distributed table's
// name (42P07, or a notice and CREATE TABLE with IF NOT EXISTS). A refused
// PREPARE leaves the session unpinned: statements on every worker still
// run.
func TestRefusalsGivePostgreSQLAnswers(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	plain := oracleDB(t, cl.Servers[1].Addr(), "qoracle")
	exec(t, plain, "DROP TABLE IF EXISTS rf_t")
	exec(t, plain, "CREATE TABLE rf_t (id int PRIMARY KEY, v text)")
	t.Cleanup(func() { _, _ = plain.Exec(context.Background(), "DROP TABLE IF EXISTS rf_t") })
	testTable(t, c, "rf_t", "(id int PRIMARY KEY, v text)", "SELECT create_distributed_table('rf_t', 'id', shard_count => 4)")
	var stmts []string
	for i := 1; i <= 8; i++ {
		stmts = append(stmts, fmt.Sprintf("INSERT INTO rf_t (id, v) VALUES (%d, 'v%d')", i, i))
	}
	compareOracle(t, c, plain, stmts, nil)

	wrong := []string{
		"UPDATE rf_t SET v = 'y' WHERE id = 'a'::text",
		"DELETE FROM rf_t WHERE id = 'a'::text",
		"UPDATE rf_t SET v = 'y' WHERE nosuch > 1",
		"DELETE FROM rf_t WHERE v = 1",
		"CREATE TABLE rf_t (id int)",
		"CREATE TABLE public.rf_t (id int, v text)",
		"CREATE TABLE IF NOT EXISTS rf_t (id int PRIMARY KEY, v text)",
		"CREATE TABLE IF NOT EXISTS public.rf_t (x int)",
	}
	compareOracle(t, c, plain, wrong, nil)
	for _, sql := range wrong[:4] {
		_, gerr := c.Exec(ctx, sql, pgx.QueryExecModeExec)
		_, werr := plain.Exec(ctx, sql, pgx.QueryExecModeExec)
		if sqlState(gerr) != sqlState(werr) {
			t.Errorf("extended %s: %v, PostgreSQL %v", sql, gerr, werr)
		}
	}
	// The notice of CREATE TABLE IF NOT EXISTS.
	var notices []string
	cfg := c.Config().Config.Copy()
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { notices = append(notices, n.Code+" "+n.Message) }
	nc, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close(ctx)
	if _, err := nc.Exec(ctx, "CREATE TABLE IF NOT EXISTS rf_t (id int)").ReadAll(); err != nil {
		t.Fatal(err)
	}
	if len(notices) != 1 || notices[0] != `42P07 relation "rf_t" already exists, skipping` {
		t.Errorf("notices %q, want PostgreSQL's one", notices)
	}

	// A refused PREPARE does not pin the session to one worker.
	if _, err := c.Exec(ctx, "PREPARE rf_p AS SELECT v FROM rf_t WHERE id = 1", pgx.QueryExecModeSimpleProtocol); sqlState(err) != "0A000" {
		t.Fatalf("PREPARE: %v, want the 0A000 refusal", err)
	}
	stmts = nil
	for i := 1; i <= 8; i++ {
		stmts = append(stmts, fmt.Sprintf("SELECT v FROM rf_t WHERE id = %d", i), fmt.Sprintf("UPDATE rf_t SET v = 'u%d' WHERE id = %d", i, i))
	}
	stmts = append(stmts, "SELECT count(*) FROM rf_t", "SELECT id, v FROM rf_t ORDER BY id")
	compareOracle(t, c, plain, stmts, nil)
}
