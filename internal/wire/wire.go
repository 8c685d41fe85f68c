// Package wire reads and writes PostgreSQL protocol frames as raw bytes, so
// that the relay can forward a message without decoding and re-encoding it.
// Messages that pgfleet must look inside are decoded with pgx's pgproto3
// types; this package only knows frame boundaries.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// MaxMessageLen bounds one message body unless SetLimits says otherwise;
// PostgreSQL's own limit for its large messages is 1 GB.
const MaxMessageLen = 1 << 30

// SmallMessageLen is PostgreSQL's bound (PQ_SMALL_MESSAGE_LIMIT) on the
// client messages that carry no data: Sync, Flush, Execute, Describe,
// Close, Terminate, CopyDone and CopyFail.
const SmallMessageLen = 10000

// LengthError is a message whose length word is out of bounds. Nothing of
// its body was read or allocated; the stream is out of sync after it.
type LengthError struct {
	Type byte
	Len  int // the length word, which counts itself
	Max  int // the largest body allowed
}

func (e *LengthError) Error() string {
	return fmt.Sprintf("invalid message length %d for message type %q", e.Len, e.Type)
}

// Frame is one message: its type byte and body (without the length word).
// Body aliases the reader's buffer when it fits and is valid only until the
// next read.
type Frame struct {
	Type byte
	Body []byte
}

// Reader reads frames from a buffered stream.
//
// A Reader made by NewPooledReader takes its buffer from a pool shared by
// every reader of that size and gives it back whenever it has consumed
// everything it read and the last read left nothing in the socket: it then
// waits for the next input with a small buffer of its own (idleBufSize
// bytes), and takes a full buffer again when bytes arrive. An idle client
// connection so holds idleBufSize bytes instead of a full buffer; a busy one
// pays a pool Get and Put per wait and a copy of what the small buffer
// received, and an extra read only when more than idleBufSize bytes arrive
// at once.
type Reader struct {
	rd      io.Reader
	buf     []byte // buf[r:w] is buffered; nil while given back to the pool
	r, w    int
	size    int
	err     error // a read error to report once the buffered bytes are used
	scratch []byte

	pool    *sync.Pool // nil: the buffer is the reader's own for good
	bufp    *[]byte    // the pooled buffer held now
	drained bool       // the last read returned less than it asked for
	idle    *[idleBufSize]byte

	limit int // largest body accepted
	small int // largest body of a data-less client message; 0: no such check

	budget *Budget // nil: large bodies are not counted
	held   int64   // what the last large body holds of budget
}

// idleBufSize is the buffer a pooled Reader waits for input with: enough for
// a typical request (a simple query, or Bind/Execute/Sync of a prepared
// statement) to arrive in one read.
const idleBufSize = 512

const minBufSize = 16

// NewReader wraps r with a buffer of size bytes that it keeps.
func NewReader(r io.Reader, size int) *Reader {
	size = max(size, minBufSize)
	return &Reader{rd: r, buf: make([]byte, size), size: size, limit: MaxMessageLen}
}

// NewPooledReader wraps r with a buffer of size bytes from a shared pool,
// given back while the reader waits for input (see Reader).
func NewPooledReader(r io.Reader, size int) *Reader {
	size = max(size, minBufSize)
	return &Reader{rd: r, size: size, pool: bufPool(size), drained: true, idle: new([idleBufSize]byte),
		limit: MaxMessageLen}
}

// SetLimits bounds the bodies Next accepts: limit for every message (at most
// MaxMessageLen), and, when small > 0, small for the client messages
// PostgreSQL reads with its small limit (every type but Query, Parse, Bind,
// FunctionCall and CopyData). A longer message fails with *LengthError
// before any of its body is read.
func (r *Reader) SetLimits(limit, small int) {
	r.limit = min(max(limit, 0), MaxMessageLen)
	r.small = small
}

// largeType reports whether PostgreSQL reads a client message of type typ
// with its large limit (PQ_LARGE_MESSAGE_LIMIT).
func largeType(typ byte) bool {
	switch typ {
	case 'Q', 'P', 'B', 'F', 'd':
		return true
	}
	return false
}

var (
	poolsMu sync.Mutex
	pools   = map[int]*sync.Pool{}
)

// bufPool is the pool of size-byte buffers.
func bufPool(size int) *sync.Pool {
	poolsMu.Lock()
	defer poolsMu.Unlock()
	p := pools[size]
	if p == nil {
		p = &sync.Pool{New: func() any { b := make([]byte, size); return &b }}
		pools[size] = p
	}
	return p
}

// Buffered reports how many bytes are already read from the socket and not yet
// consumed, so a caller can tell whether another message is ready without
// blocking.
func (r *Reader) Buffered() int { return r.w - r.r }

// Ready reports whether Next can return the next message without reading
// from the socket: it is buffered whole (or its length is invalid). A
// message begun but not whole is not ready: the rest is still to come.
func (r *Reader) Ready() bool {
	if r.w-r.r < 5 {
		return false
	}
	n := int(binary.BigEndian.Uint32(r.buf[r.r+1:]))
	return n < 4 || r.w-r.r >= 1+n
}

