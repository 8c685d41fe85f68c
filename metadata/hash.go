package metadata

import (
	"encoding/binary"
	"math"
	"math/bits"
	"strings"

	"github.com/pgfleet/pgfleet/internal/pgerr"
)

// This file computes the hash PostgreSQL 15 computes for a value of a
// distribution column, bit for bit, so that the coordinator routes a row to
// the shard a worker (or Citus) would put it in. The values are those of the
// SQL functions hashint2, hashint4, hashint8, hashtext, hashbpchar and
// uuid_hash, the support functions of the default hash operator classes of
// those types, with PostgreSQL's int4 result being the uint32 hash
// reinterpreted as signed.
//
// Underneath is PostgreSQL's hash_bytes (src/common/hashfn.c): Bob Jenkins'
// lookup3 hash with PostgreSQL's own initial value. PostgreSQL reads the key
// a word at a time when it is aligned and a byte at a time when it is not;
// on a little-endian machine both give the same result, which is the
// byte-wise little-endian reading done here. (A big-endian PostgreSQL
// computes different hashes; pgfleet supports little-endian workers only,
// as does every platform PostgreSQL is commonly run on.)

// invalidBinaryRepresentation is SQLSTATE 22P03, invalid_binary_representation,
// what PostgreSQL reports for a binary parameter of the wrong length.
const invalidBinaryRepresentation = "22P03"

// hashSeed is the part of hash_bytes' initial state that does not depend on
// the key's length: 0x9e3779b9 (the golden ratio) + 3923095.
const hashSeed uint32 = 0x9e3779b9 + 3923095

// mix is lookup3's mix(a, b, c): it mixes three 32-bit values reversibly.
func mix(a, b, c uint32) (uint32, uint32, uint32) {
	a -= c
	a ^= bits.RotateLeft32(c, 4)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 6)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 8)
	b += a
	a -= c
	a ^= bits.RotateLeft32(c, 16)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 19)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 4)
	b += a
	return a, b, c
}

// final is lookup3's final(a, b, c): the last mixing of three 32-bit values
// into c, which it returns.
func final(a, b, c uint32) uint32 {
	c ^= b
	c -= bits.RotateLeft32(b, 14)
	a ^= c
	a -= bits.RotateLeft32(c, 11)
	b ^= a
	b -= bits.RotateLeft32(a, 25)
	c ^= b
	c -= bits.RotateLeft32(b, 16)
	a ^= c
	a -= bits.RotateLeft32(c, 4)
	b ^= a
	b -= bits.RotateLeft32(a, 14)
	c ^= b
	c -= bits.RotateLeft32(b, 24)
	return c
}

// hashUint32 is PostgreSQL's hash_bytes_uint32 (hash_uint32): the same as
// hash_bytes over the value's four bytes in little-endian order.
func hashUint32(k uint32) int32 {
	a := hashSeed + 4 + k
	b := hashSeed + 4
	return int32(final(a, b, b))
}

// hashBytes is PostgreSQL's hash_bytes (hash_any) on a little-endian machine.
// It takes a string or a byte slice so that neither needs converting.
func hashBytes[T string | []byte](k T) int32 {
	n := len(k)
	a := hashSeed + uint32(n)
	b, c := a, a
	i := 0
	for ; n-i >= 12; i += 12 {
		_ = k[i+11]
		a += uint32(k[i]) | uint32(k[i+1])<<8 | uint32(k[i+2])<<16 | uint32(k[i+3])<<24
		b += uint32(k[i+4]) | uint32(k[i+5])<<8 | uint32(k[i+6])<<16 | uint32(k[i+7])<<24
		c += uint32(k[i+8]) | uint32(k[i+9])<<8 | uint32(k[i+10])<<16 | uint32(k[i+11])<<24
		a, b, c = mix(a, b, c)
	}
	// The last 0 to 11 bytes. The lowest byte of c is left alone: lookup3
	// reserves it for the length.
	switch n - i {
	case 11:
		c += uint32(k[i+10]) << 24
		fallthrough
	case 10:
		c += uint32(k[i+9]) << 16
		fallthrough
	case 9:
		c += uint32(k[i+8]) << 8
		fallthrough
	case 8:
		b += uint32(k[i+7]) << 24
		fallthrough
	case 7:
		b += uint32(k[i+6]) << 16
		fallthrough
	case 6:
		b += uint32(k[i+5]) << 8
		fallthrough
	case 5:
		b += uint32(k[i+4])
		fallthrough
	case 4:
		a += uint32(k[i+3]) << 24
		fallthrough
	case 3:
		a += uint32(k[i+2]) << 16
		fallthrough
	case 2:
		a += uint32(k[i+1]) << 8
		fallthrough
	case 1:
		a += uint32(k[i])
	}
	return int32(final(a, b, c))
}

// HashInt2 is PostgreSQL's hashint2(smallint): the value sign-extended to
// int4 and hashed as hashint4 does.
func HashInt2(v int16) int32 { return hashUint32(uint32(int32(v))) }

