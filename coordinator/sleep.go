package coordinator

import (
	"syscall"
	"time"
)

// Sessions asleep: a session at rest (outside a transaction, nothing
// buffered, no server connection it must watch) for a while lets its
// goroutine go, and the idler (idler_linux.go: one epoll instance) starts
// a new one when its client sends again. An idle client then costs its
// session's heap objects and no goroutine stack.
//
// Nothing on the per-request path changes: a sweep (sleepSweep, every
// IdleSleep) marks the sessions it finds at rest (waitNod) and, at the
// next sweep, asks those still so marked to sleep (waitSleep) by passing
// their read deadline. The session's Wait then ends with nothing read;
// awake registers it with the idler (waitAsleep), and its goroutine
// returns. Whoever changes a session's read deadline together with its
// wait state does both under sleepMu: the sweep, awake, resume and the
// killers (endWaiting, terminateSession).

// canSleep reports whether the session, about to wait for its client at
// rest, may let its goroutine go meanwhile: the connection is a plain
// socket (TLS keeps records the socket's readiness does not show) and no
// server connection is watched during the wait.
func (ss *session) canSleep() bool {
	return ss.srv.idler != nil && ss.rawConn && !ss.watchesServer()
}

// sleepSweep runs until stop, every IdleSleep.
func (s *Server) sleepSweep(stop <-chan struct{}) {
	t := time.NewTicker(s.cfg.IdleSleep)
	defer t.Stop()
	var drowsy []*session
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		drowsy = s.sweepOnce(drowsy[:0])
		clear(drowsy)
	}
}

// sweepOnce marks the sessions at rest since the last sweep, and asks
// those marked then and still at rest to sleep (buf: scratch).
func (s *Server) sweepOnce(buf []*session) []*session {
	s.mu.Lock()
	for _, ss := range s.sessions {
		if !ss.napOK.Load() || ss.wait.CompareAndSwap(waitRest, waitNod) {
			continue
		}
		if ss.wait.Load() == waitNod {
			buf = append(buf, ss)
		}
	}
	s.mu.Unlock()
	for _, ss := range buf {
		// napOK is read again before the swap: a session leaves waitNod
		// only by its own swap, and sets napOK before its next rest, so
		// when the swap succeeds napOK is this rest's.
		ss.sleepMu.Lock()
		if ss.napOK.Load() && ss.wait.CompareAndSwap(waitNod, waitSleep) {
			_ = ss.conn.SetReadDeadline(aLongTimeAgo)
		}
		ss.sleepMu.Unlock()
	}
	return buf
}

// aLongTimeAgo is a read deadline that has passed.
var aLongTimeAgo = time.Unix(1, 0)

// awake ends the session's wait for its client once Reader.Wait has
// returned (waited: the state goIdle stored). It returns waitBusy when the
// session goes on to read the client's message, waitKilled when Shutdown
// or pg_terminate_backend ended it (the caller tells the client), and waitAsleep
// when the sweep asked it to sleep and nothing came: the caller lets its
// goroutine go and registers it with the idler.
func (ss *session) awake(waited int32) int32 {
	for {
		if ss.wait.CompareAndSwap(waited, waitBusy) {
			return waitBusy
		}
		switch ss.wait.Load() {
		case waitKilled:
			return waitKilled
		case waitNod:
			if ss.wait.CompareAndSwap(waitNod, waitBusy) {
				return waitBusy
			}
		case waitSleep:
			ss.sleepMu.Lock()
			if ss.wait.Load() != waitSleep {
				ss.sleepMu.Unlock() // a killer came first
				continue
			}
			st := int32(waitBusy)
			if ss.r.TakeTimeout() {
				st = waitAsleep // the deadline stays passed until resume
				ss.r.Drop()
			}
			// Under sleepMu nobody else leaves waitSleep.
			ss.wait.Store(st)
			if st == waitBusy {
				_ = ss.conn.SetReadDeadline(time.Time{})
			}
			ss.sleepMu.Unlock()
			return st
		}
	}
}

// sleep hands a session whose goroutine is ending (awake said waitAsleep)
// to the idler. If the idler cannot take it, a new goroutine serves it.
func (s *Server) sleep(ss *session) {
	if err := s.idler.sleep(ss); err != nil {
		go s.resume(ss)
		return
	}
	// A killer that swapped waitAsleep for waitKilled before the session
	// was registered found nothing to wake: whoever takes it back first
	// resumes it.
	if ss.wait.Load() == waitKilled && s.idler.take(ss) {
		go s.resume(ss)
	}
}

// resume serves a session the idler woke (its client sent something, or
// a killer or Close took it back), in the goroutine it is called in.
func (s *Server) resume(ss *session) {
	ss.sleepMu.Lock()
	ok := ss.wait.CompareAndSwap(waitAsleep, waitBusy)
	if ok {
		_ = ss.conn.SetReadDeadline(time.Time{})
	}
	ss.sleepMu.Unlock()
	if !ok {
		// Ended while asleep (killWaiting).
		ss.fatal(adminShutdown())
		asleep := false
		s.endSession(ss, &asleep)
		return
	}
	s.serveSession(ss)
}

// killWaiting swaps waitKilled in for a session waiting for its client (at
// rest, or, with all, in a transaction too): ok when it was waiting. The
// caller then wakes it (wakeWaiting), and the session tells its client
// FATAL 57P01 itself and ends. (A killer that wrote the FATAL itself
// raced the session: a session woken by its client's next message could
// close the connection before the FATAL was written, unread input and
// all, and the client saw a reset.)
func (ss *session) killWaiting(all bool) (ok, asleep bool) {
	ss.sleepMu.Lock()
	defer ss.sleepMu.Unlock()
	for _, st := range [...]int32{waitRest, waitNod, waitSleep, waitAsleep, waitTxn} {
		if (st != waitTxn || all) && ss.wait.CompareAndSwap(st, waitKilled) {
			return true, st == waitAsleep
		}
	}
	return false, false
}

// wakeWaiting wakes a session that killWaiting ended: its read, or, if it
// was asleep, the session itself in a goroutine of its own (unless the
// idler woke it already).
func (s *Server) wakeWaiting(ss *session, asleep bool) {
	if !asleep {
		_ = ss.conn.SetReadDeadline(time.Now())
		return
	}
	if s.idler.take(ss) {
		go s.resume(ss)
	}
}

// rawSocket reports whether c is a plain socket, whose readiness the
// idler can wait for.
func rawSocket(c any) bool {
	_, ok := c.(syscall.Conn)
	return ok
}
