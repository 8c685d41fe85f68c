// Package pooling owns pgfleet's server connections to workers: bounded pools
// per (worker, database, user), checkout with a deadline that ends in a typed
// error and classes that keep clients holding several pools' connections
// from waiting for each other forever, connections lent to pgx for the
// coordinator's own statements, the reset that makes a connection safe to
// hand to the next client, and each connection's cache of prepared
// statements.
//
// It knows addresses and connections, not tables, sessions or SQL plans: the
// coordinator decides what to send; this package keeps the connection honest.
package pooling
