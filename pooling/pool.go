package pooling

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	StmtCacheSize  int           // prepared statements kept per connection
	TLS            WorkerTLS     // sslmode and root certificate toward the worker
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
// resetting it or closing it.
type Pool struct {
	cfg                      Config
	idle                     chan *ServerConn
	slots                    chan struct{} // one token per open connection
	open                     prometheus.Gauge
	waits, timeouts, dropped prometheus.Counter
}

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
	return &Pool{cfg: cfg, idle: make(chan *ServerConn, cfg.Size), slots: make(chan struct{}, cfg.Size),
		open: m.Open.WithLabelValues(cfg.Addr), waits: m.Waits.WithLabelValues(cfg.Addr),
		timeouts: m.Timeouts.WithLabelValues(cfg.Addr), dropped: m.Dropped.WithLabelValues(cfg.Addr)}
}

// Config returns the pool's configuration.
func (p *Pool) Config() Config { return p.cfg }

// Acquire returns a connection, waiting at most the acquire timeout. The error
// is a *pgerr.Error a client can be shown.
func (p *Pool) Acquire(ctx context.Context) (*ServerConn, error) {
	for {
		select {
		case c := <-p.idle:
			if c = p.check(c); c != nil {
				return c, nil
			}
			continue
		default:
		}
		select {
		case p.slots <- struct{}{}:
			return p.dial(ctx)
		default:
		}
		break
	}
	p.waits.Inc()
	t := time.NewTimer(p.cfg.AcquireTimeout)
	defer t.Stop()
	for {
		select {
		case c := <-p.idle:
			if c = p.check(c); c != nil {
				return c, nil
			}
		case p.slots <- struct{}{}:
			return p.dial(ctx)
		case <-t.C:
			p.timeouts.Inc()
			return nil, &pgerr.Error{Severity: "ERROR", Code: pgerr.TooManyConnections,
				Message: fmt.Sprintf("%v to worker %s after %v: all %d connections of its pool are busy",
					ErrAcquireTimeout, p.cfg.Addr, p.cfg.AcquireTimeout, p.cfg.Size),
				Hint: "Retry later, shorten long transactions, or raise the coordinator's --pool-size or --pool-timeout."}
		case <-ctx.Done():
			return nil, pgerr.New(pgerr.QueryCanceled, "canceled while waiting for a server connection to worker %s", p.cfg.Addr)
		}
	}
}

// check returns c if it is still usable, or closes it and returns nil.
func (p *Pool) check(c *ServerConn) *ServerConn {
	if c.alive() { // one non-blocking peek: a connection dead since its last use is never handed out
		return c
	}
	p.discard(c)
	return nil
}

func (p *Pool) dial(ctx context.Context) (*ServerConn, error) {
	c, err := dial(ctx, &p.cfg)
	if err != nil {
		<-p.slots
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
	p.open.Inc()
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
	if c.broken {
		p.discard(c)
		return
	}
	c.lastUsed = time.Now()
	p.idle <- c // never blocks: at most Size connections exist
}

// Discard closes c and frees its slot.
func (p *Pool) discard(c *ServerConn) {
	c.close()
	p.open.Dec()
	p.dropped.Inc()
	<-p.slots
}

// Close closes the idle connections. Connections in use are closed when
// released.
func (p *Pool) Close() {
	for {
		select {
		case c := <-p.idle:
			c.close()
			p.open.Dec()
			<-p.slots
		default:
			return
		}
	}
}
