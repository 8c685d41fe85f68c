package coordinator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/fleet"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
	"github.com/pgfleet/pgfleet/pooling"
)

// The fleet-wide connection budget. Each worker has a budget (by default
// its max_connections less superuser_reserved_connections and
// budgetReserve; --worker-connections sets it), and the coordinators that
// share a metadata database divide it: each holds a lease there, renewed
// every LeaseTTL/10, with its share of every worker (metadata.RenewLease),
// and its pools to a worker never hold more than the share (a
// pooling.Gate per worker). A newcomer gets what the others' recorded
// shares leave and the others give way at their next renewals (told at
// once by gossip when there is a fleet). A coordinator that cannot renew
// closes every worker connection three quarters into its lease, before
// anyone may take its share; the others take a lapsed lease's share only
// after they have ended the backends it recorded.

// budgetReserve is what the default budget leaves of a worker's
// connections, beyond the superusers' reserve: maintenance sessions and
// the coordinators' own connections outside the pools (the metadata
// database, readiness checks, ending a lapsed coordinator's backends).
const budgetReserve = 20

// defaultLeaseTTL is how long a lease lasts unless renewed.
const defaultLeaseTTL = 10 * time.Second

// gate is the pools' gate for a worker, made on first use with no
// connections allowed until the first renewal grants a share (with the
// budget off, no cap).
func (s *Server) gate(worker string) *pooling.Gate {
	s.gatesMu.Lock()
	defer s.gatesMu.Unlock()
	if g := s.gates[worker]; g != nil {
		return g
	}
	c := 0
	if s.cfg.LeaseTTL < 0 {
		c = -1
	}
	g := pooling.NewGate(c)
	if c == 0 {
		g.Record = func(ctx context.Context, pid uint32) error {
			ctx, cancel := context.WithTimeout(ctx, s.cfg.LeaseTTL/2)
			defer cancel()
			return s.leases.RecordBackend(ctx, s.name, worker, int32(pid))
		}
		g.BeforeDial = s.leaseCurrent
	}
	s.gates[worker] = g
	return g
}

// budgetLoop renews the lease until stop, at once when kicked.
func (s *Server) budgetLoop(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	every(stop, s.cfg.LeaseTTL/10, s.budgetKick, s.renewBudget)
}

// kickBudget has the lease renewed now: a coordinator joined or left.
func (s *Server) kickBudget() { poke(s.budgetKick) }

// renewBudget renews the lease once, moves the gates' caps to the shares
// granted, and ends the backends of lapsed coordinators. Past three
// quarters of the lease without a renewal it closes every connection.
func (s *Server) renewBudget() {
	defer s.renewalDone()
	ttl := s.cfg.LeaseTTL
	if s.leasePaused.Load() {
		return
	}
	snap := s.catalog.Load()
	var wants []metadata.ShareWant
	var addrs []string
	for _, n := range snap.Nodes {
		if n.Active {
			addrs = append(addrs, n.Addr())
		}
	}
	s.gatesMu.Lock()
	for addr := range s.joining {
		if !slices.Contains(addrs, addr) {
			addrs = append(addrs, addr)
		}
	}
	s.gatesMu.Unlock()
	for _, addr := range addrs {
		budget, err := s.workerBudget(addr)
		if err != nil {
			s.log.Warn("connection budget: cannot read the worker's max_connections", "worker", addr, "err", err)
			continue
		}
		g := s.gate(addr)
		// Room for a client holding connections to the other workers.
		reserve := max(0, int(s.span.Load())-1)
		wants = append(wants, metadata.ShareWant{Worker: addr, Budget: budget, Hold: func(share int) (int, []int32) {
			return g.Hold(share, reserve), g.PIDs()
		}})
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), ttl/4)
	lease, err := s.leases.RenewLease(ctx, s.name, s.advertised(), s.incarnation, s.leaseHeld.Load(), ttl, wants)
	cancel()
	if errors.Is(err, metadata.ErrLeaseLost) {
		// Revoked or lapsed while this process could not renew (frozen,
		// cut off): its backends may have been ended and its shares taken.
		// Everything goes before it renews as a newcomer.
		s.leaseHeld.Store(false)
		s.leaseLapsing()
		poke(s.budgetKick)
		return
	}
	if err != nil {
		s.log.Warn("connection budget: lease not renewed", "err", err)
		return
	}
	s.leaseHeld.Store(true)
	s.lastRenew.Store(start.UnixNano())
	// Three quarters into the lease (in this clock, from before the
	// renewal began: the metadata database's lease ends later) without
	// another renewal, every connection goes.
	s.leaseTimer.Reset(max(0, ttl*3/4-time.Since(start)))
	for _, w := range wants {
		share := lease.Shares[w.Worker]
		s.gate(w.Worker).Raise(share)
		s.metrics.share.WithLabelValues(w.Worker).Set(float64(share))
	}
	if f := s.fleet.Load(); f != nil {
		f.SetShares(lease.Shares)
	}
	if len(lease.Expired) > 0 && s.reaping.CompareAndSwap(false, true) {
		go func() {
			defer s.reaping.Store(false)
			s.reap(lease.Expired)
		}()
	}
	// A newcomer's share grows as the others give way: look again soon.
	for _, w := range wants {
		if lease.Shares[w.Worker] < w.Budget/max(lease.Live, 1) {
			time.AfterFunc(ttl/50, s.kickBudget)
			break
		}
	}
}

