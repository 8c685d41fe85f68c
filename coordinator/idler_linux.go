//go:build linux

package coordinator

import (
	"errors"
	"log/slog"
	"sync"
	"syscall"
)

// idler waits, in one epoll instance and one goroutine, for the clients of
// sleeping sessions (sleep.go) to send, and hands each woken session to
// wake in a goroutine of its own. Each registration is one-shot and is
// deleted when the session is taken back, so a socket is in the epoll set
// only while its session sleeps.
type idler struct {
	epfd   int
	stopFD [2]int // a pipe: a byte written ends the loop
	wake   func(*session)
	log    *slog.Logger

	mu     sync.Mutex
	asleep map[uint32]sleeper // by process ID, the epoll events' key
	closed bool
	done   chan struct{}
}

func newIdler(wake func(*session), log *slog.Logger) (*idler, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	d := &idler{epfd: epfd, wake: wake, log: log, asleep: map[uint32]sleeper{}, done: make(chan struct{})}
	if err := syscall.Pipe2(d.stopFD[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		syscall.Close(epfd)
		return nil, err
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Pad: 0} // key 0: no session's
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, d.stopFD[0], &ev); err != nil {
		d.closeFDs()
		return nil, err
	}
	go d.loop()
	return d, nil
}

func (d *idler) closeFDs() {
	syscall.Close(d.epfd)
	syscall.Close(d.stopFD[0])
	syscall.Close(d.stopFD[1])
}

var errIdlerClosed = errors.New("the idler is closed")

// sleep registers ss, whose goroutine is ending, to be woken when its
// client's socket is readable (or closed). After it returns nil the
// caller must not touch ss: another goroutine may be serving it already.
func (d *idler) sleep(ss *session) error {
	raw, err := ss.conn.(syscall.Conn).SyscallConn()
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errIdlerClosed
	}
	var ctlErr error
	err = raw.Control(func(fd uintptr) {
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT, Fd: int32(fd), Pad: int32(ss.pid)}
		if ctlErr = syscall.EpollCtl(d.epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev); ctlErr == nil {
			d.asleep[ss.pid] = sleeper{ss, int(fd)}
		}
	})
	return errors.Join(err, ctlErr)
}

// take takes ss back from the idler: true if it was asleep there, and the
// caller now serves it (or ends it).
func (d *idler) take(ss *session) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.takeLocked(ss.pid) != nil
}

func (d *idler) takeLocked(pid uint32) *session {
	sl, ok := d.asleep[pid]
	if !ok {
		return nil
	}
	// The socket may be closed (Close closes every client connection
	// first); no other session's can have its number then.
	_ = syscall.EpollCtl(d.epfd, syscall.EPOLL_CTL_DEL, sl.fd, nil)
	delete(d.asleep, pid)
	return sl.ss
}

// sleeper is a session asleep and its socket.
type sleeper struct {
	ss *session
	fd int
}

// count is the number of sessions asleep.
func (d *idler) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.asleep)
}

// close stops the idler and returns the sessions asleep, taken back: the
// caller wakes them to end.
func (d *idler) close() []*session {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	var all []*session
	for pid := range d.asleep {
		all = append(all, d.takeLocked(pid))
	}
	d.mu.Unlock()
	_, _ = syscall.Write(d.stopFD[1], []byte{0})
	<-d.done
	d.closeFDs()
	return all
}

func (d *idler) loop() {
	defer close(d.done)
	events := make([]syscall.EpollEvent, 64)
	for {
		n, err := syscall.EpollWait(d.epfd, events, -1)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			// Not expected; the sessions asleep are woken by close.
			d.log.Error("the idler cannot wait for sleeping sessions' clients", "err", err)
			return
		}
		for _, ev := range events[:n] {
			if ev.Pad == 0 {
				return
			}
			d.mu.Lock()
			ss := d.takeLocked(uint32(ev.Pad))
			d.mu.Unlock()
			if ss != nil {
				go d.wake(ss)
			}
		}
	}
}
