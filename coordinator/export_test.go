package coordinator

import (
	"context"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// RecoverPrepared runs one recovery round with the given grace and returns
// how many prepared transactions it committed and rolled back.
func (s *Server) RecoverPrepared(ctx context.Context, grace time.Duration) (committed, aborted int) {
	st := s.recoverPrepared(ctx, grace)
	return st.committed, st.aborted
}

// SetDecideHooks sets the hooks around a transaction block's commit
// decision (see testHooks); call before clients connect.
func (s *Server) SetDecideHooks(after func(ctx context.Context, base string, err error) error, beforeCommit func(base string)) {
	s.hooks.afterDecide, s.hooks.beforeCommitPrepared = after, beforeCommit
}

// SetBeforeDecideHook sets the hook between a transaction block's
// PREPAREs and its commit decision; call before clients connect.
func (s *Server) SetBeforeDecideHook(before func(base string)) { s.hooks.beforeDecide = before }

// MetadataSetting is a setting of the metadata pool's sessions.
func (s *Server) MetadataSetting(name string) (string, error) {
	var v string
	err := s.metaPool.QueryRow(context.Background(), "SELECT pg_catalog.current_setting($1)", name).Scan(&v)
	return v, err
}

// SetDecideTimeout sets the bound of recording a commit decision and
// returns a function restoring it.
func SetDecideTimeout(d time.Duration) (restore func()) {
	old := decideTimeout
	decideTimeout = d
	return func() { decideTimeout = old }
}

// Share is the coordinator's share of a worker's connection budget now.
func (s *Server) Share(worker string) int { return s.gate(worker).Cap() }

// PauseLease stops the lease's renewals, as when the metadata database is
// out of reach; frozen also stops its lapse (a coordinator that neither
// renews nor closes anything: a stopped process).
func (s *Server) PauseLease(frozen bool) {
	s.leasePaused.Store(true)
	if frozen {
		s.leaseTimer.Stop()
		time.Sleep(s.cfg.LeaseTTL/4 + 50*time.Millisecond) // a renewal under way re-arms it
		s.leaseTimer.Stop()
	}
}

// FreezeInRenewal takes the lease lock on a connection of the lease pool
// and leaves its transaction open, as a coordinator frozen in the middle
// of a renewal would; end gives the connection back.
func (s *Server) FreezeInRenewal(ctx context.Context) (end func(), err error) {
	tx, err := s.leasePool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	end = func() { _ = tx.Rollback(context.Background()) }
	_, err = tx.Exec(ctx, "SELECT pg_advisory_xact_lock(31638886994503029)")
	return end, err // tx left open, idle in transaction
}

// ReloadCatalog reads the catalog now (a change made in the metadata
// database by hand, which no coordinator announced).
func (s *Server) ReloadCatalog(ctx context.Context) error { return s.reloadCatalog(ctx) }

// HoldWaits is how many statements waited for a cut-over's hold here
// (pgfleet_cutover_hold_waits_total).
func (s *Server) HoldWaits() int64 {
	var m dto.Metric
	if err := s.metrics.holdWaits.Write(&m); err != nil {
		return -1
	}
	return int64(m.GetCounter().GetValue())
}