// departed revokes the lease of a coordinator that left the fleet or that
// gossip declared dead (metadata.RevokeLease): the others take its share
// after failure detection and one renewal, not after its lease's length.
// A coordinator that leaves cleanly drops its lease before it leaves
// (Close), so there is nothing to revoke then.
func (s *Server) departed(m fleet.Member) {
	if s.leases == nil || m.Lease == "" || m.Lease == s.incarnation {
		return
	}
	go func() {
		// Revoked once it has not been renewed for two renewal intervals
		// (gossip under load may suspect a live member: that one keeps
		// renewing, and keeps its lease); tried again a few times, for a
		// death detected sooner than that.
		ttl := s.cfg.LeaseTTL
		for try := 0; try < 4; try++ {
			if try > 0 {
				time.Sleep(ttl / 10)
			}
			ctx, cancel := context.WithTimeout(context.Background(), ttl/2)
			revoked, err := s.leases.RevokeLease(ctx, m.Lease, ttl-2*ttl/10)
			cancel()
			switch {
			case err != nil && s.shuttingDown():
				return // this coordinator's pools are closing
			case err != nil:
				s.log.Warn("connection budget: cannot revoke a departed coordinator's lease (it lapses)", "coordinator", m.SQL, "err", err)
				return
			case revoked:
				s.log.Info("connection budget: revoked the lease of a coordinator gossip declared gone", "coordinator", m.SQL)
				s.kickBudget()
				return
			}
		}
	}()
}

// joinBudget has the lease ask a share of worker addr, which citus_add_node
// is adding (not active in the catalog yet), and returns after a renewal
// that asked it: a connection to it is then within the budget. done ends
// the asking (the catalog has the node by then, or the call failed).
func (s *Server) joinBudget(ctx context.Context, addr string) (done func()) {
	if s.cfg.LeaseTTL < 0 || s.leases == nil {
		return func() {}
	}
	s.gatesMu.Lock()
	if s.joining == nil {
		s.joining = map[string]int{}
	}
	s.joining[addr]++
	s.gatesMu.Unlock()
	// (A renewal under way may have asked before the worker was added:
	// until one grants a share, or three have run.)
	for try := 0; try < 3 && s.gate(addr).Cap() <= 0; try++ {
		ch := *s.renewed.Load()
		poke(s.budgetKick)
		select {
		case <-ch:
		case <-ctx.Done():
		case <-time.After(s.cfg.LeaseTTL / 2):
		}
	}
	return func() {
		s.gatesMu.Lock()
		if s.joining[addr]--; s.joining[addr] <= 0 {
			delete(s.joining, addr)
		}
		s.gatesMu.Unlock()
	}
}

// renewalDone wakes the dials waiting for a renewal (leaseCurrent).
func (s *Server) renewalDone() {
	next := make(chan struct{})
	close(*s.renewed.Swap(&next))
}

// leaseCurrent returns once this coordinator's last renewal is recent
// (within a quarter of the lease: two and a half renewal intervals), else
// has one run and waits for it. A process that was frozen or cut off
// longer may have lost its lease (gossip revokes a dead member's at once)
// and its share: it must not open a connection before it knows, even for
// a moment (an adversary saw them counted on a worker over the budget
// until the record failed).
func (s *Server) leaseCurrent(ctx context.Context) error {
	ttl := s.cfg.LeaseTTL
	for try := 0; try < 3; try++ {
		if time.Since(time.Unix(0, s.lastRenew.Load())) <= ttl/4 {
			return nil
		}
		ch := *s.renewed.Load()
		poke(s.budgetKick)
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(ttl / 2):
		}
	}
	return pgerr.New(pgerr.TooManyConnections, "cannot open a connection to a worker: this coordinator could not renew its lease on the workers' connection budget").
		WithHint("Retry; see the coordinator's log (is the metadata database reachable?).")
}

