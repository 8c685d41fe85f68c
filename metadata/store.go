package metadata

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfleet/pgfleet/internal/pgerr"
)

// DefaultShardCount is the shard count of a distributed table created
// without one, as Citus' citus.shard_count.
const DefaultShardCount = 32

// MaxShardCount is the largest shard count a table may have, as in Citus.
const MaxShardCount = 64000

// initLockKey is the transaction-level advisory lock Init holds so that
// coordinators starting at once do not race creating the schema ("pgfleet"
// in ASCII).
const initLockKey int64 = 0x7067666c656574

// schemaDDL creates the catalog. Every statement is idempotent; Init runs it
// under initLockKey. catalog_version has exactly one row: the exclusion
// constraint on a constant admits no second one and Init inserts the first.
const schemaDDL = `
CREATE SCHEMA IF NOT EXISTS pgfleet;
-- Every role may use its functions (the guard triggers on the tables a role
-- distributes call them); its tables stay the owner's.
GRANT USAGE ON SCHEMA pgfleet TO PUBLIC;
CREATE TABLE IF NOT EXISTS pgfleet.nodes (
	nodeid serial PRIMARY KEY,
	host text NOT NULL,
	port int NOT NULL,
	active bool NOT NULL DEFAULT true,
	UNIQUE (host, port)
);
CREATE TABLE IF NOT EXISTS pgfleet.tables (
	name text PRIMARY KEY,
	kind "char" NOT NULL CHECK (kind IN ('h', 'n')),
	dist_column text,
	dist_type text,
	colocation_id int,
	shard_count int NOT NULL
);
-- Sequence columns: the identity kind ('s' for a serial default, 'd', 'a'),
-- the sequence's OID, ':' and the column's name.
-- (Added by a later version: checked first, so that a start takes no lock on
-- the table when the column is there.)
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_attribute WHERE attrelid = 'pgfleet.tables'::regclass AND attname = 'sequences') THEN
    ALTER TABLE pgfleet.tables ADD COLUMN sequences text[] NOT NULL DEFAULT '{}';
  END IF;
END $$;
-- The schema of the table's shards on the workers (ShardsSchema); NULL: the
-- table's own, for tables distributed before shards had a schema of their own.
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_attribute WHERE attrelid = 'pgfleet.tables'::regclass AND attname = 'shard_schema') THEN
    ALTER TABLE pgfleet.tables ADD COLUMN shard_schema text;
  END IF;
END $$;
-- Whether new distributed tables and the rebalancer put shards on the node
-- (Citus' shouldhaveshards; citus_drain_node clears it).
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_attribute WHERE attrelid = 'pgfleet.nodes'::regclass AND attname = 'should_have_shards') THEN
    ALTER TABLE pgfleet.nodes ADD COLUMN should_have_shards bool NOT NULL DEFAULT true;
  END IF;
END $$;
CREATE TABLE IF NOT EXISTS pgfleet.shards (
	shardid bigint PRIMARY KEY,
	table_name text NOT NULL REFERENCES pgfleet.tables ON DELETE CASCADE,
	min_hash int NOT NULL,
	max_hash int NOT NULL
);
CREATE TABLE IF NOT EXISTS pgfleet.placements (
	shardid bigint REFERENCES pgfleet.shards ON DELETE CASCADE,
	nodeid int REFERENCES pgfleet.nodes,
	PRIMARY KEY (shardid, nodeid)
);
CREATE TABLE IF NOT EXISTS pgfleet.catalog_version (
	version bigint NOT NULL,
	EXCLUDE USING btree ((true) WITH =)
);
INSERT INTO pgfleet.catalog_version (version)
	SELECT 1 WHERE NOT EXISTS (SELECT FROM pgfleet.catalog_version);
CREATE SEQUENCE IF NOT EXISTS pgfleet.shardid_seq START 102008;
CREATE SEQUENCE IF NOT EXISTS pgfleet.colocationid_seq START 1;
CREATE TABLE IF NOT EXISTS pgfleet.transaction_decisions (
	gid_base text PRIMARY KEY,
	decision "char" NOT NULL CHECK (decision IN ('c', 'a')),
	decided_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS transaction_decisions_decided_at ON pgfleet.transaction_decisions (decided_at);
-- Shard moves that made replication objects on the workers (a publication,
-- a subscription and its slot, marker tables, the target's copies), until
-- they are dropped: recovery drops what a move that stopped left.
CREATE TABLE IF NOT EXISTS pgfleet.shard_moves (
	name text PRIMARY KEY,
	database text NOT NULL,
	shard bigint NOT NULL,
	source int NOT NULL,
	target int NOT NULL,
	started timestamptz NOT NULL DEFAULT now()
);
-- Background rebalances (citus_rebalance_start): at most one running or
-- cancelling at a time; the coordinator running one holds its advisory lock
-- (RebalanceLock), and another takes it over when it is free.
CREATE TABLE IF NOT EXISTS pgfleet.rebalance_jobs (
	job_id bigserial PRIMARY KEY,
	state text NOT NULL CHECK (state IN ('running', 'cancelling', 'finished', 'cancelled', 'failed')),
	database text NOT NULL,
	role text NOT NULL,
	mode text NOT NULL,
	drain_only bool NOT NULL,
	started_at timestamptz NOT NULL DEFAULT now(),
	finished_at timestamptz,
	moves_planned int NOT NULL,
	moves_done int NOT NULL DEFAULT 0,
	current text NOT NULL DEFAULT '',
	error text NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX IF NOT EXISTS rebalance_jobs_active ON pgfleet.rebalance_jobs ((true))
	WHERE state IN ('running', 'cancelling');
-- Coordinators' leases on their shares of each worker's connection budget
-- (leases.go): a share counts until its coordinator's lease lapses and the
-- backends it recorded are ended (pids, as of recorded_at).
CREATE TABLE IF NOT EXISTS pgfleet.coordinators (
	name text PRIMARY KEY,
	address text NOT NULL DEFAULT '',
	expires timestamptz NOT NULL
);
-- The process holding the lease (a restarted coordinator takes its lease
-- over under its name; gossip revokes a dead process's by this).
ALTER TABLE pgfleet.coordinators ADD COLUMN IF NOT EXISTS incarnation text NOT NULL DEFAULT '';
CREATE TABLE IF NOT EXISTS pgfleet.connection_shares (
	coordinator text NOT NULL REFERENCES pgfleet.coordinators ON DELETE CASCADE,
	worker text NOT NULL,
	share int NOT NULL CHECK (share >= 0),
	budget int NOT NULL,
	pids int[] NOT NULL DEFAULT '{}',
	recorded_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (coordinator, worker)
);
-- Transactions over several workers that coordinators' distributed
-- deadlock detectors share (deadlocks.go): each coordinator's own, as of
-- seen, with their backends (addrs[i], pids[i]).
CREATE TABLE IF NOT EXISTS pgfleet.fleet_txns (
	coordinator text NOT NULL,
	txn bigint NOT NULL,
	since timestamptz NOT NULL,
	addrs text[] NOT NULL,
	pids int[] NOT NULL,
	seen timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (coordinator, txn)
);
-- The fleet's pools as the leases record them: each coordinator's share of
-- each worker and the backends it recorded there (those it held at its last
-- renewal, and those it opened since; some may have closed since).
DROP VIEW IF EXISTS pgfleet.pools; -- (its columns changed once)
CREATE VIEW pgfleet.pools AS
	SELECT c.address AS coordinator, s.worker, s.share, cardinality(s.pids) AS backends, s.budget,
		c.expires > now() AS live, s.recorded_at
	FROM pgfleet.coordinators c JOIN pgfleet.connection_shares s ON s.coordinator = c.name;
-- The guard trigger's function: the default node's table of a distributed or
-- reference table refuses writes that do not come from pgfleet itself.
CREATE OR REPLACE FUNCTION pgfleet.distributed_table_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF current_setting('pgfleet.internal', true) = 'on' THEN
    RETURN NULL;
  END IF;
  RAISE EXCEPTION 'table % is distributed, and this write reached its empty table on the first worker', TG_TABLE_NAME
    USING ERRCODE = '40001', HINT = 'The coordinator had not seen the table''s distribution yet; retry the statement.';
END $$;
-- The references guard's function: a table that is neither distributed nor a
-- reference table, with a foreign key to one, takes no rows: its key would be
-- checked against that table's empty shell here. (Once it has no such key,
-- dropped since, it takes them.)
CREATE OR REPLACE FUNCTION pgfleet.references_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF current_setting('pgfleet.internal', true) = 'on' OR NOT EXISTS (
      SELECT FROM pg_catalog.pg_constraint k JOIN pg_catalog.pg_trigger g ON g.tgrelid = k.confrelid
       WHERE k.conrelid = TG_RELID AND k.contype = 'f' AND g.tgname = 'pgfleet_distributed_guard') THEN
    RETURN NULL;
  END IF;
  RAISE EXCEPTION 'table % has a foreign key to a distributed or reference table, and is neither itself', TG_TABLE_NAME
    USING ERRCODE = '0A000', HINT = 'Distribute it before writing to it: create_distributed_table colocated with the table it references, or create_reference_table (in a transaction block, the table is distributed at COMMIT: write after it).';
END $$;
`

