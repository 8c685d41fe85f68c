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
	"github.com/pgfleet/pgfleet/pooling"
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
// coordinator's DDL or pathTTL. err: the node could not be asked.
func (s *Server) userSchema(user string) (bool, error) {
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
		return v, nil
	}
	if s.metaPool == nil {
		return false, nil
	}
	if !s.userSchemaMu.TryLock() {
		if known {
			return v, nil // another session is asking: the answer of a moment ago
		}
		s.userSchemaMu.Lock()
	}
	defer s.userSchemaMu.Unlock()
	if cur = s.userSchemas.Load(); cur != nil && cur.stamp == stamp && time.Since(cur.at) < pathTTL {
		if v, ok := cur.m[user]; ok {
			return v, nil
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var exists bool
	if err := s.askMeta(ctx, func() error {
		return s.metaPool.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname = $1)", user).Scan(&exists)
	}); err != nil {
		return true, err
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
	return exists, nil
}

// resolveToPublic reports whether every name resolves to a table in
// public under search_path setting pathSQL for user; err: the default node
// could not be asked.
func (s *Server) resolveToPublic(pathSQL, user string, names []string) (bool, error) {
	if pathSQL == "" || s.metaPool == nil {
		return false, nil
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
			return false, nil
		}
		if !ok {
			ask = append(ask, n)
		}
	}
	c.mu.Unlock()
	if len(ask) == 0 {
		return true, nil
	}
	got, err := s.askSchemas(pathSQL, user, ask)
	if err != nil {
		return false, err
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
	return all, nil
}

// askSchemas asks the default node where each name resolves under the
// search_path and role ("" for nowhere).
func (s *Server) askSchemas(pathSQL, user string, names []string) (out []string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = s.askMeta(ctx, func() (err error) {
		out, err = s.askSchemasOn(ctx, pathSQL, user, names)
		return err
	})
	return out, err
}

func (s *Server) askSchemasOn(ctx context.Context, pathSQL, user string, names []string) ([]string, error) {
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

// ownAnswer is what the session's connection said, at setGen gen,
// ReadyForQuery count cycle and nameGen names: its current_schema() (where
// CREATE puts an unqualified name) and, per name, whether it resolves to
// public's table.
type ownAnswer struct {
	gen, cycle, names uint64
	current           string
	public            map[string]bool
}

// touchesPath reports whether ops may change how names resolve: SET, SET
// LOCAL, RESET of search_path, RESET ALL, DISCARD ALL, SET LOCAL ROLE or
// SESSION AUTHORIZATION ("$user").
func touchesPath(ops []paramOp) bool {
	for _, op := range ops {
		switch {
		case op.name == "search_path", op.name == "role", op.name == "session", op.name == "session_authorization",
			op.kind == opResetAll, op.kind == opDiscardAll:
			return true
		}
	}
	return false
}

// namesOnOwn reports whether unqualified names may resolve on the session's
// connection otherwise than on a pooled one in its settings: a change of
// search_path or role the session made in this transaction or query
// (touchesPath) or where pgfleet cannot follow (set_config(), SET ROLE), a
// table or schema made in its transaction (DDL), user code that ran in it
// (a function may SET LOCAL), a pinned connection's temporary tables.
func (ss *session) namesOnOwn() bool {
	return ss.settingsUnknown && !ss.namesBeforePin || ss.pathTouched || ss.sc != nil && (ss.ddlSent || ss.verifyState || ss.tempObjects)
}

// ownResolve asks the session's connection to the default node (where the
// tables' shells are) where each name resolves and what its current schema
// is, once per settings change, ReadyForQuery, and statement that may make
// tables or run user code. A session whose
// transaction holds no connection there made nothing there: its own
// connection is asked for its search_path and role, and the names are
// looked up under them on the default node. While the connection is busy
// with the client's pipeline, or the session holds none, the answer is not
// known (ok false).
func (ss *session) ownResolve(names []string) (*ownAnswer, bool, error) {
	a := &ss.own
	if a.gen != ss.setGen || a.cycle != ss.cycles || a.names != ss.nameGen {
		*a = ownAnswer{gen: ss.setGen, cycle: ss.cycles, names: ss.nameGen}
	}
	var ask []string
	for _, n := range names {
		if _, known := a.public[n]; !known {
			ask = append(ask, n)
		}
	}
	if a.public != nil && len(ask) == 0 {
		return a, true, nil
	}
	sc, onDefault := ss.ownConn()
	if sc == nil {
		return nil, false, nil
	}
	public := make([]bool, len(ask))
	current := ""
	if onDefault {
		q := "SELECT pg_catalog.current_schema()::text"
		for _, n := range ask {
			q += ", (SELECT n.nspname::text FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace" +
				" WHERE c.oid = pg_catalog.to_regclass(pg_catalog.quote_ident(" + escapedLiteral(n) + ")))"
		}
		row, err := ss.askOwn(sc, q)
		if err != nil || len(row) != 1+len(ask) {
			return nil, false, err
		}
		current = string(row[0])
		for i := range ask {
			public[i] = string(row[1+i]) == "public"
		}
	} else {
		row, err := ss.askOwn(sc, "SELECT pg_catalog.current_setting('search_path'), CURRENT_USER::text")
		if err != nil || len(row) != 2 {
			return nil, false, err
		}
		path, user := "SET search_path = "+string(row[0]), string(row[1])
		if publicPath(path) {
			own := false
			if strings.Contains(path, "$user") {
				if own, err = ss.srv.userSchema(user); err != nil {
					return nil, false, err
				}
			}
			if !own {
				current = "public"
			}
		}
		for i, n := range ask {
			if public[i], err = ss.srv.resolveToPublic(path, user, []string{n}); err != nil {
				return nil, false, err
			}
		}
	}
	if a.public == nil {
		a.public = map[string]bool{}
	}
	a.current = current
	for i, n := range ask {
		a.public[n] = public[i]
	}
	return a, true, nil
}

// ownConn is the connection ownResolve asks, between the client's round
// trips: the session's to the default node (its transaction's), else the
// one it holds; nil if none is free.
func (ss *session) ownConn() (sc *pooling.ServerConn, onDefault bool) {
	if ss.qhead != len(ss.queue) || ss.needSync || ss.sc == nil || len(ss.sc.Buf()) > 0 {
		return nil, false
	}
	def := ss.srv.defaultNode.Load()
	if ss.node == def {
		return ss.sc, true
	}
	if i := ss.parkedOn(def); i >= 0 {
		// It has the SETs of search_path the block made since it was
		// parked first (on the current worker only until then: a name
		// resolved by the old path read another schema's table).
		if ss.catchUp(i) != nil {
			return nil, false
		}
		return ss.parked[i].sc, true
	}
	return ss.sc, false
}

// escapedLiteral is s as an escape string constant (E'...'), read alike whatever
// standard_conforming_strings is.
func escapedLiteral(s string) string {
	return "E'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// askOwn runs a one-row query on the session's connection, under names of
// its own (the client's unnamed statement and portal stay as they are),
// and returns the row (a NULL as empty). A worker's error comes back as
// *executor.WorkerError: in a failed transaction, the one a statement of
// the client's would get.
func (ss *session) askOwn(sc *pooling.ServerConn, query string) ([][]byte, error) {
	const name = "pgfleet.ask"
	b, _ := (&pgproto3.Parse{Name: name, Query: query}).Encode(sc.Buf())
	b, _ = (&pgproto3.Bind{DestinationPortal: name, PreparedStatement: name}).Encode(b)
	b, _ = (&pgproto3.Execute{Portal: name}).Encode(b)
	b, _ = (&pgproto3.Close{ObjectType: 'P', Name: name}).Encode(b)
	b, _ = (&pgproto3.Close{ObjectType: 'S', Name: name}).Encode(b)
	b, _ = (&pgproto3.Sync{}).Encode(b)
	sc.SetBuf(b)
	if err := sc.Flush(); err != nil {
		return nil, ss.lostServer(err)
	}
	var werr error
	var row [][]byte
	err := executor.Cycle(sc, func(typ byte, body []byte) {
		switch typ {
		case 'D':
			var dr pgproto3.DataRow
			if dr.Decode(body) == nil {
				row = make([][]byte, len(dr.Values))
				for i, v := range dr.Values {
					row[i] = bytes.Clone(v)
				}
			}
		case 'E':
			if werr == nil {
				werr = executor.NewWorkerError(body)
			}
		}
	})
	if err != nil {
		return nil, ss.lostServer(err)
	}
	return row, werr
}

// pathPublicNow reports whether the session puts an unqualified name it
// creates in public now.
func (ss *session) pathPublicNow() (bool, error) {
	if !ss.namesOnOwn() {
		return ss.params.pathPublic, nil
	}
	a, known, err := ss.ownResolve(nil)
	return known && a.current == "public", err
}
