// Package metadata owns the shard catalog: nodes, tables, shards,
// placements and colocation, its durable store in PostgreSQL, and the
// immutable snapshot routing reads without locks. It knows nothing of
// sessions or connections to clients.
//
// Store keeps the catalog in schema pgfleet of a metadata database (by
// default the first worker's): tables nodes, tables, shards, placements and
// a one-row catalog_version, and sequences for shard ids (from 102008, as
// Citus) and colocation ids. Init creates them idempotently under an
// advisory lock. Every change is one transaction that first bumps
// catalog_version, which serializes changes across coordinators, and
// returns the new Snapshot; Load reads one consistent Snapshot, and Version
// lets a coordinator notice changes made by another.
//
// Table transaction_decisions holds the commit or abort decision of each
// distributed transaction (keyed by the common start of its prepared
// transactions' global ids): Decide, Abort and WithDecision record one,
// and the primary key lets exactly one decision stand, so a coordinator and
// the recovery of prepared transactions it left cannot both win.
package metadata
