package shards

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
)

// copiesGuardSQL creates the function of the trigger that refuses writes
// planned for fewer copies of a reference table than it has (the writer's
// metadata.CopiesMarker names how many it writes). Writes without a
// marker (pgfleet's moves, which hold the locks that exclude the others)
// pass.
const copiesGuardSQL = `CREATE SCHEMA IF NOT EXISTS pgfleet;
CREATE OR REPLACE FUNCTION pgfleet.reference_copies_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  q text := pg_catalog.current_query();
BEGIN
  IF pg_catalog.strpos(q, '/* pgfleet:copies=') = 0
     OR pg_catalog.strpos(q, '/* pgfleet:copies=' || TG_ARGV[0] || ' */') > 0 THEN
    RETURN NULL;
  END IF;
  RAISE EXCEPTION 'reference table % has % copies, and this write was planned for another number', TG_TABLE_NAME, TG_ARGV[0]
    USING ERRCODE = '40001', HINT = 'The coordinator had not seen the new node yet; retry the statement.';
END $$`

// copyOf is the copy of reference table schema.name (a shell's name), as
// a foreign key of another copy references it.
func copyOf(snap *metadata.Snapshot, schema, name string) (string, string, error) {
	t := snap.Table(schema + "." + name)
	if t == nil || t.Kind != metadata.Reference || len(snap.Shards[t.Name]) != 1 {
		return "", "", pgerr.New(pgerr.ObjectNotInPrerequisite, "a reference table's foreign key references %s.%s, which is not a reference table", schema, name).
			WithHint("Drop that foreign key, or make %s.%s a reference table.", schema, name)
	}
	return t.ShardsIn(), metadata.ShardName(name, snap.Shards[t.Name][0].ID), nil
}

// CopiesGuardTrigger is the trigger on every copy of a reference table
// that citus_add_node adds or moves.
const CopiesGuardTrigger = "pgfleet_copies_guard"

