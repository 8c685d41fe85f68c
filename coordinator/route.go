package coordinator

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pgfleet/pgfleet/executor"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
	"github.com/pgfleet/pgfleet/planner"
	"github.com/pgfleet/pgfleet/pooling"
)

// stmtPlan is a statement's plan under one catalog version, with the
// statements it becomes on each shard, interned on first use.
type stmtPlan struct {
	version int64
	plan    *planner.Plan
	shards  []shardSlot
	// described: the statement as PostgreSQL describes it, read once when
	// the distribution value's parameter is used elsewhere with its type
	// unspecified, or a multi-row INSERT over several shards returns rows.
	described atomic.Pointer[stmtDescribed]
	// scatter: a multi-shard statement's description, made once.
	scatter atomic.Pointer[scatterDesc]
	// seq: an INSERT whose sequence values the coordinator binds.
	seq *seqBind
	// timeRead: the planner's refusal of a multi-shard write reading the
	// transaction's time, planned with a placeholder moment
	// (MultiShardWrite.TimeFrozen): what its execution answers when the
	// moment cannot be frozen.
	timeRead error
}

// stmtPlan returns st's plan for the current catalog, planning it once per
// catalog version. Sessions in databases other than the catalog's are not
// routed: their statements run on the default node.
func (ss *session) stmtPlan(st *Statement) (*stmtPlan, error) {
	if !ss.routes {
		return unroutedPlan, nil
	}
	if ss.scsOff && strings.IndexByte(st.Query, '\\') >= 0 {
		if snap := ss.srv.catalog.Load(); snap != nil && planner.MentionsTable(st.Query, snap) {
			return nil, pgerr.New(pgerr.FeatureNotSupported,
				"a prepared statement with a backslash, on distributed or reference tables, is not supported with standard_conforming_strings off").
				WithHint("Turn standard_conforming_strings on (the default), or use the simple query protocol.")
		}
	}
	sp, err := ss.srv.stmtPlanIn(st, ss.catalog())
	if err != nil {
		sp, err = ss.completeInsert(st, err)
	}
	if err == nil {
		err = ss.checkPath(sp.plan)
	}
	if err == nil && ss.unparsedPlan(sp.plan, st.Query) {
		err = ss.unparsed(st.Query)
	}
	if err == nil && ss.embedsASCII && sp.plan.Kind() != planner.KindDefault && !ascii([]byte(st.Query)) {
		err = errASCIITrail
	}
	if err == nil && ss.decodedEscapes(sp.plan, st.Query) {
		err = errDecodedEscapes
	}
	return sp, err
}

// completeInsert plans a prepared INSERT the planner asked to complete
// (its column list, its sequence values), or returns err.
func (ss *session) completeInsert(st *Statement, err error) (*stmtPlan, error) {
	var cn *planner.ColumnsNeeded
	if errors.As(err, &cn) {
		return ss.insertPlan(st, cn)
	}
	if sn, ok, ferr := ss.fillNeeds(err); ok {
		if ferr != nil {
			return nil, ferr
		}
		return ss.seqPlan(st, st.Query, sn, true)
	}
	return nil, err
}

// fillNeeds is what fills the defaults a planner error (err) asks for:
// sequence values, or random UUIDs for a distribution column (randomNeed);
// ok false when it asks for neither.
func (ss *session) fillNeeds(err error) (sn *planner.SequencesNeeded, ok bool, _ error) {
	if errors.As(err, &sn) {
		return sn, true, nil
	}
	var dn *planner.DefaultNeeded
	if errors.As(err, &dn) {
		sn, err = ss.randomNeed(dn)
		return sn, true, err
	}
	return nil, false, nil
}

