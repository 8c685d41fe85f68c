package shards

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	pg_query "github.com/pganalyze/pg_query_go/v5"

	"github.com/pgfleet/pgfleet/coordinator/twophase"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
)

// hashFunctions maps the type of a distribution column (pg_type.typname) to
// the PostgreSQL function that hashes its values as metadata.HashValue does.
var hashFunctions = map[string]string{
	"int2":    "pg_catalog.hashint2",
	"int4":    "pg_catalog.hashint4",
	"int8":    "pg_catalog.hashint8",
	"text":    "pg_catalog.hashtext",
	"varchar": "pg_catalog.hashtext",
	"bpchar":  "pg_catalog.hashbpchar",
	"uuid":    "pg_catalog.uuid_hash",
}

// HashFunction returns the schema-qualified PostgreSQL function that puts a
// row with a value of the column in a shard ("pg_catalog.hashint8"). Columns
// of other types, or with a nondeterministic collation, fail with 0A000.
func HashFunction(c *Column) (string, error) {
	fn := hashFunctions[c.TypeName]
	if fn == "" {
		return "", pgerr.New(pgerr.FeatureNotSupported, "distribution column type %s is not supported yet", c.TypeName).
			WithHint("Distribution columns may be of type smallint, integer, bigint, text, varchar, character or uuid.")
	}
	if !c.Deterministic {
		return "", pgerr.New(pgerr.FeatureNotSupported,
			"distribution column %q has a nondeterministic collation, which is not supported yet", c.Name).
			WithHint("Give the column a deterministic collation (COLLATE \"C\" or the database default), or distribute by another column.")
	}
	return fn, nil
}

// Distribute is create_distributed_table(table, column, shard_count =>
// shardCount, colocate_with => colocateWith): it turns an existing table on
// the default node into a hash-distributed table. It records the table and
// its shards in the catalog (store.CreateDistributedTable, which assigns
// shard ids, hash ranges and placements; shardCount 0 takes the default or
// the colocated table's count), creates every shard on its placement node
// with the table's columns, constraints and indexes, moves the table's rows
// into the shards by PostgreSQL's hash of the distribution column, and
// empties the table, which stays on the default node as the shell psql's \d
// shows. It returns the catalog as the change left it.
//
// The table must exist on the default node (42P01), not be in the catalog
// already (42710), have the column (42703) of a supported type (0A000)
// (rows with a NULL there go to the shard of hash 0, as an INSERT's), and
// have primary key, unique and exclusion constraints
// only on column sets that include it (0A000). It is locked against writes
// for the duration. All or nothing: on any failure the shard tables created
// so far are rolled back, the catalog entry is removed and the rows stay in
// the table; the error names the shard and node that failed.
//
// The catalog is committed before the shards (the store assigns their ids
// in its own transaction), so for that short time other coordinators may
// see a distributed table whose shards do not exist yet; queries routed to
// them fail with 42P01 until the shards are committed. If COMMIT PREPARED
// fails on a node after the catalog committed, Distribute returns the new
// snapshot together with an error whose hint names the prepared
// transactions left to commit.
func Distribute(ctx context.Context, store *metadata.Store, conns map[int32]*pgx.Conn, defaultNode int32,
	table, column string, shardCount int, colocateWith string) (*metadata.Snapshot, error) {
	return distribute(ctx, store, conns, defaultNode, table, column, shardCount, colocateWith, false)
}

// DistributeInTxn is Distribute inside a client's transaction block: conns
// are the block's own connections to every active node, and the shards are
// created and filled, and the table emptied, in the block's transactions on
// them, which the client's COMMIT commits (two-phase commit) and its
// ROLLBACK undoes. The catalog change commits here, as Distribute's does
// before its shards: the caller removes it again (store.DropTable) if the
// block does not commit, unless the outcome is in doubt. On error nothing
// is recorded; the caller fails the block.
func DistributeInTxn(ctx context.Context, store *metadata.Store, conns map[int32]*pgx.Conn, defaultNode int32,
	table, column string, shardCount int, colocateWith string) (*metadata.Snapshot, error) {
	return distribute(ctx, store, conns, defaultNode, table, column, shardCount, colocateWith, true)
}

