package pooling

import (
	"bytes"
	"encoding/binary"
	"sync/atomic"
)

// A type made by DDL on every worker (an enum, a composite, a domain, an
// extension's) has another OID on each: OIDs come from each server's own
// counter. Clients learn types from the default node's catalog (pgx's
// LoadType, psycopg's EnumInfo), so the OIDs they see and send are the
// default node's. TypeOIDs translates between them on a worker's
// connections: the type OIDs of RowDescription and ParameterDescription
// messages as they are read (worker to default node), and of Parse
// messages as they are written (TranslateParse, default node to worker).
// Not translated: OIDs inside binary values (an array's element type, a
// composite's field types).

// FirstNormalOID is the first OID a server gives user objects; lower ones
// are built in and the same everywhere.
const FirstNormalOID = 16384

// TypeOIDs is the translation for one worker's database, shared by its
// pools; the coordinator stores new tables when the types change.
type TypeOIDs struct {
	tables atomic.Pointer[OIDTables]
	// Miss, when set, is called with an OID of a user type the tables do
	// not hold (a type made since they were read): a worker's (in: in
	// In), or the default node's (in Out or Canon); it may store new
	// tables before it returns.
	Miss func(oid uint32, in bool)
	// RelMiss is Miss for the OID of a relation a RowDescription names,
	// or for its column col that the tables do not map (one added since).
	RelMiss func(oid uint32, col int16)
}

// OIDTables are a worker's type OIDs against the default node's, and its
// shards' relation OIDs against their tables'.
type OIDTables struct {
	In    map[uint32]uint32 // every user type of the worker: its OID, the default node's
	Out   map[uint32]uint32 // the default node's OID, the worker's, where they differ
	Canon map[uint32]bool   // every user type OID of the default node (and OIDs known to be unknown)
	// Rels: the worker's shards, by OID: their tables' on the default
	// node. Plain: the worker's other relations (and OIDs known to be
	// unknown), which RowDescriptions keep as they are.
	Rels  map[uint32]RelOID
	Plain map[uint32]bool
}

// RelOID is a shard's table on the default node: its OID, and its column
// numbers by the shard's (Cols[n-1] for the shard's column n; 0: none).
type RelOID struct {
	OID  uint32
	Cols []int16
}

// NoType stands, in Out, for a type of the default node's that the worker
// lacks while its OID names another type there: the worker reports an
// error for it rather than read the value as that other type.
const NoType = 0xFFFFFFFF

// Load returns the current tables (nil: none read yet).
func (t *TypeOIDs) Load() *OIDTables { return t.tables.Load() }

// Store replaces the tables.
func (t *TypeOIDs) Store(tb *OIDTables) { t.tables.Store(tb) }

// in maps a worker's type OID.
func (t *TypeOIDs) in(oid uint32) uint32 {
	if oid < FirstNormalOID {
		return oid
	}
	tb := t.tables.Load()
	if tb != nil {
		if o, ok := tb.In[oid]; ok {
			return o
		}
	}
	if t.Miss != nil {
		t.Miss(oid, true)
		if tb = t.tables.Load(); tb != nil {
			if o, ok := tb.In[oid]; ok {
				return o
			}
		}
	}
	return oid
}

// TranslateRowDescription translates, in place, a RowDescription body a
// worker sent on another connection than the pool's (pgx's, whose fields
// the coordinator encodes again), as translateIn does on the pool's.
func (t *TypeOIDs) TranslateRowDescription(body []byte) { t.translateIn('T', body) }

// rel maps a worker's relation OID and column number: ok when it is a
// shard's (the column then is its table's, 0 if none).
func (t *TypeOIDs) rel(oid uint32, col int16) (uint32, int16, bool) {
	tb := t.tables.Load()
	if tb != nil {
		if r, ok := tb.Rels[oid]; ok {
			if n, known := r.col(col); known {
				return r.OID, n, true
			}
		} else if tb.Plain[oid] {
			return 0, 0, false
		}
	}
	if t.RelMiss != nil {
		t.RelMiss(oid, col)
		if tb = t.tables.Load(); tb != nil {
			if r, ok := tb.Rels[oid]; ok {
				n, _ := r.col(col)
				return r.OID, n, true
			}
		}
	}
	return 0, 0, false
}

