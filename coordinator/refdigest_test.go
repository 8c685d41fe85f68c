package coordinator_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// refCopies returns the contents of every copy of a reference table (read
// on each worker directly) and fails the test unless they are identical.
func refCopies(t *testing.T, workers []*pgx.Conn, copyTable, what string) string {
	t.Helper()
	var first string
	for i, w := range workers {
		var got string
		if err := w.QueryRow(context.Background(),
			"SELECT coalesce(string_agg(x::text, ',' ORDER BY x::text), '') FROM "+copyTable+" x",
			pgx.QueryExecModeSimpleProtocol).Scan(&got); err != nil {
			t.Fatalf("%s: copy %d: %v", what, i, err)
		}
		if i == 0 {
			first = got
		} else if got != first {
			t.Fatalf("%s: copies differ:\n%s\n%s", what, first, got)
		}
	}
	return first
}

// TestReferenceCopiesNeverDiverge runs writes to a reference table whose
// values each copy would compute on its own, by causes the text checks do
// not see (system columns, catalog-dependent values, date/time words built
// at run time, a function declared IMMUTABLE that is not, LIMIT without
// ORDER BY, a function redefined through another coordinator), over both
// protocols, inside and outside transaction blocks: the client gets
// PostgreSQL's answer with identical copies, or 0A000 with nothing written
// (adversary 2, items 3 and 10).
func TestReferenceCopiesNeverDiverge(t *testing.T) {
	cl := pgtest.Shared(t)
	a := pgtest.Coordinator(t, cl, nil)
	b := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, a.Addr())
	c2 := connect(t, b.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	for _, q := range []string{
		"DROP TABLE IF EXISTS rd_ref", "DROP FUNCTION IF EXISTS rd_lie()", "DROP FUNCTION IF EXISTS rd_g()",
		"DROP TYPE IF EXISTS rd_mood",
		"CREATE TYPE rd_mood AS ENUM ('a', 'b')",
		"CREATE FUNCTION rd_lie() RETURNS float8 LANGUAGE sql IMMUTABLE AS 'SELECT random()'",
		"CREATE FUNCTION rd_g() RETURNS float8 LANGUAGE sql IMMUTABLE AS 'SELECT 1::float8'",
		"CREATE TABLE rd_ref (id int PRIMARY KEY, v text, n bigint, t timestamptz, ta timestamptz[], rg tstzrange)",
		"INSERT INTO rd_ref (id, v, n) SELECT g, 'v' || g, g FROM generate_series(1, 20) g",
		"SELECT create_reference_table('rd_ref')",
	} {
		exec(t, c, q, simple)
	}
	t.Cleanup(func() {
		for _, q := range []string{"SELECT undistribute_table('rd_ref')", "DROP TABLE IF EXISTS rd_ref",
			"DROP FUNCTION IF EXISTS rd_lie()", "DROP FUNCTION IF EXISTS rd_g()", "DROP TYPE IF EXISTS rd_mood"} {
			_, _ = c.Exec(ctx, q, simple)
		}
	})
	meta := connect(t, cl.Servers[0].Addr())
	var shard string
	if err := meta.QueryRow(ctx, "SELECT shardid::text FROM pgfleet.shards WHERE table_name = 'public.rd_ref'").Scan(&shard); err != nil {
		t.Fatal(err)
	}
	copyTable := "pgfleet_shards.rd_ref_" + shard
	var workers []*pgx.Conn
	for _, s := range cl.Servers {
		workers = append(workers, connect(t, s.Addr()))
	}
	if len(workers) < 2 {
		t.Fatal("need two workers")
	}
	refCopies(t, workers, copyTable, "before")
	// The same rows in another physical order on the first copy: a LIMIT
	// without ORDER BY picks other rows there.
	exec(t, workers[0], "UPDATE "+copyTable+" SET v = v WHERE id = 11")
	// check runs one statement: it must succeed with identical copies, or
	// fail with 0A000 leaving the copies as they were.
	check := func(what string, run func() error, mustRefuse bool) {
		t.Helper()
		before := refCopies(t, workers, copyTable, what+": before")
		err := run()
		after := refCopies(t, workers, copyTable, what+": after")
		switch {
		case err == nil && mustRefuse:
			t.Errorf("%s: accepted, want 0A000", what)
		case err != nil && sqlState(err) != "0A000":
			t.Errorf("%s: %v, want success or 0A000", what, err)
		case err != nil && after != before:
			t.Errorf("%s: refused but the copies changed", what)
		}
	}
	for _, s := range []struct {
		sql        string
		mustRefuse bool
	}{
		{"UPDATE rd_ref SET v = xmin::text WHERE id = 2", false},
		{"UPDATE rd_ref SET v = tableoid::text WHERE id = 3", true},
		{"INSERT INTO rd_ref (id, n) VALUES (50, 'rd_mood'::regtype::oid)", false},
		{"UPDATE rd_ref SET n = (SELECT count(*) FROM pg_class) WHERE id = 4", false},
		{"UPDATE rd_ref SET v = ('no' || 'w')::timestamptz::text WHERE id = 5", true},
		{"UPDATE rd_ref SET ta = '{now}'::timestamptz[] WHERE id = 6", true},
		{"UPDATE rd_ref SET rg = '[now,infinity)'::tstzrange WHERE id = 7", true},
		{"UPDATE rd_ref SET n = -1 WHERE id IN (SELECT id FROM rd_ref WHERE id > 10 LIMIT 1)", true},
		{"DELETE FROM rd_ref WHERE id IN (SELECT id FROM rd_ref WHERE id > 10 LIMIT 1)", true},
		{"UPDATE rd_ref SET v = rd_lie()::text WHERE id = 8", true},
		{"UPDATE rd_ref SET v = rd_lie()::text WHERE id = 8 RETURNING id", true},
		{"INSERT INTO rd_ref (id, v) VALUES (51, rd_lie()::text)", true},
		{"WITH x AS (UPDATE rd_ref SET v = rd_lie()::text WHERE id = 12 RETURNING id) SELECT * FROM x", true},
	} {
		check("simple: "+s.sql, func() error { _, err := c.Exec(ctx, s.sql, simple); return err }, s.mustRefuse)
		check("simple in a transaction block: "+s.sql, func() error {
			if _, err := c.Exec(ctx, "BEGIN", simple); err != nil {
				return err
			}
			_, err := c.Exec(ctx, s.sql, simple)
			if err != nil {
				_, _ = c.Exec(ctx, "ROLLBACK", simple)
				return err
			}
			_, err = c.Exec(ctx, "COMMIT", simple)
			return err
		}, s.mustRefuse)
	}
	// Over the extended protocol, with parameters, in and outside a
	// transaction block.
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec} {
		m := mode.String()
		check(m+": immutable lie", func() error {
			_, err := c.Exec(ctx, "UPDATE rd_ref SET v = rd_lie()::text WHERE id = $1", mode, 9)
			return err
		}, true)
		check(m+": data-modifying WITH", func() error {
			_, err := c.Exec(ctx, "WITH x AS (UPDATE rd_ref SET v = rd_lie()::text WHERE id = $1 RETURNING id) SELECT * FROM x", mode, 12)
			return err
		}, true)
		check(m+": time word in a parameter built at run time", func() error {
			_, err := c.Exec(ctx, "UPDATE rd_ref SET v = ($1 || 'w')::timestamptz::text WHERE id = $2", mode, "no", 9)
			return err
		}, true)
		check(m+": in a transaction block", func() error {
			tx, err := c.Begin(ctx)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "UPDATE rd_ref SET v = rd_lie()::text WHERE id = $1", mode, 10); err != nil {
				_ = tx.Rollback(ctx)
				return err
			}
			return tx.Commit(ctx)
		}, true)
	}
	// Writes every copy computes alike keep working, with PostgreSQL's
	// answers.
	if tag, err := c.Exec(ctx, "UPDATE rd_ref SET n = n + 1 WHERE id <= 3", simple); err != nil || tag.String() != "UPDATE 3" {
		t.Fatalf("plain update: %v %v", tag, err)
	}
	var ids []int
	rows, err := c.Query(ctx, "INSERT INTO rd_ref (id, v) VALUES (60, 'x'), (61, 'y') RETURNING id", simple)
	if err == nil {
		for rows.Next() {
			var id int
			_ = rows.Scan(&id)
			ids = append(ids, id)
		}
		rows.Close()
		err = rows.Err()
		if tag := rows.CommandTag().String(); tag != "INSERT 0 2" {
			t.Errorf("insert returning: tag %s", tag)
		}
	}
	if err != nil || len(ids) != 2 || ids[0] != 60 || ids[1] != 61 {
		t.Fatalf("insert returning: %v %v", ids, err)
	}
	if fds := rows.FieldDescriptions(); len(fds) != 1 || fds[0].Name != "id" {
		t.Errorf("insert returning: columns %v", fds)
	}
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tag, err := tx.Exec(ctx, "DELETE FROM rd_ref WHERE id = $1", 61); err != nil || tag.String() != "DELETE 1" {
		t.Fatalf("delete in a transaction block: %v %v", tag, err)
	}
	var got int
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM rd_ref WHERE id IN (60, 61)").Scan(&got); err != nil || got != 1 {
		t.Fatalf("count in the transaction: %d %v", got, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(refCopies(t, workers, copyTable, "after plain writes"), "(60,x,") {
		t.Error("row 60 missing")
	}
	// COPY: a date/time word inside an array or range, which the text
	// checks do not read; plain rows load.
	for _, data := range []string{"70\t{now}\n", "71\t[now,infinity)\n"} {
		col := "ta"
		if strings.Contains(data, "[") {
			col = "rg"
		}
		check("COPY "+data, func() error {
			_, err := c.PgConn().CopyFrom(ctx, strings.NewReader(data), "COPY rd_ref (id, "+col+") FROM STDIN")
			return err
		}, true)
	}
	check("COPY plain rows", func() error {
		tag, err := c.PgConn().CopyFrom(ctx, strings.NewReader("72\t{2020-01-01}\n73\t{}\n"), "COPY rd_ref (id, ta) FROM STDIN")
		if err == nil && tag.RowsAffected() != 2 {
			t.Errorf("COPY plain rows: %s", tag)
		}
		return err
	}, false)
	if !strings.Contains(refCopies(t, workers, copyTable, "after COPY"), "(73,,,,{},)") {
		t.Error("COPY plain rows: row 73 missing")
	}
	// A function coordinator a has seen as IMMUTABLE is redefined VOLATILE
	// (and so it is) through coordinator b: a's cached verdict must not let
	// a write store different values.
	check("cached verdict, before", func() error {
		_, err := c.Exec(ctx, "UPDATE rd_ref SET v = rd_g()::text WHERE id = 11", simple)
		return err
	}, false)
	exec(t, c2, "CREATE OR REPLACE FUNCTION rd_g() RETURNS float8 LANGUAGE sql VOLATILE AS 'SELECT random()'", simple)
	check("cached verdict, after another coordinator redefined the function", func() error {
		_, err := c.Exec(ctx, "UPDATE rd_ref SET v = rd_g()::text WHERE id = 11", simple)
		return err
	}, true)
}

