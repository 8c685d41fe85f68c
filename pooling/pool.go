package pooling

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgfleet/pgfleet/internal/pgerr"
)

// Config describes one pool: where to connect, as whom, and its bounds.
type Config struct {
	Addr           string // worker host:port
	Database       string
	User           string
	Password       string
	Size           int           // most server connections open at once
	AcquireTimeout time.Duration // longest wait for a connection
	ConnectTimeout time.Duration
	ResetTimeout   time.Duration // longest a ROLLBACK on release may take
	// Lifetime, when positive, is the age past which a connection is
	// closed instead of being used again (PgBouncer's server_lifetime):
	// role and database settings changed on a worker directly reach new
	// sessions within it.
	Lifetime      time.Duration
	StmtCacheSize int // prepared statements kept per connection
	// StmtEpoch, when set, is advanced after DDL: statements the
	// connections prepared before are prepared again at their next use.
	StmtEpoch *atomic.Int64
	TLS       WorkerTLS // sslmode and root certificate toward the worker
	// Span is the number of pools one client may hold connections of at
	// once (the workers a transaction can span); nil or < 1 counts as 1.
	// It sizes the reserve of the acquisition classes (see Acquire).
	Span *atomic.Int32
	// Gate, when set, bounds the connections of every pool to the same
	// worker together: the coordinator's share of the worker's budget.
	Gate *Gate
	// SCRAM, when set, gives the key a new connection logs in with when
	// the worker asks for SCRAM-SHA-256 (nil: the password, if any).
	SCRAM func() *SCRAMKey
	// Types, when set, translates the OIDs of user types between this
	// worker's database and the default node's (types.go).
	Types *TypeOIDs
}

// ErrAcquireTimeout is returned (wrapped in a pgerr.Error) when no connection
// became free in time.
var ErrAcquireTimeout = errors.New("timed out waiting for a server connection")

// Metrics are the pool's Prometheus collectors, shared by all pools of a
// coordinator.
type Metrics struct {
	Open     *prometheus.GaugeVec
	Waits    *prometheus.CounterVec
	Timeouts *prometheus.CounterVec
	Dropped  *prometheus.CounterVec
}

// NewMetrics registers the pool collectors on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Open: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pgfleet_server_connections",
			Help: "Open server connections per worker."}, []string{"worker"}),
		Waits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pgfleet_pool_waits_total",
			Help: "Checkouts that had to wait for a busy pool."}, []string{"worker"}),
		Timeouts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pgfleet_pool_timeouts_total",
			Help: "Checkouts that gave up after the acquire timeout."}, []string{"worker"}),
		Dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pgfleet_server_connections_dropped_total",
			Help: "Server connections closed because they broke or could not be reset."}, []string{"worker"}),
	}
	if reg != nil {
		reg.MustRegister(m.Open, m.Waits, m.Timeouts, m.Dropped)
	}
	return m
}

// Pool is a bounded set of server connections to one worker for one
// (database, user). Acquire hands out a connection; Release takes it back,
// resetting it or closing it. LendPgx lends one to pgx.
//
// Checkouts are ordered by class so that clients holding connections of
// several pools cannot wait for each other forever (structured buffer pools,
// as in store-and-forward networks): a client that already holds j
// connections acquires in class j, and class j may take a connection only
// while fewer than Size - (W-1-j) are in use, W being min(Span, Size). The
// last connections of each pool are thus kept for clients that hold others,
// and one that holds a connection of every other pool can always take the
// last one. Deadlock-free: among waiters in a state where every holder waits,
// take the highest class k; every connection in use was taken at a class
// below k (its holder's class is now higher and at most k), which capped the
// count in use at Size - (W-k), below class k's limit: it could go on. Waiters
// of a higher class are served first, each class in arrival order.
type Pool struct {
	cfg Config

	mu      sync.Mutex
	idle    []*ServerConn            // newest last
	open    int                      // slots taken: connections open or being dialled
	busy    int                      // slots not idle (open - len(idle))
	gen     atomic.Int64             // Refresh's count: older connections close at release
	waiters []*waiter                // by class, highest first, then arrival
	conns   map[*ServerConn]struct{} // every open connection, busy or idle
	nwait   atomic.Int32             // len(waiters), read without mu

	gauge                    prometheus.Gauge
	waits, timeouts, dropped prometheus.Counter
}

