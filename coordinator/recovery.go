package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/coordinator/twophase"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
	"github.com/pgfleet/pgfleet/pooling"
)

// Recovery of distributed transactions. A coordinator that dies (or loses
// a worker connection) between PREPARE TRANSACTION and COMMIT PREPARED
// leaves prepared transactions on the workers, holding their locks. Every
// coordinator looks for them every RecoveryInterval and resolves each one
// from the decision table in the metadata database. A prepared transaction
// whose distributed transaction has a decision is resolved at once
// (decidedMinAge aside): committed if the decision is to commit, rolled back
// if it is to abort; anyone may finish a decided transaction, and its
// locks are released as soon as a recovery round sees it. One without a
// decision may belong to a live coordinator about to decide: it is left
// alone until it is older than RecoveryGrace, then recovery records an
// abort decision (which a commit decision recorded first beats, by the
// table's primary key) and rolls it back. A coordinator commits only after
// its commit decision is durable and recovery rolls back only after its
// abort decision is, so no distributed transaction is committed on some
// nodes and rolled back on others.

const (
	defaultRecoveryInterval = 5 * time.Second
	defaultRecoveryGrace    = time.Minute
	// recoveryRoundTimeout bounds one round over all nodes. It must stay
	// well below twophase.ForgetCommitAge: a round forgets only decisions
	// older than that, which were recorded before the round listed any
	// node.
	recoveryRoundTimeout = 2 * time.Minute
	// decidedMinAge is the age at which recovery finishes a decided
	// prepared transaction: younger ones are being finished by their
	// coordinator right now (a race both sides survive, but each would log
	// it).
	decidedMinAge = time.Second
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

// preparedXact is one of pgfleet's prepared transactions on a node.
type preparedXact struct {
	node       metadata.Node
	gid, base  string
	db         string
	old, ready bool // older than the grace; older than decidedMinAge
}

// recoverPrepared is one recovery round over the nodes of the catalog: it
// resolves pgfleet's prepared transactions that have a decision, and those
// without one older than grace (younger ones may belong to a coordinator
// that is about to decide), and forgets decisions nobody can need any
// more. Errors are logged; what failed is tried again next round.
func (s *Server) recoverPrepared(ctx context.Context, grace time.Duration) recoveryStats {
	var st recoveryStats
	snap := s.catalog.Load()
	if snap == nil || s.store == nil {
		return st
	}
	conns := map[string]*pgx.Conn{} // by node address and database
	defer func() {
		for _, c := range conns {
			pooling.Reclaim(context.Background(), c.PgConn())
		}
	}()
	present := map[string]bool{} // bases with a prepared transaction left, of any age
	complete := true
	var all []preparedXact
	for _, n := range snap.Nodes {
		ps, err := s.listPrepared(ctx, n, grace, conns)
		if err != nil {
			complete = false
			if ctx.Err() == nil {
				s.log.Warn("recovery of prepared transactions", "node", n.Addr(), "err", err)
			}
			continue
		}
		for _, p := range ps {
			present[p.base] = true
		}
		all = append(all, ps...)
	}
	var bases []string
	recorded := map[recordKey][]string{} // hashes of groups decided by a commit record
	for _, p := range all {
		if !p.ready {
			continue
		}
		if node, hash, ok := twophase.RecordOf(p.base); ok {
			k := recordKey{node, p.db}
			recorded[k] = append(recorded[k], hash)
		} else {
			bases = append(bases, p.base)
		}
	}
	decided, err := s.store.Decisions(ctx, bases)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("recovery: reading transaction decisions", "err", err)
		}
		return st
	}
	unread := map[recordKey]bool{} // records that could not be read: left for the next round
	for k, hashes := range recorded {
		// (Their prepared transactions were listed, so forgetting stays
		// safe: their bases are kept.)
		if err := s.readRecords(ctx, snap, k, hashes, conns, decided); err != nil {
			unread[k] = true
			if ctx.Err() == nil {
				s.log.Warn("recovery: reading commit records", "node", k.node, "database", k.db, "err", err)
			}
		}
	}
	for _, p := range all {
		d, ok := decided[p.base]
		if !p.ready || !ok && !p.old {
			continue
		}
		if node, _, rec := twophase.RecordOf(p.base); rec && unread[recordKey{node, p.db}] {
			continue
		}
		if err := s.resolvePrepared(ctx, p, d, conns, &st); err != nil {
			complete = false
			if ctx.Err() == nil {
				s.log.Warn("recovery of prepared transactions", "node", p.node.Addr(), "err", err)
			}
		}
	}
	s.cleanupMoves(ctx, snap, conns)
	s.resumeRebalance(ctx)
	if !complete || ctx.Err() != nil {
		return st // a node not seen may still need a decision
	}
	keep := make([]string, 0, len(present))
	for b := range present {
		keep = append(keep, b)
	}
	s.forgetRecords(ctx, snap, keep, conns)
	if n, err := s.store.ForgetDecisions(ctx, twophase.ForgetCommitAge, twophase.ForgetAbortAge, keep); err != nil {
		if ctx.Err() == nil { // not a shutdown
			s.log.Warn("recovery: forgetting old transaction decisions", "err", err)
		}
	} else if n > 0 {
		s.log.Debug("recovery: forgot old transaction decisions", "count", n)
	}
	return st
}

