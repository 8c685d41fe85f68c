package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// describeRun is the columns, rows and tag (or SQLSTATE) of one statement
// sent as a simple Query.
func describeRun(t *testing.T, pc *pgconn.PgConn, sql string) string {
	t.Helper()
	var b strings.Builder
	mrr := pc.Exec(context.Background(), sql)
	for mrr.NextResult() {
		rr := mrr.ResultReader()
		for _, f := range rr.FieldDescriptions() {
			fmt.Fprintf(&b, "%s:%d ", f.Name, f.DataTypeOID)
		}
		n := 0
		for rr.NextRow() {
			n++
		}
		tag, err := rr.Close()
		if err != nil {
			fmt.Fprintf(&b, "error %s; ", sqlState(err))
			continue
		}
		fmt.Fprintf(&b, "%d rows %s; ", n, tag)
	}
	if err := mrr.Close(); err != nil {
		fmt.Fprintf(&b, "error %s", sqlState(err))
	}
	return b.String()
}

// TestReturningNoRows: a write with RETURNING that returns no row still
// describes its columns, as PostgreSQL does: multi-shard UPDATE and
// DELETE, INSERT ... SELECT between colocated tables, and reference-table
// writes (regression: the columns were left out, and clients saw none).
func TestReturningNoRows(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	c := connect(t, srv.Addr())
	testTable(t, c, "rn", "(k bigint PRIMARY KEY, v text)", "SELECT create_distributed_table('rn', 'k', shard_count => 4)")
	testTable(t, c, "rn2", "(k bigint PRIMARY KEY, v text)", "SELECT create_distributed_table('rn2', 'k', colocate_with => 'rn')")
	testTable(t, c, "rnr", "(k int PRIMARY KEY, v text)", "SELECT create_reference_table('rnr')")
	plainTables(t, c, "rno (k bigint PRIMARY KEY, v text)", "rno2 (k bigint PRIMARY KEY, v text)", "rnro (k int PRIMARY KEY, v text)")
	for _, tb := range []string{"rn", "rno", "rnr", "rnro"} {
		exec(t, c, "INSERT INTO "+tb+" VALUES (1, 'a'), (2, 'b'), (3, 'c')")
	}
	pc := c.PgConn()
	fleet := strings.NewReplacer("{t}", "rn", "{t2}", "rn2", "{r}", "rnr")
	oracle := strings.NewReplacer("{t}", "rno", "{t2}", "rno2", "{r}", "rnro")
	for _, q := range []string{
		"UPDATE {t} SET v = 'z' WHERE v = 'nope' RETURNING k, v",
		"DELETE FROM {t} WHERE v = 'nope' RETURNING *",
		"UPDATE {t} SET v = v WHERE k > 1 RETURNING k, v || '!' AS w",
		"INSERT INTO {t2} (k, v) SELECT k, v FROM {t} WHERE v = 'nope' RETURNING k",
		"DELETE FROM {r} WHERE k = 42 RETURNING k",
		"UPDATE {r} SET v = 'z' WHERE k = 42 RETURNING v, k",
		"INSERT INTO {r} VALUES (1, 'x') ON CONFLICT DO NOTHING RETURNING *",
		"DELETE FROM {t} WHERE k = 42 RETURNING k, v",
	} {
		for _, block := range []bool{false, true} {
			if block {
				q = "BEGIN; " + q + "; ROLLBACK"
			}
			got, want := describeRun(t, pc, fleet.Replace(q)), describeRun(t, pc, oracle.Replace(q))
			if got != want || strings.Contains(got, "error") {
				t.Errorf("%s:\n got %s\nwant %s (plain PostgreSQL)", q, got, want)
			}
		}
	}
}

