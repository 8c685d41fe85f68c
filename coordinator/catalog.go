package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfleet/pgfleet/coordinator/twophase"
	"github.com/pgfleet/pgfleet/executor"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
	"github.com/pgfleet/pgfleet/planner"
)

// openCatalog connects to the metadata database, creates the catalog schema
// if needed, registers the configured workers as nodes and loads the first
// snapshot.
func (s *Server) openCatalog(ctx context.Context) error {
	url := s.cfg.MetadataURL
	if url == "" {
		pw := s.cfg.Users["postgres"]
		if pw == "" {
			pw = s.cfg.WorkerPassword
		}
		url = s.cfg.WorkerTLS.ConnString(s.cfg.Workers[0]) + " user=postgres dbname=postgres"
		if pw != "" {
			url += " password=" + quoteConnValue(pw)
		}
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("metadata database: %w", err)
	}
	cfg.MaxConns = 4
	// Commit decisions and catalog changes are durable before anything
	// acts on them, whatever the database's synchronous_commit (a
	// stricter one stays).
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, twophase.SyncCommitSQL(false))
		return err
	}
	s.metaDB = cfg.ConnConfig.Database
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("metadata database: %w", err)
	}
	store := metadata.NewStore(pool)
	// The Citus views go in Init's transaction, under its lock: two
	// coordinators starting at once replaced them together, and
	// PostgreSQL refused one with 23505 on pg_type (TestBudgetSIGSTOP).
	if err := store.Init(ctx, citusViews); err != nil {
		pool.Close()
		return fmt.Errorf("metadata database: %w", err)
	}
	snap, err := store.Load(ctx)
	if err != nil {
		pool.Close()
		return err
	}
	for _, w := range s.cfg.Workers {
		host, port, _ := net.SplitHostPort(w)
		p, _ := strconv.Atoi(port)
		if nodeID(snap, w) == 0 {
			if snap, err = store.AddNode(ctx, host, p); err != nil {
				pool.Close()
				return err
			}
		}
	}
	if s.cfg.LeaseTTL >= 0 {
		lcfg := cfg.Copy()
		lcfg.MaxConns, lcfg.MinConns = 2, 1
		// A renewal holds the lease lock in its transaction: a coordinator
		// frozen in the middle of one (SIGSTOP, a paused VM) would block
		// every other's renewal until all leases lapsed. The server ends
		// such a session, and the lock goes with it.
		params := map[string]string{}
		for k, v := range lcfg.ConnConfig.RuntimeParams {
			params[k] = v
		}
		lcfg.ConnConfig.RuntimeParams = params
		params["idle_in_transaction_session_timeout"] = strconv.FormatInt(max(s.cfg.LeaseTTL/5, 100*time.Millisecond).Milliseconds(), 10)
		lp, err := pgxpool.NewWithConfig(ctx, lcfg)
		if err != nil {
			pool.Close()
			return fmt.Errorf("metadata database: %w", err)
		}
		s.leasePool, s.leases = lp, metadata.NewStore(lp)
	}
	s.metaPool, s.store = pool, store
	s.setCatalog(snap)
	return nil
}

