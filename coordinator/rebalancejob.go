package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/coordinator/shards"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
	"github.com/pgfleet/pgfleet/planner"
)

// Background rebalances, as Citus's citus_rebalance_start, _status, _stop
// and _wait. citus_rebalance_start plans (shards.RebalancePlan), records a
// job in pgfleet.rebalance_jobs and returns its id at once; a goroutine of
// the coordinator then moves one shard group after another, planning again
// before each move (the catalog may have changed), until the plan is
// empty. The runner holds the job's advisory lock in the metadata database
// on a connection of its own: when its coordinator stops, the lock ends,
// and the next recovery round of any coordinator takes the job over and
// goes on (a move cut off half way is undone by recovery, as any). Each
// move is a citus_move_shard_placement; progress (moves done, the move
// under way) is in the job's row, which citus_rebalance_status reads.
// citus_rebalance_stop marks the job cancelling; the runner sees it within
// rebalancePoll, cancels the move under way (which undoes itself) and ends
// the job cancelled.

// rebalancePoll is how often a runner looks for a stop request.
const rebalancePoll = 500 * time.Millisecond

// rebalanceFunction runs citus_rebalance_start, _status, _stop or _wait.
func (ss *session) rebalanceFunction(ctx context.Context, fn *planner.Function) error {
	s := ss.srv
	switch fn.Name {
	case "citus_rebalance_start":
		if st := strings.ToLower(funcArg(fn, 0, "rebalance_strategy", "by_shard_count")); st != "by_shard_count" {
			return ss.queryError(pgerr.New(pgerr.FeatureNotSupported, "rebalance strategy %q is not supported", st).
				WithHint("pgfleet spreads shard groups by count (by_shard_count)."))
		}
		drain, ok := planner.ParseBool(funcArg(fn, 1, "drain_only", "false"))
		if !ok {
			return ss.queryError(pgerr.New(pgerr.InvalidParameterValue, "drain_only must be a boolean"))
		}
		mode := funcArg(fn, 2, "shard_transfer_mode", shards.TransferAuto)
		switch mode {
		case shards.TransferAuto, shards.TransferLogical, shards.TransferBlockWrites:
		default:
			return ss.queryError(pgerr.New(pgerr.InvalidParameterValue, "invalid shard_transfer_mode %q", mode).
				WithHint("Use auto, force_logical or block_writes."))
		}
		s.refreshCatalog(ctx)
		plan, err := shards.RebalancePlan(s.catalog.Load(), shards.RebalanceOptions{DrainOnly: drain})
		if err != nil {
			return ss.queryError(err)
		}
		if len(plan) == 0 {
			ss.notice("No moves available for rebalancing", "", "")
			ss.writeRowsNull([]string{fn.Name}, []uint32{oidInt8}, [][]string{{""}}, func(int, int) bool { return true }) // no job
			return nil
		}
		j, release, err := s.store.StartRebalance(ctx, metadata.RebalanceJob{Database: ss.database, Role: ss.user,
			Mode: mode, DrainOnly: drain, Planned: len(plan)})
		if errors.Is(err, metadata.ErrRebalanceRunning) {
			return ss.queryError(pgerr.New(pgerr.ObjectNotInPrerequisite, "a rebalance is already running").
				WithHint("SELECT * FROM citus_rebalance_status() shows it; citus_rebalance_wait() waits for it, citus_rebalance_stop() stops it."))
		}
		if err != nil {
			return ss.queryError(err)
		}
		s.startRebalanceRunner(j, release)
		ss.notice(fmt.Sprintf("Scheduled %d moves as job %d", len(plan), j.ID), "Rebalance scheduled as background job",
			"To monitor progress, run: SELECT * FROM citus_rebalance_status();")
		ss.writeRows([]string{fn.Name}, []uint32{oidInt8}, [][]string{{strconv.FormatInt(j.ID, 10)}})
		return nil
	case "citus_rebalance_status":
		jobs, err := s.store.RebalanceJobs(ctx, false)
		if err != nil {
			return ss.queryError(err)
		}
		cols, _ := functionColumns(fn.Name)
		var rows [][]string
		if len(jobs) > 0 {
			rows = append(rows, rebalanceStatusRow(jobs[0]))
		}
		ss.writeRowsNull(cols, functionTypes(fn.Name), rows, func(r, c int) bool { return c == 5 && rows[r][c] == "" })
		return nil
	case "citus_rebalance_stop":
		ok, err := s.store.CancelRebalance(ctx)
		if err != nil {
			return ss.queryError(err)
		}
		if !ok {
			return ss.queryError(pgerr.New(pgerr.ObjectNotInPrerequisite, "no ongoing rebalance that can be cancelled"))
		}
		// It returns when the job has ended (its move under way undone),
		// so that a new one can start at once.
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ss.waitCancel.Store(&cancel)
		defer ss.waitCancel.Store(nil)
		for {
			jobs, err := s.store.RebalanceJobs(ctx, true)
			if err != nil {
				return ss.queryError(err)
			}
			if len(jobs) == 0 {
				break
			}
			if err := ss.sleepInterruptible(ctx, rebalancePoll/5); err != nil {
				return ss.queryError(err)
			}
		}
		ss.writeRows([]string{fn.Name}, []uint32{oidVoid}, [][]string{{""}})
		return nil
	case "citus_rebalance_wait":
		jobs, err := s.store.RebalanceJobs(ctx, true)
		if err != nil {
			return ss.queryError(err)
		}
		if len(jobs) == 0 {
			ss.notice("no ongoing rebalance that can be waited on", "", "") // a WARNING in Citus
			ss.writeRows([]string{fn.Name}, []uint32{oidVoid}, [][]string{{""}})
			return nil
		}
		id := jobs[0].ID
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ss.waitCancel.Store(&cancel)
		defer ss.waitCancel.Store(nil)
		for {
			if err := ss.sleepInterruptible(ctx, rebalancePoll); err != nil {
				return ss.queryError(err)
			}
			all, err := s.store.RebalanceJobs(ctx, false)
			if err != nil {
				return ss.queryError(err)
			}
			var j *metadata.RebalanceJob
			for i := range all {
				if all[i].ID == id {
					j = &all[i]
				}
			}
			switch {
			case j == nil:
				return ss.queryError(pgerr.New(pgerr.UndefinedObject, "rebalance job %d is gone", id))
			case j.State == "failed":
				return ss.queryError(pgerr.New(pgerr.ObjectNotInPrerequisite, "rebalance job %d failed: %s", id, j.Error).
					WithHint("The moves it made stay; SELECT * FROM citus_rebalance_status() shows how far it got. Start another when the cause is fixed."))
			case j.State == "finished" || j.State == "cancelled":
				ss.writeRows([]string{fn.Name}, []uint32{oidVoid}, [][]string{{""}})
				return nil
			}
		}
	}
	return ss.queryError(pgerr.New(pgerr.Internal, "unknown rebalance function %s", fn.Name))
}