func distribute(ctx context.Context, store *metadata.Store, conns map[int32]*pgx.Conn, defaultNode int32,
	table, column string, shardCount int, colocateWith string, inClient bool) (*metadata.Snapshot, error) {
	if shardCount < 0 || shardCount > metadata.MaxShardCount {
		return nil, pgerr.New(pgerr.InvalidParameterValue, "shard_count must be between 1 and %d", metadata.MaxShardCount)
	}
	o, snap, def, name, err := startNew(ctx, store, conns, defaultNode, "distribute", table, inClient)
	if err != nil {
		return nil, err
	}
	col := def.Column(column)
	if col == nil {
		return nil, o.fail(ctx, pgerr.New(pgerr.UndefinedColumn, "column %q of relation %q does not exist", column, name))
	}
	fn, err := distColumn(col, name)
	if err != nil {
		return nil, o.fail(ctx, err)
	}
	if err := uniqueIncludes(def, col.Name); err != nil {
		return nil, o.fail(ctx, err)
	}
	colIdent := pgx.Identifier{col.Name}.Sanitize()
	if err := o.checkNodes(ctx, ActiveNodes(snap)); err != nil {
		return nil, o.fail(ctx, err)
	}
	// colocate_with names a table as a regclass does: resolve it as the
	// catalog spells it. A name that resolves to nothing is left to the
	// catalog to refuse.
	switch strings.ToLower(colocateWith) {
	case "", "default", "none":
	default:
		r, err := lookup(ctx, o.homeConn(), colocateWith)
		var pe *pgerr.Error
		switch {
		case err == nil:
			colocateWith = r.schema + "." + r.name
		case !errors.As(err, &pe):
			return nil, o.fail(ctx, err)
		}
	}

	snap, shards, err := store.CreateDistributedTable(ctx, metadata.Table{Name: name, Kind: metadata.Distributed,
		DistColumn: col.Name, DistType: col.TypeName, ShardCount: shardCount, Sequences: def.Sequences()}, colocateWith)
	if err != nil {
		o.recordedIfUnsure(err, name)
		return nil, o.fail(ctx, err)
	}
	o.recorded = name
	o.learn(snap)
	for _, sh := range shards {
		where := fmt.Sprintf(" WHERE %s(%s) BETWEEN %d AND %d", fn, colIdent, sh.MinHash, sh.MaxHash)
		if sh.MinHash <= 0 && 0 <= sh.MaxHash {
			// Rows with a NULL distribution value go where an INSERT's
			// NULL goes, the shard of hash 0.
			where += " OR " + colIdent + " IS NULL"
		}
		for _, node := range sh.Nodes {
			if err := o.placeShard(ctx, def, sh, node, where); err != nil {
				return nil, o.fail(ctx, err)
			}
		}
	}
	if err := o.foreignKeys(ctx, snap, def, shards); err != nil {
		return nil, o.fail(ctx, err)
	}
	return o.finish(ctx, def, snap)
}

// CreateReference is create_reference_table(table): it turns an existing
// table on the default node into a reference table, with one shard that has
// a full copy of the rows on every active node (store.CreateReferenceTable),
// and empties the table, which stays as the shell. Errors and atomicity are
// as for Distribute.
func CreateReference(ctx context.Context, store *metadata.Store, conns map[int32]*pgx.Conn, defaultNode int32,
	table string) (*metadata.Snapshot, error) {
	return createReference(ctx, store, conns, defaultNode, table, false)
}

// CreateReferenceInTxn is CreateReference inside a client's transaction
// block, as DistributeInTxn is Distribute.
func CreateReferenceInTxn(ctx context.Context, store *metadata.Store, conns map[int32]*pgx.Conn, defaultNode int32,
	table string) (*metadata.Snapshot, error) {
	return createReference(ctx, store, conns, defaultNode, table, true)
}

func createReference(ctx context.Context, store *metadata.Store, conns map[int32]*pgx.Conn, defaultNode int32,
	table string, inClient bool) (*metadata.Snapshot, error) {
	o, snap, def, name, err := startNew(ctx, store, conns, defaultNode, "reference", table, inClient)
	if err != nil {
		return nil, err
	}
	if err := o.checkNodes(ctx, ActiveNodes(snap)); err != nil {
		return nil, o.fail(ctx, err)
	}
	snap, shard, err := store.CreateReferenceTable(ctx, name, def.Sequences()...)
	if err != nil {
		o.recordedIfUnsure(err, name)
		return nil, o.fail(ctx, err)
	}
	o.recorded = name
	o.learn(snap)
	for _, node := range shard.Nodes {
		if err := o.placeShard(ctx, def, shard, node, ""); err != nil {
			return nil, o.fail(ctx, err)
		}
	}
	if err := o.foreignKeys(ctx, snap, def, []metadata.Shard{shard}); err != nil {
		return nil, o.fail(ctx, err)
	}
	return o.finish(ctx, def, snap)
}