// waiter is a checkout waiting for its class's limit. It is handed an idle
// connection or, as nil, a slot to fill.
type waiter struct {
	class int
	ch    chan *ServerConn
	timer *time.Timer // the acquire timeout's, stopped between waits
}

// waiters are kept for reuse: when clients outnumber connections most
// checkouts wait, and a new channel and timer for each wait were about
// 1% of the coordinator's CPU on routed point reads (pprof). A waiter
// goes back empty: its channel drained, its timer stopped (a stopped
// timer's channel holds nothing since Go 1.23).
var waiterPool = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &waiter{ch: make(chan *ServerConn, 1), timer: t}
}}

// NewPool makes an empty pool; connections are opened on demand.
func NewPool(cfg Config, m *Metrics) *Pool {
	if cfg.Size <= 0 {
		cfg.Size = 8
	}
	if cfg.AcquireTimeout <= 0 {
		cfg.AcquireTimeout = 5 * time.Second
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 5 * time.Second
	}
	if cfg.ResetTimeout <= 0 {
		cfg.ResetTimeout = 5 * time.Second
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	p := &Pool{cfg: cfg, idle: make([]*ServerConn, 0, cfg.Size), conns: map[*ServerConn]struct{}{},
		gauge: m.Open.WithLabelValues(cfg.Addr), waits: m.Waits.WithLabelValues(cfg.Addr),
		timeouts: m.Timeouts.WithLabelValues(cfg.Addr), dropped: m.Dropped.WithLabelValues(cfg.Addr)}
	cfg.Gate.add(p)
	return p
}

// size is the pool's bound now: its Size, or its gate's cap when lower.
func (p *Pool) size() int {
	if c := p.cfg.Gate.Cap(); c >= 0 && c < p.cfg.Size {
		return c
	}
	return p.cfg.Size
}

// Config returns the pool's configuration.
func (p *Pool) Config() Config { return p.cfg }

// Span is W of the class scheme: min(Config.Span, Size). A client holding
// Span-1 or fewer connections of the pools can always be served.
func (p *Pool) Span() int {
	w := 1
	if p.cfg.Span != nil {
		if s := int(p.cfg.Span.Load()); s > 1 {
			w = s
		}
	}
	return min(w, p.size())
}

// limit is how many slots may be busy for class to take one more: under
// the pool's size and the gate's cap, or for a client holding connections
// elsewhere its ceiling (Gate.Hold). Called with mu held.
func (p *Pool) limit(class int) int {
	n := p.size()
	if e := p.cfg.Gate.Ceil(); class > 0 && e > n {
		n = min(e, p.cfg.Size)
	}
	if r := p.Span() - 1 - class; r > 0 {
		return n - r
	}
	return n
}

// Acquire returns a connection for a client holding held connections of the
// pools already (its class), waiting at most the acquire timeout. The error
// is a *pgerr.Error a client can be shown.
func (p *Pool) Acquire(ctx context.Context, held int) (*ServerConn, error) {
	return p.acquire(ctx, held, AnyDefines)
}

// AcquireFor is Acquire for a session that has defined the custom settings
// of the name set defines (defines.go): it prefers an idle connection whose
// backend defined no others, then a new one. It may still return one that
// did (handed over from a release, or when the pool cannot open another),
// which the caller replaces with Renew.
func (p *Pool) AcquireFor(ctx context.Context, held int, defines string) (*ServerConn, error) {
	return p.acquire(ctx, held, defines)
}

// AnyDefines, as AcquireFor's or AcquireNow's defines, takes any
// connection, whatever its backend defined.
const AnyDefines = "\xff"

func (p *Pool) acquire(ctx context.Context, held int, defines string) (*ServerConn, error) {
	for {
		epoch := p.cfg.Gate.Epoch()
		c, err := p.take(ctx, held, defines)
		if err != nil {
			return nil, err
		}
		if c == nil {
			return p.dial(ctx, epoch)
		}
		if c = p.check(c); c != nil {
			return c, nil
		}
	}
}

// ErrBusy is AcquireNow's answer when it would have to wait.
var ErrBusy = errors.New("no server connection free now")

// AcquireNow is AcquireFor for a client holding no connection, except that
// when it would have to wait it returns ErrBusy at once (a session's
// startup then uses what an earlier one learnt: coordinator/welcome.go).
func (p *Pool) AcquireNow(ctx context.Context, defines string) (*ServerConn, error) {
	for {
		epoch := p.cfg.Gate.Epoch()
		c, ok := p.takeNow(defines)
		if !ok {
			return nil, ErrBusy
		}
		if c == nil {
			return p.dial(ctx, epoch)
		}
		if c = p.check(c); c != nil {
			return c, nil
		}
	}
}

// takeNow is take for class 0 without waiting: ok false when take would
// wait.
func (p *Pool) takeNow(defines string) (*ServerConn, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.waiters) > 0 || p.busy >= p.limit(0) {
		return nil, false
	}
	if c := p.popIdleFor(defines); c != nil {
		return c, true
	}
	if len(p.idle) > 0 && p.open >= p.limit(0) || !p.cfg.Gate.tryOpen(0) {
		// None fits and none may open: one that does not fit (the caller
		// replaces it: Renew).
		c := p.popIdle()
		return c, c != nil
	}
	p.busy++
	p.open++
	return nil, true
}

