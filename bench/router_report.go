package bench

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// Status of a target.
const (
	targetMet    = "met"
	targetMissed = "missed"
	targetNA     = "n/a"
)

// workerCPUSlack is how much more worker CPU a routed query may take than
// the same query sent directly to the worker (the 1.1x).
const workerCPUSlack = 1.1

// targetCheck is one of the targets checked against the figures.
type targetCheck struct {
	Target   string   `json:"target"` // what the issue asks
	Workload string   `json:"workload"`
	Mode     string   `json:"mode"`
	Status   string   `json:"status"`          // met, missed, n/a
	Ratio    *float64 `json:"ratio,omitempty"` // measured figure over the reference
	Limit    string   `json:"limit"`           // what the ratio must be, e.g. ">= 1.00"
	Detail   string   `json:"detail"`          // the figures compared, or why n/a
}

// evaluateTargets checks the targets against the table rows:
//   - the coordinator's QPS at least PgBouncer session mode's with prepared
//     and transaction mode's with extended (point-select);
//   - the coordinator's CPU per query at most PgBouncer's, same pairs;
//   - the workers' CPU per routed query at most 1.1 times direct's, for
//     every workload and mode that ran.
func evaluateTargets(rows []*tableRow, modes []string) []targetCheck {
	byKey := map[string]*tableRow{}
	for _, r := range rows {
		byKey[configKey(r.Target, r.Workload, r.Mode)] = r
	}
	get := func(target, workload, mode string) *tableRow {
		return byKey[configKey(target, workload, mode)]
	}
	var out []targetCheck
	for _, m := range modes {
		ref := pgbouncerReference(m)
		if ref == "" {
			continue
		}
		name := "PgBouncer session"
		if ref == targetBouncerTx {
			name = "PgBouncer transaction"
		}
		coord, bouncer := get(targetPgfleet, workloadPointSelect, m), get(ref, workloadPointSelect, m)
		out = append(out, compareTarget(targetCheck{Target: "coordinator throughput ≥ " + name + "'s",
			Workload: workloadPointSelect, Mode: m}, coord, bouncer, name, true, 1,
			func(r *tableRow) (float64, bool) { return r.QPS, true }, "%.0f qps"))
		out = append(out, compareTarget(targetCheck{Target: "coordinator CPU/query ≤ " + name + "'s",
			Workload: workloadPointSelect, Mode: m}, coord, bouncer, name, false, 1,
			func(r *tableRow) (float64, bool) {
				if r.RelayCPU == nil {
					return 0, false
				}
				return *r.RelayCPU, true
			}, "%.1f µs"))
	}
	for _, w := range []string{workloadPointSelect, workloadMix} {
		for _, m := range modes {
			out = append(out, compareTarget(targetCheck{Target: fmt.Sprintf("worker CPU per routed query ≤ %.1f× direct's", workerCPUSlack),
				Workload: w, Mode: m}, get(targetPgfleet, w, m), get(targetDirect, w, m), "direct", false, workerCPUSlack,
				func(r *tableRow) (float64, bool) { return r.WorkerCPU, true }, "%.1f µs"))
		}
	}
	return out
}

// compareTarget fills c by comparing figure(coord) with figure(ref): their
// ratio must be at least limit (atLeast) or at most limit.
func compareTarget(c targetCheck, coord, ref *tableRow, refName string, atLeast bool, limit float64,
	figure func(*tableRow) (float64, bool), format string) targetCheck {
	if atLeast {
		c.Limit = fmt.Sprintf(">= %.2f", limit)
	} else {
		c.Limit = fmt.Sprintf("<= %.2f", limit)
	}
	c.Status = targetNA
	switch {
	case coord == nil || !coord.OK:
		c.Detail = "no successful coordinator run"
		return c
	case ref == nil || !ref.OK:
		c.Detail = "no successful " + refName + " run"
		return c
	}
	a, okA := figure(coord)
	b, okB := figure(ref)
	if !okA || !okB || b <= 0 {
		c.Detail = fmt.Sprintf("no %s figure to compare with", refName)
		return c
	}
	ratio := a / b
	c.Ratio = &ratio
	c.Detail = fmt.Sprintf("coordinator "+format+" vs %s "+format, a, refName, b)
	// Compare at the precision shown (two decimals), so that a ratio shown
	// as 1.10 is not reported as missing a 1.10 limit.
	r := float64(int64(ratio*100+0.5)) / 100
	if (atLeast && r >= limit) || (!atLeast && r <= limit) {
		c.Status = targetMet
	} else {
		c.Status = targetMissed
	}
	return c
}

