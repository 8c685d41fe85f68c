package bench

import (
	"fmt"
	"path/filepath"
	"slices"
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

// evaluateTargets checks issue 13's targets against the table rows of the
// main fleet shape (variant ""), each against its reference in the same
// run:
//   - point-select and the mix: the coordinator's QPS at least PgBouncer
//     session mode's with prepared and its CPU per query at most
//     PgBouncer session's; with extended, QPS at least 1.3 times PgBouncer
//     transaction mode's;
//   - the workers' CPU per routed query at most 1.1 times direct's, for
//     every routed workload and mode that ran (routed reads stay cheap);
//   - scatter: QPS at least half of direct's on one plain table, worker
//     CPU per query at most 1.5 times direct's;
//   - tpcb-like across two or more workers (the main shape's, or a
//     ladder shape's): TPS at least half of direct's on one worker, with
//     no failed transaction;
//   - the p99 latency the fleet adds at half its peak (open loop) no more
//     than PgBouncer adds at the same rate.
func evaluateTargets(rows []*tableRow, modes, workloads []string) []targetCheck {
	byKey := map[string]*tableRow{}
	for _, r := range rows {
		byKey[configKey(r.Target, r.Workload, r.Mode, r.Variant)] = r
	}
	get := func(target, workload, mode string) *tableRow {
		return byKey[configKey(target, workload, mode, "")]
	}
	qps := func(r *tableRow) (float64, bool) { return r.QPS, true }
	workerCPU := func(r *tableRow) (float64, bool) { return r.WorkerCPU, true }
	var out []targetCheck
	for _, w := range []string{workloadPointSelect, workloadMix} {
		if !slices.Contains(workloads, w) {
			continue
		}
		for _, m := range modes {
			switch pgbouncerReference(m) {
			case targetBouncerSess:
				coord, bouncer := get(targetPgfleet, w, m), get(targetBouncerSess, w, m)
				out = append(out, compareTarget(targetCheck{Target: "coordinator throughput ≥ PgBouncer session's",
					Workload: w, Mode: m}, coord, bouncer, "PgBouncer session", true, 1, qps, "%.0f qps"))
				out = append(out, compareTarget(targetCheck{Target: "coordinator CPU/query ≤ PgBouncer session's",
					Workload: w, Mode: m}, coord, bouncer, "PgBouncer session", false, 1,
					func(r *tableRow) (float64, bool) {
						if r.RelayCPU == nil {
							return 0, false
						}
						return *r.RelayCPU, true
					}, "%.1f µs"))
			case targetBouncerTx:
				out = append(out, compareTarget(targetCheck{Target: "coordinator throughput ≥ 1.3× PgBouncer transaction's",
					Workload: w, Mode: m}, get(targetPgfleet, w, m), get(targetBouncerTx, w, m), "PgBouncer transaction", true, 1.3, qps, "%.0f qps"))
			}
		}
	}
	for _, w := range workloads {
		if w == workloadScatter || w == workloadTPCB {
			continue // not one routed query: below
		}
		for _, m := range modes {
			out = append(out, compareTarget(targetCheck{Target: fmt.Sprintf("worker CPU per routed query ≤ %.1f× direct's", workerCPUSlack),
				Workload: w, Mode: m}, get(targetPgfleet, w, m), get(targetDirect, w, m), "direct", false, workerCPUSlack, workerCPU, "%.1f µs"))
		}
	}
	if slices.Contains(workloads, workloadScatter) {
		for _, m := range modes {
			coord, direct := get(targetPgfleet, workloadScatter, m), get(targetDirect, workloadScatter, m)
			out = append(out, compareTarget(targetCheck{Target: "scatter throughput ≥ 0.5× direct's on one table",
				Workload: workloadScatter, Mode: m}, coord, direct, "direct", true, 0.5, qps, "%.0f qps"))
			out = append(out, compareTarget(targetCheck{Target: "scatter worker CPU/query ≤ 1.5× direct's",
				Workload: workloadScatter, Mode: m}, coord, direct, "direct", false, 1.5, workerCPU, "%.0f µs"))
		}
	}
	if slices.Contains(workloads, workloadTPCB) {
		for _, m := range modes {
			var coord *tableRow
			for _, r := range rows {
				if r.Target == targetPgfleet && r.Workload == workloadTPCB && r.Mode == m && r.Rate == 0 && r.Workers >= 2 && (coord == nil || r.Variant == "") {
					coord = r
				}
			}
			c := compareTarget(targetCheck{Target: "tpcb-like across workers ≥ 0.5× direct's TPS on one worker, 0 failed",
				Workload: workloadTPCB, Mode: m}, coord, get(targetDirect, workloadTPCB, m), "direct", true, 0.5, qps, "%.0f tps")
			if coord == nil {
				c.Detail = "no tpcb-like run through a fleet of two or more workers"
			} else if c.Status == targetMet && coord.Failed > 0 {
				c.Status = targetMissed
				c.Detail += fmt.Sprintf("; %d failed", coord.Failed)
			}
			out = append(out, c)
		}
	}
	// The half-peak rows: the same variant, direct, the fleet and
	// PgBouncer.
	for _, r := range rows {
		if r.Target != targetPgfleet || r.Rate == 0 || r.Variant == "" {
			continue
		}
		c := targetCheck{Target: "p99 added at half of peak ≤ PgBouncer's at the same rate", Workload: r.Workload, Mode: r.Mode,
			Status: targetNA, Limit: "<= 1.00"}
		d := byKey[configKey(targetDirect, r.Workload, r.Mode, r.Variant)]
		var p *tableRow
		if ref := pgbouncerReference(r.Mode); ref != "" {
			p = byKey[configKey(ref, r.Workload, r.Mode, r.Variant)]
		}
		switch {
		case !r.OK:
			c.Detail = "no successful open-loop run through the fleet"
		case p == nil || !p.OK:
			c.Detail = "no successful PgBouncer open-loop run at the same rate"
		case p.P99Ms <= 0:
			c.Detail = "PgBouncer's open-loop p99 is 0"
		default:
			// The latency each proxy adds is its p99 less direct's at
			// the same rate, so the coordinator adds no more than
			// PgBouncer exactly when its p99 is no higher: direct's
			// term cancels. (Direct's own tail, above both proxies' in
			// every open-loop run on the 2-core development machine, made
			// the differences negative; the comparison does not depend
			// on it.)
			ratio := r.P99Ms / p.P99Ms
			c.Ratio = &ratio
			c.Detail = fmt.Sprintf("open loop at %.0f/s: p99 %.2f ms through the coordinator, %.2f ms through PgBouncer", r.Rate, r.P99Ms, p.P99Ms)
			if d != nil && d.OK {
				c.Detail += fmt.Sprintf(", %.2f ms direct", d.P99Ms)
			}
			if r.P99Ms <= p.P99Ms {
				c.Status = targetMet
			} else {
				c.Status = targetMissed
			}
		}
		out = append(out, c)
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

// Published per-core figures (shared workloads README): queries per
// second per data-node vCPU and per router vCPU.
const (
	nekiPerDataCore    = 3600
	nekiPerRouterCore  = 7700
	citusPerDataCore   = 6500
	citusPerRouterCore = 6500
)

// markdown renders the router report.
func (rep *routerReport) markdown(rows []*tableRow, jsonName, chartName string) string {
	var sb strings.Builder
	o := rep.Options
	fmt.Fprintf(&sb, "# pgfleet router benchmark, %s\n\n", rep.StartedAt.Format("2006-01-02 15:04:05 MST"))
	loop := "closed loop"
	if o.Rate > 0 {
		loop = fmt.Sprintf("open loop at %.0f transactions/s (pgbench -R; latency from each transaction's scheduled start)", o.Rate)
	}
	fmt.Fprintf(&sb, "pgbench scripts from bench/workloads (one statement per transaction, so QPS = TPS), "+
		"scale %d (%d accounts), %d clients, %d threads, %d s per run after %d s of unmeasured warm-up, %s, median of %d run(s) by QPS. "+
		"*direct*: plain tables in database `%s` on worker 1, no coordinator. *pgfleet*: database `postgres` through "+
		"`pgfleet serve` processes (pgbench's clients split evenly over the coordinators, one pgbench each), "+
		"pgbench_accounts distributed by aid over %d shards spread over the workers, pgbench_branches and "+
		"pgbench_tellers reference tables; pool size %d per coordinator and worker. *PgBouncer*: in front of database `%s`. "+
		"*point-select*: `-f point-select.sql`; *citus-mix*: `-f hot.sql@80 -f uniform.sql@10 -f tellers.sql@5 -f branches.sql@5 -D hot_pct=5`; "+
		"*write*: `-f write.sql` (UPDATE of one account by aid); *scatter*: `-f scatter.sql` (GROUP BY aggregates over a "+
		"range of 1,000 accounts, every shard).\n\n",
		o.Scale, o.Naccounts, o.Clients, o.Jobs, o.DurationSeconds, o.WarmupSeconds, loop, o.Runs, directDB, o.Shards, o.PoolSize, directDB)
	writeStatus(&sb, rep.Interrupted, rep.Error)
	writeTable(&sb, rows, true, true)
	sb.WriteString("\n*vs direct*: QPS over direct's with the same workload and mode (and the same open-loop rate); the row is the median of the runs without error (failed runs are counted in *failed* and listed under Problems seen). *vs PgBouncer*: QPS over PgBouncer " +
		"session mode's (prepared) or transaction mode's (extended). Latency percentiles come from " +
		"pgbench's per-transaction logs. CPU µs/q: CPU time (user+system) during the run divided by the transactions " +
		"completed; relay = the coordinators (summed) or PgBouncer, worker = every worker's postmaster and all its " +
		"children (backends included), pgbench = the load generators. All share the same cores; see bench/README.md. " +
		"Targets given by URL have no CPU figures: their processes are not this tool's.\n\n")
	if chartName != "" {
		fmt.Fprintf(&sb, "Chart: [%s](%s) (throughput and p99 per configuration; latency distribution).\n\n", chartName, chartName)
	}

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
	sb.WriteString("- idle clients' memory (≤ 8 KiB each at 10,000): measured by `pgfleet bench idle`, not here.\n")

	writePerCore(&sb, rows, rep.Machine.Nproc)
	writeMemory(&sb, rows)
	writeGossip(&sb, rep.Gossip)

	sb.WriteString("\n## Data\n\n")
	for _, d := range rep.Data {
		if d.DirectAccounts > 0 {
			fmt.Fprintf(&sb, "- direct: %d accounts in db `%s` on worker1 (want %d)\n", d.DirectAccounts, directDB, d.Naccounts)
		}
		if len(d.PerWorker) > 0 {
			var parts []string
			for _, p := range d.PerWorker {
				parts = append(parts, fmt.Sprintf("%s %d shards / %d rows", p.Worker, p.Shards, p.Rows))
			}
			fmt.Fprintf(&sb, "- routed, %d worker(s): %d accounts in %d shards (%s); %d rows left in the shell table on worker1\n",
				d.Workers, d.RoutedAccounts, d.Shards, strings.Join(parts, ", "), d.ShellAccounts)
		}
		if len(d.Reads) > 0 {
			ok := 0
			for _, r := range d.Reads {
				if r.Error == "" && r.Rows == 1 {
					ok++
				}
			}
			fmt.Fprintf(&sb, "- reads through the coordinator at set-up, %d worker(s) (accounts, tellers, branches by key; prepared, extended "+
				"and simple protocol): %d of %d returned their one row\n", d.Workers, ok, len(d.Reads))
		}
	}
	for _, t := range rep.URLTargets {
		state := "loaded"
		if !t.Loaded {
			state = "not loaded"
		}
		if t.Distributed {
			state += ", distributed with create_distributed_table / create_reference_table"
		}
		fmt.Fprintf(&sb, "- target %s (%s): %s%s%s\n", t.Name, t.URL, state, prefixed("; ", t.Note), prefixed("; error: ", t.Error))
	}

	sb.WriteString("\n")
	writeEveryRun(&sb, rows)
	writeProblems(&sb, rep.Problems, rep.Notes, "no warning or error lines in the coordinators', PgBouncer's or the workers' logs, "+
		"every backend reaped, and the data checks passed.")
	writeEnvironment(&sb, rep.Versions, rep.Machine, jsonName)
	return sb.String()
}

// writePerCore writes the per-core comparison with the published runs:
// queries per CPU-second of each role, from the CPU accounting.
func writePerCore(sb *strings.Builder, rows []*tableRow, nproc int) {
	sb.WriteString("\n## Per core, beside the published runs\n\n")
	sb.WriteString("Queries per second that one core of each role sustains, from the CPU each role spent per query " +
		"in this run (1,000,000 / CPU µs per query): what a larger fleet keeps per core when every role has its own " +
		"cores. The published figures divide each run's throughput by the vCPUs of its data nodes and of its routers " +
		"(shared/workloads README): Neki point-select about 3,600 per data-node vCPU and 7,700 per router vCPU; " +
		"Citus with query routers, the mix, about 6,500 for each.\n\n")
	sb.WriteString("| config | workload | mode | QPS | QPS per coordinator core | vs Neki router | vs Citus router | QPS per worker core | vs Neki data node | vs Citus data node |\n")
	sb.WriteString("|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	n := 0
	for _, r := range rows {
		if !r.OK || r.Rate > 0 || (r.Target != targetPgfleet && r.Target != targetDirect) {
			continue
		}
		coord, vsNekiR, vsCitusR := "–", "–", "–"
		if r.RelayCPU != nil && *r.RelayCPU > 0 {
			per := 1e6 / *r.RelayCPU
			coord = fmt.Sprintf("%.0f", per)
			vsNekiR, vsCitusR = fmt.Sprintf("%.2f", per/nekiPerRouterCore), fmt.Sprintf("%.2f", per/citusPerRouterCore)
		}
		worker, vsNekiD, vsCitusD := "–", "–", "–"
		if r.WorkerCPU > 0 {
			per := 1e6 / r.WorkerCPU
			worker = fmt.Sprintf("%.0f", per)
			vsNekiD, vsCitusD = fmt.Sprintf("%.2f", per/nekiPerDataCore), fmt.Sprintf("%.2f", per/citusPerDataCore)
		}
		fmt.Fprintf(sb, "| %s | %s | %s | %.0f | %s | %s | %s | %s | %s | %s |\n", r.Label, r.Workload, r.Mode, r.QPS,
			coord, vsNekiR, vsCitusR, worker, vsNekiD, vsCitusD)
		n++
	}
	if n == 0 {
		sb.WriteString("| (no successful closed-loop run) | | | | | | | | | |\n")
	}
	if nproc > 0 {
		fmt.Fprintf(sb, "\nOn this machine every role shares %d CPUs with the load generator, so wall-clock throughput per core "+
			"(QPS / %d) understates what dedicated cores give; Neki's and Citus's figures are from dedicated machines "+
			"with 32 to 64 vCPUs, where per-core throughput is usually lower than on one small, hot core.\n", nproc, nproc)
	}
}

// writeMemory writes each configuration's peak memory.
func writeMemory(sb *strings.Builder, rows []*tableRow) {
	sb.WriteString("\n## Peak memory\n\n| config | workload | mode | relays' peak RSS (sum) | workers' peak PSS (sum) |\n|---|---|---|---:|---:|\n")
	for _, r := range rows {
		if !r.OK || (r.RelayRSSKiB == 0 && r.WorkerPss == 0) {
			continue
		}
		relay := "–"
		if r.RelayRSSKiB > 0 {
			relay = fmt.Sprintf("%.1f MiB", float64(r.RelayRSSKiB)/1024)
		}
		fmt.Fprintf(sb, "| %s | %s | %s | %s | %.1f MiB |\n", r.Label, r.Workload, r.Mode, relay, float64(r.WorkerPss)/1024)
	}
	sb.WriteString("\nRelays: VmHWM of each coordinator or PgBouncer process at the end of its run. Workers: the largest " +
		"sum, over samples taken once a second, of the proportional set size of every worker process (shared buffers " +
		"counted once).\n")
}

// problems lists what went wrong: in the set-up, the data checks, the runs
// and the workers' logs.
func (rep *routerReport) problems() []string {
	var out []string
	for _, rr := range rep.SetupCoordinators {
		out = append(out, relayProblems("set-up coordinator (pgbench -i, distribution, read checks)", rr)...)
	}
	for _, c := range rep.Commands {
		if c.Error != "" {
			out = append(out, fmt.Sprintf("set-up: %s: %s", strings.Join(c.Argv, " "), c.Error))
		}
	}
	for _, d := range rep.Data {
		for _, p := range d.Problems {
			out = append(out, fmt.Sprintf("data (%d workers): %s", d.Workers, p))
		}
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
	rep.Targets = evaluateTargets(rows, rep.Options.Modes, b.o.Workloads)
	rep.Problems = rep.problems()
	mdPath, jsonPath := reportPaths(b.o.OutDir, "router", rep.StartedAt)
	rep.MarkdownOut = mdPath
	svgPath := b.writeChart(mdPath, "pgfleet router benchmark, "+rep.StartedAt.Format("2006-01-02 15:04:05 MST"), rep.Configs)
	return b.writeReports(mdPath, rep.markdown(rows, filepath.Base(jsonPath), svgPath), jsonPath, rep)
}