// rebalanceStatusRow is a job as citus_rebalance_status shows it: job_id,
// state, job_type, description, started_at, finished_at, details.
func rebalanceStatusRow(j metadata.RebalanceJob) []string {
	details, _ := json.Marshal(struct {
		Planned int    `json:"moves_planned"`
		Done    int    `json:"moves_done"`
		Current string `json:"current,omitempty"`
		Mode    string `json:"shard_transfer_mode"`
		Error   string `json:"error,omitempty"`
	}{j.Planned, j.Done, j.Current, j.Mode, j.Error})
	desc := "Rebalance all colocation groups"
	if j.DrainOnly {
		desc = "Drain the nodes that should not have shards"
	}
	finished := ""
	if !j.Finished.IsZero() && j.Finished.Unix() != 0 {
		finished = j.Finished.UTC().Format("2006-01-02 15:04:05.999999-07")
	}
	return []string{strconv.FormatInt(j.ID, 10), j.State, "rebalance", desc,
		j.Started.UTC().Format("2006-01-02 15:04:05.999999-07"), finished, string(details)}
}

// startRebalanceRunner runs job j on this coordinator; release gives its
// lock back when it ends.
func (s *Server) startRebalanceRunner(j metadata.RebalanceJob, release func()) {
	s.jobs.Add(1)
	go func() {
		defer s.jobs.Done()
		defer release()
		s.runRebalance(j)
	}()
}

