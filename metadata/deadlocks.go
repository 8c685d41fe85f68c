package metadata

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// FleetTxn is a coordinator's transaction over several workers as the
// fleet's distributed deadlock detectors share it: since is when it took
// in its second worker, and its backends are (Addrs[i], PIDs[i]).
type FleetTxn struct {
	Coordinator string
	Txn         int64
	Since       time.Time
	Addrs       []string
	PIDs        []int32
}

// ShareTxns replaces coordinator's shared transactions with txns (none:
// it has none left).
func (s *Store) ShareTxns(ctx context.Context, coordinator string, txns []FleetTxn) error {
	b := &pgx.Batch{}
	b.Queue(`DELETE FROM pgfleet.fleet_txns WHERE coordinator = $1`, coordinator)
	for _, t := range txns {
		b.Queue(`INSERT INTO pgfleet.fleet_txns (coordinator, txn, since, addrs, pids) VALUES ($1, $2, $3, $4, $5)`,
			coordinator, t.Txn, t.Since, t.Addrs, t.PIDs)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("metadata: share transactions: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("metadata: share transactions: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("metadata: share transactions: %w", err)
	}
	return nil
}

// FleetTxns are the other coordinators' shared transactions seen within
// fresh (a coordinator gone without withdrawing its own leaves them
// behind until they age out).
func (s *Store) FleetTxns(ctx context.Context, except string, fresh time.Duration) ([]FleetTxn, error) {
	rows, err := s.pool.Query(ctx, `SELECT coordinator, txn, since, addrs, pids FROM pgfleet.fleet_txns
		WHERE coordinator <> $1 AND seen > now() - $2::interval`, except, fmt.Sprintf("%d microseconds", fresh.Microseconds()))
	if err != nil {
		return nil, fmt.Errorf("metadata: fleet transactions: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (FleetTxn, error) {
		var t FleetTxn
		err := r.Scan(&t.Coordinator, &t.Txn, &t.Since, &t.Addrs, &t.PIDs)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("metadata: fleet transactions: %w", err)
	}
	return out, nil
}
