package metadata

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// leaseLockKey serializes lease renewals ("pgfleeu", next to initLockKey):
// a renewal reads the others' shares and writes its own under it.
const leaseLockKey int64 = 0x7067666c656575

// ShareWant is what a coordinator tells RenewLease about one worker.
type ShareWant struct {
	Worker string // host:port
	Budget int    // the worker's connection budget, fleet-wide
	// Hold is called in the renewal with the share granted: it lowers the
	// caller's cap to it if the cap is above (a higher one is the caller's
	// to raise after RenewLease returns) and reports how many connections
	// the caller may hold there until its next renewal (at least those it
	// holds now; never more than it recorded last, unless the grant is)
	// and the backends of those it holds.
	Hold func(share int) (hold int, pids []int32)
}

// Lease is what RenewLease answers.
type Lease struct {
	Live    int            // coordinators holding a live lease, the caller included
	Shares  map[string]int // by worker: the cap the caller may use now
	Expired []ExpiredShare // shares of lapsed leases, whose backends are to be ended
}

// ExpiredShare is a lapsed coordinator's share of one worker: the backends
// it recorded there, as of Recorded (a backend started later is another's).
type ExpiredShare struct {
	Coordinator, Worker string
	PIDs                []int32
	Recorded            time.Time
}

// RenewLease renews the caller's lease for ttl (in the metadata database's
// clock) and divides each worker's budget: the caller may use the fair
// share (budget over the live coordinators) as far as the other
// coordinators' recorded shares leave room, the shares of lapsed leases
// included until ForgetLease. The share it records is never below what it
// holds once Hold has lowered its cap, so the sum of recorded shares
// bounds the connections every coordinator may hold at once; one that
// holds more than its new share (busy connections close when released)
// records the lower share at a later renewal.
// ErrLeaseLost: RenewLease was told the caller holds a live lease, and it
// does not (it lapsed, or gossip revoked it, and maybe the others forgot
// it and took its shares). Nothing was written: the caller must close
// every connection it holds before it renews again, since its backends no
// longer count in any recorded share.
var ErrLeaseLost = errors.New("metadata: this coordinator's lease lapsed or was revoked")

func (s *Store) RenewLease(ctx context.Context, name, address, incarnation string, held bool, ttl time.Duration, wants []ShareWant) (Lease, error) {
	var out Lease
	var live bool
	// Two batches, one round trip each: a renewal is on a clock (the
	// lease lapses three quarters in), and a busy metadata database or
	// coordinator makes every round trip slower.
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(`SELECT pg_advisory_xact_lock($1)`, leaseLockKey)
		b.Queue(`SELECT EXISTS (SELECT FROM pgfleet.coordinators WHERE name = $1 AND incarnation = $2 AND expires > now())`,
			name, incarnation).QueryRow(func(r pgx.Row) error { return r.Scan(&live) })
		b.Queue(`INSERT INTO pgfleet.coordinators (name, address, expires, incarnation)
			VALUES ($1, $2, now() + $3::bigint * interval '1 microsecond', $4)
			ON CONFLICT (name) DO UPDATE SET address = excluded.address, expires = excluded.expires,
				incarnation = excluded.incarnation`,
			name, address, ttl.Microseconds(), incarnation)
		b.Queue(`DELETE FROM pgfleet.coordinators c WHERE expires <= now()
			AND NOT EXISTS (SELECT FROM pgfleet.connection_shares s WHERE s.coordinator = c.name)`)
		b.Queue(`SELECT count(*) FROM pgfleet.coordinators WHERE expires > now()`).QueryRow(func(r pgx.Row) error {
			return r.Scan(&out.Live)
		})
		b.Queue(`SELECT s.coordinator, s.worker, s.pids, s.recorded_at
			FROM pgfleet.coordinators c JOIN pgfleet.connection_shares s ON s.coordinator = c.name
			WHERE c.expires <= now() ORDER BY 1, 2`).Query(func(rows pgx.Rows) error {
			var err error
			out.Expired, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (ExpiredShare, error) {
				var e ExpiredShare
				return e, r.Scan(&e.Coordinator, &e.Worker, &e.PIDs, &e.Recorded)
			})
			return err
		})
		// The caller's rows, locked before Hold reads its backends: a
		// RecordBackend (which takes no lease lock) is either among them
		// or waits and appends to what this renewal writes.
		b.Queue(`SELECT FROM pgfleet.connection_shares WHERE coordinator = $1 FOR UPDATE`, name)
		others := make([]int, len(wants))
		for i, w := range wants {
			b.Queue(`SELECT coalesce(sum(share), 0) FROM pgfleet.connection_shares
				WHERE worker = $1 AND coordinator <> $2`, w.Worker, name).QueryRow(func(r pgx.Row) error {
				return r.Scan(&others[i])
			})
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		if held && !live {
			return ErrLeaseLost // rolled back
		}
		out.Shares = make(map[string]int, len(wants))
		workers := make([]string, 0, len(wants))
		b = &pgx.Batch{}
		for i, w := range wants {
			grant := max(0, min(w.Budget/max(out.Live, 1), w.Budget-others[i]))
			open, pids := w.Hold(grant)
			record := max(grant, open)
			b.Queue(`INSERT INTO pgfleet.connection_shares (coordinator, worker, share, budget, pids, recorded_at)
				VALUES ($1, $2, $3, $4, coalesce($5::int[], '{}'), now())
				ON CONFLICT (coordinator, worker) DO UPDATE SET share = excluded.share, budget = excluded.budget,
					pids = excluded.pids, recorded_at = excluded.recorded_at`,
				name, w.Worker, record, w.Budget, pids)
			out.Shares[w.Worker] = grant
			workers = append(workers, w.Worker)
		}
		b.Queue(`DELETE FROM pgfleet.connection_shares WHERE coordinator = $1 AND worker <> ALL($2)`, name, workers)
		return tx.SendBatch(ctx, b).Close()
	})
	if errors.Is(err, ErrLeaseLost) {
		return Lease{}, err
	}
	if err != nil {
		return Lease{}, fmt.Errorf("metadata: renew lease: %w", err)
	}
	return out, nil
}

