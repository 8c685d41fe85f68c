package shards

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/coordinator/twophase"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
)

// Transfer modes of a shard move, as Citus' shard_transfer_mode names them.
const (
	// TransferAuto copies with logical replication when it can (the source
	// has wal_level = logical, every table of the group has a replica
	// identity, pgfleet can log in as a superuser), else as block_writes.
	TransferAuto = "auto"
	// TransferLogical copies with logical replication or fails.
	TransferLogical = "force_logical"
	// TransferBlockWrites copies while the group's shards on the source are
	// locked (statements on them wait).
	TransferBlockWrites = "block_writes"
)

// MoveConfig is what a shard move needs beyond the session's connections.
type MoveConfig struct {
	Mode string
	// Database is the nodes' database the move is in, for its record
	// (metadata.MoveRecord).
	Database string
	// Admin opens a new superuser connection to a node's database, for
	// logical replication (publication, subscription, the catch-up marker
	// and the comparison); nil allows block_writes only. The move closes
	// the connections it opens.
	Admin func(ctx context.Context, node int32) (*pgx.Conn, error)
	// SourceDSN is the connection string by which the target node's
	// subscription reaches the source node's database.
	SourceDSN func(node int32) string
	// Hold, if set, keeps the fleet's statements off the group's shards
	// for the cut-over (see HoldFunc).
	Hold HoldFunc
}

// HoldFunc keeps the fleet's statements off a shard group (its shards
// ids, of tables) until release; done says the move or split committed. A
// move or split holds its group before it locks the source. An error stops
// it.
type HoldFunc func(ctx context.Context, ids []int64, tables []string) (release func(done bool), err error)

// holdShards holds the group of shards (of tables) through hold, if set;
// release lifts the hold (nothing without one).
func holdShards(ctx context.Context, hold HoldFunc, shards []metadata.Shard, tables []*metadata.Table) (release func(done bool), err error) {
	if hold == nil {
		return func(bool) {}, nil
	}
	ids := make([]int64, len(shards))
	names := make([]string, len(shards))
	for i, sh := range shards {
		ids[i], names[i] = sh.ID, tables[i].Name
	}
	return hold(ctx, ids, names)
}

// moveMember is one shard of the colocated group a move carries.
type moveMember struct {
	table *metadata.Table
	shard metadata.Shard
	def   *Def
	name  string // the shard's relation name
	ident string // its quoted, qualified name
}

func (m *moveMember) qual() string { return m.table.ShardsIn() + "." + m.name }

// heldGroup is the shard group of a move or split, its lock held and the
// catalog read again under it.
type heldGroup struct {
	o      *op
	snap   *metadata.Snapshot
	shards []metadata.Shard
	tables []*metadata.Table
	lock   *metadata.MoveLock
}

// holdGroup starts operation what on the group of shard id: one move or
// split of the group at a time (its move lock, which the caller releases);
// the catalog is read again under the lock, settled, so that nothing else
// changes the group's placements until the operation ends.
func holdGroup(ctx context.Context, store *metadata.Store, conns map[int32]*pgx.Conn, defaultNode int32,
	what string, id int64) (*heldGroup, error) {
	o, snap, err := start(ctx, store, conns, defaultNode, what, false)
	if err != nil {
		return nil, err
	}
	shards, tables, err := ColocatedShards(snap, id)
	if err != nil {
		return nil, err
	}
	lock, err := store.HoldMoveLock(ctx, tables[0].ColocationID, shards[0].MinHash)
	if err != nil {
		return nil, err
	}
	if snap, err = store.LoadSettled(ctx); err == nil {
		o.learn(snap)
		shards, tables, err = ColocatedShards(snap, id)
	}
	if err != nil {
		lock.Release()
		return nil, err
	}
	return &heldGroup{o: o, snap: snap, shards: shards, tables: tables, lock: lock}, nil
}