// shuttingDown reports whether Shutdown or Close has begun.
func (s *Server) shuttingDown() bool {
	if s.draining.Load() {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// leaseLapsing closes every worker connection: the lease was not renewed
// for three quarters of its length.
func (s *Server) leaseLapsing() {
	s.log.Error("the lease on this coordinator's connection shares could not be renewed: closing every worker connection until it is")
	for _, g := range s.allGates() {
		g.Fence()
	}
}

// reap ends the backends lapsed coordinators recorded, then forgets their
// leases, so that the others may take their shares: a coordinator frozen
// or cut off holds its connections on the workers until then.
func (s *Server) reap(expired []metadata.ExpiredShare) {
	if len(expired) == 0 {
		return
	}
	failed := map[string]bool{}
	for _, e := range expired {
		if len(e.PIDs) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.LeaseTTL/4)
		err := s.adminExec(ctx, e.Worker, `SELECT pg_catalog.pg_terminate_backend(pid) FROM pg_catalog.pg_stat_activity
			WHERE pid = ANY($1) AND backend_start <= $2`, e.PIDs, e.Recorded)
		cancel()
		if err != nil {
			s.log.Warn("connection budget: cannot end a lapsed coordinator's backends", "coordinator", e.Coordinator, "worker", e.Worker, "err", err)
			failed[e.Coordinator] = true
		}
	}
	for _, e := range expired {
		if failed[e.Coordinator] {
			continue
		}
		failed[e.Coordinator] = true // once
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.LeaseTTL/4)
		if err := s.leases.ForgetLease(ctx, e.Coordinator); err != nil {
			s.log.Warn("connection budget: cannot forget a lapsed lease", "coordinator", e.Coordinator, "err", err)
		} else {
			s.log.Info("connection budget: a coordinator's lease lapsed; its shares are free", "coordinator", e.Coordinator)
		}
		cancel()
	}
}

// workerBudget is the worker's connection budget: --worker-connections, or
// read once from the worker.
func (s *Server) workerBudget(addr string) (int, error) {
	if s.cfg.WorkerConnections > 0 {
		return s.cfg.WorkerConnections, nil
	}
	s.gatesMu.Lock()
	b, ok := s.budgets[addr]
	s.gatesMu.Unlock()
	if ok {
		return b, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := s.directConn(ctx, addr)
	if err != nil {
		return 0, err
	}
	defer c.Close(context.Background())
	var maxConn, reserved int
	if err := c.QueryRow(ctx, `SELECT pg_catalog.current_setting('max_connections')::int,
		pg_catalog.current_setting('superuser_reserved_connections')::int`).Scan(&maxConn, &reserved); err != nil {
		return 0, err
	}
	b = max(1, maxConn-reserved-budgetReserve)
	s.gatesMu.Lock()
	s.budgets[addr] = b
	s.gatesMu.Unlock()
	return b, nil
}

func (s *Server) allGates() []*pooling.Gate {
	s.gatesMu.Lock()
	defer s.gatesMu.Unlock()
	gs := make([]*pooling.Gate, 0, len(s.gates))
	for _, g := range s.gates {
		gs = append(gs, g)
	}
	return gs
}

// directConn opens a connection to a worker as the postgres user, outside
// the pools and their shares (readiness checks, reading a budget, ending a
// lapsed coordinator's backends); the caller closes it.
func (s *Server) directConn(ctx context.Context, addr string) (*pgx.Conn, error) {
	c, err := s.directConnDB(ctx, addr, "postgres")
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", addr, err)
	}
	return c, nil
}

func (s *Server) adminExec(ctx context.Context, addr, sql string, args ...any) error {
	c, err := s.directConn(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	_, err = c.Exec(ctx, sql, args...)
	return err
}

// dropLease gives the shares back at shutdown, once the pools are closed.
func (s *Server) dropLease() {
	if s.leases == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.leases.DropLease(ctx, s.name); err != nil {
		s.log.Warn("connection budget: lease not dropped at shutdown (it lapses)", "err", err)
	}
}

// leaseName names this coordinator's lease: its host and client address,
// which no other running coordinator has, so that one restarted after a
// crash takes its own lease over (its connections died with it) instead
// of waiting for the old one to lapse.
func leaseName(listen string) string {
	host, err := os.Hostname()
	if err != nil {
		host = "?"
	}
	return host + " " + listen
}

// advertised is the client address other coordinators and users are told.
func (s *Server) advertised() string {
	if s.cfg.AdvertiseSQL != "" {
		return s.cfg.AdvertiseSQL
	}
	if s.ln != nil {
		return s.ln.Addr().String()
	}
	return s.cfg.Listen
}