// HashInt4 is PostgreSQL's hashint4(integer).
func HashInt4(v int32) int32 { return hashUint32(uint32(v)) }

// HashInt8 is PostgreSQL's hashint8(bigint). The 64-bit value is folded into
// 32 bits so that an int8 holding an int4's value hashes as that int4 does
// (the low half XOR the high half, the high half inverted for negative
// values), then hashed as an int4.
func HashInt8(v int64) int32 {
	// v>>63 is all ones for a negative value: XOR with it inverts.
	return hashUint32(uint32(v) ^ uint32(v>>32) ^ uint32(v>>63))
}

// HashText is PostgreSQL's hashtext for text and varchar (varchar uses text's
// hash operator class) under a deterministic collation, which the default
// collation always is: hash_any over the bytes of the value as stored, that
// is in the server's encoding (a value a client sends in another
// client_encoding must be converted first). Columns with a nondeterministic
// (ICU) collation hash differently and are not supported.
func HashText(s []byte) int32 { return hashBytes(s) }

// HashTextString is HashText for a string, without copying it.
func HashTextString(s string) int32 { return hashBytes(s) }

// HashBPChar is PostgreSQL's hashbpchar for character(n) (bpchar) under a
// deterministic collation: trailing spaces are not significant in bpchar, so
// they are removed before hashing the rest as HashText does.
func HashBPChar(s []byte) int32 {
	n := len(s)
	for n > 0 && s[n-1] == ' ' {
		n--
	}
	return hashBytes(s[:n])
}

func hashBPCharString(s string) int32 {
	n := len(s)
	for n > 0 && s[n-1] == ' ' {
		n--
	}
	return hashBytes(s[:n])
}

// HashUUID is PostgreSQL's uuid_hash(uuid): hash_any over the 16 bytes in
// their usual (network, textual) order.
func HashUUID(u [16]byte) int32 { return hashBytes(u[:]) }

// hashKind is a distribution column type pgfleet can hash.
type hashKind uint8

const (
	kindUnknown hashKind = iota
	kindInt2
	kindInt4
	kindInt8
	kindText // text, varchar
	kindBPChar
	kindUUID
)

// kindOf maps a PostgreSQL type name to the hash it uses. It takes pg_type
// names (int8, varchar, bpchar), SQL spellings (bigint, character varying,
// character) and format_type output ("character varying(20)",
// "pg_catalog.int4"), in any case.
func kindOf(typ string) hashKind {
	if k := kindOfName(typ); k != kindUnknown {
		return k
	}
	t := strings.ToLower(strings.TrimSpace(typ))
	t = strings.TrimPrefix(t, "pg_catalog.")
	if i := strings.IndexByte(t, '('); i >= 0 && strings.HasSuffix(t, ")") {
		t = strings.TrimSpace(t[:i])
	}
	t = strings.Join(strings.Fields(t), " ")
	return kindOfName(t)
}

func kindOfName(typ string) hashKind {
	switch typ {
	case "int2", "smallint":
		return kindInt2
	case "int4", "integer", "int":
		return kindInt4
	case "int8", "bigint":
		return kindInt8
	case "text", "varchar", "character varying":
		return kindText
	case "bpchar", "character":
		return kindBPChar
	case "uuid":
		return kindUUID
	}
	return kindUnknown
}

// HashValue hashes a value given in PostgreSQL's text form as a value of type
// typ, exactly as a worker would hash it after reading it with the type's
// input function. typ is one of int2 (smallint), int4 (integer, int), int8
// (bigint), text, varchar (character varying), bpchar (character) and uuid.
//
// Integers are read as PostgreSQL 15 reads them: optional white space around
// an optionally signed run of decimal digits. UUIDs are read in all the
// forms PostgreSQL accepts: 32 hex digits in either case, optionally with a
// hyphen after any group of four and optionally in braces. A value PostgreSQL
// would reject gives a *pgerr.Error with PostgreSQL's SQLSTATE and message:
// 22P02 (invalid_text_representation) or 22003 (numeric_value_out_of_range).
// A type pgfleet cannot hash gives 0A000 (feature_not_supported).
func HashValue(typ string, text string) (int32, error) {
	switch kindOf(typ) {
	case kindInt2:
		v, err := parseInt(text, math.MinInt16, math.MaxInt16, "smallint")
		if err != nil {
			return 0, err
		}
		return HashInt2(int16(v)), nil
	case kindInt4:
		v, err := parseInt(text, math.MinInt32, math.MaxInt32, "integer")
		if err != nil {
			return 0, err
		}
		return HashInt4(int32(v)), nil
	case kindInt8:
		v, err := parseInt(text, math.MinInt64, math.MaxInt64, "bigint")
		if err != nil {
			return 0, err
		}
		return HashInt8(v), nil
	case kindText:
		return hashBytes(text), nil
	case kindBPChar:
		return hashBPCharString(text), nil
	case kindUUID:
		u, err := ParseUUID(text)
		if err != nil {
			return 0, err
		}
		return HashUUID(u), nil
	}
	return 0, unsupportedType(typ)
}

