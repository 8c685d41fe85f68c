package coordinator

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// A session whose search_path is not plainly public (SET search_path =
// nothere, public; a tenant schema before public) may still find a
// distributed table, named without its schema, in public: PostgreSQL is
// asked (the default node, under the session's search_path and role, in
// a transaction rolled back) where each such name resolves, and the plan,
// which took the names as public's, stands when every one resolves there.
// Otherwise the statement is refused (checkPath). The answers are kept per
// search_path, role and name until the catalog or this coordinator's DDL
// changes.

type pathKey struct{ path, user, name string }

type pathCache struct {
	mu    sync.Mutex
	stamp [2]int64
	at    time.Time // answers older than pathTTL are asked again
	m     map[pathKey]bool
}

// pathTTL bounds how long an answer stands: a table made through another
// coordinator of the fleet, or on the workers directly, moves no catalog
// version here.
const pathTTL = 2 * time.Second

// userSchemas: whether a schema of each role's name exists, as of at.
type userSchemas struct {
	stamp [2]int64
	at    time.Time
	m     map[string]bool
}

// userSchema reports whether a schema named user exists on the default
// node, where the default search_path ("$user", public) would look first.
// Read without a lock; asked again after a catalog change, this
// coordinator's DDL or pathTTL.
func (s *Server) userSchema(user string) bool {
	var stamp [2]int64
	if snap := s.catalog.Load(); snap != nil {
		stamp[0] = snap.Version
	}
	stamp[1] = s.ddlEpoch.Load()
	cur := s.userSchemas.Load()
	fresh := cur != nil && cur.stamp == stamp && time.Since(cur.at) < pathTTL
	v, known := false, false
	if cur != nil {
		v, known = cur.m[user]
	}
	if fresh && known {
		return v
	}
	if s.metaPool == nil {
		return false
	}
	if !s.userSchemaMu.TryLock() {
		if known {
			return v // another session is asking: the answer of a moment ago
		}
		s.userSchemaMu.Lock()
	}
	defer s.userSchemaMu.Unlock()
	if cur = s.userSchemas.Load(); cur != nil && cur.stamp == stamp && time.Since(cur.at) < pathTTL {
		if v, ok := cur.m[user]; ok {
			return v
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var exists bool
	if err := s.metaPool.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname = $1)", user).Scan(&exists); err != nil {
		return true // not known: look the names up
	}
	next := &userSchemas{stamp: stamp, at: time.Now(), m: map[string]bool{user: exists}}
	if cur != nil && cur.stamp == stamp && time.Since(cur.at) < pathTTL {
		next.at = cur.at
		for k, v := range cur.m {
			next.m[k] = v
		}
		next.m[user] = exists
	}
	s.userSchemas.Store(next)
	return exists
}

// resolveToPublic reports whether every name resolves to a table in
// public under search_path setting pathSQL for user.
func (s *Server) resolveToPublic(pathSQL, user string, names []string) bool {
	if pathSQL == "" || s.metaPool == nil {
		return false
	}
	var stamp [2]int64
	if snap := s.catalog.Load(); snap != nil {
		stamp[0] = snap.Version
	}
	stamp[1] = s.ddlEpoch.Load()
	c := &s.paths
	c.mu.Lock()
	if c.stamp != stamp || len(c.m) > 4096 || time.Since(c.at) > pathTTL {
		c.stamp, c.at, c.m = stamp, time.Now(), map[pathKey]bool{}
	}
	var ask []string
	for _, n := range names {
		public, ok := c.m[pathKey{pathSQL, user, n}]
		if ok && !public {
			c.mu.Unlock()
			return false
		}
		if !ok {
			ask = append(ask, n)
		}
	}
	c.mu.Unlock()
	if len(ask) == 0 {
		return true
	}
	got, err := s.askSchemas(pathSQL, user, ask)
	if err != nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	all := true
	for i, n := range ask {
		public := got[i] == "public"
		if c.stamp == stamp {
			c.m[pathKey{pathSQL, user, n}] = public
		}
		all = all && public
	}
	return all
}

// askSchemas asks the default node where each name resolves under the
// search_path and role ("" for nowhere).
func (s *Server) askSchemas(pathSQL, user string, names []string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tx, err := s.metaPool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+pgx.Identifier{user}.Sanitize()); err != nil {
		return nil, err
	}
	// The session's own SET statement, undone by the rollback.
	if _, err := tx.Exec(ctx, pathSQL); err != nil {
		return nil, err
	}
	out := make([]string, len(names))
	for i, n := range names {
		var schema *string
		err := tx.QueryRow(ctx, `SELECT n.nspname::text FROM pg_catalog.pg_class c
			JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = pg_catalog.to_regclass($1)`, n).Scan(&schema)
		if err != nil && err != pgx.ErrNoRows {
			return nil, err
		}
		if schema != nil {
			out[i] = strings.Clone(*schema)
		}
	}
	return out, nil
}