// checkPath refuses a plan that took an unqualified table name as public's
// in a session whose search_path says otherwise: it could read another
// schema's table.
func (ss *session) checkPath(p *planner.Plan) error {
	if len(p.Unqualified) == 0 {
		return nil
	}
	what := strings.Join(p.Unqualified, ", ")
	if ss.namesOnOwn() {
		a, known, err := ss.ownResolve(p.Unqualified)
		if err != nil {
			return err
		}
		if !known {
			return pgerr.New(pgerr.FeatureNotSupported,
				"this session's tables or search_path may have changed earlier in this transaction block or pipeline, and %s is named without its schema; its connection cannot be asked before the Sync", what).
				WithHint("Write the schema with the table name (public.t), or send a Sync first (the simple query protocol asks it).")
		}
		for _, n := range p.Unqualified {
			if !a.public[n] {
				return pgerr.New(pgerr.FeatureNotSupported,
					"in this session, %s named without its schema is not the distributed table public.%s", n, n).
					WithHint("Write the schema with the table name (public.t), or reset search_path.")
			}
		}
		return nil
	}
	path, user, public, withUser := ss.params.path, ss.user, ss.params.pathPublic, ss.params.pathUser
	if public {
		// "$user" (the default path's first schema) is a schema only when
		// one of the role's name exists.
		if !withUser {
			return nil
		}
		own, err := ss.srv.userSchema(user)
		if err != nil {
			return errPathLookup(what, err)
		}
		if !own {
			return nil
		}
		if path == "" {
			path = `SET search_path = "$user", public`
		}
	}
	if ok, err := ss.srv.resolveToPublic(path, user, p.Unqualified); err != nil {
		return errPathLookup(what, err)
	} else if ok {
		return nil // PostgreSQL finds them in public all the same
	}
	return pgerr.New(pgerr.FeatureNotSupported,
		"this session's search_path is not public, and %s is named without its schema", what).
		WithHint("Write the schema with the table name (public.t), or reset search_path.")
}

// errPathLookup is the answer when the default node could not say where
// an unqualified table name resolves (it is out of reach): a connection
// error, which a client retries, not the refusal that the name resolves
// elsewhere (adversary: 0A000 for every client for a second or two after
// the default node's worker crashed).
func errPathLookup(what string, err error) error {
	return pgerr.New(pgerr.ConnectionFailure, "could not ask the first worker where %s, named without its schema, is: %v", what, err).
		WithHint("Retry the statement when the worker is back; naming the schema (public.t) needs no such lookup.")
}

var unroutedPlan = &stmtPlan{plan: defaultPlan}

func (s *Server) stmtPlan(st *Statement) (*stmtPlan, error) {
	return s.stmtPlanIn(st, s.catalog.Load())
}

// stmtPlanIn is stmtPlan over the catalog snap (a session's).
func (s *Server) stmtPlanIn(st *Statement, snap *metadata.Snapshot) (*stmtPlan, error) {
	var version int64
	if snap != nil {
		version = snap.Version
	}
	if p := st.plan.Load(); p != nil && p.version == version {
		return p, nil
	}
	p, err := s.planIn(st.Query, snap)
	var timeRead error
	var tr *planner.TimeRead
	if errors.As(err, &tr) {
		// A multi-shard write that reads the transaction's time: planned
		// with a placeholder moment, to describe and bind it; it runs
		// planned again with its own (frozenPortal).
		if frozen, n, ferr := planner.FreezeTime(st.Query, planner.TimePlaceholder); ferr == nil && n > 0 {
			if fp, perr := planner.Build(frozen, snap); perr == nil {
				if x, ok := fp.Root.(*planner.MultiShardWrite); ok {
					x.TimeFrozen = true
					p, err, timeRead = fp, nil, tr.Err
				}
			}
		}
	}
	if err != nil {
		return nil, err
	}
	if p.Kind() == planner.KindFunction || p.Kind() == planner.KindCopyIn || p.Kind() == planner.KindCopyOut {
		what := ""
		if fn, ok := p.Root.(*planner.Function); ok {
			what = fn.Name
		}
		switch p.Kind() {
		case planner.KindCopyIn:
			what = "COPY into " + p.Tables[0]
		case planner.KindCopyOut:
			what = "COPY from " + p.Tables[0]
		}
		return nil, pgerr.New(pgerr.FeatureNotSupported, "%s needs the simple query protocol", what).
			WithHint("In psql, run it as a plain statement; from a driver, use its simple-protocol mode.")
	}
	if err := explainExtended(p); err != nil {
		return nil, err
	}
	n := len(p.ShardSQL())
	if p.Kind() == planner.KindInsertSplit {
		n = len(snap.Shards[p.DistTable()]) // made as Binds need them (insertShardStmt)
	}
	sp := &stmtPlan{version: version, plan: p, shards: make([]shardSlot, n), timeRead: timeRead}
	st.plan.Store(sp)
	return sp, nil
}

