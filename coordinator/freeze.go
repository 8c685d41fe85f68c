package coordinator

import (
	"context"
	"errors"
	"time"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/planner"
)

// frozenWrite is the coordinator's answer to a write over several shards
// or reference-table copies refused because each would read the
// transaction's time for itself (now(), CURRENT_TIMESTAMP, a DEFAULT
// now() the rows take): outside a transaction block the statement's one
// moment is read once, from PostgreSQL, and written into the statement as
// constants (planner.FillDefaults, planner.FreezeTime), so every row
// stores what PostgreSQL would store, the same moment. It returns the
// statement to run instead, or ok false (the refusal stands: inside a
// transaction block, whose time began on its first worker; with
// standard_conforming_strings off, whose strings pg_query reads otherwise;
// or a refusal for something else).
func (ss *session) frozenWrite(m *planner.Mutability, text string, refusal error) (string, bool) {
	var pe *pgerr.Error
	if ss.inTxn() || ss.scsOff || !errors.As(refusal, &pe) || pe.Code != pgerr.FeatureNotSupported || ss.srv.metaPool == nil {
		return "", false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sql := text
	if m != nil && m.Defaults {
		cols, err := ss.srv.columnDefaults(ctx, m.Table)
		if err != nil {
			return "", false
		}
		var names []string
		var fill []planner.ColumnDefault
		for i, c := range cols {
			names = append(names, c.name)
			if c.def != "" && c.identity == "" && c.generated == "" && takesDefault(m, i, c.name) && planner.ReadsTime(c.def) {
				fill = append(fill, planner.ColumnDefault{Name: c.name, Expr: c.def})
			}
		}
		if len(fill) > 0 {
			filled, ok, err := planner.FillDefaults(sql, names, fill)
			if err != nil || !ok {
				return "", false
			}
			sql = filled
		}
	}
	if !planner.ReadsTime(sql) {
		return "", false
	}
	// The moment, and whether a function of another schema is named as
	// one of the time functions: an unqualified now() may then be the
	// user's (search_path), which only PostgreSQL can resolve.
	var moment string
	var shadowed bool
	if err := ss.srv.askMeta(ctx, func() error {
		return ss.srv.metaPool.QueryRow(ctx, `SELECT pg_catalog.to_char(pg_catalog.now() AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') || '+00',
			EXISTS (SELECT FROM pg_catalog.pg_proc WHERE proname IN ('now', 'transaction_timestamp', 'statement_timestamp')
				AND pronamespace <> 'pg_catalog'::pg_catalog.regnamespace)`).Scan(&moment, &shadowed)
	}); err != nil || shadowed {
		return "", false
	}
	frozen, n, err := planner.FreezeTime(sql, moment)
	if err != nil || n == 0 {
		return "", false
	}
	return frozen, true
}

// runFrozen runs a write with the transaction's time frozen
// (frozenWrite) if it can, or answers the refusal. m is the plan's
// Mutability, nil when the planner refused the statement (TimeRead).
func (ss *session) runFrozen(m *planner.Mutability, text string, refusal error) error {
	if ss.drawn != "" && ss.drawnFrom == text {
		// Its sequence values are drawn already: PostgreSQL draws them
		// once (adversary finding: a multi-row INSERT with a DEFAULT
		// now() column took 2, 3, 4 and returned 5, 6, 7).
		text = ss.drawn
	}
	if sql, ok := ss.frozenWrite(m, text, refusal); ok {
		return ss.simpleQuery(append([]byte(sql), 0))
	}
	return ss.queryError(refusal)
}

// frozenPortal gives a write portal refused because its shards or copies
// would each read the transaction's time (sameOnEveryCopy's refusal) the
// plan of its statement with the moment frozen (frozenWrite), for this
// portal only, checked again; it returns the error to answer, nil when
// the portal may run. The statement keeps its parameters. INSERTs whose
// sequence values the coordinator binds keep the refusal.
func (ss *session) frozenPortal(ctx context.Context, sp *scatterPortal, refusal error, values [][]byte, formats []int16, oids []uint32) error {
	if sp.sp.seq != nil || planner.ContainsFold(sp.st.Query, "statement_timestamp") {
		// Over the extended protocol statement_timestamp() is the
		// Execute's moment, later than now(), the Parse's (found by an
		// adversary): one frozen moment cannot give both.
		return refusal
	}
	sql, ok := ss.frozenWrite(sp.sp.plan.Mutability(), sp.st.Query, refusal)
	if !ok {
		return refusal
	}
	snap := ss.srv.catalog.Load()
	p, err := planner.Build(sql, snap)
	if err != nil || p.Kind() != sp.sp.plan.Kind() || p.DistTable() != sp.sp.plan.DistTable() {
		return refusal
	}
	if err := ss.sameOnEveryCopy(ctx, p, nil, values, formats, oids); err != nil {
		return err
	}
	n := len(p.ShardSQL())
	if p.Kind() == planner.KindInsertSplit {
		n = len(snap.Shards[p.DistTable()])
	}
	sp.sp = &stmtPlan{version: snap.Version, plan: p, shards: make([]shardSlot, n)}
	return nil
}
