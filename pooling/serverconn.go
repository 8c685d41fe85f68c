package pooling

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"syscall"
	"time"
	"unsafe"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/internal/rawio"
	"github.com/pgfleet/pgfleet/internal/wire"
)

// ServerConn is one connection from a coordinator to a worker. Exactly one
// client session uses it between Acquire and Release.
type ServerConn struct {
	conn   net.Conn
	raw    net.Conn  // conn, never cleared: shut closes it from another goroutine
	w      io.Writer // conn, or its raw writer (rawio) for a plain socket
	R      *wire.Reader
	wbuf   []byte
	segs   [][]byte // output before wbuf, written as they are (AppendLarge)
	PID    uint32
	Secret []byte
	Addr   string

	// Params holds the values the server last reported with ParameterStatus.
	Params map[string]string
	// ParamsKey identifies the session parameters (a SET script) currently
	// applied; "" is the state the connection started in.
	ParamsKey string
	// Defines is the set of custom setting names (placeholders) clients
	// defined on the connection's backend, which nothing undefines
	// (defines.go).
	Defines string
	// TxStatus is the status byte of the last ReadyForQuery.
	TxStatus byte
	// Stmts is the cache of statements prepared on this connection.
	Stmts *StmtCache
	// OtherSettings: for now the connection runs under settings other
	// than ParamsKey's (a transaction block's SETs), so statements are
	// neither taken from Stmts nor kept there for later (StmtKey).
	OtherSettings bool

	pool     *Pool
	owed     bool // written to since the last ReadyForQuery read (Owed)
	lastUsed time.Time
	born     time.Time // when the pool opened it (Config.Lifetime)
	broken   bool
	peekr    *peeker // made at the first peek
	gen      int64   // the pool's generation it was opened in (Refresh)
}

// StmtKey is the settings key a statement parsed on the connection now
// is parsed under: ParamsKey, or UnknownKey under OtherSettings.
func (c *ServerConn) StmtKey() string {
	if c.OtherSettings {
		return UnknownKey
	}
	return c.ParamsKey
}

