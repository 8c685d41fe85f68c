package coordinator_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgcluster"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// BenchmarkRoutedPointSelect is the routed prepared point read (pgbench -S
// -M prepared's statement) from one client, through the coordinator and,
// as the reference in the same run, straight to the worker; compare the
// two ns/op (medians of -count runs). Run it with
//
//	go test -run '^$' -bench RoutedPointSelect -count 5 ./coordinator/
func BenchmarkRoutedPointSelect(b *testing.B) {
	cl := pgtest.Shared(b)
	srv := pgtest.Coordinator(b, cl, poolSize(4))
	ctx := context.Background()
	c := connect(b, srv.Addr())
	direct := benchTables(b, cl, c, "rps", "g AS aid, g AS abalance")
	for _, tc := range []struct {
		name, sql string
		conn      *pgx.Conn
	}{
		{"coordinator", "SELECT abalance FROM rps WHERE aid = $1", c},
		{"direct", "SELECT abalance FROM rps_direct WHERE aid = $1", direct},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var v int
			for i := 0; b.Loop(); i++ {
				if err := tc.conn.QueryRow(ctx, tc.sql, i%10000+1).Scan(&v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkScatter is a multi-shard read from one client over 32 shards on
// one worker, prepared: a merge (an aggregate the coordinator combines)
// and a concatenation (rows streamed as the shards send them), with the
// same statements on a plain table straight to the worker as the reference
// in the same run. Run it with
//
//	go test -run '^$' -bench Scatter -count 5 ./coordinator/
func BenchmarkScatter(b *testing.B) {
	cl := pgtest.Shared(b)
	srv := pgtest.Coordinator(b, cl, poolSize(4))
	ctx := context.Background()
	c := connect(b, srv.Addr())
	direct := benchTables(b, cl, c, "sct", "g AS aid, g % 7 AS grp, g AS abalance")
	for _, q := range []struct{ name, sql string }{
		{"merge", "SELECT grp, count(*), sum(abalance) FROM %s WHERE aid <= $1 GROUP BY grp ORDER BY grp"},
		{"concat", "SELECT aid, abalance FROM %s WHERE aid BETWEEN $1 AND $1 + 20"},
	} {
		for _, tc := range []struct {
			name, table string
			conn        *pgx.Conn
		}{{"coordinator", "sct", c}, {"direct", "sct_direct", direct}} {
			sql := fmt.Sprintf(q.sql, tc.table)
			b.Run(q.name+"/"+tc.name, func(b *testing.B) {
				for i := 0; b.Loop(); i++ {
					rows, err := tc.conn.Query(ctx, sql, i%10000+1)
					if err != nil {
						b.Fatal(err)
					}
					n := 0
					for rows.Next() {
						n++
					}
					if rows.Err() != nil || n == 0 && q.name == "merge" {
						b.Fatalf("%d rows, %v", n, rows.Err())
					}
				}
			})
		}
	}
}

// benchTables makes table name from the select list cols over g in 1 to
// 10,000 (aid its key), distributed by aid over 32 shards through the
// coordinator's connection c, and name_direct with the same rows, a plain
// table on the worker (the reference); it returns a connection straight to
// the worker. Both tables go at cleanup.
func benchTables(b *testing.B, cl *pgcluster.Cluster, c *pgx.Conn, name, cols string) *pgx.Conn {
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	_, _ = c.Exec(ctx, "SELECT undistribute_table('"+name+"')", simple)
	direct := connect(b, cl.Servers[0].Addr())
	for _, t := range []struct {
		conn  *pgx.Conn
		table string
	}{{c, name}, {direct, name + "_direct"}} {
		exec(b, t.conn, "DROP TABLE IF EXISTS "+t.table)
		exec(b, t.conn, "CREATE TABLE "+t.table+" AS SELECT "+cols+" FROM generate_series(1, 10000) g")
		exec(b, t.conn, "ALTER TABLE "+t.table+" ADD PRIMARY KEY (aid)")
	}
	exec(b, c, "SELECT create_distributed_table('"+name+"', 'aid', shard_count => 32)", simple)
	b.Cleanup(func() {
		_, _ = c.Exec(ctx, "SELECT undistribute_table('"+name+"')", simple)
		_, _ = c.Exec(ctx, "DROP TABLE IF EXISTS "+name, simple)
		_, _ = direct.Exec(ctx, "DROP TABLE IF EXISTS "+name+"_direct")
	})
	return direct
}