// Undistribute is undistribute_table(table): it copies the rows of a
// distributed or reference table from its shards back into the shell table
// on the default node, drops the shards on every placement and removes the
// table from the catalog, all or nothing. snap is the catalog the shards are
// taken from (nil loads it from store). The table must be in the catalog
// (42P01 otherwise). The catalog change commits after every node has
// prepared its part and before any commits it, so a failure leaves the
// table distributed with its rows in the shards.
func Undistribute(ctx context.Context, store *metadata.Store, snap *metadata.Snapshot, conns map[int32]*pgx.Conn,
	defaultNode int32, table string) (*metadata.Snapshot, error) {
	o, loaded, err := start(ctx, store, conns, defaultNode, "undistribute", false)
	if err != nil {
		return nil, err
	}
	if snap == nil {
		snap = loaded
	}
	o.learn(snap)
	if _, err := o.g.begin(ctx, o.home); err != nil {
		return nil, o.fail(ctx, err)
	}
	home := o.homeConn()
	r, err := lookup(ctx, home, table)
	if err != nil {
		return nil, o.fail(ctx, err)
	}
	name := r.schema + "." + r.name
	shell := pgx.Identifier{r.schema, r.name}.Sanitize()
	if _, err := home.Exec(ctx, "LOCK TABLE "+shell+" IN EXCLUSIVE MODE"); err != nil {
		return nil, o.fail(ctx, o.nodes.wrap(err, "cannot lock %s on node %s", name, o.nodes.describe(o.home)))
	}
	t := snap.Table(name)
	if t == nil {
		return nil, o.fail(ctx, pgerr.New(pgerr.UndefinedTable, "table %s is not distributed", name))
	}
	if err := foreignKeysRefused(ctx, home, r.oid, name); err != nil {
		return nil, o.fail(ctx, err)
	}
	shards := snap.Shards[name]
	shardSchema := t.ShardsIn()
	var placed []int32
	for _, sh := range shards {
		placed = append(placed, sh.Nodes...)
	}
	if err := o.checkNodes(ctx, placed); err != nil {
		return nil, o.fail(ctx, err)
	}
	cols, err := insertColumns(ctx, home, r.oid)
	if err != nil {
		return nil, o.fail(ctx, o.nodes.wrap(err, "cannot read the columns of %s on node %s", name, o.nodes.describe(o.home)))
	}

	// Every shard is locked on every node, in node order, before the first
	// copy or DROP: the operation either holds all its locks or changes
	// nothing (each wait bounded by opLockTimeout).
	byNode := map[int32][]string{}
	for _, sh := range shards {
		shardQual := shardSchema + "." + metadata.ShardName(r.name, sh.ID)
		if len(sh.Nodes) == 0 {
			return nil, o.fail(ctx, pgerr.New(pgerr.ObjectNotInPrerequisite, "shard %s has no placements", shardQual))
		}
		for _, node := range sh.Nodes {
			byNode[node] = append(byNode[node], pgx.Identifier{shardSchema, metadata.ShardName(r.name, sh.ID)}.Sanitize())
		}
	}
	for _, node := range slices.Sorted(maps.Keys(byNode)) {
		tx, err := o.g.begin(ctx, node)
		if err != nil {
			return nil, o.fail(ctx, err)
		}
		if _, err := tx.conn.Exec(ctx, "LOCK TABLE "+strings.Join(byNode[node], ", ")+" IN EXCLUSIVE MODE"); err != nil {
			return nil, o.fail(ctx, o.nodes.wrap(err, "cannot lock the shards of %s on node %s", name, o.nodes.describe(node)))
		}
	}
	for _, sh := range shards {
		shardName := metadata.ShardName(r.name, sh.ID)
		shardIdent := pgx.Identifier{shardSchema, shardName}.Sanitize()
		shardQual := shardSchema + "." + shardName
		src := sh.Nodes[0]
		if slices.Contains(sh.Nodes, o.home) {
			src = o.home
		}
		selectSQL := "SELECT " + cols + " FROM " + shardIdent
		if src == o.home {
			if _, err := home.Exec(ctx, "INSERT INTO "+shell+columnList(cols)+" "+selectSQL); err != nil {
				return nil, o.fail(ctx, o.nodes.wrap(err, "cannot copy the rows of shard %s on node %s into %s",
					shardQual, o.nodes.describe(src), name))
			}
		} else {
			_, srcErr, dstErr := streamCopy(ctx, o.g.by[src].conn, "COPY ("+selectSQL+") TO STDOUT",
				home, "COPY "+shell+columnList(cols)+" FROM STDIN")
			if srcErr != nil {
				return nil, o.fail(ctx, o.nodes.wrap(srcErr, "cannot read the rows of shard %s on node %s",
					shardQual, o.nodes.describe(src)))
			}
			if dstErr != nil {
				return nil, o.fail(ctx, o.nodes.wrap(dstErr, "cannot copy the rows of shard %s into %s on node %s",
					shardQual, name, o.nodes.describe(o.home)))
			}
		}
		for _, node := range sh.Nodes {
			if _, err := o.g.by[node].conn.Exec(ctx, "DROP TABLE "+shardIdent); err != nil {
				return nil, o.fail(ctx, o.nodes.wrap(err, "cannot drop shard %s on node %s", shardQual, o.nodes.describe(node)))
			}
		}
	}

	if _, err := home.Exec(ctx, GuardSQL(shell, false)); err != nil {
		return nil, o.fail(ctx, o.nodes.wrap(err, "cannot drop the guard of %s on node %s", name, o.nodes.describe(o.home)))
	}
	return o.commitWith(ctx, func(err error) error { return o.fail(ctx, err) },
		func(ctx context.Context) (*metadata.Snapshot, error) { return store.DropTable(ctx, name) })
}

// commitWith prepares the operation's transactions and commits them with
// change, a catalog change, as the commit decision (it runs under
// metadata.WithDecision). If change's answer is lost, the outcome is
// settled first. fail undoes the operation when it does not commit.
func (o *op) commitWith(ctx context.Context, fail func(error) error,
	change func(context.Context) (*metadata.Snapshot, error)) (*metadata.Snapshot, error) {
	if err := o.g.prepare(ctx); err != nil {
		return nil, fail(err)
	}
	after, err := change(metadata.WithDecision(ctx, o.g.tp.Base))
	if err != nil {
		// Its answer may have been lost after it committed: settle.
		if err := o.g.settle(ctx, err); err != nil {
			return nil, fail(err)
		}
		after, err := o.reload(ctx)
		if cerr := o.g.commit(ctx); cerr != nil {
			return after, cerr
		}
		return after, err
	}
	o.g.tp.Decided = true
	return after, o.g.commit(ctx)
}

