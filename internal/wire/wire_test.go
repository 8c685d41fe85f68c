package wire

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"testing"
	"testing/iotest"
	"time"
)

func TestReaderFrames(t *testing.T) {
	var b []byte
	b = AppendFrame(b, 'Q', []byte("SELECT 1\x00"))
	big := bytes.Repeat([]byte("x"), 100)
	b = AppendFrame(b, 'd', big)
	b = AppendFrame(b, 'S', nil)
	r := NewReader(bytes.NewReader(b), 16) // smaller than the big frame
	want := []Frame{{'Q', []byte("SELECT 1\x00")}, {'d', big}, {'S', []byte{}}}
	for i, w := range want {
		f, err := r.Next()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if f.Type != w.Type || !bytes.Equal(f.Body, w.Body) {
			t.Errorf("frame %d = %q %q, want %q %q", i, f.Type, f.Body, w.Type, w.Body)
		}
	}
	if _, err := r.Next(); err == nil {
		t.Error("no error at end of stream")
	}
}

func TestReaderRejectsBadLength(t *testing.T) {
	for _, in := range [][]byte{{'Q', 0, 0, 0, 3}, {'Q', 0x7f, 0xff, 0xff, 0xff}, {'Q', 0, 0, 0, 9, 'a'}} {
		if _, err := NewReader(bytes.NewReader(in), 64).Next(); err == nil {
			t.Errorf("%v accepted", in)
		}
	}
}

// chunks is a stream that returns one chunk per Read, as a socket returns
// what has arrived, and records whether r held a full buffer and how much
// it asked for at each Read.
type chunks struct {
	in     [][]byte
	r      *Reader
	asked  []int
	holdAt []bool
}

func (c *chunks) Read(p []byte) (int, error) {
	c.asked = append(c.asked, len(p))
	if c.r != nil {
		c.holdAt = append(c.holdAt, c.r.holding())
	}
	if len(c.in) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.in[0])
	if n == len(c.in[0]) {
		c.in = c.in[1:]
	} else {
		c.in[0] = c.in[0][n:]
	}
	return n, nil
}

func readAll(t *testing.T, r *Reader) ([]Frame, error) {
	t.Helper()
	var out []Frame
	for {
		f, err := r.Next()
		if err != nil {
			return out, err
		}
		out = append(out, Frame{f.Type, append([]byte{}, f.Body...)})
	}
}

func TestPooledReaderGivesBufferBackWhileWaiting(t *testing.T) {
	q := AppendFrame(nil, 'Q', []byte("SELECT 1\x00"))
	big := AppendFrame(nil, 'd', bytes.Repeat([]byte("y"), 3000)) // more than idleBufSize, less than the buffer
	c := &chunks{in: [][]byte{q, q, big, append(append([]byte{}, q...), q...)}}
	r := NewPooledReader(c, 8192)
	c.r = r
	frames, err := readAll(t, r)
	if err != io.EOF {
		t.Fatalf("end: %v", err)
	}
	if len(frames) != 5 || frames[2].Type != 'd' || len(frames[2].Body) != 3000 || string(frames[4].Body) != "SELECT 1\x00" {
		t.Fatalf("frames: %d", len(frames))
	}
	// Every wait (a read after the socket was found empty) is made with the
	// small buffer and without a full one; the big message's rest is read
	// into the full buffer.
	want := []int{idleBufSize, idleBufSize, idleBufSize, 8192 - idleBufSize, idleBufSize, idleBufSize}
	if !slices.Equal(c.asked, want) {
		t.Errorf("reads asked for %v, want %v", c.asked, want)
	}
	wantHold := []bool{false, false, false, true, false, false}
	if !slices.Equal(c.holdAt, wantHold) {
		t.Errorf("holding a buffer at each read: %v, want %v", c.holdAt, wantHold)
	}
	if r.holding() {
		t.Error("still holding a buffer at EOF")
	}
}

func TestReadersAgree(t *testing.T) {
	var in []byte
	in = AppendFrame(in, 'Q', []byte("SELECT 1\x00"))
	in = AppendFrame(in, 'd', bytes.Repeat([]byte("z"), 700))
	in = AppendFrame(in, 'd', bytes.Repeat([]byte("w"), 20000)) // larger than the buffer
	in = AppendFrame(in, 'S', nil)
	for name, mk := range map[string]func(io.Reader) io.Reader{
		"whole": func(r io.Reader) io.Reader { return r },
		"byte":  iotest.OneByteReader,
		"half":  iotest.HalfReader,
		"eof":   iotest.DataErrReader,
	} {
		for _, pooled := range []bool{false, true} {
			var r *Reader
			if pooled {
				r = NewPooledReader(mk(bytes.NewReader(in)), 1024)
			} else {
				r = NewReader(mk(bytes.NewReader(in)), 1024)
			}
			frames, err := readAll(t, r)
			if err != io.EOF || len(frames) != 4 || len(frames[1].Body) != 700 || len(frames[2].Body) != 20000 ||
				frames[2].Body[19999] != 'w' || frames[3].Type != 'S' {
				t.Errorf("%s pooled=%v: %d frames, %v", name, pooled, len(frames), err)
			}
		}
	}
}