// Store is the durable catalog, kept in schema pgfleet of a metadata
// database. It holds no state of its own: every method reads or writes the
// database, so several coordinators may share one. Changes are serialized by
// the row lock on catalog_version, which each change bumps first.
type Store struct {
	pool *pgxpool.Pool
}

// NewStore returns a store on the metadata database the pool reaches. The
// caller owns the pool and closes it.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// Init creates schema pgfleet and its tables and sequences if they do not
// exist, in one transaction under an advisory lock, and runs extra (the
// caller's views over them) in the same transaction. It is safe to call
// again and from several coordinators at once. A new catalog has version 1.
func (s *Store) Init(ctx context.Context, extra ...string) error {
	// Its DDL takes strong locks on tables other coordinators' leases and
	// catalog reads use meanwhile: a deadlock with one of them (seen once
	// under load, 40P01) is tried again.
	var err error
	for try := 0; try < 5; try++ {
		if err = s.init(ctx, extra); err == nil || !retryable(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(50*(try+1)) * time.Millisecond):
		}
	}
	return err
}

// retryable reports whether err is a deadlock or serialization failure.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

func (s *Store) init(ctx context.Context, extra []string) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("metadata: init: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, initLockKey); err != nil {
		return fmt.Errorf("metadata: init: %w", err)
	}
	for _, sql := range append([]string{schemaDDL}, extra...) {
		if _, err := tx.Exec(ctx, sql); err != nil {
			return fmt.Errorf("metadata: init: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("metadata: init: %w", err)
	}
	return nil
}

// Load reads the whole catalog in one REPEATABLE READ read-only transaction.
func (s *Store) Load(ctx context.Context) (*Snapshot, error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("metadata: load: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	snap, err := load(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("metadata: load: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("metadata: load: %w", err)
	}
	return snap, nil
}

// LoadSettled is Load with no catalog change in flight: it waits for one
// that is committing and then fails (40001, to be tried again), so that
// what it returns is not about to change under a change that began before
// it. Recovery reads placements with it before it drops a table a move
// left.
func (s *Store) LoadSettled(ctx context.Context) (*Snapshot, error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return nil, fmt.Errorf("metadata: load: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT FROM pgfleet.catalog_version FOR SHARE`); err != nil {
		return nil, fmt.Errorf("metadata: load: %w", err)
	}
	snap, err := load(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("metadata: load: %w", err)
	}
	return snap, tx.Commit(ctx)
}

// Version returns the catalog version, which every change bumps by one. A
// coordinator compares it with its snapshot's to notice changes made by
// others.
func (s *Store) Version(ctx context.Context) (int64, error) {
	var v int64
	if err := s.pool.QueryRow(ctx, `SELECT version FROM pgfleet.catalog_version`).Scan(&v); err != nil {
		return 0, fmt.Errorf("metadata: version: %w", err)
	}
	return v, nil
}

// AddNode adds an active worker node. Adding a node that is already in the
// catalog reactivates it and keeps its id. Either way the version is bumped.
func (s *Store) AddNode(ctx context.Context, host string, port int) (*Snapshot, error) {
	if host == "" || port <= 0 || port > 65535 {
		return nil, pgerr.New(pgerr.InvalidParameterValue, "invalid node address %q port %d", host, port)
	}
	return s.change(ctx, "add node", func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO pgfleet.nodes (host, port, active) VALUES ($1, $2, true)
			ON CONFLICT (host, port) DO UPDATE SET active = true`, host, port)
		return err
	})
}

// RegisterNode adds a node that is not active yet (citus_add_node registers
// it first, so that recovery looks for prepared transactions there while
// the reference tables are copied to it), and returns its id and whether it
// was active already. A node in the catalog keeps its id and state.
func (s *Store) RegisterNode(ctx context.Context, host string, port int) (*Snapshot, int32, bool, error) {
	if host == "" || port <= 0 || port > 65535 {
		return nil, 0, false, pgerr.New(pgerr.InvalidParameterValue, "invalid node address %q port %d", host, port)
	}
	var id int32
	var active bool
	snap, err := s.change(ctx, "register node", func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO pgfleet.nodes (host, port, active) VALUES ($1, $2, false)
			ON CONFLICT (host, port) DO NOTHING`, host, port); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT nodeid, active FROM pgfleet.nodes WHERE host = $1 AND port = $2`, host, port).Scan(&id, &active)
	})
	return snap, id, active, err
}

// ActivateNode makes a registered node active with a placement of each of
// the given reference-table shards, which must be every reference table's
// shard (40001 otherwise: one was created or dropped meanwhile). Under
// WithDecision it is the commit decision of the transaction that copied
// the reference tables to the node.
func (s *Store) ActivateNode(ctx context.Context, id int32, refShards []int64) (*Snapshot, error) {
	return s.change(ctx, "activate node", func(tx pgx.Tx) error {
		var want []int64
		rows, err := tx.Query(ctx, `SELECT s.shardid FROM pgfleet.shards s JOIN pgfleet.tables t ON t.name = s.table_name
			WHERE t.kind = 'n' ORDER BY s.shardid`)
		if err != nil {
			return err
		}
		if want, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
			return err
		}
		got := append([]int64(nil), refShards...)
		sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return pgerr.New("40001", "the reference tables changed while they were copied to the new node").
				WithHint("Run citus_add_node again.")
		}
		tag, err := tx.Exec(ctx, `UPDATE pgfleet.nodes SET active = true WHERE nodeid = $1`, id)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return pgerr.New(pgerr.UndefinedObject, "node %d is not in the catalog", id)
		}
		_, err = tx.Exec(ctx, `INSERT INTO pgfleet.placements (shardid, nodeid)
			SELECT unnest($1::bigint[]), $2 ON CONFLICT DO NOTHING`, refShards, id)
		return err
	})
}

// RemoveNode removes a node from the catalog. It fails with
// object_not_in_prerequisite_state (55000), naming the shards, while any
// placement (of a distributed or reference table) remains on the node, and
// with undefined_object (42704) if there is no such node.
func (s *Store) RemoveNode(ctx context.Context, host string, port int) (*Snapshot, error) {
	return s.RemoveNodeCopies(ctx, host, port, nil)
}

// RemoveNodeCopies is RemoveNode that first removes the node's copies of
// the reference tables whose shards are refShards, which must be all the
// node has (40001 if the reference tables changed meanwhile). Under
// WithDecision it is the commit decision of the transaction that dropped
// the copies on the node.
func (s *Store) RemoveNodeCopies(ctx context.Context, host string, port int, refShards []int64) (*Snapshot, error) {
	addr := Node{Host: host, Port: port}.Addr()
	return s.change(ctx, "remove node", func(tx pgx.Tx) error {
		if len(refShards) > 0 {
			tag, err := tx.Exec(ctx, `DELETE FROM pgfleet.placements p USING pgfleet.shards s, pgfleet.tables t, pgfleet.nodes n
				WHERE p.shardid = s.shardid AND s.table_name = t.name AND t.kind = 'n' AND p.nodeid = n.nodeid
				AND n.host = $1 AND n.port = $2 AND p.shardid = ANY($3)`, host, port, refShards)
			if err != nil {
				return err
			}
			if tag.RowsAffected() != int64(len(refShards)) {
				return pgerr.New(pgerr.SerializationFailure, "the reference tables changed while the node's copies were dropped").
					WithHint("Run citus_remove_node again.")
			}
		}
		var id int32
		err := tx.QueryRow(ctx, `SELECT nodeid FROM pgfleet.nodes WHERE host = $1 AND port = $2 FOR UPDATE`,
			host, port).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			return pgerr.New(pgerr.UndefinedObject, "node %s is not in the catalog", addr)
		}
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT s.table_name, s.shardid FROM pgfleet.placements p
			JOIN pgfleet.shards s USING (shardid) WHERE p.nodeid = $1 ORDER BY s.shardid`, id)
		if err != nil {
			return err
		}
		var names []string
		for rows.Next() {
			var table string
			var shard int64
			if err := rows.Scan(&table, &shard); err != nil {
				rows.Close()
				return err
			}
			names = append(names, ShardName(table, shard))
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(names) > 0 {
			const show = 10
			list := strings.Join(names[:min(show, len(names))], ", ")
			if len(names) > show {
				list += fmt.Sprintf(" and %d more", len(names)-show)
			}
			e := pgerr.New(pgerr.ObjectNotInPrerequisite,
				"cannot remove node %s: it has placements of shards %s", addr, list)
			return e.WithHint("Move them off the node first: citus_drain_node('%s', %d).", host, port)
		}
		_, err = tx.Exec(ctx, `DELETE FROM pgfleet.nodes WHERE nodeid = $1`, id)
		return err
	})
}