// op is one operation's state: its connections, its distributed
// transaction, and the catalog entry it recorded, if any.
type op struct {
	store    *metadata.Store
	nodes    *nodes
	home     int32
	g        *group
	recorded string         // catalog name to remove again on failure
	schemas  map[int32]bool // nodes that have the table's schema and types
	// shardsSchema: nodes known to have metadata.ShardsSchema.
	shardsSchema map[int32]bool
	types        []userType // the types the table's columns use (nil: not read yet)
	// referenced: another table's foreign key references the table (the
	// shell is emptied with DELETE, which TRUNCATE would refuse).
	referenced bool
}

// start checks the arguments and loads the catalog.
func start(ctx context.Context, store *metadata.Store, conns map[int32]*pgx.Conn, defaultNode int32,
	name string, inClient bool) (*op, *metadata.Snapshot, error) {
	if store == nil {
		return nil, nil, pgerr.New(pgerr.Internal, "shards: no metadata store")
	}
	n := &nodes{conns: conns, addrs: map[int32]string{}}
	if _, err := n.conn(defaultNode); err != nil {
		return nil, nil, pgerr.New(pgerr.ConnectionFailure, "no open connection to the default node %d", defaultNode)
	}
	snap, err := store.Load(ctx)
	if err != nil {
		return nil, nil, err
	}
	o := &op{store: store, nodes: n, home: defaultNode, g: newGroup(name, n, store), schemas: map[int32]bool{},
		shardsSchema: map[int32]bool{}}
	o.g.beginStmt = opBeginSQL
	o.g.inClient = inClient
	o.learn(snap)
	return o, snap, nil
}

// startNew starts an operation that adds table to the catalog: it locks the
// table on the default node, reads its definition and checks the catalog
// does not have it yet. On error everything is rolled back.
func startNew(ctx context.Context, store *metadata.Store, conns map[int32]*pgx.Conn, defaultNode int32,
	opName, table string, inClient bool) (*op, *metadata.Snapshot, *Def, string, error) {
	o, snap, err := start(ctx, store, conns, defaultNode, opName, inClient)
	if err != nil {
		return nil, nil, nil, "", err
	}
	def, err := o.lockSource(ctx, table)
	if err != nil {
		return nil, nil, nil, "", o.fail(ctx, err)
	}
	name := def.CatalogName()
	if err := notInCatalog(snap, name); err != nil {
		return nil, nil, nil, "", o.fail(ctx, err)
	}
	if err := referencesCatalog(snap, def); err != nil {
		return nil, nil, nil, "", o.fail(ctx, err)
	}
	return o, snap, def, name, nil
}

// learn takes the nodes' addresses from a snapshot, for messages.
func (o *op) learn(snap *metadata.Snapshot) {
	for _, nd := range snap.Nodes {
		o.nodes.addrs[nd.ID] = nd.Addr()
	}
}

func (o *op) homeConn() *pgx.Conn { return o.nodes.conns[o.home] }

// lockSource opens the default node's transaction, locks the table against
// writes (reads go on) and reads its definition under the lock.
func (o *op) lockSource(ctx context.Context, table string) (*Def, error) {
	if _, err := o.g.begin(ctx, o.home); err != nil {
		return nil, err
	}
	home := o.homeConn()
	def, err := TableDef(ctx, home, table)
	if err != nil {
		return nil, err
	}
	if ownSchema(def.Schema) {
		return nil, pgerr.New(pgerr.FeatureNotSupported, "%s is one of pgfleet's own tables", def.CatalogName()).
			WithHint("Distribute your own tables only.")
	}
	if _, err := home.Exec(ctx, "LOCK TABLE "+def.Ident()+" IN EXCLUSIVE MODE"); err != nil {
		return nil, o.nodes.wrap(err, "cannot lock %s on node %s", def.CatalogName(), o.nodes.describe(o.home))
	}
	// Read it again: it may have changed before the lock was granted.
	return TableDef(ctx, home, def.Ident())
}

// checkNodes makes sure every node the operation may touch has a connection
// and can prepare transactions, before anything is changed.
func (o *op) checkNodes(ctx context.Context, ids []int32) error {
	seen := map[int32]bool{}
	for _, id := range append([]int32{o.home}, ids...) {
		if seen[id] {
			continue
		}
		seen[id] = true
		conn, err := o.nodes.conn(id)
		if err != nil {
			return err
		}
		var max int
		if err := conn.QueryRow(ctx, "SELECT pg_catalog.current_setting('max_prepared_transactions')::int").Scan(&max); err != nil {
			return o.nodes.wrap(err, "cannot read the settings of node %s", o.nodes.describe(id))
		}
		if max == 0 {
			return pgerr.New(pgerr.ObjectNotInPrerequisite, "node %s does not allow prepared transactions", o.nodes.describe(id)).
				WithHint("Set max_prepared_transactions on the worker (to max_connections, say) and restart it.")
		}
	}
	return nil
}

