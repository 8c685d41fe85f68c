package coordinator_test

import (
	"context"
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
