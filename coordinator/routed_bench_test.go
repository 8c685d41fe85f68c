package coordinator_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

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
	simple := pgx.QueryExecModeSimpleProtocol
	_, _ = c.Exec(ctx, "SELECT undistribute_table('rps')", simple)
	exec(b, c, "DROP TABLE IF EXISTS rps")
	exec(b, c, "CREATE TABLE rps AS SELECT g AS aid, g AS abalance FROM generate_series(1, 10000) g")
	exec(b, c, "ALTER TABLE rps ADD PRIMARY KEY (aid)")
	exec(b, c, "SELECT create_distributed_table('rps', 'aid', shard_count => 32)", simple)
	b.Cleanup(func() {
		_, _ = c.Exec(ctx, "SELECT undistribute_table('rps')", simple)
		_, _ = c.Exec(ctx, "DROP TABLE IF EXISTS rps", simple)
	})
	// The reference: the same rows in a plain table on the worker.
	direct := connect(b, cl.Servers[0].Addr())
	exec(b, direct, "DROP TABLE IF EXISTS rps_direct")
	exec(b, direct, "CREATE TABLE rps_direct AS SELECT g AS aid, g AS abalance FROM generate_series(1, 10000) g")
	exec(b, direct, "ALTER TABLE rps_direct ADD PRIMARY KEY (aid)")
	b.Cleanup(func() { _, _ = direct.Exec(ctx, "DROP TABLE IF EXISTS rps_direct") })
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
	simple := pgx.QueryExecModeSimpleProtocol
	_, _ = c.Exec(ctx, "SELECT undistribute_table('sct')", simple)
	exec(b, c, "DROP TABLE IF EXISTS sct")
	exec(b, c, "CREATE TABLE sct AS SELECT g AS aid, g % 7 AS grp, g AS abalance FROM generate_series(1, 10000) g")
	exec(b, c, "ALTER TABLE sct ADD PRIMARY KEY (aid)")
	exec(b, c, "SELECT create_distributed_table('sct', 'aid', shard_count => 32)", simple)
	b.Cleanup(func() {
		_, _ = c.Exec(ctx, "SELECT undistribute_table('sct')", simple)
		_, _ = c.Exec(ctx, "DROP TABLE IF EXISTS sct", simple)
	})
	direct := connect(b, cl.Servers[0].Addr())
	exec(b, direct, "DROP TABLE IF EXISTS sct_direct")
	exec(b, direct, "CREATE TABLE sct_direct AS SELECT g AS aid, g % 7 AS grp, g AS abalance FROM generate_series(1, 10000) g")
	exec(b, direct, "ALTER TABLE sct_direct ADD PRIMARY KEY (aid)")
	b.Cleanup(func() { _, _ = direct.Exec(ctx, "DROP TABLE IF EXISTS sct_direct") })
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