// recordedIfUnsure marks the table for removal from the catalog on failure
// when the store's error does not say the change was refused: its commit
// may have succeeded with the answer lost.
func (o *op) recordedIfUnsure(err error, name string) {
	var pe *pgerr.Error
	if !errors.As(err, &pe) {
		o.recorded = name
	}
}

// placeShard creates one placement of a shard on a node in that node's
// transaction, fills it with the table's rows that match where (all rows
// when where is empty), and adds its constraints and indexes.
func (o *op) placeShard(ctx context.Context, def *Def, sh metadata.Shard, node int32, where string) error {
	shardName := metadata.ShardName(def.Name, sh.ID)
	shardQual := metadata.ShardsSchema + "." + shardName
	if len(shardName) > metadata.MaxIdentLen {
		return pgerr.New(pgerr.NameTooLong, "shard name %q is longer than %d bytes", shardName, metadata.MaxIdentLen).
			WithHint("Rename table %s to a shorter name first.", def.CatalogName())
	}
	at := o.nodes.describe(node)
	tx, err := o.g.begin(ctx, node)
	if err != nil {
		return err
	}
	if node != o.home && !o.schemas[node] {
		if err := ensureSchema(ctx, tx.conn, def.Schema); err != nil {
			return o.nodes.wrap(err, "cannot create schema %q for shard %s on node %s", def.Schema, shardQual, at)
		}
		// The enum types, domains and collations the columns use, which
		// exist only where they were created (the default node).
		if o.types == nil {
			if o.types, err = columnTypes(ctx, o.homeConn(), def.OID); err != nil {
				return o.nodes.wrap(err, "cannot read the types of %s on node %s", def.CatalogName(), o.nodes.describe(o.home))
			}
		}
		if err := ensureTypes(ctx, tx.conn, o.types); err != nil {
			return o.nodes.wrap(err, "cannot create the types of %s for shard %s on node %s", def.CatalogName(), shardQual, at)
		}
		o.schemas[node] = true
	}
	if !o.shardsSchema[node] {
		if err := ensureShardsSchema(ctx, tx.conn); err != nil {
			return o.nodes.wrap(err, "cannot create schema %s for shard %s on node %s", metadata.ShardsSchema, shardName, at)
		}
		o.shardsSchema[node] = true
	}
	stmts := def.CreateSQL(metadata.ShardsSchema, shardName)
	if _, err := tx.conn.Exec(ctx, stmts[0]); err != nil {
		return o.nodes.wrap(err, "cannot create shard %s on node %s", shardQual, at)
	}
	target := pgx.Identifier{metadata.ShardsSchema, shardName}.Sanitize()
	cols := def.copyColumns()
	selectSQL := "SELECT " + cols + " FROM " + def.Ident() + where
	if node == o.home {
		if _, err := tx.conn.Exec(ctx, "INSERT INTO "+target+columnList(cols)+" "+selectSQL); err != nil {
			return o.nodes.wrap(err, "cannot fill shard %s on node %s", shardQual, at)
		}
	} else {
		_, srcErr, dstErr := streamCopy(ctx, o.homeConn(), "COPY ("+selectSQL+") TO STDOUT",
			tx.conn, "COPY "+target+columnList(cols)+" FROM STDIN")
		if srcErr != nil {
			return o.nodes.wrap(srcErr, "cannot read the rows of %s for shard %s on node %s",
				def.CatalogName(), shardQual, o.nodes.describe(o.home))
		}
		if dstErr != nil {
			return o.nodes.wrap(dstErr, "cannot fill shard %s on node %s", shardQual, at)
		}
	}
	if len(stmts) > 1 {
		if _, err := tx.conn.Exec(ctx, strings.Join(stmts[1:], ";\n")); err != nil {
			return o.nodes.wrap(err, "cannot create the constraints and indexes of shard %s on node %s", shardQual, at)
		}
	}
	return nil
}

// finish empties the source table, prepares every node's transaction,
// records the commit decision and commits them. The catalog change is
// already committed; a failure before the decision undoes it.
func (o *op) finish(ctx context.Context, def *Def, snap *metadata.Snapshot) (*metadata.Snapshot, error) {
	empty := "TRUNCATE " + def.Ident()
	if o.referenced {
		empty = "DELETE FROM ONLY " + def.Ident() // TRUNCATE refuses a table others reference
	}
	if _, err := o.homeConn().Exec(ctx, empty); err != nil {
		return nil, o.fail(ctx, o.nodes.wrap(err, "cannot empty %s on node %s", def.CatalogName(), o.nodes.describe(o.home)))
	}
	if _, err := o.homeConn().Exec(ctx, "DROP TRIGGER IF EXISTS "+ReferencesGuard+" ON "+def.Ident()); err != nil {
		return nil, o.fail(ctx, o.nodes.wrap(err, "cannot drop the guard of %s on node %s", def.CatalogName(), o.nodes.describe(o.home)))
	}
	// The guard commits with the move, in the transaction that has held the
	// table's EXCLUSIVE lock since before its rows were read: a writer that
	// waited for the lock (a coordinator whose catalog is a moment behind)
	// sees the trigger once it gets the lock and fails with 40001, and no
	// write can reach the table between the move and the guard.
	if _, err := o.homeConn().Exec(ctx, GuardSQL(def.Ident(), true)); err != nil {
		return nil, o.fail(ctx, o.nodes.wrap(err, "cannot guard %s on node %s", def.CatalogName(), o.nodes.describe(o.home)))
	}
	if err := o.g.prepare(ctx); err != nil {
		return nil, o.fail(ctx, err)
	}
	if err := o.g.decide(ctx); err != nil {
		return nil, o.fail(ctx, err)
	}
	return snap, o.g.commit(ctx)
}