// recoveryConn returns a connection to a database of a node, kept in
// conns for the round.
func (s *Server) recoveryConn(ctx context.Context, n metadata.Node, db string, conns map[string]*pgx.Conn) (*pgx.Conn, error) {
	key := n.Addr() + "/" + db
	if c := conns[key]; c != nil && !c.IsClosed() {
		return c, nil
	}
	// It holds the round's other connections meanwhile: its class, so
	// that it does not wait behind (or take) the slot the pools keep for
	// clients holding connections elsewhere.
	held := 0
	for _, c := range conns {
		if !c.IsClosed() {
			held++
		}
	}
	c, err := s.adminConn(ctx, n, db, held)
	if err != nil {
		return nil, err
	}
	conns[key] = c
	return c, nil
}

// listPrepared lists pgfleet's prepared transactions on one node.
func (s *Server) listPrepared(ctx context.Context, n metadata.Node, grace time.Duration,
	conns map[string]*pgx.Conn) ([]preparedXact, error) {
	conn, err := s.recoveryConn(ctx, n, "postgres", conns)
	if err != nil {
		return nil, err
	}
	rows, err := conn.Query(ctx, `SELECT gid, database::pg_catalog.text,
		prepared OPERATOR(pg_catalog.<) (pg_catalog.now() OPERATOR(pg_catalog.-) pg_catalog.make_interval(secs => $1::pg_catalog.float8)),
		prepared OPERATOR(pg_catalog.<) (pg_catalog.now() OPERATOR(pg_catalog.-) pg_catalog.make_interval(secs => $2::pg_catalog.float8))
		FROM pg_catalog.pg_prepared_xacts WHERE gid OPERATOR(pg_catalog.~~) $3::pg_catalog.text ORDER BY prepared`,
		grace.Seconds(), decidedMinAge.Seconds(), strings.ReplaceAll(twophase.GIDPrefix, "_", `\_`)+"%")
	if err != nil {
		return nil, fmt.Errorf("listing prepared transactions: %w", err)
	}
	defer rows.Close()
	var out []preparedXact
	for rows.Next() {
		p := preparedXact{node: n}
		if err := rows.Scan(&p.gid, &p.db, &p.old, &p.ready); err != nil {
			return nil, fmt.Errorf("listing prepared transactions: %w", err)
		}
		var ok bool
		if p.base, ok = gidBase(p.gid); !ok {
			continue // not one of ours after all
		}
		p.ready = p.ready || p.old
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing prepared transactions: %w", err)
	}
	return out, nil
}