// col maps a shard's column number to its table's; known false for a
// column the tables do not map (added since they were read).
func (r RelOID) col(n int16) (int16, bool) {
	if n < 1 {
		return n, true // a system column (negative: the same on the table) or none
	}
	if int(n) > len(r.Cols) || r.Cols[n-1] == 0 {
		return 0, false
	}
	return r.Cols[n-1], true
}

// translateIn rewrites, in place, the type OIDs of a RowDescription ('T')
// or ParameterDescription ('t') body read from the worker, and a
// RowDescription's columns of shards (table OID and column number).
func (t *TypeOIDs) translateIn(typ byte, body []byte) {
	switch typ {
	case 't':
		if len(body) < 2 {
			return
		}
		n := int(binary.BigEndian.Uint16(body))
		for i, at := 0, 2; i < n && at+4 <= len(body); i, at = i+1, at+4 {
			if o := binary.BigEndian.Uint32(body[at:]); o >= FirstNormalOID {
				binary.BigEndian.PutUint32(body[at:], t.in(o))
			}
		}
	case 'T':
		if len(body) < 2 {
			return
		}
		n := int(binary.BigEndian.Uint16(body))
		at := 2
		for i := 0; i < n; i++ {
			for at < len(body) && body[at] != 0 {
				at++ // the column's name
			}
			at++ // its terminator; then table OID (4), column number (2)
			if at+6 > len(body) {
				return
			}
			if o := binary.BigEndian.Uint32(body[at:]); o >= FirstNormalOID {
				// A shard's column is its table's, as PostgreSQL names
				// it to a client (JDBC's getTableName, isAutoIncrement).
				if to, n, ok := t.rel(o, int16(binary.BigEndian.Uint16(body[at+4:]))); ok {
					binary.BigEndian.PutUint32(body[at:], to)
					binary.BigEndian.PutUint16(body[at+4:], uint16(n))
				}
			}
			at += 6
			if at+4 > len(body) {
				return
			}
			if o := binary.BigEndian.Uint32(body[at:]); o >= FirstNormalOID {
				binary.BigEndian.PutUint32(body[at:], t.in(o))
			}
			at += 4 + 2 + 4 + 2 // type OID, size, modifier, format
		}
	}
}

// out maps a default node's type OID to the worker's (ok false: the
// same, or a type the worker does not have).
func (t *TypeOIDs) out(oid uint32) (uint32, bool) {
	tb := t.tables.Load()
	if tb != nil {
		if w, ok := tb.Out[oid]; ok {
			return w, true
		}
		if tb.Canon[oid] {
			return oid, false // the same on the worker
		}
	}
	if t.Miss != nil {
		t.Miss(oid, false)
		if tb = t.tables.Load(); tb != nil {
			w, ok := tb.Out[oid]
			return w, ok
		}
	}
	return oid, false
}

// parseBody translates the parameter type OIDs of a Parse body, in place
// or (copy) in a copy; it returns the body to send.
func (t *TypeOIDs) parseBody(body []byte, copy bool) []byte {
	at := 0
	for k := 0; k < 2; k++ { // the statement's name, its text
		i := bytes.IndexByte(body[at:], 0)
		if i < 0 {
			return body
		}
		at += i + 1
	}
	if at+2 > len(body) {
		return body
	}
	n := int(binary.BigEndian.Uint16(body[at:]))
	at += 2
	for i := 0; i < n && at+4 <= len(body); i, at = i+1, at+4 {
		o := binary.BigEndian.Uint32(body[at:])
		if o < FirstNormalOID {
			continue
		}
		if w, ok := t.out(o); ok && w != o {
			if copy {
				body, copy = append([]byte(nil), body...), false
			}
			binary.BigEndian.PutUint32(body[at:], w)
		}
	}
	return body
}

// translateOut translates, in place, the Parse messages among the whole
// messages of buf (output to the worker); a message that goes on past
// buf (AppendLarge's header) ends the walk.
func (t *TypeOIDs) translateOut(buf []byte) {
	for at := 0; at+5 <= len(buf); {
		n := int(binary.BigEndian.Uint32(buf[at+1:]))
		if n < 4 || at+1+n > len(buf) {
			return
		}
		if buf[at] == 'P' {
			t.parseBody(buf[at+5:at+1+n], false)
		}
		at += 1 + n
	}
}

// Types returns the connection's translation (nil: none, the default
// node's or an unpooled connection).
func (c *ServerConn) Types() *TypeOIDs {
	if c.pool == nil {
		return nil
	}
	return c.pool.cfg.Types
}
