package bench

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// tableRow is one line of the Markdown table: the median run of a
// configuration. Ratios and relay CPU are nil where they do not apply (null
// in JSON, "–" in Markdown).
type tableRow struct {
	Label       string    `json:"label"`
	Target      string    `json:"target"`
	Workload    string    `json:"workload,omitempty"`
	Mode        string    `json:"mode"`
	Variant     string    `json:"variant,omitempty"`
	Workers     int       `json:"workers,omitempty"`
	Coords      int       `json:"coordinators,omitempty"`
	Rate        float64   `json:"rate,omitempty"`
	External    bool      `json:"external,omitempty"` // a target given by URL: no CPU or memory figures
	OK          bool      `json:"ok"`                 // a run succeeded; the figures below are its
	QPS         float64   `json:"qps"`
	VsDirect    *float64  `json:"ratio_to_direct"`
	VsPgbouncer *float64  `json:"ratio_to_pgbouncer"`
	P50Ms       float64   `json:"p50_ms"`
	P95Ms       float64   `json:"p95_ms"`
	P99Ms       float64   `json:"p99_ms"`
	P999Ms      float64   `json:"p99_9_ms"`
	Failed      int64     `json:"failed"`
	Aborted     int       `json:"aborted_clients"`
	RelayCPU    *float64  `json:"relay_cpu_us_per_query"`
	WorkerCPU   float64   `json:"worker_cpu_us_per_query"`
	PgbenchCPU  float64   `json:"pgbench_cpu_us_per_query"`
	RelayRSSKiB int64     `json:"relay_peak_rss_kib,omitempty"`
	WorkerPss   int64     `json:"worker_peak_pss_kib,omitempty"`
	Note        string    `json:"note,omitempty"`
	RunsQPS     []float64 `json:"runs_qps"`
	RunsOK      int       `json:"runs_ok"`
	RunsFailed  []int     `json:"runs_failed,omitempty"` // run numbers with an error (not candidates for the median)
}

// pgbouncerReference is the PgBouncer target a mode is compared with.
func pgbouncerReference(mode string) string {
	switch mode {
	case modePrepared:
		return targetBouncerSess
	case modeExtended:
		return targetBouncerTx
	}
	return ""
}

// buildRows fills each configuration's median run and row. A row's
// references are the configurations with the same workload, mode and
// variant: direct, and the PgBouncer target of its mode
// (pgbouncerReference); a closed-loop row of the ladder without references
// of its own compares with the main ones.
func buildRows(configs []*configResult) []*tableRow {
	byKey := map[string]*tableRow{}
	var rows []*tableRow
	for _, c := range configs {
		row := medianRow(c)
		byKey[configKey(c.Target, c.Workload, c.Mode, c.Variant)] = row
		rows = append(rows, row)
	}
	ref := func(target string, row *tableRow) *tableRow {
		r := byKey[configKey(target, row.Workload, row.Mode, row.Variant)]
		if r == nil && row.Rate == 0 {
			r = byKey[configKey(target, row.Workload, row.Mode, "")]
		}
		if r == nil || !r.OK || r.QPS <= 0 {
			return nil
		}
		return r
	}
	for _, row := range rows {
		if !row.OK {
			continue
		}
		if d := ref(targetDirect, row); d != nil {
			v := row.QPS / d.QPS
			row.VsDirect = &v
		}
		if bt := pgbouncerReference(row.Mode); bt != "" {
			if p := ref(bt, row); p != nil {
				v := row.QPS / p.QPS
				row.VsPgbouncer = &v
			}
		}
	}
	return rows
}

