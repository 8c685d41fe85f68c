package shards

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
)

// SplitShard is citus_split_shard_by_split_points(shard_id, split_points,
// node_ids): it splits the hash range of shard id, and of every shard
// colocated with it, at points into len(points)+1 ranges ([min, p1],
// [p1+1, p2], ..., [pk+1, max]), the i-th new shard of each table on
// nodes[i]. Statements on the group are held while it runs, as a
// block_writes move holds them (the fleet's coordinators hold them, see
// HoldFunc): in one two-phase commit over the source node and the new
// shards' nodes, the source's shards are locked ACCESS EXCLUSIVE, their
// definitions read, the new shard tables made (constraint and index names
// with the new shards' ids), each range's rows copied into them (an INSERT
// ... SELECT on the source's node, a COPY stream to another), the row
// counts compared, and the source's shards dropped; the catalog change
// (store.SplitShards, which also raises the group's shard count) is the
// commit decision. One split or move of a group at a time (its move lock).
// Statements that reach the old shard meanwhile (a coordinator outside
// the fleet) wait for the lock and then find it gone (40001, or run again
// by their coordinator).
func SplitShard(ctx context.Context, store *metadata.Store, conns map[int32]*pgx.Conn, defaultNode int32,
	id int64, points []int32, nodes []int32, mode string, hold HoldFunc) (*metadata.Snapshot, error) {
	switch mode {
	case "", TransferAuto, TransferBlockWrites:
	case TransferLogical:
		return nil, pgerr.New(pgerr.FeatureNotSupported, "a split with force_logical is not supported: splits copy with writes held").
			WithHint("Use shard_transfer_mode => 'block_writes' (or 'auto').")
	default:
		return nil, pgerr.New(pgerr.InvalidParameterValue, "invalid shard_transfer_mode %q", mode).
			WithHint("Use auto, force_logical or block_writes.")
	}
	g, err := holdGroup(ctx, store, conns, defaultNode, "split", id)
	if err != nil {
		return nil, err
	}
	defer g.lock.Release()
	o, snap, shards, tables, lock := g.o, g.snap, g.shards, g.tables, g.lock
	lo, hi := shards[0].MinHash, shards[0].MaxHash
	if len(points) == 0 {
		return nil, pgerr.New(pgerr.InvalidParameterValue, "split_points must name at least one hash value")
	}
	for i, p := range points {
		if p < lo || p >= hi || i > 0 && p <= points[i-1] {
			return nil, pgerr.New(pgerr.InvalidParameterValue,
				"split points must be ascending hash values of shard %d's range %d..%d, each below its end (got %v)", id, lo, hi, points).
				WithHint("Split point p puts hash values up to p in one shard and from p+1 in the next.")
		}
	}
	if len(nodes) != len(points)+1 {
		return nil, pgerr.New(pgerr.InvalidParameterValue, "%d split points make %d shards, but %d node ids were given",
			len(points), len(points)+1, len(nodes))
	}
	for _, n := range nodes {
		if nd := snap.Node(n); nd == nil || !nd.Active {
			return nil, pgerr.New(pgerr.ObjectNotInPrerequisite, "node %d is not an active node of the catalog", n).
				WithHint("citus_get_active_worker_nodes() and citus_shards list the nodes.")
		}
	}
	if len(shards[0].Nodes) != 1 {
		return nil, pgerr.New(pgerr.FeatureNotSupported, "shard %d has %d placements; only a shard with one can be split", id, len(shards[0].Nodes)).
			WithHint("citus_shards lists the shard's placements.")
	}
	from := shards[0].Nodes[0]
	ranges := make([][2]int32, 0, len(nodes))
	start := lo
	for _, p := range points {
		ranges = append(ranges, [2]int32{start, p})
		start = p + 1
	}
	ranges = append(ranges, [2]int32{start, hi})
	involved := append([]int32{from}, nodes...)
	slices.Sort(involved)
	involved = slices.Compact(involved)
	if err := o.checkNodes(ctx, involved); err != nil {
		return nil, err
	}
	newIDs, err := store.NextShardIDs(ctx, len(ranges)*len(shards))
	if err != nil {
		return nil, err
	}
	began := time.Now()
	src, err := o.g.begin(ctx, from)
	if err != nil {
		return nil, o.fail(ctx, err)
	}
	var oldIDs []int64
	var oldIdents []string
	for i, sh := range shards {
		rel := tables[i].Name[strings.IndexByte(tables[i].Name, '.')+1:]
		oldIdents = append(oldIdents, pgx.Identifier{tables[i].ShardsIn(), metadata.ShardName(rel, sh.ID)}.Sanitize())
		oldIDs = append(oldIDs, sh.ID)
	}
	release, err := holdShards(ctx, hold, shards, tables)
	if err != nil {
		return nil, o.fail(ctx, err)
	}
	failed := true
	defer func() { release(!failed) }()
	// The drop's lock from the start, as a move's (cutOver).
	if _, err := src.conn.Exec(ctx, "LOCK TABLE "+strings.Join(oldIdents, ", ")+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		return nil, o.fail(ctx, o.nodes.wrap(err, "cannot lock the shards on node %s", o.nodes.describe(from)))
	}
	var news []metadata.NewShard
	// The foreign keys are added once every new shard has its rows: one of
	// the group may reference another, whose new shard of the same range
	// it then references (renamed: an old shard's qualified name to its
	// new ones' names, by range).
	type newShard struct {
		def  *Def
		conn *pgx.Conn
		name string
		k    int
		at   string
	}
	var made []newShard
	renamed := map[string][]string{}
	next := 0
	for i, sh := range shards {
		t := tables[i]
		rel := t.Name[strings.IndexByte(t.Name, '.')+1:]
		oldName := metadata.ShardName(rel, sh.ID)
		def, err := TableDef(ctx, src.conn, oldIdents[i])
		if err != nil {
			return nil, o.fail(ctx, o.nodes.wrap(err, "cannot read the definition of shard %s on node %s", oldName, o.nodes.describe(from)))
		}
		base := def.renamed(rel, sh.ID)
		col := base.Column(t.DistColumn)
		if col == nil {
			return nil, o.fail(ctx, pgerr.New(pgerr.Internal, "shard %s has no distribution column %q", oldName, t.DistColumn))
		}
		fn, err := HashFunction(col)
		if err != nil {
			return nil, o.fail(ctx, err)
		}
		types, err := columnTypes(ctx, src.conn, def.OID)
		if err != nil {
			return nil, o.fail(ctx, o.nodes.wrap(err, "cannot read the types of shard %s on node %s", oldName, o.nodes.describe(from)))
		}
		cols := def.copyColumns()
		var want, copied int64
		if err := src.conn.QueryRow(ctx, "SELECT count(*) FROM "+oldIdents[i]).Scan(&want); err != nil {
			return nil, o.fail(ctx, o.nodes.wrap(err, "cannot count shard %s on node %s", oldName, o.nodes.describe(from)))
		}
		for k, r := range ranges {
			newID := newIDs[next]
			next++
			to := nodes[k]
			dst, err := o.g.begin(ctx, to)
			if err != nil {
				return nil, o.fail(ctx, err)
			}
			at := o.nodes.describe(to)
			newName := metadata.ShardName(rel, newID)
			ident := pgx.Identifier{t.ShardsIn(), newName}.Sanitize()
			if err := ensureSchema(ctx, dst.conn, t.Schema()); err != nil {
				return nil, o.fail(ctx, o.nodes.wrap(err, "cannot create schema %q on node %s", t.Schema(), at))
			}
			if t.ShardsIn() == metadata.ShardsSchema {
				if err := ensureShardsSchema(ctx, dst.conn); err != nil {
					return nil, o.fail(ctx, o.nodes.wrap(err, "cannot create schema %s on node %s", metadata.ShardsSchema, at))
				}
			}
			if to != from {
				if err := ensureTypes(ctx, dst.conn, types); err != nil {
					return nil, o.fail(ctx, o.nodes.wrap(err, "cannot create the types of %s on node %s", t.Name, at))
				}
			}
			stmts := base.CreateSQL(t.ShardsIn(), newName)
			if _, err := dst.conn.Exec(ctx, stmts[0]); err != nil {
				return nil, o.fail(ctx, o.nodes.wrap(err, "cannot create shard %s on node %s", newName, at))
			}
			colIdent := pgx.Identifier{t.DistColumn}.Sanitize()
			where := fmt.Sprintf(" WHERE %s(%s) BETWEEN %d AND %d", fn, colIdent, r[0], r[1])
			if r[0] <= 0 && 0 <= r[1] {
				// Rows with a NULL distribution value live in the shard of
				// hash 0 (as Distribute and an INSERT place them).
				where += " OR " + colIdent + " IS NULL"
			}
			selectSQL := "SELECT " + cols + " FROM " + oldIdents[i] + where
			var n int64
			if to == from {
				tag, err := src.conn.Exec(ctx, "INSERT INTO "+ident+columnList(cols)+" "+selectSQL)
				if err != nil {
					return nil, o.fail(ctx, o.nodes.wrap(err, "cannot copy rows of shard %s into %s on node %s", oldName, newName, at))
				}
				n = tag.RowsAffected()
			} else {
				var srcErr, dstErr error
				n, srcErr, dstErr = streamCopy(ctx, src.conn, "COPY ("+selectSQL+") TO STDOUT", dst.conn, "COPY "+ident+columnList(cols)+" FROM STDIN")
				if srcErr != nil {
					return nil, o.fail(ctx, o.nodes.wrap(srcErr, "cannot read shard %s on node %s", oldName, o.nodes.describe(from)))
				}
				if dstErr != nil {
					return nil, o.fail(ctx, o.nodes.wrap(dstErr, "cannot copy rows of shard %s into %s on node %s", oldName, newName, at))
				}
			}
			copied += n
			if len(stmts) > 1 {
				if _, err := dst.conn.Exec(ctx, strings.Join(stmts[1:], ";\n")); err != nil {
					return nil, o.fail(ctx, o.nodes.wrap(err, "cannot create the constraints and indexes of shard %s on node %s", newName, at))
				}
			}
			news = append(news, metadata.NewShard{ID: newID, Table: t.Name, Min: r[0], Max: r[1], Node: to})
			made = append(made, newShard{base, dst.conn, newName, k, at})
			renamed[t.ShardsIn()+"."+oldName] = append(renamed[t.ShardsIn()+"."+oldName], newName)
		}
		if copied != want {
			return nil, o.fail(ctx, pgerr.New(pgerr.DataCorrupted,
				"shard %s has %d rows but its new shards got %d; nothing was split", oldName, want, copied))
		}
	}
	for _, m := range made {
		stmts, err := m.def.ForeignKeySQL(m.def.Schema, m.name, func(schema, name string) (string, string, error) {
			if names, ok := renamed[schema+"."+name]; ok {
				return schema, names[m.k], nil
			}
			return schema, name, nil // a reference table's copy
		})
		if err != nil {
			return nil, o.fail(ctx, err)
		}
		for _, st := range stmts {
			if _, err := m.conn.Exec(ctx, st); err != nil {
				return nil, o.fail(ctx, o.nodes.wrap(err, "cannot add the foreign keys of shard %s on node %s", m.name, m.at))
			}
		}
	}
	if _, err := src.conn.Exec(ctx, "DROP TABLE "+strings.Join(oldIdents, ", ")); err != nil {
		return nil, o.fail(ctx, o.nodes.wrap(err, "cannot drop the shards on node %s", o.nodes.describe(from)))
	}
	failed = false
	after, err := o.commitWith(ctx, func(err error) error { failed = true; return o.fail(ctx, err) },
		func(ctx context.Context) (*metadata.Snapshot, error) {
			return store.SplitShards(ctx, lock, oldIDs, news)
		})
	if err == nil {
		slog.Info("shard group split", "shards", oldIDs, "ranges", ranges, "nodes", nodes, "writes_held", time.Since(began).Round(time.Millisecond))
	}
	return after, err
}

// renamed is the definition of shard id of table rel with the shard's id
// taken off its constraint and index names, as CreateSQL makes a new
// shard's from a table's (those shortened to fit PostgreSQL's identifier
// length keep their whole name, and get the new shard's id after it).
func (d *Def) renamed(rel string, id int64) *Def {
	out := *d
	out.Name = rel
	suffix := "_" + strconv.FormatInt(id, 10)
	out.Constraints = slices.Clone(d.Constraints)
	for i := range out.Constraints {
		out.Constraints[i].Name = strings.TrimSuffix(out.Constraints[i].Name, suffix)
	}
	out.Indexes = slices.Clone(d.Indexes)
	for i := range out.Indexes {
		out.Indexes[i].Name = strings.TrimSuffix(out.Indexes[i].Name, suffix)
	}
	out.ForeignKeys = slices.Clone(d.ForeignKeys)
	for i := range out.ForeignKeys {
		out.ForeignKeys[i].Name = strings.TrimSuffix(out.ForeignKeys[i].Name, suffix)
	}
	return &out
}
