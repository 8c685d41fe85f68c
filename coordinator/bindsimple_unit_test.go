package coordinator

import "testing"

// TestLiteralType: a lifted constant is bound only as a number typed as
// PostgreSQL's parser types it (int4 while it fits, then int8; a short
// decimal numeric); strings, exponents, long decimals, integers beyond
// int8 and collapsed IN lists are not.
func TestLiteralType(t *testing.T) {
	for _, tc := range []struct {
		l    literal
		want byte
	}{
		{literal{token: "0"}, 'i'}, {literal{token: "2147483647"}, 'i'}, {literal{token: "002147483647"}, 'i'},
		{literal{token: "2147483648"}, 'l'}, {literal{token: "9223372036854775807"}, 'l'},
		{literal{token: "9223372036854775808"}, 0}, {literal{token: "1.5"}, 'n'}, {literal{token: "1."}, 'n'},
		{literal{token: "12345678901234.567"}, 'n'}, {literal{token: "1234567890123456.789"}, 0},
		{literal{token: "0.000000000000000001"}, 0}, {literal{token: "1e5"}, 0}, {literal{token: "2.5E-3"}, 0},
		{literal{token: "1.2.3"}, 0}, {literal{token: "'abc'", value: "abc"}, 0}, {literal{token: "''"}, 0},
		{literal{token: "1, 2, 3", list: true}, 0}, {literal{token: "7", list: true}, 0}, {literal{token: ""}, 0},
	} {
		if got := literalType(tc.l); got != tc.want {
			t.Errorf("literalType(%+v) = %q, want %q", tc.l, got, tc.want)
		}
	}
}

// TestSumFits: a sum of two constants is bound only if they are integers
// that PostgreSQL adds without error in their type (int4, int8 if either
// is).
func TestSumFits(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		op   byte
		want bool
	}{
		{"100", "999", '+', true},
		{"2147483647", "1", '+', false},
		{"2147483647", "1", '-', true},
		{"0", "2147483647", '-', true},
		{"2147483648", "1", '+', true}, // int8
		{"9223372036854775807", "1", '+', false},
		{"9223372036854775807", "1", '-', true},
		{"1", "9223372036854775807", '-', true},
		{"9223372036854775808", "1", '+', false}, // numeric
		{"1.5", "2147483647", '+', false},
		{"1.5", "1.5", '+', false},
		{"'1'", "2", '+', false},
		{"1, 2", "2", '+', false},
	} {
		if got := sumFits(literal{token: tc.a}, literal{token: tc.b}, tc.op); got != tc.want {
			t.Errorf("%s %c %s: fits %v, want %v", tc.a, tc.op, tc.b, got, tc.want)
		}
	}
}