func TestReaderUnexpectedEOF(t *testing.T) {
	full := AppendFrame(nil, 'Q', []byte("SELECT 1\x00"))
	for _, pooled := range []bool{false, true} {
		mk := NewReader
		if pooled {
			mk = NewPooledReader
		}
		for _, cut := range []int{2, 7} { // inside the header, inside the body
			_, err := mk(bytes.NewReader(full[:cut]), 64).Next()
			if err != io.ErrUnexpectedEOF {
				t.Errorf("pooled=%v cut %d: %v", pooled, cut, err)
			}
		}
		if _, err := mk(bytes.NewReader(nil), 64).Next(); err != io.EOF {
			t.Errorf("pooled=%v empty: %v", pooled, err)
		}
		startup := []byte{0, 0, 0, 8, 4, 210, 22, 47}
		if b, err := mk(bytes.NewReader(startup), 64).ReadStartup(100); err != nil || len(b) != 4 {
			t.Errorf("pooled=%v startup: %v %v", pooled, b, err)
		}
		if _, err := mk(bytes.NewReader(startup[:2]), 64).ReadStartup(100); err != io.ErrUnexpectedEOF {
			t.Errorf("pooled=%v cut startup length: %v", pooled, err)
		}
		if _, err := mk(bytes.NewReader(startup[:6]), 64).ReadStartup(100); err != io.ErrUnexpectedEOF {
			t.Errorf("pooled=%v cut startup body: %v", pooled, err)
		}
	}
}

// loop is a stream that returns the same request on every Read, as a
// client that sends its next query once it got its answer.
type loop struct{ msg []byte }

func (l loop) Read(p []byte) (int, error) { return copy(p, l.msg), nil }

func TestPooledReaderNoAllocs(t *testing.T) {
	r := NewPooledReader(loop{AppendFrame(nil, 'Q', []byte("SELECT abalance FROM pgbench_accounts WHERE aid = 1\x00"))}, 8192)
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(1000, func() { _, _ = r.Next() }); n != 0 {
		t.Errorf("%v allocations per message", n)
	}
}