// reload loads the catalog after a change whose answer was lost but which
// committed, retrying for a while: the caller needs a snapshot.
func (o *op) reload(ctx context.Context) (*metadata.Snapshot, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	snap, err := o.store.Load(ctx)
	for err != nil && twophase.Sleep(ctx, time.Second) {
		snap, err = o.store.Load(ctx)
	}
	if err != nil {
		return nil, pgerr.New(pgerr.ConnectionFailure, "the change is committed, but the catalog cannot be read: %v", err)
	}
	return snap, nil
}

// fail undoes the operation: it rolls back every node's transaction and
// removes the catalog entry it recorded. It returns err, with what could
// not be undone in its detail. When the group's outcome is in doubt (left
// to recovery), the catalog entry stays: recovery may commit the shards.
func (o *op) fail(ctx context.Context, err error) error {
	problems := o.g.rollback(ctx)
	if e := twophase.ToPgErr(err); e.Code == pgerr.LockNotAvailable && e.Hint == "" {
		e.Hint = "Concurrent writes or another operation held a lock it needed (on several workers, perhaps waiting on each other); nothing was changed: retry it."
		err = e
	}
	if o.recorded != "" && o.g.tp.InDoubt {
		problems = append(problems, fmt.Sprintf("table %s stays in the catalog until the outcome is known", o.recorded))
		o.recorded = ""
	}
	if o.recorded != "" {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		_, derr := o.store.DropTable(cctx, o.recorded)
		cancel()
		var pe *pgerr.Error
		if derr != nil && !(errors.As(derr, &pe) && pe.Code == pgerr.UndefinedTable) {
			problems = append(problems, fmt.Sprintf("table %s could not be removed from the catalog: %v", o.recorded, derr))
		}
		o.recorded = ""
	}
	return twophase.WithProblems(err, problems)
}

// CheckInTxn checks, on c, the default node's connection of a client's
// transaction block, what DistributeInTxn (column not "") or
// CreateReferenceInTxn (column "") checks before it changes anything: the
// table exists and is not one of pgfleet's, it is not in the catalog, and
// the column exists, has a supported type and is in every unique
// constraint. It locks the table against writes in the block, as the
// operation does, and returns its catalog name.
func CheckInTxn(ctx context.Context, c *pgx.Conn, snap *metadata.Snapshot, pending []string, table, column string) (name string, oid uint32, err error) {
	def, err := TableDef(ctx, c, table)
	if err != nil {
		return "", 0, err
	}
	if ownSchema(def.Schema) {
		return "", 0, pgerr.New(pgerr.FeatureNotSupported, "%s is one of pgfleet's own tables", def.CatalogName()).
			WithHint("Distribute your own tables only.")
	}
	if _, err := c.Exec(ctx, "LOCK TABLE "+def.Ident()+" IN EXCLUSIVE MODE"); err != nil {
		return "", 0, err
	}
	if err := notInCatalog(snap, def.CatalogName()); err != nil {
		return "", 0, err
	}
	if err := referencesCatalog(snap, def, pending...); err != nil {
		return "", 0, err
	}
	if column == "" {
		return def.CatalogName(), def.OID, nil
	}
	col := def.Column(column)
	if col == nil {
		return "", 0, pgerr.New(pgerr.UndefinedColumn, "column %q of relation %q does not exist", column, def.CatalogName())
	}
	if _, err := distColumn(col, def.CatalogName()); err != nil {
		return "", 0, err
	}
	return def.CatalogName(), def.OID, uniqueIncludes(def, col.Name)
}

// distColumn checks col of table as a distribution column and returns its
// hash function. A generated column is refused (0A000): an UPDATE of the
// columns it is computed from changes its value on the worker, and the row
// would stay in its old shard (adversary: a primary key broken across
// shards, rows lost to routed reads).
func distColumn(col *Column, table string) (string, error) {
	if col.Generated != "" {
		return "", pgerr.New(pgerr.FeatureNotSupported,
			"distribution column %q of %s is a generated column, which is not supported", col.Name, table).
			WithHint("Distribute by a column whose values the rows are given, not computed from others.")
	}
	return HashFunction(col)
}

// notInCatalog fails with 42710 if the table is distributed or a reference
// table already.
func notInCatalog(snap *metadata.Snapshot, name string) error {
	t := snap.Table(name)
	switch {
	case t == nil:
		return nil
	case t.Kind == metadata.Reference:
		return pgerr.New(pgerr.DuplicateObject, "table %s is already a reference table", name)
	default:
		return pgerr.New(pgerr.DuplicateObject, "table %s is already distributed", name)
	}
}

