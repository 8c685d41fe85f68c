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
