package metadata

import (
	"encoding/binary"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/pgfleet/pgfleet/internal/pgerr"
)

// The expected values below were computed by PostgreSQL 15.18 (x86_64), e.g.
// SELECT hashint8(-1), hashtext('abc'), uuid_hash('...'::uuid).

func TestHashInt8Known(t *testing.T) {
	for _, tc := range []struct {
		v    int64
		want int32
	}{
		{0, -272711505},
		{-1, 385747274},
		{1, -1905060026},
		{math.MaxInt64, -1524351049},
		{math.MinInt64, -96758253},
		{math.MaxInt32, -96758253},
		{math.MaxInt32 + 1, -1524351049},
		{math.MinInt32, -1524351049},
		{math.MinInt32 - 1, -96758253},
		{1 << 32, -1905060026},
		{1234567890123, 952082253},
	} {
		if got := HashInt8(tc.v); got != tc.want {
			t.Errorf("HashInt8(%d) = %d, want %d", tc.v, got, tc.want)
		}
	}
}

func TestHashInt4Known(t *testing.T) {
	for _, tc := range []struct {
		v    int32
		want int32
	}{
		{0, -272711505},
		{-1, 385747274},
		{1, -1905060026},
		{math.MaxInt32, -96758253},
		{math.MinInt32, -1524351049},
		{42, 1509752520},
		{100000, 1001413960},
	} {
		if got := HashInt4(tc.v); got != tc.want {
			t.Errorf("HashInt4(%d) = %d, want %d", tc.v, got, tc.want)
		}
		// An int8 holding an int4's value hashes the same (hashint8's folding).
		if got := HashInt8(int64(tc.v)); got != tc.want {
			t.Errorf("HashInt8(%d) = %d, want %d as HashInt4", tc.v, got, tc.want)
		}
	}
}

func TestHashInt2Known(t *testing.T) {
	for _, tc := range []struct {
		v    int16
		want int32
	}{
		{0, -272711505},
		{-1, 385747274},
		{1, -1905060026},
		{math.MaxInt16, 1289782602},
		{math.MinInt16, 193646934},
		{42, 1509752520},
	} {
		if got := HashInt2(tc.v); got != tc.want {
			t.Errorf("HashInt2(%d) = %d, want %d", tc.v, got, tc.want)
		}
	}
}

func TestHashTextKnown(t *testing.T) {
	for _, tc := range []struct {
		s      string
		want   int32
		bpchar int32 // hashbpchar(s::bpchar)
	}{
		{"", -1477818771, -1477818771},
		{"a", 1075015857, 1075015857},
		{"ab", 1718550461, 1718550461},
		{"abc", -785388649, -785388649},
		{"abcd", -393934804, -393934804},
		{"hello world", 1021725223, 1021725223},         // 11 bytes: the longest tail
		{"hello world!!", -2118108552, -2118108552},     // 13 bytes: one block and one byte
		{"héllo wörld ✓ 日本語 🐘", -282149061, -282149061}, // 19 characters, 32 bytes
		{strings.Repeat("0123456789", 10), 37821613, 37821613},
		{"abc   ", 1046608, -785388649}, // bpchar ignores trailing spaces
	} {
		if got := HashText([]byte(tc.s)); got != tc.want {
			t.Errorf("HashText(%q) = %d, want %d", tc.s, got, tc.want)
		}
		if got := HashTextString(tc.s); got != tc.want {
			t.Errorf("HashTextString(%q) = %d, want %d", tc.s, got, tc.want)
		}
		if got := HashBPChar([]byte(tc.s)); got != tc.bpchar {
			t.Errorf("HashBPChar(%q) = %d, want %d", tc.s, got, tc.bpchar)
		}
	}
}

// TestHashTextUnaligned checks that where the key starts in memory does not
// matter (PostgreSQL has separate paths for aligned and unaligned keys).
func TestHashTextUnaligned(t *testing.T) {
	s := strings.Repeat("0123456789", 10)
	buf := make([]byte, len(s)+8)
	for off := 0; off < 8; off++ {
		copy(buf[off:], s)
		if got := HashText(buf[off : off+len(s)]); got != 37821613 {
			t.Errorf("offset %d: HashText = %d, want 37821613", off, got)
		}
	}
}