// uniqueIncludes fails with 0A000 if a primary key, unique or exclusion
// constraint, or a unique index, does not include the distribution column:
// shards could not enforce it across the table.
func uniqueIncludes(def *Def, column string) error {
	refuse := func(what, name string) error {
		return pgerr.New(pgerr.FeatureNotSupported,
			"cannot distribute %s: %s %q does not include the distribution column %q", def.CatalogName(), what, name, column).
			WithHint("Distributed tables can have PRIMARY KEY, UNIQUE and EXCLUDE constraints and unique indexes only on columns that include the distribution column.")
	}
	for _, c := range def.Constraints {
		if c.Type != 'c' && !slices.Contains(c.Columns, column) {
			return refuse("constraint", c.Name)
		}
	}
	for _, ix := range def.Indexes {
		if ix.Unique && !slices.Contains(ix.Columns, column) {
			return refuse("unique index", ix.Name)
		}
	}
	return nil
}

// referencesCatalog fails with 0A000 if def, a table about to be
// distributed or made a reference table, has a foreign key to a table that
// is neither (itself aside, and the pending ones: distributed by the same
// transaction block before it): its shards could not check it.
func referencesCatalog(snap *metadata.Snapshot, def *Def, pending ...string) error {
	for _, fk := range def.ForeignKeys {
		name := fk.RefSchema + "." + fk.RefName
		if name == def.CatalogName() || snap.Table(name) != nil || slices.Contains(pending, name) {
			continue
		}
		return pgerr.New(pgerr.FeatureNotSupported, "cannot distribute %s: its foreign key %q references %s, which is neither a distributed nor a reference table",
			def.CatalogName(), fk.Name, name).
			WithHint("Distribute %s first (create_reference_table('%s'), or create_distributed_table colocated), or drop the foreign key.", name, name)
	}
	return nil
}

// foreignKeys checks the foreign keys of def, the table the operation adds
// to the catalog (in snap, with shards), as ALTER TABLE ... ADD FOREIGN KEY
// would (checkForeignKey), and adds them to its shards, each referencing
// the shard of its hash range or the copy on its node. The tables that
// reference it (not in the catalog: it was not) must be empty: they get
// the references guard, which keeps them so until they are distributed
// too (their keys now check against the empty shell).
func (o *op) foreignKeys(ctx context.Context, snap *metadata.Snapshot, def *Def, shards []metadata.Shard) error {
	home := o.homeConn()
	t := snap.Table(def.CatalogName())
	if t == nil {
		return pgerr.New(pgerr.Internal, "%s is not in the catalog it was added to", def.CatalogName())
	}
	if err := referencesCatalog(snap, def); err != nil {
		return err
	}
	for _, fk := range def.ForeignKeys {
		_, c, err := fk.parse()
		if err != nil {
			return err
		}
		c.Pktable = &pg_query.RangeVar{Schemaname: fk.RefSchema, Relname: fk.RefName}
		if _, err := checkForeignKey(ctx, home, snap, t, c, ""); err != nil {
			return err
		}
	}
	rows, err := home.Query(ctx, `SELECT DISTINCT pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(c.relname), n.nspname || '.' || c.relname
		FROM pg_catalog.pg_constraint k JOIN pg_catalog.pg_class c ON c.oid = k.conrelid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE k.contype = 'f' AND k.confrelid = $1 AND k.conrelid <> $1 ORDER BY 1`, def.OID)
	if err != nil {
		return err
	}
	var referencing [][2]string
	for rows.Next() {
		var r [2]string
		if err := rows.Scan(&r[0], &r[1]); err != nil {
			rows.Close()
			return err
		}
		referencing = append(referencing, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, r := range referencing {
		o.referenced = true
		if snap.Table(r[1]) != nil {
			return pgerr.New(pgerr.FeatureNotSupported, "cannot distribute %s: %s, in the catalog, references it", def.CatalogName(), r[1]).
				WithHint("Drop that foreign key first.")
		}
		var rows bool
		if _, err := home.Exec(ctx, "LOCK TABLE "+r[0]+" IN SHARE ROW EXCLUSIVE MODE"); err != nil {
			return o.nodes.wrap(err, "cannot lock %s on node %s", r[1], o.nodes.describe(o.home))
		}
		if err := home.QueryRow(ctx, "SELECT EXISTS (SELECT FROM ONLY "+r[0]+")").Scan(&rows); err != nil {
			return o.nodes.wrap(err, "cannot read %s on node %s", r[1], o.nodes.describe(o.home))
		}
		if rows {
			return pgerr.New(pgerr.FeatureNotSupported, "cannot distribute %s: %s references it by a foreign key and has rows", def.CatalogName(), r[1]).
				WithHint("Write those rows after the tables are distributed (a transaction block's create_distributed_table moves its table at COMMIT, so rows written in the block count), or drop the foreign key, distribute both tables, then add it again with ALTER TABLE ... ADD FOREIGN KEY.")
		}
		if _, err := home.Exec(ctx, ReferencesGuardSQL(r[0])); err != nil {
			return o.nodes.wrap(err, "cannot guard %s on node %s", r[1], o.nodes.describe(o.home))
		}
	}
	if len(def.ForeignKeys) == 0 {
		return nil
	}
	for _, sh := range shards {
		shardName := metadata.ShardName(def.Name, sh.ID)
		stmts, err := def.ForeignKeySQL(metadata.ShardsSchema, shardName, func(schema, name string) (string, string, error) {
			rv, err := referencedShard(snap, &pg_query.RangeVar{Schemaname: schema, Relname: name}, sh)
			if err != nil {
				return "", "", err
			}
			return rv.Schemaname, rv.Relname, nil
		})
		if err != nil {
			return err
		}
		for _, node := range sh.Nodes {
			tx, err := o.g.begin(ctx, node)
			if err != nil {
				return err
			}
			for _, st := range stmts {
				if _, err := tx.conn.Exec(ctx, st); err != nil {
					return o.nodes.wrap(err, "cannot add the foreign keys of shard %s.%s on node %s", metadata.ShardsSchema, shardName, o.nodes.describe(node))
				}
			}
		}
	}
	return nil
}

// ActiveNodes returns the ids of the snapshot's active nodes.
func ActiveNodes(snap *metadata.Snapshot) []int32 {
	var ids []int32
	for _, n := range snap.Nodes {
		if n.Active {
			ids = append(ids, n.ID)
		}
	}
	return ids
}

// ensureSchema creates the schema on a node if it is missing there.
func ensureSchema(ctx context.Context, conn *pgx.Conn, schema string) error {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname = $1)",
		schema).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	_, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	return err
}