// HashBinary hashes a value given in PostgreSQL's binary wire format as a
// value of type typ (see HashValue), as it arrives in a Bind message for a
// parameter sent in binary: int2, int4 and int8 as 2, 4 and 8 bytes
// big-endian, text, varchar and bpchar as their bytes, uuid as its 16 bytes.
// A value of the wrong length gives a *pgerr.Error with SQLSTATE 22P03
// (invalid_binary_representation), as PostgreSQL reports it.
func HashBinary(typ string, b []byte) (int32, error) {
	switch k := kindOf(typ); k {
	case kindInt2:
		if len(b) != 2 {
			return 0, badBinary("smallint", 2, len(b))
		}
		return HashInt2(int16(binary.BigEndian.Uint16(b))), nil
	case kindInt4:
		if len(b) != 4 {
			return 0, badBinary("integer", 4, len(b))
		}
		return HashInt4(int32(binary.BigEndian.Uint32(b))), nil
	case kindInt8:
		if len(b) != 8 {
			return 0, badBinary("bigint", 8, len(b))
		}
		return HashInt8(int64(binary.BigEndian.Uint64(b))), nil
	case kindText:
		return HashText(b), nil
	case kindBPChar:
		return HashBPChar(b), nil
	case kindUUID:
		if len(b) != 16 {
			return 0, badBinary("uuid", 16, len(b))
		}
		return HashUUID([16]byte(b)), nil
	}
	return 0, unsupportedType(typ)
}

func unsupportedType(typ string) error {
	return pgerr.New(pgerr.FeatureNotSupported,
		"pgfleet cannot hash values of type %s", typ).
		WithHint("Distribution columns may be of type smallint, integer, bigint, text, varchar, character or uuid.")
}

func badBinary(typ string, want, got int) error {
	return pgerr.New(invalidBinaryRepresentation,
		"incorrect binary data format for type %s: %d bytes, expected %d", typ, got, want)
}

// isSpace is C's isspace in the C locale, which PostgreSQL's integer input
// uses to skip white space.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

// parseInt reads an integer of the range [lo, hi] as PostgreSQL 15's
// pg_strtoint16/32/64 do, with their errors. Like them it accumulates the
// value negatively (so that the most negative value fits) and reports an
// overflow as soon as it happens, before looking at what follows the digits.
func parseInt[T string | []byte](s T, lo, hi int64, typname string) (int64, error) {
	i := 0
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	neg := false
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		neg = s[i] == '-'
		i++
	}
	if i >= len(s) || s[i] < '0' || s[i] > '9' {
		return 0, invalidSyntax(typname, string(s))
	}
	var v int64 // minus the value read so far
	lim := lo / 10
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		d := int64(s[i] - '0')
		if v < lim || v*10 < lo+d {
			return 0, outOfRange(typname, string(s))
		}
		v = v*10 - d
	}
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	if i != len(s) {
		return 0, invalidSyntax(typname, string(s))
	}
	if !neg {
		if v < -hi {
			return 0, outOfRange(typname, string(s))
		}
		v = -v
	}
	return v, nil
}

func invalidSyntax(typname, s string) error {
	return pgerr.New(pgerr.InvalidTextRepresentation, "invalid input syntax for type %s: \"%s\"", typname, s)
}

func outOfRange(typname, s string) error {
	return pgerr.New(pgerr.NumericValueOutOfRange, "value \"%s\" is out of range for type %s", s, typname)
}

// ParseUUID reads a UUID in any of the text forms PostgreSQL's uuid input
// accepts: 32 hex digits in upper or lower case, optionally with a hyphen
// after any group of four digits (but not at the end), the whole optionally
// in braces, with no white space. Anything else is a *pgerr.Error with
// SQLSTATE 22P02 and PostgreSQL's message.
func ParseUUID(s string) ([16]byte, error) {
	var u [16]byte
	i := 0
	braces := len(s) > 0 && s[0] == '{'
	if braces {
		i++
	}
	for j := 0; j < 16; j++ {
		if len(s)-i < 2 {
			return u, invalidSyntax("uuid", s)
		}
		h, ok1 := unhex(s[i])
		l, ok2 := unhex(s[i+1])
		if !ok1 || !ok2 {
			return u, invalidSyntax("uuid", s)
		}
		u[j] = h<<4 | l
		i += 2
		if j%2 == 1 && j < 15 && i < len(s) && s[i] == '-' {
			i++
		}
	}
	if braces {
		if i >= len(s) || s[i] != '}' {
			return u, invalidSyntax("uuid", s)
		}
		i++
	}
	if i != len(s) {
		return u, invalidSyntax("uuid", s)
	}
	return u, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
