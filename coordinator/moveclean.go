package coordinator

import (
	"context"
	"net"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/coordinator/shards"
	"github.com/pgfleet/pgfleet/metadata"
)

// A shard move that stopped half way (its coordinator died, or lost the
// metadata database) leaves on the workers what its logical replication
// made: a subscription on the target (and its replication slot on the
// source, which keeps the source's WAL), a publication and marker tables,
// and the target's copies of the shards. The move's prepared transactions
// are recovery's like any others; this sweep, part of each recovery round,
// removes the rest once no move holds the group's lock. It takes the lock
// itself, so no move starts meanwhile, and a move whose lock was lost
// cannot switch the placements (metadata.MoveLock). The target's tables go
// only where the settled catalog does not place the shards.

// moveLeftover is one replication object of a move on a node.
type moveLeftover struct {
	node     metadata.Node
	db, name string
	sub      bool   // a subscription (else an inactive slot)
	conninfo string // a subscription's connection string to the source
}

// cleanupMoves removes what stopped moves left (see above). Errors are
// logged; the next round tries again.
func (s *Server) cleanupMoves(ctx context.Context, snap *metadata.Snapshot, conns map[string]*pgx.Conn) {
	var found []moveLeftover
	for _, n := range snap.Nodes {
		c, err := s.recoveryConn(ctx, n, "postgres", conns)
		if err != nil {
			continue
		}
		rows, err := c.Query(ctx, `SELECT s.subname::pg_catalog.text, d.datname::pg_catalog.text, true, s.subconninfo
			FROM pg_catalog.pg_subscription s JOIN pg_catalog.pg_database d ON d.oid OPERATOR(pg_catalog.=) s.subdbid
			WHERE s.subname::pg_catalog.text OPERATOR(pg_catalog.~~) 'pgfleet\_move\_%'
			UNION ALL
			SELECT r.slot_name::pg_catalog.text, r.database::pg_catalog.text, false, ''
			FROM pg_catalog.pg_replication_slots r
			WHERE r.slot_name::pg_catalog.text OPERATOR(pg_catalog.~~) 'pgfleet\_move\_%' AND NOT r.active`)
		if err != nil {
			s.log.Warn("recovery: listing shard moves' replication", "node", n.Addr(), "err", err)
			continue
		}
		for rows.Next() {
			l := moveLeftover{node: n}
			if err := rows.Scan(&l.name, &l.db, &l.sub, &l.conninfo); err == nil {
				found = append(found, l)
			}
		}
		rows.Close()
	}
	for _, l := range found {
		s.cleanupMove(ctx, snap, l, conns)
	}
}

// moveShardID is the shard id in a move's name (pgfleet_move_<id>_<hex>).
func moveShardID(name string) (int64, bool) {
	rest, ok := strings.CutPrefix(name, "pgfleet_move_")
	if !ok {
		return 0, false
	}
	i := strings.IndexByte(rest, '_')
	if i < 0 {
		return 0, false
	}
	id, err := strconv.ParseInt(rest[:i], 10, 64)
	return id, err == nil
}

func (s *Server) cleanupMove(ctx context.Context, snap *metadata.Snapshot, l moveLeftover, conns map[string]*pgx.Conn) {
	id, ok := moveShardID(l.name)
	if !ok {
		return
	}
	if group, tables, err := shards.ColocatedShards(snap, id); err == nil {
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
	// run runs sql on a node (in a transaction whose lock waits are
	// short unless it is one statement that cannot run in one).
	run := func(n metadata.Node, sql string) error {
		c, err := s.recoveryConn(ctx, n, l.db, conns)
		if err == nil {
			if strings.Contains(sql, "SUBSCRIPTION") || strings.Contains(sql, "replication_slot") {
				_, err = c.Exec(ctx, sql)
			} else if _, err = c.Exec(ctx, "BEGIN; SET LOCAL lock_timeout = '1s'; "+sql+"; COMMIT"); err != nil {
				_, _ = c.Exec(ctx, "ROLLBACK")
			}
		}
		if err != nil {
			s.log.Warn("recovery: cleaning up after a shard move", "node", n.Addr(), "database", l.db, "move", l.name, "err", err)
		}
		return err
	}
	ident := pgx.Identifier{l.name}.Sanitize()
	marker := pgx.Identifier{"pgfleet", l.name}.Sanitize()
	source := func() (metadata.Node, bool) {
		cfg, err := pgconn.ParseConfig(l.conninfo)
		if err != nil {
			return metadata.Node{}, false
		}
		for _, n := range settled.Nodes {
			if n.Addr() == net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))) {
				return n, true
			}
		}
		return metadata.Node{}, false
	}
	if !l.sub {
		// The source's side, once no subscription reads the slot.
		_ = run(l.node, "DROP PUBLICATION IF EXISTS "+ident+"; DROP TABLE IF EXISTS "+marker)
		_ = run(l.node, "SELECT pg_catalog.pg_drop_replication_slot(slot_name) FROM pg_catalog.pg_replication_slots WHERE slot_name = "+
			quoteLiteral(l.name)+" AND NOT active")
		return
	}
	// The target's side: the subscription (DROP SUBSCRIPTION drops its slot
	// on the source; if the source cannot be reached, the slot is left to
	// the source's side of a later round).
	if run(l.node, "DROP SUBSCRIPTION IF EXISTS "+ident) != nil {
		if run(l.node, "ALTER SUBSCRIPTION "+ident+" DISABLE") != nil ||
			run(l.node, "ALTER SUBSCRIPTION "+ident+" SET (slot_name = NONE)") != nil ||
			run(l.node, "DROP SUBSCRIPTION IF EXISTS "+ident) != nil {
			return
		}
	}
	var drops []string
	if group, tables, err := shards.ColocatedShards(settled, id); err == nil {
		for i, sh := range group {
			if !containsNode(sh.Nodes, l.node.ID) {
				rel := tables[i].Name[strings.IndexByte(tables[i].Name, '.')+1:]
				drops = append(drops, pgx.Identifier{tables[i].ShardsIn(), metadata.ShardName(rel, sh.ID)}.Sanitize())
			}
		}
	}
	sql := "DROP TABLE IF EXISTS " + marker
	if len(drops) > 0 {
		sql += "; DROP TABLE IF EXISTS " + strings.Join(drops, ", ")
	}
	_ = run(l.node, sql)
	if src, ok := source(); ok {
		_ = run(src, "DROP PUBLICATION IF EXISTS "+ident+"; DROP TABLE IF EXISTS "+marker)
	}
}

func containsNode(nodes []int32, id int32) bool {
	for _, n := range nodes {
		if n == id {
			return true
		}
	}
	return false
}
