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

func TestCustomChanges(t *testing.T) {
	names := []string{"app.a", "app.b"}
	show := func(cs []customChange) string {
		out := ""
		for _, c := range cs {
			v := func(p *string) string {
				if p == nil {
					return "NULL"
				}
				return "'" + *p + "'"
			}
			out += c.name + ":" + v(c.was) + ">" + v(c.now) + " "
		}
		return out
	}
	for _, tc := range []struct {
		base, now    string
		want         string
		head, parsed bool
	}{
		{"{} | {NULL,NULL}", `{} | {"",NULL}`, "app.a:NULL>'' ", true, true},
		{"{} | {NULL,NULL}", `{} | {"",5}`, "app.a:NULL>'' app.b:NULL>'5' ", true, true},
		{`{} | {NULL,x}`, `{} | {NULL,x}`, "", true, true},
		{`{} | {x,NULL}`, `{} | {"",NULL}`, "app.a:'x'>'' ", true, true},
		{`{} | {x,NULL}`, `{} | {NULL,NULL}`, "app.a:'x'>NULL ", true, true},
		{"{work_mem=4MB} | {NULL,NULL}", `{} | {"",NULL}`, "app.a:NULL>'' ", false, true},
		{`{"a=x | {NULL,NULL}"} | {NULL,NULL}`, `{"a=x | {NULL,NULL}"} | {"a,b",NULL}`, "app.a:NULL>'a,b' ", true, true},
		{"{} | {NULL}", `{} | {""}`, "", false, false}, // not the names' count
		{"garbage", "garbage2", "", false, false},
	} {
		got, head, parsed := customChanges(tc.now, tc.base, names)
		if parsed != tc.parsed || parsed && (head != tc.head || show(got) != tc.want) {
			t.Errorf("customChanges(%q, %q) = %q, %v, %v; want %q, %v, %v", tc.now, tc.base, show(got), head, parsed, tc.want, tc.head, tc.parsed)
		}
	}
	if got, head, ok := customChanges("{} | {}", "{} | {}", nil); !ok || !head || got != nil {
		t.Errorf("no names: %v, %v, %v", got, head, ok)
	}
}
