package difftest

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// Type OIDs of the types the generator uses (pg_type.oid, fixed in
// PostgreSQL's catalog).
const (
	oidUnknown     uint32 = 0
	oidBool        uint32 = 16
	oidInt8        uint32 = 20
	oidInt2        uint32 = 21
	oidInt4        uint32 = 23
	oidText        uint32 = 25
	oidFloat8      uint32 = 701
	oidBPChar      uint32 = 1042
	oidVarchar     uint32 = 1043
	oidDate        uint32 = 1082
	oidTimestamp   uint32 = 1114
	oidTimestamptz uint32 = 1184
	oidInterval    uint32 = 1186
	oidNumeric     uint32 = 1700
	oidUUID        uint32 = 2950
)

// kind is a base type family.
type kind int

const (
	kInt2 kind = iota
	kInt4
	kInt8
	kText
	kVarchar // varchar(n) when n > 0, else unbounded varchar
	kBPChar  // char(n)
	kUUID
	kNumeric
	kFloat8
	kBool
	kDate
	kTimestamp
	kTimestamptz
	kInterval
)

// colType is a column's SQL type.
type colType struct {
	k kind
	n int // length of varchar(n) / char(n)
}

// distKinds are the distribution-column types metadata/hash.go supports.
var distKinds = []kind{kInt2, kInt4, kInt8, kText, kVarchar, kBPChar, kUUID}

func (t colType) sql() string {
	switch t.k {
	case kInt2:
		return "int2"
	case kInt4:
		return "int4"
	case kInt8:
		return "int8"
	case kText:
		return "text"
	case kVarchar:
		if t.n > 0 {
			return fmt.Sprintf("varchar(%d)", t.n)
		}
		return "varchar"
	case kBPChar:
		return fmt.Sprintf("char(%d)", t.n)
	case kUUID:
		return "uuid"
	case kNumeric:
		return "numeric"
	case kFloat8:
		return "float8"
	case kBool:
		return "bool"
	case kDate:
		return "date"
	case kTimestamp:
		return "timestamp"
	case kTimestamptz:
		return "timestamptz"
	case kInterval:
		return "interval"
	}
	panic("unknown kind")
}

func (t colType) oid() uint32 {
	return [...]uint32{oidInt2, oidInt4, oidInt8, oidText, oidVarchar, oidBPChar, oidUUID,
		oidNumeric, oidFloat8, oidBool, oidDate, oidTimestamp, oidTimestamptz, oidInterval}[t.k]
}

func (t colType) isInt() bool    { return t.k == kInt2 || t.k == kInt4 || t.k == kInt8 }
func (t colType) isString() bool { return t.k == kText || t.k == kVarchar || t.k == kBPChar }

// hashFunc is the SQL function of the type's default hash opclass, used by
// the placement invariant.
func (t colType) hashFunc() string {
	switch t.k {
	case kInt2:
		return "hashint2"
	case kInt4:
		return "hashint4"
	case kInt8:
		return "hashint8"
	case kText, kVarchar:
		return "hashtext"
	case kBPChar:
		return "hashbpchar"
	case kUUID:
		return "uuid_hash"
	}
	panic("not a distribution type: " + t.sql())
}

// value is one generated value: its canonical input text, which Go can
// parse back for binary encoding. For timestamptz the text always carries
// an offset, so the value does not depend on the session's TimeZone.
type value struct {
	null bool
	s    string
}

func (v value) String() string {
	if v.null {
		return "NULL"
	}
	return strconv.Quote(v.s)
}

// Edge strings: quotes, backslashes, padding, empty, non-ASCII that LATIN1
// can represent (sessions switch client_encoding between UTF8 and LATIN1).
var edgeStrings = []string{"", "a", "a ", " a", "ab", "it's", `back\slash`, `x\\`, `it\'s`, "é", "Ünïcödé",
	"naïve café", "ß", "ÿ", `"q"`, "tab\there", "line\nbreak", "  ", "abc", "abcd", "zz", "A", "0", "16",
	"Ñandú", "x%y_z", "semi;colon", "$1", "--", "/*c*/"}

var edgeInts = map[kind][]int64{
	kInt2: {0, 1, -1, 2, 42, 100, 16, 32767, -32768, 255, 256},
	kInt4: {0, 1, -1, 2, 42, 100, 16, 32767, 32768, -32769, 2147483647, -2147483648, 65536},
	kInt8: {0, 1, -1, 2, 42, 100, 16, 32768, 2147483648, -2147483649, 9223372036854775807, -9223372036854775808, 1 << 40},
}

