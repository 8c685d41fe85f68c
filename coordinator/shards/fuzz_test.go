package shards

import (
	"bytes"
	"errors"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/pgfleet/pgfleet/internal/pgerr"
)

// FuzzCopyRows feeds COPY FROM STDIN data (text or CSV, any options) to the
// row splitter, once whole and once cut into CopyData messages at arbitrary
// points, as a client may cut it. The splitter must not panic, and the cut
// must not matter: the same rows, values and verdict either way, since a
// row's shard must not depend on how the client chunked its data. Every row
// must be the client's bytes (a row is sent to a shard as is).
func FuzzCopyRows(f *testing.F) {
	add := func(data string, csv bool, delim, quote, esc byte, null string, header bool, field uint8) {
		f.Add([]byte(data), []byte{3, 1, 7}, csv, delim, quote, esc, null, header, field, uint8(0))
	}
	add("1\ta\n2\tb\n\\.\n", false, '\t', 0, 0, `\N`, false, 0)
	add("x\\ty\t1\n\\101\\x42\\\\\t2\n", false, '\t', 0, 0, `\N`, false, 1)
	add("1\ta\r\n2\tb\\\nc\r\n3\tc\\.\r\nignored\r\n", false, '\t', 0, 0, `\N`, false, 0)
	add("1\ta\r2\tb\r\\.\r", false, '\t', 0, 0, `\N`, false, 1)
	add("id,name\n1,\"a,\"\"b\"\"\nc\"\n2,\n3,\"\"\n", true, ',', '"', '"', "", true, 1)
	add("1,\"x\r\n\\.\r\ny\"\r\n\\.x,b\r\n\"2\",\"q\"\"\"\r\n\\.\r\n", true, ',', '"', '"', "", false, 0)
	add("1,\"a\\\"\n\\.\",b\n2,c", true, ',', '"', '\\', "", false, 1)
	add("1|NULL|x\n2||y\n", false, '|', 0, 0, "NULL", false, 1)
	add("1;'a;b';c\n", true, ';', '\'', '\'', "", false, 1)
	f.Fuzz(func(t *testing.T, data, cuts []byte, csv bool, delim, quote, esc byte, null string, header bool, field, ncols uint8) {
		fm := CopyFormat{CSV: csv, Delimiter: delim, Null: null, Header: header, Quote: quote, Escape: esc}
		var whole splitResult
		hangGuard(t, func() { whole = splitRows(fm, int(field%8), int(ncols%8), [][]byte{data}) })
		var chunks [][]byte
		rest := data
		for i := 0; len(rest) > 0; i++ {
			n := len(rest)
			if len(cuts) > 0 {
				n = min(n, 1+int(cuts[i%len(cuts)])%32)
			}
			chunks = append(chunks, rest[:n])
			rest = rest[n:]
		}
		if len(chunks) == 0 {
			chunks = [][]byte{nil}
		}
		var cut splitResult
		hangGuard(t, func() { cut = splitRows(fm, int(field%8), int(ncols%8), chunks) })
		if !reflect.DeepEqual(whole.rows, cut.rows) || whole.code != cut.code {
			t.Fatalf("format %+v, data %q\nwhole: %q %s\ncut into %d: %q %s", fm, data, whole.rows, whole.code, len(chunks), cut.rows, cut.code)
		}
		// Each row is the client's bytes where it left off; only a last row
		// before the \. marker gets a line end it did not have.
		pos := 0
		for i, r := range whole.raw {
			k := bytes.Index(data[pos:], r)
			if k < 0 && i == len(whole.raw)-1 {
				k = bytes.Index(data[pos:], bytes.TrimRight(r, "\r\n"))
			}
			if k < 0 {
				t.Fatalf("row %d %q is not in the data after byte %d: %q", i, r, pos, data)
			}
			pos += k + len(r)
			pos = min(pos, len(data))
		}
	})
}

type splitResult struct {
	rows []string // value, null flag and row bytes
	raw  [][]byte
	code string // the error's SQLSTATE, "" if none
}

func splitRows(f CopyFormat, field, ncols int, chunks [][]byte) splitResult {
	s := rowSplitter{f: f, field: field, ncols: ncols}
	var out splitResult
	total := 0
	for _, ch := range chunks {
		total += len(ch)
	}
	for i, ch := range chunks {
		s.pending = append(s.pending, ch...)
		for {
			r, v, isNull, ok, err := s.next(i == len(chunks)-1)
			if err != nil {
				var pe *pgerr.Error
				out.code = "?"
				if errors.As(err, &pe) {
					out.code = pe.Code + " " + pe.Message
				}
				return out
			}
			if !ok {
				break
			}
			if len(out.rows) > total+1 {
				out.code = "no progress: more rows than bytes"
				return out
			}
			nf := "v"
			if isNull {
				nf = "n"
			}
			out.rows = append(out.rows, nf+v+"|"+string(r))
			out.raw = append(out.raw, append([]byte(nil), r...))
		}
	}
	return out
}

// hangGuard runs fn and fails the test with every goroutine's stack if it
// has not returned within a few seconds (a fuzz worker that loops forever
// is otherwise only reported as slow).
func hangGuard(t *testing.T, fn func()) {
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		buf := make([]byte, 1<<20)
		panic("no progress in 5 s:\n" + string(buf[:runtime.Stack(buf, true)]))
	}
}
