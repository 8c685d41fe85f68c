package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/coordinator/shards"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
)

// Recovery of distributed transactions. A coordinator that dies (or loses
// a worker connection) between PREPARE TRANSACTION and COMMIT PREPARED
// leaves prepared transactions on the workers, holding their locks. Every
// coordinator looks for them every RecoveryInterval and resolves each one
// from the decision table in the metadata database: commit if its
// distributed transaction's commit decision is recorded, otherwise record
// an abort decision (which a commit decision recorded first beats, by the
// table's primary key) and roll it back. A coordinator commits only after
// its commit decision is durable and recovery rolls back only after its
// abort decision is, so no distributed transaction is committed on some
// nodes and rolled back on others.

const (
	defaultRecoveryInterval = 30 * time.Second
	defaultRecoveryGrace    = time.Minute
	// recoveryRoundTimeout bounds one round over all nodes.
	recoveryRoundTimeout = 2 * time.Minute
	// decisionRetention is how long a decision is kept once no prepared
	// transaction of its distributed transaction remains. It must exceed
	// the longest a group may take from PREPARE to its commit decision
	// (ten minutes, in package shards), so that an abort decision outlives
	// every attempt to decide the other way.
	decisionRetention = time.Hour
)

// recoveryStats counts what one round resolved.
type recoveryStats struct {
	committed, aborted int
}

// recoveryLoop runs a recovery round every RecoveryInterval until stop is
// closed; a round under way is cancelled then. It closes done on return.
func (s *Server) recoveryLoop(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	t := time.NewTicker(s.cfg.RecoveryInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			rctx, rcancel := context.WithTimeout(ctx, recoveryRoundTimeout)
			s.recoverPrepared(rctx, s.cfg.RecoveryGrace)
			rcancel()
		}
	}
}

// recoverPrepared is one recovery round over the nodes of the catalog: it
// resolves pgfleet's prepared transactions older than grace (younger ones
// may belong to a coordinator that is about to commit them), and forgets
// decisions nobody can need any more. Errors are logged; what failed is
// tried again next round.
func (s *Server) recoverPrepared(ctx context.Context, grace time.Duration) recoveryStats {
	var st recoveryStats
	snap := s.catalog.Load()
	if snap == nil || s.store == nil {
		return st
	}
	present := map[string]bool{} // bases with a prepared transaction left, of any age
	complete := true
	for _, n := range snap.Nodes {
		if err := s.recoverNode(ctx, n, grace, present, &st); err != nil {
			complete = false
			if ctx.Err() == nil {
				s.log.Warn("recovery of prepared transactions", "node", n.Addr(), "err", err)
			}
		}
	}
	if !complete || ctx.Err() != nil {
		return st // a node not seen may still need a decision
	}
	keep := make([]string, 0, len(present))
	for b := range present {
		keep = append(keep, b)
	}
	if n, err := s.store.ForgetDecisions(ctx, decisionRetention, keep); err != nil {
		s.log.Warn("recovery: forgetting old transaction decisions", "err", err)
	} else if n > 0 {
		s.log.Debug("recovery: forgot old transaction decisions", "count", n)
	}
	return st
}

// recoverNode resolves the prepared transactions older than grace on one
// node, adding the base of every pgfleet prepared transaction it sees to
// present. It returns the errors of what it could not resolve.
func (s *Server) recoverNode(ctx context.Context, n metadata.Node, grace time.Duration,
	present map[string]bool, st *recoveryStats) error {
	conns := map[string]*pgx.Conn{}
	defer func() {
		for _, c := range conns {
			_ = c.Close(context.Background())
		}
	}()
	conn, err := s.adminConn(ctx, n, "postgres")
	if err != nil {
		return err
	}
	conns["postgres"] = conn
	rows, err := conn.Query(ctx, `SELECT gid, database::text, prepared < now() - make_interval(secs => $1)
		FROM pg_catalog.pg_prepared_xacts WHERE gid LIKE $2 ORDER BY prepared`,
		grace.Seconds(), strings.ReplaceAll(shards.GIDPrefix, "_", `\_`)+"%")
	if err != nil {
		return fmt.Errorf("listing prepared transactions: %w", err)
	}
	type prepared struct{ gid, base, db string }
	var due []prepared
	for rows.Next() {
		var p prepared
		var old bool
		if err := rows.Scan(&p.gid, &p.db, &old); err != nil {
			rows.Close()
			return fmt.Errorf("listing prepared transactions: %w", err)
		}
		var ok bool
		if p.base, ok = gidBase(p.gid); !ok {
			continue // not one of ours after all
		}
		present[p.base] = true
		if old {
			due = append(due, p)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("listing prepared transactions: %w", err)
	}

	var errs []error
	for _, p := range due {
		// Abort records the abort decision unless the commit decision is
		// recorded, and returns the decision that stands.
		d, err := s.store.Abort(ctx, p.base)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p.gid, err))
			continue
		}
		c := conns[p.db]
		if c == nil {
			if c, err = s.adminConn(ctx, n, p.db); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", p.gid, err))
				continue
			}
			conns[p.db] = c
		}
		decision, sql := "abort", "ROLLBACK PREPARED '"+p.gid+"'"
		if d == metadata.CommitDecision {
			decision, sql = "commit", "COMMIT PREPARED '"+p.gid+"'"
		}
		if _, err := c.Exec(ctx, sql); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == pgerr.UndefinedObject {
				continue // resolved meanwhile, by its coordinator or another recovery
			}
			errs = append(errs, fmt.Errorf("%s: %w", sql, err))
			continue
		}
		s.log.Info("recovery resolved a prepared transaction", "gid", p.gid, "node", n.Addr(),
			"database", p.db, "decision", decision)
		s.metrics.recovered.WithLabelValues(decision).Inc()
		if d == metadata.CommitDecision {
			st.committed++
		} else {
			st.aborted++
		}
	}
	return errors.Join(errs...)
}

// adminConn connects to a database of a node as the postgres user, with
// the password the coordinator uses for its catalog: resolving another
// user's prepared transaction needs a superuser.
func (s *Server) adminConn(ctx context.Context, n metadata.Node, database string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(s.cfg.WorkerTLS.ConnString(n.Addr()) + " connect_timeout=10")
	if err != nil {
		return nil, err
	}
	pw := s.cfg.Users["postgres"]
	if pw == "" {
		pw = s.cfg.WorkerPassword
	}
	cfg.User, cfg.Database, cfg.Password = "postgres", database, pw
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to database %s on %s: %w", database, n.Addr(), err)
	}
	return c, nil
}

// gidBase returns the distributed transaction of a prepared transaction's
// global id, "pgfleet_<op>_<random>" of "pgfleet_<op>_<random>_<node>",
// and whether the id is one pgfleet makes (only lower-case letters, digits
// and underscores, so that it may be quoted as is).
func gidBase(gid string) (string, bool) {
	i := strings.LastIndexByte(gid, '_')
	if !strings.HasPrefix(gid, shards.GIDPrefix) || i <= len(shards.GIDPrefix) || i == len(gid)-1 {
		return "", false
	}
	for j := 0; j < len(gid); j++ {
		c := gid[j]
		digit := c >= '0' && c <= '9'
		if j > i && !digit || !(digit || c >= 'a' && c <= 'z' || c == '_') {
			return "", false
		}
	}
	return gid[:i], true
}