// CreateDistributedTable records a hash-distributed table and its shards
// and returns the new snapshot and the table's shards (sorted by MinHash,
// shared with the snapshot: do not modify them). t.Name, t.DistColumn and
// t.DistType are required; t.Kind and t.ColocationID are ignored;
// t.ShardCount defaults to DefaultShardCount, or to the shard count of the
// colocateWith table.
//
// colocateWith is as in Citus' create_distributed_table: "" or "default"
// joins the first colocation group with the same shard count and
// distribution type, or makes a new one; "none" always makes a new group;
// otherwise it names a distributed table, whose shard count and distribution
// type must match (22023 otherwise). A table joining a group has shard i
// placed on the nodes of the group's shard i; a table in a new group has
// shard i placed on the i-th active node (mod their number) by node id.
// Shard ids come from a sequence starting at 102008, in hash order.
func (s *Store) CreateDistributedTable(ctx context.Context, t Table, colocateWith string) (*Snapshot, []Shard, error) {
	switch {
	case t.Name == "":
		return nil, nil, pgerr.New(pgerr.InvalidParameterValue, "table name is required")
	case t.DistColumn == "":
		return nil, nil, pgerr.New(pgerr.InvalidParameterValue, "distribution column of table %s is required", t.Name)
	case t.DistType == "":
		return nil, nil, pgerr.New(pgerr.InvalidParameterValue, "distribution column type of table %s is required", t.Name)
	case t.ShardCount < 0 || t.ShardCount > MaxShardCount:
		return nil, nil, pgerr.New(pgerr.InvalidParameterValue, "shard_count must be between 1 and %d", MaxShardCount)
	}
	snap, err := s.change(ctx, "create distributed table", func(tx pgx.Tx) error {
		if err := checkNew(ctx, tx, t.Name); err != nil {
			return err
		}
		count := t.ShardCount
		var group int32
		template := "" // a table of the group joined, whose placements the new table copies
		switch strings.ToLower(colocateWith) {
		case "none":
			if count == 0 {
				count = DefaultShardCount
			}
		case "", "default":
			if count == 0 {
				count = DefaultShardCount
			}
			err := tx.QueryRow(ctx, `SELECT colocation_id, name FROM pgfleet.tables
				WHERE kind = 'h' AND shard_count = $1 AND dist_type = $2
				ORDER BY colocation_id, name LIMIT 1`, count, t.DistType).Scan(&group, &template)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
		default:
			var kind, distType string
			var n int
			err := tx.QueryRow(ctx, `SELECT kind::text, coalesce(dist_type, ''), coalesce(colocation_id, 0), shard_count
				FROM pgfleet.tables WHERE name = $1`, colocateWith).Scan(&kind, &distType, &group, &n)
			if errors.Is(err, pgx.ErrNoRows) || (err == nil && kind != string(rune(Distributed))) {
				return pgerr.New(pgerr.InvalidParameterValue,
					"cannot colocate table %s with %s: %s is not a distributed table", t.Name, colocateWith, colocateWith)
			}
			if err != nil {
				return err
			}
			if count == 0 {
				count = n
			}
			if count != n {
				return pgerr.New(pgerr.InvalidParameterValue,
					"cannot colocate table %s with %s: shard counts differ (%d and %d)", t.Name, colocateWith, count, n)
			}
			if distType != t.DistType {
				return pgerr.New(pgerr.InvalidParameterValue,
					"cannot colocate table %s with %s: distribution column types differ (%s and %s)",
					t.Name, colocateWith, t.DistType, distType)
			}
			template = colocateWith
		}

		placements := make([][]int32, count)
		ranges := HashRanges(count)
		if template != "" {
			// The group's ranges, which a split may have made uneven.
			ranges = ranges[:0]
			rows, err := tx.Query(ctx, `SELECT coalesce(array_agg(p.nodeid ORDER BY p.nodeid)
					FILTER (WHERE p.nodeid IS NOT NULL), '{}'), s.min_hash, s.max_hash
				FROM pgfleet.shards s LEFT JOIN pgfleet.placements p USING (shardid)
				WHERE s.table_name = $1 GROUP BY s.shardid ORDER BY s.min_hash`, template)
			if err != nil {
				return err
			}
			i := 0
			for rows.Next() {
				var nodes []int32
				var lo, hi int32
				if err := rows.Scan(&nodes, &lo, &hi); err != nil {
					rows.Close()
					return err
				}
				if i < count {
					placements[i] = nodes
					ranges = append(ranges, [2]int32{lo, hi})
				}
				i++
			}
			if err := rows.Err(); err != nil {
				return err
			}
			if i != count {
				return pgerr.New(pgerr.Internal, "colocated table %s has %d shards, not %d", template, i, count)
			}
		} else {
			nodes, err := shardNodes(ctx, tx)
			if err != nil {
				return err
			}
			if len(nodes) == 0 {
				return pgerr.New(pgerr.ObjectNotInPrerequisite, "cannot distribute table %s: there are no active nodes that should have shards", t.Name).
					WithHint("Add a worker node first, or set shouldhaveshards on one (citus_set_node_property).")
			}
			for i := range placements {
				placements[i] = []int32{nodes[i%len(nodes)]}
			}
			if err := tx.QueryRow(ctx, `SELECT nextval('pgfleet.colocationid_seq')::int`).Scan(&group); err != nil {
				return err
			}
		}

		if _, err := tx.Exec(ctx, `INSERT INTO pgfleet.tables
			(name, kind, dist_column, dist_type, colocation_id, shard_count, sequences, shard_schema)
			VALUES ($1, 'h', $2, $3, $4, $5, $6, $7)`, t.Name, t.DistColumn, t.DistType, group, count, seqText(t.Sequences), ShardsSchema); err != nil {
			return err
		}
		return insertShards(ctx, tx, t.Name, ranges, placements)
	})
	if err != nil {
		return nil, nil, err
	}
	return snap, snap.Shards[t.Name], nil
}

