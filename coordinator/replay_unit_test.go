package coordinator

import (
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/internal/wire"
)

// TestOnlyStaleError: a request runs again only when its whole answer is
// acknowledgements, one 40001 and the ReadyForQuery.
func TestOnlyStaleError(t *testing.T) {
	errFrame := func(code string) []byte {
		b, _ := (&pgproto3.ErrorResponse{Severity: "ERROR", Code: code, Message: `shard "t_102010"` + staleShardSuffix}).Encode(nil)
		return b
	}
	frame := func(typ byte, body string) []byte { return wire.AppendFrame(nil, typ, []byte(body)) }
	cat := func(parts ...[]byte) []byte {
		var out []byte
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	ready := frame('Z', "I")
	for _, tc := range []struct {
		name string
		out  []byte
		want bool
	}{
		{"query", cat(errFrame("40001"), ready), true},
		{"extended", cat(frame('1', ""), frame('2', ""), errFrame("40001"), ready), true},
		{"described", cat(frame('1', ""), frame('t', "\x00\x00"), frame('n', ""), errFrame("40001"), ready), true},
		{"settings reported", cat(frame('S', "application_name\x00psql\x00"), errFrame("40001"), ready), true},
		{"catalog moved", cat(func() []byte {
			b, _ := (&pgproto3.ErrorResponse{Severity: "ERROR", Code: "40001", Message: errCatalogMoved.Message}).Encode(nil)
			return b
		}(), ready), true},
		{"another error", cat(errFrame("42P01"), ready), false},
		{"another 40001", cat(func() []byte {
			b, _ := (&pgproto3.ErrorResponse{Severity: "ERROR", Code: "40001", Message: "could not serialize access due to concurrent update"}).Encode(nil)
			return b
		}(), ready), false},
		{"a row first", cat(frame('D', "\x00\x00"), errFrame("40001"), ready), false},
		{"a command first", cat(frame('C', "SET\x00"), errFrame("40001"), ready), false},
		{"a notice", cat(frame('N', "Mx\x00\x00"), errFrame("40001"), ready), false},
		{"two errors", cat(errFrame("40001"), errFrame("40001"), ready), false},
		{"no ready", errFrame("40001"), false},
		{"after ready", cat(errFrame("40001"), ready, frame('1', "")), false},
	} {
		if got := onlyStaleError(tc.out); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