// explainExtended refuses, over the extended protocol, EXPLAIN of what the
// coordinator explains itself over several shards (the simple protocol's
// explainScatter, explainMultiWrite, explainInsertSplit): the extended
// paths of those kinds run the statement, they do not explain it.
func explainExtended(p *planner.Plan) error {
	if p.Explain != nil && (p.Kind() == planner.KindMultiShard || p.Kind() == planner.KindMultiShardWrite || p.Kind() == planner.KindInsertSplit) {
		return pgerr.New(pgerr.FeatureNotSupported, "EXPLAIN of a multi-shard statement or multi-row INSERT needs the simple query protocol").
			WithHint("In psql, run it as a plain statement; from a driver, use its simple-protocol mode.")
	}
	return nil
}

// planSimple plans a simple-protocol statement for the session.
func (ss *session) planSimple(sql string) (*planner.Plan, []literal, error) {
	if !ss.routes {
		return defaultPlan, nil, nil
	}
	ss.drawn, ss.drawnFrom = "", ""
	given := sql
	p, lits, err := ss.srv.planSimpleIn(sql, ss.catalog())
	// An INSERT without a column list gets one; then a distribution
	// column given by an expression gets its value.
	var cn *planner.ColumnsNeeded
	if errors.As(err, &cn) {
		if sql, err = ss.withColumns(sql, cn); err == nil {
			p, lits, err = ss.srv.planSimpleIn(sql, ss.catalog())
		}
	}
	// Sequence values, then a distribution column's random UUIDs
	// (fillNeeds): the plan after the first may ask for the second.
	for range 2 {
		sn, ok, ferr := ss.fillNeeds(err)
		if !ok {
			break
		}
		if err = ferr; err != nil {
			break // (the refusal the default is)
		}
		if sql, err = ss.withSequences(sql, sn); err != nil {
			break
		}
		ss.drawn, ss.drawnFrom = sql, given
		p, lits, err = ss.srv.planSimpleIn(sql, ss.catalog())
	}
	var vn *planner.ValuesNeeded
	if errors.As(err, &vn) {
		if sql, err = ss.withDistValues(sql, vn); err == nil {
			p, lits, err = ss.srv.planSimpleIn(sql, ss.catalog())
		}
	}
	if err == nil {
		err = ss.checkPath(p)
	}
	return p, lits, err
}

