package pooling_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/internal/pgtest"
	"github.com/pgfleet/pgfleet/pooling"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestPoolBoundsAndReset(t *testing.T) {
	cl := pgtest.Shared(t)
	p := pooling.NewPool(pooling.Config{Addr: cl.Servers[0].Addr(), Database: "postgres", User: "postgres",
		Size: 2, AcquireTimeout: 200 * time.Millisecond}, nil)
	defer p.Close()
	ctx := context.Background()
	a, err := p.Acquire(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Acquire(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	// A third checkout waits, then fails with a typed, client-ready error.
	start := time.Now()
	_, err = p.Acquire(ctx, 0)
	var pe *pgerr.Error
	if !errors.As(err, &pe) || pe.Code != pgerr.TooManyConnections {
		t.Fatalf("third checkout: %v, want SQLSTATE %s", err, pgerr.TooManyConnections)
	}
	if d := time.Since(start); d < 150*time.Millisecond || d > 2*time.Second {
		t.Errorf("timed out after %v, configured 200ms", d)
	}
	// A connection released inside a transaction is rolled back first.
	if err := a.Exec("BEGIN; CREATE TABLE pool_reset_t (a int)", time.Now().Add(time.Second), nil); err != nil {
		t.Fatal(err)
	}
	if a.TxStatus != 'T' {
		t.Fatalf("status %q after BEGIN", a.TxStatus)
	}
	p.Release(a)
	c, err := p.Acquire(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if c.TxStatus != 'I' {
		t.Errorf("reused connection in status %q", c.TxStatus)
	}
	if err := c.Exec("SELECT * FROM pool_reset_t", time.Now().Add(time.Second), nil); err == nil {
		t.Error("table created in the abandoned transaction exists")
	}
	// A broken connection is closed and its slot freed.
	c.MarkBroken()
	p.Release(c)
	p.Release(b)
	for i := 0; i < 2; i++ {
		x, err := p.Acquire(ctx, 0)
		if err != nil {
			t.Fatalf("after release: %v", err)
		}
		defer p.Release(x)
	}
}

// TestPoolClasses: with a span of 2, the last connection is kept for a
// client that holds one already (class 1); a waiter of a higher class is
// served first.
func TestPoolClasses(t *testing.T) {
	cl := pgtest.Shared(t)
	var span atomic.Int32
	span.Store(2)
	p := pooling.NewPool(pooling.Config{Addr: cl.Servers[0].Addr(), Database: "postgres", User: "postgres",
		Size: 2, AcquireTimeout: 300 * time.Millisecond, Span: &span}, nil)
	defer p.Close()
	ctx := context.Background()
	a, err := p.Acquire(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Class 0 may not take the last connection; class 1 may.
	if _, err := p.Acquire(ctx, 0); !tooMany(err) {
		t.Fatalf("class 0 with 1 of 2 busy: %v, want 53300", err)
	}
	b, err := p.Acquire(ctx, 1)
	if err != nil {
		t.Fatalf("class 1 with 1 of 2 busy: %v", err)
	}
	if _, err := p.Acquire(ctx, 1); !tooMany(err) {
		t.Fatalf("class 1 with 2 of 2 busy: %v, want 53300", err)
	}
	p.Release(a)
	p.Release(b)

	// A class-0 waiter, then a class-1 waiter: a release serves class 1.
	q := pooling.NewPool(pooling.Config{Addr: cl.Servers[0].Addr(), Database: "postgres", User: "postgres",
		Size: 2, AcquireTimeout: time.Minute, Span: &span}, nil)
	defer q.Close()
	a, _ = q.Acquire(ctx, 0)
	b, err = q.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	got, hold := make(chan int, 2), make(chan struct{})
	for class := 0; class < 2; class++ {
		go func() {
			c, err := q.Acquire(ctx, class)
			if err != nil {
				t.Error(err)
			}
			got <- class
			if class == 1 {
				<-hold // keep it until the class-0 waiter is asked for
			}
			q.Release(c)
		}()
		for _, _, w := q.Stats(); w <= class; _, _, w = q.Stats() {
			time.Sleep(time.Millisecond)
		}
	}
	q.Release(b)
	if c := <-got; c != 1 {
		t.Fatalf("class %d served first, want class 1", c)
	}
	// 2 busy (a, the class-1 waiter's): the class-0 waiter needs 2 released.
	q.Release(a)
	close(hold) // let the class-1 holder release
	if c := <-got; c != 0 {
		t.Fatalf("got %d, want the class-0 waiter", c)
	}
}

func tooMany(err error) bool {
	var pe *pgerr.Error
	return errors.As(err, &pe) && pe.Code == pgerr.TooManyConnections && pe.Hint != ""
}

// BenchmarkAcquireRelease is the checkout of a routed statement: an idle
// connection out and back.
func BenchmarkAcquireRelease(b *testing.B) {
	cl := pgtest.Shared(b)
	p := pooling.NewPool(pooling.Config{Addr: cl.Servers[0].Addr(), Database: "postgres", User: "postgres",
		Size: 4}, nil)
	defer p.Close()
	ctx := context.Background()
	for range 2 { // two connections open and idle
		c, err := p.Acquire(ctx, 0)
		if err != nil {
			b.Fatal(err)
		}
		defer p.Release(c)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c, err := p.Acquire(ctx, 0)
			if err != nil {
				b.Error(err)
				return
			}
			p.Release(c)
		}
	})
}

// TestAcquireNow: a checkout that must not wait (a session's startup)
// gets ErrBusy at once from a full pool, and from one with a checkout
// waiting (it does not pass the queue); otherwise an idle connection, or a
// new one within the size. The pool never goes past its size.
func TestAcquireNow(t *testing.T) {
	cl := pgtest.Shared(t)
	p := pooling.NewPool(pooling.Config{Addr: cl.Servers[0].Addr(), Database: "postgres", User: "postgres",
		Size: 2, AcquireTimeout: 3 * time.Second}, nil)
	defer p.Close()
	ctx := context.Background()
	a, err := p.AcquireNow(ctx, "")
	if err != nil {
		t.Fatalf("AcquireNow of an empty pool: %v", err)
	}
	b, err := p.Acquire(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := p.AcquireNow(ctx, ""); !errors.Is(err, pooling.ErrBusy) {
		t.Errorf("AcquireNow of a full pool: %v, want ErrBusy", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("AcquireNow of a full pool took %v", d)
	}
	got := make(chan *pooling.ServerConn, 1)
	go func() {
		c, _ := p.Acquire(ctx, 0)
		got <- c
	}()
	for _, _, w := p.Stats(); w == 0; _, _, w = p.Stats() {
		time.Sleep(time.Millisecond)
	}
	if _, err := p.AcquireNow(ctx, ""); !errors.Is(err, pooling.ErrBusy) {
		t.Errorf("AcquireNow with a checkout waiting: %v, want ErrBusy", err)
	}
	p.Release(a)
	if c := <-got; c != a {
		t.Errorf("the waiter got %p, want the released %p", c, a)
	} else {
		p.Release(c)
	}
	if c, err := p.AcquireNow(ctx, ""); err != nil || c != a {
		t.Errorf("AcquireNow with an idle connection: %p, %v, want %p", c, err, a)
	} else {
		p.Release(c)
	}
	p.Release(b)
	if open, busy, _ := p.Stats(); open != 2 || busy != 0 {
		t.Errorf("at the end: open %d busy %d, want 2 0", open, busy)
	}
}

// TestTimeoutNamesTheReserve: a checkout that timed out while the pool's
// last connections were kept for transactions spanning workers says so,
// not that every connection was busy (adversary finding).
func TestTimeoutNamesTheReserve(t *testing.T) {
	cl := pgtest.Shared(t)
	var span atomic.Int32
	span.Store(2)
	p := pooling.NewPool(pooling.Config{Addr: cl.Servers[0].Addr(), Database: "postgres", User: "postgres",
		Size: 2, AcquireTimeout: 100 * time.Millisecond, Span: &span}, nil)
	defer p.Close()
	a, err := p.Acquire(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(a)
	_, err = p.Acquire(context.Background(), 0)
	var pe *pgerr.Error
	if !errors.As(err, &pe) || pe.Code != pgerr.TooManyConnections ||
		!strings.Contains(pe.Message, "the 1 connections of its pool of 2 that a client holding 0 others may take are busy") {
		t.Errorf("timeout with one connection in use and one kept: %v", err)
	}
}

// TestOwed: a connection owes an answer from a write until the worker's
// ReadyForQuery is read, and not after (a Sync in a transaction block is
// answered without the worker only then).
func TestOwed(t *testing.T) {
	cl := pgtest.Shared(t)
	p := pooling.NewPool(pooling.Config{Addr: cl.Servers[0].Addr(), Database: "postgres", User: "postgres", Size: 1}, nil)
	defer p.Close()
	c, err := p.Acquire(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(c)
	if c.Owed() {
		t.Error("a connection just acquired owes an answer")
	}
	if err := c.Exec("BEGIN", time.Now().Add(5*time.Second), nil); err != nil {
		t.Fatal(err)
	}
	if c.Owed() {
		t.Error("owed after a statement answered up to ReadyForQuery")
	}
	// A Parse and a Flush: ParseComplete comes, no ReadyForQuery.
	c.SetBuf(append(c.Buf(), 'P', 0, 0, 0, 16, 0, 'S', 'E', 'L', 'E', 'C', 'T', ' ', '1', 0, 0, 0))
	c.SetBuf(append(c.Buf(), 'H', 0, 0, 0, 4))
	if !c.Owed() {
		t.Error("not owed with messages buffered to send")
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if f, err := c.Next(); err != nil || f.Type != '1' {
		t.Fatalf("after Parse and Flush: %q, %v", f.Type, err)
	}
	if !c.Owed() {
		t.Error("not owed after a Parse answered without ReadyForQuery")
	}
	c.SetBuf(append(c.Buf(), 'S', 0, 0, 0, 4))
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if f, err := c.Next(); err != nil || f.Type != 'Z' || f.Body[0] != 'T' {
		t.Fatalf("after Sync: %q %q, %v", f.Type, f.Body, err)
	}
	if c.Owed() {
		t.Error("owed after the Sync's ReadyForQuery")
	}
}

// TestAcquireForDefines: a checkout for a session's custom settings takes
// an idle connection whose backend defined no other, then a new one within
// the size, and only at the size one that defined others (for the caller to
// discard). The pool never goes past its size.
func TestAcquireForDefines(t *testing.T) {
	cl := pgtest.Shared(t)
	p := pooling.NewPool(pooling.Config{Addr: cl.Servers[0].Addr(), Database: "postgres", User: "postgres",
		Size: 2, AcquireTimeout: 3 * time.Second}, nil)
	defer p.Close()
	ctx := context.Background()
	tenant := pooling.AddDefine("", "App.Tenant")
	both := pooling.AddDefine(tenant, "app.user")
	a, err := p.AcquireFor(ctx, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	a.Defines = tenant
	b, err := p.AcquireFor(ctx, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	p.Release(a) // idle: a (app.tenant), then b (none), newest last
	p.Release(b)
	p.Release(mustAcquire(t, p, tenant)) // the newest that fits: b
	if c := mustAcquire(t, p, ""); c != b {
		t.Errorf("a session without settings got the connection defining app.tenant")
	} else {
		p.Release(c)
	}
	if c := mustAcquire(t, p, both); c != b {
		t.Errorf("a session with app.tenant and app.user got %p, want the newest idle %p", c, b)
	} else {
		c.Defines = both
		p.Release(c) // idle: a (app.tenant), b (both)
	}
	if c := mustAcquire(t, p, tenant); c != a {
		t.Errorf("a session with app.tenant got %p, want %p, the one defining no other", c, a)
	} else {
		p.Release(c)
	}
	// None fits and the pool is at its size: one that does not fit.
	c := mustAcquire(t, p, "")
	if c != a && c != b {
		t.Fatalf("at the size, a new connection: %p", c)
	}
	if c.Defines == "" {
		t.Errorf("at the size, got a connection defining nothing")
	}
	// Renewed in its slot (no queueing again): a new connection, which
	// defines nothing, the pool still at its size.
	d, err := p.Renew(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if d == a || d == b || d.Defines != "" {
		t.Errorf("renewed: %p defining %q, want a new connection", d, d.Defines)
	}
	if open, busy, _ := p.Stats(); open != 2 || busy != 1 {
		t.Errorf("after Renew: open %d busy %d, want 2 1", open, busy)
	}
	p.Release(d)
	if open, busy, _ := p.Stats(); open != 2 || busy != 0 {
		t.Errorf("at the end: open %d busy %d, want 2 0", open, busy)
	}
	if !pooling.DefinesWithin("", both) || !pooling.DefinesWithin(tenant, both) || pooling.DefinesWithin(both, tenant) ||
		pooling.AddDefine(tenant, "APP.TENANT") != tenant || both != pooling.AddDefine(pooling.AddDefine("", "app.user"), "app.tenant") {
		t.Errorf("name sets: %q %q", tenant, both)
	}
}

func mustAcquire(t *testing.T, p *pooling.Pool, defines string) *pooling.ServerConn {
	t.Helper()
	c, err := p.AcquireFor(context.Background(), 0, defines)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