// medianRow picks c's median run and makes its table row (without ratios).
func medianRow(c *configResult) *tableRow {
	row := &tableRow{Label: c.Label, Target: c.Target, Workload: c.Workload, Mode: c.Mode, Variant: c.Variant,
		Workers: c.Workers, Coords: c.Coordinators, Rate: c.Rate, External: strings.HasPrefix(c.Target, "url:")}
	for _, r := range c.Runs {
		row.RunsQPS = append(row.RunsQPS, r.Summary.TPS)
	}
	c.Median = medianRun(c.Runs)
	switch {
	case c.Skipped != "":
		row.Note = "skipped: " + c.Skipped
	case c.Median < 0:
		row.Note = "no successful run"
		if len(c.Runs) > 0 {
			row.Note += ": " + trunc(c.Runs[len(c.Runs)-1].Error, 200)
		}
	default:
		m := c.Runs[c.Median]
		row.OK, row.QPS = true, m.Summary.TPS
		row.P50Ms, row.P95Ms = float64(m.Latency.P50)/1000, float64(m.Latency.P95)/1000
		row.P99Ms, row.P999Ms = float64(m.Latency.P99)/1000, float64(m.Latency.P999)/1000
		row.Failed, row.Aborted = m.Summary.Failed, m.Summary.AbortedClients
		if len(m.Relays) > 0 {
			v := m.CPU.RelayPerQuery
			row.RelayCPU = &v
		}
		row.RelayRSSKiB, row.WorkerPss = m.Memory.RelayPeakRSSKiB, m.Memory.WorkerPeakPssKiB
		row.WorkerCPU, row.PgbenchCPU = m.CPU.WorkerPerQuery, m.CPU.PgbenchPerQuery
	}
	for _, r := range c.Runs {
		if r.Error == "" {
			row.RunsOK++
		} else {
			row.RunsFailed = append(row.RunsFailed, r.Run)
		}
	}
	c.Row = row
	return row
}

// markdown renders the report.
func (rep *relayReport) markdown(rows []*tableRow, jsonName string) string {
	var sb strings.Builder
	o := rep.Options
	fmt.Fprintf(&sb, "# pgfleet relay benchmark, %s\n\n", rep.StartedAt.Format("2006-01-02 15:04:05 MST"))
	fmt.Fprintf(&sb, "pgbench -S (built-in select-only script: one SELECT per transaction, so QPS = TPS), "+
		"scale %d, %d clients, %d threads, %d s per run after %d s of unmeasured warm-up, median of %d run(s) by QPS; pool size %d for pgfleet and PgBouncer; "+
		"one PostgreSQL worker.\n\n", o.Scale, o.Clients, o.Jobs, o.DurationSeconds, o.WarmupSeconds, o.Runs, o.PoolSize)
	writeStatus(&sb, rep.Interrupted, rep.Error)
	writeTable(&sb, rows, false, false)
	sb.WriteString("\n*vs direct*: QPS over direct PostgreSQL's in the same mode. *vs PgBouncer*: QPS over PgBouncer session mode's " +
		"(prepared) or transaction mode's (extended); simple has no PgBouncer reference. Latency percentiles come from " +
		"pgbench's per-transaction logs. CPU µs/q: CPU time (user+system) during the run divided by the transactions " +
		"completed; relay = the coordinator or PgBouncer process, worker = the postmaster and all its children " +
		"(backends included), pgbench = the load generator. All share the same cores; see bench/README.md.\n\n")

	writeEveryRun(&sb, rows)
	writeProblems(&sb, rep.Problems, rep.Notes, "no warning or error lines in the relays' or the worker's logs, and every backend reaped.")
	writeEnvironment(&sb, rep.Versions, rep.Machine, jsonName)
	return sb.String()
}

// writeStatus says when the report is partial.
func writeStatus(sb *strings.Builder, interrupted bool, runErr string) {
	if interrupted {
		sb.WriteString("**Interrupted: partial results.**\n\n")
	} else if runErr != "" {
		fmt.Fprintf(sb, "**Stopped early: %s**\n\n", oneLine(runErr))
	}
}

