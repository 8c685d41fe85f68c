package coordinator

import (
	"context"
	"encoding/binary"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/pooling"
)

// Type OIDs across workers (pooling/types.go): every worker's database
// gets a pooling.TypeOIDs, shared by its pools, whose tables map the
// worker's user types to the default node's by schema and name (a shard's
// row type, t_102008, to its table's, t). They are read from pg_type on
// every active node when a connection meets an OID they do not hold (a
// type made since), at most every typesEvery per database; an OID no node
// names the same stays as it is.

const typesEvery = 200 * time.Millisecond

// typesKey names one worker's database.
type typesKey struct{ addr, db string }

// typesDB is the reading state of one database's tables.
type typesDB struct {
	mu   sync.Mutex
	last time.Time
}

// typeOIDs returns the translation of a worker's database, making it on
// first use (the caller holds s.mu).
func (s *Server) typeOIDs(addr, db string) *pooling.TypeOIDs {
	k := typesKey{addr, db}
	if t := s.types[k]; t != nil {
		return t
	}
	if s.types == nil {
		s.types = map[typesKey]*pooling.TypeOIDs{}
		s.typesDBs = map[string]*typesDB{}
	}
	d := s.typesDBs[db]
	if d == nil {
		d = &typesDB{}
		s.typesDBs[db] = d
	}
	t := &pooling.TypeOIDs{}
	t.Miss = func(oid uint32, in bool) { s.typesMiss(d, db, t, oid, in) }
	t.RelMiss = func(oid uint32, col int16) { s.relsMiss(d, db, t, oid, col) }
	s.types[k] = t
	return t
}

// describedAs translates, in place, the RowDescription message at the
// start of frames, made from what node answered on a connection of the
// coordinator's own (pgx's): its type OIDs and shards' columns become the
// default node's, as on the pools' connections.
func (s *Server) describedAs(node int32, db string, frames []byte) {
	if len(frames) < 5 || frames[0] != 'T' {
		return
	}
	n := int(binary.BigEndian.Uint32(frames[1:]))
	if n < 4 || 1+n > len(frames) {
		return
	}
	s.mu.Lock()
	t := s.typeOIDs(s.nodeAddr(node), db)
	s.mu.Unlock()
	t.TranslateRowDescription(frames[5 : 1+n])
}

// oidsStale drops the tables, so that the next OID looked up has them read
// at once (DDL ran, or the catalog changed: a type or column made, a shard
// moved). Dropping them, not only the wait, matters: what they hold may
// be wrong now without any OID missing (a reading that met the DDL's
// commit halfway matched a shard's renamed columns to the table's old
// names), and an OID taken for unknown (a type made in a block, read
// before its commit) stays so until the tables are read again.
func (s *Server) oidsStale() {
	s.mu.Lock()
	dbs := maps.Clone(s.typesDBs)
	ts := maps.Clone(s.types)
	s.mu.Unlock()
	for db, d := range dbs {
		d.mu.Lock() // (a reading under way stores its tables first)
		d.last = time.Time{}
		for k, t := range ts {
			if k.db == db {
				t.Store(nil)
			}
		}
		d.mu.Unlock()
	}
}

// relsMiss is typesMiss for a relation OID, or a shard's column the
// tables do not map: the tables are read again (at most every
// typesEvery), and an OID no shard has is kept as it is.
func (s *Server) relsMiss(d *typesDB, db string, t *pooling.TypeOIDs, oid uint32, col int16) {
	d.mu.Lock()
	defer d.mu.Unlock()
	tb, ok := s.reread(d, db, t, func(tb *pooling.OIDTables) bool {
		r, shard := tb.Rels[oid]
		return shard && col >= 1 && int(col) <= len(r.Cols) && r.Cols[col-1] != 0 || tb.Plain[oid]
	}, "reading type and relation OIDs of the workers (columns of shards are shown with each worker's own OIDs)")
	if _, shard := tb.Rels[oid]; ok || shard {
		return // a shard's column still unknown: 0 until a later reading
	}
	nt := *tb
	nt.Plain = maps.Clone(tb.Plain)
	if nt.Plain == nil {
		nt.Plain = map[uint32]bool{}
	}
	nt.Plain[oid] = true
	t.Store(&nt)
}

