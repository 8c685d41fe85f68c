// Package compat holds tests that run real application tooling (migration
// tools, drivers' own patterns) against a coordinator, over the wire only,
// and check what a user would: the tool's own report, the rows, and that
// every worker's shards agree with the tables.
package compat
