package coordinator

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
	"github.com/pgfleet/pgfleet/planner"
)

// A write to a reference table runs on every copy, and each copy evaluates
// its expressions itself: random(), now(), nextval() or a DEFAULT of them
// would store a different value in each. Such writes are refused, as Citus
// does; what is not immutable is the worker catalog's to say (pg_proc).

// mutableCache remembers the write plans found to store the same values on
// every copy, with the catalog version and DDL epoch they were checked at.
type mutableCache struct {
	mu sync.Mutex
	ok map[*planner.Mutability][2]int64
}

// dateTimeOIDs are the parameter types whose text input 'now', 'today', ...
// reads the clock (0: the worker infers the type).
var dateTimeOIDs = []uint32{0, 1082, 1083, 1114, 1184, 1266}

// writeTarget is what a write that every copy of a reference table, or
// every shard of a distributed one (shards), computes for itself.
type writeTarget struct {
	table  string
	shards bool
}

// differ refuses a write each copy (or shard) would compute differently.
func (w writeTarget) differ(what string) error {
	if w.shards {
		return pgerr.New(pgerr.FeatureNotSupported,
			"a multi-shard write to %s with %s is not supported: each worker would compute its own value", w.table, what).
			WithHint("Compute the value first (SELECT it) and write it as a constant or parameter, or write the rows of one distribution value per statement (WHERE <distribution column> = <value>); functions in multi-shard writes must be IMMUTABLE (or random()).")
	}
	return pgerr.New(pgerr.FeatureNotSupported,
		"a write to reference table %s with %s is not supported: each copy would compute its own value", w.table, what).
		WithHint("Compute the value first (SELECT it) and write it as a constant or parameter; functions in writes to reference tables must be IMMUTABLE.")
}

// sameOnEveryCopy returns an error (0A000) unless the reference-table write
// p stores the same values on every copy. lits are the simple-protocol
// literals; textParams the extended protocol's text parameters with their
// declared types.
func (ss *session) sameOnEveryCopy(ctx context.Context, p *planner.Plan, lits []literal, params [][]byte, formats []int16, oids []uint32) error {
	m := p.Mutability()
	if m == nil {
		return nil // writes nothing: SELECT ... FOR UPDATE
	}
	table := writeTarget{}
	if len(p.Tables) > 0 {
		table.table = p.Tables[0]
	}
	if p.Kind() == planner.KindMultiShardWrite || p.Kind() == planner.KindInsertSplit {
		table = writeTarget{table: p.DistTable(), shards: true}
	}
	for _, l := range lits {
		if planner.TimeWord(l.value) {
			return table.differ("'" + l.value + "'")
		}
	}
	for i, v := range params {
		f := int16(0)
		switch {
		case len(formats) == 1:
			f = formats[0]
		case i < len(formats):
			f = formats[i]
		}
		var oid uint32
		if i < len(oids) {
			oid = oids[i]
		}
		if f == 0 && v != nil && planner.TimeWord(string(v)) && slices.Contains(dateTimeOIDs, oid) {
			return table.differ("'" + string(v) + "'")
		}
	}
	if m.Fixed != "" {
		return table.differ(m.Fixed)
	}
	srv := ss.srv
	snap := srv.catalog.Load()
	stamp := [2]int64{snap.Version, srv.ddlEpoch.Load()}
	srv.mutable.mu.Lock()
	known := srv.mutable.ok[m] == stamp
	srv.mutable.mu.Unlock()
	if known {
		return nil
	}
	if srv.metaPool == nil {
		return table.differ("expressions that cannot be checked")
	}
	if err := srv.immutableCalls(ctx, table, m); err != nil {
		return err
	}
	if m.Defaults {
		if err := srv.immutableDefaults(ctx, m, table); err != nil {
			return err
		}
	}
	srv.mutable.mu.Lock()
	if srv.mutable.ok == nil || len(srv.mutable.ok) > 10000 {
		srv.mutable.ok = map[*planner.Mutability][2]int64{}
	}
	srv.mutable.ok[m] = stamp
	srv.mutable.mu.Unlock()
	return nil
}

// settingsOnly are built-in functions PostgreSQL marks STABLE only because
// their value depends on the session's settings (TimeZone, DateStyle, the
// locale: date_trunc and date_part of a timestamptz, to_char, concat of a
// date), never on the clock or a table: the same on every copy and shard,
// whose connections have the session's settings (Django's TruncMonth and
// Concat in a multi-shard update were refused; adversary 152). Not
// timezone(text, timetz) or age(x) of one argument, which read today's
// date.
var settingsOnly = []string{"date_trunc", "date_part", "extract", "to_char", "concat", "concat_ws", "format", "make_timestamptz", "to_timestamp"}

// procsCalled is pg_proc p joined to the calls (planner.Mutability.Calls,
// name/argument count) of the text[] expression calls: every overload of
// the name that takes that many arguments, counting defaults and VARIADIC.
func procsCalled(calls string) string {
	return `pg_catalog.pg_proc p
		JOIN (SELECT pg_catalog.regexp_replace(c, '/[0-9]+$', '') AS name, pg_catalog.substring(c, '/([0-9]+)$')::int AS n
			FROM pg_catalog.unnest(` + calls + `) c) x ON p.proname = x.name
			AND (x.n BETWEEN p.pronargs - p.pronargdefaults AND p.pronargs OR (p.provariadic <> 0 AND x.n >= p.pronargs - 1))`
}