// writeTable writes the main table: a workload column when withWorkload, and
// in the failed cell how many runs failed when countFailedRuns.
func writeTable(sb *strings.Builder, rows []*tableRow, withWorkload, countFailedRuns bool) {
	head, align := "| config | mode |", "|---|---|"
	if withWorkload {
		head, align = "| config | workload | mode |", "|---|---|---|"
	}
	sb.WriteString(head + " QPS | vs direct | vs PgBouncer | p50 ms | p95 ms | p99 ms | p99.9 ms | failed | relay CPU µs/q | worker CPU µs/q | pgbench CPU µs/q |\n")
	sb.WriteString(align + strings.Repeat("---:|", 11) + "\n")
	for _, r := range rows {
		config := r.Label
		if withWorkload {
			config += " | " + r.Workload
		}
		if !r.OK {
			fmt.Fprintf(sb, "| %s | %s | – | – | – | – | – | – | – | %s | – | – | – |\n", config, r.Mode, mdCell(r.Note))
			continue
		}
		failed := fmt.Sprint(r.Failed)
		if r.Aborted > 0 {
			failed += fmt.Sprintf(" (+%d clients aborted)", r.Aborted)
		}
		if n := len(r.RunsFailed); countFailedRuns && n > 0 {
			failed += fmt.Sprintf("; %d of %d runs failed", n, len(r.RunsQPS))
		}
		worker := fmt.Sprintf("%.1f", r.WorkerCPU)
		if r.External {
			worker = "–"
		}
		fmt.Fprintf(sb, "| %s | %s | %.0f | %s | %s | %.2f | %.2f | %.2f | %.2f | %s | %s | %s | %.1f |\n",
			config, r.Mode, r.QPS, optional(r.VsDirect, "%.2f"), optional(r.VsPgbouncer, "%.2f"),
			r.P50Ms, r.P95Ms, r.P99Ms, r.P999Ms, failed, optional(r.RelayCPU, "%.1f"), worker, r.PgbenchCPU)
	}
}

// writeProblems writes the "Problems seen" section, ending "None: ..." with
// noneTail when there are none, and the notes.
func writeProblems(sb *strings.Builder, problems, notes []string, noneTail string) {
	sb.WriteString("\n## Problems seen\n\n")
	if len(problems) == 0 {
		sb.WriteString("None: every run exited 0, with no failed transactions, no aborted clients, " + noneTail + "\n")
	}
	for _, p := range problems {
		fmt.Fprintf(sb, "- %s\n", oneLine(p))
	}
	if len(notes) > 0 {
		sb.WriteString("\n## Notes\n\n")
		for _, n := range notes {
			fmt.Fprintf(sb, "- %s\n", oneLine(n))
		}
	}
}

// writeEveryRun writes the "Every run (QPS)" section.
func writeEveryRun(sb *strings.Builder, rows []*tableRow) {
	withWorkload := false
	for _, r := range rows {
		withWorkload = withWorkload || r.Workload != ""
	}
	if withWorkload {
		sb.WriteString("## Every run (QPS)\n\n| config | workload | mode | QPS per run | min | max | spread |\n|---|---|---|---|---:|---:|---:|\n")
	} else {
		sb.WriteString("## Every run (QPS)\n\n| config | mode | QPS per run | min | max | spread |\n|---|---|---|---:|---:|---:|\n")
	}
	for _, r := range rows {
		if len(r.RunsQPS) == 0 {
			continue
		}
		lo, hi := math.Inf(1), math.Inf(-1)
		var parts []string
		for i, q := range r.RunsQPS {
			part := fmt.Sprintf("%.0f", q)
			if slices.Contains(r.RunsFailed, i+1) {
				part += " (failed)"
			}
			parts = append(parts, part)
			lo, hi = math.Min(lo, q), math.Max(hi, q)
		}
		spread := "–"
		if lo > 0 {
			spread = fmt.Sprintf("%.1f%%", (hi-lo)/lo*100)
		}
		label := r.Label
		if withWorkload {
			label += " | " + r.Workload
		}
		fmt.Fprintf(sb, "| %s | %s | %s | %.0f | %.0f | %s |\n", label, r.Mode, strings.Join(parts, ", "), lo, hi, spread)
	}
}

