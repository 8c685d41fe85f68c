// Package coordinator is pgfleet's client-facing server: it accepts
// PostgreSQL protocol 3.0 connections, runs startup and authentication, keeps
// each client's session (prepared statements, settings, transaction state)
// and relays its statements to workers over pooled server connections,
// forwarding rows as raw frames.
//
// It owns client-side state only; server connections and their reset belong
// to package pooling. Catalog and planning come from packages metadata and
// planner.
package coordinator