// CreateReferenceTable records a reference table: one shard covering the
// whole hash space, with a placement on every active node.
func (s *Store) CreateReferenceTable(ctx context.Context, name string, seqs ...SeqColumn) (*Snapshot, Shard, error) {
	if name == "" {
		return nil, Shard{}, pgerr.New(pgerr.InvalidParameterValue, "table name is required")
	}
	snap, err := s.change(ctx, "create reference table", func(tx pgx.Tx) error {
		if err := checkNew(ctx, tx, name); err != nil {
			return err
		}
		nodes, err := activeNodes(ctx, tx)
		if err != nil {
			return err
		}
		if len(nodes) == 0 {
			return pgerr.New(pgerr.ObjectNotInPrerequisite, "cannot create reference table %s: there are no active nodes", name).
				WithHint("Add a worker node first.")
		}
		if _, err := tx.Exec(ctx, `INSERT INTO pgfleet.tables (name, kind, shard_count, sequences, shard_schema)
			VALUES ($1, 'n', 1, $2, $3)`, name, seqText(seqs), ShardsSchema); err != nil {
			return err
		}
		return insertShards(ctx, tx, name, [][2]int32{{math.MinInt32, math.MaxInt32}}, [][]int32{nodes})
	})
	if err != nil {
		return nil, Shard{}, err
	}
	shards := snap.Shards[name]
	if len(shards) != 1 {
		return nil, Shard{}, fmt.Errorf("metadata: create reference table: %d shards after creating %s", len(shards), name)
	}
	return snap, shards[0], nil
}

// DropTable removes a table, its shards and their placements from the
// catalog. It fails with undefined_table (42P01) if the table is not in it.
func (s *Store) DropTable(ctx context.Context, name string) (*Snapshot, error) {
	return s.DropTables(ctx, name)
}

