package coordinator

import (
	"context"
	"strings"
	"time"
)

// A view (or materialized view) may call set_config(), an advisory lock
// function, setseed() or a user function: reading it changes the server
// connection's session state although the statement's text shows no call.
// Statements naming such a view are verified like user code (the session
// state snapshot, session.go). The views are read from the default node's
// catalog (pg_rewrite, pg_depend, through views over them), once per
// catalog version and DDL epoch of this coordinator; a view made through
// another coordinator is seen after this one's next DDL or catalog change.

// viewSet is the views, by lower-case bare name, whose reading may change
// session state; all is set when they could not be read (every statement
// is then verified).
type viewSet struct {
	stamp [3]int64
	names map[string]string
	all   bool
}

// viewCheck is a statement's verdict for one viewSet.
type viewCheck struct {
	set    *viewSet
	verify bool
}

const stateViewsSQL = `WITH RECURSIVE bad(oid) AS (
  SELECT r.ev_class FROM pg_catalog.pg_rewrite r JOIN pg_catalog.pg_class c ON c.oid = r.ev_class
   WHERE c.relkind IN ('v', 'm')
     AND (pg_catalog.pg_get_viewdef(c.oid) ~* '(set_config|advisory_lock|setseed|dblink_connect|lo_open|nextval|setval)'
          OR EXISTS (SELECT FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_proc p ON p.oid = d.refobjid
                      WHERE d.classid = 'pg_catalog.pg_rewrite'::regclass AND d.objid = r.oid
                        AND d.refclassid = 'pg_catalog.pg_proc'::regclass
                        AND p.pronamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)))
  UNION
  SELECT r.ev_class FROM pg_catalog.pg_rewrite r
    JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_rewrite'::regclass AND d.objid = r.oid
                               AND d.refclassid = 'pg_catalog.pg_class'::regclass
    JOIN bad ON bad.oid = d.refobjid
   WHERE r.ev_class <> d.refobjid)
SELECT DISTINCT pg_catalog.lower(c.relname::text) FROM pg_catalog.pg_class c JOIN bad ON bad.oid = c.oid`

// stateViews returns the current viewSet, reading it when this
// coordinator's catalog version or DDL epoch moved.
func (s *Server) stateViews() *viewSet {
	var stamp [3]int64
	if snap := s.catalog.Load(); snap != nil {
		stamp[0] = snap.Version
	}
	stamp[1], stamp[2] = s.ddlEpoch.Load(), s.viewEpoch.Load()
	if vs := s.views.Load(); vs != nil && vs.stamp == stamp {
		return vs
	}
	// One reading at a time: after a catalog change every session asks
	// at once, and each reading would take a metadata connection.
	s.viewsMu.Lock()
	defer s.viewsMu.Unlock()
	if vs := s.views.Load(); vs != nil && vs.stamp == stamp {
		return vs
	}
	vs := &viewSet{stamp: stamp, names: map[string]string{}}
	if s.metaPool == nil {
		s.views.Store(vs)
		return vs
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := s.metaPool.Query(ctx, stateViewsSQL)
	if err == nil {
		for rows.Next() {
			var n string
			if err = rows.Scan(&n); err != nil {
				break
			}
			vs.names[n] = n
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	if err != nil {
		vs.all = true
	}
	s.views.Store(vs)
	return vs
}

// viewVerify reports whether q names a view whose reading may change
// session state (st, if not nil, caches the verdict per viewSet).
func (ss *session) viewVerify(q string, st *Statement) bool {
	vs := ss.srv.stateViews()
	if vs.all {
		return true
	}
	if len(vs.names) == 0 {
		return false
	}
	if st != nil {
		if c := st.viewChk.Load(); c != nil && c.set == vs {
			return c.verify
		}
	}
	v := mentionedTable(q, vs.names) != ""
	if st != nil {
		st.viewChk.Store(&viewCheck{set: vs, verify: v})
	}
	return v
}

// stVerify is a prepared statement's classify verify, or a view it names
// that may change session state.
func (ss *session) stVerify(st *Statement) bool {
	return st.cls.verify || ss.viewVerify(st.Query, st)
}

// noteViewDDL dates the viewSet when user code (DO, CALL, a function) whose
// text mentions creating or replacing views ran: it may have made one.
func (ss *session) noteViewDDL(verify bool, sql string) {
	if !verify {
		return
	}
	if l := strings.ToLower(sql); strings.Contains(l, "view") && (strings.Contains(l, "create") || strings.Contains(l, "replace")) {
		ss.srv.viewEpoch.Add(1)
	}
}
