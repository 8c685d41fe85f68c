package pooling

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// Lent is the network connection of a pooled ServerConn lent to pgx, for the
// coordinator's own statements over several workers (COPY, multi-row INSERT,
// DDL, reference writes, the Citus functions, recovery): LendPgx opens a pgx
// connection through a DialFunc that returns it. The StartupMessage pgx writes
// is answered as the worker answered the pooled connection's (AuthenticationOk,
// its ParameterStatus messages, BackendKeyData, ReadyForQuery); everything
// after goes to and from the worker unchanged. Reclaim gives the connection
// back to its pool; Close (pgx closing it) ends it and frees its slot.
//
// A Lent made without a connection (the later dials of the same pgx
// configuration) takes one from take when pgx writes a StartupMessage (pgx
// opening a new connection for a lost one), or, when pgx writes a
// CancelRequest instead, sends it to the worker and reads as closed.
type Lent struct {
	addr string
	take func() (*ServerConn, error)
	done func(*ServerConn) // called once, when the connection goes back or is closed

	started bool // the first message was written (Write's own state)
	// ready is closed once the first message is answered: pgconn may read
	// (from its background reader) while its first write is still under
	// way, and that read must get the handshake, not wait on the worker.
	ready     chan struct{}
	readyOnce sync.Once
	mu        sync.Mutex // guards what follows, set by the first Write
	sc        *ServerConn
	nc        net.Conn // sc's network connection, or nil until the first write
	hello     []byte   // the handshake's answer, still to be read
	ended     bool     // a CancelRequest was sent: reads see EOF
	failed    error    // the first message could not be answered
	once      sync.Once
	// borrowed: the connection stays the caller's (Borrow): finishing the
	// loan never gives it back to the pool.
	borrowed bool
	// notice gets the notices the worker sends (OnNotice), if set.
	notice atomic.Pointer[func(*pgconn.Notice)]
}

// OnNotice has f called with every notice the worker sends on c, a
// connection LendPgx or Borrow opened, from now on (nil: none).
func OnNotice(c *pgx.Conn, f func(*pgconn.Notice)) {
	if l, ok := c.PgConn().Conn().(*Lent); ok {
		if f == nil {
			l.notice.Store(nil)
		} else {
			l.notice.Store(&f)
		}
	}
}

// errNotIdle: a connection can be lent only between statements.
var errNotIdle = errors.New("pooling: lending a connection that is not idle")

// lend makes a Lent of c (which the caller took from its pool); done is
// called once when c goes back to the pool or is closed. A borrowed c may
// be inside a transaction block; it never goes back to the pool.
func (c *ServerConn) lend(done func(*ServerConn), borrowed bool) (*Lent, error) {
	if c.broken || (c.TxStatus != 'I' && !borrowed) || c.R.Buffered() > 0 || len(c.wbuf) > 0 || len(c.segs) > 0 {
		return nil, errNotIdle
	}
	return &Lent{addr: c.Addr, sc: c, nc: c.conn, done: done, ready: make(chan struct{}), borrowed: borrowed}, nil
}

// lendLater makes a Lent without a connection: take supplies one if pgx
// opens a connection through it (done as for lend); a cancel request goes
// to the worker at addr.
func lendLater(addr string, take func() (*ServerConn, error), done func(*ServerConn)) *Lent {
	return &Lent{addr: addr, take: take, done: done, ready: make(chan struct{})}
}

const (
	protocol30  = 196608   // StartupMessage, protocol 3.0
	cancelCode  = 80877102 // CancelRequest
	startupSize = 8
)

// Write answers pgx's first message itself and passes the rest on.
func (l *Lent) Write(b []byte) (int, error) {
	if l.started {
		nc := l.conn()
		if nc == nil {
			return 0, net.ErrClosed
		}
		return nc.Write(b)
	}
	l.started = true
	n, err := l.first(b)
	l.mu.Lock()
	l.failed = err
	l.mu.Unlock()
	l.readyOnce.Do(func() { close(l.ready) })
	return n, err
}