func BenchmarkReaderNext(b *testing.B) {
	msg := AppendFrame(nil, 'Q', []byte("SELECT abalance FROM pgbench_accounts WHERE aid = 1\x00"))
	for _, pooled := range []bool{false, true} {
		name := "fixed"
		r := NewReader(loop{msg}, 8192)
		if pooled {
			name, r = "pooled", NewPooledReader(loop{msg}, 8192)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := r.Next(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A header that claims a huge body costs memory only for the bytes that
// arrive; a large body that does arrive is read whole.
func TestReaderLargeBodyGrowsAsItArrives(t *testing.T) {
	claim := []byte{'d', 0x3f, 0xff, 0xff, 0xff} // 1 GiB - 1
	in := append(claim, bytes.Repeat([]byte("x"), 100)...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := NewReader(bytes.NewReader(in), 64).Next()
	runtime.ReadMemStats(&after)
	if err != io.ErrUnexpectedEOF {
		t.Errorf("truncated huge body: %v, want %v", err, io.ErrUnexpectedEOF)
	}
	if grown := after.TotalAlloc - before.TotalAlloc; grown > 1<<20 {
		t.Errorf("allocated %d bytes for a body of which 100 bytes arrived", grown)
	}
	big := bytes.Repeat([]byte("0123456789"), 50_000) // 500 kB: several growth steps
	f, err := NewReader(iotest.HalfReader(bytes.NewReader(AppendFrame(nil, 'd', big))), 64).Next()
	if err != nil || f.Type != 'd' || !bytes.Equal(f.Body, big) {
		t.Errorf("500 kB body: %v, %d bytes", err, len(f.Body))
	}
}

func TestSplitFrame(t *testing.T) {
	b := AppendFrame(AppendFrame(nil, 'C', []byte("SET\x00")), 'Z', []byte{'I'})
	typ, body, n, ok := SplitFrame(b)
	if !ok || typ != 'C' || string(body) != "SET\x00" || n != 9 {
		t.Fatalf("first frame: %c %q %d %v", typ, body, n, ok)
	}
	if typ, body, n, ok = SplitFrame(b[n:]); !ok || typ != 'Z' || string(body) != "I" || n != 6 {
		t.Fatalf("second frame: %c %q %d %v", typ, body, n, ok)
	}
	for _, partial := range [][]byte{nil, b[:4], b[:8], {'C', 0, 0, 0, 3}} {
		if _, _, _, ok := SplitFrame(partial); ok {
			t.Errorf("%q read as a complete frame", partial)
		}
	}
}

// Whole waits for a whole message without consuming it; a deadline that stops
// it midway leaves the part read buffered for Next.
func TestReaderWholeStoppedByDeadline(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	msg := AppendFrame(nil, 'A', []byte("\x00\x00\x00\x07chan\x00payload\x00"))
	r := NewReader(server, 64)
	go func() { _, _ = client.Write(msg[:7]) }()
	_ = server.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, _, err := r.Whole(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Whole on half a message = %v, want the deadline", err)
	}
	if r.Buffered() != 7 {
		t.Fatalf("buffered %d bytes after the deadline, want the 7 read", r.Buffered())
	}
	_ = server.SetReadDeadline(time.Time{})
	go func() { _, _ = client.Write(msg[7:]) }()
	typ, ok, err := r.Whole()
	if err != nil || !ok || typ != 'A' {
		t.Fatalf("Whole = %q %v %v, want 'A' whole", typ, ok, err)
	}
	f, err := r.Next()
	if err != nil || f.Type != 'A' || !bytes.Equal(f.Body, msg[5:]) {
		t.Fatalf("Next after Whole = %q %q %v", f.Type, f.Body, err)
	}
	// A message longer than the buffer is not waited for whole.
	big := AppendFrame(nil, 'D', bytes.Repeat([]byte("x"), 100))
	go func() { _, _ = client.Write(big) }()
	if typ, ok, err := r.Whole(); err != nil || ok || typ != 'D' {
		t.Fatalf("Whole of a long message = %q %v %v, want 'D' not whole", typ, ok, err)
	}
	if f, err := r.Next(); err != nil || len(f.Body) != 100 {
		t.Fatalf("Next of the long message = %d bytes, %v", len(f.Body), err)
	}
}

// TestWaitTimeoutDrop: a wait ended by a passed deadline with nothing read
// is taken back (TakeTimeout), the small buffer dropped, and the next wait
// reads the next message whole; a timeout with bytes read is not taken.
func TestWaitTimeoutDrop(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	r := NewPooledReader(a, 8192)
	_ = a.SetReadDeadline(time.Now().Add(-time.Second))
	r.Wait()
	if !r.TakeTimeout() {
		t.Fatal("TakeTimeout after a passed deadline with nothing read = false")
	}
	if r.TakeTimeout() {
		t.Fatal("TakeTimeout twice = true")
	}
	r.Drop()
	_ = a.SetReadDeadline(time.Time{})
	go func() { _, _ = b.Write(AppendFrame(nil, 'Q', []byte("SELECT 1\x00"))) }()
	r.Wait()
	if r.TakeTimeout() {
		t.Fatal("TakeTimeout after bytes arrived = true")
	}
	f, err := r.Next()
	if err != nil || f.Type != 'Q' || string(f.Body) != "SELECT 1\x00" {
		t.Fatalf("Next after Drop = %q %q, %v", f.Type, f.Body, err)
	}
	// Half a message, then the deadline: the error is Next's to report.
	go func() { _, _ = b.Write([]byte{'Q', 0, 0}) }()
	r.Wait()
	_ = a.SetReadDeadline(time.Now().Add(-time.Second))
	if r.TakeTimeout() {
		t.Fatal("TakeTimeout with part of a message buffered = true")
	}
	if _, err := r.Next(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Next after a deadline mid-message = %v", err)
	}
}

// TestWaitAfterFullRead: after a read that filled the buffer (the socket
// may hold more), Wait still waits for input itself, so a deadline that
// passes meanwhile ends the wait with nothing read rather than a later
// Next.
func TestWaitAfterFullRead(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	r := NewPooledReader(a, 16)
	msg := AppendFrame(nil, 'Q', []byte("SELECT 12;\x00")) // 16 bytes: the whole buffer
	go func() { _, _ = b.Write(msg) }()
	if f, err := r.Next(); err != nil || string(f.Body) != "SELECT 12;\x00" {
		t.Fatalf("Next = %q, %v", f.Body, err)
	}
	_ = a.SetReadDeadline(time.Now().Add(-time.Second))
	r.Wait()
	if !r.TakeTimeout() {
		t.Fatal("Wait after a full read did not end at the deadline with nothing read")
	}
	_ = a.SetReadDeadline(time.Time{})
	go func() { _, _ = b.Write(msg) }()
	r.Wait()
	if f, err := r.Next(); err != nil || string(f.Body) != "SELECT 12;\x00" {
		t.Fatalf("Next after the timeout = %q, %v", f.Body, err)
	}
}

// TestReady: Ready is true exactly when Next can answer without reading:
// the next message buffered whole, or its length invalid.
func TestReady(t *testing.T) {
	q := AppendFrame(nil, 'Q', []byte("SELECT 1\x00"))
	for _, tc := range []struct {
		in   []byte
		want bool
	}{
		{nil, false},
		{q[:4], false},
		{q[:5], false},
		{q[:len(q)-1], false},
		{q, true},
		{append(q[:len(q):len(q)], 'S'), true},
		{[]byte{'Q', 0, 0, 0, 3}, true},
	} {
		c, s := net.Pipe()
		r := NewReader(s, 64)
		go func() { _, _ = c.Write(tc.in); c.Close() }()
		if len(tc.in) > 0 {
			if err := r.fill(len(tc.in)); err != nil {
				t.Fatal(err)
			}
		}
		if got := r.Ready(); got != tc.want {
			t.Errorf("Ready with %q buffered = %v, want %v", tc.in, got, tc.want)
		}
		s.Close()
	}
}