var knownUUIDs = []struct {
	s    string
	u    [16]byte
	want int32
}{
	{"00000000-0000-0000-0000-000000000000", [16]byte{}, 1353656403},
	{"ffffffff-ffff-ffff-ffff-ffffffffffff", [16]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, -682383255},
	{"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", [16]byte{0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8,
		0xbb, 0x6d, 0x6b, 0xb9, 0xbd, 0x38, 0x0a, 0x11}, 1154666245},
	{"123e4567-e89b-12d3-a456-426614174000", [16]byte{0x12, 0x3e, 0x45, 0x67, 0xe8, 0x9b, 0x12, 0xd3,
		0xa4, 0x56, 0x42, 0x66, 0x14, 0x17, 0x40, 0x00}, 1944658063},
}

func TestHashUUIDKnown(t *testing.T) {
	for _, tc := range knownUUIDs {
		if got := HashUUID(tc.u); got != tc.want {
			t.Errorf("HashUUID(%s) = %d, want %d", tc.s, got, tc.want)
		}
		u, err := ParseUUID(tc.s)
		if err != nil || u != tc.u {
			t.Errorf("ParseUUID(%s) = %x, %v", tc.s, u, err)
		}
	}
}

func TestHashValue(t *testing.T) {
	const a0 = 1154666245 // uuid_hash('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11')
	for _, tc := range []struct {
		typ, text string
		want      int32
	}{
		{"int8", "0", -272711505},
		{"bigint", "-1", 385747274},
		{"int8", "  +1  ", -1905060026},
		{"int8", "\t\n\v\f\r-1\r\n", 385747274},
		{"int8", "-0", -272711505},
		{"int8", "9223372036854775807", -1524351049},
		{"int8", "-9223372036854775808", -96758253},
		{"int8", "0009223372036854775807", -1524351049},
		{"int4", "42", 1509752520},
		{"integer", "2147483647", -96758253},
		{"int", "-2147483648", -1524351049},
		{"int2", "32767", 1289782602},
		{"smallint", " -32768", 193646934},
		{"int2", "00000000000000000000000032767", 1289782602},
		{"text", "", -1477818771},
		{"text", "hello world!!", -2118108552},
		{"varchar", "abc", -785388649},
		{"character varying", "abc   ", 1046608},
		{"bpchar", "abc   ", -785388649},
		{"character", "abc", -785388649},
		{"uuid", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", a0},
		{"uuid", "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11", a0},
		{"uuid", "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}", a0},
		{"uuid", "a0eebc999c0b4ef8bb6d6bb9bd380a11", a0},
		{"uuid", "{a0eebc999c0b4ef8bb6d6bb9bd380a11}", a0},
		{"uuid", "a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a11", a0},
		{"uuid", "a0eebc99-9c0b4ef8-bb6d6bb9-bd380a11", a0},
		// Type names as format_type and catalogs spell them.
		{"pg_catalog.int8", "1", -1905060026},
		{"character varying(20)", "abc", -785388649},
		{"character(5)", "abc", -785388649},
		{"BIGINT", "1", -1905060026},
		{" Int4 ", "42", 1509752520},
	} {
		got, err := HashValue(tc.typ, tc.text)
		if err != nil || got != tc.want {
			t.Errorf("HashValue(%q, %q) = %d, %v; want %d", tc.typ, tc.text, got, err, tc.want)
		}
	}
}

func TestHashValueErrors(t *testing.T) {
	const syntax, rng = pgerr.InvalidTextRepresentation, pgerr.NumericValueOutOfRange
	for _, tc := range []struct {
		typ, text, code, msg string
	}{
		{"int8", "", syntax, `invalid input syntax for type bigint: ""`},
		{"int8", " ", syntax, `invalid input syntax for type bigint: " "`},
		{"int8", "-", syntax, `invalid input syntax for type bigint: "-"`},
		{"int8", "+-5", syntax, `invalid input syntax for type bigint: "+-5"`},
		{"int8", "- 5", syntax, `invalid input syntax for type bigint: "- 5"`},
		{"int8", "12 3", syntax, `invalid input syntax for type bigint: "12 3"`},
		{"int8", "1.0", syntax, `invalid input syntax for type bigint: "1.0"`},
		{"int8", "1e3", syntax, `invalid input syntax for type bigint: "1e3"`},
		{"int8", "0x10", syntax, `invalid input syntax for type bigint: "0x10"`},
		{"int8", "1_000", syntax, `invalid input syntax for type bigint: "1_000"`},
		{"int8", "１２", syntax, `invalid input syntax for type bigint: "１２"`},
		{"int8", "7\u00a0", syntax, "invalid input syntax for type bigint: \"7\u00a0\""},
		{"int8", "9223372036854775808", rng, `value "9223372036854775808" is out of range for type bigint`},
		{"int8", "-9223372036854775809", rng, `value "-9223372036854775809" is out of range for type bigint`},
		{"int8", "99999999999999999999x", rng, `value "99999999999999999999x" is out of range for type bigint`},
		{"int4", "2147483648", rng, `value "2147483648" is out of range for type integer`},
		{"int4", "-2147483649", rng, `value "-2147483649" is out of range for type integer`},
		{"int4", "abc", syntax, `invalid input syntax for type integer: "abc"`},
		{"int2", "32768", rng, `value "32768" is out of range for type smallint`},
		{"int2", "-32769", rng, `value "-32769" is out of range for type smallint`},
		{"int2", "1x", syntax, `invalid input syntax for type smallint: "1x"`},
		{"uuid", "", syntax, `invalid input syntax for type uuid: ""`},
		{"uuid", " a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", syntax, ""},
		{"uuid", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11 ", syntax, ""},
		{"uuid", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11-", syntax, ""},
		{"uuid", "-a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", syntax, ""},
		{"uuid", "a0eebc99--9c0b-4ef8-bb6d-6bb9bd380a11", syntax, ""},
		{"uuid", "a0e-ebc99-9c0b-4ef8-bb6d-6bb9bd380a11", syntax, ""},
		{"uuid", "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", syntax, ""},
		{"uuid", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}", syntax, ""},
		{"uuid", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1", syntax, ""},
		{"uuid", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a111", syntax, ""},
		{"uuid", "g0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", syntax,
			`invalid input syntax for type uuid: "g0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"`},
		{"float8", "1", pgerr.FeatureNotSupported, "pgfleet cannot hash values of type float8"},
		{"char", "a", pgerr.FeatureNotSupported, `pgfleet cannot hash values of type char`},
	} {
		_, err := HashValue(tc.typ, tc.text)
		var pe *pgerr.Error
		if !errors.As(err, &pe) {
			t.Errorf("HashValue(%q, %q): error %v, want a *pgerr.Error", tc.typ, tc.text, err)
			continue
		}
		if pe.Code != tc.code || (tc.msg != "" && pe.Message != tc.msg) {
			t.Errorf("HashValue(%q, %q): %s %q, want %s %q", tc.typ, tc.text, pe.Code, pe.Message, tc.code, tc.msg)
		}
	}
}

func TestHashBinary(t *testing.T) {
	be := binary.BigEndian
	for _, tc := range []struct {
		typ  string
		b    []byte
		want int32
	}{
		{"int2", be.AppendUint16(nil, uint16(0xffff)), 385747274},
		{"int2", be.AppendUint16(nil, 32767), 1289782602},
		{"int4", be.AppendUint32(nil, 42), 1509752520},
		{"int4", be.AppendUint32(nil, 1<<31), -1524351049},
		{"int8", be.AppendUint64(nil, math.MaxInt64), -1524351049},
		{"int8", be.AppendUint64(nil, 1<<63), -96758253},
		{"int8", be.AppendUint64(nil, 1234567890123), 952082253},
		{"text", []byte("hello world!!"), -2118108552},
		{"text", nil, -1477818771},
		{"varchar", []byte("abc   "), 1046608},
		{"bpchar", []byte("abc   "), -785388649},
		{"uuid", knownUUIDs[2].u[:], knownUUIDs[2].want},
	} {
		got, err := HashBinary(tc.typ, tc.b)
		if err != nil || got != tc.want {
			t.Errorf("HashBinary(%q, %x) = %d, %v; want %d", tc.typ, tc.b, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		typ string
		n   int
	}{{"int2", 4}, {"int4", 2}, {"int4", 8}, {"int8", 4}, {"int8", 0}, {"uuid", 15}, {"uuid", 17}} {
		_, err := HashBinary(tc.typ, make([]byte, tc.n))
		var pe *pgerr.Error
		if !errors.As(err, &pe) || pe.Code != invalidBinaryRepresentation {
			t.Errorf("HashBinary(%q, %d bytes): %v, want SQLSTATE 22P03", tc.typ, tc.n, err)
		}
	}
	if _, err := HashBinary("numeric", []byte{0, 0}); err == nil {
		t.Error("HashBinary(numeric): no error")
	}
}

// TestHashNoAllocs guards the hot paths: hashing must not allocate.
func TestHashNoAllocs(t *testing.T) {
	text := []byte(strings.Repeat("x", 100))
	u := knownUUIDs[2].u
	bin := binary.BigEndian.AppendUint64(nil, 12345)
	var sink int32
	for name, f := range map[string]func(){
		"HashInt2":  func() { sink += HashInt2(int16(sink)) },
		"HashInt4":  func() { sink += HashInt4(sink) },
		"HashInt8":  func() { sink += HashInt8(int64(sink)) },
		"HashText":  func() { sink += HashText(text) },
		"HashUUID":  func() { sink += HashUUID(u) },
		"HashValue": func() { h, _ := HashValue("int8", "-1234567890"); sink += h },
		"HashValue uuid": func() {
			h, _ := HashValue("uuid", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")
			sink += h
		},
		"HashValue text": func() { h, _ := HashValue("text", "hello world"); sink += h },
		"HashBinary":     func() { h, _ := HashBinary("int8", bin); sink += h },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocations per call, want 0", name, n)
		}
	}
	_ = sink
}

var benchSink int32

func BenchmarkHashInt8(b *testing.B) {
	b.ReportAllocs()
	var h int32
	for i := 0; i < b.N; i++ {
		h += HashInt8(int64(i) * 0x5e3779b97f4a7c15)
	}
	benchSink = h
}

func BenchmarkHashInt4(b *testing.B) {
	b.ReportAllocs()
	var h int32
	for i := 0; i < b.N; i++ {
		h += HashInt4(int32(i))
	}
	benchSink = h
}

func BenchmarkHashText(b *testing.B) {
	for _, n := range []int{8, 36, 100} {
		s := []byte(strings.Repeat("abcdefghij", 10)[:n])
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(n))
			var h int32
			for i := 0; i < b.N; i++ {
				h += HashText(s)
			}
			benchSink = h
		})
	}
}

func BenchmarkHashUUID(b *testing.B) {
	b.ReportAllocs()
	u := knownUUIDs[2].u
	var h int32
	for i := 0; i < b.N; i++ {
		u[15] = byte(i)
		h += HashUUID(u)
	}
	benchSink = h
}

func BenchmarkHashValueInt8(b *testing.B) {
	b.ReportAllocs()
	var h int32
	for i := 0; i < b.N; i++ {
		v, _ := HashValue("int8", "-1234567890123")
		h += v
	}
	benchSink = h
}

func BenchmarkHashValueUUID(b *testing.B) {
	b.ReportAllocs()
	var h int32
	for i := 0; i < b.N; i++ {
		v, _ := HashValue("uuid", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")
		h += v
	}
	benchSink = h
}