// ColocatedShards returns the shards that move together with shard id: the
// shard of the same hash range of every distributed table colocated with
// its table, ordered by table name. Reference tables' shards are not moved
// (0A000); an unknown id is 42704.
func ColocatedShards(snap *metadata.Snapshot, id int64) ([]metadata.Shard, []*metadata.Table, error) {
	var table *metadata.Table
	var sh metadata.Shard
	for name, shards := range snap.Shards {
		for _, s := range shards {
			if s.ID == id {
				table, sh = snap.Tables[name], s
			}
		}
	}
	if table == nil {
		return nil, nil, pgerr.New(pgerr.UndefinedObject, "shard %d is not in the catalog", id).
			WithHint("citus_shards lists the shards and their placements.")
	}
	if table.Kind != metadata.Distributed {
		return nil, nil, pgerr.New(pgerr.FeatureNotSupported, "shard %d belongs to reference table %s, which has a copy on every node", id, table.Name).
			WithHint("Move shards of distributed tables; a new node gets its reference tables from citus_add_node.")
	}
	var names []string
	for name, t := range snap.Tables {
		if t.Kind == metadata.Distributed && t.ColocationID == table.ColocationID && t.ShardCount == table.ShardCount {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var shards []metadata.Shard
	var tables []*metadata.Table
	for _, name := range names {
		i := metadata.ShardIndex(snap.Shards[name], sh.MinHash)
		if i < 0 || snap.Shards[name][i].MinHash != sh.MinHash || snap.Shards[name][i].MaxHash != sh.MaxHash {
			return nil, nil, pgerr.New(pgerr.ObjectNotInPrerequisite, "table %s is colocated with %s but has no shard of hash range %d..%d",
				name, table.Name, sh.MinHash, sh.MaxHash)
		}
		shards = append(shards, snap.Shards[name][i])
		tables = append(tables, snap.Tables[name])
	}
	return shards, tables, nil
}

// MoveShard is citus_move_shard_placement: it moves the placement of shard
// id, and of every shard colocated with it, from node from to node to.
// conns are the session's connections to every active node. The rows go to
// the target with logical replication while writes go on, or under a lock
// that holds writes (cfg.Mode); the switch itself holds the group's writes
// for a moment:
//
//   - the fleet's coordinators hold the group's statements (cfg.Hold);
//   - the group's shards on the source are locked ACCESS EXCLUSIVE;
//   - with logical replication, a marker row committed on the source after
//     the lock is waited for on the target: every write committed before it
//     has been applied there;
//   - the row counts are compared, and the source's shards are dropped in
//     the locked transaction, which is prepared (two-phase commit);
//   - the catalog change (store.MovePlacements) is the commit decision; the
//     prepared transactions commit after it.
//
// A writer that waited for the lock, or a coordinator whose catalog is a
// moment behind, finds the source's shard gone (42P01, which coordinators
// report as 40001: retry) and never writes to a retired placement. Before
// the decision a failure undoes everything (the target's tables are
// dropped); after it, recovery commits what is prepared.
func MoveShard(ctx context.Context, store *metadata.Store, conns map[int32]*pgx.Conn, defaultNode int32,
	id int64, from, to int32, cfg MoveConfig) (*metadata.Snapshot, error) {
	switch cfg.Mode {
	case "", TransferAuto:
		cfg.Mode = TransferAuto
	case TransferLogical, TransferBlockWrites:
	default:
		return nil, pgerr.New(pgerr.InvalidParameterValue, "invalid shard_transfer_mode %q", cfg.Mode).
			WithHint("Use auto, force_logical or block_writes.")
	}
	g, err := holdGroup(ctx, store, conns, defaultNode, "move", id)
	if err != nil {
		return nil, err
	}
	defer g.lock.Release()
	o, snap, shards, tables, lock := g.o, g.snap, g.shards, g.tables, g.lock
	if from == to {
		return nil, pgerr.New(pgerr.InvalidParameterValue, "the source and the target node are the same node %s", o.nodes.describe(from))
	}
	if n := snap.Node(to); n == nil || !n.Active {
		return nil, pgerr.New(pgerr.ObjectNotInPrerequisite, "node %s is not an active node", o.nodes.describe(to)).
			WithHint("Add it with citus_add_node first.")
	}
	var members []*moveMember
	var ids []int64
	for i, sh := range shards {
		if !slices.Contains(sh.Nodes, from) {
			return nil, pgerr.New(pgerr.ObjectNotInPrerequisite, "shard %d of %s has no placement on node %s",
				sh.ID, tables[i].Name, o.nodes.describe(from)).WithHint("citus_shards lists the shards and their placements.")
		}
		if slices.Contains(sh.Nodes, to) {
			return nil, pgerr.New(pgerr.ObjectNotInPrerequisite, "shard %d of %s already has a placement on node %s",
				sh.ID, tables[i].Name, o.nodes.describe(to))
		}
		rel := tables[i].Name[strings.IndexByte(tables[i].Name, '.')+1:]
		name := metadata.ShardName(rel, sh.ID)
		members = append(members, &moveMember{table: tables[i], shard: sh, name: name,
			ident: pgx.Identifier{tables[i].ShardsIn(), name}.Sanitize()})
		ids = append(ids, sh.ID)
	}
	if err := o.checkNodes(ctx, []int32{from, to}); err != nil {
		return nil, err
	}
	for _, m := range members {
		// The shard's own definition, as the target gets it (the cut-over
		// reads it again under the lock: DDL may run meanwhile).
		if m.def, err = TableDef(ctx, o.nodes.conns[from], m.ident); err != nil {
			return nil, o.nodes.wrap(err, "cannot read the definition of shard %s on node %s", m.qual(), o.nodes.describe(from))
		}
	}
	mv := &move{o: o, members: members, from: from, to: to, cfg: cfg}
	defer mv.closeAdmin()
	if err := mv.dropLeftovers(ctx); err != nil {
		return nil, err
	}
	logical, err := mv.canReplicate(ctx)
	if err != nil {
		return nil, err
	}
	began := time.Now()
	if logical {
		if err := mv.replicate(ctx); err != nil {
			return nil, mv.fail(ctx, err)
		}
	}
	if h := testHookBeforeCutOver; h != nil {
		h()
	}
	release, err := holdShards(ctx, cfg.Hold, shards, tables)
	if err != nil {
		return nil, mv.fail(ctx, err)
	}
	held := time.Now()
	if err := mv.cutOver(ctx, logical); err != nil {
		err = mv.fail(ctx, err)
		release(false)
		return nil, err
	}
	// The catalog change is the commit decision.
	failed := false
	after, err := o.commitWith(ctx, func(err error) error { failed = true; return mv.fail(ctx, err) },
		func(ctx context.Context) (*metadata.Snapshot, error) {
			return store.MovePlacements(ctx, lock, ids, from, to)
		})
	release(!failed)
	if failed {
		return nil, err
	}
	mv.done = true
	slog.Info("shard group moved", append([]any{"shards", ids, "from", o.nodes.describe(from), "to", o.nodes.describe(to),
		"logical", logical, "copy", held.Sub(began).Round(time.Millisecond), "writes_held", time.Since(held).Round(time.Millisecond)},
		mv.steps...)...)
	mv.cleanup(ctx)
	return after, err
}

// move is one run of MoveShard.
type move struct {
	o        *op
	members  []*moveMember
	from, to int32
	cfg      MoveConfig
	// name is the publication's, the subscription's, its slot's and the
	// marker table's ("" until replication starts).
	name  string
	admin map[int32]*pgx.Conn
	// made: the target's tables were created outside the move's
	// transaction (logical replication), and are dropped if it fails.
	made bool
	done bool // decided to commit: the source's tables go, the target's stay
	// steps: how long each step of the cut-over took, for the log.
	steps []any
}

// adminConn returns the move's superuser connection to node, opening it
// on first use.
func (mv *move) adminConn(ctx context.Context, node int32) (*pgx.Conn, error) {
	if c := mv.admin[node]; c != nil && !c.IsClosed() {
		return c, nil
	}
	c, err := mv.cfg.Admin(ctx, node)
	if err != nil {
		return nil, mv.o.nodes.wrap(err, "cannot connect to node %s as pgfleet's superuser", mv.o.nodes.describe(node))
	}
	if mv.admin == nil {
		mv.admin = map[int32]*pgx.Conn{}
	}
	mv.admin[node] = c
	return c, nil
}

// adminConns returns the move's superuser connections to the source and
// the target.
func (mv *move) adminConns(ctx context.Context) (src, dst *pgx.Conn, err error) {
	if src, err = mv.adminConn(ctx, mv.from); err == nil {
		dst, err = mv.adminConn(ctx, mv.to)
	}
	return src, dst, err
}

func (mv *move) closeAdmin() {
	for _, c := range mv.admin {
		_ = c.Close(context.Background())
	}
}

// dropLeftovers drops tables of the group's shards on the target that a
// move which stopped half way left there: the settled catalog places none
// of them there, and no other move runs.
func (mv *move) dropLeftovers(ctx context.Context) error {
	conn := mv.o.nodes.conns[mv.to]
	if mv.cfg.Admin != nil {
		src, dst, err := mv.adminConns(ctx)
		if err != nil {
			return err
		}
		if err := mv.dropReplication(ctx, src, dst); err != nil {
			return err
		}
		conn = dst
	}
	var idents []string
	for _, m := range mv.members {
		// (Only in pgfleet's own schema: an old table's shards are in
		// the user's schema, beside the user's tables.)
		if m.table.ShardsIn() == metadata.ShardsSchema {
			idents = append(idents, m.ident)
		}
	}
	if len(idents) == 0 {
		return nil
	}
	if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS "+strings.Join(idents, ", ")); err != nil {
		return mv.o.nodes.wrap(err, "cannot drop what an earlier move left on node %s", mv.o.nodes.describe(mv.to))
	}
	return nil
}

// dropReplication drops what earlier moves of the group left of their
// replication on the two nodes (they hold no lock: this move does):
// subscriptions first, which take their slots and table copies' syncs
// with them, then publications and marker tables.
func (mv *move) dropReplication(ctx context.Context, src, dst *pgx.Conn) error {
	var patterns []string
	for _, m := range mv.members {
		patterns = append(patterns, fmt.Sprintf(`pgfleet\_move\_%d\_%%`, m.shard.ID))
	}
	list := func(c *pgx.Conn, sql string) ([]string, error) {
		rows, err := c.Query(ctx, sql, patterns)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, pgx.RowTo[string])
	}
	drop := func(node int32, c *pgx.Conn, what, listSQL, dropSQL string) error {
		names, err := list(c, listSQL)
		for _, name := range names {
			if err == nil {
				_, err = c.Exec(ctx, fmt.Sprintf(dropSQL, pgx.Identifier{name}.Sanitize()))
			}
		}
		if err != nil {
			return mv.o.nodes.wrap(err, "cannot drop the %s an earlier move left on node %s", what, mv.o.nodes.describe(node))
		}
		return nil
	}
	const tables = `SELECT tablename::text FROM pg_catalog.pg_tables WHERE schemaname = 'pgfleet' AND tablename::text LIKE ANY ($1)`
	for _, step := range []struct {
		node            int32
		c               *pgx.Conn
		what, list, sql string
	}{
		{mv.to, dst, "subscriptions", `SELECT s.subname::text FROM pg_catalog.pg_subscription s
			WHERE s.subdbid = (SELECT oid FROM pg_catalog.pg_database WHERE datname = pg_catalog.current_database()) AND s.subname::text LIKE ANY ($1)`,
			"DROP SUBSCRIPTION %s"},
		{mv.from, src, "publications", `SELECT pubname::text FROM pg_catalog.pg_publication WHERE pubname::text LIKE ANY ($1)`, "DROP PUBLICATION %s"},
		{mv.from, src, "marker tables", tables, "DROP TABLE pgfleet.%s"},
		{mv.to, dst, "marker tables", tables, "DROP TABLE pgfleet.%s"},
	} {
		if err := drop(step.node, step.c, step.what, step.list, step.sql); err != nil {
			return err
		}
	}
	return nil
}