// reread reads db's tables again for a miss (known says whether tables
// hold it) unless another session's reading brought it meanwhile or the
// tables were read within typesEvery; it returns t's tables after it and
// whether they hold the miss now. d.mu is held.
func (s *Server) reread(d *typesDB, db string, t *pooling.TypeOIDs, known func(*pooling.OIDTables) bool, warn string) (*pooling.OIDTables, bool) {
	if tb := t.Load(); tb != nil && known(tb) {
		return tb, true
	}
	if time.Since(d.last) >= typesEvery {
		d.last = time.Now()
		if err := s.readTypes(db); err != nil {
			s.log.Warn(warn, "database", db, "err", err)
		}
	}
	tb := t.Load()
	if tb == nil {
		tb = &pooling.OIDTables{}
	}
	return tb, known(tb)
}

// typeKnown reports whether tb maps oid in its direction: a worker's OID
// (in) only by In, since the default node may use the same number for
// another type (an adversary saw a new enum described as an older one);
// a default node's by Out, or Canon when the worker's is the same.
func typeKnown(tb *pooling.OIDTables, oid uint32, in bool) bool {
	if in {
		_, ok := tb.In[oid]
		return ok
	}
	_, ok := tb.Out[oid]
	return ok || tb.Canon[oid]
}

// typesMiss reads the database's tables again for an OID t does not hold
// in its direction (in: a worker's, which only In maps; a default node's
// OID of the same number is another type), unless they were read within
// typesEvery; an OID still unknown then is kept as it is from now on
// (until the next reading, or oidsStale).
func (s *Server) typesMiss(d *typesDB, db string, t *pooling.TypeOIDs, oid uint32, in bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	tb, ok := s.reread(d, db, t, func(tb *pooling.OIDTables) bool { return typeKnown(tb, oid, in) }, "reading type OIDs of the workers (user types are shown with each worker's own OIDs)")
	if ok {
		return
	}
	// Unknown: kept as it is, in its direction.
	nt := &pooling.OIDTables{In: tb.In, Out: tb.Out, Canon: tb.Canon, Rels: tb.Rels, Plain: tb.Plain}
	if in {
		nt.In = maps.Clone(tb.In)
		if nt.In == nil {
			nt.In = map[uint32]uint32{}
		}
		nt.In[oid] = oid
	} else {
		nt.Canon = maps.Clone(tb.Canon)
		if nt.Canon == nil {
			nt.Canon = map[uint32]bool{}
		}
		nt.Canon[oid] = true
	}
	t.Store(nt)
}

const typesSQL = `SELECT t.oid, n.nspname, t.typname FROM pg_catalog.pg_type t
  JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
 WHERE t.oid >= 16384 AND n.nspname NOT LIKE 'pg\_temp\_%' AND n.nspname NOT LIKE 'pg\_toast\_temp\_%'`

// relsSQL reads a node's relations with their columns' names by number
// (a dropped column's name is PostgreSQL's placeholder).
const relsSQL = `SELECT c.oid, n.nspname, c.relname,
       ARRAY(SELECT a.attname::text FROM pg_catalog.pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 ORDER BY a.attnum)
  FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 WHERE c.oid >= 16384 AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
   AND n.nspname NOT LIKE 'pg\_temp\_%' AND n.nspname NOT LIKE 'pg\_toast\_temp\_%'`

// named is an object's schema and name.
type named struct{ nsp, name string }

// relation is one row of relsSQL.
type relation struct {
	oid  uint32
	cols []string
}