// first answers the first message pgx writes: a StartupMessage with the
// pooled connection's handshake, a CancelRequest by sending it on.
func (l *Lent) first(b []byte) (int, error) {
	if len(b) < startupSize || int(binary.BigEndian.Uint32(b)) != len(b) {
		return 0, errors.New("pooling: a lent connection's first message must be a StartupMessage or CancelRequest")
	}
	switch binary.BigEndian.Uint32(b[4:]) {
	case cancelCode:
		var req pgproto3.CancelRequest
		if err := req.Decode(b[4:]); err != nil {
			return 0, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := SendCancel(ctx, l.addr, req.ProcessID, req.SecretKey); err != nil {
			return 0, err
		}
		l.mu.Lock()
		l.ended = true
		l.mu.Unlock()
		return len(b), nil
	case protocol30:
		l.mu.Lock()
		sc := l.sc
		l.mu.Unlock()
		if sc == nil {
			var err error
			if sc, err = l.take(); err != nil {
				return 0, err
			}
		}
		l.mu.Lock()
		l.sc, l.nc, l.hello = sc, sc.conn, sc.handshake()
		l.mu.Unlock()
		return len(b), nil
	}
	return 0, errors.New("pooling: a lent connection speaks protocol 3.0 only")
}

// handshake is what the worker answered when c was opened, as c is now:
// its ReadyForQuery has c's transaction status (a borrowed connection's
// may be in a block, and GiveBack takes back what pgx last saw).
func (c *ServerConn) handshake() []byte {
	b, _ := (&pgproto3.AuthenticationOk{}).Encode(nil)
	for k, v := range c.Params {
		b, _ = (&pgproto3.ParameterStatus{Name: k, Value: v}).Encode(b)
	}
	b, _ = (&pgproto3.BackendKeyData{ProcessID: c.PID, SecretKey: c.Secret}).Encode(b)
	b, _ = (&pgproto3.ReadyForQuery{TxStatus: c.TxStatus}).Encode(b)
	return b
}

// Read gives the handshake's answer first, then what the worker sends.
func (l *Lent) Read(b []byte) (int, error) {
	<-l.ready
	l.mu.Lock()
	if len(l.hello) > 0 {
		n := copy(b, l.hello)
		l.hello = l.hello[n:]
		l.mu.Unlock()
		return n, nil
	}
	nc, ended, failed := l.nc, l.ended, l.failed
	l.mu.Unlock()
	switch {
	case failed != nil:
		return 0, failed
	case ended:
		return 0, io.EOF
	case nc == nil:
		return 0, net.ErrClosed
	}
	return nc.Read(b)
}

// Close ends the connection: the worker's backend goes (pgx has sent
// Terminate) and the pool slot is freed.
func (l *Lent) Close() error {
	l.finish(false)
	return nil
}

// finish gives the connection back to its pool (reuse) or closes it.
func (l *Lent) finish(reuse bool) {
	l.readyOnce.Do(func() { close(l.ready) }) // a read waiting for a first write that never came
	l.once.Do(func() {
		l.mu.Lock()
		sc := l.sc
		l.mu.Unlock()
		if sc == nil {
			return
		}
		_ = sc.conn.SetDeadline(time.Time{})
		if !reuse {
			sc.broken = true
		}
		if l.borrowed {
			return // the caller's still
		}
		sc.pool.Release(sc)
		if l.done != nil {
			l.done(sc)
		}
	})
}

// Reclaim gives a connection pgx opened over a Lent back to its pool: it
// must be idle with nothing unread (it is closed otherwise); a transaction
// left open is rolled back by Release. Connections not made over a Lent are
// closed.
func Reclaim(ctx context.Context, pg *pgconn.PgConn) { _ = endLoan(ctx, pg) }

// endLoan ends the loan of a connection pgx opened over a Lent: idle with
// nothing unread, it goes back to its pool (or to the caller that
// borrowed it) with its transaction status and parameters as pgx left
// them; otherwise it is closed, and the error says why. A connection pgx
// closed (after an error) has its slot freed when pgconn is done with it;
// a borrowed one is marked broken.
func endLoan(ctx context.Context, p *pgconn.PgConn) error {
	l, ok := p.Conn().(*Lent)
	if p.IsClosed() {
		<-p.CleanupDone()
		if ok && l.borrowed && l.sc != nil {
			l.sc.broken = true
		}
		return errors.New("pooling: the lent connection was lost")
	}
	var err error
	switch {
	case !ok || l.conn() == nil:
		err = errors.New("pooling: not a lent connection")
	case p.IsBusy():
		err = errors.New("pooling: the lent connection was left busy")
	default:
		if err = p.SyncConn(ctx); err == nil {
			var h *pgconn.HijackedConn
			if h, err = p.Hijack(); err == nil {
				l.sc.TxStatus, l.sc.Params = h.TxStatus, h.ParameterStatuses
				l.finish(true)
				return nil
			}
		}
	}
	_ = p.Close(ctx)
	return err
}

// The rest of net.Conn is the pooled connection's.

// conn is the pooled connection's network connection, nil before the
// first write.
func (l *Lent) conn() net.Conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.nc
}

func (l *Lent) LocalAddr() net.Addr {
	if nc := l.conn(); nc != nil {
		return nc.LocalAddr()
	}
	return &net.TCPAddr{}
}