// canReplicate decides between logical replication and block_writes.
func (mv *move) canReplicate(ctx context.Context) (bool, error) {
	if mv.cfg.Mode == TransferBlockWrites {
		return false, nil
	}
	why, err := mv.whyNotLogical(ctx)
	if err != nil {
		return false, err
	}
	if why == "" {
		return true, nil
	}
	if mv.cfg.Mode == TransferLogical {
		return false, pgerr.New(pgerr.ObjectNotInPrerequisite, "cannot move with logical replication: %s", why).
			WithHint("Use shard_transfer_mode => 'block_writes', which holds the group's writes while the rows are copied.")
	}
	return false, nil
}

// whyNotLogical says what stops logical replication, or "".
func (mv *move) whyNotLogical(ctx context.Context) (string, error) {
	if mv.cfg.Admin == nil || mv.cfg.SourceDSN == nil {
		return "pgfleet has no superuser login to the workers", nil
	}
	src, err := mv.adminConn(ctx, mv.from)
	if err != nil {
		return "", err
	}
	if _, err := mv.adminConn(ctx, mv.to); err != nil {
		return "", err
	}
	var level string
	if err := src.QueryRow(ctx, "SELECT pg_catalog.current_setting('wal_level')").Scan(&level); err != nil {
		return "", mv.o.nodes.wrap(err, "cannot read the settings of node %s", mv.o.nodes.describe(mv.from))
	}
	if level != "logical" {
		return fmt.Sprintf("node %s has wal_level = %s (logical is needed, and a restart to set it)", mv.o.nodes.describe(mv.from), level), nil
	}
	// UPDATE and DELETE on a published table need a replica identity, or
	// the client's writes would fail while the move runs.
	for _, m := range mv.members {
		var ok bool
		if err := src.QueryRow(ctx, `SELECT c.relreplident = 'f'
			OR c.relreplident = 'd' AND EXISTS (SELECT FROM pg_catalog.pg_index i WHERE i.indrelid = c.oid AND i.indisprimary)
			OR c.relreplident = 'i' AND EXISTS (SELECT FROM pg_catalog.pg_index i WHERE i.indrelid = c.oid AND i.indisreplident)
			FROM pg_catalog.pg_class c WHERE c.oid = $1::regclass`, m.ident).Scan(&ok); err != nil {
			return "", mv.o.nodes.wrap(err, "cannot read shard %s on node %s", m.qual(), mv.o.nodes.describe(mv.from))
		}
		if !ok {
			return fmt.Sprintf("table %s has no primary key or replica identity", m.table.Name), nil
		}
	}
	return "", nil
}