// TestAlterTableValuesSameOnEveryShard: ALTER TABLE ... ADD COLUMN ...
// DEFAULT and ALTER COLUMN ... TYPE ... USING compute a value for every
// existing row on each worker; an expression that is not immutable is
// refused (0A000) on distributed and reference tables, and nothing
// changes; immutable ones run (adversary 2, items 3 and 10).
func TestAlterTableValuesSameOnEveryShard(t *testing.T) {
	cl := pgtest.Shared(t)
	a := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, a.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	for _, q := range []string{
		"DROP TABLE IF EXISTS ad_d", "DROP TABLE IF EXISTS ad_r",
		"CREATE TABLE ad_d (id int PRIMARY KEY, n bigint)", "CREATE TABLE ad_r (id int PRIMARY KEY, n bigint)",
		"INSERT INTO ad_d SELECT g, g FROM generate_series(1, 40) g", "INSERT INTO ad_r SELECT g, g FROM generate_series(1, 10) g",
		"SELECT create_distributed_table('ad_d', 'id')", "SELECT create_reference_table('ad_r')",
	} {
		exec(t, c, q, simple)
	}
	t.Cleanup(func() {
		for _, q := range []string{"SELECT undistribute_table('ad_d')", "SELECT undistribute_table('ad_r')",
			"DROP TABLE IF EXISTS ad_d", "DROP TABLE IF EXISTS ad_r"} {
			_, _ = c.Exec(ctx, q, simple)
		}
	})
	// A reference table written in a WITH of a statement routed to one
	// shard would change one copy only.
	for _, q := range []string{
		"WITH x AS (UPDATE ad_r SET n = 0 WHERE id = 1 RETURNING id) SELECT * FROM ad_d WHERE id = 1",
		"WITH x AS (DELETE FROM ad_r WHERE id = 2 RETURNING id) UPDATE ad_d SET n = 5 WHERE id = 2",
	} {
		if _, err := c.Exec(ctx, q, simple); sqlState(err) != "0A000" {
			t.Errorf("%s: %v, want 0A000", q, err)
		}
	}
	for _, tbl := range []string{"ad_d", "ad_r"} {
		for _, q := range []string{
			"ALTER TABLE " + tbl + " ADD COLUMN c timestamptz DEFAULT now()",
			"ALTER TABLE " + tbl + " ADD COLUMN c2 text DEFAULT pg_backend_pid()::text",
			"ALTER TABLE " + tbl + " ADD COLUMN c3 timestamptz DEFAULT 'now'",
			"ALTER TABLE " + tbl + " ADD COLUMN c4 float8 DEFAULT random()",
			"ALTER TABLE " + tbl + " ALTER COLUMN n TYPE text USING (n + random())::text",
			"ALTER TABLE " + tbl + " ALTER COLUMN n TYPE text USING n::text || clock_timestamp()",
		} {
			if _, err := c.Exec(ctx, q, simple); sqlState(err) != "0A000" {
				t.Errorf("%s: %v, want 0A000", q, err)
			}
		}
		var cols int
		if err := c.QueryRow(ctx, "SELECT count(*) FROM "+tbl+" WHERE n::text = id::text", simple).Scan(&cols); err != nil || cols == 0 {
			t.Fatalf("%s after refused ALTERs: %d %v", tbl, cols, err)
		}
		for _, q := range []string{
			"ALTER TABLE " + tbl + " ADD COLUMN k int DEFAULT 5",
			"ALTER TABLE " + tbl + " ALTER COLUMN n TYPE text USING (n * 2)::text",
			"ALTER TABLE " + tbl + " ALTER COLUMN k SET DEFAULT 7",
		} {
			exec(t, c, q, simple)
		}
		var bad int
		if err := c.QueryRow(ctx, "SELECT count(*) FROM "+tbl+" WHERE k <> 5 OR n <> (id * 2)::text", simple).Scan(&bad); err != nil || bad != 0 {
			t.Fatalf("%s after immutable ALTERs: %d rows wrong, %v", tbl, bad, err)
		}
	}
}
