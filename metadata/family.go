package metadata

import "math"

// Which values hash as a distribution column's. PostgreSQL puts a row in
// the shard of the hash of the column's value; a statement pins one shard
// only if every row it can match (or the row it stores) has the value the
// router hashed. These helpers say which types of value allow that.

// SameFamily reports whether a value of type typ, converted to the
// distribution column's type col, keeps the value the router reads from
// its text or binary form: the integer types among themselves (int2, int4
// and int8 hash equal values alike), text, varchar and bpchar among
// themselves (bpchar's trailing spaces go when it becomes text or varchar,
// and do not count in bpchar), uuid with itself.
func SameFamily(col, typ string) bool {
	c, t := kindOf(col), kindOf(typ)
	switch c {
	case kindInt2, kindInt4, kindInt8:
		return t == kindInt2 || t == kindInt4 || t == kindInt8
	case kindText, kindBPChar:
		return t == kindText || t == kindBPChar
	case kindUUID:
		return t == kindUUID
	}
	return false
}

// Comparable reports whether col = <value of type typ> uses an equality
// under which the rows that match all have one value of col (so they are
// in one shard): an integer column compared with an integer or numeric
// (compared exactly as numeric), text with text, varchar or bpchar (as
// text, bpchar's trailing spaces removed), varchar with text or varchar, bpchar with any of the
// three (as bpchar or text, trailing spaces ignored, as bpchar's hash
// does), uuid with uuid. Others (a float, where rounding makes several
// integers equal; a bpchar against a varchar column, compared as bpchar so
// that 'a' and 'a ' both match) are not: the statement needs every shard.
func Comparable(col, typ string) bool {
	if typ == "numeric" {
		k := kindOf(col)
		return k == kindInt2 || k == kindInt4 || k == kindInt8
	}
	if typ == "unknown" {
		return true
	}
	if kindOf(col) == kindText && kindOf(typ) == kindBPChar && !isText(col) {
		return false // varchar = bpchar compares as bpchar
	}
	return SameFamily(col, typ)
}

func isText(typ string) bool { return typ == "text" }

// IsText reports whether typ hashes as text (text, varchar).
func IsText(typ string) bool { return kindOf(typ) == kindText }

// IsBPChar reports whether typ is character (bpchar).
func IsBPChar(typ string) bool { return kindOf(typ) == kindBPChar }

// IsInteger reports whether typ is int2, int4 or int8.
func IsInteger(typ string) bool {
	k := kindOf(typ)
	return k == kindInt2 || k == kindInt4 || k == kindInt8
}

// IsUUID reports whether typ is uuid.
func IsUUID(typ string) bool { return kindOf(typ) == kindUUID }

// IntRange is the range of an integer type (int2, int4, int8).
func IntRange(typ string) (lo, hi int64) {
	switch kindOf(typ) {
	case kindInt2:
		return math.MinInt16, math.MaxInt16
	case kindInt4:
		return math.MinInt32, math.MaxInt32
	}
	return math.MinInt64, math.MaxInt64
}

// ParseInt reads an integer of type typ (int2, int4, int8) as its input
// function does, with PostgreSQL's errors.
func ParseInt[T string | []byte](typ string, s T) (int64, error) {
	lo, hi := IntRange(typ)
	name := "bigint"
	switch kindOf(typ) {
	case kindInt2:
		name = "smallint"
	case kindInt4:
		name = "integer"
	}
	return parseInt(s, lo, hi, name)
}

// HashFunction is the SQL function that hashes a value of typ as a
// distribution column's (hashint8, hashtext, ...), "" if none.
func HashFunction(typ string) string {
	switch kindOf(typ) {
	case kindInt2:
		return "hashint2"
	case kindInt4:
		return "hashint4"
	case kindInt8:
		return "hashint8"
	case kindText:
		return "hashtext"
	case kindBPChar:
		return "hashbpchar"
	case kindUUID:
		return "uuid_hash"
	}
	return ""
}

// TypeOfOID names the built-in types a parameter may be declared with
// ("" for others; "unspecified" for 0).
func TypeOfOID(oid uint32) string {
	switch oid {
	case 0:
		return "unspecified"
	case 21:
		return "int2"
	case 23:
		return "int4"
	case 20:
		return "int8"
	case 25:
		return "text"
	case 1043:
		return "varchar"
	case 1042:
		return "bpchar"
	case 2950:
		return "uuid"
	case 1700:
		return "numeric"
	case 705:
		return "unknown"
	}
	return ""
}
