package pooling

import (
	"testing"

	"github.com/pgfleet/pgfleet/internal/wire"
)

// TestAnswered: FlushAwait waits for an answer only to output that ends
// with a Sync or a simple Query, parsed whole.
func TestAnswered(t *testing.T) {
	frame := func(typ byte, body string) []byte { return wire.AppendFrame(nil, typ, []byte(body)) }
	cat := func(bs ...[]byte) []byte {
		var out []byte
		for _, b := range bs {
			out = append(out, b...)
		}
		return out
	}
	bind, exec, sync := frame('B', "\x00s1\x00\x00\x00\x00\x00\x00\x00"), frame('E', "\x00\x00\x00\x00\x00"), frame('S', "")
	query, flush := frame('Q', "SELECT 1\x00"), frame('H', "")
	for _, tc := range []struct {
		name string
		b    []byte
		want bool
	}{
		{"bind execute sync", cat(bind, exec, sync), true},
		{"simple query", query, true},
		{"query then sync", cat(query, sync), true},
		{"ends with a flush", cat(bind, exec, flush), false},
		{"ends with an execute", cat(bind, exec), false},
		{"sync then execute", cat(sync, exec), false},
		{"copy data", frame('d', "1\t2\n"), false},
		{"copy done", frame('c', ""), false},
		{"terminate", frame('X', ""), false},
		{"empty", nil, false},
		{"a partial frame after a sync", cat(sync, []byte{'S', 0, 0}), false},
		{"a length past the end", append([]byte{'S', 0, 0, 0, 9}, 0), false},
		{"a length under 4", []byte{'S', 0, 0, 0, 3}, false},
	} {
		if got := answered(tc.b); got != tc.want {
			t.Errorf("%s: answered = %v, want %v", tc.name, got, tc.want)
		}
	}
}