// withColumns is an INSERT without a column list into a distributed table
// with the list PostgreSQL takes, read from the table on the default node
// (which has the shards' columns) every time: a plan keeps no column list
// that DDL through another coordinator could have changed.
func (ss *session) withColumns(sql string, cn *planner.ColumnsNeeded) (string, error) {
	var rows [][]*string
	q := "SELECT attname::text FROM pg_catalog.pg_attribute WHERE attrelid = pg_catalog.to_regclass(" +
		quoteLiteral(metadata.SQLName(cn.Table)) + ") AND attnum > 0 AND NOT attisdropped"
	if cn.Copy {
		q += " AND attgenerated = ''"
	}
	q += " ORDER BY attnum"
	var err error
	// A session holding a connection to the default node asks on it,
	// between statements: a second connection to a worker it holds would
	// take the slot the pools keep for clients holding connections
	// elsewhere (every client of a full pool doing so waits for the
	// others), and a transaction that changed tables sees their columns
	// as it has them.
	var sc *pooling.ServerConn
	if def := ss.srv.defaultNode.Load(); ss.sc != nil && ss.node == def {
		sc = ss.sc
	} else if i := ss.parkedOn(def); i >= 0 {
		sc = ss.parked[i].sc
	}
	usable := sc != nil && !ss.needSync && len(sc.Buf()) == 0 && sc.TxStatus != 'E'
	switch {
	case usable:
		rows, err = executor.QueryText(sc, q)
	case ss.txScatter != nil:
		return "", pgerr.New(pgerr.FeatureNotSupported,
			"an INSERT or COPY without a column list into %s after this transaction changed a distributed or reference table is not supported here", cn.Table).
			WithHint("Name the columns, or send it with the simple query protocol.")
	default:
		err = ss.onDefaultNode(func(sc *pooling.ServerConn) (err error) {
			rows, err = executor.QueryText(sc, q)
			return err
		})
	}
	if err != nil {
		return "", err
	}
	var cols []string
	for _, r := range rows {
		if len(r) == 1 && r[0] != nil {
			cols = append(cols, *r[0])
		}
	}
	if len(cols) == 0 {
		return "", errCatalogMoved
	}
	return planner.WithColumns(sql, cols)
}

// withDistValues is an INSERT whose distribution column is given by
// expressions (planner.ValuesNeeded) with each expression's value in its
// place, as Citus does: PostgreSQL evaluates them once, under the
// session's settings, in a read-only transaction that is rolled back (a
// function that writes is refused; one that changes settings changes
// nothing), and each value goes back as a constant of the expression's
// type, so that the worker assigns it to the column as PostgreSQL would
// have. Outside transaction blocks only: there the expressions would run
// outside the transaction, and read another moment's time.
func (ss *session) withDistValues(sql string, vn *planner.ValuesNeeded) (string, error) {
	if ss.inTxn() || ss.pinned != "" || ss.settingsUnknown || ss.foreignEnc {
		return "", vn.Unwrap()
	}
	exprs, err := planner.DistExprs(sql, ss.srv.catalog.Load(), false)
	if err != nil {
		return "", err
	}
	var sel, inner []string
	for i, e := range exprs {
		if e == "" {
			continue
		}
		v := "v" + strconv.Itoa(i)
		inner = append(inner, "("+e+") AS "+v)
		// The type without a modifier: char(5)'s name alone would be char(1).
		sel = append(sel, v+"::text", "pg_catalog.format_type(pg_catalog.pg_typeof("+v+"), -1)")
	}
	// Settings under which a value's text is not the value.
	sel = append(sel, "pg_catalog.current_setting('extra_float_digits')", "pg_catalog.current_setting('DateStyle')")
	for _, e := range exprs {
		if strings.Contains(strings.ToLower(e), "pg_advisory") {
			return "", vn.Unwrap()
		}
	}
	var rows [][]*string
	err = ss.onDefaultNode(func(sc *pooling.ServerConn) error {
		if _, err := executor.QueryText(sc, "BEGIN READ ONLY"); err != nil {
			return err
		}
		var err error
		rows, err = executor.QueryText(sc, "SELECT "+strings.Join(sel, ", ")+" FROM (SELECT "+strings.Join(inner, ", ")+" OFFSET 0) s")
		if _, rerr := executor.QueryText(sc, "ROLLBACK"); rerr != nil && err == nil {
			err = rerr
		}
		return err
	})
	var we *executor.WorkerError
	if errors.As(err, &we) && we.PG.Code == "25006" {
		return "", pgerr.New(pgerr.FeatureNotSupported,
			"the distribution column's expression calls a function that writes, which the coordinator cannot evaluate apart from the INSERT").
			WithHint("Give the distribution column a constant or a parameter.")
	}
	if err != nil {
		return "", ss.analysisFirst(sql, err)
	}
	if len(rows) != 1 || len(rows[0]) != len(sel) {
		return "", pgerr.New(pgerr.Internal, "no values for the distribution column")
	}
	floatDigits, dateStyle := rows[0][len(sel)-2], rows[0][len(sel)-1]
	vals := make([]string, len(exprs))
	k := 0
	for i, e := range exprs {
		if e == "" {
			continue
		}
		v, typ := rows[0][2*k], rows[0][2*k+1]
		k++
		if typ == nil {
			return "", pgerr.New(pgerr.Internal, "no type for the distribution column's value")
		}
		lossy := ""
		switch *typ {
		case "real", "double precision":
			if floatDigits != nil && strings.HasPrefix(*floatDigits, "-") || floatDigits != nil && *floatDigits == "0" {
				lossy = "extra_float_digits " + *floatDigits
			}
		case "timestamp with time zone", "time with time zone":
			if dateStyle != nil && !strings.HasPrefix(*dateStyle, "ISO") {
				lossy = "DateStyle " + *dateStyle // zone abbreviations
			}
		}
		if lossy != "" {
			return "", pgerr.New(pgerr.FeatureNotSupported,
				"the distribution column's expression gives a %s, whose text under %s is not its value", *typ, lossy).
				WithHint("Give the distribution column a constant or a parameter, or use the default setting.")
		}
		if v == nil {
			vals[i] = "NULL::" + *typ
		} else {
			vals[i] = quoteLiteral(*v) + "::" + *typ
		}
	}
	return planner.WithDistValues(sql, ss.srv.catalog.Load(), vals)
}

