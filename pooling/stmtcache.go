package pooling

// StmtCache remembers which statements a server connection has prepared, under
// pgfleet's own statement names, and evicts the least recently used when it
// is full. The caller closes evicted statements on the server.
type StmtCache struct {
	max   int
	clock uint64
	used  map[string]uint64
}

func newStmtCache(max int) *StmtCache {
	if max <= 0 {
		max = 512
	}
	return &StmtCache{max: max, used: make(map[string]uint64, 16)}
}

// Has reports whether name is prepared, and marks it used.
func (c *StmtCache) Has(name string) bool {
	if _, ok := c.used[name]; ok {
		c.clock++
		c.used[name] = c.clock
		return true
	}
	return false
}

// Add records name as prepared. If the cache was full it returns the least
// recently used other name, which the caller must close on the server.
func (c *StmtCache) Add(name string) (evicted string) {
	if len(c.used) >= c.max {
		var oldest uint64 = ^uint64(0)
		for n, u := range c.used {
			if u < oldest {
				oldest, evicted = u, n
			}
		}
		delete(c.used, evicted)
	}
	c.clock++
	c.used[name] = c.clock
	return evicted
}

// Drop forgets name (its Parse failed or was skipped after an error).
func (c *StmtCache) Drop(name string) { delete(c.used, name) }

// Len is the number of cached statements.
func (c *StmtCache) Len() int { return len(c.used) }

// Clear forgets everything (the server ran DISCARD ALL or DEALLOCATE ALL).
func (c *StmtCache) Clear() { clear(c.used) }

// Restore puts back a name whose eviction the server skipped, without
// evicting another (the cache may briefly hold one more than its bound).
func (c *StmtCache) Restore(name string) {
	c.clock++
	c.used[name] = c.clock
}