// makeTarget creates the group's shard tables on the target on conn, with
// the schemas and types their columns need; constraints and indexes too
// unless later, when it returns their statements.
func (mv *move) makeTarget(ctx context.Context, conn *pgx.Conn, later bool) ([][]string, error) {
	o, at := mv.o, mv.o.nodes.describe(mv.to)
	var rest [][]string
	for _, m := range mv.members {
		if err := ensureSchema(ctx, conn, m.table.Schema()); err != nil {
			return nil, o.nodes.wrap(err, "cannot create schema %q on node %s", m.table.Schema(), at)
		}
		if m.table.ShardsIn() == metadata.ShardsSchema {
			if err := ensureShardsSchema(ctx, conn); err != nil {
				return nil, o.nodes.wrap(err, "cannot create schema %s on node %s", metadata.ShardsSchema, at)
			}
		}
		types, err := columnTypes(ctx, o.nodes.conns[mv.from], m.def.OID)
		if err != nil {
			return nil, o.nodes.wrap(err, "cannot read the types of shard %s on node %s", m.qual(), o.nodes.describe(mv.from))
		}
		if err := ensureTypes(ctx, conn, types); err != nil {
			return nil, o.nodes.wrap(err, "cannot create the types of %s on node %s", m.table.Name, at)
		}
		stmts := m.def.CreateSQL(m.table.ShardsIn(), m.name)
		if !later {
			stmts = []string{strings.Join(stmts, ";\n")}
		}
		if _, err := conn.Exec(ctx, stmts[0]); err != nil {
			return nil, o.nodes.wrap(err, "cannot create shard %s on node %s", m.qual(), at)
		}
		rest = append(rest, stmts[1:])
	}
	return rest, nil
}

