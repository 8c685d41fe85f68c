package wire

import (
	"bytes"
	"testing"
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

func FuzzReader(f *testing.F) {
	f.Add(AppendFrame(nil, 'Q', []byte("SELECT 1\x00")))
	f.Add([]byte{'P', 0, 0, 0, 4, 'S', 0, 0, 0, 4})
	f.Add([]byte{0, 0, 0, 8, 4, 210, 22, 47})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := NewReader(bytes.NewReader(in), 32)
		for i := 0; i < 100; i++ {
			f, err := r.Next()
			if err != nil {
				return
			}
			if len(f.Body) > len(in) {
				t.Fatalf("body longer than input")
			}
		}
		_, _ = NewReader(bytes.NewReader(in), 32).ReadStartup(10000)
	})
}