// readTypes reads the user types of database db on every active node and
// stores each node's tables.
func (s *Server) readTypes(db string) error {
	snap := s.catalog.Load()
	if snap == nil {
		return nil
	}
	// Short: a session that met an unknown OID waits for this (a worker
	// out of reach leaves the OID as it is).
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	byNode := map[string]map[named]uint32{}
	relsByNode := map[string]map[named]relation{}
	for _, n := range snap.Nodes {
		if !n.Active {
			continue
		}
		c, err := s.directConnDB(ctx, n.Addr(), db)
		if err != nil {
			return err
		}
		rows, err := c.Query(ctx, typesSQL)
		m := map[named]uint32{}
		if err == nil {
			for rows.Next() {
				var oid uint32
				var k named
				if err = rows.Scan(&oid, &k.nsp, &k.name); err != nil {
					break
				}
				m[k] = oid
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		rels := map[named]relation{}
		if err == nil {
			rels, err = readRelations(ctx, c)
		}
		c.Close(context.Background())
		if err != nil {
			return err
		}
		byNode[n.Addr()] = m
		relsByNode[n.Addr()] = rels
	}
	canon := byNode[s.nodeAddr(s.defaultNode.Load())]
	canonRels := relsByNode[s.nodeAddr(s.defaultNode.Load())]
	if canon == nil {
		return nil
	}
	ids := map[int64]string{}
	for table, shards := range snap.Shards {
		for _, sh := range shards {
			ids[sh.ID] = table
		}
	}
	// rowType is the table's row type (in its schema) of a shard's row type
	// (arrays with the "_" prefix), or ok false.
	rowType := func(k named, prefix string) (named, bool) {
		base, table := unshard(strings.TrimPrefix(k.name, prefix), ids)
		if t := snap.Tables[table]; t != nil && len(k.name) > len(prefix) && strings.HasPrefix(k.name, prefix) && k.nsp == t.ShardsIn() {
			return named{t.Schema(), prefix + base}, true
		}
		return named{}, false
	}
	for addr, m := range byNode {
		tb := &pooling.OIDTables{In: make(map[uint32]uint32, len(m)), Out: map[uint32]uint32{}, Canon: make(map[uint32]bool, len(canon))}
		for k, oid := range m {
			// A shard's row type (or its array's) is its table's (the
			// default node holds shards too); any other type the default
			// node's of its name.
			var c uint32
			ok := false
			if t, is := rowType(k, ""); is {
				c, ok = canon[t]
			} else if t, is := rowType(k, "_"); is {
				c, ok = canon[t]
			}
			if !ok {
				c, ok = canon[k]
			}
			if !ok {
				c = oid
			}
			tb.In[oid] = c
		}
		for k, c := range canon {
			tb.Canon[c] = true
			if w, ok := m[k]; ok && w != c {
				tb.Out[c] = w
			} else if _, taken := tb.In[c]; !ok && taken {
				tb.Out[c] = pooling.NoType
			}
		}
		tb.Rels, tb.Plain = map[uint32]pooling.RelOID{}, map[uint32]bool{}
		for k, r := range relsByNode[addr] {
			// A shard's columns are its table's, by name.
			if t, is := rowType(k, ""); is {
				if base, ok := canonRels[t]; ok {
					cols := make([]int16, len(r.cols))
					for i, c := range r.cols {
						if j := slices.Index(base.cols, c); j >= 0 {
							cols[i] = int16(j + 1)
						}
					}
					tb.Rels[r.oid] = pooling.RelOID{OID: base.oid, Cols: cols}
					continue
				}
			}
			tb.Plain[r.oid] = true
		}
		s.mu.Lock()
		t := s.typeOIDs(addr, db)
		s.mu.Unlock()
		t.Store(tb)
	}
	return nil
}

// readRelations runs relsSQL.
func readRelations(ctx context.Context, c *pgx.Conn) (map[named]relation, error) {
	rows, err := c.Query(ctx, relsSQL)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[named]relation{}
	for rows.Next() {
		var r relation
		var k named
		if err := rows.Scan(&r.oid, &k.nsp, &k.name, &r.cols); err != nil {
			return nil, err
		}
		out[k] = r
	}
	return out, rows.Err()
}

// directConnDB is directConn to database db.
func (s *Server) directConnDB(ctx context.Context, addr, db string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(s.cfg.WorkerTLS.ConnString(addr) + " connect_timeout=10")
	if err != nil {
		return nil, err
	}
	pw := s.cfg.Users["postgres"]
	if pw == "" {
		pw = s.cfg.WorkerPassword
	}
	cfg.User, cfg.Database, cfg.Password = "postgres", db, pw
	// The superuser resolves names in pg_catalog only (see catalogPath),
	// as itself (a database's owner may have set another default role).
	cfg.RuntimeParams["search_path"] = "pg_catalog, pg_temp"
	cfg.RuntimeParams["role"] = "none"
	return pgx.ConnectConfig(ctx, cfg)
}