// replicate copies the group's rows to the target with logical
// replication and returns once the initial copy is done; the subscription
// goes on applying the source's writes.
func (mv *move) replicate(ctx context.Context) error {
	o := mv.o
	var b [4]byte
	_, _ = rand.Read(b[:])
	mv.name = fmt.Sprintf("pgfleet_move_%d_%s", mv.members[0].shard.ID, hex.EncodeToString(b[:]))
	src, dst, err := mv.adminConns(ctx)
	if err != nil {
		return err
	}
	// Recorded first: if this coordinator stops, recovery finds what the
	// move made by its record.
	if err := o.store.RecordMove(ctx, metadata.MoveRecord{Name: mv.name, Database: mv.cfg.Database,
		Shard: mv.members[0].shard.ID, Source: mv.from, Target: mv.to}); err != nil {
		return err
	}
	mv.made = true
	if _, err := mv.makeTarget(ctx, dst, false); err != nil {
		return err
	}
	marker := mv.markerIdent()
	for node, c := range map[int32]*pgx.Conn{mv.from: src, mv.to: dst} {
		if _, err := c.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS pgfleet; CREATE TABLE "+marker+" (token text PRIMARY KEY)"); err != nil {
			return o.nodes.wrap(err, "cannot create the move's marker table on node %s", o.nodes.describe(node))
		}
	}
	tables := []string{marker}
	for _, m := range mv.members {
		tables = append(tables, m.ident)
	}
	if _, err := src.Exec(ctx, "CREATE PUBLICATION "+mv.name+" FOR TABLE "+strings.Join(tables, ", ")); err != nil {
		return o.nodes.wrap(err, "cannot create the move's publication on node %s", o.nodes.describe(mv.from))
	}
	if _, err := dst.Exec(ctx, "CREATE SUBSCRIPTION "+mv.name+" CONNECTION "+quoteLiteral(mv.cfg.SourceDSN(mv.from))+
		" PUBLICATION "+mv.name+" WITH (copy_data = true)"); err != nil {
		return o.nodes.wrap(err, "cannot subscribe node %s to node %s", o.nodes.describe(mv.to), o.nodes.describe(mv.from))
	}
	// The initial copy: every table of the subscription ready.
	started := time.Now()
	for {
		var notReady, all, syncErrors int64
		var running bool
		err := dst.QueryRow(ctx, `SELECT
			(SELECT count(*) FILTER (WHERE r.srsubstate <> 'r') FROM pg_catalog.pg_subscription_rel r WHERE r.srsubid = s.oid),
			(SELECT count(*) FROM pg_catalog.pg_subscription_rel r WHERE r.srsubid = s.oid),
			coalesce((SELECT sync_error_count + apply_error_count FROM pg_catalog.pg_stat_subscription_stats t WHERE t.subid = s.oid), 0),
			EXISTS (SELECT FROM pg_catalog.pg_stat_subscription t WHERE t.subid = s.oid AND t.pid IS NOT NULL)
			FROM pg_catalog.pg_subscription s WHERE s.subname = $1`, mv.name).Scan(&notReady, &all, &syncErrors, &running)
		if err != nil {
			return o.nodes.wrap(err, "cannot read the move's subscription on node %s", o.nodes.describe(mv.to))
		}
		if notReady == 0 && all == int64(len(tables)) {
			return nil
		}
		if syncErrors > 0 {
			return pgerr.New(pgerr.ObjectNotInPrerequisite, "logical replication from node %s to node %s failed (the target's log says why)",
				o.nodes.describe(mv.from), o.nodes.describe(mv.to)).
				WithHint("Check that node %s can reach node %s as pgfleet's user, or use shard_transfer_mode => 'block_writes'.",
					o.nodes.describe(mv.to), o.nodes.describe(mv.from))
		}
		if !running && time.Since(started) > 30*time.Second {
			return pgerr.New(pgerr.ObjectNotInPrerequisite, "the move's subscription on node %s has not started in 30 s",
				o.nodes.describe(mv.to)).WithHint("Check max_logical_replication_workers and max_worker_processes on node %s, or use shard_transfer_mode => 'block_writes'.",
				o.nodes.describe(mv.to))
		}
		if !twophase.Sleep(ctx, 20*time.Millisecond) {
			return canceled(ctx)
		}
	}
}

