package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

// Fuzz targets for the frame reader (run with scripts/fuzz): every byte a
// client sends passes through Next or ReadStartup first. They compare the
// reader, with every buffer size and however the stream is cut into reads,
// against a direct reading of the protocol's framing.

// chunkReader returns data in reads of sizes drawn from cuts, so that
// frames and headers straddle reads at every point.
type chunkReader struct {
	data []byte
	cuts []byte
	k    int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := len(c.data)
	if len(c.cuts) > 0 {
		n = 1 + int(c.cuts[c.k%len(c.cuts)])*7
		c.k++
	}
	n = min(n, len(p), len(c.data))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

type refFrame struct {
	typ  byte
	body []byte
}

// refFrames reads typed frames from data as the protocol defines them:
// type, a length that counts itself, the body. It returns the frames and
// how reading ends: "eof" at a frame boundary, "short" midway, "length" for
// a length out of bounds.
func refFrames(data []byte) ([]refFrame, string) {
	var out []refFrame
	for {
		if len(data) == 0 {
			return out, "eof"
		}
		if len(data) < 5 {
			return out, "short"
		}
		n := int(binary.BigEndian.Uint32(data[1:5]))
		if n < 4 || n-4 > MaxMessageLen {
			return out, "length"
		}
		if len(data) < 1+n {
			return out, "short"
		}
		out = append(out, refFrame{data[0], data[5 : 1+n]})
		data = data[1+n:]
	}
}

func FuzzReaderNext(f *testing.F) {
	f.Add([]byte("Q\x00\x00\x00\x0dSELECT 1;\x00X\x00\x00\x00\x04"), []byte{3}, uint8(0), false)
	f.Add([]byte("P\x00\x00\x00\x10\x00SELECT $1\x00\x00\x00B\x00\x00\x00\x0c\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00S\x00\x00\x00\x04"), []byte{0, 1, 2}, uint8(5), true)
	f.Add([]byte("d\x00\x00\x02\x04"+string(bytes.Repeat([]byte("x"), 512))), []byte{9, 200}, uint8(0), true)
	f.Add([]byte("Q\xff\xff\xff\xff"), []byte(nil), uint8(1), false)
	f.Add([]byte("Q\x00\x00\x00\x03"), []byte(nil), uint8(1), false)
	f.Add([]byte("Q\x00\x00"), []byte(nil), uint8(1), true)
	f.Add([]byte{'P', 0, 0, 0, 4, 'S', 0, 0, 0, 4}, []byte{0}, uint8(10), true)
	f.Fuzz(func(t *testing.T, data, cuts []byte, size uint8, pooled bool) {
		want, end := refFrames(data)
		src := &chunkReader{data: data, cuts: cuts}
		var r *Reader
		if pooled {
			r = NewPooledReader(src, int(size)*3)
		} else {
			r = NewReader(src, int(size)*3)
		}
		for i := 0; ; i++ {
			fr, err := r.Next()
			if err != nil {
				if i != len(want) {
					t.Fatalf("frame %d: %v; the stream holds %d frames", i, err, len(want))
				}
				var got string
				switch {
				case err == io.EOF:
					got = "eof"
				case errors.Is(err, io.ErrUnexpectedEOF):
					got = "short"
				default:
					got = "length"
				}
				if got != end {
					t.Fatalf("after %d frames: %v, want the stream to end as %s", i, err, end)
				}
				return
			}
			if i >= len(want) {
				t.Fatalf("frame %d (%q, %d bytes) read past the %d frames of the stream", i, fr.Type, len(fr.Body), len(want))
			}
			if fr.Type != want[i].typ || !bytes.Equal(fr.Body, want[i].body) {
				t.Fatalf("frame %d: %q %q, want %q %q", i, fr.Type, fr.Body, want[i].typ, want[i].body)
			}
			if r.Buffered() < 0 {
				t.Fatalf("Buffered() = %d", r.Buffered())
			}
		}
	})
}

func FuzzReadStartup(f *testing.F) {
	f.Add([]byte("\x00\x00\x00\x08\x04\xd2\x16\x2f\x00\x00\x00\x29\x00\x03\x00\x00user\x00alice\x00database\x00db\x00\x00"), []byte{1})
	f.Add([]byte("\x00\x00\x00\x10\x04\xd2\x16\x2e\x00\x00\x00\x01\x00\x00\x00\x02"), []byte(nil))
	f.Add([]byte("\xff\xff\xff\xff"), []byte(nil))
	f.Add([]byte("\x00\x00\x00\x07abc"), []byte{0})
	f.Fuzz(func(t *testing.T, data, cuts []byte) {
		const maxLen = 10000
		src := &chunkReader{data: data, cuts: cuts}
		r := NewPooledReader(src, 8192)
		rest := data
		for {
			body, err := r.ReadStartup(maxLen)
			// The reference: a length word that counts itself, 8 to maxLen.
			switch {
			case len(rest) == 0:
				if err != io.EOF {
					t.Fatalf("at the end of the stream: %v, want EOF", err)
				}
				return
			case len(rest) < 4:
				if !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("in a partial length word: %v", err)
				}
				return
			}
			n := int(int32(binary.BigEndian.Uint32(rest)))
			switch {
			case n < 8 || n > maxLen:
				if err == nil || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("length %d accepted: %v", n, err)
				}
				return
			case len(rest) < n:
				if !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("packet of %d bytes with %d sent: %v", n, len(rest), err)
				}
				return
			}
			if err != nil || !bytes.Equal(body, rest[4:n]) {
				t.Fatalf("packet %q, %v; want %q", body, err, rest[4:n])
			}
			rest = rest[n:]
		}
	})
}

func FuzzCString(f *testing.F) {
	f.Add([]byte("name\x00rest"))
	f.Add([]byte("no terminator"))
	f.Add([]byte("\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, rest, ok := CString(b)
		n, rest2, ok2 := CBytes(b)
		i := bytes.IndexByte(b, 0)
		if ok != (i >= 0) || ok2 != ok {
			t.Fatalf("CString(%q) ok = %v, CBytes ok = %v", b, ok, ok2)
		}
		if ok && (s != string(b[:i]) || string(n) != s || !bytes.Equal(rest, b[i+1:]) || !bytes.Equal(rest2, rest)) {
			t.Fatalf("CString(%q) = %q, %q; CBytes = %q, %q", b, s, rest, n, rest2)
		}
		// AppendFrame and Next round-trip.
		typ := byte('Q')
		if len(b) > 0 {
			typ = b[0]
		}
		r := NewReader(bytes.NewReader(AppendFrame(nil, typ, b)), 64)
		fr, err := r.Next()
		if err != nil || fr.Type != typ || !bytes.Equal(fr.Body, b) {
			t.Fatalf("AppendFrame/Next: %q %q %v", fr.Type, fr.Body, err)
		}
	})
}