// DropTables removes tables, their shards and their placements from the
// catalog in one change, all or nothing: it fails with undefined_table
// (42P01) if one of them is not in it. Under WithDecision it is the commit
// decision of a transaction on the workers (DROP TABLE in a client's
// transaction block).
func (s *Store) DropTables(ctx context.Context, names ...string) (*Snapshot, error) {
	return s.change(ctx, "drop table", func(tx pgx.Tx) error {
		for _, name := range names {
			tag, err := tx.Exec(ctx, `DELETE FROM pgfleet.tables WHERE name = $1`, name)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				return pgerr.New(pgerr.UndefinedTable, "table %s is not distributed", name)
			}
		}
		return nil
	})
}

// MovePlacements moves the placements of shards from node from to node to,
// all or nothing: every shard must be in the catalog with a placement on
// from and none on to (55000 otherwise: another move or a table change got
// there first), to must be an active node, and lock (HoldMoveLock) must
// still be held. Under WithDecision it is the
// commit decision of the move's transaction on the workers.
func (s *Store) MovePlacements(ctx context.Context, lock *MoveLock, shards []int64, from, to int32) (*Snapshot, error) {
	return s.change(ctx, "move placements", func(tx pgx.Tx) error {
		if err := lock.holds(ctx, tx, shards, "move"); err != nil {
			return err
		}
		var active bool
		err := tx.QueryRow(ctx, `SELECT active FROM pgfleet.nodes WHERE nodeid = $1`, to).Scan(&active)
		if errors.Is(err, pgx.ErrNoRows) || err == nil && !active {
			return pgerr.New(pgerr.ObjectNotInPrerequisite, "node %d is not an active node of the catalog", to)
		}
		if err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE pgfleet.placements p SET nodeid = $3
			WHERE p.shardid = ANY($1) AND p.nodeid = $2
			AND NOT EXISTS (SELECT FROM pgfleet.placements q WHERE q.shardid = p.shardid AND q.nodeid = $3)`,
			shards, from, to)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != int64(len(shards)) {
			return pgerr.New(pgerr.ObjectNotInPrerequisite,
				"the placements of shards %v changed while they were moved from node %d to node %d", shards, from, to).
				WithHint("Nothing was moved; look at citus_shards and run the move again.")
		}
		return nil
	})
}

// NewShard is a shard a split makes: its id (NextShardIDs), table, hash
// range and node.
type NewShard struct {
	ID       int64
	Table    string
	Min, Max int32
	Node     int32
}

// NextShardIDs draws n shard ids from the catalog's sequence, in order.
func (s *Store) NextShardIDs(ctx context.Context, n int) ([]int64, error) {
	rows, err := s.pool.Query(ctx, `SELECT nextval('pgfleet.shardid_seq') FROM generate_series(1, $1)`, n)
	if err != nil {
		return nil, fmt.Errorf("metadata: shard ids: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("metadata: shard ids: %w", err)
	}
	slices.Sort(ids)
	return ids, nil
}

// SplitShards replaces the shard group old (every colocated shard of one
// hash range, which lock holds) with news, and adds the new shards'
// number less one to the shard count of the group's tables; only if the
// lock is still held and the group is still old.
func (s *Store) SplitShards(ctx context.Context, lock *MoveLock, old []int64, news []NewShard) (*Snapshot, error) {
	return s.change(ctx, "split shards", func(tx pgx.Tx) error {
		if err := lock.holds(ctx, tx, old, "split"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM pgfleet.shards WHERE shardid = ANY($1)`, old); err != nil {
			return err
		}
		var ids []int64
		var tables []string
		var lo, hi, nodes []int32
		for _, n := range news {
			ids, tables, lo, hi, nodes = append(ids, n.ID), append(tables, n.Table), append(lo, n.Min), append(hi, n.Max), append(nodes, n.Node)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO pgfleet.shards (shardid, table_name, min_hash, max_hash)
			SELECT * FROM unnest($1::bigint[], $2::text[], $3::int[], $4::int[])`, ids, tables, lo, hi); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO pgfleet.placements (shardid, nodeid) SELECT * FROM unnest($1::bigint[], $2::int[])`,
			ids, nodes); err != nil {
			return err
		}
		added := len(news)/len(old) - 1
		_, err := tx.Exec(ctx, `UPDATE pgfleet.tables SET shard_count = shard_count + $2 WHERE kind = 'h' AND colocation_id = $1`,
			lock.colocation, added)
		return err
	})
}

// MoveLock is a move's hold on its shard group (HoldMoveLock).
type MoveLock struct {
	colocation, minHash int32
	key                 int64
	pid                 uint32 // the metadata database's backend that holds it
	// Release gives the lock back.
	Release func()
}

// HoldMoveLock takes the lock that lets one move at a time work on the
// shard group of colocation id colocation and hash range starting at
// minHash, fleet-wide: a session-level advisory lock in the metadata
// database, on a connection the move keeps, so that the lock ends with
// the coordinator that holds it. It fails with 55006 when another move, or
// recovery cleaning up after a move, holds it.
func (s *Store) HoldMoveLock(ctx context.Context, colocation, minHash int32) (*MoveLock, error) {
	// A connection of its own, not the pool's: a move holds it for as long
	// as it runs, and the pool's few serve every commit decision.
	c, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, fmt.Errorf("metadata: move lock: %w", err)
	}
	l := &MoveLock{colocation: colocation, minHash: minHash, key: moveLockClass<<48 ^ int64(colocation)<<32 | int64(uint32(minHash))}
	var got bool
	if err := c.QueryRow(ctx, `SELECT pg_catalog.pg_try_advisory_lock($1), pg_catalog.pg_backend_pid()`, l.key).Scan(&got, &l.pid); err != nil {
		_ = c.Close(context.Background())
		return nil, fmt.Errorf("metadata: move lock: %w", err)
	}
	if !got {
		_ = c.Close(context.Background())
		return nil, pgerr.New(pgerr.ObjectInUse, "another move of this shard group is running, or recovery is cleaning up after one").
			WithHint("Wait for it to end; citus_shards shows where the shards are.")
	}
	l.Release = func() { unlockAndClose(c, l.key) }
	return l, nil
}

// MoveRecord is a shard move that made replication objects on the
// workers (pgfleet.shard_moves): name is its publication's, subscription's
// and marker tables' name, in database, for the group of shard, from
// source to target.
type MoveRecord struct {
	Name, Database string
	Shard          int64
	Source, Target int32
}