func (mv *move) markerIdent() string { return pgx.Identifier{"pgfleet", mv.name}.Sanitize() }

// cutOver locks the group on the source, brings the target level with it
// (copying the rows there under the lock, or waiting for replication to
// apply every write committed before it), compares the row counts, drops
// the source's shards (MoveShard then prepares both nodes' transactions).
func (mv *move) cutOver(ctx context.Context, logical bool) error {
	o := mv.o
	// The target commits first: a statement that waited for the source's
	// lock and met its drop is run again on the target (replay.go), where
	// the tables must be there by then (found by TestMoveShardRepeatedly:
	// three replays in a millisecond met the target's uncommitted table).
	o.g.tp.CommitFirst = mv.to
	src, err := o.g.begin(ctx, mv.from)
	if err != nil {
		return err
	}
	idents := make([]string, len(mv.members))
	for i, m := range mv.members {
		idents[i] = m.ident
	}
	step := time.Now()
	lap := func(what string) {
		mv.steps = append(mv.steps, what, time.Since(step).Round(time.Millisecond))
		step = time.Now()
	}
	// The lock is the drop's from the start (reads wait too), so that a
	// transaction that read the group and then writes it is let in ahead
	// of the waiting move (it holds a lock the move's waits for) rather
	// than deadlocking with the drop, as with an EXCLUSIVE lock first.
	if _, err := src.conn.Exec(ctx, "LOCK TABLE "+strings.Join(idents, ", ")+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		return o.nodes.wrap(err, "cannot lock the shards on node %s", o.nodes.describe(mv.from))
	}
	lap("lock")
	// DDL on the table may have run since the definitions were read; under
	// the lock none can. Logical replication made the target's tables
	// from the old one: the move fails. Without it they are made now.
	for _, m := range mv.members {
		def, err := TableDef(ctx, src.conn, m.ident)
		if err != nil {
			return o.nodes.wrap(err, "cannot read the definition of shard %s on node %s", m.qual(), o.nodes.describe(mv.from))
		}
		if logical && !slices.Equal(def.CreateSQL(m.table.ShardsIn(), m.name), m.def.CreateSQL(m.table.ShardsIn(), m.name)) {
			return pgerr.New(pgerr.ObjectNotInPrerequisite, "the definition of %s changed while its shard moved (DDL ran during the move); nothing was moved", m.table.Name).
				WithHint("Run the move again.")
		}
		m.def = def
	}
	dst, err := o.g.begin(ctx, mv.to)
	if err != nil {
		return err
	}
	at := o.nodes.describe(mv.to)
	copied := make([]int64, len(mv.members))
	if logical {
		if err := mv.catchUp(ctx); err != nil {
			return err
		}
		lap("catch_up")
	} else {
		rest, err := mv.makeTarget(ctx, dst.conn, true)
		if err != nil {
			return err
		}
		for i, m := range mv.members {
			cols := m.def.copyColumns()
			n, srcErr, dstErr := streamCopy(ctx, src.conn, "COPY (SELECT "+cols+" FROM "+m.ident+") TO STDOUT",
				dst.conn, "COPY "+m.ident+columnList(cols)+" FROM STDIN")
			if srcErr != nil {
				return o.nodes.wrap(srcErr, "cannot read shard %s on node %s", m.qual(), o.nodes.describe(mv.from))
			}
			if dstErr != nil {
				return o.nodes.wrap(dstErr, "cannot copy shard %s to node %s", m.qual(), at)
			}
			copied[i] = n
			if len(rest[i]) > 0 {
				if _, err := dst.conn.Exec(ctx, strings.Join(rest[i], ";\n")); err != nil {
					return o.nodes.wrap(err, "cannot create the constraints and indexes of shard %s on node %s", m.qual(), at)
				}
			}
		}
	}
	// Foreign keys once every shard of the group has its rows (one may
	// reference another; a reference table's copy is on the target
	// already). Under logical replication the target's tables got none
	// while rows arrived: the source's checks stood for them.
	for _, m := range mv.members {
		stmts, err := m.def.ForeignKeySQL(m.table.ShardsIn(), m.name, sameTable)
		if err != nil {
			return err
		}
		for _, st := range stmts {
			if _, err := dst.conn.Exec(ctx, st); err != nil {
				return o.nodes.wrap(err, "cannot add the foreign keys of shard %s on node %s", m.qual(), at)
			}
		}
	}
	for i, m := range mv.members {
		// Rows and a checksum of their text on each side, at once: with
		// the source locked and the target caught up (or filled in this
		// transaction), they are the same rows or the move stops.
		var want, got [2]int64
		var srcErr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			srcErr = src.conn.QueryRow(ctx, checksumSQL+m.ident+" s").Scan(&want[0], &want[1])
		}()
		dstErr := dst.conn.QueryRow(ctx, checksumSQL+m.ident+" s").Scan(&got[0], &got[1])
		<-done
		if srcErr != nil {
			return o.nodes.wrap(srcErr, "cannot count shard %s on node %s", m.qual(), o.nodes.describe(mv.from))
		}
		if dstErr != nil {
			return o.nodes.wrap(dstErr, "cannot count shard %s on node %s", m.qual(), at)
		}
		if want[0] != got[0] || !logical && copied[i] != want[0] {
			return pgerr.New(pgerr.DataCorrupted, "shard %s has %d rows on node %s and %d on node %s after the copy; nothing was moved",
				m.qual(), want[0], o.nodes.describe(mv.from), got[0], at)
		}
		if want[1] != got[1] {
			return pgerr.New(pgerr.DataCorrupted, "the rows of shard %s on node %s and on node %s differ after the copy (checksums %x and %x); nothing was moved",
				m.qual(), o.nodes.describe(mv.from), at, want[1], got[1]).
				WithHint("The nodes may read or print a type differently (their versions or settings, lc_monetary say); compare the shard's rows on both.")
		}
	}
	if logical {
		lap("compare")
	} else {
		lap("copy") // (with the comparison)
	}
	if _, err := src.conn.Exec(ctx, "DROP TABLE "+strings.Join(idents, ", ")); err != nil {
		return o.nodes.wrap(err, "cannot drop the shards on node %s", o.nodes.describe(mv.from))
	}
	return nil
}

