package pooling

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
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

	sc      *ServerConn
	nc      net.Conn // sc's network connection, or nil until the first write
	hello   []byte   // the handshake's answer, still to be read
	started bool
	ended   bool // a CancelRequest was sent: reads see EOF
	once    sync.Once
}

// errNotIdle: a connection can be lent only between statements.
var errNotIdle = errors.New("pooling: lending a connection that is not idle")

// lend makes a Lent of c (which the caller took from its pool); done is
// called once when c goes back to the pool or is closed.
func (c *ServerConn) lend(done func(*ServerConn)) (*Lent, error) {
	if c.broken || c.TxStatus != 'I' || c.R.Buffered() > 0 || len(c.wbuf) > 0 || len(c.segs) > 0 {
		return nil, errNotIdle
	}
	return &Lent{addr: c.Addr, sc: c, nc: c.conn, done: done}, nil
}

// lendLater makes a Lent without a connection: take supplies one if pgx
// opens a connection through it (done as for lend); a cancel request goes
// to the worker at addr.
func lendLater(addr string, take func() (*ServerConn, error), done func(*ServerConn)) *Lent {
	return &Lent{addr: addr, take: take, done: done}
}

const (
	protocol30  = 196608   // StartupMessage, protocol 3.0
	cancelCode  = 80877102 // CancelRequest
	startupSize = 8
)

// Write answers pgx's first message itself and passes the rest on.
func (l *Lent) Write(b []byte) (int, error) {
	if l.started {
		if l.nc == nil {
			return 0, net.ErrClosed
		}
		return l.nc.Write(b)
	}
	l.started = true
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
		l.ended = true
		return len(b), nil
	case protocol30:
		if l.sc == nil {
			sc, err := l.take()
			if err != nil {
				return 0, err
			}
			l.sc, l.nc = sc, sc.conn
		}
		l.hello = l.sc.handshake()
		return len(b), nil
	}
	return 0, errors.New("pooling: a lent connection speaks protocol 3.0 only")
}

// handshake is what the worker answered when c was opened, as c is now.
func (c *ServerConn) handshake() []byte {
	b, _ := (&pgproto3.AuthenticationOk{}).Encode(nil)
	for k, v := range c.Params {
		b, _ = (&pgproto3.ParameterStatus{Name: k, Value: v}).Encode(b)
	}
	b, _ = (&pgproto3.BackendKeyData{ProcessID: c.PID, SecretKey: c.Secret}).Encode(b)
	b, _ = (&pgproto3.ReadyForQuery{TxStatus: 'I'}).Encode(b)
	return b
}

// Read gives the handshake's answer first, then what the worker sends.
func (l *Lent) Read(b []byte) (int, error) {
	if len(l.hello) > 0 {
		n := copy(b, l.hello)
		l.hello = l.hello[n:]
		return n, nil
	}
	if l.nc == nil {
		if l.ended {
			return 0, io.EOF
		}
		return 0, net.ErrClosed
	}
	return l.nc.Read(b)
}

// Close ends the connection: the worker's backend goes (pgx has sent
// Terminate) and the pool slot is freed.
func (l *Lent) Close() error {
	l.finish(false)
	return nil
}

// finish gives the connection back to its pool (reuse) or closes it.
func (l *Lent) finish(reuse bool) {
	l.once.Do(func() {
		sc := l.sc
		if sc == nil {
			return
		}
		_ = sc.conn.SetDeadline(time.Time{})
		if !reuse {
			sc.broken = true
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
func Reclaim(ctx context.Context, pg *pgconn.PgConn) {
	if pg.IsClosed() {
		// Closed by pgx, or being closed after an error (pgconn ends it
		// in the background): the slot is free when that is over.
		<-pg.CleanupDone()
		return
	}
	l, ok := pg.Conn().(*Lent)
	if !ok || l.sc == nil || pg.IsBusy() {
		_ = pg.Close(ctx)
		return
	}
	if err := pg.SyncConn(ctx); err != nil {
		_ = pg.Close(ctx)
		return
	}
	h, err := pg.Hijack()
	if err != nil {
		_ = pg.Close(ctx)
		return
	}
	l.sc.TxStatus = h.TxStatus
	l.sc.Params = h.ParameterStatuses
	l.finish(true)
}

// The rest of net.Conn is the pooled connection's.

func (l *Lent) LocalAddr() net.Addr {
	if l.nc == nil {
		return &net.TCPAddr{}
	}
	return l.nc.LocalAddr()
}

func (l *Lent) RemoteAddr() net.Addr {
	if l.nc == nil {
		a, _ := net.ResolveTCPAddr("tcp", l.addr)
		if a == nil {
			a = &net.TCPAddr{}
		}
		return a
	}
	return l.nc.RemoteAddr()
}

func (l *Lent) SetDeadline(t time.Time) error {
	if l.nc == nil {
		return nil
	}
	return l.nc.SetDeadline(t)
}

func (l *Lent) SetReadDeadline(t time.Time) error {
	if l.nc == nil {
		return nil
	}
	return l.nc.SetReadDeadline(t)
}

func (l *Lent) SetWriteDeadline(t time.Time) error {
	if l.nc == nil {
		return nil
	}
	return l.nc.SetWriteDeadline(t)
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
	host, port, err := net.SplitHostPort(pool.cfg.Addr)
	if err != nil {
		drop(first)
		return nil, err
	}
	// Everything but the user and database comes from the pooled
	// connection; nothing is read from the environment that could change
	// what pgx does after its (answered) startup.
	cfg, err := pgx.ParseConfig("host=" + host + " port=" + port + " sslmode=disable target_session_attrs=any")
	if err != nil {
		drop(first)
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
	cfg.DialFunc = func(context.Context, string, string) (net.Conn, error) {
		if first == nil {
			return lendLater(pool.cfg.Addr, take, done), nil
		}
		sc := first
		first = nil
		l, err := sc.lend(done)
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