// writeEnvironment writes the "Environment" section.
func writeEnvironment(sb *strings.Builder, v versions, m machine, jsonName string) {
	sb.WriteString("\n## Environment\n\n")
	fmt.Fprintf(sb, "- pgfleet %s (%s)\n", v.Pgfleet, v.Go)
	fmt.Fprintf(sb, "- %s; %s", v.Postgres, v.Pgbench)
	if v.Pgbouncer != "" {
		fmt.Fprintf(sb, "; %s", v.Pgbouncer)
	}
	sb.WriteString("\n")
	fmt.Fprintf(sb, "- %d CPUs (%s), %s, %s; load average at start %s, at end %s\n", m.Nproc, m.CPUModel, m.MemTotal, m.Kernel,
		loadTriple(m.LoadAvgStart), loadTriple(m.LoadAvgEnd))
	if jsonName != "" {
		fmt.Fprintf(sb, "- every figure and command: %s\n", jsonName)
	}
}

// problems lists what went wrong in the runs, for the report.
func (rep *relayReport) problems() []string {
	out := runProblems(rep.Configs)
	if w := rep.Worker; w.NLog > 0 {
		out = append(out, workerLogProblem(w))
	}
	return out
}

// workerLogProblem summarises the warning and error lines of a worker's log.
func workerLogProblem(w workerInfo) string {
	name := "PostgreSQL worker"
	if w.Name != "" {
		name += " " + w.Name
	}
	msg := fmt.Sprintf("%s log: %d warning/error lines", name, w.NLog)
	if len(w.Log) > 0 {
		msg += ", first: " + w.Log[0]
	}
	return msg
}

// runProblems lists what went wrong in the configurations' runs.
func runProblems(configs []*configResult) []string {
	var out []string
	for _, c := range configs {
		for _, r := range c.Runs {
			where := fmt.Sprintf("%s %s run %d", c.Label, c.Mode, r.Run)
			if c.Workload != "" {
				where = fmt.Sprintf("%s %s %s run %d", c.Label, c.Workload, c.Mode, r.Run)
			}
			if r.Error != "" {
				out = append(out, where+": "+r.Error)
			}
			if r.Summary.Failed > 0 {
				out = append(out, fmt.Sprintf("%s: %d failed transactions", where, r.Summary.Failed))
			}
			if r.Summary.AbortedClients > 0 {
				msg := fmt.Sprintf("%s: %d clients aborted", where, r.Summary.AbortedClients)
				if len(r.Aborts) > 0 {
					a := r.Aborts[0]
					msg += fmt.Sprintf(", first: client %d after %d logged transactions", a.Client, a.Transactions)
					if a.Transactions > 0 {
						msg += fmt.Sprintf(" (its last %.2f s after the run's first)", a.LastTxAt)
					}
					msg += ": " + a.Message
				} else if len(r.Summary.FirstAbortMessages) > 0 {
					msg += ", first: " + r.Summary.FirstAbortMessages[0]
				}
				out = append(out, msg)
			}
			if r.TxLog != nil && (r.TxLog.Failed > 0 || r.TxLog.Malformed > 0) {
				out = append(out, fmt.Sprintf("%s: per-transaction log has %d failed and %d unreadable lines", where, r.TxLog.Failed, r.TxLog.Malformed))
			}
			if r.CPU.BackendsLeft > 0 {
				out = append(out, fmt.Sprintf("%s: %d worker backends still running 2 s after the run (their CPU is counted while alive)", where, r.CPU.BackendsLeft))
			}
			for _, rr := range r.Relays {
				out = append(out, relayProblems(where, rr)...)
			}
		}
	}
	return out
}