// sameTable keeps the table a foreign key references: a shard copied under
// its own name references what it referenced.
func sameTable(schema, name string) (string, string, error) { return schema, name, nil }

// checksumSQL, followed by a shard and an alias, counts the shard's rows
// and folds a hash of each row's text into one value (bit_xor, in no
// order).
const checksumSQL = "SELECT count(*), coalesce(bit_xor(pg_catalog.hashtextextended(s::text, 0)), 0) FROM "

// catchUp commits a marker row on the source (after the lock: every write
// to the group committed before it) and waits until the target has
// applied it.
func (mv *move) catchUp(ctx context.Context) error {
	o := mv.o
	src, dst, err := mv.adminConns(ctx)
	if err != nil {
		return err
	}
	// Committed with a flush, whatever the node's synchronous_commit: the
	// walsender sends only flushed WAL, and otherwise the marker would wait
	// for the WAL writer (up to three wal_writer_delay) while writes are
	// held.
	if _, err := src.Exec(ctx, "BEGIN; SET LOCAL synchronous_commit = on; INSERT INTO "+mv.markerIdent()+" VALUES ('cut-over'); COMMIT"); err != nil {
		return o.nodes.wrap(err, "cannot write the move's marker on node %s", o.nodes.describe(mv.from))
	}
	deadline := time.Now().Add(moveCatchUpTimeout)
	for {
		var seen bool
		if err := dst.QueryRow(ctx, "SELECT EXISTS (SELECT FROM "+mv.markerIdent()+")").Scan(&seen); err != nil {
			return o.nodes.wrap(err, "cannot read the move's marker on node %s", o.nodes.describe(mv.to))
		}
		if seen {
			return nil
		}
		if time.Now().After(deadline) {
			return pgerr.New(pgerr.LockNotAvailable, "node %s did not catch up with node %s within %s of the cut-over; nothing was moved",
				o.nodes.describe(mv.to), o.nodes.describe(mv.from), moveCatchUpTimeout).
				WithHint("Retry when the nodes are less busy.")
		}
		if !twophase.Sleep(ctx, 2*time.Millisecond) {
			return canceled(ctx)
		}
	}
}