// resolvePrepared commits or rolls back one prepared transaction: by d,
// its distributed transaction's decision, or, without one (d is 0), by the
// decision that stands after recording an abort decision.
func (s *Server) resolvePrepared(ctx context.Context, p preparedXact, d byte,
	conns map[string]*pgx.Conn, st *recoveryStats) error {
	if d == 0 {
		// Abort records the abort decision unless the commit decision is
		// recorded, and returns the decision that stands.
		var err error
		if node, _, ok := twophase.RecordOf(p.base); ok {
			d, err = s.recoveryRecordAbort(ctx, node, p, conns)
		} else {
			d, err = s.store.Abort(ctx, p.base)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", p.gid, err)
		}
	}
	c, err := s.recoveryConn(ctx, p.node, p.db, conns)
	if err != nil {
		return fmt.Errorf("%s: %w", p.gid, err)
	}
	decision, sql := "abort", "ROLLBACK PREPARED '"+p.gid+"'"
	if d == metadata.CommitDecision {
		decision, sql = "commit", "COMMIT PREPARED '"+p.gid+"'"
	}
	if _, err := c.Exec(ctx, sql); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && (pe.Code == pgerr.UndefinedObject || pe.Code == pgerr.ObjectNotInPrerequisite) {
			return nil // resolved meanwhile (or right now) by its coordinator or another recovery
		}
		return fmt.Errorf("%s: %w", sql, err)
	}
	s.log.Info("recovery resolved a prepared transaction", "gid", p.gid, "node", p.node.Addr(),
		"database", p.db, "decision", decision)
	s.metrics.recovered.WithLabelValues(decision).Inc()
	if d == metadata.CommitDecision {
		st.committed++
	} else {
		st.aborted++
	}
	return nil
}

