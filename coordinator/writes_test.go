package coordinator_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestWritesDuringDistribution inserts rows through two coordinators (one
// that runs the Citus function, one whose catalog lags behind, in both
// protocols) while create_distributed_table and create_reference_table move
// the table: every INSERT that was acknowledged is readable through the
// coordinator afterwards, and none is left in the hidden table on the
// default node.
func TestWritesDuringDistribution(t *testing.T) {
	cl := pgtest.Shared(t)
	a := pgtest.Coordinator(t, cl, nil)
	b := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	for fi, fn := range []string{"create_distributed_table('%s', 'id', shard_count => 4)", "create_reference_table('%s')"} {
		for round := 0; round < 2; round++ {
			table := fmt.Sprintf("wd_t%d%d", fi, round)
			c := connect(t, a.Addr())
			exec(t, c, "DROP TABLE IF EXISTS "+table)
			exec(t, c, "CREATE TABLE "+table+" (id bigint PRIMARY KEY, v text)")
			exec(t, c, "INSERT INTO "+table+" SELECT g, 'old' FROM generate_series(1, 20000) g")

			var mu sync.Mutex
			var acked []int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for w, addr := range []string{a.Addr(), b.Addr(), a.Addr(), b.Addr()} {
				wc := connect(t, addr)
				mode := pgx.QueryExecModeCacheStatement
				if w >= 2 {
					mode = simple
				}
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					for i := int64(0); ; i++ {
						select {
						case <-stop:
							if i > 50 {
								return
							}
						default:
						}
						id := 1000000*int64(w+1) + i
						if _, err := wc.Exec(ctx, "INSERT INTO "+table+" (id, v) VALUES ($1, 'new')", mode, id); err == nil {
							mu.Lock()
							acked = append(acked, id)
							mu.Unlock()
						}
					}
				}(w)
			}
			_, err := c.Exec(ctx, "SELECT "+fmt.Sprintf(fn, table), simple)
			close(stop)
			wg.Wait()
			if err != nil {
				t.Fatalf("%s: %v", fn, err)
			}
			t.Cleanup(func() {
				_, _ = c.Exec(ctx, "SELECT undistribute_table('"+table+"')", simple)
				_, _ = c.Exec(ctx, "DROP TABLE IF EXISTS "+table, simple)
			})
			var hidden int
			if err := connect(t, cl.Servers[0].Addr()).QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&hidden); err != nil {
				t.Fatal(err)
			}
			if hidden != 0 {
				t.Errorf("%s: %d rows in the hidden table on the default node", fn, hidden)
			}
			rows, err := c.Query(ctx, "SELECT id FROM "+table+" WHERE id >= 1000000", simple)
			if err != nil {
				t.Fatal(err)
			}
			got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil {
				t.Fatal(err)
			}
			have := map[int64]bool{}
			for _, id := range got {
				have[id] = true
			}
			var lost []int64
			for _, id := range acked {
				if !have[id] {
					lost = append(lost, id)
				}
			}
			sort.Slice(lost, func(i, j int) bool { return lost[i] < lost[j] })
			if len(lost) > 0 || len(acked) < 100 {
				t.Errorf("%s: %d of %d acknowledged rows lost: %v", fn, len(lost), len(acked), lost)
			}
			var old int
			if err := c.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE id < 1000000", simple).Scan(&old); err != nil || old != 20000 {
				t.Errorf("%s: %d old rows (%v), want 20000", fn, old, err)
			}
		}
	}
}

// TestCopyWhere loads rows with COPY ... FROM STDIN WHERE into a
// distributed and a reference table: the rows stored and the command tag
// are plain PostgreSQL's.
func TestCopyWhere(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	testTable(t, c, "cw_d", "(id bigint PRIMARY KEY, v int, s text)", "SELECT create_distributed_table('cw_d', 'id', shard_count => 4)")
	testTable(t, c, "cw_r", "(id bigint PRIMARY KEY, v int, s text)", "SELECT create_reference_table('cw_r')")
	plain := connect(t, cl.Servers[1].Addr())
	exec(t, plain, "DROP TABLE IF EXISTS cw_plain")
	exec(t, plain, "CREATE TABLE cw_plain (id bigint PRIMARY KEY, v int, s text)")
	t.Cleanup(func() { _, _ = plain.Exec(context.Background(), "DROP TABLE IF EXISTS cw_plain") })
	var data strings.Builder
	for i := 1; i <= 40; i++ {
		if i%7 == 0 {
			fmt.Fprintf(&data, "%d\t\\N\tn%d\n", i, i)
		} else {
			fmt.Fprintf(&data, "%d\t%d\ts%d\n", i, i, i)
		}
	}
	for _, where := range []string{"v > 15", "v > 15 AND s LIKE 's2%'", "v IS NULL OR id < 3", "false"} {
		exec(t, plain, "TRUNCATE cw_plain")
		want, err := plain.PgConn().CopyFrom(ctx, strings.NewReader(data.String()), "COPY cw_plain FROM STDIN WHERE "+where)
		if err != nil {
			t.Fatal(err)
		}
		wantRows := tableRows(t, plain, "SELECT id, v, s FROM cw_plain ORDER BY id")
		for _, table := range []string{"cw_d", "cw_r"} {
			exec(t, c, "TRUNCATE "+table, pgx.QueryExecModeSimpleProtocol)
			got, err := c.PgConn().CopyFrom(ctx, strings.NewReader(data.String()), "COPY "+table+" FROM STDIN WHERE "+where)
			if err != nil {
				t.Fatalf("COPY %s WHERE %s: %v", table, where, err)
			}
			if got.String() != want.String() {
				t.Errorf("COPY %s WHERE %s: tag %q, PostgreSQL %q", table, where, got, want)
			}
			gotRows := tableRows(t, c, "SELECT id, v, s FROM "+table+" ORDER BY id")
			if gotRows != wantRows {
				t.Errorf("COPY %s WHERE %s stored\n%s\nPostgreSQL:\n%s", table, where, gotRows, wantRows)
			}
		}
	}
}

// tableRows runs a query in the simple protocol and returns its rows as
// text, one line each, NULL as -.
func tableRows(t *testing.T, c *pgx.Conn, sql string) string {
	t.Helper()
	res, err := c.PgConn().Exec(context.Background(), sql).ReadAll()
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	var b strings.Builder
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("%s: %v", sql, r.Err)
		}
		for _, row := range r.Rows {
			for i, v := range row {
				if i > 0 {
					b.WriteByte('|')
				}
				if v == nil {
					b.WriteByte('-')
				} else {
					b.Write(v)
				}
			}
			b.WriteByte('\n')
		}
	}
	return b.String()
}