// popIdleFor takes the newest idle connection whose backend defined no
// custom setting outside the name set defines (any with AnyDefines), busy
// now; nil if none. Called with mu held.
func (p *Pool) popIdleFor(defines string) *ServerConn {
	if defines == AnyDefines {
		return p.popIdle()
	}
	for i := len(p.idle) - 1; i >= 0; i-- {
		if c := p.idle[i]; DefinesWithin(c.Defines, defines) {
			copy(p.idle[i:], p.idle[i+1:])
			p.idle[len(p.idle)-1] = nil
			p.idle = p.idle[:len(p.idle)-1]
			p.busy++
			return c
		}
	}
	return nil
}

// popIdle takes the newest idle connection, busy now; nil if none.
// Called with mu held.
func (p *Pool) popIdle() *ServerConn {
	n := len(p.idle)
	if n == 0 {
		return nil
	}
	p.busy++
	c := p.idle[n-1]
	p.idle[n-1] = nil
	p.idle = p.idle[:n-1]
	return c
}

// take gets a busy slot for class: an idle connection, or nil for a slot
// to fill.
func (p *Pool) take(ctx context.Context, class int, defines string) (*ServerConn, error) {
	p.mu.Lock()
	for evicted := false; p.busy < p.limit(class); evicted = true {
		if c := p.popIdleFor(defines); c != nil {
			p.mu.Unlock()
			return c, nil
		}
		// (With idle connections that do not fit, only within the
		// limit counting them.)
		if (len(p.idle) == 0 || p.open < p.limit(class)) && p.cfg.Gate.tryOpen(class) {
			p.busy++
			p.open++
			p.mu.Unlock()
			return nil, nil
		}
		if c := p.popIdle(); c != nil {
			// None fits and none may open: one that does not fit (the
			// caller replaces it: Renew).
			p.mu.Unlock()
			return c, nil
		}
		// The worker's share is taken by other pools of the gate: close
		// one of their idle connections, once, else wait.
		if evicted {
			break
		}
		p.mu.Unlock()
		p.cfg.Gate.evictIdle(p)
		p.mu.Lock()
	}
	w := waiterPool.Get().(*waiter)
	w.class = class
	defer waiterPool.Put(w) // (every way out below leaves it empty)
	i := len(p.waiters)
	for i > 0 && p.waiters[i-1].class < class {
		i--
	}
	p.waiters = append(p.waiters, nil)
	copy(p.waiters[i+1:], p.waiters[i:])
	p.waiters[i] = w
	p.setWaiting()
	p.mu.Unlock()
	p.waits.Inc()
	w.timer.Reset(p.cfg.AcquireTimeout)
	defer w.timer.Stop()
	var err error
	select {
	case c := <-w.ch:
		return c, nil
	case <-w.timer.C:
		p.timeouts.Inc()
		err = p.timeoutError(class)
	case <-ctx.Done():
		err = pgerr.New(pgerr.QueryCanceled, "canceled while waiting for a server connection to worker %s", p.cfg.Addr)
	}
	p.mu.Lock()
	for i, x := range p.waiters {
		if x == w {
			p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
			p.setWaiting()
			p.mu.Unlock()
			return nil, err
		}
	}
	p.mu.Unlock()
	return <-w.ch, nil // served meanwhile
}

