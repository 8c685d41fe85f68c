package pooling

import (
	"sync"
	"syscall"
)

// hangups is one thread waiting in epoll for the end of any pooled
// worker connection (the worker's FIN or RST: EPOLLRDHUP, EPOLLHUP,
// EPOLLERR; bytes arriving do not wake it), which it marks hung up. A
// checkout then knows without a system call of its own whether an idle
// connection died since its last use (pg_terminate_backend, a worker
// restart, idle_session_timeout: the worker sends FATAL, then closes),
// where it would otherwise peek at the socket at every checkout.
//
// A backend ends an idle connection only by closing it, so the close is
// what is watched. The mark lags the close by the thread's wake-up,
// microseconds, as a peek's look lags whatever arrives just after it.
type hangups struct {
	once sync.Once
	epfd int // -1: epoll unavailable; connections are peeked at instead
	mu   sync.Mutex
	ids  map[int32]*ServerConn // by the id in their epoll event
	next int32
}

var hup hangups

func (h *hangups) start() {
	fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		h.epfd = -1
		return
	}
	h.epfd, h.ids = fd, map[int32]*ServerConn{}
	go h.wait()
}

// wait marks the connections whose sockets report an end. Each is
// registered one-shot: it reports once, then never again.
func (h *hangups) wait() {
	var evs [32]syscall.EpollEvent
	for {
		n, err := syscall.EpollWait(h.epfd, evs[:], -1)
		if err != nil {
			if err == syscall.EINTR {
				continue
			}
			return // (EBADF and EINVAL cannot happen on our own epoll)
		}
		h.mu.Lock()
		for _, ev := range evs[:n] {
			if c := h.ids[ev.Fd]; c != nil {
				c.hungUp.Store(true)
			}
		}
		h.mu.Unlock()
	}
}

// watch registers c's socket. False when it cannot be watched (no
// socket, no epoll): c is then peeked at when checked out.
func watch(c *ServerConn) bool {
	hup.once.Do(hup.start)
	if hup.epfd < 0 {
		return false
	}
	sc, ok := rawConn(c.conn).(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	hup.mu.Lock()
	for {
		hup.next++
		if hup.next <= 0 {
			hup.next = 1
		}
		if hup.ids[hup.next] == nil {
			break
		}
	}
	id := hup.next
	hup.ids[id] = c
	hup.mu.Unlock()
	var cerr error
	err = rc.Control(func(fd uintptr) {
		ev := syscall.EpollEvent{Events: syscall.EPOLLRDHUP | syscall.EPOLLONESHOT, Fd: id}
		cerr = syscall.EpollCtl(hup.epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev)
	})
	if err != nil || cerr != nil {
		hup.mu.Lock()
		delete(hup.ids, id)
		hup.mu.Unlock()
		return false
	}
	c.watchID = id
	return true
}

// unwatch forgets c before its socket closes (closing the socket takes it
// out of the epoll set).
func unwatch(c *ServerConn) {
	if c.watchID == 0 {
		return
	}
	hup.mu.Lock()
	delete(hup.ids, c.watchID)
	hup.mu.Unlock()
	c.watchID = 0
}