// BufferedTypes returns the message types of the whole messages already
// buffered, in order, up to max of them (without reading or consuming
// anything): what a client sent along with the message being handled.
func (r *Reader) BufferedTypes(max int) []byte {
	var types []byte
	for at := r.r; len(types) < max && r.w-at >= 5; {
		n := int(binary.BigEndian.Uint32(r.buf[at+1:]))
		if n < 4 {
			break
		}
		types = append(types, r.buf[at])
		at += 1 + n
	}
	return types
}

// Whole blocks until the next message is buffered whole and returns its
// type without consuming it (Next then returns it without reading). ok is
// false for a message longer than the buffer, which only Next reads. A read
// that fails (a deadline passed) leaves what it read buffered, so a watcher
// can be stopped by a deadline without losing part of a message.
func (r *Reader) Whole() (typ byte, ok bool, err error) {
	if err := r.fill(5); err != nil {
		return 0, false, err
	}
	n := int(binary.BigEndian.Uint32(r.buf[r.r+1:]))
	if n < 4 || 1+n > r.size {
		return r.buf[r.r], false, nil
	}
	if err := r.fill(1 + n); err != nil {
		return 0, false, err
	}
	return r.buf[r.r], true, nil
}

// holding reports whether the reader holds a full buffer (always, unless it
// is pooled and waiting for input or has not read yet).
func (r *Reader) holding() bool { return r.buf != nil }

func (r *Reader) take() {
	r.bufp = r.pool.Get().(*[]byte)
	r.buf = *r.bufp
}

func (r *Reader) giveBack() {
	if r.bufp != nil {
		r.pool.Put(r.bufp)
	}
	r.buf, r.bufp = nil, nil
	r.r, r.w = 0, 0
}

func (r *Reader) readErr() error {
	err := r.err
	r.err = nil
	return err
}

// fill reads until at least n (at most r.size) bytes are buffered, or fails.
// Wait waits until input is buffered or a read has failed (the error is
// Next's to report). When the socket was empty at the last read it waits
// with the small idle buffer and little on the caller's stack: a session
// waiting for its client here keeps a goroutine stack the runtime shrinks
// to 4 KiB, where waiting in Next kept it at 8 KiB. When the last read
// filled the buffer it reads into the buffer.
func (r *Reader) Wait() {
	if r.r != r.w || r.err != nil {
		return
	}
	if r.pool != nil && r.drained {
		r.waitIdle()
		return
	}
	if err := r.fill(1); err != nil {
		r.err = err
	}
}

// TakeTimeout reports whether Wait ended at a passed read deadline with
// nothing read, and if so forgets that error: the caller may wait again
// (or let another goroutine do so) once it has moved the deadline.
func (r *Reader) TakeTimeout() bool {
	if r.r != r.w || !errors.Is(r.err, os.ErrDeadlineExceeded) {
		return false
	}
	r.err = nil
	r.drained = true
	return true
}

// Drop gives back the small buffer a pooled Reader waits with, for a
// caller that will not read for a while (a sleeping session); the next
// wait takes one from a shared pool.
func (r *Reader) Drop() {
	if r.pool != nil && r.idle != nil && r.r == r.w {
		r.giveBack()
		idlePool.Put(r.idle)
		r.idle = nil
	}
}

var idlePool = sync.Pool{New: func() any { return new([idleBufSize]byte) }}

// waitIdle waits for input without the full buffer (given back first), and
// takes the buffer again for what arrives.
func (r *Reader) waitIdle() {
	r.giveBack()
	if r.idle == nil {
		r.idle = idlePool.Get().(*[idleBufSize]byte)
	}
	// At most what the full buffer holds: a reader smaller than the idle
	// buffer would otherwise drop the rest.
	idle := r.idle[:min(idleBufSize, r.size)]
	m, err := r.rd.Read(idle)
	if m < 0 || m > len(idle) {
		panic("wire: reader returned an impossible count")
	}
	if m > 0 {
		r.take()
		r.w = copy(r.buf, idle[:m])
	}
	r.drained = m < len(idle)
	if err != nil {
		r.err = err
	}
}

func (r *Reader) fill(n int) error {
	if r.w-r.r >= n {
		return nil
	}
	if r.err != nil {
		return r.readErr()
	}
	if r.r == r.w && r.pool != nil && r.drained {
		r.waitIdle()
		if r.w >= n {
			return nil
		}
		if r.err != nil {
			return r.readErr()
		}
	}
	if r.buf == nil {
		r.take()
	}
	if r.r > 0 {
		copy(r.buf, r.buf[r.r:r.w])
		r.w -= r.r
		r.r = 0
	}
	for empty := 0; r.w < n; {
		m, err := r.rd.Read(r.buf[r.w:])
		if m < 0 || m > len(r.buf)-r.w {
			panic("wire: reader returned an impossible count")
		}
		r.drained = m < len(r.buf)-r.w
		r.w += m
		if err != nil {
			if r.w >= n {
				r.err = err
				return nil
			}
			return err
		}
		if m > 0 {
			empty = 0
		} else if empty++; empty >= 100 {
			return io.ErrNoProgress
		}
	}
	return nil
}

