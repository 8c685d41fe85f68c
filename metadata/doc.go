// Package metadata owns the shard catalog: nodes, tables, shards,
// placements and colocation, its durable store in PostgreSQL, and the
// immutable snapshot routing reads without locks. It knows nothing of
// sessions or connections to clients.
//
// Until the shard catalog lands (issue #3) this package has no code.
package metadata