// onDefaultNode runs f on a connection of the default node's pool in the
// session's settings (not the session's own: f reads the catalog or runs
// something apart from the session's transaction). The connection goes
// back broken unless f's error, if any, is the worker's and the connection
// is idle.
func (ss *session) onDefaultNode(f func(sc *pooling.ServerConn) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := ss.poolFor(ss.srv.defaultNode.Load())
	if err != nil {
		return err
	}
	sc, err := ss.sideCheckout(ctx, pool)
	if err != nil {
		return err
	}
	err = f(sc)
	if err != nil && !errors.As(err, new(*executor.WorkerError)) || sc.TxStatus != 'I' {
		sc.MarkBroken()
	}
	ss.sideRelease(pool, sc)
	return err
}

// insertPlan plans a prepared INSERT without a column list (withColumns),
// at every use: the plan is not kept on the statement.
func (ss *session) insertPlan(st *Statement, cn *planner.ColumnsNeeded) (*stmtPlan, error) {
	if cn.Copy {
		return nil, pgerr.New(pgerr.FeatureNotSupported, "COPY from %s needs the simple query protocol", cn.Table).
			WithHint("In psql, run it as a plain statement; from a driver, use its simple-protocol mode.")
	}
	full, err := ss.withColumns(st.Query, cn)
	if err != nil {
		return nil, err
	}
	snap := ss.srv.catalog.Load()
	p, err := ss.srv.planIn(full, ss.catalog())
	if sn, ok, ferr := ss.fillNeeds(err); ok {
		if ferr != nil {
			return nil, ferr
		}
		return ss.seqPlan(st, full, sn, false)
	}
	if err == nil {
		err = explainExtended(p)
	}
	if err != nil {
		return nil, err
	}
	n := len(p.ShardSQL())
	switch p.Kind() {
	case planner.KindRouter:
	case planner.KindInsertSplit:
		n = len(snap.Shards[p.DistTable()])
	default:
		return nil, pgerr.New(pgerr.FeatureNotSupported, "this INSERT into %s without a column list needs the simple query protocol", cn.Table).
			WithHint("In psql, run it as a plain statement; from a driver, use its simple-protocol mode; or list the columns.")
	}
	return &stmtPlan{version: snap.Version, plan: p, shards: make([]shardSlot, n)}, nil
}

// shardSlot is the statement a client statement becomes on one shard,
// and whether its parameter types are final (workerTail).
type shardSlot struct {
	st    atomic.Pointer[Statement]
	final atomic.Bool
	// prev: the statement the slot held before its types were final
	// (forgotten with it when the client's statement goes stale).
	prev atomic.Pointer[Statement]
}