func dial(ctx context.Context, cfg *Config) (*ServerConn, error) {
	if _, _, err := net.SplitHostPort(cfg.Addr); err != nil {
		return nil, err
	}
	pc, err := pgconn.ParseConfig(cfg.TLS.ConnString(cfg.Addr))
	if err != nil {
		return nil, err
	}
	pc.User, pc.Database, pc.Password = cfg.User, cfg.Database, cfg.Password
	pc.ConnectTimeout = cfg.ConnectTimeout
	// pgfleet.internal, which pgfleet's own writes set LOCAL to pass the
	// guard trigger of a distributed table's table on the first worker,
	// is defined on every connection: a placeholder, it would otherwise
	// stay defined ('') only on those that ran such a write, and a later
	// client there would see it where others see none (adversary).
	pc.RuntimeParams = map[string]string{"pgfleet.internal": "off"}
	if cfg.SCRAM != nil {
		if key := cfg.SCRAM(); key != nil {
			pc.AfterNetConnect = func(_ context.Context, _ *pgconn.Config, c net.Conn) (net.Conn, error) {
				return newSCRAMConn(c, key), nil
			}
		}
	}
	pg, err := pgconn.ConnectConfig(ctx, pc)
	if err != nil {
		return nil, err
	}
	// SyncConn stops pgconn's background reader and checks nothing is
	// buffered: a reader left running would steal the worker's answers.
	if err := pg.SyncConn(ctx); err != nil {
		pg.Close(ctx)
		return nil, err
	}
	h, err := pg.Hijack()
	if err != nil {
		pg.Close(ctx)
		return nil, err
	}
	if sc, ok := h.Conn.(*scramConn); ok && sc.done && sc.ahead.Len() == 0 {
		h.Conn = sc.Conn // authenticated: the bare connection from here on
	}
	_ = h.Conn.SetDeadline(time.Time{})
	if tc, ok := rawConn(h.Conn).(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	c := NewServerConn(h.Conn, cfg.Addr, h.ParameterStatuses)
	c.PID, c.Secret, c.TxStatus = h.PID, h.SecretKey, h.TxStatus
	c.Stmts = newStmtCache(cfg.StmtCacheSize, cfg.StmtEpoch)
	return c, nil
}

// Buf returns the pending output buffer; append messages to it and call Flush.
func (c *ServerConn) Buf() []byte { return c.wbuf }

// SetBuf stores the output buffer after appending.
func (c *ServerConn) SetBuf(b []byte) { c.wbuf = b }

// AppendLarge adds a message whose body is written from where it lies
// instead of being copied into the output buffer (a large client message
// would otherwise be held twice). body must not change until Flush.
func (c *ServerConn) AppendLarge(typ byte, body []byte) {
	if t := c.Types(); t != nil && typ == 'P' && len(body) > 0 {
		body = t.parseBody(body, true)
	}
	c.translateOut()
	c.wbuf = append(c.wbuf, typ, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(c.wbuf[len(c.wbuf)-4:], uint32(len(body)+4))
	c.segs = append(c.segs, c.wbuf, body)
	c.wbuf = nil // later messages go after body, in a new buffer
}

// Flush writes the pending output in one write (a vectored one after
// AppendLarge).
func (c *ServerConn) Flush() error {
	c.translateOut()
	if len(c.segs) > 0 {
		c.owed = true
		bufs := net.Buffers(append(c.segs, c.wbuf))
		_, err := bufs.WriteTo(c.conn)
		c.segs, c.wbuf = nil, make([]byte, 0, 4096)
		if err != nil {
			c.broken = true
		}
		return err
	}
	if len(c.wbuf) == 0 {
		return nil
	}
	c.owed = true
	_, err := c.w.Write(c.wbuf)
	if cap(c.wbuf) > 1<<20 {
		c.wbuf = make([]byte, 0, 4096)
	} else {
		c.wbuf = c.wbuf[:0]
	}
	if err != nil {
		c.broken = true
	}
	return err
}

// translateOut gives the Parse messages in the output buffer the
// worker's type OIDs (types.go), when its tables may hold a type of the
// default node's that the worker has under another OID. (AppendLarge
// translates the buffer before it moves on to a new one.)
func (c *ServerConn) translateOut() {
	if t := c.Types(); t != nil && len(c.wbuf) > 0 {
		if tb := t.Load(); tb == nil || len(tb.Out) > 0 {
			t.translateOut(c.wbuf)
		}
	}
}

// Next reads the next message from the server.
func (c *ServerConn) Next() (wire.Frame, error) {
	f, err := c.R.Next()
	if err != nil {
		c.broken = true
	} else if f.Type == 'Z' {
		c.owed = false
	} else if (f.Type == 'T' || f.Type == 't') && c.pool != nil && c.pool.cfg.Types != nil {
		c.pool.cfg.Types.translateIn(f.Type, f.Body)
	}
	return f, err
}

// Owed reports whether anything was written to the server since the last
// ReadyForQuery read from it, or is buffered unread: false means the
// server owes no answer (it is at a ReadyForQuery, unless a pipeline sent
// several Syncs at once, which the caller knows of).
func (c *ServerConn) Owed() bool {
	return c.owed || c.R.Buffered() > 0 || len(c.wbuf) > 0 || len(c.segs) > 0
}

// SetReadDeadline sets the deadline of reads from the server (zero: none).
func (c *ServerConn) SetReadDeadline(t time.Time) error { return c.conn.SetReadDeadline(t) }

// MarkBroken makes Release close the connection instead of reusing it.
func (c *ServerConn) MarkBroken() { c.broken = true }

// NoteParameterStatus records a ParameterStatus message body.
func (c *ServerConn) NoteParameterStatus(body []byte) {
	var ps pgproto3.ParameterStatus
	if ps.Decode(body) == nil {
		c.Params[ps.Name] = ps.Value
	}
}

// Exec runs a simple-protocol query to completion, discarding rows, and
// returns the first error the server reported. ParameterStatus messages are
// recorded and also passed to onStatus when it is not nil.
func (c *ServerConn) Exec(sql string, deadline time.Time, onStatus func(body []byte)) error {
	var relay func(byte, []byte)
	if onStatus != nil {
		relay = func(typ byte, body []byte) {
			if typ == 'S' {
				onStatus(body)
			}
		}
	}
	return c.run(sql, deadline, relay, nil, nil)
}

// Readable reports, without blocking, whether the server has sent bytes
// not read yet (buffered, or waiting on the socket). Over TLS only what
// is buffered counts: bytes on the socket may be a TLS record that is no
// message (a session ticket), and reading would wait.
func (c *ServerConn) Readable() bool {
	if c.R.Buffered() > 0 {
		return true
	}
	if _, isTLS := c.conn.(*tls.Conn); isTLS {
		return false
	}
	n, _, _, ok := c.peek()
	return ok && n > 0
}

// peeker looks at a connection's socket without waiting or consuming,
// with nothing allocated per look: the raw connection and the function it
// runs are made at the first look (a pooled connection is looked at on
// every checkout).
type peeker struct {
	rc    syscall.RawConn // nil: the connection has no socket to look at
	fn    func(fd uintptr) bool
	n     int
	errno syscall.Errno
	buf   [1]byte
}

// peek looks at the socket under c (under TLS too): n bytes waiting (0 at
// EOF), or n < 0 and errno (EAGAIN: none). socket is false when c has no
// socket to look at; ok false when the look failed (the socket is closed).
func (c *ServerConn) peek() (n int, errno syscall.Errno, socket, ok bool) {
	p := c.peekr
	if p == nil {
		p = &peeker{}
		if sc, isSys := rawConn(c.conn).(syscall.Conn); isSys {
			rc, err := sc.SyscallConn()
			if err != nil {
				return 0, 0, true, false
			}
			p.rc = rc
			p.fn = func(fd uintptr) bool {
				// recvfrom without an address: syscall.Recvfrom's would
				// be allocated at every call. Raw: it cannot block
				// (MSG_DONTWAIT), so it keeps the processor (rawio).
				r, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&p.buf[0])), 1,
					syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
				p.n, p.errno = int(r), e
				if e != 0 {
					p.n = -1
				}
				return true // never wait for readiness
			}
		}
		c.peekr = p
	}
	if p.rc == nil {
		return 0, 0, false, false
	}
	err := p.rc.Read(p.fn)
	return p.n, p.errno, true, err == nil
}