var edgeUUIDs = []string{"00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff",
	"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "123e4567-e89b-12d3-a456-426614174000"}

var zones = []string{"+00", "+05:30", "-08", "+13:45", "-03:30", "+01"}

// genValue draws a value of type t. Key pools draw with nullable=false.
func genValue(r *rand.Rand, t colType, nullable bool) value {
	if nullable && r.IntN(8) == 0 {
		return value{null: true}
	}
	switch t.k {
	case kInt2, kInt4, kInt8:
		if r.IntN(3) == 0 {
			e := edgeInts[t.k]
			return value{s: strconv.FormatInt(e[r.IntN(len(e))], 10)}
		}
		return value{s: strconv.Itoa(r.IntN(2000) - 500)}
	case kText, kVarchar, kBPChar:
		var s string
		if r.IntN(2) == 0 {
			s = edgeStrings[r.IntN(len(edgeStrings))]
		} else {
			s = randWord(r)
		}
		if t.n > 0 && len([]rune(s)) > t.n {
			s = string([]rune(s)[:t.n])
		}
		return value{s: s}
	case kUUID:
		if r.IntN(3) == 0 {
			return value{s: edgeUUIDs[r.IntN(len(edgeUUIDs))]}
		}
		var b [16]byte
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		return value{s: formatUUID(b)}
	case kNumeric:
		e := []string{"0", "-0.001", "1.50", "123456789.123456789", "-99999999999999999999.5", "1e3", "0.000001", "42"}
		if r.IntN(2) == 0 {
			return value{s: e[r.IntN(len(e))]}
		}
		return value{s: fmt.Sprintf("%d.%02d", r.IntN(20000)-10000, r.IntN(100))}
	case kFloat8:
		e := []string{"0", "-0", "1.5", "0.1", "1e300", "-1e-300", "Infinity", "-Infinity", "NaN", "3.141592653589793"}
		if r.IntN(2) == 0 {
			return value{s: e[r.IntN(len(e))]}
		}
		return value{s: strconv.FormatFloat(r.Float64()*1000-500, 'g', -1, 64)}
	case kBool:
		return value{s: []string{"true", "false"}[r.IntN(2)]}
	case kDate:
		d := time.Date(1999, 12, 25, 0, 0, 0, 0, time.UTC).AddDate(0, 0, r.IntN(800))
		if r.IntN(6) == 0 {
			d = time.Date([]int{1, 1970, 2000, 2038, 9999}[r.IntN(5)], 1, 1, 0, 0, 0, 0, time.UTC)
		}
		return value{s: d.Format("2006-01-02")}
	case kTimestamp:
		return value{s: randTime(r).Format("2006-01-02 15:04:05.999999")}
	case kTimestamptz:
		return value{s: randTime(r).Format("2006-01-02 15:04:05.999999") + zones[r.IntN(len(zones))]}
	case kInterval:
		e := []string{"1 day", "-1 mon -2 days", "3 hours 4 minutes", "1 year 2 mons 3 days 04:05:06.789", "00:00:00", "-00:00:01", "P1Y2M3DT4H5M6S"}
		return value{s: e[r.IntN(len(e))]}
	}
	panic("unknown kind")
}

func randTime(r *rand.Rand) time.Time {
	t := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(r.Int64N(int64(900*24*time.Hour))) / time.Second * time.Second)
	if r.IntN(3) == 0 {
		t = t.Add(time.Duration(r.IntN(1000000)) * time.Microsecond)
	}
	if r.IntN(8) == 0 { // DST edges in Europe and America
		t = []time.Time{time.Date(2021, 3, 28, 1, 30, 0, 0, time.UTC), time.Date(2021, 11, 7, 1, 30, 0, 0, time.UTC),
			time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)}[r.IntN(3)]
	}
	return t
}

func randWord(r *rand.Rand) string {
	const letters = "abcdefghijklmnopqrstuvwxyzABCXYZéüß 0123456789"
	rs := []rune(letters)
	n := 1 + r.IntN(8)
	var b strings.Builder
	for range n {
		b.WriteRune(rs[r.IntN(len(rs))])
	}
	return b.String()
}