// AddNode is citus_add_node(host, port): it registers the node, copies
// every reference table to it (table, rows, constraints, indexes, the
// types and collations its columns use) and makes it active with a
// placement of each, all or nothing. conns has a connection to every
// active node and to the new one under newKey (any id not in the catalog);
// it returns the node's id.
//
// No write is lost between the copy and the catalog change: each reference
// table's copy on its first node (the node every writer locks first, as
// writers take the copies in node order) is locked EXCLUSIVE before its
// rows are read, and stays locked until the catalog change (the commit
// decision, metadata.ActivateNode) and the commit; a trigger on every copy,
// committed in the same transaction, refuses with 40001 a write that was
// planned for the old copies (a coordinator whose catalog is a moment
// behind, or a writer that waited for the lock).
func AddNode(ctx context.Context, store *metadata.Store, conns map[int32]*pgx.Conn, defaultNode, newKey int32,
	host string, port int) (*metadata.Snapshot, int32, error) {
	if store == nil {
		return nil, 0, errNoStore
	}
	snap, id, active, err := store.RegisterNode(ctx, host, port)
	if err != nil {
		return nil, 0, err
	}
	if active {
		return snap, id, nil
	}
	var refs []string
	for name, t := range snap.Tables {
		if t.Kind == metadata.Reference && len(snap.Shards[name]) == 1 {
			refs = append(refs, name)
		}
	}
	sort.Strings(refs)
	if len(refs) == 0 {
		snap, err = store.ActivateNode(ctx, id, nil)
		return snap, id, err
	}
	all := map[int32]*pgx.Conn{}
	for k, c := range conns {
		if k != newKey {
			all[k] = c
		}
	}
	if conns[newKey] == nil {
		return nil, 0, pgerr.New(pgerr.ConnectionFailure, "no connection to the new node %s:%d", host, port)
	}
	all[id] = conns[newKey]
	n := &nodes{conns: all, addrs: map[int32]string{}}
	o := &op{store: store, nodes: n, home: defaultNode, g: newGroup("addnode", n, store), schemas: map[int32]bool{}}
	o.g.beginStmt = opBeginSQL
	o.learn(snap)
	fail := func(err error) (*metadata.Snapshot, int32, error) {
		err = o.fail(ctx, err)
		if !o.g.tp.Decided && !o.g.tp.InDoubt {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			_, _ = store.RemoveNode(cctx, host, port)
			cancel()
		}
		return nil, 0, err
	}
	if err := o.checkNodes(ctx, append(ActiveNodes(snap), id)); err != nil {
		return fail(err)
	}
	guarded := map[int32]bool{}
	begin := func(node int32) (*nodeTx, error) {
		fresh := o.g.by[node] == nil
		tx, err := o.g.begin(ctx, node)
		if err != nil || !fresh {
			return tx, err
		}
		// A transaction writing several reference tables in another order
		// could wait for this one on another node, where no one sees the
		// cycle: a lock wait is bounded.
		if _, err := tx.conn.Exec(ctx, "SET LOCAL lock_timeout = '30s'"); err != nil {
			return nil, o.nodes.wrap(err, "on node %s", o.nodes.describe(node))
		}
		if !guarded[node] {
			if _, err := tx.conn.Exec(ctx, copiesGuardSQL); err != nil {
				return nil, o.nodes.wrap(err, "cannot create pgfleet's trigger function on node %s", o.nodes.describe(node))
			}
			guarded[node] = true
		}
		return tx, nil
	}
	if _, err := begin(o.home); err != nil {
		return fail(err)
	}
	newTx, err := begin(id)
	if err != nil {
		return fail(err)
	}
	var shardIDs []int64
	type refFK struct {
		def                *Def
		schema, name, qual string
	}
	var fks []refFK
	for _, name := range refs {
		sh := snap.Shards[name][0]
		if len(sh.Nodes) == 0 {
			return fail(pgerr.New(pgerr.ObjectNotInPrerequisite, "reference table %s has no copies", name))
		}
		schema, rel, _ := strings.Cut(name, ".")
		def, err := TableDef(ctx, o.homeConn(), pgx.Identifier{schema, rel}.Sanitize())
		if err != nil {
			return fail(o.nodes.wrap(err, "cannot read the definition of %s on node %s", name, o.nodes.describe(o.home)))
		}
		shardSchema := snap.Tables[name].ShardsIn()
		shardName := metadata.ShardName(def.Name, sh.ID)
		shardIdent := pgx.Identifier{shardSchema, shardName}.Sanitize()
		shardQual := shardSchema + "." + shardName
		src := slices.Min(sh.Nodes)
		srcTx, err := begin(src)
		if err != nil {
			return fail(err)
		}
		if _, err := srcTx.conn.Exec(ctx, "LOCK TABLE "+shardIdent+" IN EXCLUSIVE MODE"); err != nil {
			return fail(o.nodes.wrap(err, "cannot lock %s on node %s", shardQual, o.nodes.describe(src)))
		}
		at := o.nodes.describe(id)
		if err := ensureSchema(ctx, newTx.conn, def.Schema); err != nil {
			return fail(o.nodes.wrap(err, "cannot create schema %q on node %s", def.Schema, at))
		}
		if shardSchema == metadata.ShardsSchema {
			if err := ensureShardsSchema(ctx, newTx.conn); err != nil {
				return fail(o.nodes.wrap(err, "cannot create schema %s on node %s", shardSchema, at))
			}
		}
		types, err := columnTypes(ctx, o.homeConn(), def.OID)
		if err != nil {
			return fail(o.nodes.wrap(err, "cannot read the types of %s on node %s", name, o.nodes.describe(o.home)))
		}
		if err := ensureTypes(ctx, newTx.conn, types); err != nil {
			return fail(o.nodes.wrap(err, "cannot create the types of %s on node %s", name, at))
		}
		stmts := def.CreateSQL(shardSchema, shardName)
		if _, err := newTx.conn.Exec(ctx, stmts[0]); err != nil {
			return fail(o.nodes.wrap(err, "cannot create %s on node %s", shardQual, at))
		}
		cols := def.copyColumns()
		_, srcErr, dstErr := streamCopy(ctx, srcTx.conn, "COPY (SELECT "+cols+" FROM "+shardIdent+") TO STDOUT",
			newTx.conn, "COPY "+shardIdent+columnList(cols)+" FROM STDIN")
		if srcErr != nil {
			return fail(o.nodes.wrap(srcErr, "cannot read %s on node %s", shardQual, o.nodes.describe(src)))
		}
		if dstErr != nil {
			return fail(o.nodes.wrap(dstErr, "cannot copy %s to node %s", shardQual, at))
		}
		if len(stmts) > 1 {
			for _, st := range stmts[1:] {
				if _, err := newTx.conn.Exec(ctx, st); err != nil {
					return fail(o.nodes.wrap(err, "cannot create the constraints and indexes of %s on node %s", shardQual, at))
				}
			}
		}
		copies := len(sh.Nodes) + 1
		for _, node := range append(slices.Clone(sh.Nodes), id) {
			tx, err := begin(node)
			if err != nil {
				return fail(err)
			}
			if _, err := tx.conn.Exec(ctx, fmt.Sprintf(
				"CREATE OR REPLACE TRIGGER %s BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION pgfleet.reference_copies_guard('%d')",
				CopiesGuardTrigger, shardIdent, copies)); err != nil {
				return fail(o.nodes.wrap(err, "cannot guard %s on node %s", shardQual, o.nodes.describe(node)))
			}
		}
		shardIDs = append(shardIDs, sh.ID)
		fks = append(fks, refFK{def, shardSchema, shardName, shardQual})
	}
	// Foreign keys between reference tables once every copy has its rows:
	// the shell's key names the referenced shell, the copy's its copy.
	for _, f := range fks {
		stmts, err := f.def.ForeignKeySQL(f.schema, f.name, func(schema, name string) (string, string, error) {
			return copyOf(snap, schema, name)
		})
		if err != nil {
			return fail(err)
		}
		for _, st := range stmts {
			if _, err := newTx.conn.Exec(ctx, st); err != nil {
				return fail(o.nodes.wrap(err, "cannot add the foreign keys of %s on node %s", f.qual, o.nodes.describe(id)))
			}
		}
	}
	// The catalog change is the commit decision.
	after, err := o.commitWith(ctx, func(err error) error { _, _, err = fail(err); return err },
		func(ctx context.Context) (*metadata.Snapshot, error) { return store.ActivateNode(ctx, id, shardIDs) })
	if after == nil {
		return nil, 0, err
	}
	return after, id, err
}

