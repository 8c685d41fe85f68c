package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestSavepointsAcrossWorkers: savepoints in a transaction block that spans
// workers (as ORMs nest transactions: Django's atomic, Rails'
// requires_new, pgx's nested Begin) behave as on plain PostgreSQL, in both
// protocols: a savepoint set before the transaction takes in a second
// worker is rolled back to there too, ROLLBACK TO undoes each worker's work
// after the savepoint and brings a failed transaction back, RELEASE keeps
// the work, and COMMIT keeps exactly what PostgreSQL keeps.
func TestSavepointsAcrossWorkers(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	c := connect(t, srv.Addr())
	plain := oracleDB(t, cl.Servers[1].Addr(), "sporacle")
	testTable(t, c, "sp_d", "(id int PRIMARY KEY, v int)", "SELECT create_distributed_table('sp_d', 'id', shard_count => 8)")
	exec(t, plain, "DROP TABLE IF EXISTS sp_d", simple)
	exec(t, plain, "CREATE TABLE sp_d (id int PRIMARY KEY, v int)", simple)

	script := []string{
		"BEGIN",
		"UPDATE sp_d SET v = v + 1 WHERE id = 1",
		`SAVEPOINT "s1_x1"`,
		"UPDATE sp_d SET v = v + 10",
		"SELECT sum(v) FROM sp_d",
		"SAVEPOINT b",
		"UPDATE sp_d SET v = v + 100 WHERE id = 2",
		"ROLLBACK TO SAVEPOINT b",
		"UPDATE sp_d SET v = v + 1000 WHERE id = 3",
		"RELEASE SAVEPOINT b",
		"SELECT sum(v) FROM sp_d",
		`ROLLBACK TO "s1_x1"`,
		"SELECT sum(v) FROM sp_d",
		"SAVEPOINT c",
		"UPDATE sp_d SET v = v + 5 WHERE id = 4",
		"INSERT INTO sp_d VALUES (5, 0)",
		"SELECT sum(v) FROM sp_d",
		"SAVEPOINT d",
		"ROLLBACK TO c",
		"UPDATE sp_d SET v = -v WHERE id = 6",
		"RELEASE c",
		"ROLLBACK TO c",
		"ROLLBACK TO \"s1_x1\"",
		"UPDATE sp_d SET v = v + 7",
		"SAVEPOINT e",
		"UPDATE sp_d SET v = v + 20 WHERE id = 7",
		"RELEASE e",
		"COMMIT",
		"SELECT string_agg(id || ':' || v, ',' ORDER BY id) FROM sp_d",
	}
	for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeExec} {
		for _, conn := range []*pgx.Conn{c, plain} {
			exec(t, conn, "TRUNCATE sp_d", simple)
			exec(t, conn, "INSERT INTO sp_d SELECT g, g FROM generate_series(1, 20) g", simple)
		}
		for _, q := range script {
			got, gerr := queryOne(c, q, mode)
			want, werr := queryOne(plain, q, mode)
			if got != want || sqlState(gerr) != sqlState(werr) {
				t.Errorf("%v: %s\n got %q %v\n PostgreSQL %q %v", mode, q, got, gerr, want, werr)
			}
		}
	}
	_ = ctx
}

// queryOne runs q and returns its first row's first value as text ("" for
// none).
func queryOne(c *pgx.Conn, q string, mode pgx.QueryExecMode) (string, error) {
	rows, err := c.Query(context.Background(), q, mode)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	out := ""
	if rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return "", err
		}
		if len(vals) > 0 {
			out = fmt.Sprint(vals[0])
		}
	}
	rows.Close()
	return out, rows.Err()
}

// TestSavepointNoticeAcrossWorkers: the notices a savepoint statement
// gets from PostgreSQL (an identifier truncated) reach the client in a
// transaction across workers too, once.
func TestSavepointNoticeAcrossWorkers(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	admin := connect(t, srv.Addr())
	testTable(t, admin, "spn_d", "(id int PRIMARY KEY, v int)", "SELECT create_distributed_table('spn_d', 'id', shard_count => 8)")
	exec(t, admin, "INSERT INTO spn_d SELECT g, g FROM generate_series(1, 20) g", simple)
	cfg, err := pgx.ParseConfig(pgtest.URL(srv.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	var notices []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { notices = append(notices, n.Code) }
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	long := strings.Repeat("s", 70)
	for _, q := range []string{"BEGIN", "UPDATE spn_d SET v = v + 1", "SAVEPOINT " + long, "ROLLBACK TO " + long, "COMMIT"} {
		exec(t, c, q, simple)
	}
	if len(notices) != 2 || notices[0] != "42622" || notices[1] != "42622" {
		t.Errorf("notices: %v, want 42622 twice (SAVEPOINT and ROLLBACK TO, each once)", notices)
	}
}