// readFull fills p from the buffer, then from the stream. Like
// io.ReadFull, it fails with io.EOF when it read nothing and with
// io.ErrUnexpectedEOF when the stream ended midway.
func (r *Reader) readFull(p []byte) error {
	partial := false
	for len(p) > 0 {
		if r.r == r.w {
			if len(p) >= r.size {
				// Large: read straight into p, as bufio does.
				m, err := io.ReadFull(r.rd, p)
				if m == len(p) {
					return nil
				}
				if err == io.EOF && partial {
					err = io.ErrUnexpectedEOF
				}
				return err
			}
			if err := r.fill(1); err != nil {
				if err == io.EOF && partial {
					err = io.ErrUnexpectedEOF
				}
				return err
			}
		}
		partial = true
		m := copy(p, r.buf[r.r:r.w])
		r.r += m
		p = p[m:]
	}
	return nil
}

// Next returns the next frame. The body is valid until the next call.
func (r *Reader) Next() (Frame, error) {
	r.Release()
	if err := r.fill(5); err != nil {
		if err == io.EOF && r.w > r.r {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, err
	}
	hdr := r.buf[r.r : r.r+5]
	typ := hdr[0]
	n := int(binary.BigEndian.Uint32(hdr[1:5]))
	if n < 4 || n-4 > r.limit || (n-4 > r.small && r.small > 0 && !largeType(typ)) {
		lim := r.limit
		if !largeType(typ) && r.small > 0 {
			lim = min(lim, r.small)
		}
		return Frame{}, &LengthError{Type: typ, Len: n, Max: lim}
	}
	n -= 4
	if 5+n <= r.size {
		if err := r.fill(5 + n); err != nil {
			return Frame{}, unexpected(err)
		}
		body := r.buf[r.r+5 : r.r+5+n]
		r.r += 5 + n
		// body points into the buffer until the next call, which is the
		// first that may move, refill or give back the buffer.
		return Frame{Type: typ, Body: body}, nil
	}
	if err := r.reserve(typ, n); err != nil {
		return Frame{}, err
	}
	r.r += 5
	// The body grows as its bytes arrive (at most doubling per step), so a
	// header that claims a huge body costs memory only for what is sent.
	body := r.scratch[:0]
	for len(body) < n {
		step := min(n-len(body), max(64<<10, len(body)))
		if cap(body) < len(body)+step {
			nb := make([]byte, len(body), len(body)+step)
			copy(nb, body)
			body = nb
		}
		body = body[:len(body)+step]
		if err := r.readFull(body[len(body)-step:]); err != nil {
			r.Release()
			return Frame{}, unexpected(err)
		}
	}
	r.scratch = body
	if n > 1<<20 {
		r.scratch = nil // do not keep huge buffers alive between messages
	}
	return Frame{Type: typ, Body: body}, nil
}

// ReadStartup reads an untyped startup-phase packet (length word, then body).
func (r *Reader) ReadStartup(maxLen int) ([]byte, error) {
	var lb [4]byte
	if err := r.readFull(lb[:]); err != nil {
		return nil, err
	}
	n := int(int32(binary.BigEndian.Uint32(lb[:])))
	if n < 8 || n > maxLen {
		return nil, fmt.Errorf("invalid length of startup packet: %d", n)
	}
	body := make([]byte, n-4)
	if err := r.readFull(body); err != nil {
		return nil, unexpected(err)
	}
	return body, nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// AppendFrame appends a frame, header included, to dst.
func AppendFrame(dst []byte, typ byte, body []byte) []byte {
	dst = append(dst, typ, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(dst[len(dst)-4:], uint32(len(body)+4))
	return append(dst, body...)
}

// SplitFrame reads the first frame of b, a buffer of whole frames as
// AppendFrame writes them: its type, its body and its length with the
// header (n); ok is false when b does not begin with a complete frame.
func SplitFrame(b []byte) (typ byte, body []byte, n int, ok bool) {
	if len(b) < 5 {
		return 0, nil, 0, false
	}
	n = 1 + int(binary.BigEndian.Uint32(b[1:]))
	if n < 5 || n > len(b) {
		return 0, nil, 0, false
	}
	return b[0], b[5:n], n, true
}

// CString reads a NUL-terminated string from b, returning it and the rest.
func CString(b []byte) (string, []byte, bool) {
	for i, c := range b {
		if c == 0 {
			return string(b[:i]), b[i+1:], true
		}
	}
	return "", nil, false
}

// Peek1 peeks at one byte, blocking until it arrives or the read deadline passes.
func (r *Reader) Peek1() ([]byte, error) {
	if err := r.fill(1); err != nil {
		return nil, err
	}
	return r.buf[r.r : r.r+1], nil
}

// CBytes is CString without the string copy: the name aliases b.
func CBytes(b []byte) (name, rest []byte, ok bool) {
	for i, c := range b {
		if c == 0 {
			return b[:i], b[i+1:], true
		}
	}
	return nil, nil, false
}