// RemoveNode is citus_remove_node(host, port): it drops the node's copies
// of the reference tables and removes the node from the catalog, all or
// nothing. The node must hold no shard of a distributed table
// (citus_drain_node moves them off; 55000 otherwise), nor be the default
// node, which keeps the tables themselves. conns has a connection to every
// active node.
//
// The copies are dropped in a prepared transaction on the node, the copies
// that stay get the guard trigger of the new number of copies in theirs
// (taken in node order, as writers take them), and the catalog change is
// the commit decision. A coordinator whose catalog is a moment behind
// still writes to every old copy: the guard, or the dropped copy, fails
// its distributed transaction whole (40001, retried), so no copy misses a
// write; a read of the dropped copy gets 40001 too.
func RemoveNode(ctx context.Context, store *metadata.Store, conns map[int32]*pgx.Conn, defaultNode int32,
	host string, port int) (*metadata.Snapshot, error) {
	if store == nil {
		return nil, errNoStore
	}
	snap, err := store.Load(ctx)
	if err != nil {
		return nil, err
	}
	var id int32
	for _, n := range snap.Nodes {
		if n.Host == host && n.Port == port {
			id = n.ID
		}
	}
	var refs []int64
	type copyOf struct {
		ident string
		nodes []int32
	}
	var copies []copyOf
	for name, t := range snap.Tables {
		if t.Kind != metadata.Reference || len(snap.Shards[name]) != 1 || !slices.Contains(snap.Shards[name][0].Nodes, id) {
			continue
		}
		sh := snap.Shards[name][0]
		refs = append(refs, sh.ID)
		rel := name[strings.IndexByte(name, '.')+1:]
		copies = append(copies, copyOf{pgx.Identifier{t.ShardsIn(), metadata.ShardName(rel, sh.ID)}.Sanitize(), sh.Nodes})
	}
	slices.SortFunc(copies, func(a, b copyOf) int { return strings.Compare(a.ident, b.ident) })
	distributed := false
	for name, t := range snap.Tables {
		for _, sh := range snap.Shards[name] {
			distributed = distributed || t.Kind == metadata.Distributed && slices.Contains(sh.Nodes, id)
		}
	}
	if id == 0 || len(refs) == 0 || distributed {
		return store.RemoveNode(ctx, host, port) // (its errors: no such node, shards left)
	}
	if id == defaultNode {
		return nil, pgerr.New(pgerr.ObjectNotInPrerequisite, "node %s:%d is the default node, which keeps the tables and the catalog", host, port)
	}
	n := &nodes{conns: conns, addrs: map[int32]string{}}
	o := &op{store: store, nodes: n, home: defaultNode, g: newGroup("removenode", n, store), schemas: map[int32]bool{}}
	o.g.beginStmt = opBeginSQL
	o.learn(snap)
	// Node by node in id order, as writers of reference tables take their
	// copies: the copies that stay get the guard with one copy fewer (a
	// write planned for the old copies is refused there too), the node's
	// own are dropped.
	var all []int32
	for _, c := range copies {
		all = append(all, c.nodes...)
	}
	slices.Sort(all)
	for _, node := range slices.Compact(all) {
		tx, err := o.g.begin(ctx, node)
		if err != nil {
			return nil, o.fail(ctx, err)
		}
		if node != id {
			if _, err := tx.conn.Exec(ctx, copiesGuardSQL); err != nil {
				return nil, o.fail(ctx, o.nodes.wrap(err, "cannot create pgfleet's trigger function on node %s", o.nodes.describe(node)))
			}
		}
		var drop []string
		for _, c := range copies {
			if !slices.Contains(c.nodes, node) {
				continue
			}
			if node == id {
				drop = append(drop, c.ident)
				continue
			}
			sql := fmt.Sprintf("CREATE OR REPLACE TRIGGER %s BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION pgfleet.reference_copies_guard('%d')",
				CopiesGuardTrigger, c.ident, len(c.nodes)-1)
			if _, err := tx.conn.Exec(ctx, sql); err != nil {
				return nil, o.fail(ctx, o.nodes.wrap(err, "cannot change the copy %s on node %s", c.ident, o.nodes.describe(node)))
			}
		}
		if len(drop) > 0 {
			// In one statement: a copy may reference another by a foreign key.
			if _, err := tx.conn.Exec(ctx, "DROP TABLE IF EXISTS "+strings.Join(drop, ", ")); err != nil {
				return nil, o.fail(ctx, o.nodes.wrap(err, "cannot drop the copies on node %s", o.nodes.describe(node)))
			}
		}
	}
	return o.commitWith(ctx, func(err error) error { return o.fail(ctx, err) },
		func(ctx context.Context) (*metadata.Snapshot, error) {
			return store.RemoveNodeCopies(ctx, host, port, refs)
		})
}
