package coordinator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/coordinator/shards"
	"github.com/pgfleet/pgfleet/coordinator/twophase"
	"github.com/pgfleet/pgfleet/executor"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/internal/wire"
	"github.com/pgfleet/pgfleet/metadata"
	"github.com/pgfleet/pgfleet/planner"
	"github.com/pgfleet/pgfleet/pooling"
)

const (
	oidInt4 = 23
	oidInt8 = 20
	oidText = 25
	oidVoid = 2278

	oidTimestamptz = 1184
	oidJSONB       = 3802
)

// runFunction runs a Citus-compatible catalog function called with a simple
// query and answers with its result.
func (ss *session) runFunction(fn *planner.Function) error {
	ss.lentUserCode = ss.lentImplicit // (the call itself is pgfleet's)
	ss.txUserCode = ss.txUserCodeWas || ss.lentImplicit
	if ss.inTxn() {
		switch fn.Name {
		case "create_distributed_table", "create_reference_table":
			return ss.citusInTxn(fn)
		}
		return ss.queryError(pgerr.New(pgerr.FeatureNotSupported, "%s inside a transaction block is not supported", fn.Name).
			WithHint("Run it outside BEGIN ... COMMIT (and on its own, not in a query string with other statements)."))
	}
	s := ss.srv
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	arg := func(i int, name, def string) string { return funcArg(fn, i, name, def) }
	var snap *metadata.Snapshot
	var err error
	var conns map[int32]*pgx.Conn
	switch fn.Name {
	case "citus_get_active_worker_nodes", "master_get_active_worker_nodes":
		var rows [][]string
		for _, n := range s.catalog.Load().Nodes {
			if n.Active {
				rows = append(rows, []string{n.Host, strconv.Itoa(n.Port)})
			}
		}
		cols, _ := functionColumns(fn.Name)
		ss.writeRows(cols, functionTypes(fn.Name), rows)
		return nil
	case "citus_add_node", "citus_remove_node":
		host, port := arg(0, "nodename", ""), arg(1, "nodeport", "5432")
		pn, perr := strconv.Atoi(port)
		if host == "" || perr != nil {
			return ss.queryError(pgerr.New(pgerr.InvalidParameterValue, "%s needs a host name and a port", fn.Name))
		}
		if fn.Name == "citus_add_node" {
			// Reference tables are copied to the new node as it is added.
			conns, done, cerr := ss.nodeConns(ctx)
			defer done()
			if cerr != nil {
				return ss.queryError(cerr)
			}
			const newKey = -1
			// The new node's connections are within the budget too.
			defer s.joinBudget(ctx, net.JoinHostPort(host, strconv.Itoa(pn)))()
			if slices.ContainsFunc(slices.Collect(maps.Values(s.catalog.Load().Tables)), func(t *metadata.Table) bool {
				return t.Kind == metadata.Reference
			}) {
				nc, derr := ss.dialNode(ctx, host, pn)
				if derr != nil {
					return ss.queryError(derr)
				}
				conns[newKey] = nc
			}
			s.ensureShardsSchema(ctx, ss.database, net.JoinHostPort(host, strconv.Itoa(pn)))
			var id int32
			if snap, id, err = shards.AddNode(ctx, s.store, conns, s.defaultNode.Load(), newKey, host, pn); err == nil {
				s.changedCatalog(snap)
				cols, _ := functionColumns(fn.Name)
				ss.writeRows(cols, functionTypes(fn.Name), [][]string{{strconv.Itoa(int(id))}})
				return nil
			}
		} else {
			// The node's copies of the reference tables are dropped as it
			// is removed (a node that cannot be reached can be removed
			// only if it has none).
			conns := map[int32]*pgx.Conn{}
			for _, n := range s.catalog.Load().Nodes {
				if !n.Active {
					continue
				}
				if c, derr := ss.dialNode(ctx, n.Host, n.Port); derr == nil {
					conns[n.ID] = c
					defer pooling.Reclaim(context.Background(), c.PgConn())
				}
			}
			snap, err = shards.RemoveNode(ctx, s.store, conns, s.defaultNode.Load(), host, pn)
		}
	case "get_rebalance_table_shards_plan":
		snap := s.catalog.Load() // the plan's nodes are this catalog's
		plan, perr := rebalancePlan(fn, snap)
		if perr != nil {
			return ss.queryError(perr)
		}
		var rows [][]string
		for _, m := range plan {
			from, to := snap.Node(m.From), snap.Node(m.To)
			rows = append(rows, []string{m.Table, strconv.FormatInt(m.Shard, 10), "0",
				from.Host, strconv.Itoa(from.Port), to.Host, strconv.Itoa(to.Port)})
		}
		cols, _ := functionColumns(fn.Name)
		ss.writeRows(cols, functionTypes(fn.Name), rows)
		return nil
	case "citus_set_node_property":
		snap, err = ss.setNodeProperty(ctx, fn)
	case "citus_rebalance_start", "citus_rebalance_status", "citus_rebalance_stop", "citus_rebalance_wait":
		return ss.rebalanceFunction(ctx, fn)
	case "rebalance_table_shards", "citus_drain_node":
		var done func()
		conns, done, err = ss.nodeConns(ctx)
		defer done()
		if err != nil {
			return ss.queryError(err)
		}
		snap, err = ss.rebalance(ctx, fn, conns)
	case "citus_move_shard_placement", "master_move_shard_placement":
		var done func()
		conns, done, err = ss.nodeConns(ctx)
		defer done()
		if err != nil {
			return ss.queryError(err)
		}
		snap, err = ss.moveShard(ctx, fn, conns)
	case "citus_split_shard_by_split_points":
		var done func()
		conns, done, err = ss.nodeConns(ctx)
		defer done()
		if err != nil {
			return ss.queryError(err)
		}
		snap, err = ss.splitShard(ctx, fn, conns)
	case "create_distributed_table", "create_reference_table", "undistribute_table":
		table := arg(0, "table_name", "")
		if table == "" {
			return ss.queryError(pgerr.New(pgerr.InvalidParameterValue, "%s needs a table name", fn.Name))
		}
		var cerr error
		var done func()
		conns, done, cerr = ss.nodeConns(ctx)
		defer done()
		if cerr != nil {
			return ss.queryError(cerr)
		}
		def := s.defaultNode.Load()
		if fn.Name != "undistribute_table" {
			if err := refuseDependents(ctx, conns[def], table); err != nil {
				return ss.queryError(err)
			}
		}
		if fn.Name != "undistribute_table" {
			// Its rows leave the default node's table: every coordinator
			// refuses statements on it until it routes them to the new
			// placement (fence.go).
			release, ferr := s.fenceFleet(ctx, table)
			if ferr != nil {
				return ss.queryError(ferr)
			}
			defer func() { release(err == nil) }()
		}
		if fn.Name != "undistribute_table" {
			s.ensureShardsSchema(ctx, ss.database, nodeAddrs(s.catalog.Load())...)
		}
		switch fn.Name {
		case "create_distributed_table":
			call, cerr := parseCitusCall(fn)
			if cerr != nil {
				return ss.queryError(cerr)
			}
			snap, err = shards.Distribute(ctx, s.store, conns, def, table, call.column, call.count, call.colocate)
		case "create_reference_table":
			snap, err = shards.CreateReference(ctx, s.store, conns, def, table)
		default:
			snap, err = shards.Undistribute(ctx, s.store, s.catalog.Load(), conns, def, table)
		}
	}
	if err != nil {
		s.refreshCatalog(context.Background())
		return ss.queryError(err)
	}
	s.changedCatalog(snap)
	cols, _ := functionColumns(fn.Name)
	ss.writeRows(cols, functionTypes(fn.Name), [][]string{{""}})
	return nil
}

