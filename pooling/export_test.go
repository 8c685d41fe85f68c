package pooling

import "time"

// Watched reports whether c's socket is watched for the worker's close.
func Watched(c *ServerConn) bool { return c.watchID != 0 }

// HungUp reports whether the watcher has seen the worker close c.
func HungUp(c *ServerConn) bool { return c.hungUp.Load() }

// UsedAt sets when c was last released.
func UsedAt(c *ServerConn, t time.Time) { c.lastUsed = t }
