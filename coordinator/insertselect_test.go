package coordinator_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestInsertSelect: INSERT ... SELECT between colocated tables, the
// target's distribution column the source's, runs shard by shard and
// leaves the target exactly as PostgreSQL does (tag and contents against
// oracle tables), all or nothing; what does not push down runs in two steps
// with the same answer, or is refused with a hint and writes nothing.
func TestInsertSelect(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	c := connect(t, srv.Addr())
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	const scols = "(id int PRIMARY KEY, g int, v numeric(8,2), t text)"
	const dcols = "(id int, g int, total numeric, note text, PRIMARY KEY (id, g))"
	testTable(t, c, "iss", scols, "SELECT create_distributed_table('iss', 'id', shard_count => 5)")
	testTable(t, c, "isd", dcols, "SELECT create_distributed_table('isd', 'id', colocate_with => 'iss')")
	testTable(t, c, "isn", "(k int PRIMARY KEY, id int)", "SELECT create_distributed_table('isn', 'k', shard_count => 3)")
	testTable(t, c, "isr", "(g int PRIMARY KEY, name text)", "SELECT create_reference_table('isr')")
	plainTables(t, c, "isso "+scols, "isdo "+dcols, "isro (g int PRIMARY KEY, name text)", "isno (k int PRIMARY KEY, id int)")
	var rows []string
	for i := 1; i <= 50; i++ {
		g := fmt.Sprint(i % 4)
		if i%9 == 0 {
			g = "NULL"
		}
		rows = append(rows, fmt.Sprintf("(%d, %s, %d.5, '%s')", i, g, i%7-2, []string{"a", "é", "", "日本"}[i%4]))
	}
	for _, tb := range []string{"iss", "isso"} {
		exec(t, c, "INSERT INTO "+tb+" (id, g, v, t) VALUES "+strings.Join(rows, ", "))
	}
	for _, tb := range []string{"isr", "isro"} {
		exec(t, c, "INSERT INTO "+tb+" (g, name) VALUES (0, 'zero'), (1, 'one'), (3, 'three')")
	}
	fleet := strings.NewReplacer("{s}", "iss", "{d}", "isd", "{r}", "isr", "{n}", "isn")
	oracle := strings.NewReplacer("{s}", "isso", "{d}", "isdo", "{r}", "isro", "{n}", "isno")
	same := func(what string) {
		t.Helper()
		got := gatherRun(t, c, "SELECT * FROM isd ORDER BY id, g", simple)
		want := gatherRun(t, c, "SELECT * FROM isdo ORDER BY id, g", simple)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("after %s: contents differ:\n got %v\nwant %v", what, got, want)
		}
	}
	for _, q := range []string{
		"INSERT INTO {d} (id, g, total, note) SELECT id, g, v, t FROM {s} WHERE g = 1",
		"INSERT INTO {d} (total, id, g) SELECT sum(v), id, 9 FROM {s} GROUP BY id HAVING sum(v) > 0 ON CONFLICT DO NOTHING",
		"INSERT INTO {d} AS d (id, g, note) SELECT s.id, r.g, r.name || s.t FROM {s} s JOIN {r} r ON r.g = s.g WHERE s.v < 3 ON CONFLICT (id, g) DO UPDATE SET note = excluded.note",
		"INSERT INTO {d} (id, g, total) SELECT d.id, 20, count(*) FROM {d} d JOIN {s} s ON s.id = d.id WHERE s.id = 4 GROUP BY d.id",
		"INSERT INTO {d} (id, g) SELECT id, 30 FROM {s} WHERE false",
	} {
		got := gatherRun(t, c, fleet.Replace(q), simple)
		want := gatherRun(t, c, oracle.Replace(q), simple)
		if !reflect.DeepEqual(got, want) || got.State != "" {
			t.Fatalf("%s:\n got %+v\nwant %+v (plain PostgreSQL)", q, got, want)
		}
		same(q)
	}
	// An error on one shard: nothing inserted anywhere.
	for _, q := range []struct{ sql, state string }{
		{"INSERT INTO {d} (id, g, total) SELECT id, 40, 100 / (v - 1.5) FROM {s}", "22012"},
		{"INSERT INTO {d} (id, g) SELECT id, 9 FROM {s}", "23505"}, // the rows of GROUP BY id above
	} {
		_, err := c.Exec(ctx, fleet.Replace(q.sql), simple)
		_, oerr := c.Exec(ctx, oracle.Replace(q.sql), simple)
		if sqlState(err) != q.state || sqlState(oerr) != q.state {
			t.Errorf("%s: %v (PostgreSQL: %v), want %s", q.sql, err, oerr, q.state)
		}
		same(q.sql)
	}
	// What does not push down runs in two steps (insertrows.go), with
	// PostgreSQL's answer.
	for _, q := range []string{
		"INSERT INTO {d} (id, g) SELECT id, 50 FROM {n}",                       // not colocated
		"INSERT INTO {d} (id, g) SELECT g, 50 FROM {s} WHERE g IS NOT NULL",    // not the distribution column
		"INSERT INTO {d} (id, g) SELECT id, 50 FROM {s} ORDER BY id LIMIT 3",   // LIMIT
		"INSERT INTO {d} (id, g) SELECT id, rank() OVER (ORDER BY v) FROM {s}", // crosses shards
		"INSERT INTO {d} SELECT id, 51 FROM {s}",                               // no column list
	} {
		got := gatherRun(t, c, fleet.Replace(q), simple)
		want := gatherRun(t, c, oracle.Replace(q), simple)
		if !reflect.DeepEqual(got, want) || got.State == "0A000" {
			t.Errorf("%s:\n got %+v\nwant %+v (plain PostgreSQL)", q, got, want)
		}
		same(q)
	}
	// DO UPDATE runs on each shard: its subquery would read one.
	q := "INSERT INTO isd (id, g) SELECT id, 1 FROM iss ON CONFLICT (id, g) DO UPDATE SET total = (SELECT max(v) FROM iss)"
	_, err := c.Exec(ctx, q, simple)
	wantRefusal(t, q, err)
	same("refusals")
}

