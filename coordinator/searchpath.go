package coordinator

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/executor"
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

// pathAnswer is what the session's connection said of its search_path
// and role, at setGen gen and ReadyForQuery count cycle.
type pathAnswer struct {
	gen, cycle uint64
	path, user string
}

// touchesPath reports whether ops may change search_path: SET, SET
// LOCAL, RESET of it, RESET ALL, DISCARD ALL.
func touchesPath(ops []paramOp) bool {
	for _, op := range ops {
		if op.name == "search_path" || op.kind == opResetAll || op.kind == opDiscardAll {
			return true
		}
	}
	return false
}

// pathAskSQL reads the connection's search_path and role, under names of
// its own: the client's unnamed statement and portal stay as they are.
var pathAskSQL = func() []byte {
	const name = "pgfleet.path"
	b, _ := (&pgproto3.Parse{Name: name, Query: "SELECT pg_catalog.current_setting('search_path'), CURRENT_USER::text"}).Encode(nil)
	b, _ = (&pgproto3.Bind{DestinationPortal: name, PreparedStatement: name}).Encode(b)
	b, _ = (&pgproto3.Execute{Portal: name}).Encode(b)
	b, _ = (&pgproto3.Close{ObjectType: 'P', Name: name}).Encode(b)
	b, _ = (&pgproto3.Close{ObjectType: 'S', Name: name}).Encode(b)
	b, _ = (&pgproto3.Sync{}).Encode(b)
	return b
}()

// askPath asks the session's connection for the search_path (as a SET
// statement) and role that unqualified names resolve by now: after a
// statement that may have changed them in the current transaction or query
// (SET LOCAL, a SET not committed yet), or where pgfleet cannot follow them
// (set_config(), SET ROLE). It asks once per change; while the connection
// is busy with the client's pipeline the answer is not known (ok false).
func (ss *session) askPath() (path, user string, ok bool, err error) {
	if a := ss.pathAsk; a.gen == ss.setGen && a.cycle == ss.cycles && a.path != "" {
		return a.path, a.user, true, nil
	}
	sc := ss.sc
	if sc == nil || ss.qhead != len(ss.queue) || ss.needSync || len(sc.Buf()) > 0 {
		return "", "", false, nil
	}
	sc.SetBuf(append(sc.Buf(), pathAskSQL...))
	if err := sc.Flush(); err != nil {
		return "", "", false, ss.lostServer(err)
	}
	var werr error
	var row [][]byte
	err = executor.Cycle(sc, func(typ byte, body []byte) {
		switch typ {
		case 'D':
			var dr pgproto3.DataRow
			if dr.Decode(body) == nil && len(dr.Values) == 2 {
				row = [][]byte{bytes.Clone(dr.Values[0]), bytes.Clone(dr.Values[1])}
			}
		case 'E':
			if werr == nil {
				werr = executor.NewWorkerError(body)
			}
		}
	})
	if err != nil {
		return "", "", false, ss.lostServer(err)
	}
	if werr != nil {
		return "", "", false, werr // a failed transaction: the statement fails as it would
	}
	if row == nil {
		return "", "", false, nil
	}
	ss.pathAsk = pathAnswer{gen: ss.setGen, cycle: ss.cycles, path: "SET search_path = " + string(row[0]), user: string(row[1])}
	return ss.pathAsk.path, ss.pathAsk.user, true, nil
}

// pathPublicNow reports whether the session's search_path now leaves
// unqualified names on public (publicPath).
func (ss *session) pathPublicNow() (bool, error) {
	if !ss.settingsUnknown && !ss.pathTouched {
		return ss.params.pathPublic, nil
	}
	path, _, known, err := ss.askPath()
	return known && publicPath(path), err
}