// serve hands what the pool can give to the waiters now allowed to take it.
// Called with mu held.
func (p *Pool) serve() {
	for len(p.waiters) > 0 && p.busy < p.limit(p.waiters[0].class) {
		w := p.waiters[0]
		if n := len(p.idle); n > 0 {
			w.ch <- p.idle[n-1]
			p.idle[n-1] = nil
			p.idle = p.idle[:n-1]
		} else if p.cfg.Gate.tryOpen(w.class) {
			p.open++
			w.ch <- nil
		} else {
			break // the gate's cap: a slot freed in another pool serves it
		}
		p.waiters = p.waiters[1:]
		p.busy++
	}
	p.setWaiting()
}

// setWaiting publishes len(waiters), to the gate's count too. Called with
// mu held.
func (p *Pool) setWaiting() {
	n := int32(len(p.waiters))
	if old := p.nwait.Swap(n); old != n && p.cfg.Gate != nil {
		p.cfg.Gate.waiting.Add(int64(n - old))
	}
}

// wake serves the waiters after the gate's cap rose or a slot freed in
// another pool of the gate.
func (p *Pool) wake() {
	p.mu.Lock()
	p.serve()
	p.mu.Unlock()
}

// wakeAsync is wake on a goroutine of its own, when anyone waits: the
// caller may hold another pool's lock.
func (p *Pool) wakeAsync() {
	if p.nwait.Load() > 0 {
		go p.wake()
	}
}

// timeoutError is what a checkout that waited the acquire timeout in vain
// returns.
func (p *Pool) timeoutError(class int) error {
	if c := p.cfg.Gate.Cap(); c >= 0 && c < p.cfg.Size {
		msg := fmt.Sprintf("%v to worker %s after %v: this coordinator's share of the worker's connection budget, %d, is in use",
			ErrAcquireTimeout, p.cfg.Addr, p.cfg.AcquireTimeout, c)
		if c == 0 {
			msg = fmt.Sprintf("%v to worker %s after %v: this coordinator holds no share of the worker's connection budget now",
				ErrAcquireTimeout, p.cfg.Addr, p.cfg.AcquireTimeout)
		}
		return &pgerr.Error{Severity: "ERROR", Code: pgerr.TooManyConnections, Message: msg,
			Hint: "Retry later, shorten long transactions, or raise the worker's budget (--worker-connections, or its max_connections); see pgfleet.connection_shares in the metadata database."}
	}
	msg := fmt.Sprintf("%v to worker %s after %v: all %d connections of its pool are busy",
		ErrAcquireTimeout, p.cfg.Addr, p.cfg.AcquireTimeout, p.cfg.Size)
	if l := p.limit(class); l < p.cfg.Size {
		msg = fmt.Sprintf("%v to worker %s after %v: the %d connections of its pool of %d that a client holding %d others may take are busy (the rest are kept for transactions that hold connections to other workers)",
			ErrAcquireTimeout, p.cfg.Addr, p.cfg.AcquireTimeout, l, p.cfg.Size, class)
	}
	return &pgerr.Error{Severity: "ERROR", Code: pgerr.TooManyConnections,
		Message: msg,
		Hint:    "Retry later, shorten long transactions, or raise the coordinator's --pool-size or --pool-timeout."}
}

// free gives back a busy slot whose connection is gone.
func (p *Pool) free() {
	p.mu.Lock()
	p.open--
	p.busy--
	p.serve()
	p.mu.Unlock()
	p.cfg.Gate.closed(p)
}

// check returns c if it is still usable, or closes it and returns nil.
func (p *Pool) check(c *ServerConn) *ServerConn {
	if !p.tooOld(c, time.Now()) && c.alive() { // one non-blocking peek: a connection dead since its last use is never handed out
		return c
	}
	p.discard(c)
	return nil
}

