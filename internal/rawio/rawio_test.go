package rawio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

func pair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		done <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-done
	t.Cleanup(func() { a.Close(); b.Close() })
	return a.(*net.TCPConn), b.(*net.TCPConn)
}

// TestConn: what one side writes raw the other reads raw, whole, however
// large (the writer waits for room, the reader for input); a read
// deadline ends a wait as the net.Conn's own does; the peer's close is
// io.EOF; a closed connection's read fails; only TCP is taken.
func TestConn(t *testing.T) {
	a, b := pair(t)
	w, r := New(a), New(b)
	if w == nil || r == nil {
		t.Fatal("New of a TCP connection: nil")
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB: more than the socket buffers
	go func() {
		if n, err := w.Write(big); n != len(big) || err != nil {
			t.Errorf("Write: %d, %v", n, err)
		}
	}()
	got := make([]byte, len(big))
	if _, err := io.ReadFull(r, got); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("ReadFull: %v (equal %v)", err, bytes.Equal(got, big))
	}

	_ = b.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	start := time.Now()
	var ne net.Error
	if _, err := r.Read(got[:1]); !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("Read past the deadline: %v, want a timeout", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the deadline ended the read after %v", d)
	}
	_ = b.SetReadDeadline(time.Time{})

	a.Close()
	if _, err := r.Read(got[:1]); err != io.EOF {
		t.Errorf("Read after the peer closed: %v, want EOF", err)
	}
	b.Close()
	if _, err := r.Read(got[:1]); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Read of a closed connection: %v, want net.ErrClosed", err)
	}
	if New(nil) != nil {
		t.Error("New(nil) is not nil")
	}
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	if New(c1) != nil {
		t.Error("New of a pipe is not nil")
	}
}

// TestNoAllocs: a read and a write allocate nothing.
func TestNoAllocs(t *testing.T) {
	a, b := pair(t)
	w, r := New(a), New(b)
	msg, buf := []byte("hello"), make([]byte, 64)
	if n := testing.AllocsPerRun(200, func() {
		_, _ = w.Write(msg)
		_, _ = io.ReadFull(r, buf[:len(msg)])
	}); n != 0 {
		t.Errorf("%v allocations per write and read, want 0", n)
	}
}

// TestWriteAwait: WriteAwait returns once the peer has answered, with the
// answer left to read; bytes already waiting do not end the wait early,
// and a write larger than the socket buffers still completes.
func TestWriteAwait(t *testing.T) {
	a, b := pair(t)
	w, peer := New(a), New(b)

	// The peer answers 50 ms after the request: WriteAwait waits for it.
	go func() {
		req := make([]byte, 5)
		if _, err := io.ReadFull(peer, req); err != nil {
			t.Errorf("peer read: %v", err)
			return
		}
		time.Sleep(50 * time.Millisecond)
		_, _ = peer.Write([]byte("answer:" + string(req)))
	}()
	start := time.Now()
	if n, err := w.WriteAwait([]byte("hello")); n != 5 || err != nil {
		t.Fatalf("WriteAwait: %d, %v", n, err)
	}
	if d := time.Since(start); d < 40*time.Millisecond {
		t.Errorf("WriteAwait returned after %v, before the answer", d)
	}
	got := make([]byte, len("answer:hello"))
	if _, err := io.ReadFull(w, got); err != nil || string(got) != "answer:hello" {
		t.Fatalf("read after WriteAwait: %q, %v", got, err)
	}

	// Bytes waiting before the call (an unread notice) are read with the
	// answer; the wait still lasts until the answer comes.
	if _, err := peer.Write([]byte("early;")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // the early bytes are on a's socket
	go func() {
		req := make([]byte, 3)
		if _, err := io.ReadFull(peer, req); err != nil {
			t.Errorf("peer read: %v", err)
			return
		}
		time.Sleep(30 * time.Millisecond)
		_, _ = peer.Write([]byte("late"))
	}()
	if n, err := w.WriteAwait([]byte("two")); n != 3 || err != nil {
		t.Fatalf("WriteAwait: %d, %v", n, err)
	}
	got = make([]byte, len("early;late"))
	if _, err := io.ReadFull(w, got); err != nil || string(got) != "early;late" {
		t.Fatalf("read after WriteAwait: %q, %v", got, err)
	}

	// More than the socket buffers hold: written in parts, then answered.
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18)
	go func() {
		in := make([]byte, len(big))
		if _, err := io.ReadFull(peer, in); err != nil || !bytes.Equal(in, big) {
			t.Errorf("peer read of the large write: %v", err)
			return
		}
		_, _ = peer.Write([]byte("ok"))
	}()
	if n, err := w.WriteAwait(big); n != len(big) || err != nil {
		t.Fatalf("WriteAwait of %d bytes: %d, %v", len(big), n, err)
	}
	got = make([]byte, 2)
	if _, err := io.ReadFull(w, got); err != nil || string(got) != "ok" {
		t.Fatalf("read after the large WriteAwait: %q, %v", got, err)
	}

	// No answer: the read deadline ends the wait, after the write.
	_ = a.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, err := w.WriteAwait([]byte("x")); n != 1 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("WriteAwait with no answer: %d, %v; want 1 and a timeout", n, err)
	}
	_ = a.SetReadDeadline(time.Time{})
	if _, err := io.ReadFull(peer, got[:1]); err != nil || got[0] != 'x' {
		t.Errorf("the peer did not get the write: %q, %v", got[:1], err)
	}

	// The peer goes away unanswering: the wait ends with it (the write
	// itself may succeed or be reset).
	b.Close()
	ended := make(chan struct{})
	go func() {
		_, _ = w.WriteAwait([]byte("y"))
		close(ended)
	}()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("WriteAwait to a closed peer still waits after 5 s")
	}
	if _, err := w.Read(got); err == nil {
		t.Error("Read after the peer closed: no error")
	}
}

// TestWriteAwaitNoAllocs: a WriteAwait and the read after it allocate
// nothing.
func TestWriteAwaitNoAllocs(t *testing.T) {
	a, b := pair(t)
	w, peer := New(a), New(b)
	msg, buf := []byte("hello"), make([]byte, 64)
	done := make(chan struct{})
	go func() { // an echo
		defer close(done)
		in := make([]byte, 5)
		for {
			if _, err := io.ReadFull(peer, in); err != nil {
				return
			}
			if _, err := peer.Write(in); err != nil {
				return
			}
		}
	}()
	if n := testing.AllocsPerRun(200, func() {
		_, _ = w.WriteAwait(msg)
		_, _ = io.ReadFull(w, buf[:len(msg)])
	}); n != 0 {
		t.Errorf("%v allocations per WriteAwait and read, want 0", n)
	}
	a.Close()
	<-done
}