// ensureShardsSchema makes sure metadata.ShardsSchema is on a node. The
// coordinator makes it as the superuser before an operation places shards
// (Server.ensureShardsSchema); when it could not, it is made here only by
// a superuser session: made by another role, it would be that role's, and
// a schema's owner may drop every other role's shards in it.
func ensureShardsSchema(ctx context.Context, conn *pgx.Conn) error {
	var exists, super bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname = $1),
		(SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user)`,
		metadata.ShardsSchema).Scan(&exists, &super); err != nil || exists {
		return err
	}
	if !super {
		ident := pgx.Identifier{metadata.ShardsSchema}.Sanitize()
		return pgerr.New(pgerr.InsufficientPrivilege, "schema %s, where shards live, is missing and only a superuser may create it", metadata.ShardsSchema).
			WithHint("Have a superuser run CREATE SCHEMA %s; GRANT USAGE, CREATE ON SCHEMA %s TO PUBLIC in this database on every worker (pgfleet does so itself when it can log in to the workers as postgres).",
				ident, ident)
	}
	return MakeShardsSchema(ctx, conn)
}

// MakeShardsSchema creates metadata.ShardsSchema in conn's database unless
// it is there, with USAGE and CREATE for every role (shards of any role's
// tables go in it; it is in no one's search_path, and pgfleet names it in
// every statement on a shard). IF NOT EXISTS: another coordinator may be
// making it too.
func MakeShardsSchema(ctx context.Context, conn *pgx.Conn) error {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname = $1)",
		metadata.ShardsSchema).Scan(&exists); err != nil || exists {
		return err
	}
	ident := pgx.Identifier{metadata.ShardsSchema}.Sanitize()
	_, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+ident+"; GRANT USAGE, CREATE ON SCHEMA "+ident+" TO PUBLIC",
		pgx.QueryExecModeSimpleProtocol)
	return err
}

// insertColumns is the quoted list of a table's columns that take values:
// all but dropped and generated ones.
func insertColumns(ctx context.Context, conn *pgx.Conn, oid uint32) (string, error) {
	rows, err := conn.Query(ctx, `SELECT attname::text FROM pg_catalog.pg_attribute
		WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped AND attgenerated = ''
		ORDER BY attnum`, oid)
	if err != nil {
		return "", err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", err
	}
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = pgx.Identifier{n}.Sanitize()
	}
	return strings.Join(quoted, ", "), nil
}

// columnList is " (cols)", or "" for a table without columns.
func columnList(cols string) string {
	if cols == "" {
		return ""
	}
	return " (" + cols + ")"
}

// GuardTrigger is the trigger that makes the default node's table of a
// distributed or reference table refuse writes that do not come from
// pgfleet itself (pgfleet.internal): a coordinator whose catalog is a moment
// behind gets 40001 to retry, instead of acknowledging a write into a table
// nobody reads.
const GuardTrigger = "pgfleet_distributed_guard"

// GuardSQL adds (on) or removes the guard trigger of a table (ident is its
// quoted, qualified name).
func GuardSQL(ident string, on bool) string {
	if on {
		return "CREATE OR REPLACE TRIGGER " + GuardTrigger + " BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON " + ident +
			" FOR EACH STATEMENT EXECUTE FUNCTION pgfleet.distributed_table_guard()"
	}
	return "DROP TRIGGER IF EXISTS " + GuardTrigger + " ON " + ident
}

// ownSchema reports whether a table in schema is one of pgfleet's own: the
// catalog's (pgfleet) or the commit records' (pgfleet_txn).
func ownSchema(schema string) bool {
	return schema == "pgfleet" || schema == "pgfleet_txn"
}