// get is the slot's statement while it serves st: final, or the client
// has not been told st's types yet.
func (sl *shardSlot) get(st *Statement) *Statement {
	if x := sl.st.Load(); x != nil && (sl.final.Load() || st.paramDesc.Load() == nil) {
		return x
	}
	return nil
}

// set keeps x, made with the parameter types of workerTail.
func (sl *shardSlot) set(x *Statement, final bool) {
	if old := sl.st.Swap(x); old != nil && old != x && !sl.final.Load() {
		sl.prev.Store(old)
	}
	sl.final.Store(final)
}

// each calls f with the slot's statements.
func (sl *shardSlot) each(f func(*Statement)) {
	for _, x := range []*Statement{sl.st.Load(), sl.prev.Load()} {
		if x != nil {
			f(x)
		}
	}
}

// shardStmt is the statement st becomes on shard index idx.
func (s *Server) shardStmt(sp *stmtPlan, idx int, st *Statement) *Statement {
	if x := sp.shards[idx].get(st); x != nil {
		return x
	}
	tail, final := workerTail(st)
	rest := append(append([]byte(sp.plan.ShardSQL()[idx]), 0), tail...)
	x := s.stmts.derive(st, rest)
	sp.shards[idx].set(x, final)
	return x
}

// workerTail is the parameter types the worker statements of st are
// prepared with: the client's, and for those it left unspecified the
// built-in types PostgreSQL fixed for the statement when the client was
// first told them (its ParameterDescription), as PostgreSQL keeps them for
// a prepared statement: a worker that prepares it again after the table
// changed (ALTER COLUMN ... TYPE) reads the client's values as the client
// encoded them, and casts them, where inferring again would read int4's
// bytes as int8's or text. final is false while a type is left to infer
// that the client has not been told yet.
func workerTail(st *Statement) (tail []byte, final bool) {
	desc := st.paramDesc.Load()
	if desc == nil {
		return st.paramTail, false
	}
	declared := paramOIDs(st.paramTail)
	typed := fixedTypes(declared, *desc)
	for i, o := range typed {
		if o >= executor.FirstNormalOID && (i >= len(declared) || declared[i] == 0) {
			typed[i] = 0 // described, not built in: another OID on each worker
		}
	}
	return executor.ParamTail(typed), true
}

// fixedTypes are a statement's parameter types as PostgreSQL fixed them:
// the client's (declared, not 0), else those PostgreSQL described.
func fixedTypes(declared, described []uint32) []uint32 {
	typed := make([]uint32, max(len(declared), len(described)))
	for i := range typed {
		switch {
		case i < len(declared) && declared[i] != 0:
			typed[i] = declared[i]
		case i < len(described):
			typed[i] = described[i]
		}
	}
	return typed
}

