package pooling

import "testing"

func TestStmtCacheEvictsLeastRecentlyUsed(t *testing.T) {
	c := newStmtCache(3)
	steps := []struct {
		op, name string
		want     string // evicted name for add, "true"/"false" for has
	}{
		{"add", "a", ""},
		{"add", "b", ""},
		{"add", "c", ""},
		{"has", "a", "true"}, // a is now the most recently used
		{"add", "d", "b"},
		{"has", "b", "false"},
		{"add", "e", "c"},
		{"drop", "a", ""},
		{"add", "f", ""},
		{"has", "d", "true"},
		{"has", "e", "true"},
		{"has", "f", "true"},
	}
	for i, s := range steps {
		var got string
		switch s.op {
		case "add":
			got = c.Add(s.name)
		case "has":
			got = "false"
			if c.Has(s.name) {
				got = "true"
			}
		case "drop":
			c.Drop(s.name)
		}
		if got != s.want {
			t.Fatalf("step %d: %s(%s) = %q, want %q", i, s.op, s.name, got, s.want)
		}
	}
	if c.Len() != 3 {
		t.Errorf("len %d, want 3", c.Len())
	}
	c.Clear()
	if c.Len() != 0 || c.Has("d") {
		t.Error("Clear kept entries")
	}
}