// nodeConns lends the session a connection to every active node from its
// pools, as pgx connections (lend.go); done gives them back.
func (ss *session) nodeConns(ctx context.Context) (conns map[int32]*pgx.Conn, done func(), err error) {
	conns, err = ss.openNodeConns(ctx)
	ss.cancelMu.Lock()
	ss.writeConns = conns // a cancel request reaches their statements
	ss.publishWrites(conns)
	ss.cancelMu.Unlock()
	return conns, func() {
		ss.cancelMu.Lock()
		ss.writeConns = nil
		ss.publishWrites(nil)
		if ss.txw.Load() == nil {
			ss.dlVictim.Store(false)
		}
		ss.cancelMu.Unlock()
		for _, c := range conns {
			if ss.lentUserCode {
				// User code may have changed the connection's session
				// state (an advisory lock, a setting) where the
				// client's own connection does not hold it: closed,
				// not pooled (as a multi-shard read's).
				_ = c.Close(context.Background())
			}
			pooling.Reclaim(context.Background(), c.PgConn())
		}
	}, err
}

func (ss *session) openNodeConns(ctx context.Context) (map[int32]*pgx.Conn, error) {
	s := ss.srv
	conns := map[int32]*pgx.Conn{}
	for _, n := range s.catalog.Load().Nodes {
		if !n.Active {
			continue
		}
		c, err := ss.dialNode(ctx, n.Host, n.Port)
		if err != nil {
			for _, o := range conns {
				pooling.Reclaim(ctx, o.PgConn())
			}
			return nil, err
		}
		conns[n.ID] = c
	}
	return conns, nil
}

// writeRows answers a simple query with a small text result and
// ReadyForQuery.
func (ss *session) writeRows(cols []string, oids []uint32, rows [][]string) {
	ss.writeRowsNull(cols, oids, rows, nil)
}

// writeRowsNull is writeRows where null(row, column) makes a value NULL.
func (ss *session) writeRowsNull(cols []string, oids []uint32, rows [][]string, null func(r, c int) bool) {
	ss.out = wire.AppendFrame(ss.out, 'T', rowDescription(cols, oids))
	for i, r := range rows {
		dr := pgproto3.DataRow{}
		for j, v := range r {
			if null != nil && null(i, j) {
				dr.Values = append(dr.Values, nil)
			} else {
				dr.Values = append(dr.Values, []byte(v))
			}
		}
		ss.out, _ = dr.Encode(ss.out)
	}
	cc := pgproto3.CommandComplete{CommandTag: []byte("SELECT " + strconv.Itoa(len(rows)))}
	ss.out, _ = cc.Encode(ss.out)
	ss.out = readyForQuery(ss.out, 'I')
}

// writeAllNodes runs a reference-table write on every copy, atomically, and
// answers with the first copy's result.
func (ss *session) writeAllNodes(p *planner.Plan, lits []literal, text string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := ss.sameOnEveryCopy(ctx, p, lits, nil, nil, nil); err != nil {
		return ss.runFrozen(p.Mutability(), text, err)
	}
	conns, done, err := ss.nodeConns(ctx)
	defer done()
	if err != nil {
		return ss.queryError(err)
	}
	sql := p.ShardSQL()[0]
	if lits != nil {
		sql, _ = spliceLiterals(sql, lits)
	}
	d, err := refDigestOf(sql, p.Tables[0])
	if err != nil {
		return ss.queryError(err)
	}
	snap := ss.srv.catalog.Load()
	res, err := shards.ExecAllParams(ctx, ss.srv.store, snap, conns, snap.Shards[p.Tables[0]][0].Nodes, d.sql,
		nil, nil, nil, nil, d.check(p.Tables[0]))
	if err != nil {
		return ss.queryError(err)
	}
	tag := d.tag(res)
	d.strip(res)
	if (d.returning || d.verb == "") && len(res.FieldDescriptions) > 0 {
		ss.appendRows(snap.Shards[p.Tables[0]][0].Nodes[0], res.FieldDescriptions, res.Rows)
	}
	cc := pgproto3.CommandComplete{CommandTag: []byte(tag)}
	ss.out, _ = cc.Encode(ss.out)
	ss.out = readyForQuery(ss.out, 'I')
	return nil
}

