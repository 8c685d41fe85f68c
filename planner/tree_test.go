package planner

import (
	"os"
	"strings"
	"testing"
)

// TestTreeGolden: plans printed as trees (Format, what EXPLAIN's plan
// reading and the architecture notes show) for testdata/tree.golden's
// queries. Each case is "=== comment", the query, "---", the tree; run
// with -rewrite to regenerate. Every primitive appears in some case.
func TestTreeGolden(t *testing.T) {
	const file = "testdata/tree.golden"
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	cat := testCatalog()
	var out strings.Builder
	seen := map[Kind]bool{}
	cases := strings.Split(strings.TrimPrefix(string(raw), "=== "), "\n=== ")
	if len(cases) < 2 {
		t.Fatalf("%s: no cases", file)
	}
	for _, c := range cases {
		comment, rest, _ := strings.Cut(c, "\n")
		query, want, ok := strings.Cut(rest, "\n---")
		if !ok {
			t.Fatalf("%s: case %q has no ---", file, comment)
		}
		var got string
		p, err := Build(query, cat)
		if err != nil {
			got = "error: " + err.Error()
		} else {
			got = Format(p)
			seen[p.Kind()] = true
		}
		fmtCase(&out, comment, query, got)
		if !*rewrite && got != strings.TrimSpace(want) {
			t.Errorf("%s: %s\nquery: %s\n got:\n%s\nwant:\n%s", file, comment, query, got, strings.TrimSpace(want))
		}
	}
	for _, k := range []Kind{KindDefault, KindRouter, KindReferenceRead, KindReferenceWrite, KindInsertSplit, KindCopyIn,
		KindMultiShard, KindMultiShardWrite, KindCopyOut, KindFunction} {
		if !seen[k] {
			t.Errorf("%s: no case plans a %s", file, k)
		}
	}
	if *rewrite {
		if err := os.WriteFile(file, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func fmtCase(out *strings.Builder, comment, query, tree string) {
	if out.Len() > 0 {
		out.WriteString("\n")
	}
	out.WriteString("=== " + comment + "\n" + query + "\n---\n" + tree + "\n")
}
