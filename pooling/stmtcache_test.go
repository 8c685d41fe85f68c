package pooling

import (
	"sync/atomic"
	"testing"
)

func TestStmtCacheEvictsLeastRecentlyUsed(t *testing.T) {
	c := newStmtCache(3, nil)
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
	c := newStmtCache(4, nil)
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

// TestStmtCacheEpoch: a statement prepared before the DDL epoch advanced is
// no longer found, and Add reports the connection's copy for a Close.
func TestStmtCacheEpoch(t *testing.T) {
	var epoch atomic.Int64
	c := newStmtCache(4, &epoch)
	c.Add("a", "k")
	if !c.Has("a", "k") {
		t.Fatal("a not found in its epoch")
	}
	epoch.Add(1)
	if c.Has("a", "k") {
		t.Error("a found after the epoch advanced")
	}
	if _, stale := c.Add("a", "k"); !stale {
		t.Error("Add of a prepared before the epoch: not reported stale (its Close would be missing)")
	}
	if !c.Has("a", "k") {
		t.Error("a not found after it was prepared again")
	}
}
