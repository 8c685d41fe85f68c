package coordinator_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestInsertWithoutColumns: INSERT INTO t VALUES (...) with no column
// list, the distribution column not first, gives each value the column
// PostgreSQL gives it (the table's columns read from PostgreSQL), in both
// protocols, after DDL that moves the columns, and each row is found by a
// read routed on its distribution value.
func TestInsertWithoutColumns(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	c := connect(t, srv.Addr())
	simple, ext := pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement
	const cols = "(a text, id int PRIMARY KEY, b numeric, c int DEFAULT 7)"
	testTable(t, c, "ic", cols, "SELECT create_distributed_table('ic', 'id', shard_count => 5)")
	plainTables(t, c, "ico "+cols)
	fleet, oracle := strings.NewReplacer("{t}", "ic"), strings.NewReplacer("{t}", "ico")
	both := func(q string, mode pgx.QueryExecMode, args ...any) {
		t.Helper()
		gatherBoth(t, c, fleet, oracle, q, mode, args...)
	}
	for _, q := range []string{
		"INSERT INTO {t} VALUES ('x', 1, 2.5)",
		"INSERT INTO {t} VALUES ('y', 2, 1, 3), ('z', 3, NULL, 4), ('é', 40, -1)",
		"INSERT INTO {t} AS t VALUES ('w', 4, 0.5, DEFAULT) RETURNING *",
		"INSERT INTO {t} VALUES ('x2', 1, 9) ON CONFLICT (id) DO UPDATE SET b = excluded.b RETURNING a, b, c",
		"INSERT INTO {t} VALUES ('v', 5, 1, 2, 3)", // more values than columns: 42601
		"INSERT INTO {t} VALUES (6, 'v')",          // 22P02 on the value for id
	} {
		both(q, simple)
	}
	both("INSERT INTO {t} VALUES ($1, $2, $3)", ext, "p", 7, "1.25")
	both("INSERT INTO {t} VALUES ($1, $2) RETURNING id, c", ext, "q", 8)
	both("SELECT * FROM {t} ORDER BY id", simple)
	for id := range 9 {
		both("SELECT a, b, c FROM {t} WHERE id = $1", ext, id)
	}
	// DDL that moves the distribution column's position: the next INSERT,
	// and the prepared one again, take the new columns.
	for _, tb := range []string{"ic", "ico"} {
		exec(t, c, "ALTER TABLE "+tb+" DROP COLUMN a", simple)
	}
	both("INSERT INTO {t} VALUES (20, 3.5)", simple)
	both("INSERT INTO {t} VALUES ($1, $2, $3)", ext, 21, "2", 8)
	both("SELECT * FROM {t} ORDER BY id", simple)
	for _, id := range []int{20, 21} {
		both("SELECT b, c FROM {t} WHERE id = $1", ext, id)
	}
	// A multi-row INSERT without columns over the extended protocol, its
	// rows over several shards.
	both("INSERT INTO {t} VALUES ($1, $2), ($3, $4), ($5, $6)", ext, 30, 1, 31, 2, 32, 3)
	both("SELECT * FROM {t} ORDER BY id", simple)
}
