package difftest

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestGeneratorDeterministic: a seed gives the same schema and statements,
// which is what makes a printed seed reproduce a failure.
func TestGeneratorDeterministic(t *testing.T) {
	draw := func(seed uint64) []string {
		r := rand.New(rand.NewPCG(seed, 1))
		f := defaultFeatures()
		_ = f.apply("all", "")
		g := &gen{r: r, f: f, s: genSchema(r), set: settings{}}
		var out []string
		for i := range 500 {
			st := g.next()
			out = append(out, st.describe())
			g.inTx = i%7 < 3 // exercise both transaction states
		}
		return out
	}
	a, b := draw(7), draw(7)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("statement %d differs between two draws of seed 7:\n%s\n%s", i, a[i], b[i])
		}
	}
}

// TestFeatures: every known-bug feature is off by default and every family
// can be named.
func TestFeatures(t *testing.T) {
	f := defaultFeatures()
	for name := range knownBug {
		if f.on(name) {
			t.Errorf("known-bug feature %s is on by default", name)
		}
	}
	// Every switch is a known feature, on by default unless it reaches a
	// known bug (a fixed class must stay exercised).
	for _, name := range switches {
		if _, known := f[name]; !known {
			t.Errorf("feature %s is not known to -enable", name)
		}
		if knownBug[name] == "" && !f.on(name) {
			t.Errorf("feature %s is off by default but not a known bug", name)
		}
	}
	for name := range knownBug {
		if !slices.Contains(switches, name) {
			t.Errorf("known-bug feature %s is not in switches", name)
		}
	}
	if err := f.apply("chain,latin1", "insert"); err != nil {
		t.Fatal(err)
	}
	if !f.on("chain") || !f.on("latin1") || f.on("insert") {
		t.Errorf("apply: %v", f)
	}
	if err := f.apply("no-such-feature", ""); err == nil {
		t.Error("unknown feature accepted")
	}
}