func formatUUID(b [16]byte) string {
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func parseUUID(s string) ([16]byte, error) {
	var b [16]byte
	h := strings.ReplaceAll(strings.Trim(s, "{}"), "-", "")
	d, err := hex.DecodeString(h)
	if err != nil || len(d) != 16 {
		return b, fmt.Errorf("bad uuid %q", s)
	}
	copy(b[:], d)
	return b, nil
}

// quoteLit renders s as a standard string literal for a session with the
// given standard_conforming_strings.
func quoteLit(s string, scs bool) string {
	s = strings.ReplaceAll(s, "'", "''")
	if !scs {
		s = strings.ReplaceAll(s, `\`, `\\`)
	}
	return "'" + s + "'"
}

// quoteE renders s as an escape string literal E'...', escaping in one of
// several ways.
func quoteE(r *rand.Rand, s string) string {
	var b strings.Builder
	b.WriteString("E'")
	for _, c := range s {
		switch {
		case c == '\\':
			b.WriteString(`\\`)
		case c == '\'':
			b.WriteString([]string{`\'`, `''`}[r.IntN(2)])
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\t':
			b.WriteString(`\t`)
		case c < 128 && c >= 'a' && c <= 'z' && r.IntN(6) == 0:
			fmt.Fprintf(&b, `\x%02x`, c)
		case c < 128 && r.IntN(8) == 0 && c >= ' ':
			fmt.Fprintf(&b, `\%03o`, c)
		default:
			b.WriteRune(c)
		}
	}
	b.WriteString("'")
	return b.String()
}

// encodeBinary is the binary send format of v's text as declared type oid,
// or false when this generator has no binary encoding for it (or the value
// does not fit the type, which only text can say).
func encodeBinary(oid uint32, v value, latin1 bool) ([]byte, bool) {
	switch oid {
	case oidInt2, oidInt4, oidInt8:
		i, err := strconv.ParseInt(v.s, 10, 64)
		if err != nil {
			return nil, false
		}
		switch oid {
		case oidInt2:
			if i != int64(int16(i)) {
				return nil, false
			}
			return binary.BigEndian.AppendUint16(nil, uint16(i)), true
		case oidInt4:
			if i != int64(int32(i)) {
				return nil, false
			}
			return binary.BigEndian.AppendUint32(nil, uint32(i)), true
		}
		return binary.BigEndian.AppendUint64(nil, uint64(i)), true
	case oidText, oidVarchar, oidBPChar:
		return clientBytes(v.s, latin1), true
	case oidUUID:
		u, err := parseUUID(v.s)
		if err != nil {
			return nil, false
		}
		return u[:], true
	case oidFloat8:
		f, err := strconv.ParseFloat(v.s, 64)
		if err != nil {
			return nil, false
		}
		return binary.BigEndian.AppendUint64(nil, math.Float64bits(f)), true
	case oidBool:
		if v.s == "true" {
			return []byte{1}, true
		}
		return []byte{0}, true
	case oidDate:
		d, err := time.Parse("2006-01-02", v.s)
		if err != nil {
			return nil, false
		}
		days := d.Sub(pgEpoch) / (24 * time.Hour)
		return binary.BigEndian.AppendUint32(nil, uint32(int32(days))), true
	case oidTimestamp:
		t, err := time.Parse("2006-01-02 15:04:05.999999", v.s)
		if err != nil {
			return nil, false
		}
		return binary.BigEndian.AppendUint64(nil, uint64(t.Sub(pgEpoch).Microseconds())), true
	case oidTimestamptz:
		t, err := time.Parse("2006-01-02 15:04:05.999999-07:00", fixOffset(v.s))
		if err != nil {
			return nil, false
		}
		return binary.BigEndian.AppendUint64(nil, uint64(t.Sub(pgEpoch).Microseconds())), true
	}
	return nil, false
}

// fixOffset turns a trailing "+05" into "+05:00" for Go's parser.
func fixOffset(s string) string {
	if i := strings.LastIndexAny(s, "+-"); i > 0 && len(s)-i == 3 {
		return s + ":00"
	}
	return s
}

var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// clientBytes encodes s in the session's client encoding. The generator
// only makes strings LATIN1 can represent.
func clientBytes(s string, latin1 bool) []byte {
	if !latin1 {
		return []byte(s)
	}
	b := make([]byte, 0, len(s))
	for _, c := range s {
		if c > 255 {
			c = '?'
		}
		b = append(b, byte(c))
	}
	return b
}

// fromClient decodes bytes the server sent in the client encoding, for
// printing.
func fromClient(b []byte, latin1 bool) string {
	if !latin1 {
		return string(b)
	}
	rs := make([]rune, len(b))
	for i, c := range b {
		rs[i] = rune(c)
	}
	return string(rs)
}
