package metadata

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgerr"
)

// The decisions a distributed transaction can have, as stored in
// pgfleet.transaction_decisions.decision.
const (
	CommitDecision byte = 'c'
	AbortDecision  byte = 'a'
)

// ErrAborted is the answer to a commit decision for a distributed
// transaction that recovery has already decided to abort: the caller must
// roll back every node. SQLSTATE 40001 (serialization_failure): the client
// may retry the statement.
var ErrAborted = pgerr.New("40001", "the distributed transaction was aborted by recovery").
	WithHint("It took too long between PREPARE TRANSACTION and the commit decision; retry the statement.")

// decisionKey is the context key of WithDecision.
type decisionKey struct{}

// WithDecision returns a context under which a catalog change (DropTable,
// say) also records the commit decision of the distributed transaction
// whose global ids start with base, in the same metadata transaction: the
// catalog change is the decision. If recovery decided to abort base
// already, the change fails with ErrAborted and changes nothing.
func WithDecision(ctx context.Context, base string) context.Context {
	return context.WithValue(ctx, decisionKey{}, base)
}

// decisionSQL records a decision unless one is stored, and returns the one
// stored. ON CONFLICT DO UPDATE (a no-op update) rather than DO NOTHING:
// under READ COMMITTED it waits for a concurrent insert of the same base
// and returns the row that won, which DO NOTHING with a later SELECT in the
// same statement would not see.
//
// decided_at is the time of the insert (clock_timestamp), not of its
// transaction's start: a catalog change's transaction may have begun before
// the prepared transactions it decides existed, and ForgetDecisions relies
// on a decision being younger than every PREPARE it covers.
const decisionSQL = `INSERT INTO pgfleet.transaction_decisions AS d (gid_base, decision, decided_at)
	VALUES ($1, $2, pg_catalog.clock_timestamp())
	ON CONFLICT (gid_base) DO UPDATE SET decision = d.decision RETURNING decision::text`

// decide records want for base unless a decision is stored, through q (the
// pool, or a catalog change's transaction), and returns the one stored.
func decide(ctx context.Context, q querier, base string, want byte) (byte, error) {
	if base == "" {
		return 0, pgerr.New(pgerr.InvalidParameterValue, "a distributed transaction's id is required")
	}
	var d string
	if err := q.QueryRow(ctx, decisionSQL, base, string(rune(want))).Scan(&d); err != nil {
		return 0, err
	}
	if len(d) != 1 {
		return 0, fmt.Errorf("decision %q stored for %s", d, base)
	}
	return d[0], nil
}

// Decide records the decision to commit the distributed transaction whose
// prepared transactions' global ids start with base. It is the commit
// point: the caller commits the prepared transactions only after Decide
// returned nil. Deciding again is harmless. If recovery decided to abort
// base first, Decide returns ErrAborted and the caller rolls back. Any
// other error leaves the decision unknown (the insert may have committed
// with its answer lost): Abort settles it.
func (s *Store) Decide(ctx context.Context, base string) error {
	d, err := decide(ctx, s.pool, base, CommitDecision)
	if err != nil {
		return fmt.Errorf("metadata: decide: %w", err)
	}
	if d != CommitDecision {
		return ErrAborted
	}
	return nil
}

// Abort records the decision to abort base unless a decision is stored
// already, and returns the decision that stands: AbortDecision, or
// CommitDecision if a coordinator decided to commit first. Recovery calls
// it before rolling a prepared transaction back; a coordinator calls it to
// settle a Decide whose answer was lost.
func (s *Store) Abort(ctx context.Context, base string) (byte, error) {
	d, err := decide(ctx, s.pool, base, AbortDecision)
	if err != nil {
		return 0, fmt.Errorf("metadata: abort: %w", err)
	}
	return d, nil
}

// Decision returns the decision stored for base, or 0 if there is none.
func (s *Store) Decision(ctx context.Context, base string) (byte, error) {
	var d string
	err := s.pool.QueryRow(ctx, `SELECT decision::text FROM pgfleet.transaction_decisions WHERE gid_base = $1`,
		base).Scan(&d)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("metadata: decision: %w", err)
	}
	if len(d) != 1 {
		return 0, fmt.Errorf("metadata: decision: %q stored for %s", d, base)
	}
	return d[0], nil
}

// Decisions returns the decisions stored for the bases given; a base with
// none is absent from the map. One query, for a recovery round.
func (s *Store) Decisions(ctx context.Context, bases []string) (map[string]byte, error) {
	out := make(map[string]byte, len(bases))
	if len(bases) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT gid_base, decision::text FROM pgfleet.transaction_decisions
		WHERE gid_base = ANY ($1::text[])`, bases)
	if err != nil {
		return nil, fmt.Errorf("metadata: decisions: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var b, d string
		if err := rows.Scan(&b, &d); err != nil {
			return nil, fmt.Errorf("metadata: decisions: %w", err)
		}
		if len(d) != 1 {
			return nil, fmt.Errorf("metadata: decisions: %q stored for %s", d, b)
		}
		out[b] = d[0]
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("metadata: decisions: %w", err)
	}
	return out, nil
}

// ForgetDecisions deletes the commit decisions older than commitAge and
// the abort decisions older than abortAge, except those of the bases in
// keep: the caller passes every base that still has a prepared transaction
// on some node, so that a decision goes only when nothing can need it any
// more. It returns how many it deleted.
//
// The ages are lower bounds that make forgetting safe against what the
// caller cannot see. commitAge must exceed the time one recovery round takes
// to list every node (a decision younger than the round's start may cover
// a prepared transaction on a node listed before it was prepared) and the
// time a coordinator may take to learn a decision whose answer it lost
// (twophase.SettleDecision trusts an abort answer only within it). abortAge
// must exceed the longest a coordinator may take from PREPARE to its
// commit decision, so that an abort decision outlives every attempt to
// decide the other way.
func (s *Store) ForgetDecisions(ctx context.Context, commitAge, abortAge time.Duration, keep []string) (int64, error) {
	if keep == nil {
		keep = []string{}
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM pgfleet.transaction_decisions
		WHERE decided_at < pg_catalog.clock_timestamp() - make_interval(secs => CASE decision WHEN 'c' THEN $1::float8 ELSE $2::float8 END)
		AND gid_base <> ALL ($3::text[])`,
		commitAge.Seconds(), abortAge.Seconds(), keep)
	if err != nil {
		return 0, fmt.Errorf("metadata: forget decisions: %w", err)
	}
	return tag.RowsAffected(), nil
}
