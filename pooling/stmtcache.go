package pooling

import "sync/atomic"

// StmtCache remembers which statements a server connection has prepared, under
// pgfleet's own statement names, and the session settings each was parsed
// under, and evicts the least recently used when it is full. The caller
// closes evicted statements on the server.
//
// A statement's identity on a connection includes its settings: PostgreSQL
// folds constants (a timestamptz literal under TimeZone, a date under
// DateStyle) and resolves names (search_path) when it parses, so a statement
// parsed under other settings is another statement. Has answers true only
// for the same settings key; Add reports when the connection holds a copy
// parsed under other settings, which the caller closes before its Parse.
type StmtCache struct {
	max   int
	clock uint64
	used  map[string]stmtEntry
	// epoch, when set, advances after DDL: a statement prepared before
	// may have a plan PostgreSQL now refuses to use ("cached plan must
	// not change result type") where a client's new Parse would get a
	// fresh one, so Has no longer finds it and it is prepared again.
	epoch *atomic.Int64
}

type stmtEntry struct {
	used  uint64
	key   string // settings key it was parsed under (UnknownKey: unsure)
	epoch int64  // the DDL epoch it was parsed in
}

// UnknownKey is the settings key of a statement parsed under settings
// pgfleet does not know (a SET earlier in the same transaction or
// pipeline, a set_config() in a function), or of a name the server may or
// may not hold: such an entry never matches, and the next use closes and
// parses it again.
const UnknownKey = "\x00unknown"

func newStmtCache(max int, epoch *atomic.Int64) *StmtCache {
	if max <= 0 {
		max = 512
	}
	return &StmtCache{max: max, used: make(map[string]stmtEntry, 16), epoch: epoch}
}

func (c *StmtCache) now() int64 {
	if c.epoch == nil {
		return 0
	}
	return c.epoch.Load()
}

// Has reports whether name is prepared under settings key (in the current
// DDL epoch), and marks it used.
func (c *StmtCache) Has(name, key string) bool {
	if e, ok := c.used[name]; ok && e.key == key && key != UnknownKey && e.epoch == c.now() {
		c.clock++
		e.used = c.clock
		c.used[name] = e
		return true
	}
	return false
}

// Add records name as prepared under key. stale: the connection may still
// hold name parsed under other settings, which the caller must Close before
// its Parse. evicted: if the cache was full, the least recently used other
// name, which the caller must also close on the server.
func (c *StmtCache) Add(name, key string) (evicted string, stale bool) {
	_, stale = c.used[name]
	if !stale && len(c.used) >= c.max {
		var oldest uint64 = ^uint64(0)
		for n, e := range c.used {
			if e.used < oldest {
				oldest, evicted = e.used, n
			}
		}
		delete(c.used, evicted)
	}
	c.clock++
	c.used[name] = stmtEntry{used: c.clock, key: key, epoch: c.now()}
	return evicted, stale
}

// Drop forgets name (its Parse failed or was skipped after an error, and
// no Close of it was sent before).
func (c *StmtCache) Drop(name string) { delete(c.used, name) }

// Doubt records that the server may or may not hold name (a Close and Parse
// of it were skipped after an error): the next use closes it first.
func (c *StmtCache) Doubt(name string) {
	c.clock++
	c.used[name] = stmtEntry{used: c.clock, key: UnknownKey}
}

// Len is the number of cached statements.
func (c *StmtCache) Len() int { return len(c.used) }

// Clear forgets everything (the server ran DISCARD ALL or DEALLOCATE ALL).
func (c *StmtCache) Clear() { clear(c.used) }

// Restore puts back a name whose eviction the server skipped, without
// evicting another (the cache may briefly hold one more than its bound). Its
// settings are no longer known, so its next use prepares it again.
func (c *StmtCache) Restore(name string) { c.Doubt(name) }

// Retain forgets the names keep rejects (the server no longer holds them).
func (c *StmtCache) Retain(keep func(name string) bool) {
	for n := range c.used {
		if !keep(n) {
			delete(c.used, n)
		}
	}
}