// citusViews are Citus' catalog views over pgfleet's catalog, with the
// columns of Citus where they apply (sizes are not tracked: NULL). They live
// in the metadata database, where statements naming them run. A catalog
// name is schema.relation as the catalog spells them, unquoted: it is read
// as a regclass with both parts quoted (a table "CamelT" made every read
// of the views fail: relation "public.camelt" does not exist), and a
// shell that is gone gives NULL, not an error for every reader.
const citusViews = `
CREATE OR REPLACE VIEW public.citus_tables AS
SELECT pg_catalog.to_regclass(pg_catalog.format('%I.%I', split_part(t.name, '.', 1), substr(t.name, strpos(t.name, '.') + 1))) AS table_name,
       CASE t.kind WHEN 'h' THEN 'distributed' ELSE 'reference' END AS citus_table_type,
       CASE t.kind WHEN 'h' THEN t.dist_column ELSE '<none>' END AS distribution_column,
       t.colocation_id, NULL::text AS table_size, t.shard_count,
       c.relowner::regrole::name AS table_owner, 'heap'::name AS access_method
FROM pgfleet.tables t LEFT JOIN pg_catalog.pg_class c
  ON c.oid = pg_catalog.to_regclass(pg_catalog.format('%I.%I', split_part(t.name, '.', 1), substr(t.name, strpos(t.name, '.') + 1)));
CREATE OR REPLACE VIEW public.citus_shards AS
SELECT pg_catalog.to_regclass(pg_catalog.format('%I.%I', split_part(t.name, '.', 1), substr(t.name, strpos(t.name, '.') + 1))) AS table_name, s.shardid,
       coalesce(t.shard_schema || '.', '') || split_part(t.name, '.', 2) || '_' || s.shardid AS shard_name,
       CASE t.kind WHEN 'h' THEN 'distributed' ELSE 'reference' END AS citus_table_type,
       t.colocation_id, n.host AS nodename, n.port AS nodeport, NULL::bigint AS shard_size
FROM pgfleet.shards s JOIN pgfleet.tables t ON t.name = s.table_name
JOIN pgfleet.placements p ON p.shardid = s.shardid JOIN pgfleet.nodes n ON n.nodeid = p.nodeid;`

func quoteConnValue(v string) string {
	out := []byte{'\''}
	for i := 0; i < len(v); i++ {
		if v[i] == '\'' || v[i] == '\\' {
			out = append(out, '\\')
		}
		out = append(out, v[i])
	}
	return string(append(out, '\''))
}

func nodeID(snap *metadata.Snapshot, addr string) int32 {
	for _, n := range snap.Nodes {
		if n.Addr() == addr {
			return n.ID
		}
	}
	return 0
}

func (s *Server) setCatalog(snap *metadata.Snapshot) {
	for {
		old := s.catalog.Load()
		if old != nil && old.Version > snap.Version {
			return // a newer catalog is installed already
		}
		if s.catalog.CompareAndSwap(old, snap) {
			break
		}
	}
	s.plans.reset()
	// Shards made or moved have OIDs the tables of OIDs do not hold yet:
	// the first description naming one reads them at once. (Within
	// typesEvery of the last reading, such an OID was taken for a plain
	// relation's for good, and a moved shard's columns were described
	// with its new worker's OIDs.)
	s.oidsStale()
	s.kickBudget() // a node added or removed: its share
	s.scatter.reset()
	s.stmtEpoch.Add(1) // DDL elsewhere (ddlEnded): statements are prepared again
	active := int32(0)
	for _, n := range snap.Nodes {
		if n.Active {
			active++
		}
	}
	s.span.Store(max(active, int32(len(s.cfg.Workers))))
	if id := nodeID(snap, s.cfg.Workers[0]); id != 0 {
		s.defaultNode.Store(id)
	}
}

// changedCatalog installs the snapshot of a catalog change this
// coordinator committed and tells the fleet, whose members reload at once.
func (s *Server) changedCatalog(snap *metadata.Snapshot) {
	s.setCatalog(snap)
	if f := s.fleet.Load(); f != nil {
		f.Announce(snap.Version)
	}
}

// ddlEnded tells the fleet that a transaction that sent DDL ended, before
// its client hears so: the catalog version moves (metadata.Store.Touch),
// and every coordinator, on installing it, prepares its statements again
// and describes its multi-shard ones afresh, as a Parse after the DDL on
// PostgreSQL would be analysed anew. One that has not learnt of it yet
// finds out when a worker's result differs from its description
// (resultMoved). A catalog out of reach costs the fleet that, not the
// client its DDL.
func (s *Server) ddlEnded() {
	if s.store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	snap, err := s.store.Touch(ctx)
	if err != nil {
		slog.Warn("telling the fleet of DDL failed; other coordinators learn of it when a worker's answer differs from their description", "err", err)
		return
	}
	s.changedCatalog(snap)
}

// resultMoved records that a statement's result changed under this
// coordinator without its knowing of the DDL (run elsewhere, its news not
// here yet): statements clients prepared before now count as prepared
// before the change (refreshStmt), and pooled connections prepare theirs
// again.
func (s *Server) resultMoved() { s.stmtEpoch.Add(1) }

