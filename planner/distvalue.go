package planner

import (
	"slices"
	"strconv"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"

	"github.com/pgfleet/pgfleet/metadata"
)

// Distribution values. A row lives in the shard of the hash of its
// distribution column's value as PostgreSQL stores it, so the router must
// hash the value PostgreSQL computes from the statement, not its text:
// 1.5e1::text is '15', ' 16'::int::text is '16', 'abcd   ' stored in a
// varchar(4) is 'abcd'. A Value says where the value comes from and what
// the coordinator needs to compute it: the forms it reads exactly as
// PostgreSQL does (a constant or parameter, at most cast once to a type of
// the column's family) are hashed by the coordinator; every other form
// (Expr) is evaluated by PostgreSQL, at run time, in the session's settings.

// Literal kinds of a constant Value (Value.Lit).
const (
	LitString  = ""        // a string literal: type unknown, read by the column's input function
	LitInteger = "integer" // an integer literal: int4, int8 or (too large) numeric
	LitNumeric = "numeric" // a literal with a decimal point or exponent: numeric
)

// typeName is a cast's type as pg_type names it ("" for an array or a
// type outside pg_catalog).
func typeName(tn *pg_query.TypeName) string {
	if tn == nil || len(tn.Names) == 0 || len(tn.ArrayBounds) > 0 {
		return ""
	}
	name := tn.Names[len(tn.Names)-1].GetString_().GetSval()
	if len(tn.Names) == 2 && tn.Names[0].GetString_().GetSval() != "pg_catalog" {
		return "" // a type of another schema: a domain, perhaps
	}
	return name
}

// distValue reads the distribution value of column type colType from n,
// the other side of an equality (assign false) or the value an INSERT
// stores (assign true). It returns nil when n is not a value the router can
// use: an expression with columns, functions or operators, or (for an
// equality) a value whose type PostgreSQL compares with the column by an
// equality other than the column's own (a float, or a bpchar against a
// varchar column), so that rows of several shards could match.
func distValue(version int32, n *pg_query.Node, colType string, assign bool) *Value {
	v, cmpType, ok := readValue(n, colType)
	if !ok {
		return nil
	}
	if v.Null {
		return v
	}
	if !assign && cmpType != "" && !metadata.Comparable(colType, cmpType) {
		return nil
	}
	v.Assign = assign
	// Expr is the value as PostgreSQL computes it, for when the router
	// cannot: its one parameter (if any) is $1.
	c := proto.Clone(n).(*pg_query.Node)
	params := 0
	Walk(c, func(m proto.Message) {
		if p, ok := m.(*pg_query.ParamRef); ok {
			params++
			if v.Param == 0 {
				v.Param = int(p.Number)
			}
			if int(p.Number) != v.Param {
				params = 99
			}
			p.Number = 1
		}
	})
	if params > 1 {
		return nil // two parameters: no value the router can compute
	}
	if v.Computed {
		Walk(c, func(m proto.Message) {
			tc, ok := m.(*pg_query.TypeCast)
			if !ok || tc.TypeName == nil {
				return
			}
			var parts []string
			for _, n := range tc.TypeName.Names {
				parts = append(parts, n.GetString_().GetSval())
			}
			t := strings.Join(parts, ".")
			if len(tc.TypeName.ArrayBounds) > 0 {
				t += "[]"
			}
			if !slices.Contains(v.Casts, t) {
				v.Casts = append(v.Casts, t)
			}
		})
	}
	expr, err := deparseExpr(version, c)
	if err != nil {
		return nil
	}
	v.Expr = expr
	return v
}