// relayProblems lists what went wrong with one relay process.
func relayProblems(where string, rr *relayRun) []string {
	var out []string
	if rr.ExitedEarly {
		out = append(out, fmt.Sprintf("%s: the relay exited before it was stopped (%s)", where, rr.Exit))
	}
	if rr.Killed {
		out = append(out, where+": the relay did not stop within 10 s of SIGTERM and was killed")
	}
	if rr.ProblemCount > 0 {
		msg := fmt.Sprintf("%s: %d warning/error lines in the relay's log", where, rr.ProblemCount)
		if len(rr.LogProblems) > 0 {
			msg += ", first: " + rr.LogProblems[0]
		}
		out = append(out, msg)
	}
	return out
}

func (b *relayBench) finish(runErr error, interrupted bool) error {
	rep := b.rep
	rep.FinishedAt, rep.Interrupted, rep.Error = time.Now(), interrupted, errText(runErr)
	rep.Machine.LoadAvgEnd = loadAvg()
	if !anyRuns(rep.Configs) {
		return nil
	}
	rows := buildRows(rep.Configs)
	rep.Problems = rep.problems()
	mdPath, jsonPath := reportPaths(b.o.OutDir, "relay", rep.StartedAt)
	rep.MarkdownOut = mdPath
	b.writeChart(mdPath, "pgfleet relay benchmark, "+rep.StartedAt.Format("2006-01-02 15:04:05 MST"), rep.Configs)
	return b.writeReports(mdPath, rep.markdown(rows, filepath.Base(jsonPath)), jsonPath, rep)
}

// anyRuns tells whether a configuration has a run.
func anyRuns(configs []*configResult) bool {
	for _, c := range configs {
		if len(c.Runs) > 0 {
			return true
		}
	}
	return false
}

// reportPaths are the Markdown and JSON reports of the benchmark name
// started at t.
func reportPaths(outDir, name string, t time.Time) (mdPath, jsonPath string) {
	stamp := t.Format("20060102-150405")
	return filepath.Join(outDir, name+"-"+stamp+".md"), filepath.Join(outDir, name+"-"+stamp+".json")
}

// writeChart writes the SVG chart of configs beside the Markdown report at
// mdPath and returns its base name ("" when it could not). Only the median
// runs keep their latency distribution, which keeps the JSON small.
func (b *base) writeChart(mdPath, title string, configs []*configResult) string {
	for _, c := range configs {
		for i := range c.Runs {
			if i != c.Median {
				c.Runs[i].CDF = nil
			}
		}
	}
	svgPath := strings.TrimSuffix(mdPath, ".md") + ".svg"
	if err := writeChartFile(svgPath, title, chartPointsFromConfigs(configs)); err != nil {
		b.logf("chart: %v", err)
		return ""
	}
	return filepath.Base(svgPath)
}

// writeReports prints md and writes it to mdPath and rep as JSON to
// jsonPath.
func (b *base) writeReports(mdPath, md, jsonPath string, rep any) error {
	fmt.Fprint(b.out, "\n"+md)
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the JSON report: %w", err)
	}
	if err := os.WriteFile(mdPath, []byte(md), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(jsonPath, append(js, '\n'), 0o644); err != nil {
		return err
	}
	b.logf("wrote %s and %s (and the chart beside them, .svg)", mdPath, jsonPath)
	return nil
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// optional formats *v, or "–" for nil.
func optional(v *float64, format string) string {
	if v == nil {
		return "–"
	}
	return fmt.Sprintf(format, *v)
}

// mdCell makes s safe inside a Markdown table cell.
func mdCell(s string) string {
	return strings.ReplaceAll(oneLine(s), "|", "\\|")
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// loadTriple is the three load averages of a /proc/loadavg line.
func loadTriple(s string) string {
	f := strings.Fields(s)
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func runtimeVersion() string { return runtime.Version() }
