package metadata

import (
	"encoding/binary"
	"errors"
	"math"
	"math/big"
	"strings"
	"testing"

	"github.com/pgfleet/pgfleet/internal/pgerr"
)

// Fuzz targets for the hash functions (run with scripts/fuzz). A fuzz
// target cannot ask PostgreSQL, so they check what must hold whatever the
// input: the int family hashes a value alike in every width (hashint2,
// hashint4 and hashint8 agree on PostgreSQL, which is what lets int columns
// of different widths colocate), each hash matches a literal transcription
// of PostgreSQL's C code, text and binary input agree, and the text input
// functions accept and refuse what PostgreSQL 15's do, with its SQLSTATEs.

// refHashInt8 is PostgreSQL's hashint8, transcribed from hashfunc.c.
func refHashInt8(val int64) int32 {
	lohalf := uint32(val)
	hihalf := uint32(val >> 32)
	if val >= 0 {
		lohalf ^= hihalf
	} else {
		lohalf ^= ^hihalf
	}
	return refHashUint32(lohalf)
}

// refHashUint32 is hash_bytes_uint32: hash_bytes over the value's four
// bytes in the machine's (little-endian) order.
func refHashUint32(k uint32) int32 {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], k)
	return hashBytes(b[:])
}

func FuzzHashInt(f *testing.F) {
	for _, v := range []int64{0, 1, -1, 42, math.MaxInt16, math.MinInt16, math.MaxInt32, math.MinInt32,
		math.MaxInt64, math.MinInt64, 1 << 32, -(1 << 32), 1<<32 + 7} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v int64) {
		h8 := HashInt8(v)
		if ref := refHashInt8(v); h8 != ref {
			t.Fatalf("HashInt8(%d) = %d, PostgreSQL's hashint8 gives %d", v, h8, ref)
		}
		if HashInt8(v) != h8 {
			t.Fatalf("HashInt8(%d) is not deterministic", v)
		}
		if v >= math.MinInt32 && v <= math.MaxInt32 {
			h4 := HashInt4(int32(v))
			if h4 != h8 {
				t.Fatalf("hashint4(%d) = %d but hashint8 = %d; PostgreSQL's agree", v, h4, h8)
			}
			if ref := refHashUint32(uint32(int32(v))); h4 != ref {
				t.Fatalf("HashInt4(%d) = %d, hash_uint32 gives %d", v, h4, ref)
			}
		}
		if v >= math.MinInt16 && v <= math.MaxInt16 {
			if h2 := HashInt2(int16(v)); h2 != h8 {
				t.Fatalf("hashint2(%d) = %d but hashint8 = %d; PostgreSQL's agree", v, h2, h8)
			}
		}
		// Binary input (a Bind parameter) hashes as the value does.
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], uint64(v))
		if h, err := HashBinary("int8", b[:]); err != nil || h != h8 {
			t.Fatalf("HashBinary(int8, %d) = %d, %v; want %d", v, h, err, h8)
		}
	})
}

// refParseInt is PostgreSQL 15's pg_strtoint16/32/64 over a value of
// bits bits: leading and trailing isspace, an optional sign, at least one
// digit; an overflow is reported as soon as the digits overflow, before any
// trailing junk is looked at.
func refParseInt(s string, bits uint) (int64, string) {
	i := 0
	for i < len(s) && strings.IndexByte(" \t\n\v\f\r", s[i]) >= 0 {
		i++
	}
	neg := false
	if i < len(s) && s[i] == '-' {
		neg = true
		i++
	} else if i < len(s) && s[i] == '+' {
		i++
	}
	if i >= len(s) || s[i] < '0' || s[i] > '9' {
		return 0, pgerr.InvalidTextRepresentation
	}
	j := i
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	v, _ := new(big.Int).SetString(s[i:j], 10)
	limit := new(big.Int).Lsh(big.NewInt(1), bits-1) // -min
	if v.Cmp(limit) > 0 {
		return 0, pgerr.NumericValueOutOfRange
	}
	for j < len(s) && strings.IndexByte(" \t\n\v\f\r", s[j]) >= 0 {
		j++
	}
	if j != len(s) {
		return 0, pgerr.InvalidTextRepresentation
	}
	if !neg && v.Cmp(limit) == 0 {
		return 0, pgerr.NumericValueOutOfRange
	}
	if neg {
		v.Neg(v)
	}
	return v.Int64(), ""
}

func code(err error) string {
	var pe *pgerr.Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return "?"
}

