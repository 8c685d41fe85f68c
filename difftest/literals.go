package difftest

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// protocol is how a statement is sent.
type protocol int

const (
	simpleProto   protocol = iota // Query message
	extendedProto                 // Parse/Bind/Describe/Execute/Sync (pgconn.ExecParams)
	copyProto                     // Query with COPY FROM STDIN, then CopyData
	preparedProto                 // a named statement, prepared once and executed several times
)

func (p protocol) String() string {
	return [...]string{"simple", "extended", "copy", "prepared"}[p]
}

// param is one bound parameter of an extended-protocol statement.
type param struct {
	oid    uint32
	format int16 // 0 text, 1 binary
	val    value // text: sent in the client encoding; binary: encoded per oid
	// redraw draws another value for the same slot (prepared statements
	// executed again).
	redraw func() value
}

// builder renders values into a statement, as literals in one of many
// spellings or, in the extended protocol, as parameters of a chosen
// declared type and format.
type builder struct {
	g        *gen
	extended bool
	params   []param
	keys     []value // the key pool of the table whose key is being rendered
}

// key renders a value compared with or stored into a key column.
func (b *builder) key(t colType, v value) string { return b.render(t, v, true) }

// val renders a value for a non-key column.
func (b *builder) val(t colType, v value) string { return b.render(t, v, false) }

func (b *builder) render(t colType, v value, isKey bool) string {
	r := b.g.r
	if b.extended && b.g.f.on(featParamCast) && isKey && t.isString() && r.IntN(3) == 0 {
		if k := b.g.randKeyOf(b.keys, value{}); k.s != "" {
			// PostgreSQL reads ' 16' as the integer 16, whose text is '16':
			// the key is the converted value, not the parameter's text.
			spell := func(k value) value {
				return value{s: []string{" " + k.s, "0" + k.s, k.s + " ", "+" + k.s}[r.IntN(4)]}
			}
			keys := b.keys
			b.params = append(b.params, param{oid: oidUnknown, val: spell(k),
				redraw: func() value { return spell(b.g.randKeyOf(keys, k)) }})
			return fmt.Sprintf("$%d::int::%s", len(b.params), t.sql())
		}
	}
	if b.extended && r.IntN(10) < 7 {
		if p, ok := b.param(t, v, isKey); ok {
			keys := b.keys
			p.redraw = func() value {
				if isKey && len(keys) > 0 {
					return keys[r.IntN(len(keys))]
				}
				return genValue(r, t, !isKey)
			}
			b.params = append(b.params, p)
			ref := fmt.Sprintf("$%d", len(b.params))
			return ref
		}
	}
	return b.literal(t, v, isKey)
}

// param picks a declared type and format for v as a value of t.
func (b *builder) param(t colType, v value, isKey bool) (param, bool) {
	r := b.g.r
	f := b.g.f
	if v.null {
		return param{oid: t.oid(), val: v}, true
	}
	oids := []uint32{t.oid(), t.oid(), oidUnknown}
	switch {
	case t.isInt():
		for _, o := range []uint32{oidInt2, oidInt4, oidInt8} {
			if o != t.oid() {
				oids = append(oids, o)
			}
		}
		oids = append(oids, oidNumeric)
	case t.k == kText || t.k == kVarchar:
		oids = append(oids, oidText, oidVarchar)
		if f.on(featBPCharParam) || !isKey {
			oids = append(oids, oidBPChar)
		}
	case t.k == kBPChar:
		oids = append(oids, oidText, oidVarchar)
	}
	oid := oids[r.IntN(len(oids))]
	if t.k == kVarchar && t.n > 0 && oid != oidBPChar && len([]rune(v.s)) > t.n {
		return param{}, false
	}
	p := param{oid: oid, val: v}
	if oid == oidBPChar && t.k != kBPChar && isKey {
		p.val.s += "  " // as bpchar, the same value
	}
	if oid != oidUnknown && r.IntN(2) == 0 {
		cross := oid != t.oid() && !(t.isString() && (oid == oidText || oid == oidVarchar) && t.k != kBPChar)
		if !cross || f.on(featBinaryCrossType) {
			if _, ok := encodeBinary(oid, v, false); ok {
				p.format = 1
			}
		}
	}
	if p.format == 0 && (oid == oidInt2 || oid == oidInt4) {
		// A text value out of the declared type's range is 22003 on both
		// sides; keep it, but not often.
		if _, ok := encodeBinary(oid, v, false); !ok && r.IntN(4) != 0 {
			p.oid = t.oid()
		}
	}
	return p, true
}

