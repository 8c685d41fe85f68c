package coordinator

import (
	"slices"
	"testing"
)

func TestParseTextArray(t *testing.T) {
	str := func(s string) *string { return &s }
	for _, tc := range []struct {
		in   string
		want []*string
		ok   bool
	}{
		{"{}", nil, true},
		{"{NULL}", []*string{nil}, true},
		{`{""}`, []*string{str("")}, true},
		{`{a,NULL,"",5}`, []*string{str("a"), nil, str(""), str("5")}, true},
		{`{"a b","x,y","q\"r","b\\s","NULL"}`, []*string{str("a b"), str("x,y"), str(`q"r`), str(`b\s`), str("NULL")}, true},
		{`{"} | {"}`, []*string{str("} | {")}, true},
		{"{a", nil, false}, {"a}", nil, false}, {"{a,}", nil, false}, {`{"a}`, nil, false}, {"{a}x", nil, false},
		{"{{a}}", nil, false}, {"", nil, false},
	} {
		got, ok := parseTextArray(tc.in)
		if ok != tc.ok || ok && !slices.EqualFunc(got, tc.want, func(a, b *string) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }) {
			t.Errorf("parseTextArray(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestDefinedOnly(t *testing.T) {
	names := `{"app.a","app.b"}`
	for _, tc := range []struct {
		base, now string
		want      []string
		ok        bool
	}{
		{"{} | {NULL,NULL}", `{} | {"",NULL}`, []string{"app.a"}, true},
		{"{} | {NULL,NULL}", `{} | {"",""}`, []string{"app.a", "app.b"}, true},
		{`{} | {NULL,x}`, `{} | {NULL,x}`, nil, true},
		{"{} | {NULL,NULL}", "{} | {5,NULL}", nil, false},              // a value: pin
		{`{} | {"",NULL}`, "{} | {NULL,NULL}", nil, false},             // (cannot happen; not adopted)
		{`{} | {x,NULL}`, `{} | {"",NULL}`, nil, false},                // a value reset
		{"{work_mem=4MB} | {NULL,NULL}", `{} | {"",NULL}`, nil, false}, // another setting changed
		{`{"a=x | {NULL,NULL}"} | {NULL,NULL}`, `{"a=x | {NULL,NULL}"} | {"",NULL}`, []string{"app.a"}, true},
		{"{} | {NULL}", `{} | {""}`, nil, false}, // not the names' count
		{"garbage", "garbage2", nil, false},
	} {
		got, ok := definedOnly(tc.now, tc.base, names)
		if ok != tc.ok || !slices.Equal(got, tc.want) {
			t.Errorf("definedOnly(%q, %q) = %v, %v; want %v, %v", tc.now, tc.base, got, ok, tc.want, tc.ok)
		}
	}
	if got, ok := definedOnly("{} | {}", "{} | {}", "{}"); !ok || got != nil {
		t.Errorf("no names: %v, %v", got, ok)
	}
}