// dial fills a slot taken under the gate's epoch.
func (p *Pool) dial(ctx context.Context, epoch int64) (*ServerConn, error) {
	if g := p.cfg.Gate; g != nil && g.BeforeDial != nil {
		if err := g.BeforeDial(ctx); err != nil {
			p.free()
			return nil, err
		}
	}
	gen := p.gen.Load() // a Refresh while it logs in makes it stale
	c, err := dial(ctx, &p.cfg)
	if err != nil {
		p.free()
		if errors.Is(err, errSCRAMSalt) {
			return nil, &pgerr.Error{Severity: "ERROR", Code: pgerr.InvalidPassword,
				Message: fmt.Sprintf("password authentication failed for user %q on worker %s: %v", p.cfg.User, p.cfg.Addr, errSCRAMSalt),
				Hint:    "Give the role the same password verifier on every worker: on each, ALTER ROLE ... PASSWORD with the first worker's pg_authid.rolpassword for it."}
		}
		var pe *pgconn.PgError
		if errors.As(err, &pe) && !strings.HasPrefix(pe.Code, "57") {
			// The worker refused us (no such database, role, password):
			// the client gets the worker's own answer. Not so a worker
			// starting up or shutting down (57P03, 57P01): that is not
			// the client's server, which a 57 code would say.
			return nil, &pgerr.Error{Severity: "ERROR", Code: pe.Code, Message: pe.Message,
				Detail: pe.Detail, Hint: pe.Hint}
		}
		return nil, &pgerr.Error{Severity: "ERROR", Code: pgerr.SQLClientUnableToConnect,
			Message: fmt.Sprintf("cannot connect to worker %s: %v", p.cfg.Addr, err),
			Hint:    "Check that the worker is running and accepts this user and database."}
	}
	c.pool = p
	c.born = time.Now()
	p.gauge.Inc()
	p.mu.Lock()
	p.conns[c] = struct{}{}
	c.gen = gen
	p.mu.Unlock()
	if g := p.cfg.Gate; g != nil && g.Record != nil {
		if err := g.Record(ctx, c.PID); err != nil {
			c.broken = true
			p.discard(c)
			return nil, &pgerr.Error{Severity: "ERROR", Code: pgerr.TooManyConnections,
				Message: fmt.Sprintf("cannot use a new connection to worker %s: %v", p.cfg.Addr, err),
				Hint:    "This coordinator could not record it in its lease on the worker's connection budget (is the metadata database reachable?); retry."}
		}
	}
	if g := p.cfg.Gate; g != nil && g.Epoch() != epoch {
		// The gate was fenced (the coordinator lost its lease) while this
		// connection was being made (checked after its record: a record
		// may have reached a lease renewed since): it is not the coordinator's to use.
		c.broken = true
		p.discard(c)
		return nil, &pgerr.Error{Severity: "ERROR", Code: pgerr.TooManyConnections,
			Message: fmt.Sprintf("cannot use a new connection to worker %s: this coordinator lost its lease on the worker's connection budget meanwhile", p.cfg.Addr),
			Hint:    "Retry: the coordinator takes a share again at its next renewal."}
	}
	return c, nil
}

// Release returns c to the pool. A connection in a transaction is rolled back
// first; one that is broken or cannot be reset in time is closed.
func (p *Pool) Release(c *ServerConn) {
	if c == nil {
		return
	}
	if !c.broken && c.TxStatus != 'I' {
		if err := c.Exec("ROLLBACK", time.Now().Add(p.cfg.ResetTimeout), nil); err != nil || c.TxStatus != 'I' {
			c.broken = true
		}
	}
	now := time.Now()
	if c.broken || c.gen != p.gen.Load() || p.tooOld(c, now) {
		p.discard(c)
		return
	}
	// Over the cap (the share shrank) the connection goes, unless a client
	// holding connections elsewhere waits for it (within the ceiling).
	over := p.cfg.Gate.over()
	c.lastUsed = now
	p.mu.Lock()
	if len(p.waiters) > 0 && p.busy-1 < p.limit(p.waiters[0].class) && (!over || p.waiters[0].class > 0) {
		w := p.waiters[0]
		p.waiters = p.waiters[1:]
		p.setWaiting()
		p.mu.Unlock()
		w.ch <- c // handed over busy
		return
	}
	if over || p.cfg.Gate.starving(p) {
		// (A connection kept idle here while the gate is full would keep
		// another pool's waiters waiting: it goes, and they are served.)
		p.mu.Unlock()
		p.discard(c)
		return
	}
	p.busy--
	p.idle = append(p.idle, c)
	p.mu.Unlock()
}

