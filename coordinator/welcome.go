package coordinator

import (
	"context"
	"errors"
	"maps"
	"sync"
	"time"

	"github.com/pgfleet/pgfleet/pooling"
)

// A session's startup takes a server connection of its database and user
// to apply its startup settings, to read the ParameterStatus values it
// reports to the client and the search_path the role or database sets,
// and so to surface a missing database or a bad setting at connect time.
// It does not wait for one (pooling.Pool.AcquireNow): when the pool has
// none free now, the startup answers with what the last startup of the
// same pool and settings read, if that is younger than welcomeMaxAge and
// no session's DDL has ended on this coordinator since; only without such
// a record does it wait. A login that waited could wait for transactions
// that wait for the same client: pgbench -C connects from the thread that
// drives its other clients, whose transactions hold the pool and each
// other's row locks until pgbench sends their next statements (all of its
// logins timed out with 53300). PgBouncer answers every login from the
// first server connection's values.

// welcomeMaxAge bounds how old a startup's record may be to answer another.
const welcomeMaxAge = time.Minute

// welcomeKeep bounds the records kept: past it, old ones go first.
const welcomeKeep = 1024

// welcomeKey names a startup's pool and its settings (sessionParams.key).
type welcomeKey struct {
	pool   *pooling.Pool
	params string
}

// welcomeRecord is what a startup read.
type welcomeRecord struct {
	params   map[string]string // ParameterStatus values
	rolePath string            // sessionParams.rolePath, "" for the default
	// tempPath: the role's or database's search_path names pg_temp (in
	// any database: tempPath, session.go).
	tempPath bool
	at       time.Time
	epoch    int64 // Server.stmtEpoch then
}

type welcomes struct {
	mu sync.Mutex
	m  map[welcomeKey]*welcomeRecord
}

// welcome takes a connection for the session's startup, applies its
// settings and reads what the startup reports, or, when none is free now,
// returns an earlier startup's record (see above). The connection is held
// (ss.sc) when one was taken.
func (ss *session) welcome(ctx context.Context) (*welcomeRecord, error) {
	s := ss.srv
	err := ss.acquire(ctx, s.defaultNode.Load())
	if errors.Is(err, pooling.ErrBusy) {
		if w := s.welcomes.lookup(welcomeKey{ss.pool, ss.params.key}, s.stmtEpoch.Load()); w != nil {
			s.metrics.welcomesReused.Inc()
			return w, nil
		}
		ss.startupWait = true
		err = ss.acquire(ctx, s.defaultNode.Load())
	}
	if err != nil {
		return nil, err
	}
	w := &welcomeRecord{params: maps.Clone(ss.sc.Params), at: time.Now(), epoch: s.stmtEpoch.Load()}
	// A search_path the role or database sets (ALTER ROLE ... SET):
	// unqualified names are looked up under it (searchpath.go), and one
	// naming pg_temp makes CREATE TABLE make temporary tables.
	if rows, err := ss.sc.Query("SELECT pg_catalog.current_setting('search_path')", time.Now().Add(s.cfg.StartupTimeout)); err == nil &&
		len(rows) == 1 && len(rows[0]) == 1 && rows[0][0] != `"$user", public` {
		w.tempPath = namesTempSchema(rows[0][0])
		if ss.routes {
			w.rolePath = "SET search_path = " + rows[0][0]
		}
	}
	s.welcomes.note(welcomeKey{ss.pool, ss.params.key}, w)
	return w, nil
}

// lookup returns k's record when it may answer a startup now.
func (ws *welcomes) lookup(k welcomeKey, epoch int64) *welcomeRecord {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w := ws.m[k]
	if w == nil || w.epoch != epoch || time.Since(w.at) > welcomeMaxAge {
		return nil
	}
	return w
}

// note keeps w as k's record.
func (ws *welcomes) note(k welcomeKey, w *welcomeRecord) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.m == nil {
		ws.m = map[welcomeKey]*welcomeRecord{}
	}
	if _, ok := ws.m[k]; !ok && len(ws.m) >= welcomeKeep {
		for old, x := range ws.m {
			if time.Since(x.at) > welcomeMaxAge {
				delete(ws.m, old)
			}
		}
		if len(ws.m) >= welcomeKeep {
			clear(ws.m)
		}
	}
	ws.m[k] = w
}

// refreshPools makes every pool open new connections (pooling.Pool.Refresh)
// and forgets the startups' records, after a statement that changed what a
// login gets (ALTER ROLE ... SET, NOLOGIN, REVOKE CONNECT, ...): PostgreSQL
// applies those at login, so connections opened before would serve new
// sessions with the old settings and privileges. The other coordinators
// are told too (refreshFleet). Changes made on a worker directly are seen
// when the connections opened before them reach --server-lifetime.
func (s *Server) refreshPools() {
	s.mu.Lock()
	pools := make([]*pooling.Pool, 0, len(s.pools))
	for _, p := range s.pools {
		pools = append(pools, p)
	}
	s.mu.Unlock()
	for _, p := range pools {
		p.Refresh()
	}
	s.welcomes.mu.Lock()
	clear(s.welcomes.m)
	s.welcomes.mu.Unlock()
}

// refreshFleetWait bounds the wait for the other coordinators' refresh.
const refreshFleetWait = 2 * time.Second

// refreshFleet has every other coordinator of the fleet refresh its pools
// (refreshPools) and waits for them, so that a login anywhere after the
// client is answered gets the change. One that does not confirm in time
// is logged; its connections opened before stay until --server-lifetime.
func (s *Server) refreshFleet() {
	f := s.fleet.Load()
	if f == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), refreshFleetWait)
	defer cancel()
	if err := f.Logins(ctx); err != nil {
		s.log.Warn("a role or database change was not confirmed by every coordinator: their connections opened before it serve new logins until --server-lifetime", "err", err)
	}
}