// TestOnConflictOnConstraint: INSERT ... ON CONFLICT ON CONSTRAINT names
// the table's constraint, which each shard has under its own name: routed,
// over several shards, INSERT ... SELECT, reference tables, both protocols
// (regression: 42704 from the shard).
func TestOnConflictOnConstraint(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	c := connect(t, srv.Addr())
	testTable(t, c, "oc", "(k bigint PRIMARY KEY, v text)", "SELECT create_distributed_table('oc', 'k', shard_count => 4)")
	testTable(t, c, "oc2", "(k bigint, v text, CONSTRAINT oc2_k_uniq_with_a_rather_long_name_to_be_shortened_on_shards UNIQUE (k))",
		"SELECT create_distributed_table('oc2', 'k', colocate_with => 'oc')")
	testTable(t, c, "ocr", "(k int PRIMARY KEY, v text)", "SELECT create_reference_table('ocr')")
	plainTables(t, c, "oco (k bigint PRIMARY KEY, v text)",
		"oco2 (k bigint, v text, CONSTRAINT oco2_k_uniq_with_a_rather_long_name_to_be_shortened_on_shards UNIQUE (k))",
		"ocro (k int PRIMARY KEY, v text)")
	fleet := strings.NewReplacer("{t}", "oc", "{t2}", "oc2", "{r}", "ocr")
	oracle := strings.NewReplacer("{t}", "oco", "{t2}", "oco2", "{r}", "ocro")
	simple, ext := pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement
	for _, q := range []string{
		"INSERT INTO {t} VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd')",
		"INSERT INTO {t} VALUES (1, 'x') ON CONFLICT ON CONSTRAINT {t}_pkey DO NOTHING",
		"INSERT INTO {t} VALUES (2, 'x') ON CONFLICT ON CONSTRAINT {t}_pkey DO UPDATE SET v = excluded.v RETURNING *",
		"INSERT INTO {t} VALUES (3, 'y'), (4, 'y'), (5, 'y') ON CONFLICT ON CONSTRAINT {t}_pkey DO UPDATE SET v = excluded.v || {t}.v",
		"INSERT INTO {t} VALUES (6, 'z') ON CONFLICT ON CONSTRAINT no_such_constraint DO NOTHING",
		"INSERT INTO {t2} (k, v) SELECT k, v FROM {t} ON CONFLICT ON CONSTRAINT {t2}_k_uniq_with_a_rather_long_name_to_be_shortened_on_shards DO NOTHING",
		"INSERT INTO {t2} (k, v) SELECT k, v || '2' FROM {t} ON CONFLICT ON CONSTRAINT {t2}_k_uniq_with_a_rather_long_name_to_be_shortened_on_shards DO UPDATE SET v = excluded.v",
		"INSERT INTO {r} VALUES (1, 'a') ON CONFLICT ON CONSTRAINT {r}_pkey DO NOTHING",
		"INSERT INTO {r} VALUES (1, 'b') ON CONFLICT ON CONSTRAINT {r}_pkey DO UPDATE SET v = excluded.v",
		"SELECT * FROM {t} ORDER BY k",
		"SELECT * FROM {t2} ORDER BY k",
		"SELECT * FROM {r} ORDER BY k",
	} {
		gatherBoth(t, c, fleet, oracle, q, simple)
	}
	gatherBoth(t, c, fleet, oracle, "INSERT INTO {t} VALUES ($1, $2) ON CONFLICT ON CONSTRAINT {t}_pkey DO UPDATE SET v = excluded.v RETURNING k, v", ext, 1, "p")
	gatherBoth(t, c, fleet, oracle, "INSERT INTO {r} VALUES ($1, $2) ON CONFLICT ON CONSTRAINT {r}_pkey DO UPDATE SET v = excluded.v", ext, 1, "p")
	gatherBoth(t, c, fleet, oracle, "SELECT * FROM {t} ORDER BY k", simple)
	gatherBoth(t, c, fleet, oracle, "SELECT * FROM {r} ORDER BY k", simple)
}

// TestWorkerErrorsAsPostgreSQL: a worker's error in a statement the
// coordinator runs on several shards (reference-table writes, multi-row
// INSERT, multi-shard UPDATE, COPY) reaches the client as PostgreSQL gives
// it: the same SQLSTATE, message, detail and constraint and table names,
// without shard names or where it ran (regression: "on node 1 (...): "
// before the message).
func TestWorkerErrorsAsPostgreSQL(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	c := connect(t, srv.Addr())
	testTable(t, c, "we", "(k bigint PRIMARY KEY, v int NOT NULL)", "SELECT create_distributed_table('we', 'k', shard_count => 4)")
	testTable(t, c, "wer", "(k int PRIMARY KEY, v int NOT NULL)", "SELECT create_reference_table('wer')")
	plainTables(t, c, "weo (k bigint PRIMARY KEY, v int NOT NULL)", "wero (k int PRIMARY KEY, v int NOT NULL)")
	fleet := strings.NewReplacer("{t}", "we", "{r}", "wer")
	oracle := strings.NewReplacer("{t}", "weo", "{r}", "wero")
	ctx := context.Background()
	errOf := func(q string, names *strings.Replacer) string {
		_, err := c.Exec(ctx, names.Replace(q), pgx.QueryExecModeSimpleProtocol)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) {
			return fmt.Sprint(err)
		}
		// The oracle's table names read as the fleet's.
		un := strings.NewReplacer("weo", "we", "wero", "wer")
		return fmt.Sprintf("%s %q %q %q %q", pe.Code, un.Replace(pe.Message), un.Replace(pe.Detail), un.Replace(pe.ConstraintName), un.Replace(pe.TableName))
	}
	for _, q := range []string{
		"INSERT INTO {t} VALUES (1, 1), (2, 2), (3, 3), (4, 4)",
		"INSERT INTO {r} VALUES (1, 1), (2, 2)",
	} {
		exec(t, c, fleet.Replace(q))
		exec(t, c, oracle.Replace(q))
	}
	for _, q := range []string{
		"INSERT INTO {t} VALUES (5, 5), (6, 6), (1, 7)",
		"INSERT INTO {t} VALUES (5, 5), (6, NULL), (7, 7)",
		"INSERT INTO {r} VALUES (1, 1)",
		"INSERT INTO {r} VALUES (3, NULL)",
		"UPDATE {r} SET v = 1 / (k - 2)",
		"UPDATE {t} SET v = 1 / (k - 3)",
		"UPDATE {t} SET v = NULL WHERE k > 2",
	} {
		got, want := errOf(q, fleet), errOf(q, oracle)
		if got != want {
			t.Errorf("%s:\n got %s\nwant %s (plain PostgreSQL)", q, got, want)
		}
	}
}