// adminConn lends a connection to a database of a node as the postgres
// user (to a holder of held connections of the pools), from the coordinator's pool for it (with the password the
// coordinator uses for its catalog): resolving another user's prepared
// transaction needs a superuser. pooling.Reclaim gives it back.
func (s *Server) adminConn(ctx context.Context, n metadata.Node, database string, held int) (*pgx.Conn, error) {
	pool := s.pool(n.Addr(), database, "postgres")
	take := func() (*pooling.ServerConn, error) {
		sc, err := pool.Acquire(ctx, held)
		if err != nil {
			return sc, err
		}
		// A client session of the same user left its settings
		// (statement_timeout, lock_timeout, search_path, ...): recovery
		// and health checks run under the server's defaults, but for the
		// search path, which is pg_catalog's alone. As the superuser, a
		// name that resolved through a schema another role can create in
		// (public, "$user", a database's own default) would run that
		// role's function or operator with the superuser's rights.
		// SET ROLE NONE, not RESET ROLE: a database's owner may have made
		// its default role another (ALTER DATABASE ... SET role).
		// statement_timeout goes first: a client's (1 ms) canceled the
		// reset itself on a loaded machine, and a statement it cancels
		// is tried again.
		for attempt := 1; ; attempt++ {
			err := sc.Exec("SET statement_timeout = 0;RESET SESSION AUTHORIZATION;SET ROLE NONE;RESET ALL;"+catalogPath,
				time.Now().Add(pool.Config().ResetTimeout), nil)
			if err == nil {
				break
			}
			var pe *pgconn.PgError
			if attempt < 3 && errors.As(err, &pe) && pe.Code == pgerr.QueryCanceled {
				continue
			}
			sc.MarkBroken()
			pool.Release(sc)
			return nil, err
		}
		sc.ParamsKey = pooling.UnknownKey // the next client's checkout resets it
		return sc, nil
	}
	sc, err := take()
	if err != nil {
		return nil, fmt.Errorf("connecting to database %s on %s: %w", database, n.Addr(), err)
	}
	c, err := pooling.LendPgx(ctx, sc, take, func(*pooling.ServerConn) {})
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
	if !strings.HasPrefix(gid, twophase.GIDPrefix) || i <= len(twophase.GIDPrefix) || i == len(gid)-1 {
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

// readRecords reads the commit records of the hashes given from their
// node and database into decided (by base; a record missing is no entry).
func (s *Server) readRecords(ctx context.Context, snap *metadata.Snapshot, k recordKey, hashes []string,
	conns map[string]*pgx.Conn, decided map[string]byte) error {
	n := snap.Node(k.node)
	if n == nil {
		return fmt.Errorf("node %d, which keeps the commit records, is not in the catalog", k.node)
	}
	c, err := s.recoveryConn(ctx, *n, k.db, conns)
	if err != nil {
		return err
	}
	if err := recordsTrusted(ctx, c); errors.Is(err, errNoRecords) {
		return nil // no table, no record
	} else if err != nil {
		return err
	}
	rows, err := c.Query(ctx, twophase.RecordsLookupSQL, hashes)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var h string
		var secret *string
		if err := rows.Scan(&h, &secret); err != nil {
			return err
		}
		decided[twophase.Record{Node: k.node, Hash: h}.Base()] = twophase.RecordDecision(h, secret)
	}
	return rows.Err()
}

// recoveryRecordAbort records an abort for p's group, decided by a record
// on node, unless its commit record is there, and returns the decision
// that stands.
func (s *Server) recoveryRecordAbort(ctx context.Context, node int32, p preparedXact, conns map[string]*pgx.Conn) (byte, error) {
	n := s.catalog.Load().Node(node)
	if n == nil {
		return 0, fmt.Errorf("node %d, which keeps the commit record, is not in the catalog", node)
	}
	c, err := s.recoveryConn(ctx, *n, p.db, conns)
	if err != nil {
		return 0, err
	}
	// The insert waits for a transaction that wrote the record and is
	// still committing (a deferred trigger waiting on a lock, say): not
	// for the whole round, which has other transactions to resolve.
	actx, cancel := context.WithTimeout(ctx, recordAbortTimeout)
	defer cancel()
	return recordAbort(actx, c, p.base)
}

// catalogPath makes pg_catalog the only schema a superuser's connection
// resolves names in (pg_temp last, for tables only).
const catalogPath = "SET search_path = pg_catalog, pg_temp"

// recordAbortTimeout bounds one abort record's insert in a recovery round.
const recordAbortTimeout = 10 * time.Second

// forgetRecords deletes, in every database this coordinator has kept
// commit records in, the records nobody can need any more: as
// metadata.Store.ForgetDecisions, keeping those of the bases in keep.
func (s *Server) forgetRecords(ctx context.Context, snap *metadata.Snapshot, keep []string, conns map[string]*pgx.Conn) {
	hashes := []string{}
	for _, b := range keep {
		if _, h, ok := twophase.RecordOf(b); ok {
			hashes = append(hashes, h)
		}
	}
	s.records.mu.Lock()
	var tables []recordKey
	for k, t := range s.records.m {
		if t.ok {
			tables = append(tables, k)
		}
	}
	s.records.mu.Unlock()
	for _, k := range tables {
		n := snap.Node(k.node)
		if n == nil {
			continue
		}
		c, err := s.recoveryConn(ctx, *n, k.db, conns)
		if err == nil {
			err = recordsTrusted(ctx, c)
		}
		if err == nil {
			_, err = c.Exec(ctx, twophase.RecordsForgetSQL, twophase.ForgetCommitAge.Seconds(), twophase.ForgetAbortAge.Seconds(), hashes)
		}
		if err != nil && ctx.Err() == nil {
			s.log.Warn("recovery: forgetting old commit records", "node", n.Addr(), "database", k.db, "err", err)
		}
	}
}