// Renew closes c, a connection its caller took, and opens a new one in its
// slot: the caller does not queue for a connection again (one whose
// backend defined custom settings its session has not: defines.go; with
// the slot given back, such a checkout waited behind every other, 18 to 30
// s under contention in an adversary's run).
func (p *Pool) Renew(ctx context.Context, c *ServerConn) (*ServerConn, error) {
	epoch := p.cfg.Gate.Epoch()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.close()
	p.gauge.Dec()
	p.dropped.Inc()
	return p.dial(ctx, epoch) // (its failure frees the slot)
}

// tooOld reports whether c has outlived the pool's Lifetime at now.
func (p *Pool) tooOld(c *ServerConn, now time.Time) bool {
	return p.cfg.Lifetime > 0 && !c.born.IsZero() && now.Sub(c.born) > p.cfg.Lifetime
}

// Discard closes c and frees its slot.
func (p *Pool) discard(c *ServerConn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.close()
	p.gauge.Dec()
	p.dropped.Inc()
	p.free()
}

// PIDs appends to dst the process IDs of the worker backends serving the
// pool's open connections.
func (p *Pool) PIDs(dst []uint32) []uint32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		dst = append(dst, c.PID)
	}
	return dst
}

// Stats reports the slots taken (open or dialling connections), those not
// idle, and the checkouts waiting.
func (p *Pool) Stats() (open, busy, waiting int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open, p.busy, len(p.waiters)
}

// Refresh makes the pool open new connections from now on: the idle ones
// close, and those in use close when released. After a change of role or
// database settings or privileges (ALTER ROLE ... SET, NOLOGIN, REVOKE
// CONNECT), which PostgreSQL applies at login, connections opened before
// it would keep the old ones for every session they serve.
func (p *Pool) Refresh() {
	p.mu.Lock()
	p.gen.Add(1)
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	p.closeIdle(idle)
}

// Close closes the idle connections. Connections in use are closed when
// released.
func (p *Pool) Close() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	p.closeIdle(idle)
}

// closeIdle closes connections taken out of the idle list (with mu held,
// by the caller) and gives their slots back.
func (p *Pool) closeIdle(idle []*ServerConn) {
	if len(idle) == 0 {
		return
	}
	p.mu.Lock()
	p.open -= len(idle)
	for _, c := range idle {
		delete(p.conns, c)
	}
	p.mu.Unlock()
	for _, c := range idle {
		c.close()
		p.gauge.Dec()
		if p.cfg.Gate != nil {
			p.cfg.Gate.open.Add(-1)
		}
	}
	if g := p.cfg.Gate; g != nil {
		// The slots are free: serve whoever waits for one.
		for _, q := range g.poolList() {
			q.wakeAsync()
		}
	}
}

// trimIdle takes up to max idle connections out of the pool and closes
// them on a goroutine of its own (the caller may hold a lock that should
// not wait on the network); their slots count until they are closed. It
// returns how many it took.
func (p *Pool) trimIdle(max int) int {
	p.mu.Lock()
	k := min(max, len(p.idle))
	drop := slices.Clone(p.idle[len(p.idle)-k:])
	clear(p.idle[len(p.idle)-k:])
	p.idle = p.idle[:len(p.idle)-k]
	p.mu.Unlock()
	if k > 0 {
		go p.closeIdle(drop)
	}
	return k
}

// dropOneIdle closes one idle connection, if the pool has one.
func (p *Pool) dropOneIdle() bool {
	p.mu.Lock()
	n := len(p.idle)
	if n == 0 {
		p.mu.Unlock()
		return false
	}
	c := p.idle[n-1]
	p.idle[n-1] = nil
	p.idle = p.idle[:n-1]
	p.mu.Unlock()
	p.closeIdle([]*ServerConn{c})
	return true
}

// closeAll closes the idle connections and the sockets of the busy ones,
// whose holders find them broken and discard them.
func (p *Pool) closeAll() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	busy := make([]*ServerConn, 0, len(p.conns))
	for c := range p.conns {
		if !slices.Contains(idle, c) {
			busy = append(busy, c)
		}
	}
	p.mu.Unlock()
	p.closeIdle(idle)
	for _, c := range busy {
		c.shut()
	}
}