// RecordMove records a move before it makes its replication objects.
func (s *Store) RecordMove(ctx context.Context, m MoveRecord) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO pgfleet.shard_moves (name, database, shard, source, target) VALUES ($1, $2, $3, $4, $5)`,
		m.Name, m.Database, m.Shard, m.Source, m.Target)
	if err != nil {
		return fmt.Errorf("metadata: record move: %w", err)
	}
	return nil
}

// ForgetMove removes a move's record once its replication objects are gone.
func (s *Store) ForgetMove(ctx context.Context, name string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM pgfleet.shard_moves WHERE name = $1`, name); err != nil {
		return fmt.Errorf("metadata: forget move: %w", err)
	}
	return nil
}

// Moves lists the recorded moves, oldest first.
func (s *Store) Moves(ctx context.Context) ([]MoveRecord, error) {
	rows, err := s.pool.Query(ctx, `SELECT name, database, shard, source, target FROM pgfleet.shard_moves ORDER BY started`)
	if err != nil {
		return nil, fmt.Errorf("metadata: moves: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (MoveRecord, error) {
		var m MoveRecord
		err := r.Scan(&m.Name, &m.Database, &m.Shard, &m.Source, &m.Target)
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("metadata: moves: %w", err)
	}
	return out, nil
}

// holds fails unless the lock is still held by its connection (heldBy)
// and its shard group is still shards: a table that joined the colocation
// group meanwhile (create_distributed_table with colocate_with) has its
// shard of the range where the operation (what: move, split) did not
// look.
func (l *MoveLock) holds(ctx context.Context, tx pgx.Tx, shards []int64, what string) error {
	if err := l.heldBy(ctx, tx); err != nil {
		return err
	}
	var group []int64
	if err := tx.QueryRow(ctx, `SELECT coalesce(array_agg(s.shardid ORDER BY s.shardid), '{}') FROM pgfleet.shards s
		JOIN pgfleet.tables t ON t.name = s.table_name
		WHERE t.kind = 'h' AND t.colocation_id = $1 AND s.min_hash = $2`, l.colocation, l.minHash).Scan(&group); err != nil {
		return err
	}
	if !slices.Equal(group, slices.Sorted(slices.Values(shards))) {
		return pgerr.New(pgerr.ObjectNotInPrerequisite,
			"the shard group changed during the %s (shards %v now, %v when it began): a table joined or left its colocation group; nothing was changed", what, group, shards).
			WithHint("Run it again.")
	}
	return nil
}

// heldBy fails unless the move's lock is still held by its connection: a
// move whose connection ended may have been cleaned up after (its target's
// tables dropped), and must not switch the placements.
func (l *MoveLock) heldBy(ctx context.Context, tx pgx.Tx) error {
	var held bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_catalog.pg_locks WHERE locktype = 'advisory'
		AND pid = $1 AND classid = $2 AND objid = $3 AND objsubid = 1 AND granted)`,
		l.pid, uint32(l.key>>32), uint32(l.key)).Scan(&held); err != nil {
		return err
	}
	if !held {
		return pgerr.New(pgerr.ObjectNotInPrerequisite, "the move lost its lock on the shard group (its connection to the metadata database ended); nothing was moved").
			WithHint("Run the move again.")
	}
	return nil
}

// moveLockClass is the top 16 bits of the advisory lock keys of shard moves.
const moveLockClass int64 = 0x706d // "pm"

// rebalanceLockKey is the advisory lock the runner of the active
// background rebalance holds.
const rebalanceLockKey int64 = 0x7072<<48 | 1 // "pr"

// RebalanceJob is a background rebalance (pgfleet.rebalance_jobs).
type RebalanceJob struct {
	ID                   int64
	State                string // running, cancelling, finished, cancelled, failed
	Database, Role, Mode string
	DrainOnly            bool
	Started, Finished    time.Time
	Planned, Done        int
	Current, Error       string
}

// ErrRebalanceRunning: a background rebalance is running already.
var ErrRebalanceRunning = errors.New("metadata: a rebalance is running")

// StartRebalance records a running rebalance job with planned moves and
// takes its lock (released by the returned func); ErrRebalanceRunning when
// one is running or cancelling.
func (s *Store) StartRebalance(ctx context.Context, j RebalanceJob) (RebalanceJob, func(), error) {
	var release func()
	for wait := time.Now().Add(2 * time.Second); ; {
		r, got, err := s.holdRebalanceLock(ctx)
		if err != nil {
			return j, nil, err
		}
		if got {
			release = r
			break
		}
		// The runner of a job that has just ended (citus_rebalance_wait
		// and _stop returned) gives the lock back a moment later: no
		// active job, so wait for it a little (a start right after a
		// stop was refused as running: seen in TestRebalanceJob).
		active, err := s.RebalanceJobs(ctx, true)
		if err != nil || len(active) > 0 || time.Now().After(wait) {
			return j, nil, ErrRebalanceRunning
		}
		select {
		case <-ctx.Done():
			return j, nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	err := s.pool.QueryRow(ctx, `INSERT INTO pgfleet.rebalance_jobs (state, database, role, mode, drain_only, moves_planned)
		VALUES ('running', $1, $2, $3, $4, $5) RETURNING job_id, started_at`,
		j.Database, j.Role, j.Mode, j.DrainOnly, j.Planned).Scan(&j.ID, &j.Started)
	if err != nil {
		release()
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" {
			return j, nil, ErrRebalanceRunning // one whose runner died, not taken over yet
		}
		return j, nil, fmt.Errorf("metadata: start rebalance: %w", err)
	}
	j.State = "running"
	return j, release, nil
}

// TakeOverRebalance takes the lock of the active rebalance job when its
// runner is gone (its connection, and so its lock, ended): ok false when
// there is no active job or its runner still holds the lock.
func (s *Store) TakeOverRebalance(ctx context.Context) (j RebalanceJob, release func(), ok bool, err error) {
	jobs, err := s.RebalanceJobs(ctx, true)
	if err != nil || len(jobs) == 0 {
		return j, nil, false, err
	}
	release, got, err := s.holdRebalanceLock(ctx)
	if err != nil || !got {
		return j, nil, false, err
	}
	// Read again under the lock: the runner may have ended it meanwhile.
	jobs, err = s.RebalanceJobs(ctx, true)
	if err != nil || len(jobs) == 0 {
		release()
		return j, nil, false, err
	}
	return jobs[0], release, true, nil
}

// holdRebalanceLock tries the rebalance lock on a connection of its own,
// which holds it until release.
func (s *Store) holdRebalanceLock(ctx context.Context) (release func(), got bool, err error) {
	c, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, false, fmt.Errorf("metadata: rebalance lock: %w", err)
	}
	if err := c.QueryRow(ctx, `SELECT pg_catalog.pg_try_advisory_lock($1)`, rebalanceLockKey).Scan(&got); err != nil || !got {
		_ = c.Close(context.Background())
		if err != nil {
			return nil, false, fmt.Errorf("metadata: rebalance lock: %w", err)
		}
		return nil, false, nil
	}
	return func() { unlockAndClose(c, rebalanceLockKey) }, true, nil
}

// unlockAndClose gives back the session advisory lock key that c holds and
// closes c. Closing alone ends the lock only once the backend has exited,
// after Close returns: a move run again at once then got 55006 (seen in a
// full suite run; TestMoveLockFreeOnRelease).
func unlockAndClose(c *pgx.Conn, key int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = c.Exec(ctx, `SELECT pg_catalog.pg_advisory_unlock($1)`, key)
	_ = c.Close(context.Background())
}

// RebalanceJobs lists the rebalance jobs, newest first: the active one
// only (running or cancelling), or all.
func (s *Store) RebalanceJobs(ctx context.Context, active bool) ([]RebalanceJob, error) {
	rows, err := s.pool.Query(ctx, `SELECT job_id, state, database, role, mode, drain_only, started_at,
		coalesce(finished_at, 'epoch'), moves_planned, moves_done, current, error
		FROM pgfleet.rebalance_jobs WHERE NOT $1 OR state IN ('running', 'cancelling') ORDER BY job_id DESC`, active)
	if err != nil {
		return nil, fmt.Errorf("metadata: rebalance jobs: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (RebalanceJob, error) {
		var j RebalanceJob
		err := r.Scan(&j.ID, &j.State, &j.Database, &j.Role, &j.Mode, &j.DrainOnly, &j.Started, &j.Finished,
			&j.Planned, &j.Done, &j.Current, &j.Error)
		return j, err
	})
	if err != nil {
		return nil, fmt.Errorf("metadata: rebalance jobs: %w", err)
	}
	return out, nil
}

// UpdateRebalance records a running job's progress: moves done, and what
// it does now.
func (s *Store) UpdateRebalance(ctx context.Context, id int64, done int, current string) error {
	if _, err := s.pool.Exec(ctx, `UPDATE pgfleet.rebalance_jobs SET moves_done = $2, current = $3 WHERE job_id = $1`,
		id, done, current); err != nil {
		return fmt.Errorf("metadata: rebalance progress: %w", err)
	}
	return nil
}

// EndRebalance ends the job as finished, cancelled or failed (with why).
func (s *Store) EndRebalance(ctx context.Context, id int64, state, why string) error {
	if _, err := s.pool.Exec(ctx, `UPDATE pgfleet.rebalance_jobs SET state = $2, error = $3, current = '', finished_at = now()
		WHERE job_id = $1`, id, state, why); err != nil {
		return fmt.Errorf("metadata: end rebalance: %w", err)
	}
	return nil
}

// CancelRebalance asks the running job to stop: false when none runs.
func (s *Store) CancelRebalance(ctx context.Context) (bool, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE pgfleet.rebalance_jobs SET state = 'cancelling' WHERE state = 'running'`)
	if err != nil {
		return false, fmt.Errorf("metadata: cancel rebalance: %w", err)
	}
	return tag.RowsAffected() > 0, nil
}

