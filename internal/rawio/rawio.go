// Package rawio reads and writes a TCP socket with raw system calls, and
// waits in Go's netpoller only when the socket has nothing to give or no
// room to take (EAGAIN).
//
// Why: a net.Conn's Read and Write enter the system call through the
// runtime's entersyscall, which lets the scheduler's monitor (sysmon) take
// the processor away when the call lasts past its 20 µs tick, and hand it
// to another thread. On loopback a write runs the receiver's TCP input and
// wakes it in the writer's call, which often lasts that long on a virtual
// machine: a relay then pays a thread hand-off per call, and sysmon, kept
// busy, polls every 20 µs (in the profile of a coordinator relaying point
// reads, its sleeps and the hand-offs took more than a tenth of the CPU).
// A raw call on a non-blocking socket cannot block; it keeps the processor.
// Deadlines, Close and EAGAIN behave as the net.Conn's own: the waits are
// the netpoller's, through syscall.RawConn.
package rawio

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// Conn is the raw reader and writer of one socket. Read and Write may run
// at once (each has its own state); calls of one kind are serialized.
type Conn struct {
	rc syscall.RawConn

	rmu    sync.Mutex
	rbuf   []byte
	rn     int
	rerr   error
	readFn func(fd uintptr) bool

	wmu     sync.Mutex
	wbuf    []byte
	wn      int
	werr    error
	writeFn func(fd uintptr) bool
}

// New returns the raw reader and writer of c's socket, or nil when c is not
// a plain TCP connection (TLS, a pipe): the caller then uses c itself.
func New(c net.Conn) *Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	x := &Conn{rc: rc}
	x.readFn, x.writeFn = x.read, x.write
	return x
}

// Wrap returns c's raw reader and writer when c is a plain TCP
// connection, else c itself for both.
func Wrap(c net.Conn) (io.Reader, io.Writer) {
	if x := New(c); x != nil {
		return x, x
	}
	return c, c
}

// Read reads into p what the socket has, waiting until it has something.
// At end of stream it returns io.EOF.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.rbuf, c.rn, c.rerr = p, 0, nil
	err := c.rc.Read(c.readFn)
	c.rbuf = nil
	if err != nil {
		return 0, err // a deadline, or the connection closed
	}
	return c.rn, c.rerr
}

// read is the netpoller's callback: false to wait for the socket.
func (c *Conn) read(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&c.rbuf[0])), uintptr(len(c.rbuf)))
		switch {
		case e == syscall.EINTR:
			continue
		case e == syscall.EAGAIN:
			return false
		case e != 0:
			c.rerr = os.NewSyscallError("read", e)
		case n == 0:
			c.rerr = io.EOF
		default:
			c.rn = int(n)
		}
		return true
	}
}

// Write writes all of p, waiting for room as often as the socket has none.
func (c *Conn) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wbuf, c.wn, c.werr = p, 0, nil
	err := c.rc.Write(c.writeFn)
	c.wbuf = nil
	if err == nil {
		err = c.werr
	}
	return c.wn, err
}

// write is the netpoller's callback: false to wait for room.
func (c *Conn) write(fd uintptr) bool {
	for c.wn < len(c.wbuf) {
		rest := c.wbuf[c.wn:]
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&rest[0])), uintptr(len(rest)))
		switch {
		case e == syscall.EINTR:
			continue
		case e == syscall.EAGAIN:
			return false
		case e != 0:
			c.werr = os.NewSyscallError("write", e)
			return true
		}
		c.wn += int(n)
	}
	return true
}
