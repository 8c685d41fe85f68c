package coordinator

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
	"github.com/pgfleet/pgfleet/planner"
)

// randomUUID is a version 4 UUID, as gen_random_uuid() makes one.
func randomUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // (never fails: crypto/rand)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// randomNeed is the SequencesNeeded that fills an INSERT's distribution
// column left to its default, when that default makes a random UUID and
// nothing else (gen_random_uuid() of pg_catalog, uuid_generate_v4() of
// the uuid-ossp extension, on a uuid column: Rails' and TypeORM's uuid
// keys): the coordinator makes each row's value, as PostgreSQL would make
// a random one, and routes the row by it. Otherwise the refusal dn is.
func (ss *session) randomNeed(dn *planner.DefaultNeeded) (*planner.SequencesNeeded, error) {
	if ss.ddlSent {
		return nil, dn // (DDL of this transaction may have changed the default, which others cannot see)
	}
	ok, err := ss.srv.randomDefault(dn.Table, dn.Column)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, dn
	}
	return dn.Sequences(), nil
}

// randomDefault reports whether table's column is a uuid whose default
// is a random UUID function's call alone, read from the default node
// (kept until the catalog or this coordinator's DDL changes, pathTTL at
// most: DDL through another coordinator).
func (s *Server) randomDefault(table, column string) (bool, error) {
	if s.metaPool == nil {
		return false, nil
	}
	snap := s.catalog.Load()
	key := [2]int64{snap.Version, s.ddlEpoch.Load()}
	name := table + "\x00" + column
	s.randomDefaults.mu.Lock()
	if s.randomDefaults.stamp != key || time.Since(s.randomDefaults.at) > pathTTL {
		s.randomDefaults.stamp, s.randomDefaults.m, s.randomDefaults.at = key, map[string]bool{}, time.Now()
	}
	v, known := s.randomDefaults.m[name]
	s.randomDefaults.mu.Unlock()
	if known {
		return v, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var expr, typ string
	var fns []string
	err := s.askMeta(ctx, func() error {
		return s.metaPool.QueryRow(ctx, `SELECT pg_catalog.pg_get_expr(d.adbin, d.adrelid), a.atttypid::pg_catalog.regtype::text,
			ARRAY(SELECT n.nspname || '.' || p.proname || ':' || coalesce(e.extname, '')
				FROM pg_catalog.pg_depend x
				JOIN pg_catalog.pg_proc p ON p.oid = x.refobjid
				JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
				LEFT JOIN pg_catalog.pg_depend xe ON xe.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND xe.objid = p.oid AND xe.deptype = 'e'
				LEFT JOIN pg_catalog.pg_extension e ON e.oid = xe.refobjid
				WHERE x.classid = 'pg_catalog.pg_attrdef'::pg_catalog.regclass AND x.objid = d.oid AND x.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass)
		FROM pg_catalog.pg_attrdef d JOIN pg_catalog.pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
		WHERE d.adrelid = pg_catalog.to_regclass($1) AND a.attname = $2 AND a.attgenerated = ''`,
			metadata.SQLName(table), column).Scan(&expr, &typ, &fns)
	})
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return false, pgerr.New(pgerr.ConnectionFailure, "cannot read the default of column %q of %s: %v", column, table, err)
	}
	const ossp = ".uuid_generate_v4:uuid-ossp"
	switch {
	case err != nil || typ != "uuid":
		v = false
	case len(fns) == 0:
		// A built-in (pinned: pg_depend records no dependency on it); a
		// function of the user's by that name would be recorded.
		v = expr == "gen_random_uuid()"
	case len(fns) == 1 && strings.HasSuffix(fns[0], ossp):
		v = expr == "uuid_generate_v4()" || expr == strings.TrimSuffix(fns[0], ossp)+".uuid_generate_v4()"
	}
	s.randomDefaults.mu.Lock()
	if s.randomDefaults.stamp == key {
		s.randomDefaults.m[name] = v
	}
	s.randomDefaults.mu.Unlock()
	return v, nil
}