// moveCatchUpTimeout bounds the wait for the target at the cut-over, while
// the group's writes are held.
const moveCatchUpTimeout = 10 * time.Second

// fail undoes a move that was not decided: its transactions roll back and
// replication's objects and the target's tables go.
func (mv *move) fail(ctx context.Context, err error) error {
	err = mv.o.fail(ctx, err)
	mv.cleanup(ctx)
	return err
}

// cleanup drops what replication made, and after a move that failed the
// target's tables, then forgets the move's record. Failures are logged and
// the record stays: recovery's sweep tries again (a subscription left
// behind keeps a replication slot on the source, which holds its WAL).
func (mv *move) cleanup(ctx context.Context) {
	if !mv.made {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	clean := true
	exec := func(node int32, what, sql string) {
		c, err := mv.adminConn(ctx, node)
		if err == nil {
			_, err = c.Exec(ctx, sql)
		}
		if err != nil {
			clean = false
			slog.Warn("shard move: cleanup failed; recovery tries again", "node", mv.o.nodes.describe(node), "what", what, "err", err)
		}
	}
	if mv.name != "" {
		exec(mv.to, "subscription "+mv.name, "DROP SUBSCRIPTION IF EXISTS "+mv.name)
		exec(mv.from, "publication "+mv.name, "DROP PUBLICATION IF EXISTS "+mv.name)
		for _, node := range []int32{mv.from, mv.to} {
			exec(node, "marker "+mv.name, "DROP TABLE IF EXISTS "+mv.markerIdent())
		}
	}
	if !mv.done && !mv.o.g.tp.InDoubt {
		for _, m := range mv.members {
			exec(mv.to, "shard "+m.qual(), "DROP TABLE IF EXISTS "+m.ident)
		}
	} else if !mv.done {
		clean = false // recovery decides; its sweep drops the copies if the move did not commit
	}
	if clean && mv.name != "" {
		if err := mv.o.store.ForgetMove(ctx, mv.name); err != nil {
			slog.Warn("shard move: forgetting its record failed; recovery tries again", "move", mv.name, "err", err)
		}
	}
}

// canceled is the error of a move whose statement was cancelled.
func canceled(ctx context.Context) error {
	return pgerr.New(pgerr.QueryCanceled, "canceling the shard move: %v", context.Cause(ctx))
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// testHookBeforeCutOver runs before a move's cut-over; nil but in tests
// (SetTestHookBeforeCutOver).
var testHookBeforeCutOver func()

// SetTestHookBeforeCutOver makes f run before every shard move's cut-over
// (after its copy), for tests that change the table there; it returns a
// function that removes it. Not for concurrent use with running moves.
func SetTestHookBeforeCutOver(f func()) (restore func()) {
	old := testHookBeforeCutOver
	testHookBeforeCutOver = f
	return func() { testHookBeforeCutOver = old }
}
