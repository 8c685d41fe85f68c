// Package shards creates, fills and drops shard tables on the workers for
// the Citus-compatible functions create_distributed_table,
// create_reference_table and undistribute_table. It does not route queries:
// that is the planner's job, on the catalog this package's callers change
// through metadata.Store.
//
// The caller (the coordinator) opens one connection per worker node and
// passes them as a map from node id to *pgx.Conn; the default node, where
// undistributed tables live, is the first node. A shard of table
// schema.relname is table schema.relname_<shardid> on each node that has a
// placement of it (metadata.ShardName), with the table's columns, defaults,
// constraints and indexes; constraint and index names get the same
// _<shardid> suffix, as in Citus, so that shards on one node do not collide.
//
// Every operation is all-or-nothing. The work on each node runs in one
// explicit transaction that is made durable with PREPARE TRANSACTION
// 'pgfleet_...' only when every shard succeeded, and committed with COMMIT
// PREPARED once the decision to commit is durable in the metadata database
// (metadata.Store.Decide, or the catalog change itself under
// metadata.WithDecision), from which the coordinators' recovery finishes
// what a crashed coordinator left prepared; on any failure before that, every
// transaction is rolled back, shard tables created so far disappear with
// them, catalog entries already recorded are removed again, and the rows
// stay where they were. Workers need max_prepared_transactions > 0.
//
// Rows move in PostgreSQL's text COPY format, streamed from one connection
// to another through a pipe; rows that stay on the default node move with
// INSERT ... SELECT there. Which shard a row belongs to is decided by
// PostgreSQL's own hash function of the distribution column's type
// (hashint8, hashint4, hashint2, hashtext, hashbpchar, uuid_hash) on the
// workers, the same values metadata.HashValue computes for routing.
package shards