// Touch bumps the catalog version and changes nothing else. DDL run on the
// workers tells the fleet by it that a statement prepared before may have
// another result now: every coordinator holding the catalog reloads it and
// describes its statements afresh.
func (s *Store) Touch(ctx context.Context) (*Snapshot, error) {
	return s.change(ctx, "touch", func(pgx.Tx) error { return nil })
}

// change runs fn in one transaction that first bumps catalog_version, which
// also serializes changes across coordinators, and returns the catalog as
// the transaction leaves it. When ctx carries a distributed transaction
// (WithDecision), its commit decision is recorded in the same transaction:
// the change and the decision commit together or not at all, and a
// transaction recovery aborted already fails the change with ErrAborted.
func (s *Store) change(ctx context.Context, what string, fn func(pgx.Tx) error) (*Snapshot, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("metadata: %s: %w", what, err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `UPDATE pgfleet.catalog_version SET version = version + 1`); err != nil {
		return nil, fmt.Errorf("metadata: %s: %w", what, err)
	}
	if err := fn(tx); err != nil {
		var pe *pgerr.Error
		if errors.As(err, &pe) {
			return nil, err
		}
		return nil, fmt.Errorf("metadata: %s: %w", what, err)
	}
	if base, ok := ctx.Value(decisionKey{}).(string); ok {
		d, err := decide(ctx, tx, base, CommitDecision)
		if err != nil {
			return nil, fmt.Errorf("metadata: %s: %w", what, err)
		}
		if d != CommitDecision {
			return nil, ErrAborted
		}
	}
	snap, err := load(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("metadata: %s: %w", what, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("metadata: %s: %w", what, err)
	}
	return snap, nil
}

// checkNew fails with duplicate_object (42710) if the table is in the catalog.
func checkNew(ctx context.Context, tx pgx.Tx, name string) error {
	var kind string
	err := tx.QueryRow(ctx, `SELECT kind::text FROM pgfleet.tables WHERE name = $1`, name).Scan(&kind)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	if kind == string(rune(Reference)) {
		return pgerr.New(pgerr.DuplicateObject, "table %s is already a reference table", name)
	}
	return pgerr.New(pgerr.DuplicateObject, "table %s is already distributed", name)
}

// shardNodes returns the ids of the active nodes that take the shards of
// new distributed tables, in order.
func shardNodes(ctx context.Context, tx pgx.Tx) ([]int32, error) {
	rows, err := tx.Query(ctx, `SELECT nodeid FROM pgfleet.nodes WHERE active AND should_have_shards ORDER BY nodeid`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int32])
}