// markdown renders the router report.
func (rep *routerReport) markdown(rows []*tableRow, jsonName string) string {
	var sb strings.Builder
	o := rep.Options
	fmt.Fprintf(&sb, "# pgfleet router benchmark, %s\n\n", rep.StartedAt.Format("2006-01-02 15:04:05 MST"))
	where := "all on the one worker"
	if o.Workers > 1 {
		where = fmt.Sprintf("spread over %d workers", o.Workers)
	}
	fmt.Fprintf(&sb, "Routed point queries (pgbench scripts from bench/workloads; one SELECT per transaction, so QPS = TPS), "+
		"scale %d (%d accounts), %d clients, %d threads, %d s per run, median of %d run(s) by QPS. "+
		"*direct*: plain tables in database `%s` on worker 1, no coordinator. *pgfleet router*: database `postgres` through "+
		"`pgfleet serve`, pgbench_accounts distributed by aid over %d shards (%s), pgbench_branches and pgbench_tellers "+
		"reference tables; pool size %d. *PgBouncer*: in front of database `%s`. "+
		"*point-select*: `-f point-select.sql`; *citus-mix*: `-f hot.sql@80 -f uniform.sql@10 -f tellers.sql@5 -f branches.sql@5 -D hot_pct=5`.\n\n",
		o.Scale, o.Naccounts, o.Clients, o.Jobs, o.DurationSeconds, o.Runs, directDB, o.Shards, where, o.PoolSize, directDB)
	writeStatus(&sb, rep.Interrupted, rep.Error)
	writeTable(&sb, rows, true, true)
	sb.WriteString("\n*vs direct*: QPS over direct's with the same workload and mode; the row is the median of the runs without error (failed runs are counted in *failed* and listed under Problems seen). *vs PgBouncer*: QPS over PgBouncer " +
		"session mode's (prepared) or transaction mode's (extended), point-select only. Latency percentiles come from " +
		"pgbench's per-transaction logs. CPU µs/q: CPU time (user+system) during the run divided by the transactions " +
		"completed; relay = the coordinator or PgBouncer process, worker = every worker's postmaster and all its " +
		"children (backends included), pgbench = the load generator. All share the same cores; see bench/README.md.\n\n")

	sb.WriteString("## Targets (from the issue)\n\n")
	for _, t := range rep.Targets {
		box := "[ ]"
		if t.Status == targetMet {
			box = "[x]"
		}
		ratio := ""
		if t.Ratio != nil {
			ratio = fmt.Sprintf(" %.2f (%s):", *t.Ratio, t.Limit)
		}
		fmt.Fprintf(&sb, "- %s **%s** — %s, %s %s:%s %s\n", box, t.Status, t.Target, t.Workload, t.Mode, ratio, t.Detail)
	}

	d := rep.Data
	sb.WriteString("\n## Data\n\n")
	fmt.Fprintf(&sb, "- direct: %d accounts in db `%s` on worker1 (want %d)\n", d.DirectAccounts, directDB, d.Naccounts)
	if len(d.PerWorker) > 0 {
		var parts []string
		for _, p := range d.PerWorker {
			parts = append(parts, fmt.Sprintf("%s %d shards / %d rows", p.Worker, p.Shards, p.Rows))
		}
		fmt.Fprintf(&sb, "- routed: %d accounts in %d shards (%s); %d rows left in the shell table on worker1\n",
			d.RoutedAccounts, d.Shards, strings.Join(parts, ", "), d.ShellAccounts)
	}
	if len(d.Reads) > 0 {
		ok := 0
		for _, r := range d.Reads {
			if r.Error == "" && r.Rows == 1 {
				ok++
			}
		}
		fmt.Fprintf(&sb, "- reads through the coordinator at set-up (accounts, tellers, branches by key; prepared, extended "+
			"and simple protocol): %d of %d returned their one row\n", ok, len(d.Reads))
	}

	sb.WriteString("\n")
	writeEveryRun(&sb, rows)
	writeProblems(&sb, rep.Problems, rep.Notes, "no warning or error lines in the coordinators', PgBouncer's or the workers' logs, "+
		"every backend reaped, and the data checks passed.")
	writeEnvironment(&sb, rep.Versions, rep.Machine, jsonName)
	return sb.String()
}

// problems lists what went wrong: in the set-up, the data checks, the runs
// and the workers' logs.
func (rep *routerReport) problems() []string {
	var out []string
	if rr := rep.SetupCoordinator; rr != nil {
		out = append(out, relayProblems("set-up coordinator (pgbench -i, distribution, read checks)", rr)...)
	}
	for _, c := range rep.Commands {
		if c.Error != "" {
			out = append(out, fmt.Sprintf("set-up: %s: %s", strings.Join(c.Argv, " "), c.Error))
		}
	}
	for _, p := range rep.Data.Problems {
		out = append(out, "data: "+p)
	}
	out = append(out, runProblems(rep.Configs)...)
	for _, w := range rep.Workers {
		if w.NLog > 0 {
			out = append(out, workerLogProblem(w))
		}
	}
	return out
}

func (b *routerBench) finish(runErr error, interrupted bool) error {
	rep := b.rep
	rep.FinishedAt, rep.Interrupted, rep.Error = time.Now(), interrupted, errText(runErr)
	rep.Machine.LoadAvgEnd = loadAvg()
	if len(rep.Commands) == 0 && !anyRuns(rep.Configs) {
		return nil
	}
	rows := buildRows(rep.Configs)
	rep.Targets = evaluateTargets(rows, rep.Options.Modes)
	rep.Problems = rep.problems()
	mdPath, jsonPath := reportPaths(b.o.OutDir, "router", rep.StartedAt)
	rep.MarkdownOut = mdPath
	return b.writeReports(mdPath, rep.markdown(rows, filepath.Base(jsonPath)), jsonPath, rep)
}