func (l *Lent) RemoteAddr() net.Addr {
	if nc := l.conn(); nc != nil {
		return nc.RemoteAddr()
	}
	a, _ := net.ResolveTCPAddr("tcp", l.addr)
	if a == nil {
		a = &net.TCPAddr{}
	}
	return a
}

func (l *Lent) SetDeadline(t time.Time) error {
	if nc := l.conn(); nc != nil {
		return nc.SetDeadline(t)
	}
	return nil
}

func (l *Lent) SetReadDeadline(t time.Time) error {
	if nc := l.conn(); nc != nil {
		return nc.SetReadDeadline(t)
	}
	return nil
}

func (l *Lent) SetWriteDeadline(t time.Time) error {
	if nc := l.conn(); nc != nil {
		return nc.SetWriteDeadline(t)
	}
	return nil
}

// LendPgx opens a pgx connection over first, a connection the caller took
// from its pool. take supplies another when pgx opens one more through the
// same configuration (a two-phase commit replacing a lost connection);
// done is called as each goes back to the pool or is closed (also when
// LendPgx fails). The connection goes back with Reclaim.
func LendPgx(ctx context.Context, first *ServerConn, take func() (*ServerConn, error),
	done func(*ServerConn)) (*pgx.Conn, error) {
	pool := first.pool
	drop := func(sc *ServerConn) {
		sc.broken = true
		pool.Release(sc)
		done(sc)
	}
	cfg, err := lentConfig(pool)
	if err != nil {
		drop(first)
		return nil, err
	}
	cfg.DialFunc = func(context.Context, string, string) (net.Conn, error) {
		if first == nil {
			return lendLater(pool.cfg.Addr, take, done), nil
		}
		sc := first
		first = nil
		l, err := sc.lend(done, false)
		if err != nil {
			drop(sc)
			return nil, err
		}
		return l, nil
	}
	c, err := pgx.ConnectConfig(ctx, cfg)
	if first != nil { // pgx gave up before it dialled
		drop(first)
	}
	return c, err
}

// lentConfig is the pgx configuration of a connection lent from pool:
// everything but the user and database comes from the pooled connection;
// nothing is read from the environment that could change what pgx does
// after its (answered) startup. The caller sets DialFunc.
func lentConfig(pool *Pool) (*pgx.ConnConfig, error) {
	host, port, err := net.SplitHostPort(pool.cfg.Addr)
	if err != nil {
		return nil, err
	}
	cfg, err := pgx.ParseConfig("host=" + host + " port=" + port + " sslmode=disable target_session_attrs=any")
	if err != nil {
		return nil, err
	}
	cfg.User, cfg.Database = pool.cfg.User, pool.cfg.Database
	cfg.TLSConfig, cfg.Fallbacks = nil, nil
	cfg.ValidateConnect, cfg.AfterConnect = nil, nil
	cfg.RuntimeParams = map[string]string{}
	// Unnamed statements only: a named one would outlive the loan on the
	// worker and collide with the next pgx connection's of the same name.
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	cfg.StatementCacheCapacity, cfg.DescriptionCacheCapacity = 0, 0
	cfg.LookupFunc = func(_ context.Context, host string) ([]string, error) { return []string{host}, nil }
	cfg.OnNotice = func(pc *pgconn.PgConn, n *pgconn.Notice) {
		if l, ok := pc.Conn().(*Lent); ok {
			if f := l.notice.Load(); f != nil {
				(*f)(n)
			}
		}
	}
	return cfg, nil
}

// errBorrowed: pgx tried to open a second connection through a borrowed
// one's configuration.
var errBorrowed = errors.New("pooling: a borrowed connection cannot be replaced")

// Borrow lends c, a connection the caller holds and keeps (a client's
// transaction block on a worker), to pgx for the coordinator's own
// statements inside that transaction: as LendPgx, but c may be in a
// transaction block and never goes back to the pool. GiveBack ends the
// loan. A cancel pgx sends (its context ended) goes to the worker.
func Borrow(ctx context.Context, c *ServerConn) (*pgx.Conn, error) {
	cfg, err := lentConfig(c.pool)
	if err != nil {
		return nil, err
	}
	first := c
	cfg.DialFunc = func(context.Context, string, string) (net.Conn, error) {
		if first == nil {
			return lendLater(c.Addr, func() (*ServerConn, error) { return nil, errBorrowed }, nil), nil
		}
		first = nil
		l, err := c.lend(nil, true)
		if err != nil {
			return nil, err
		}
		return l, nil
	}
	return pgx.ConnectConfig(ctx, cfg)
}

// GiveBack ends a loan Borrow made: the connection is the caller's again,
// its transaction status and parameters as pgx left them. An error means
// the connection was lost (or pgx left it busy) and is marked broken.
func GiveBack(ctx context.Context, pg *pgx.Conn) error { return endLoan(ctx, pg.PgConn()) }