// Alive is alive, for a connection the caller holds idle outside its
// pool (a session's advisory locks, set aside).
func (c *ServerConn) Alive() bool { return c.alive() }

// alive reports whether an idle connection still looks usable: nothing is
// waiting to be read (a worker that ended the connection sends FATAL, then
// EOF). It peeks at the socket without blocking.
func (c *ServerConn) alive() bool {
	if c.broken || c.TxStatus != 'I' || c.R.Buffered() > 0 {
		return false
	}
	n, errno, socket, ok := c.peek()
	if !socket {
		return true
	}
	return ok && n < 0 && (errno == syscall.EAGAIN || errno == syscall.EWOULDBLOCK)
}

// Interrupt makes a blocked read or write on c fail now (for shutdown); the
// connection is then broken and will be closed on release.
func (c *ServerConn) Interrupt() {
	if nc := c.conn; nc != nil {
		_ = nc.SetDeadline(time.Unix(1, 0))
	}
}

// Cancel asks the worker to cancel whatever this connection is running.
func (c *ServerConn) Cancel(ctx context.Context) error {
	return SendCancel(ctx, c.Addr, c.PID, c.Secret)
}

// SendCancel sends a CancelRequest for (pid, secret) to the server at addr.
func SendCancel(ctx context.Context, addr string, pid uint32, secret []byte) error {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer nc.Close()
	req := pgproto3.CancelRequest{ProcessID: pid, SecretKey: secret}
	b, err := req.Encode(nil)
	if err != nil {
		return err
	}
	if _, err := nc.Write(b); err != nil {
		return err
	}
	// The server closes the connection when it has handled the request.
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	var one [1]byte
	_, _ = nc.Read(one[:])
	return nil
}

// drainClosed waits briefly for the worker to close conn after a Terminate:
// its backend has left pg_stat_activity and max_connections by then, so the
// slot it frees is free on the worker too.
func drainClosed(conn net.Conn) {
	_ = conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	_, _ = io.Copy(io.Discard, conn)
}

// shut closes the socket under whoever holds the connection (who then
// finds it broken); safe from any goroutine.
func (c *ServerConn) shut() {
	if c.raw != nil {
		_ = c.raw.Close()
	}
}

func (c *ServerConn) close() {
	if c.conn == nil {
		return
	}
	t := pgproto3.Terminate{}
	b, _ := t.Encode(nil)
	_ = c.conn.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := c.conn.Write(b); err == nil {
		drainClosed(c.conn)
	}
	_ = c.conn.Close()
	c.conn = nil
}

// NewServerConn wraps a connection to a worker whose startup is done, with
// the parameters it reported (the executor's tests put a fake worker on
// the other end).
func NewServerConn(nc net.Conn, addr string, params map[string]string) *ServerConn {
	c := &ServerConn{conn: nc, raw: nc, Addr: addr, Params: params, TxStatus: 'I',
		Stmts: newStmtCache(0, nil), wbuf: make([]byte, 0, 4096)}
	var rd io.Reader
	rd, c.w = rawio.Wrap(nc)
	c.R = wire.NewReader(rd, 32*1024)
	return c
}