// SetShouldHaveShards sets whether new distributed tables and the
// rebalancer put shards on the node (citus_set_node_property's
// shouldhaveshards); 42704 for a node not in the catalog.
func (s *Store) SetShouldHaveShards(ctx context.Context, id int32, on bool) (*Snapshot, error) {
	return s.change(ctx, "set node property", func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE pgfleet.nodes SET should_have_shards = $2 WHERE nodeid = $1`, id, on)
		if err == nil && tag.RowsAffected() == 0 {
			return pgerr.New(pgerr.UndefinedObject, "node %d is not in the catalog", id)
		}
		return err
	})
}

// activeNodes returns the ids of the active nodes in order.
func activeNodes(ctx context.Context, tx pgx.Tx) ([]int32, error) {
	rows, err := tx.Query(ctx, `SELECT nodeid FROM pgfleet.nodes WHERE active ORDER BY nodeid`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int32])
}

// insertShards adds a table's shards, one per range, with ids from the
// sequence in range order, and shard i's placements on nodes[i].
func insertShards(ctx context.Context, tx pgx.Tx, table string, ranges [][2]int32, nodes [][]int32) error {
	rows, err := tx.Query(ctx, `SELECT nextval('pgfleet.shardid_seq') FROM generate_series(1, $1)`, len(ranges))
	if err != nil {
		return err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return err
	}
	if len(ids) != len(ranges) {
		return fmt.Errorf("got %d shard ids for %d shards", len(ids), len(ranges))
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	lo := make([]int32, len(ranges))
	hi := make([]int32, len(ranges))
	var pShard []int64
	var pNode []int32
	for i, r := range ranges {
		lo[i], hi[i] = r[0], r[1]
		for _, n := range nodes[i] {
			pShard = append(pShard, ids[i])
			pNode = append(pNode, n)
		}
	}
	if _, err := tx.Exec(ctx, `INSERT INTO pgfleet.shards (shardid, table_name, min_hash, max_hash)
		SELECT id, $2, lo, hi FROM unnest($1::bigint[], $3::int[], $4::int[]) AS u(id, lo, hi)`,
		ids, table, lo, hi); err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO pgfleet.placements (shardid, nodeid)
		SELECT * FROM unnest($1::bigint[], $2::int[])`, pShard, pNode)
	return err
}

// querier is what load needs of a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// load reads the catalog through q, which should see one state of it: a
// REPEATABLE READ transaction, or a change's own transaction, which holds
// the catalog_version row lock every other change waits for.
func load(ctx context.Context, q querier) (*Snapshot, error) {
	snap := &Snapshot{Tables: map[string]*Table{}, Shards: map[string][]Shard{}}
	if err := q.QueryRow(ctx, `SELECT version FROM pgfleet.catalog_version`).Scan(&snap.Version); err != nil {
		return nil, err
	}

	rows, err := q.Query(ctx, `SELECT nodeid, host, port, active, should_have_shards FROM pgfleet.nodes ORDER BY nodeid`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var n Node
		if err := rows.Scan(&n.ID, &n.Host, &n.Port, &n.Active, &n.ShouldHaveShards); err != nil {
			rows.Close()
			return nil, err
		}
		snap.Nodes = append(snap.Nodes, n)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}

	rows, err = q.Query(ctx, `SELECT name, kind::text, coalesce(dist_column, ''), coalesce(dist_type, ''),
		coalesce(colocation_id, 0), shard_count, sequences, coalesce(shard_schema, '') FROM pgfleet.tables ORDER BY name`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		t := &Table{}
		var kind string
		var seqs []string
		if err := rows.Scan(&t.Name, &kind, &t.DistColumn, &t.DistType, &t.ColocationID, &t.ShardCount, &seqs, &t.ShardSchema); err != nil {
			rows.Close()
			return nil, err
		}
		for _, sq := range seqs {
			oid, col, ok := strings.Cut(sq[min(1, len(sq)):], ":")
			n, err := strconv.ParseUint(oid, 10, 32)
			if !ok || err != nil {
				rows.Close()
				return nil, fmt.Errorf("metadata: unreadable sequence column %q of %s", sq, t.Name)
			}
			c := SeqColumn{Column: col, Sequence: uint32(n)}
			if sq[0] != 's' {
				c.Identity = sq[0]
			}
			t.Sequences = append(t.Sequences, c)
		}
		if len(kind) == 1 {
			t.Kind = TableKind(kind[0])
		}
		snap.Tables[t.Name] = t
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}

	rows, err = q.Query(ctx, `SELECT s.shardid, s.table_name, s.min_hash, s.max_hash,
			coalesce(array_agg(p.nodeid ORDER BY p.nodeid) FILTER (WHERE p.nodeid IS NOT NULL), '{}')
		FROM pgfleet.shards s LEFT JOIN pgfleet.placements p USING (shardid)
		GROUP BY s.shardid ORDER BY s.table_name, s.min_hash, s.shardid`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var sh Shard
		if err := rows.Scan(&sh.ID, &sh.Table, &sh.MinHash, &sh.MaxHash, &sh.Nodes); err != nil {
			rows.Close()
			return nil, err
		}
		snap.Shards[sh.Table] = append(snap.Shards[sh.Table], sh)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return snap, nil
}

// seqText is the catalog's form of sequence columns (see schemaDDL).
func seqText(seqs []SeqColumn) []string {
	out := []string{}
	for _, c := range seqs {
		k := c.Identity
		if k == 0 {
			k = 's'
		}
		out = append(out, string(k)+strconv.FormatUint(uint64(c.Sequence), 10)+":"+c.Column)
	}
	return out
}

// RetryLost runs f, a statement or several on a connection of p, and runs
// it once more when it failed because that connection was lost
// (connectionLost): its backend terminated (pg_terminate_backend, a
// restart) while it sat idle in p, which hands out a connection idle under
// a second unchecked. The pool's idle connections, likely lost with it,
// are closed first. f must be safe to run twice: a read, or an idempotent
// write.
func RetryLost(ctx context.Context, p *pgxpool.Pool, f func() error) error {
	err := f()
	if err != nil && connectionLost(err) && ctx.Err() == nil {
		p.Reset()
		err = f()
	}
	return err
}

// connectionLost reports whether err is the loss of the metadata
// connection rather than a statement's answer: a FATAL from the server
// (its backend terminated, the database shutting down), the socket closed
// or reset under it, or a connection pgx had closed already. No rows, a
// scan's failure or the caller's deadline are answers, not losses.
func connectionLost(err error) bool {
	var pe *pgconn.PgError
	var ne net.Error
	switch {
	case errors.As(err, &pe):
		sev := pe.SeverityUnlocalized
		if sev == "" {
			sev = pe.Severity
		}
		return sev == "FATAL" || sev == "PANIC"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), pgconn.Timeout(err):
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, pgconn.ErrConnClosed) ||
		errors.As(err, &ne) || pgconn.SafeToRetry(err)
}