// literal spells v as SQL text.
func (b *builder) literal(t colType, v value, isKey bool) string {
	if v.null {
		return []string{"NULL", "NULL::" + t.sql()}[b.g.r.IntN(2)]
	}
	r := b.g.r
	f := b.g.f
	scs := b.g.set.scs()
	q := func(s string) string { return quoteLit(s, scs) }
	pick := func(c ...string) string { return c[r.IntN(len(c))] }
	s := v.s
	switch t.k {
	case kInt2, kInt4, kInt8:
		// -2147483648::int4 is -(2147483648::int4): out of range. Such an
		// error in one row of a multi-row INSERT races the other rows'
		// errors (see featErrorOrder); parenthesized it is the value.
		cs := s
		if strings.HasPrefix(s, "-") && !f.on(featErrorOrder) {
			cs = "(" + s + ")"
		}
		c := []string{s, s, q(s), q("  " + s + " "), cs + "::" + t.sql(), "CAST(" + s + " AS int8)", "(" + s + ")"}
		if !strings.HasPrefix(s, "-") {
			c = append(c, "+"+s)
		}
		if i, _ := strconv.ParseInt(s, 10, 64); i == int64(int32(i)) {
			c = append(c, cs+"::int4")
		}
		if f.on(featNumericIntLit) {
			i, _ := strconv.ParseInt(s, 10, 64)
			frac := fmt.Sprintf("%d.3", i)
			if i > 0 {
				frac = fmt.Sprintf("%d.7", i-1)
			}
			c = append(c, s+".0", s+"e0", "CAST("+frac+" AS "+t.sql()+")", frac+"::"+t.sql())
		}
		if f.on(featCastChain) {
			c = append(c, q(" "+s)+"::int8::"+t.sql(), s+"::text::"+t.sql())
		}
		return pick(c...)
	case kText, kVarchar, kBPChar:
		c := []string{q(s), q(s), quoteE(r, s), q(s) + "::" + t.sql(), "CAST(" + q(s) + " AS " + t.sql() + ")"}
		if t.k == kBPChar || (!isKey && t.k == kText) {
			c = append(c, q(s+"  "), q(s)+"::bpchar")
		}
		if t.k == kText && isKey && f.on(featBPCharParam) {
			c = append(c, q(s+" ")+"::bpchar", q(s)+"::char("+strconv.Itoa(len([]rune(s))+2)+")")
		}
		if t.k == kVarchar && t.n > 0 && f.on(featVarcharPad) && len([]rune(s)) == t.n {
			c = append(c, q(s+"   "))
		}
		if f.on(featCastChain) {
			if isIntText(s) {
				c = append(c, q(" "+s)+"::int::text", s+"::text", s+"::int8::"+t.sql())
			}
			// Split after the first character, not byte: half a UTF-8
			// sequence is not text (22021 on both sides, which is not
			// what this spelling is for).
			if _, n := utf8.DecodeRuneInString(s); len(s) > n {
				c = append(c, "("+q(s[:n])+" || "+q(s[n:])+")")
			}
		}
		return pick(c...)
	case kUUID:
		u, _ := parseUUID(s)
		h := strings.ReplaceAll(s, "-", "")
		_ = u
		return pick(q(s), q(strings.ToUpper(s)), q("{"+s+"}"), q(h), q(s)+"::uuid", "CAST("+q(s)+" AS uuid)")
	case kNumeric:
		return pick(s, q(s), s+"::numeric", "CAST("+q(s)+" AS numeric)")
	case kFloat8:
		if _, err := strconv.ParseFloat(s, 64); err == nil && !strings.ContainsAny(s, "IN") {
			return pick(s, q(s), q(s)+"::float8", s+"::float8")
		}
		return pick(q(s), q(s)+"::float8")
	case kBool:
		if s == "true" {
			return pick("true", "TRUE", q("t"), q("yes"), q("on"), q("1")+"::bool")
		}
		return pick("false", q("f"), q("no"), q("off"), q("0")+"::bool")
	case kDate:
		c := []string{q(s), "DATE " + q(s), q(s) + "::date"}
		if f.on(featZonelessTZ) {
			c = append(c, q(s[5:7]+"/"+s[8:10]+"/"+s[0:4]))
		}
		return pick(c...)
	case kTimestamp:
		c := []string{q(s), "TIMESTAMP " + q(s), q(strings.Replace(s, " ", "T", 1))}
		if f.on(featZonelessTZ) && len(s) >= 10 {
			c = append(c, q(s[5:7]+"/"+s[8:10]+"/"+s[0:4]+s[10:]))
		}
		return pick(c...)
	case kTimestamptz:
		c := []string{q(s), q(s) + "::timestamptz", "TIMESTAMPTZ " + q(s)}
		if f.on(featZonelessTZ) {
			i := strings.LastIndexAny(s, "+-")
			c = append(c, q(s[:i]), q(s[:i])+"::timestamptz")
		}
		return pick(c...)
	case kInterval:
		if f.on(featZonelessTZ) && r.IntN(4) == 0 {
			// Read differently under IntervalStyle sql_standard.
			return q("-1 mon 2 days")
		}
		return pick(q(s), "INTERVAL "+q(s), q(s)+"::interval")
	}
	panic("unknown kind")
}

func isIntText(s string) bool {
	if s == "" || len(s) > 9 {
		return false
	}
	for i, c := range s {
		if c < '0' || c > '9' || (i == 0 && c == '0' && len(s) > 1) {
			return false
		}
	}
	return true
}