// runRebalance moves shard groups until the plan is empty, the job is
// stopped, a move fails, or the coordinator stops (the job then stays
// running, for another coordinator to take over).
func (s *Server) runRebalance(j metadata.RebalanceJob) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped := make(chan struct{}) // closed when citus_rebalance_stop asked
	go func() {
		t := time.NewTicker(rebalancePoll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.jobStop:
				cancel()
				return
			case <-t.C:
				jobs, err := s.store.RebalanceJobs(ctx, true)
				if err == nil && (len(jobs) == 0 || jobs[0].ID != j.ID || jobs[0].State == "cancelling") {
					close(stopped)
					cancel()
					return
				}
			}
		}
	}()
	end := func(state, why string) {
		ectx, ecancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ecancel()
		if err := s.store.EndRebalance(ectx, j.ID, state, why); err != nil {
			s.log.Warn("rebalance: recording the job's end", "job", j.ID, "state", state, "err", err)
		}
		s.log.Info("rebalance job ended", "job", j.ID, "state", state, "moves", j.Done, "error", why)
	}
	isStopped := func() bool {
		select {
		case <-stopped:
			return true
		default:
			return false
		}
	}
	// A plan that does not shrink (moves undone by others) ends the job.
	limit := 2*j.Planned + 8
	for {
		if isStopped() {
			end("cancelled", "")
			return
		}
		if ctx.Err() != nil {
			return // the coordinator is stopping: another takes the job over
		}
		s.refreshCatalog(ctx)
		snap := s.catalog.Load()
		plan, err := shards.RebalancePlan(snap, shards.RebalanceOptions{DrainOnly: j.DrainOnly})
		if err != nil {
			end("failed", pgerr.Flatten(err).Message)
			return
		}
		if len(plan) == 0 {
			end("finished", "")
			return
		}
		if j.Done >= limit {
			end("failed", fmt.Sprintf("the plan still had moves after %d", j.Done))
			return
		}
		m := plan[0]
		from, to := snap.Node(m.From), snap.Node(m.To)
		current := fmt.Sprintf("moving shard %d of %s from %s to %s", m.Shard, m.Table, from.Addr(), to.Addr())
		if err := s.store.UpdateRebalance(ctx, j.ID, j.Done, current); err != nil && ctx.Err() == nil {
			s.log.Warn("rebalance: recording progress", "job", j.ID, "err", err)
		}
		if err := s.backgroundMove(ctx, j, m); err != nil {
			switch {
			case isStopped():
				end("cancelled", "")
			case ctx.Err() != nil:
				// The coordinator is stopping.
			default:
				end("failed", pgerr.Flatten(err).Message)
			}
			return
		}
		j.Done++
		if err := s.store.UpdateRebalance(ctx, j.ID, j.Done, ""); err != nil && ctx.Err() == nil {
			s.log.Warn("rebalance: recording progress", "job", j.ID, "err", err)
		}
	}
}

// backgroundMove makes one move of job j on connections of its own: the
// superuser's, acting as the role that started the job (the target's
// tables are that role's, as a move the role ran itself makes them).
func (s *Server) backgroundMove(ctx context.Context, j metadata.RebalanceJob, m shards.PlannedMove) error {
	snap := s.catalog.Load()
	conns := map[int32]*pgx.Conn{}
	defer func() {
		for _, c := range conns {
			_ = c.Close(context.Background())
		}
	}()
	for _, n := range snap.Nodes {
		if !n.Active {
			continue
		}
		c, err := s.directConnDB(ctx, n.Addr(), j.Database)
		if err != nil {
			return pgerr.New(pgerr.SQLClientUnableToConnect, "cannot connect to node %s: %v", n.Addr(), err)
		}
		conns[n.ID] = c
		if _, err := c.Exec(ctx, "SET ROLE "+pgx.Identifier{j.Role}.Sanitize()+"; SET search_path TO DEFAULT"); err != nil {
			return pgerr.New(pgerr.InsufficientPrivilege, "cannot act as role %s on node %s: %v", j.Role, n.Addr(), err)
		}
	}
	s.ensureShardsSchema(ctx, j.Database, snap.Node(m.To).Addr())
	after, err := shards.MoveShard(ctx, s.store, conns, s.defaultNode.Load(), m.Shard, m.From, m.To, s.moveConfig(j.Database, j.Mode))
	if after != nil {
		s.changedCatalog(after)
	}
	return err
}

// resumeRebalance takes over the active rebalance job when its runner is
// gone (a recovery round's last step).
func (s *Server) resumeRebalance(ctx context.Context) {
	j, release, ok, err := s.store.TakeOverRebalance(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("recovery: looking for a rebalance job to take over", "err", err)
		}
		return
	}
	if !ok {
		return
	}
	if j.State == "cancelling" {
		defer release()
		if err := s.store.EndRebalance(ctx, j.ID, "cancelled", ""); err != nil {
			s.log.Warn("recovery: ending a cancelled rebalance job", "job", j.ID, "err", err)
		}
		return
	}
	s.log.Info("rebalance job taken over", "job", j.ID, "moves_done", j.Done)
	s.startRebalanceRunner(j, release)
}

// notice sends a NOTICE (with detail and hint, when given) to the client.
func (ss *session) notice(msg, detail, hint string) {
	n := pgproto3.NoticeResponse{Severity: "NOTICE", SeverityUnlocalized: "NOTICE", Code: "00000", Message: msg, Detail: detail, Hint: hint}
	ss.out, _ = n.Encode(ss.out)
}

// sleepInterruptible waits d, or fails as a cancelled statement when the
// client cancels or the coordinator shuts down.
func (ss *session) sleepInterruptible(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return pgerr.New(pgerr.QueryCanceled, "canceling statement due to user request")
	}
	if ss.srv.stopping.Load() || ss.terminated.Load() {
		return adminShutdown()
	}
	return nil
}
