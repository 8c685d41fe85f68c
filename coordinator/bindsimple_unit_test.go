package coordinator

import "testing"

// TestLiteralType: a lifted constant is typed as PostgreSQL's parser types
// it (int4 while it fits, then int8, then numeric; unknown for a string),
// and anything else is not bound.
func TestLiteralType(t *testing.T) {
	for tok, want := range map[string]byte{
		"0": 'i', "2147483647": 'i', "002147483647": 'i', "2147483648": 'l',
		"9223372036854775807": 'l', "9223372036854775808": 'n', "1.5": 'n', "1.": 'n', "1e5": 'n', "2.5E-3": 'n',
		"'abc'": 's', "''": 's', "'it''s'": 's', "1, 2, 3": 0, "": 0, "x": 0,
	} {
		if got := literalType(literal{token: tok}); got != want {
			t.Errorf("literalType(%q) = %q, want %q", tok, got, want)
		}
	}
}

// TestSumFits: a sum of two constants is bound only if PostgreSQL computes
// it without error in its type (int4, int8 if either is, numeric).
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
		{"9223372036854775808", "1", '+', true}, // numeric
		{"1.5", "2147483647", '+', true},
		{"'1'", "2", '+', false},
		{"1, 2", "2", '+', false},
	} {
		if got := sumFits(literal{token: tc.a}, literal{token: tc.b}, tc.op); got != tc.want {
			t.Errorf("%s %c %s: fits %v, want %v", tc.a, tc.op, tc.b, got, tc.want)
		}
	}
}