// readValue classifies a distribution value: a constant or parameter, cast
// at most once (without a type modifier) to a type of the column's family,
// which the router reads itself, or another expression of constants, one
// parameter and casts (Computed), which PostgreSQL evaluates. cmpType is
// the value's static type: "" for a parameter (known at Bind) or an
// untyped string (read by the column's input function).
func readValue(n *pg_query.Node, colType string) (v *Value, cmpType string, ok bool) {
	if tc := n.GetTypeCast(); tc != nil {
		t := typeName(tc.TypeName)
		if t == "" {
			return nil, "", false
		}
		inner, _, ok := readValue(tc.Arg, colType)
		if !ok {
			return nil, "", false
		}
		if inner.Null {
			return inner, t, true
		}
		if inner.Computed || inner.Cast != "" || len(tc.TypeName.Typmods) > 0 || !metadata.SameFamily(colType, t) {
			return &Value{Param: inner.Param, Computed: true}, t, true
		}
		inner.Cast = t
		return inner, t, true
	}
	if e := n.GetAExpr(); e != nil && e.Lexpr == nil && e.Kind == pg_query.A_Expr_Kind_AEXPR_OP &&
		len(e.Name) == 1 && e.Name[0].GetString_().GetSval() == "-" {
		// A negative number: -7 parses as the operator minus on 7.
		inner, t, ok := readValue(e.Rexpr, colType)
		switch {
		case !ok || inner.Null:
			return nil, "", false
		case inner.Param == 0 && !inner.Computed && inner.Cast == "" && inner.Lit != LitString &&
			!strings.HasPrefix(inner.Const, "-"):
			inner.Const = "-" + inner.Const
			if isDigits(inner.Const[1:]) {
				if _, err := strconv.ParseInt(inner.Const, 10, 64); err == nil {
					inner.Lit, t = LitInteger, "int8" // -9223372036854775808 is an int8
				}
			}
			return inner, t, true
		case t != "":
			return &Value{Param: inner.Param, Computed: true}, t, true
		}
		return nil, "", false
	}
	if p := n.GetParamRef(); p != nil {
		return &Value{Param: int(p.Number)}, "", true
	}
	c := n.GetAConst()
	if c == nil {
		return nil, "", false
	}
	if c.Isnull {
		return &Value{Null: true}, "", true
	}
	switch x := c.Val.(type) {
	case *pg_query.A_Const_Ival:
		return &Value{Const: itoa(int64(x.Ival.Ival)), Lit: LitInteger}, "int4", true
	case *pg_query.A_Const_Sval:
		return &Value{Const: x.Sval.Sval}, "", true
	case *pg_query.A_Const_Fval:
		// PostgreSQL reads integers beyond int4 as int8, or numeric.
		if _, err := strconv.ParseInt(x.Fval.Fval, 10, 64); err == nil && isDigits(strings.TrimPrefix(x.Fval.Fval, "-")) {
			return &Value{Const: x.Fval.Fval, Lit: LitInteger}, "int8", true
		}
		return &Value{Const: x.Fval.Fval, Lit: LitNumeric}, "numeric", true
	}
	return nil, "", false
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func itoa(v int64) string {
	var b [24]byte
	i := len(b)
	neg := v < 0
	u := uint64(v)
	if neg {
		u = uint64(-v)
	}
	for {
		i--
		b[i] = byte('0' + u%10)
		u /= 10
		if u == 0 {
			break
		}
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}

// zeroParam reports whether sql refers to parameter $0, which parses but
// which no statement can have.
func zeroParam(sql string, tree *pg_query.ParseResult) bool {
	if !strings.Contains(sql, "$0") {
		return false
	}
	found := false
	for _, raw := range tree.Stmts {
		Walk(raw.Stmt, func(m proto.Message) {
			if p, ok := m.(*pg_query.ParamRef); ok && p.Number <= 0 {
				found = true
			}
		})
	}
	return found
}

// pg16Number reports whether sql holds, at a numeric constant's location, a
// literal PostgreSQL 16 reads and PostgreSQL 15 rejects ("trailing junk
// after numeric literal"): hexadecimal, octal or binary integers (0x64) and
// digits with underscores (1_000).
func pg16Number(sql string, tree *pg_query.ParseResult) bool {
	found := false
	for _, raw := range tree.Stmts {
		Walk(raw.Stmt, func(m proto.Message) {
			c, ok := m.(*pg_query.A_Const)
			if !ok || found || c.Location < 0 || int(c.Location) >= len(sql) {
				return
			}
			switch c.Val.(type) {
			case *pg_query.A_Const_Ival, *pg_query.A_Const_Fval:
			default:
				return
			}
			i := int(c.Location)
			if sql[i] == '-' { // a negative constant, folded by the parser
				for i++; i < len(sql) && (sql[i] == ' ' || sql[i] == '\t' || sql[i] == '\n' || sql[i] == '\r'); i++ {
				}
			}
			if i+1 < len(sql) && sql[i] == '0' && strings.ContainsRune("xXoObB", rune(sql[i+1])) {
				found = true
				return
			}
			for ; i < len(sql) && (sql[i] >= '0' && sql[i] <= '9' || sql[i] == '.' || sql[i] == '_'); i++ {
				if sql[i] == '_' {
					found = true
					return
				}
			}
		})
	}
	return found
}

// countParam counts the uses of parameter $k in stmt.
func countParam(stmt *pg_query.Node, k int) int {
	n := 0
	Walk(stmt, func(m proto.Message) {
		if p, ok := m.(*pg_query.ParamRef); ok && int(p.Number) == k {
			n++
		}
	})
	return n
}

// bareParamUses counts the ANDed equalities of a distribution column with
// $k itself (no cast): uses whose type PostgreSQL takes from the column.
func (b *builder) bareParamUses(quals []*pg_query.Node, k int) int {
	var conj []*pg_query.Node
	for _, q := range quals {
		conj = flattenAnd(q, conj)
	}
	n := 0
	for _, c := range conj {
		e := c.GetAExpr()
		if e == nil || e.Kind != pg_query.A_Expr_Kind_AEXPR_OP || len(e.Name) != 1 || e.Name[0].GetString_().GetSval() != "=" {
			continue
		}
		_, lok := b.distColumn(e.Lexpr)
		_, rok := b.distColumn(e.Rexpr)
		if lok && int(e.Rexpr.GetParamRef().GetNumber()) == k || rok && int(e.Lexpr.GetParamRef().GetNumber()) == k {
			n++
		}
	}
	return n
}
