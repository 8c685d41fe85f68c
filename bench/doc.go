// Package bench owns pgfleet's benchmark tools: programs that start real
// PostgreSQL, relays and load generators on loopback, measure them and write
// reports. They are tools a person runs (pgfleet bench ...), not tests.
//
// It owns:
//   - the relay benchmark (RunRelay): pgbench -S against one PostgreSQL
//     worker directly, through a pgfleet coordinator started as a separate
//     process, and through PgBouncer, with throughput, latency percentiles
//     and CPU per query for the relay, the worker and pgbench;
//   - the router benchmark (RunRouter): routed point queries (the pgbench
//     scripts in workloads/) on pgbench tables distributed through a
//     coordinator, against the same queries sent directly to the worker and
//     through PgBouncer, checked against the targets;
//   - the processes it starts for that (coordinator, PgBouncer, pgbench),
//     which it stops by PID, also on interrupt; PostgreSQL itself is started
//     and stopped through internal/pgcluster;
//   - the pure helpers those measurements rest on: parsing pgbench's summary
//     and per-transaction logs, percentiles, and /proc/<pid>/stat;
//   - the Markdown and JSON reports (by default under bench/results).
//
// It does not own the coordinator, pooling or PostgreSQL start-up code; it
// runs them as they are and reports what it sees. The pgbench scripts in
// workloads/ (also for people running pgbench by hand) are built into the
// binary.
package bench