// routeBind picks, for a Bind of st with the given parameters section, the
// statement to bind on the worker and the node it runs on, or says it
// runs otherwise (where; the statement is then nil).
// A statement whose sequence values the coordinator binds gets them here:
// the parameters section to bind comes back with them.
func (ss *session) routeBind(st *Statement, name, params []byte) (*Statement, int32, []byte, where, error) {
	s := ss.srv
	sp, err := ss.stmtPlan(st)
	if err != nil {
		return nil, 0, params, onNode, err
	}
	// A multi-shard plan names the nodes: one that waited for a cut-over
	// is made again from the catalog the move left.
	if waited, err := ss.awaitShards(sp.plan); err != nil {
		return nil, 0, params, onNode, err
	} else if waited {
		if sp, err = ss.stmtPlan(st); err != nil {
			return nil, 0, params, onNode, err
		}
	}
	p := sp.plan
	if ss.txAdvisoryDDL && !st.cls.quiet && p.Kind() != planner.KindDefault && p.Kind() != planner.KindFunction {
		// Prepared before the block's DDL made user code that takes
		// advisory locks (noteAdvisoryDDL).
		return nil, 0, params, onNode, ss.errDefaultOnly(false, p)
	}
	ss.noteTxnStart()
	if err := ss.txnCatalogCheck(p); err != nil {
		return nil, 0, params, onNode, err
	}
	ss.srv.metrics.kinds.count(p.Kind())
	ss.notePlan(p.Kind())
	var r *planner.Route
	switch x := p.Root.(type) {
	case *planner.DefaultNode:
		if err := ss.srv.fencedInExcept(st.Query, ss.ownFences()); err != nil && ss.routes {
			return nil, 0, params, onNode, err // a table whose rows are moving (fence.go)
		}
		if st.cls.signal {
			if err := ss.srv.pooledPIDIn(st.Query); err != nil {
				return nil, 0, params, onNode, err // (signal.go; the session forms are bridged)
			}
		}
		home := ss.homeNode(st.Query)
		if home != ss.srv.defaultNode.Load() && (st.cls.advisory || st.cls.listen || ss.stAdvisory(st)) {
			return nil, 0, params, onNode, ss.errDefaultOnly(st.cls.listen, p)
		}
		return st, home, params, onNode, nil
	case *planner.Scatter:
		return nil, 0, params, onShards, nil
	case *planner.MultiShardWrite:
		return nil, 0, params, onShardWrites, nil
	case *planner.InsertSplit:
		if sp.seq != nil {
			// The drawn values first: the rows' shards may be theirs.
			if params, err = ss.bindSequences(sp.seq, name, params); err != nil {
				return nil, 0, params, onNode, err
			}
		}
		return ss.insertSplitBind(sp, st, params)
	case *planner.Route:
		r = x
	}
	if sp.seq != nil {
		if params, err = ss.bindSequences(sp.seq, name, params); err != nil {
			return nil, 0, params, onNode, err
		}
	}
	var hash int32
	if r != nil {
		if hash, err = ss.valueHash(sp, st, r.Value, params); err != nil {
			return nil, 0, params, onNode, err
		}
	}
	tgt, err := ss.routeHeld(p, hash, func() (*planner.Plan, int32, error) {
		if sp.seq != nil {
			return nil, 0, errCatalogMoved // (its sequence values are bound)
		}
		nsp, err := ss.stmtPlan(st)
		if err != nil {
			return nil, 0, err
		}
		nr, ok := nsp.plan.Root.(*planner.Route)
		if !ok {
			return nil, 0, errCatalogMoved
		}
		h, err := ss.valueHash(nsp, st, nr.Value, params)
		sp, p = nsp, nsp.plan
		return p, h, err
	})
	if err != nil {
		return nil, 0, params, onNode, err
	}
	if tgt.copies {
		return nil, 0, params, onCopies, nil
	}
	return s.shardStmt(sp, tgt.index, st), tgt.node, params, onNode, nil
}