// kickCatalog asks watchCatalog to reload now: a member of the fleet holds
// a newer catalog version (announced at sent, when it says).
func (s *Server) kickCatalog(v int64, sent time.Time) {
	s.metrics.propagation.announced(v, sent)
	poke(s.catalogKick)
}

// poke wakes a loop (every) at once; a wake-up already due is enough.
func poke(kick chan<- struct{}) {
	select {
	case kick <- struct{}{}:
	default:
	}
}

// every runs fn every period and at once when poked through kick, until
// stop.
func every(stop <-chan struct{}, period time.Duration, kick <-chan struct{}, fn func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		case <-kick:
		}
		fn()
	}
}

// watchCatalog reloads the catalog when its version moves: at once when
// the fleet says a member holds a newer one (kickCatalog), and every poll
// interval, the fallback when gossip is cut or off.
func (s *Server) watchCatalog(stop <-chan struct{}) {
	every(stop, s.cfg.CatalogPoll, s.catalogKick, func() { s.refreshCatalog(context.Background()) })
}

// refreshCatalog reloads the snapshot if the durable version is newer.
func (s *Server) refreshCatalog(ctx context.Context) { _ = s.reloadCatalog(ctx) }

// reloadCatalog is refreshCatalog that says whether the catalog could be
// read (then this coordinator holds the durable version, or a newer one).
func (s *Server) reloadCatalog(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	v, err := s.store.Version(ctx)
	if err != nil {
		return err
	}
	if v == s.catalog.Load().Version {
		return nil
	}
	snap, err := s.store.Load(ctx)
	if err != nil {
		return err
	}
	s.setCatalog(snap)
	s.metrics.propagation.holds(snap.Version, s.metrics.propagated)
	if f := s.fleet.Load(); f != nil {
		f.Held(snap.Version)
	}
	return nil
}

// planCache maps statement text to its plan and the catalog version it was
// made under; a plan from another version is not used.
type planCache struct {
	mu sync.RWMutex
	m  map[string]cachedPlan
}

type cachedPlan struct {
	version int64
	plan    *planner.Plan
}

const maxCachedPlans = 10_000

// maxCachedText is the longest statement text whose plan is cached.
const maxCachedText = 64 << 10

func (c *planCache) get(sql string, version int64) *planner.Plan {
	c.mu.RLock()
	e := c.m[sql]
	c.mu.RUnlock()
	if e.plan == nil || e.version != version {
		return nil
	}
	return e.plan
}

