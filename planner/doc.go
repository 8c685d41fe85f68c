// Package planner turns SQL into distributed plans: which shards a
// statement touches and how their results combine. It is pure: no I/O, no
// sessions, no connections; it sees the catalog only through a snapshot.
//
// Until the shard catalog lands (issue #3) the coordinator sends every
// statement to the default node and this package has no code.
package planner