// routeDescribe picks a shard statement to describe st with: one on the
// node the session holds, if any, else the first shard's; a multi-shard
// read is described otherwise (onShards, no statement).
// hide is how many of the shard statement's parameters are the
// coordinator's (sequence values), not the client's.
func (ss *session) routeDescribe(st *Statement) (_ *Statement, node int32, hide int, _ where, _ error) {
	s := ss.srv
	sp, err := ss.stmtPlan(st)
	if err != nil {
		return nil, 0, 0, onNode, err
	}
	p := sp.plan
	switch p.Root.(type) {
	case *planner.DefaultNode:
		return st, ss.homeNode(st.Query), 0, onNode, nil
	case *planner.Scatter:
		return nil, 0, 0, onShards, nil
	}
	if sp.seq != nil {
		hide = sp.seq.count
	}
	snap := s.catalog.Load()
	table := p.DistTable()
	if table == "" {
		table = p.Tables[0]
	}
	shards := snap.Shards[table]
	// A shard on the node the session holds, else the first; not one a
	// cut-over holds (the description would wait for the move's lock and
	// meet its drop: found by an adversary, 40001 to a Parse in a block).
	ss.enterFlight()
	free := func(sh metadata.Shard) bool {
		if s.holds.n.Load() == 0 {
			return true
		}
		_, _, held := s.holding(sh.ID, nil, ss.touched, ss.touchedAll)
		return !held
	}
	idx, node := -1, int32(0)
	if held := ss.heldNode(); held != 0 {
		for i, sh := range shards {
			if slices.Contains(sh.Nodes, held) && free(sh) {
				idx, node = i, held
				break
			}
		}
	}
	for i := 0; idx < 0 && i < len(shards); i++ {
		if free(shards[i]) {
			idx, node = i, shards[i].Nodes[0]
		}
	}
	if idx < 0 {
		// Every shard is held (a table of one shard): the description
		// waits for the cut-over, then is made from the catalog it left.
		waited, err := ss.awaitHold(shards[0].ID, nil)
		if err != nil {
			return nil, 0, 0, onNode, err
		}
		if waited {
			return ss.routeDescribe(st)
		}
		idx, node = 0, shards[0].Nodes[0]
	}
	if p.Kind() == planner.KindInsertSplit {
		x, err := s.insertShardStmt(sp, idx, st)
		return x, node, hide, onNode, err
	}
	if idx >= len(p.ShardSQL()) || p.Kind() != planner.KindRouter && p.Kind() != planner.KindMultiShardWrite && idx != 0 {
		// One statement for every copy: the first shard's, where it is.
		idx, node = 0, shards[0].Nodes[0]
	}
	return s.shardStmt(sp, idx, st), node, hide, onNode, nil
}

// currentNode is the held connection's node, else the default node.
func (ss *session) currentNode() int32 {
	if ss.sc != nil {
		return ss.node
	}
	return ss.srv.defaultNode.Load()
}

// homeNode is where a statement that names no catalog table runs: the
// default node, which has the tables, sequences and functions pgfleet does
// not distribute. A statement that touches none of them (SET, SHOW,
// SAVEPOINT, COMMIT, SELECT 1) stays on the worker the session holds
// (a transaction's or a pipeline's); one that does makes acquire take the
// default node into the transaction, or refuse with 0A000. A pinned
// session keeps to its connection (its temporary tables are there). Only
// a session holding another worker than the default one pays for the
// parse.
func (ss *session) homeNode(sql string) int32 {
	def := ss.srv.defaultNode.Load()
	if ss.sc == nil || ss.node == def || ss.pinned != "" || !ss.routes || planner.TouchesNothing(sql) {
		return ss.currentNode()
	}
	return def
}

// nodeAddr is a node's host:port ("" if unknown).
func (s *Server) nodeAddr(id int32) string {
	if snap := s.catalog.Load(); snap != nil {
		if n := snap.Node(id); n != nil {
			return n.Addr()
		}
	}
	if id == s.defaultNode.Load() {
		return s.cfg.Workers[0]
	}
	return ""
}

// bindParam returns parameter k (0-based) of a Bind message's parameter
// section (after the statement name): its bytes, format code and nullness.
func bindParam(b []byte, k int) (val []byte, format int16, isNull, ok bool) {
	if len(b) < 2 {
		return nil, 0, false, false
	}
	nf := int(binary.BigEndian.Uint16(b))
	b = b[2:]
	if len(b) < 2*nf+2 {
		return nil, 0, false, false
	}
	switch {
	case nf == 1:
		format = int16(binary.BigEndian.Uint16(b))
	case nf > k:
		format = int16(binary.BigEndian.Uint16(b[2*k:]))
	}
	b = b[2*nf:]
	np := int(binary.BigEndian.Uint16(b))
	b = b[2:]
	if k >= np {
		return nil, 0, false, false
	}
	for i := 0; ; i++ {
		if len(b) < 4 {
			return nil, 0, false, false
		}
		n := int32(binary.BigEndian.Uint32(b))
		b = b[4:]
		if n < 0 {
			if i == k {
				return nil, format, true, true
			}
			continue
		}
		if int(n) > len(b) {
			return nil, 0, false, false
		}
		if i == k {
			return b[:n], format, false, true
		}
		b = b[n:]
	}
}