// TestInsertSelectBatches: an INSERT ... SELECT whose rows go through the
// coordinator in several INSERTs (over 1,000 rows or 1 MiB) answers as one
// statement: the rows, the RETURNING rows in order and the tag are plain
// PostgreSQL's; an error in a late part, or a row that ON CONFLICT DO
// UPDATE would update twice (which goes as one statement), leaves nothing.
func TestInsertSelectBatches(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	c := connect(t, srv.Addr())
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	const cols = "(id int PRIMARY KEY, k int, note text)"
	testTable(t, c, "ibs", "(id int, k int, note text)", "SELECT create_distributed_table('ibs', 'k', shard_count => 3)")
	testTable(t, c, "ibd", cols, "SELECT create_distributed_table('ibd', 'id', shard_count => 5)")
	plainTables(t, c, "ibso (id int, k int, note text)", "ibdo "+cols)
	for _, tb := range []string{"ibs", "ibso"} {
		// 2,600 rows, ids 1..2600; one note of 600 kB makes a part of its
		// own by size.
		exec(t, c, "INSERT INTO "+tb+" SELECT g, g % 7, CASE WHEN g = 1500 THEN repeat('x', 600000) ELSE 'n' || g END FROM generate_series(1, 2600) g")
	}
	fleet := strings.NewReplacer("{s}", "ibs", "{d}", "ibd")
	oracle := strings.NewReplacer("{s}", "ibso", "{d}", "ibdo")
	same := func(what string) {
		t.Helper()
		q := "SELECT id, k, md5(note) FROM {d} ORDER BY id"
		got := gatherRun(t, c, fleet.Replace(q), simple)
		want := gatherRun(t, c, oracle.Replace(q), simple)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("after %s: contents differ: %d rows, want %d", what, len(got.Rows), len(want.Rows))
		}
	}
	for _, q := range []string{
		"INSERT INTO {d} SELECT id, k, note FROM {s} WHERE id > 100",
		"INSERT INTO {d} SELECT id - 100, -k, left(note, 10) FROM {s} WHERE id <= 100 ORDER BY id DESC RETURNING id, k, length(note)",
		"INSERT INTO {d} SELECT id, k, 'again' FROM {s} ON CONFLICT DO NOTHING",
		"INSERT INTO {d} SELECT id + 5000, k, 'new' FROM {s} ORDER BY id ON CONFLICT (id) DO NOTHING",
		"INSERT INTO {d} SELECT id + 10000, k, 'r' FROM {s} ORDER BY id RETURNING id, note",
	} {
		got := gatherRun(t, c, fleet.Replace(q), simple)
		want := gatherRun(t, c, oracle.Replace(q), simple)
		if !reflect.DeepEqual(got, want) || got.State != "" {
			t.Fatalf("%s:\n got %d rows, tag %q, state %q\nwant %d rows, tag %q, state %q (plain PostgreSQL)",
				q, len(got.Rows), got.Tag, got.State, len(want.Rows), want.Tag, want.State)
		}
		same(q)
	}
	// Errors in a late part: nothing of the statement stays.
	for _, q := range []struct{ sql, state string }{
		// id 2600 - 2500 = 100 is there already: the third part fails.
		{"INSERT INTO {d} SELECT id + 20000 - CASE WHEN id = 2600 THEN 22500 ELSE 0 END, k, 'dup' FROM {s} ORDER BY id", "23505"},
		// Two rows for one target row, 2,000 rows apart.
		{"INSERT INTO {d} SELECT CASE WHEN id = 2500 THEN 30001 ELSE id + 30000 END, k, 'u' FROM {s} ON CONFLICT (id) DO UPDATE SET note = excluded.note", "21000"},
	} {
		_, err := c.Exec(ctx, fleet.Replace(q.sql), simple)
		_, oerr := c.Exec(ctx, oracle.Replace(q.sql), simple)
		if sqlState(err) != q.state || sqlState(oerr) != q.state {
			t.Errorf("%s: %v (PostgreSQL: %v), want %s", q.sql, err, oerr, q.state)
		}
		same(q.sql)
	}
	// A part that fails after others returned rows: as on PostgreSQL,
	// which runs INSERT ... RETURNING to its end before sending a row,
	// the client gets the error and no row.
	for _, q := range []string{
		"INSERT INTO {d} SELECT id + 50000 - CASE WHEN id = 2600 THEN 52400 ELSE 0 END, k, 'r' FROM {s} ORDER BY id RETURNING id",
	} {
		for _, r := range []*strings.Replacer{fleet, oracle} {
			res, err := c.PgConn().Exec(ctx, r.Replace(q)).ReadAll()
			rows := 0
			for _, rr := range res {
				rows += len(rr.Rows)
			}
			if sqlState(err) != "23505" || rows != 0 {
				t.Errorf("%s: %d rows before %v, want none and 23505", r.Replace(q), rows, err)
			}
		}
		same(q)
	}
	// In a transaction block: the rows are the transaction's.
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO ibd SELECT id + 40000, k, note FROM ibs", simple); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM ibd WHERE id > 40000", simple).Scan(&n); err != nil || n != 2600 {
		t.Fatalf("inside the transaction: %d rows (%v), want 2600", n, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	same("a rolled back transaction")
}
