package coordinator

import (
	"context"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/coordinator/shards"
	"github.com/pgfleet/pgfleet/metadata"
)

// A shard move that stopped half way (its coordinator died, or lost the
// metadata database) leaves on the workers what its logical replication
// made: a subscription on the target (and its replication slot on the
// source, which keeps the source's WAL), a publication and marker tables,
// and the target's copies of the shards. A move records itself
// (pgfleet.shard_moves) before it makes any of them and forgets the record
// once they are gone. Its prepared transactions are recovery's like any
// others; this sweep, part of each recovery round, drops the rest of each
// recorded move once no move holds the group's lock, and forgets the
// record when every step succeeded (a step fails while a prepared
// transaction of the move still holds its locks: the next round tries
// again). It takes the group's lock itself, so no move starts meanwhile,
// and a move whose lock was lost cannot switch the placements
// (metadata.MoveLock). The target's copies go only where the settled
// catalog does not place the shards.

// cleanupMoves runs the sweep over the recorded moves (see above).
func (s *Server) cleanupMoves(ctx context.Context, snap *metadata.Snapshot, conns map[string]*pgx.Conn) {
	moves, err := s.store.Moves(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("recovery: listing shard moves", "err", err)
		}
		return
	}
	for _, m := range moves {
		s.cleanupMove(ctx, snap, m, conns)
	}
}

func (s *Server) cleanupMove(ctx context.Context, snap *metadata.Snapshot, m metadata.MoveRecord, conns map[string]*pgx.Conn) {
	if group, tables, err := shards.ColocatedShards(snap, m.Shard); err == nil {
		lock, err := s.store.HoldMoveLock(ctx, tables[0].ColocationID, group[0].MinHash)
		if err != nil {
			return // the move is running (or another coordinator cleans up)
		}
		defer lock.Release()
	}
	settled, err := s.store.LoadSettled(ctx)
	if err != nil {
		return
	}
	clean := true
	// run runs sql on a node (in a transaction whose lock waits are short,
	// unless it is a statement that cannot run in one).
	run := func(n *metadata.Node, sql string) {
		if n == nil {
			return // gone from the catalog: nothing of it to reach
		}
		c, err := s.recoveryConn(ctx, *n, m.Database, conns)
		if err == nil {
			if strings.HasPrefix(sql, "DROP SUBSCRIPTION") || strings.Contains(sql, "replication_slot") {
				_, err = c.Exec(ctx, sql)
			} else if _, err = c.Exec(ctx, "BEGIN; SET LOCAL lock_timeout = '1s'; "+sql+"; COMMIT"); err != nil {
				_, _ = c.Exec(ctx, "ROLLBACK")
			}
		}
		if err != nil {
			clean = false
			s.log.Warn("recovery: cleaning up after a shard move", "node", n.Addr(), "database", m.Database, "move", m.Name, "err", err)
		}
	}
	ident := pgx.Identifier{m.Name}.Sanitize()
	marker := pgx.Identifier{"pgfleet", m.Name}.Sanitize()
	target, source := settled.Node(m.Target), settled.Node(m.Source)
	if source == nil {
		// DROP SUBSCRIPTION would drop the slot on a node that is gone.
		run(target, "DO $$ BEGIN IF EXISTS (SELECT FROM pg_catalog.pg_subscription WHERE subname = "+quoteLiteral(m.Name)+
			") THEN ALTER SUBSCRIPTION "+ident+" DISABLE; ALTER SUBSCRIPTION "+ident+" SET (slot_name = NONE); END IF; END $$")
	}
	// The subscription first: its table copies' syncs keep the target's
	// tables from being dropped.
	run(target, "DROP SUBSCRIPTION IF EXISTS "+ident)
	var drops []string
	if group, tables, err := shards.ColocatedShards(settled, m.Shard); err == nil && target != nil {
		for i, sh := range group {
			if !slices.Contains(sh.Nodes, target.ID) {
				rel := tables[i].Name[strings.IndexByte(tables[i].Name, '.')+1:]
				drops = append(drops, pgx.Identifier{tables[i].ShardsIn(), metadata.ShardName(rel, sh.ID)}.Sanitize())
			}
		}
	}
	sql := "DROP TABLE IF EXISTS " + marker
	if len(drops) > 0 {
		sql += "; DROP TABLE IF EXISTS " + strings.Join(drops, ", ")
	}
	run(target, sql)
	run(source, "DROP PUBLICATION IF EXISTS "+ident+"; DROP TABLE IF EXISTS "+marker)
	run(source, "SELECT pg_catalog.pg_drop_replication_slot(slot_name) FROM pg_catalog.pg_replication_slots WHERE slot_name = "+
		quoteLiteral(m.Name)+" AND NOT active")
	if clean {
		if err := s.store.ForgetMove(ctx, m.Name); err != nil {
			s.log.Warn("recovery: forgetting a shard move", "move", m.Name, "err", err)
		}
	}
}