// immutableCalls refuses a write that calls a function that is not
// IMMUTABLE or an operator whose function is VOLATILE (any overload of the
// name that takes that many arguments, counting defaults and VARIADIC:
// which one the worker picks is its business; length(text) is immutable
// beside a stable length(bytea, name)). Operators that are only STABLE
// (timestamptz arithmetic, say) give every copy the same value under the
// session's settings, which every copy has; so do the built-in STABLE
// functions of settingsOnly.
func (s *Server) immutableCalls(ctx context.Context, table writeTarget, m *planner.Mutability) error {
	if len(m.Funcs) == 0 && len(m.Ops) == 0 {
		return nil
	}
	var fn, op *string
	err := s.askMeta(ctx, func() error {
		return s.metaPool.QueryRow(ctx, `SELECT
		(SELECT min(p.proname) FROM `+procsCalled("$1::text[]")+` WHERE p.provolatile <> 'i'
			AND NOT (p.provolatile = 's' AND p.pronamespace = 'pg_catalog'::pg_catalog.regnamespace AND p.proname = ANY($3::text[]))),
		(SELECT min(o.oprname) FROM pg_catalog.pg_operator o JOIN pg_catalog.pg_proc f ON f.oid = o.oprcode
			WHERE o.oprname = ANY($2::text[]) AND f.provolatile = 'v')`, m.Calls, m.Ops, settingsOnly).Scan(&fn, &op)
	})
	if err != nil {
		return pgerr.New(pgerr.ConnectionFailure, "cannot read the volatility of the functions of a write to %s: %v", table.table, err)
	}
	switch {
	case fn != nil:
		return table.differ("the function " + *fn + "()")
	case op != nil:
		return table.differ("the volatile operator " + *op)
	}
	return nil
}

// immutableDefaults refuses a write whose rows take a column DEFAULT (or
// identity) that is not immutable.
func (s *Server) immutableDefaults(ctx context.Context, m *planner.Mutability, target writeTarget) error {
	cols, err := s.columnDefaults(ctx, m.Table)
	if err != nil {
		return err
	}
	for i, c := range cols {
		if !takesDefault(m, i, c.name) || c.generated != "" {
			continue // a generated column's expression is immutable
		}
		if c.identity != "" {
			return target.differ("the identity column " + c.name)
		}
		if c.def == "" {
			continue
		}
		dm, err := planner.ExprMutability(c.def)
		if err != nil {
			return target.differ("the default of column " + c.name)
		}
		if dm != nil && target.shards {
			// (Each row's default computed once, on its shard, as
			// PostgreSQL computes it once per row: gen_random_uuid().)
			dm.DropPerRow()
		}
		if dm == nil {
			continue
		}
		if dm.Fixed != "" {
			return target.differ("the default " + c.def + " of column " + c.name)
		}
		if err := s.immutableCalls(ctx, target, dm); err != nil {
			var pe *pgerr.Error
			if errors.As(err, &pe) && pe.Code == pgerr.FeatureNotSupported {
				return target.differ("the default " + c.def + " of column " + c.name)
			}
			return err
		}
	}
	return nil
}

// tableColumn is a column of a table and its default (pg_get_expr's
// text, the type's default for a domain; "" for none).
type tableColumn struct{ name, identity, generated, def string }

// columnDefaults reads table's columns, in order, with their defaults.
func (s *Server) columnDefaults(ctx context.Context, table string) (cols []tableColumn, err error) {
	err = s.askMeta(ctx, func() (err error) {
		cols, err = s.columnDefaultsOnce(ctx, table)
		return err
	})
	if err != nil {
		return nil, pgerr.New(pgerr.ConnectionFailure, "cannot read the defaults of %s: %v", table, err)
	}
	return cols, nil
}

func (s *Server) columnDefaultsOnce(ctx context.Context, table string) ([]tableColumn, error) {
	rows, err := s.metaPool.Query(ctx, `SELECT a.attname::text, a.attidentity::text, a.attgenerated::text,
			coalesce(pg_catalog.pg_get_expr(d.adbin, d.adrelid), pg_catalog.pg_get_expr(t.typdefaultbin, 0), '')
		FROM pg_catalog.pg_attribute a
		LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		LEFT JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
		WHERE a.attrelid = pg_catalog.to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY a.attnum`, metadata.SQLName(table))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (tableColumn, error) {
		var c tableColumn
		err := r.Scan(&c.name, &c.identity, &c.generated, &c.def)
		return c, err
	})
}

// takesDefault reports whether the rows of the write m may take the
// DEFAULT of column name, the i-th (0-based) of its table.
func takesDefault(m *planner.Mutability, i int, name string) bool {
	switch {
	case slices.Contains(m.DefaultCols, name):
		return true
	case m.OnlyDefaultCols:
		return false
	case m.Listed != nil:
		return !slices.Contains(m.Listed, name)
	default:
		return m.Given < 0 || i >= m.Given || slices.Contains(m.DefaultPos, i)
	}
}