// RevokeLease ends the lease of a coordinator's process (incarnation) now:
// gossip declared it dead. It can record no backend from then on, the
// next renewal of any other coordinator ends the backends it recorded and
// forgets its lease, and its shares are free after that. A process that
// is alive after all (cut off from gossip only) renews its lease at its
// next renewal, and its backends ended meanwhile were never more than its
// recorded share: the bound holds either way.
//
// Only a lease not renewed lately is revoked: one that expires before
// now + within (a lease renewed since then is still being renewed, and its
// coordinator is alive though gossip may not think so: a suspicion under
// load is not revoked).
func (s *Store) RevokeLease(ctx context.Context, incarnation string, within time.Duration) (bool, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE pgfleet.coordinators SET expires = now()
		WHERE incarnation = $1 AND expires > now() AND expires < now() + $2::bigint * interval '1 microsecond'`,
		incarnation, within.Microseconds())
	if err != nil {
		return false, fmt.Errorf("metadata: revoke lease: %w", err)
	}
	return tag.RowsAffected() > 0, nil
}

// ForgetLease removes a lapsed coordinator's lease and shares, once its
// backends are ended: the others may take its shares then. A coordinator
// that renewed meanwhile keeps its lease.
func (s *Store) ForgetLease(ctx context.Context, name string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM pgfleet.coordinators WHERE name = $1 AND expires <= now()`, name)
	if err != nil {
		return fmt.Errorf("metadata: forget lease: %w", err)
	}
	return nil
}

// DropLease removes the caller's own lease and shares: it holds no
// connection any more (a coordinator shutting down).
func (s *Store) DropLease(ctx context.Context, name string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM pgfleet.coordinators WHERE name = $1`, name)
	if err != nil {
		return fmt.Errorf("metadata: drop lease: %w", err)
	}
	return nil
}

// RecordBackend adds a backend to the caller's recorded share of a worker
// before the caller uses the connection: ended by the others if the lease
// lapses. It fails, and the connection is not to be used, if the lease has
// lapsed or has no share of the worker.
func (s *Store) RecordBackend(ctx context.Context, name, worker string, pid int32) error {
	// One statement, no lease lock: it locks the share's row, which a
	// renewal locks before it reads the caller's backends (a backend
	// recorded before that is among them; one after, appended to them).
	// Recording a backend twice records it once, so a statement whose
	// connection was lost may run again.
	const record = `UPDATE pgfleet.connection_shares s
		SET pids = CASE WHEN $3 = ANY (s.pids) THEN s.pids ELSE array_append(s.pids, $3) END, recorded_at = now()
		FROM pgfleet.coordinators c
		WHERE c.name = s.coordinator AND s.coordinator = $1 AND s.worker = $2 AND c.expires > now()`
	// A connection lost (adversary 158: after pg_terminate_backend of the
	// first worker's idle backends, the next multi-shard query got 53300)
	// is retried on a new one.
	var tag pgconn.CommandTag
	err := RetryLost(ctx, s.pool, func() (err error) {
		tag, err = s.pool.Exec(ctx, record, name, worker, pid)
		return err
	})
	if err == nil && tag.RowsAffected() != 1 {
		err = fmt.Errorf("no live lease on a share of worker %s", worker)
	}
	if err != nil {
		return fmt.Errorf("metadata: record backend: %w", err)
	}
	return nil
}

// RecordedBackends is the process IDs of every coordinator's recorded
// backends, on any worker: the pooled connections of the whole fleet (as
// of each one's last renewal, and those recorded since).
func (s *Store) RecordedBackends(ctx context.Context) ([]int32, error) {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT p FROM pgfleet.connection_shares, unnest(pids) AS p`)
	if err != nil {
		return nil, fmt.Errorf("metadata: recorded backends: %w", err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("metadata: recorded backends: %w", err)
	}
	return pids, nil
}
