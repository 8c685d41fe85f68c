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
