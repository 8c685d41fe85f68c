// Package difftest is a randomized differential tester for pgfleet, in the
// spirit of SQLancer and sqlsmith: it builds a random schema and random data
// on a fleet (two workers, one or two coordinators) and on a plain
// PostgreSQL oracle, then runs random sessions with random settings and
// random statements over the supported SQL surface against both, in the
// simple and the extended protocol, and compares every answer (rows,
// command tags, SQLSTATEs, RowDescriptions, transaction status). After
// writes it checks invariants on the workers themselves: every row in the
// shard PostgreSQL's own hash gives, reference copies identical, contents
// equal to the oracle's, no pgfleet_ prepared transaction left.
//
// A 0A000 from the coordinator is counted (per family and reason), not
// failed: refusing is allowed, a wrong answer is not. Every run prints its
// seed; a failure prints the seed, the statement number and both answers.
//
// The package talks to the servers over the wire only (pgconn); it imports
// internal/pgtest and internal/pgcluster to start them and nothing that
// would let it peek at the coordinator's state.
package difftest
