package difftest

import (
	"math/rand/v2"
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
	// A switch that is not a known bug runs by default (a fix that drops
	// it from knownBug turns it on).
	for _, name := range switches {
		if _, bug := knownBug[name]; !bug && !f.on(name) {
			t.Errorf("feature %s is neither a known bug nor on by default", name)
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
