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
			got, _ = c.Add(s.name, "k")
		case "has":
			got = "false"
			if c.Has(s.name, "k") {
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
	if c.Len() != 0 || c.Has("d", "k") {
		t.Error("Clear kept entries")
	}
}

func TestStmtCacheKeysBySettings(t *testing.T) {
	c := newStmtCache(4)
	if ev, stale := c.Add("s", "tz=utc"); ev != "" || stale {
		t.Fatalf("first Add: %q %v", ev, stale)
	}
	if !c.Has("s", "tz=utc") || c.Has("s", "tz=tokyo") {
		t.Fatal("Has must match only the settings the statement was parsed under")
	}
	if _, stale := c.Add("s", "tz=tokyo"); !stale {
		t.Fatal("re-adding under other settings must ask for a Close first")
	}
	if c.Has("s", "tz=utc") || !c.Has("s", "tz=tokyo") {
		t.Fatal("after re-adding, only the new settings match")
	}
	c.Add("u", UnknownKey)
	if c.Has("u", UnknownKey) {
		t.Fatal("an entry of unknown settings must never match")
	}
	c.Doubt("s")
	if c.Has("s", "tz=tokyo") {
		t.Fatal("a doubted entry must not match")
	}
	if _, stale := c.Add("s", "tz=tokyo"); !stale {
		t.Fatal("a doubted entry must be closed before its Parse")
	}
}