// insertSplit runs a multi-row INSERT into a distributed table: rows of one
// shard go through the session's usual path; rows of several shards are
// inserted shard by shard in one distributed transaction.
func (ss *session) insertSplit(p *planner.Plan, x *planner.InsertSplit, lits []literal, text string) error {
	snap := ss.srv.catalog.Load()
	all := snap.Shards[p.DistTable()]
	order, groups, err := groupRows(x, all, func(v *planner.Value) (int32, error) { return ss.literalHash(p, v, lits) })
	if err != nil {
		return ss.queryError(err)
	}
	if p.Explain != nil {
		return ss.explainInsertSplit(p, lits, order, groups)
	}
	sqlFor := func(idx int) (string, error) {
		sql, err := x.SplitInsert(idx, groups[idx])
		if err == nil && lits != nil {
			sql, _ = spliceLiterals(sql, lits)
		}
		return sql, err
	}
	if len(order) == 1 {
		sql, err := sqlFor(order[0])
		if err != nil {
			return ss.queryError(err)
		}
		body := append(append(ss.qbuf[:0], sql...), 0)
		ss.qbuf = body
		return ss.relayCycle('Q', body, nil, all[order[0]].Nodes[0])
	}
	if err := ss.txnWriteRefusal("INSERT", p.DistTable()); err != nil {
		return ss.queryError(err)
	}
	// Each worker runs its rows' statement in a transaction of its own:
	// what it would compute for itself (now(), CURRENT_TIMESTAMP, a STABLE
	// default such as DEFAULT now()) would differ between rows that
	// PostgreSQL gives one value.
	mctx, mcancel := context.WithTimeout(context.Background(), time.Minute)
	err = ss.sameOnEveryCopy(mctx, p, lits, nil, nil, nil)
	mcancel()
	if err != nil {
		return ss.runFrozen(p.Mutability(), text, err)
	}
	if x.Returning && !x.RowPerValue {
		return ss.queryError(pgerr.New(pgerr.FeatureNotSupported,
			"RETURNING in a multi-row INSERT ... ON CONFLICT DO NOTHING (or DO UPDATE ... WHERE) into %s whose rows belong to several shards is not supported yet", p.DistTable()).
			WithHint("Insert the rows one distribution value per statement, or read them back with a SELECT."))
	}
	// Each worker runs its shards' statements; RETURNING rows come back
	// in the order the statements run (by node, then shard), each
	// statement's in its rows' order, and go out in the VALUES order.
	byNode := map[int32][]string{}
	rowsOf := map[int32][]int{}
	for _, idx := range order {
		sql, err := sqlFor(idx)
		if err != nil {
			return ss.queryError(err)
		}
		node := all[idx].Nodes[0]
		byNode[node] = append(byNode[node], sql)
		rowsOf[node] = append(rowsOf[node], groups[idx]...)
	}
	var places []int
	if x.Returning {
		for _, node := range slices.Sorted(maps.Keys(rowsOf)) {
			places = append(places, rowsOf[node]...)
		}
	}
	if ss.inTxn() {
		// Joined into the client's transaction, as a multi-shard write.
		return ss.writeInTxnSimple(text, "INSERT", byNode, places)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	return ss.writeGroupsSimple(ctx, snap, byNode, text, "INSERT", x.Returning, places)
}

// ddlWords are the statements that may change a distributed table's
// definition or privileges, which runDDL sends to every shard (GRANT and
// REVOKE may change a function's, type's or schema's instead: objectDDL
// sees them first).
var ddlWords = []string{"CREATE", "ALTER", "DROP", "TRUNCATE", "GRANT", "REVOKE"}

// objectWords start the statements that may change a function, type,
// domain, collation or schema (COMMENT ON) and no table runDDL handles.
var objectWords = []string{"COMMENT"}

// runDDL runs DDL on distributed and reference tables on every shard and
// the default node's table, all or nothing. handled is false when the
// statement changes no catalog table.
func (ss *session) runDDL(sql string, cls *class) (handled bool, err error) {
	snap := ss.srv.catalog.Load()
	if !ss.routes || snap == nil {
		return false, nil
	}
	lx := lexer{s: sql}
	n, _, _, _ := lx.statement()
	if n == 0 {
		return false, nil
	}
	if cls.temp && cls.count == 1 {
		// A temporary object's DDL: the session's own connection's, as
		// any statement (its other workers never see the object).
		return false, nil
	}
	if cls.ddl && cls.count > 1 {
		// A batch whose later statement changes a function, type, ...:
		// objectDDL sees only batches that start with DDL.
		if _, err := ss.objectDDLBatch(sql, snap); err != nil {
			// Run one statement at a time in the string's transaction,
			// as PostgreSQL does: each such DDL reaches every worker
			// in it (objectDDLInTxn).
			if ss.multi == nil && ss.pinned == "" {
				if parts := planner.Split(sql, snap, true); parts != nil {
					return true, ss.multiStatement(parts)
				}
			}
			return true, ss.queryError(err)
		}
	}
	objectOnly := slices.ContainsFunc(objectWords, func(w string) bool { return strings.EqualFold(lx.words[0], w) })
	if !objectOnly && !slices.ContainsFunc(ddlWords, func(w string) bool {
		return strings.EqualFold(lx.words[0], w)
	}) {
		return false, nil
	}
	ss.srv.ddlEpoch.Add(1) // CREATE FUNCTION, ALTER TABLE ... SET DEFAULT, ...
	// Whether a table is distributed is the durable catalog's answer: a
	// table another coordinator has just distributed is not in this
	// one's snapshot until gossip or the poll brings it, and DDL run here
	// as on a plain table would change the first worker's table only,
	// not its shards. One read of the catalog's version per DDL statement
	// (if the metadata database does not answer, the snapshot stands, as
	// for every other statement).
	ss.srv.refreshCatalog(context.Background())
	snap = ss.catalog()
	if err := shards.RefuseSchemaRevoke(sql, snap); err != nil {
		return true, ss.queryError(err)
	}
	if handled, err := ss.objectDDL(sql, snap); handled || objectOnly {
		return handled, err
	}
	if len(snap.Tables) == 0 {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	tables, err := shards.DDLTables(ctx, nil, sql, snap)
	var conns map[int32]*pgx.Conn
	done := func() {}
	defer func() { done() }()
	def := ss.srv.defaultNode.Load()
	if errors.Is(err, shards.ErrIndexLookup) && ss.inTxn() && ss.canTakeInAll() {
		// Which tables the indexes belong to, the transaction's default
		// node knows (an index it made is not visible elsewhere).
		return true, ss.tableDDLInTxn(sql, snap)
	}
	if errors.Is(err, shards.ErrIndexLookup) {
		if conns, done, err = ss.nodeConns(ctx); err != nil {
			return true, ss.queryError(err)
		}
		tables, err = shards.DDLTables(ctx, conns[def], sql, snap)
	}
	var exists *shards.TableExistsError
	if errors.As(err, &exists) {
		return true, ss.tableExists(exists)
	}
	if err != nil {
		return true, ss.queryError(err)
	}
	if len(tables) == 0 {
		return false, nil
	}
	// A table named without its schema is taken as public's, as a
	// statement's: under another search_path PostgreSQL must find it
	// there too (GRANT ON t with search_path = ds, public granted on
	// every shard of public.t and on the default node's ds.t).
	if err := ss.checkPath(&planner.Plan{Unqualified: planner.UnqualifiedIn(sql, snap)}); err != nil {
		return true, ss.queryError(err)
	}
	if err := ss.cursorsUse(tables, lx.words[:]); err != nil {
		ss.failBlock()
		return true, ss.queryError(err)
	}
	if ss.inTxn() {
		if ss.canTakeInAll() {
			return true, ss.tableDDLInTxn(sql, snap)
		}
		return true, ss.queryError(pgerr.New(pgerr.FeatureNotSupported,
			"DDL on distributed or reference tables is not supported in this transaction block: it cannot take in the other workers").
			WithHint("Run it outside BEGIN ... COMMIT, or before SET in the transaction: it runs on every shard, all or nothing."))
	}
	if conns == nil {
		if conns, done, err = ss.nodeConns(ctx); err != nil {
			return true, ss.queryError(err)
		}
	}
	if err := checkDDLValues(ctx, conns[def], sql); err != nil {
		return true, ss.queryError(err)
	}
	notices, shellDone := shellNotices(conns[def])
	tag, newSnap, err := shards.RunDDL(ctx, ss.srv.store, snap, conns, def, sql, shellDone)
	pooling.OnNotice(conns[def], nil)
	ss.out = append(ss.out, *notices...)
	if err != nil {
		ss.srv.refreshCatalog(context.Background())
		if shards.TableCascade(sql) {
			err = ss.cascadeRefused(err) // run as RESTRICT (analyzeDrop)
		}
		return true, ss.queryError(err)
	}
	ss.srv.changedCatalog(newSnap)
	ss.srv.stmtEpoch.Add(1) // the shards changed on their own connections
	cc := pgproto3.CommandComplete{CommandTag: []byte(tag)}
	ss.out, _ = cc.Encode(ss.out)
	ss.out = readyForQuery(ss.out, 'I')
	return true, nil
}

// runMaintenance runs sql as maintenance when it is VACUUM or ANALYZE of
// distributed or reference tables, or a bare one (handled). Called before
// the statement's user code is looked for: the command runs on connections
// of its own, so what it runs (index expressions, ...) pins nothing here.
func (ss *session) runMaintenance(sql string, cls *class) (handled bool, err error) {
	snap := ss.srv.catalog.Load()
	if !cls.maint || cls.count != 1 || !ss.routes || snap == nil || len(snap.Tables) == 0 ||
		ss.txStatus() == 'E' || ss.pendingFailed { // (a failed block answers 25P02 first)
		return false, nil
	}
	lx := lexer{s: sql}
	if n, _, _, _ := lx.statement(); n == 0 || !oneOf(lx.words[0], "VACUUM", "ANALYZE", "ANALYSE") {
		return false, nil
	}
	m, err := shards.PlanMaintenance(sql, snap)
	if err != nil {
		return true, ss.queryError(err)
	}
	if m == nil {
		return false, nil
	}
	return true, ss.maintenance(sql, snap, m)
}

// maintenance runs VACUUM or ANALYZE of distributed or reference tables
// (or a bare one, of every table) as shards.Maintenance says: the
// statement as written on the default node, whose errors and notices are
// the client's (VERBOSE's included), then the command over each node's
// shards, each on a connection of its own, outside any transaction, as
// PostgreSQL runs VACUUM. A shard's error names its node. In a transaction
// block VACUUM fails as on PostgreSQL (25001); ANALYZE, which PostgreSQL
// runs there, is refused.
func (ss *session) maintenance(sql string, snap *metadata.Snapshot, m *shards.Maintenance) error {
	if ss.inTxn() {
		if m.Kind == "VACUUM" {
			return ss.queryError(pgerr.New(pgerr.ActiveSQLTransaction, "VACUUM cannot run inside a transaction block"))
		}
		return ss.queryError(pgerr.New(pgerr.FeatureNotSupported, "ANALYZE of distributed or reference tables is not supported in a transaction block").
			WithHint("Run it outside BEGIN ... COMMIT."))
	}
	if !m.Everywhere {
		if err := ss.checkPath(&planner.Plan{Unqualified: planner.UnqualifiedIn(sql, snap)}); err != nil {
			return ss.queryError(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	conns, done, err := ss.nodeConns(ctx)
	if err != nil {
		return ss.queryError(err)
	}
	// What it runs of the tables' user code (index expressions, ...) may
	// change the connections' session state: closed after, not pooled.
	ss.lentUserCode = true
	defer done()
	def := ss.srv.defaultNode.Load()
	notices, shellDone := shellNotices(conns[def])
	ct, err := conns[def].Exec(ctx, sql)
	shellDone()
	pooling.OnNotice(conns[def], nil)
	ss.out = append(ss.out, *notices...)
	if err != nil {
		return ss.queryError(twophase.ToPgErr(err))
	}
	run := func(node int32, text string) error {
		c := conns[node]
		if c == nil {
			return pgerr.New(pgerr.ConnectionFailure, "%s: no connection to worker %s", m.Kind, ss.srv.nodeAddr(node))
		}
		if _, err := c.Exec(ctx, text); err != nil {
			e := twophase.ToPgErr(err)
			e.Message = fmt.Sprintf("%s failed on worker %s: %s", m.Kind, ss.srv.nodeAddr(node), e.Message)
			return e
		}
		return nil
	}
	if m.Everywhere {
		for _, node := range slices.Sorted(maps.Keys(conns)) {
			if node == def {
				continue // (ran above)
			}
			if err := run(node, sql); err != nil {
				return ss.queryError(err)
			}
		}
	}
	for _, node := range m.Nodes() {
		if err := run(node, m.PerNode[node]); err != nil {
			return ss.queryError(err)
		}
	}
	ss.out = commandComplete(ss.out, ct.String())
	ss.out = readyForQuery(ss.out, 'I')
	return nil
}

// tableExists answers CREATE TABLE of a distributed or reference table's
// name as PostgreSQL does for an existing table: 42P07, or with IF NOT
// EXISTS a notice and the command tag, creating nothing. A name without
// its schema under a search_path other than public might name another
// table: refused.
func (ss *session) tableExists(e *shards.TableExistsError) error {
	public, err := ss.pathPublicNow()
	if err != nil {
		return ss.queryError(err)
	}
	if e.Unqualified && !public {
		return ss.queryError(pgerr.New(pgerr.FeatureNotSupported,
			"this session's search_path is not public, and CREATE TABLE names %s without its schema", e.Table).
			WithHint("Write the schema with the table name (public.t), or reset search_path."))
	}
	if !e.IfNotExists {
		return ss.queryError(pgerr.New(pgerr.DuplicateTable, "relation %q already exists", e.Relname))
	}
	if ss.sc != nil || ss.pendingFailed {
		// A worker holds the transaction (or it failed): the answer is
		// not the coordinator's to give.
		return ss.queryError(pgerr.New(pgerr.FeatureNotSupported,
			"CREATE TABLE IF NOT EXISTS of %s inside this transaction block is not supported", e.Table).
			WithHint("Run it outside the transaction block."))
	}
	n := pgproto3.NoticeResponse{Severity: "NOTICE", SeverityUnlocalized: "NOTICE", Code: pgerr.DuplicateTable,
		Message: fmt.Sprintf("relation %q already exists, skipping", e.Relname)}
	ss.out, _ = n.Encode(ss.out)
	cc := pgproto3.CommandComplete{CommandTag: []byte("CREATE TABLE")}
	ss.out, _ = cc.Encode(ss.out)
	ss.out = readyForQuery(ss.out, ss.txStatus())
	return nil
}

// objectDDL runs DDL on types, domains, collations, schemas and functions
// (shards.ClassifyObjectDDL) on every active node, all or nothing, so that
// tables distributed later, their shards and queries on them find the same
// objects on every worker. Inside a transaction block it is refused with
// 0A000 (it would reach the transaction's worker only).
func (ss *session) objectDDL(sql string, snap *metadata.Snapshot) (handled bool, err error) {
	active := 0
	for _, n := range snap.Nodes {
		if n.Active {
			active++
		}
	}
	if active < 2 {
		return false, nil
	}
	other, err := shards.ClassifyObjectDDL(sql, snap)
	if err != nil {
		return true, ss.queryError(err)
	}
	if other == "" {
		// New objects in a batch of several statements are made on the
		// default node only.
		return ss.overloadsElsewhere(sql)
	}
	cascade := false
	if r, ok := shards.CascadeAsRestrict(sql); ok {
		sql, cascade = r, true // what depends on it differs from node to node
	}
	if schemas, ok := shards.SchemaCascade(sql); ok {
		if err := ss.srv.outsideDependents(schemas); err != nil {
			return true, ss.queryError(err)
		}
	}
	if ss.inTxn() {
		if ss.canTakeInAll() {
			return true, ss.objectDDLInTxn(sql, other, snap, cascade)
		}
		// A transaction that cannot take in other workers (pinned, after
		// a SET, its BEGIN sent with other statements).
		if shards.NewObjectDDL(sql) && ss.currentNode() == ss.srv.defaultNode.Load() {
			// Made on the default node only: missing elsewhere (made
			// there by create_distributed_table, or an error), never
			// different.
			return ss.overloadsElsewhere(sql)
		}
		return true, ss.queryError(pgerr.New(pgerr.FeatureNotSupported,
			"DDL on types, domains, collations, schemas or functions is not supported in this transaction block: it cannot take in the other workers").
			WithHint("Run it outside BEGIN ... COMMIT, or before SET in the transaction: it runs on every worker, all or nothing."))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	conns, done, err := ss.nodeConns(ctx)
	defer done()
	if err != nil {
		return true, ss.queryError(err)
	}
	tag, err := shards.RunObjectDDL(ctx, ss.srv.store, snap, conns, ss.srv.defaultNode.Load(), sql, other)
	if err != nil {
		if cascade {
			err = ss.cascadeRefused(err)
		}
		return true, ss.queryError(err)
	}
	cc := pgproto3.CommandComplete{CommandTag: []byte(tag)}
	ss.out, _ = cc.Encode(ss.out)
	ss.out = readyForQuery(ss.out, 'I')
	return true, nil
}

// overloadsElsewhere refuses sql, made on the default node only, when it
// creates a function or aggregate of a name the default node already has
// (any schema, any arguments): a statement calling that name on another
// worker, which does not get the new one, would call the old one there,
// a different answer rather than a missing function (handled: refused).
func (ss *session) overloadsElsewhere(sql string) (handled bool, err error) {
	names := shards.NewRoutines(sql)
	if len(names) == 0 {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conns, done, err := ss.nodeConns(ctx)
	defer done()
	if err != nil {
		return true, ss.queryError(err)
	}
	var taken *string
	if err := conns[ss.srv.defaultNode.Load()].QueryRow(ctx,
		"SELECT pg_catalog.string_agg(DISTINCT proname::text, ', ') FROM pg_catalog.pg_proc WHERE proname::text = ANY($1::text[])",
		names).Scan(&taken); err != nil {
		return true, ss.queryError(err)
	}
	if taken == nil {
		return false, nil
	}
	return true, ss.queryError(pgerr.New(pgerr.FeatureNotSupported,
		"creating a function or aggregate named like an existing one (%s) in a batch of several statements, or in this transaction block, is not supported: it would be made on the default node only, and the other workers would call the existing one", *taken).
		WithHint("Send it as a statement of its own (outside a transaction block after SET), so that it reaches every worker."))
}

// objectDDLInTxn runs DDL of a type, domain, collation, schema or function
// inside the client's transaction block on every active worker, each taken
// into the transaction (joinWorker, in node order after the default node,
// which runs the statement as sent and gives the client its answer; the
// others run the tolerant form ClassifyObjectDDL made). The transaction's
// COMMIT (two-phase commit) makes it everywhere or nowhere, as outside a
// block. An error on any worker fails the transaction there, as
// PostgreSQL's statement would.
func (ss *session) objectDDLInTxn(sql, other string, snap *metadata.Snapshot, cascade bool) error {
	def := ss.srv.defaultNode.Load()
	nodes := []int32{def}
	for _, id := range slices.Sorted(slices.Values(shards.ActiveNodes(snap))) {
		if id != def {
			nodes = append(nodes, id)
		}
	}
	var tag string
	var extra []byte // the default node's notices and parameter changes
	for i, node := range nodes {
		if err := ss.takeIn(node); err != nil {
			return ss.queryError(err)
		}
		text, relay := shards.InClientTxn(other), func(byte, []byte) {}
		if i == 0 {
			text = sql
			relay = func(typ byte, b []byte) { extra = wire.AppendFrame(extra, typ, b) }
		}
		t, err := ss.sc.ExecTag(text, time.Now().Add(10*time.Minute), relay)
		if i == 0 {
			tag = t
		}
		if err != nil {
			var pe *pgconn.PgError
			if !errors.As(err, &pe) {
				return ss.lostServer(err)
			}
			ss.txFailed = true
			e := pgerr.FromWorker(pe)
			if i > 0 {
				e.Message += fmt.Sprintf(" (on worker %s)", ss.srv.nodeAddr(node))
			}
			ss.out = append(ss.out, extra...)
			var err error = e
			if cascade {
				err = ss.cascadeRefused(e)
			}
			er := pgerr.Flatten(err)
			userNames(ss.srv.catalog.Load(), er) // a shard's rows: the table's name
			ss.out, _ = er.Encode(ss.out)
			ss.out = readyForQuery(ss.out, ss.txStatus())
			return nil
		}
	}
	ss.out = append(ss.out, extra...)
	ss.out = commandComplete(ss.out, tag)
	ss.out = readyForQuery(ss.out, ss.txStatus())
	return nil
}

// canTakeInAll reports whether the session's transaction block can take
// in every worker for DDL: not pinned, no SET in it, its BEGIN a statement
// of its own (or not sent yet).
func (ss *session) canTakeInAll() bool {
	return ss.pinned == "" && !ss.txSet && len(ss.pending) == 0 && (ss.sc == nil || ss.begunAlone())
}

// tableDDLInTxn runs DDL of distributed and reference tables (what
// shards.DDLTables recognises: ALTER TABLE, CREATE and DROP INDEX,
// TRUNCATE) inside the client's transaction block, as migration tools send
// it: every active worker is taken into the transaction (the default node
// first), and the statement runs there as outside a block (the shell,
// then every shard's placement; shards.RunDDLInTxn), on the transaction's
// own connections lent to pgx for the statement. The client's COMMIT makes
// it on every worker (two-phase commit), ROLLBACK on none; an error on
// any worker fails the transaction, as PostgreSQL's statement would. Later
// statements of the transaction see the change on every worker; other
// sessions wait on the tables' locks until the transaction ends, as on
// PostgreSQL.
func (ss *session) tableDDLInTxn(sql string, snap *metadata.Snapshot) error {
	def := ss.srv.defaultNode.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	conns, giveBack, err := ss.borrowAll(ctx, snap)
	if giveBack == nil {
		return ss.queryError(err)
	}
	var tag string
	var dropped []string
	notices := new([]byte)
	if err == nil {
		var shellDone func()
		notices, shellDone = shellNotices(conns[def])
		if err = checkDDLValuesIn(ctx, conns[def], sql, true); err == nil {
			tag, dropped, err = shards.RunDDLInTxn(ctx, snap, conns, def, sql, len(ss.savepoints) == 0, shellDone)
		}
	}
	if lost := giveBack(); lost != nil {
		return lost
	}
	ss.out = append(ss.out, *notices...)
	if err != nil {
		ss.failBlock()
		if shards.TableCascade(sql) {
			err = ss.cascadeRefused(err) // run as RESTRICT (analyzeDrop), as outside a block
		}
		return ss.queryError(err)
	}
	// The dropped tables leave the catalog with the block's commit
	// decision (multiEnd).
	for _, name := range dropped {
		if !slices.Contains(ss.dropPending, name) { // DROP TABLE IF EXISTS again
			ss.dropPending = append(ss.dropPending, name)
		}
	}
	ss.srv.stmtEpoch.Add(1) // the shards changed on the transaction's connections
	ss.txScatter = &scatterCache{}
	cc := pgproto3.CommandComplete{CommandTag: []byte(tag)}
	ss.out, _ = cc.Encode(ss.out)
	ss.out = readyForQuery(ss.out, ss.txStatus())
	return nil
}

// shellNotices collects, as NoticeResponse frames for the client, the
// notices the default node's connection c gets until shellDone is called
// (those of the shell's statement: IF EXISTS ... skipping; the shards'
// that follow are not the client's).
func shellNotices(c *pgx.Conn) (notices *[]byte, shellDone func()) {
	notices = new([]byte)
	over := false
	pooling.OnNotice(c, func(n *pgconn.Notice) {
		if over {
			return
		}
		nr := pgproto3.NoticeResponse{Severity: n.Severity, SeverityUnlocalized: n.SeverityUnlocalized, Code: n.Code,
			Message: n.Message, Detail: n.Detail, Hint: n.Hint, Where: n.Where, File: n.File, Line: n.Line, Routine: n.Routine}
		*notices, _ = nr.Encode(*notices)
	})
	return notices, func() { over = true }
}

// borrowAll takes every active worker into the client's transaction block
// (the default node first) and lends the block's connections to pgx for
// the coordinator's own statements in it (pooling.Borrow). giveBack ends
// the loans; its error (a
// connection of the transaction was lost, so it cannot commit) ends the
// session as when the current connection is lost, and is what the caller
// returns. giveBack nil: a worker could not be taken in (err), nothing is
// lent; otherwise the caller calls giveBack, err or not.
func (ss *session) borrowAll(ctx context.Context, snap *metadata.Snapshot) (
	conns map[int32]*pgx.Conn, giveBack func() error, err error) {
	def := ss.srv.defaultNode.Load()
	nodes := []int32{def}
	for _, id := range slices.Sorted(slices.Values(shards.ActiveNodes(snap))) {
		if id != def {
			nodes = append(nodes, id)
		}
	}
	for _, node := range nodes {
		if err := ss.takeIn(node); err != nil {
			return nil, nil, err
		}
	}
	held := map[int32]*pooling.ServerConn{ss.node: ss.sc}
	for _, p := range ss.parked {
		held[p.node] = p.sc
	}
	conns = map[int32]*pgx.Conn{}
	var lost error
	giveBack = func() error {
		for _, c := range conns {
			if err := pooling.GiveBack(context.Background(), c); err != nil && lost == nil {
				lost = err
			}
		}
		if lost != nil {
			// The session ends (its connections are released, the
			// transaction rolled back on every worker).
			return ss.lostServer(lost)
		}
		return nil
	}
	for _, node := range nodes {
		c, err := pooling.Borrow(ctx, held[node])
		if err != nil {
			lost = err
			return conns, giveBack, err
		}
		conns[node] = c
	}
	return conns, giveBack, nil
}

// checkDDLValues refuses (0A000) an ALTER TABLE of a distributed or
// reference table whose ADD COLUMN ... DEFAULT or ALTER COLUMN ... TYPE
// ... USING expression each shard or copy would compute on its own worker
// unless PostgreSQL finds it immutable (planner.DDLValueChecks): the check
// runs on the default node's (empty) table in a transaction rolled back.
func checkDDLValues(ctx context.Context, c *pgx.Conn, sql string) error {
	return checkDDLValuesIn(ctx, c, sql, false)
}

// checkDDLValuesIn is checkDDLValues on c, inside a transaction block
// (inTxn: the check runs in a savepoint rolled back) or not.
func checkDDLValuesIn(ctx context.Context, c *pgx.Conn, sql string, inTxn bool) error {
	checks, word := planner.DDLValueChecks(sql)
	if len(checks) == 0 && !word {
		return nil
	}
	refuse := func(why string) error {
		return pgerr.New(pgerr.FeatureNotSupported,
			"a DEFAULT or USING expression that is not immutable (%s) is not supported in ALTER TABLE of a distributed or reference table: each shard would compute its own values", why).
			WithHint("Add the column without the DEFAULT (or with a constant one), then fill it with UPDATE; functions there must be IMMUTABLE.")
	}
	if word {
		return refuse("a date/time word such as 'now'")
	}
	if c == nil {
		return refuse("cannot be checked")
	}
	pc := c.PgConn()
	begin, end := "BEGIN", "ROLLBACK"
	if inTxn {
		begin, end = "SAVEPOINT pgfleet_check", "ROLLBACK TO SAVEPOINT pgfleet_check; RELEASE SAVEPOINT pgfleet_check"
	}
	if err := pc.Exec(ctx, begin).Close(); err != nil {
		return err
	}
	defer func() { _ = pc.Exec(context.Background(), end).Close() }()
	for _, chk := range checks {
		if _, err := pc.Exec(ctx, chk).ReadAll(); err != nil {
			return refuse(pgerr.Flatten(err).Message)
		}
	}
	return nil
}

// extendedObjectDDL refuses, with more than one active node, DDL on
// functions, types, domains, collations and schemas sent with the extended
// protocol: only the simple protocol runs it on every node (objectDDL).
func (ss *session) extendedObjectDDL(sql string) error {
	snap := ss.srv.catalog.Load()
	if !ss.routes || snap == nil {
		return nil
	}
	active := 0
	for _, n := range snap.Nodes {
		if n.Active {
			active++
		}
	}
	if active < 2 {
		return nil
	}
	other, err := shards.ClassifyObjectDDL(sql, snap)
	if err != nil {
		return err
	}
	if other != "" && !(shards.NewObjectDDL(sql) && ss.currentNode() == ss.srv.defaultNode.Load()) {
		return pgerr.New(pgerr.FeatureNotSupported,
			"DDL on types, domains, collations, schemas or functions is not supported with the extended query protocol").
			WithHint("Send it as a simple query (outside a transaction block): it then runs on every worker, all or nothing.")
	}
	return nil
}

// objectDDLBatch refuses (with more than one active node) a batch of
// several statements among which one changes or drops a function, type,
// domain, collation or schema (shards.ClassifyObjectDDL).
func (ss *session) objectDDLBatch(sql string, snap *metadata.Snapshot) (string, error) {
	active := 0
	for _, n := range snap.Nodes {
		if n.Active {
			active++
		}
	}
	if active < 2 {
		return "", nil
	}
	return shards.ClassifyObjectDDL(sql, snap)
}

// analysisFirst answers a statement split over shards that failed on one
// of them (err). PostgreSQL analyses and plans the whole statement before
// it executes a row or checks that the transaction may write, so an error
// there (a bad constant: '2020-13-01'::date, 22008; -2147483648::int4,
// 22003, folded by the planner) is its answer, whichever error a shard
// reported first. EXPLAIN of the statement on the default node, whose
// table of the same name has the same columns and is read under the
// session's settings, runs exactly those steps and nothing else (no row,
// no read-only check); its error, if any, is the client's answer. One
// round trip, on this error path only.
func (ss *session) analysisFirst(text string, err error) error {
	return explainError(ss.onDefaultNode(func(sc *pooling.ServerConn) error {
		_, qerr := executor.QueryText(sc, "EXPLAIN (COSTS OFF) "+text)
		return qerr
	}), err)
}

// analysisFirstBound is analysisFirst for a statement of the extended
// protocol: EXPLAIN of it is prepared with the statement's parameter types
// (workerTail: the client's, else those it was told) and bound with the
// client's values as sent, so the analysis and planning see what the
// statement saw.
func (ss *session) analysisFirstBound(st *Statement, formats []int16, values [][]byte, err error) error {
	tail, _ := workerTail(st)
	oids := paramOIDs(tail)
	for i, o := range oids {
		oids[i] = executor.WorkerParamOID(o, true)
	}
	return explainError(ss.onDefaultNode(func(sc *pooling.ServerConn) error {
		b := sc.Buf()
		b, _ = (&pgproto3.Parse{Query: "EXPLAIN (COSTS OFF) " + st.Query, ParameterOIDs: oids}).Encode(b)
		b, _ = (&pgproto3.Bind{ParameterFormatCodes: formats, Parameters: values}).Encode(b)
		b, _ = (&pgproto3.Execute{}).Encode(b)
		b, _ = (&pgproto3.Sync{}).Encode(b)
		sc.SetBuf(b)
		if ferr := sc.Flush(); ferr != nil {
			return ferr
		}
		_, rerr := executor.ReadText(sc)
		return rerr
	}), err)
}

// explainError is the worker's error of an EXPLAIN (analysisFirst), else
// err.
func explainError(explained, err error) error {
	var we *executor.WorkerError
	if errors.As(explained, &we) {
		return we
	}
	return err
}

// appendRows appends to the session's output a RowDescription of fields and a DataRow per row.
//
// node is the node that described fields on a connection of the
// coordinator's own: their type OIDs and shards' columns become the
// default node's (describedAs), as on the pools' connections.
func (ss *session) appendRows(node int32, fields []pgconn.FieldDescription, rows [][][]byte) {
	at := len(ss.out)
	ss.out = appendRowsTo(ss.out, fields, rows)
	ss.srv.describedAs(node, ss.database, ss.out[at:])
}

func appendRowsTo(out []byte, fields []pgconn.FieldDescription, rows [][][]byte) []byte {
	rd := pgproto3.RowDescription{}
	for _, f := range fields {
		rd.Fields = append(rd.Fields, pgproto3.FieldDescription{Name: []byte(f.Name), TableOID: f.TableOID,
			TableAttributeNumber: f.TableAttributeNumber, DataTypeOID: f.DataTypeOID, DataTypeSize: f.DataTypeSize,
			TypeModifier: f.TypeModifier, Format: f.Format})
	}
	out, _ = rd.Encode(out)
	for _, r := range rows {
		dr := pgproto3.DataRow{Values: r}
		out, _ = dr.Encode(out)
	}
	return out
}

// nodeAddrs lists the addresses of the catalog's active nodes.
func nodeAddrs(snap *metadata.Snapshot) []string {
	var out []string
	for _, n := range snap.Nodes {
		if n.Active {
			out = append(out, n.Addr())
		}
	}
	return out
}

// outsideDependents refuses DROP SCHEMA ... CASCADE when an object outside
// the schemas depends on one inside them (a column of another schema's
// table of one of their types, a view over one of their tables): the
// cascade would drop it too, differently on each node (shards, shells).
// Asked of the default node.
func (s *Server) outsideDependents(schemas []string) error {
	if s.metaPool == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var objs []string
	if err := s.askMeta(ctx, func() (err error) {
		objs, err = s.outsideDependentsOnce(ctx, schemas)
		return err
	}); err != nil {
		return err
	}
	if len(objs) == 0 {
		return nil
	}
	return &pgerr.Error{Severity: "ERROR", Code: pgerr.FeatureNotSupported,
		Message: "DROP SCHEMA ... CASCADE is not supported when objects outside the schema depend on what it holds",
		Detail:  strings.Join(objs, "\n"),
		Hint:    "Drop those objects first (the detail lists them), then the schema."}
}

func (s *Server) outsideDependentsOnce(ctx context.Context, schemas []string) ([]string, error) {
	rows, err := s.metaPool.Query(ctx, `SELECT DISTINCT pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid)
  FROM pg_catalog.pg_depend d
 WHERE d.deptype IN ('n', 'a')
   AND (pg_catalog.pg_identify_object(d.refclassid, d.refobjid, 0)).schema = ANY($1)
   AND d.classid <> 'pg_catalog.pg_namespace'::pg_catalog.regclass
   AND coalesce((pg_catalog.pg_identify_object(d.classid, d.objid, 0)).schema, '') <> ALL($1)
 ORDER BY 1 LIMIT 10`, schemas)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