func FuzzHashValue(f *testing.F) {
	for _, s := range []string{"0", "42", " -17 ", "+5", "32767", "32768", "-32768", "2147483648", "-2147483648",
		"9223372036854775807", "9223372036854775808", "-9223372036854775808", "99999999999999999999x", "1_000", "0x10",
		"", " ", "-", "12 3", "\t7\n", "abc", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "{A0EEBC999C0B4EF8BB6D6BB9BD380A11}",
		"a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a11", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1-", "text  ", "é "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		// Integers: the text input agrees with PostgreSQL 15's, and a value
		// hashes alike as int2, int4 and int8 (and in binary).
		var hashes []int32
		for _, ty := range []struct {
			name string
			bits uint
		}{{"int2", 16}, {"int4", 32}, {"int8", 64}} {
			h, err := HashValue(ty.name, s)
			want, wantCode := refParseInt(s, ty.bits)
			if wantCode != "" {
				if err == nil || code(err) != wantCode {
					t.Fatalf("HashValue(%s, %q) = %d, %v; PostgreSQL 15 fails with %s", ty.name, s, h, err, wantCode)
				}
				continue
			}
			if err != nil {
				t.Fatalf("HashValue(%s, %q): %v; PostgreSQL 15 reads %d", ty.name, s, err, want)
			}
			if h != HashInt8(want) {
				t.Fatalf("HashValue(%s, %q) = %d, hashint8(%d) = %d", ty.name, s, h, want, HashInt8(want))
			}
			if v, err := ParseInt(ty.name, []byte(s)); err != nil || v != want {
				t.Fatalf("ParseInt(%s, %q) = %d, %v; want %d", ty.name, s, v, err, want)
			}
			hashes = append(hashes, h)
		}
		for _, h := range hashes[min(1, len(hashes)):] {
			if h != hashes[0] {
				t.Fatalf("%q hashes differently as int2, int4 and int8: %v", s, hashes)
			}
		}
		// Text: the string and byte forms agree; varchar is text; bpchar
		// ignores trailing spaces.
		ht, err := HashValue("text", s)
		if err != nil || ht != HashText([]byte(s)) || ht != HashTextString(s) {
			t.Fatalf("text hash of %q disagrees: %d %v", s, ht, err)
		}
		if hv, _ := HashValue("character varying(20)", s); hv != ht {
			t.Fatalf("varchar hash of %q = %d, text's = %d", s, hv, ht)
		}
		hb, _ := HashValue("bpchar", s)
		if hb != HashBPChar([]byte(s+"   ")) || hb != HashText([]byte(strings.TrimRight(s, " "))) {
			t.Fatalf("bpchar hash of %q depends on trailing spaces", s)
		}
		if hbin, _ := HashBinary("bpchar", []byte(s)); hbin != hb {
			t.Fatalf("bpchar binary hash of %q = %d, text input's = %d", s, hbin, hb)
		}
		// UUID: the input function accepts exactly what uuid_in does, and
		// the text and binary forms hash alike.
		u, err := ParseUUID(s)
		ru, rok := refParseUUID(s)
		if strings.IndexByte(s, 0) >= 0 {
			rok = false // a text value holds no NUL; the C code would stop there
		}
		if (err == nil) != rok || (rok && u != ru) {
			t.Fatalf("ParseUUID(%q) = %x, %v; PostgreSQL's uuid_in: %x, %v", s, u, err, ru, rok)
		}
		if err != nil && code(err) != pgerr.InvalidTextRepresentation {
			t.Fatalf("ParseUUID(%q): %v, want 22P02", s, err)
		}
		if err == nil {
			hu, _ := HashValue("uuid", s)
			if hbin, _ := HashBinary("uuid", u[:]); hbin != hu || hu != HashUUID(u) {
				t.Fatalf("uuid %q hashes differently as text and binary", s)
			}
		}
		// Type names never panic, and an unknown one is 0A000.
		if _, err := HashValue(s, "1"); kindOf(s) == kindUnknown && code(err) != pgerr.FeatureNotSupported {
			t.Fatalf("HashValue(%q, 1): %v, want 0A000", s, err)
		}
	})
}

// refParseUUID is PostgreSQL's string_to_uuid, transcribed from uuid.c.
func refParseUUID(s string) ([16]byte, bool) {
	var u [16]byte
	at := func(i int) byte {
		if i < len(s) {
			return s[i]
		}
		return 0
	}
	src := 0
	braces := false
	if at(src) == '{' {
		src++
		braces = true
	}
	isx := func(c byte) bool {
		return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
	}
	val := func(c byte) byte {
		switch {
		case c >= '0' && c <= '9':
			return c - '0'
		case c >= 'a' && c <= 'f':
			return c - 'a' + 10
		}
		return c - 'A' + 10
	}
	for i := 0; i < 16; i++ {
		if at(src) == 0 || at(src+1) == 0 {
			return u, false
		}
		if !isx(at(src)) || !isx(at(src+1)) {
			return u, false
		}
		u[i] = val(at(src))<<4 | val(at(src+1))
		src += 2
		if at(src) == '-' && i%2 == 1 && i < 15 {
			src++
		}
	}
	if braces {
		if at(src) != '}' {
			return u, false
		}
		src++
	}
	return u, at(src) == 0 && src == len(s)
}
