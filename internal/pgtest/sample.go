package pgtest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// SampleConnections counts a user's connections on a server every 10 ms
// until stop (also called at the test's end), and returns the largest
// count seen so far through max.
func SampleConnections(t testing.TB, addr, user string) (max func() int64, stop func()) {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, URL(addr))
	if err != nil {
		t.Fatal(err)
	}
	var seen atomic.Int64
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		defer c.Close(ctx)
		for {
			select {
			case <-quit:
				return
			case <-time.After(10 * time.Millisecond):
			}
			var n int64
			if c.QueryRow(ctx, "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE usename = $1", user).Scan(&n) == nil && n > seen.Load() {
				seen.Store(n)
			}
		}
	}()
	stop = sync.OnceFunc(func() {
		close(quit)
		<-done
	})
	t.Cleanup(stop)
	return seen.Load, stop
}
