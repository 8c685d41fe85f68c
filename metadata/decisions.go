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
const decisionSQL = `INSERT INTO pgfleet.transaction_decisions AS d (gid_base, decision) VALUES ($1, $2)
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

// ForgetDecisions deletes the decisions older than age, except those of
// the bases in keep: the caller passes every base that still has a
// prepared transaction on some node, so that a decision goes only when
// nothing can need it any more. It returns how many it deleted.
func (s *Store) ForgetDecisions(ctx context.Context, age time.Duration, keep []string) (int64, error) {
	if keep == nil {
		keep = []string{}
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM pgfleet.transaction_decisions
		WHERE decided_at < now() - make_interval(secs => $1) AND gid_base <> ALL ($2::text[])`,
		age.Seconds(), keep)
	if err != nil {
		return 0, fmt.Errorf("metadata: forget decisions: %w", err)
	}
	return tag.RowsAffected(), nil
}