func (c *planCache) put(sql string, version int64, p *planner.Plan) {
	if len(sql) > maxCachedText {
		return // a one-off (a long multi-row INSERT): its tree would stay
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxCachedPlans {
		c.m = map[string]cachedPlan{}
	}
	c.m[sql] = cachedPlan{version, p}
	c.mu.Unlock()
}

func (c *planCache) reset() {
	c.mu.Lock()
	c.m = nil
	c.mu.Unlock()
}

// plan returns the plan for one statement text, from the cache or the
// planner. Without distributed or reference tables there is nothing to plan.
func (s *Server) plan(sql string) (*planner.Plan, error) { return s.planIn(sql, s.catalog.Load()) }

// planIn is plan over the catalog snap (a session's: session.catalog).
func (s *Server) planIn(sql string, snap *metadata.Snapshot) (*planner.Plan, error) {
	fn := planner.MentionsFunction(sql)
	if !fn && (snap == nil || len(snap.Tables) == 0 || !planner.MentionsTable(sql, snap)) && !planner.MentionsFleetView(sql) {
		return defaultPlan, nil
	}
	if snap == nil {
		snap = &metadata.Snapshot{}
	}
	if p := s.plans.get(sql, snap.Version); p != nil {
		return p, nil
	}
	p, err := planner.Build(sql, snap)
	if err != nil {
		return nil, err
	}
	s.plans.put(sql, snap.Version, p)
	return p, nil
}

var defaultPlan = &planner.Plan{Root: &planner.DefaultNode{}}

// gathers reports whether a plan gathers a whole table's rows.
func gathers(p *planner.Plan) bool {
	return p.Scatter() != nil && p.Scatter().Merge != nil && p.Scatter().Merge.Gather
}

// planSimple plans a simple-protocol statement. Its constants are lifted
// into parameters first, so statements that differ only in their constants
// share one cached plan; the literals come back for routing and splicing.
func (s *Server) planSimple(sql string) (*planner.Plan, []literal, error) {
	return s.planSimpleIn(sql, s.catalog.Load())
}

// planSimpleIn is planSimple over the catalog snap (a session's).
func (s *Server) planSimpleIn(sql string, snap *metadata.Snapshot) (*planner.Plan, []literal, error) {
	if planner.MentionsFunction(sql) {
		p, err := s.planIn(sql, snap)
		return p, nil, err
	}
	if snap == nil || len(snap.Tables) == 0 || !planner.MentionsTable(sql, snap) {
		if planner.MentionsFleetView(sql) {
			p, err := s.planIn(sql, snap)
			return p, nil, err
		}
		return defaultPlan, nil, nil
	}
	if norm, lits, ok := liftLiterals(sql); ok {
		norm, lits = collapseLists(norm, lits)
		// The lifted form is used only if it plans and every literal goes
		// back exactly where it came from; else the text is planned as is
		// (-7 lifts to -$1, which is not a value the router can read).
		p, err := s.planIn(norm, snap)
		if err == nil && !p.SyntaxError() && gathers(p) {
			// Lifted constants can hide what the text says (GROUP BY b % 3
			// with the select list's b % 3 as another parameter): the text
			// as written may plan without gathering the whole table.
			if lp, lerr := s.planIn(sql, snap); lerr == nil && !lp.SyntaxError() && !gathers(lp) {
				return lp, nil, nil
			}
		}
		if err == nil && p.Scatter() != nil && p.Scatter().Merge.Kind == planner.SQLMerge && p.Scatter().ParamKeys {
			// A merge statement compares expressions as PostgreSQL does
			// (DISTINCT ON (v * 2) ... ORDER BY v * 2): lifted, each
			// constant is a parameter of its own, a different expression
			// (v * 03 and v * 3 too), so the text is planned as written.
			p, err := s.planIn(sql, snap)
			return p, nil, err
		}
		if err == nil && !p.SyntaxError() {
			if len(p.ShardSQL()) == 0 {
				return p, lits, nil
			}
			if _, ok := spliceLiterals(p.ShardSQL()[0], lits); ok {
				return p, lits, nil
			}
		}
	}
	p, err := s.planIn(sql, snap)
	return p, nil, err
}

// target is where a routed statement runs and what it runs there.
type target struct {
	node  int32
	index int   // shard index into plan.ShardSQL()
	shard int64 // the shard's id (a routed statement's)
	// copies: a reference-table write that every copy must apply (node
	// is the first copy's).
	copies bool
}

// where says how a bound statement runs (routeBind, routeDescribe).
type where uint8

const (
	onNode        where = iota // relayed to one node
	onShards                   // a multi-shard read (scatter.go)
	onCopies                   // a write to every copy of a reference table (refext.go)
	onShardWrites              // a multi-shard write, or a multi-row INSERT's rows of several shards (multiwrite.go)
)

// route picks the node and shard for a plan given the distribution value's
// hash (router plans) and the node the session already holds, if any.
func (s *Server) route(p *planner.Plan, hash int32, held int32, pid uint32) (target, error) {
	snap := s.catalog.Load()
	switch p.Kind() {
	case planner.KindRouter:
		shards := snap.Shards[p.DistTable()]
		idx := metadata.ShardIndex(shards, hash)
		// A plan of another shard count (a split since it was made) names
		// other shards at the same index.
		if idx < 0 || len(shards) != len(p.ShardSQL()) || len(shards[idx].Nodes) == 0 {
			return target{}, errCatalogMoved
		}
		return target{node: shards[idx].Nodes[0], index: idx, shard: shards[idx].ID}, nil
	case planner.KindReferenceRead, planner.KindReferenceWrite:
		if len(p.Tables) == 0 {
			// A reference table only under a data-modifying WITH.
			return target{}, pgerr.New(pgerr.FeatureNotSupported,
				"this statement writes a reference table in a WITH clause, which is not supported yet").
				WithHint("Write the reference table in a statement of its own.")
		}
		if len(snap.Shards[p.Tables[0]]) == 0 {
			return target{}, errCatalogMoved
		}
	}
	switch p.Kind() {
	case planner.KindReferenceRead:
		nodes := snap.Shards[p.Tables[0]][0].Nodes
		if rr, ok := p.Root.(*planner.ReferenceRead); ok && len(rr.Local) > 0 {
			// It reads local relations too: the default node's copy.
			if d := s.defaultNode.Load(); slices.Contains(nodes, d) {
				return target{node: d}, nil
			}
			return target{}, pgerr.New(pgerr.FeatureNotSupported, "reading %s, which only the default node has, beside %s, of which it has no copy, is not supported",
				strings.Join(rr.Local, ", "), p.Tables[0]).
				WithHint("Read them in statements of their own.")
		}
		for _, n := range nodes {
			if n == held {
				return target{node: n}, nil
			}
		}
		return target{node: nodes[int(pid)%len(nodes)]}, nil
	case planner.KindReferenceWrite:
		nodes := snap.Shards[p.Tables[0]][0].Nodes
		return target{node: nodes[0], copies: len(nodes) > 1}, nil
	}
	return target{node: s.defaultNode.Load()}, nil
}

// errCatalogMoved: the table changed between planning and routing.
var errCatalogMoved = executor.ErrCatalogMoved

// errAllNodes refuses a write to every copy of a reference table
// (target.copies) where it cannot run: the simple-query path runs one with
// two-phase commit or joins every copy's worker into the transaction, the
// extended path likewise at Execute (refext.go).
var errAllNodes = pgerr.New(pgerr.FeatureNotSupported,
	"this reference-table write cannot run on every copy here (EXPLAIN ANALYZE of it, or a transaction block in a session pinned to one worker connection)").
	WithHint("Write reference tables outside the transaction block, or reconnect; EXPLAIN without ANALYZE shows the plan.")

// describeTarget says where a routed statement runs, for EXPLAIN.
func (s *Server) describeTarget(p *planner.Plan, t target, lits []literal) string {
	snap := s.catalog.Load()
	switch p.Kind() {
	case planner.KindRouter:
		sh := snap.Shards[p.DistTable()][t.index]
		rel := p.DistTable()[strings.IndexByte(p.DistTable(), '.')+1:]
		return fmt.Sprintf("pgfleet router: shard %s (%s = %s, hash range %d..%d) on worker %s",
			metadata.ShardName(rel, sh.ID), p.DistTable(), describeValue(p.Root.(*planner.Route).Value, lits), sh.MinHash, sh.MaxHash, s.nodeAddr(t.node))
	case planner.KindReferenceWrite:
		return fmt.Sprintf("pgfleet reference-table write: every copy (%d workers) with two-phase commit; plan from worker %s",
			len(snap.Shards[p.Tables[0]][0].Nodes), s.nodeAddr(t.node))
	default:
		return fmt.Sprintf("pgfleet reference-table read: worker %s", s.nodeAddr(t.node))
	}
}

func describeValue(v *planner.Value, lits []literal) string {
	if v.Param > 0 && v.Param <= len(lits) {
		if v.Computed || v.Cast != "" {
			e, _ := spliceFrom(v.Expr, lits[v.Param-1:v.Param], 1)
			return e
		}
		return lits[v.Param-1].token
	}
	if v.Computed {
		return v.Expr
	}
	if v.Param > 0 {
		return fmt.Sprintf("$%d", v.Param)
	}
	return v.Const
}

// explainRow is a DataRow of EXPLAIN's one text column.
func explainRow(line string) []byte {
	b := make([]byte, 0, len(line)+11)
	n := 4 + 2 + 4 + len(line)
	b = append(b, 'D', byte(n>>24), byte(n>>16), byte(n>>8), byte(n), 0, 1)
	l := len(line)
	b = append(b, byte(l>>24), byte(l>>16), byte(l>>8), byte(l))
	return append(b, line...)
}
