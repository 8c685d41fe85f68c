// Package wire reads and writes PostgreSQL protocol frames as raw bytes, so
// that the relay can forward a message without decoding and re-encoding it.
// Messages that pgfleet must look inside are decoded with pgx's pgproto3
// types; this package only knows frame boundaries.
package wire

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
)

// MaxMessageLen bounds one message body; PostgreSQL's own limit for most
// messages is 1 GB.
const MaxMessageLen = 1 << 30

// Frame is one message: its type byte and body (without the length word).
// Body aliases the reader's buffer when it fits and is valid only until the
// next read.
type Frame struct {
	Type byte
	Body []byte
}

// Reader reads frames from a buffered stream.
type Reader struct {
	br      *bufio.Reader
	scratch []byte
}

// NewReader wraps r with a buffer of size bytes.
func NewReader(r io.Reader, size int) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, size)}
}

// Buffered reports how many bytes are already read from the socket and not yet
// consumed, so a caller can tell whether another message is ready without
// blocking.
func (r *Reader) Buffered() int { return r.br.Buffered() }

// Next returns the next frame. The body is valid until the next call.
func (r *Reader) Next() (Frame, error) {
	hdr, err := r.br.Peek(5)
	if err != nil {
		if err == io.EOF && len(hdr) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, err
	}
	typ := hdr[0]
	n := int(binary.BigEndian.Uint32(hdr[1:5]))
	if n < 4 || n-4 > MaxMessageLen {
		return Frame{}, fmt.Errorf("invalid message length %d for message type %q", n, typ)
	}
	n -= 4
	if 5+n <= r.br.Size() {
		buf, err := r.br.Peek(5 + n)
		if err != nil {
			return Frame{}, unexpected(err)
		}
		body := buf[5:]
		_, _ = r.br.Discard(5 + n)
		// Discard does not move the bytes: body still points at them until
		// the next fill, which only happens on the next call.
		return Frame{Type: typ, Body: body}, nil
	}
	_, _ = r.br.Discard(5)
	if cap(r.scratch) < n {
		r.scratch = make([]byte, n)
	}
	body := r.scratch[:n]
	if _, err := io.ReadFull(r.br, body); err != nil {
		return Frame{}, unexpected(err)
	}
	if n > 1<<20 {
		r.scratch = nil // do not keep huge buffers alive between messages
	}
	return Frame{Type: typ, Body: body}, nil
}

// ReadStartup reads an untyped startup-phase packet (length word, then body).
func (r *Reader) ReadStartup(maxLen int) ([]byte, error) {
	var lb [4]byte
	if _, err := io.ReadFull(r.br, lb[:]); err != nil {
		return nil, err
	}
	n := int(int32(binary.BigEndian.Uint32(lb[:])))
	if n < 8 || n > maxLen {
		return nil, fmt.Errorf("invalid length of startup packet: %d", n)
	}
	body := make([]byte, n-4)
	if _, err := io.ReadFull(r.br, body); err != nil {
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
func (r *Reader) Peek1() ([]byte, error) { return r.br.Peek(1) }

// CBytes is CString without the string copy: the name aliases b.
func CBytes(b []byte) (name, rest []byte, ok bool) {
	for i, c := range b {
		if c == 0 {
			return b[:i], b[i+1:], true
		}
	}
	return nil, nil, false
}
