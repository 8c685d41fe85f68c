package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// runSpec is one measured run: what to start, what pgbench runs and which
// PostgreSQL servers' CPU to count. Every benchmark shares it.
type runSpec struct {
	Target, Mode string
	Workload     string // "" for the relay benchmark's pgbench -S
	Run          int    // 1-based

	// Workers are the postmasters whose CPU is counted (their own, their
	// reaped and their live children's). None for a target given by URL.
	Workers []*workerProc
	// StartRelays starts the relays (coordinators or PgBouncer) for this
	// run; nil means pgbench connects to Conn directly. With several relays
	// the clients are split over them evenly, one pgbench process each.
	StartRelays func(context.Context) ([]*child, []*relayRun, error)
	// Conn is pgbench's connection arguments without relays: -h H -p P -U
	// USER DB, or one connection URL.
	Conn []string
	// Database is the database pgbench uses through the relays.
	Database string
	// Script is pgbench's workload arguments: -S, or -f FILE@W ... -D NAME=V.
	Script []string
	// Env is added to pgbench's environment (PGPASSWORD for a URL target).
	Env []string

	Clients, Jobs int
	// Rate is the total transactions per second for pgbench -R (open loop;
	// latency then counts from each transaction's scheduled start); 0 runs
	// closed-loop.
	Rate     float64
	Duration time.Duration // pgbench -T, rounded up to whole seconds
	// Warmup runs the same pgbench, unmeasured, for this long first (after
	// the relays start, so their pools and statement caches are warm).
	Warmup  time.Duration
	Pgbench string // pgbench binary
	Dir     string // parent of the run's per-transaction log directory
	Hz      int    // clock ticks per second
	// Cur, when not nil, holds the running relays while the run lasts, so
	// that the benchmark's cleanup can stop them on an interrupt.
	Cur *[]*child
}

// workerProc is a PostgreSQL server whose CPU a run measures.
type workerProc struct {
	Name string
	Pid  int // postmaster
}

// workerCPU is one worker's share of a run's CPU (only reported when a run
// measures more than one worker).
type workerCPU struct {
	Name         string  `json:"name"`
	Before       treeCPU `json:"before"`
	After        treeCPU `json:"after"`
	Micros       float64 `json:"us"`
	BackendsLeft int     `json:"backends_left"`
}

// durationSeconds is pgbench -T for d: whole seconds, rounded up.
func durationSeconds(d time.Duration) int {
	return int((d + time.Second - 1) / time.Second)
}

// pgbenchRunArgv is the pgbench command line of a measured run; rate 0 is
// closed-loop, logPrefix "" writes no per-transaction log (warm-up).
func pgbenchRunArgv(pgbench string, script []string, mode string, clients, jobs, seconds int, rate float64, logPrefix string, conn []string) []string {
	argv := append([]string{pgbench, "-n"}, script...)
	argv = append(argv, "-M", mode, "-c", strconv.Itoa(clients), "-j", strconv.Itoa(jobs),
		"-T", strconv.Itoa(seconds))
	if rate > 0 {
		argv = append(argv, "-R", strconv.FormatFloat(rate, 'f', 1, 64))
	}
	if logPrefix != "" {
		argv = append(argv, "--log", "--log-prefix="+logPrefix)
	}
	return append(argv, conn...)
}

// hostConn is pgbench's connection arguments for a server on host:port.
func hostConn(host string, port int, db string) []string {
	return []string{"-h", host, "-p", strconv.Itoa(port), "-U", "postgres", db}
}

// splitEven divides n into k shares that differ by at most one, larger
// first.
func splitEven(n, k int) []int {
	out := make([]int, k)
	for i := range out {
		out[i] = n / k
		if i < n%k {
			out[i]++
		}
	}
	return out
}

// pgbenchProc is one pgbench process of a run.
type pgbenchProc struct {
	argv           []string
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	err            error
}

// measureRun runs pgbench once as s says and measures it: CPU of the relays
// and of the workers before and after, peak memory, pgbench's summary and
// per-transaction logs. Any problem is in the result's Error.
func measureRun(ctx context.Context, s runSpec) (res runResult) {
	res = runResult{Target: s.Target, Mode: s.Mode, Workload: s.Workload, Run: s.Run, StartedAt: time.Now(), Rate: s.Rate}
	baselines := make([]treeCPU, len(s.Workers))
	for i, w := range s.Workers {
		if st, err := readStat(w.Pid); err != nil || st.State == "Z" {
			res.Error = fmt.Sprintf("the PostgreSQL worker %s is not running", w.Name)
			return res
		}
		// Children of the postmaster now are its background processes (and
		// any connection another component holds); any other child at the
		// end belongs to this run.
		t, err := readTree(w.Pid)
		if err != nil {
			res.Error = fmt.Sprintf("reading /proc for the postmaster of %s: %v", w.Name, err)
			return res
		}
		baselines[i] = t
	}
	conns := [][]string{s.Conn}
	var relays []*child
	if s.StartRelays != nil {
		var err error
		relays, res.Relays, err = s.StartRelays(ctx)
		if err != nil {
			for _, r := range relays {
				r.Stop(syscall.SIGTERM, 10*time.Second)
			}
			res.Error = err.Error()
			return res
		}
		if s.Cur != nil {
			*s.Cur = relays
		}
		conns = nil
		for _, rr := range res.Relays {
			host, port, _ := strings.Cut(rr.Addr, ":")
			conns = append(conns, hostConn(host, atoiOr(port, 0), s.Database))
		}
	}
	stopRelays := func() {
		for i, relay := range relays {
			rr := res.Relays[i]
			rr.ExitedEarly = relay.Exited()
			rr.Killed = relay.Stop(syscall.SIGTERM, 10*time.Second)
			rr.Exit = relay.ExitStatus()
			rr.LogProblems, rr.ProblemCount = logProblems(relay.LogPath, 20)
			rr.LogTail = tailFile(relay.LogPath, 2048)
		}
		if s.Cur != nil {
			*s.Cur = nil
		}
		relays = nil
	}
	defer stopRelays()

	logDir, err := os.MkdirTemp(s.Dir, "txlog-")
	if err != nil {
		res.Error = err.Error()
		return res
	}
	defer os.RemoveAll(logDir)
	const logPrefix = "pgbench_log"
	clients := splitEven(s.Clients, len(conns))
	jobs := splitEven(s.Jobs, len(conns))
	env := append([]string{"PGSSLMODE=disable", "PGCONNECT_TIMEOUT=10"}, s.Env...)
	// newProcs makes one pgbench per connection; logPrefix "" logs nothing.
	newProcs := func(d time.Duration, logPrefix string) []*pgbenchProc {
		procs := make([]*pgbenchProc, len(conns))
		for i, conn := range conns {
			rate := 0.0
			if s.Rate > 0 {
				rate = s.Rate * float64(clients[i]) / float64(s.Clients)
			}
			// Each process logs under its own prefix (pgbench_log.p<i>.<pid>...),
			// all read together afterwards.
			prefix := ""
			if logPrefix != "" {
				prefix = filepath.Join(logDir, fmt.Sprintf("%s.p%d", logPrefix, i))
			}
			procs[i] = &pgbenchProc{argv: pgbenchRunArgv(s.Pgbench, s.Script, s.Mode, clients[i], max(1, min(jobs[i], clients[i])),
				durationSeconds(d), rate, prefix, conn)}
		}
		return procs
	}
	if s.Warmup > 0 {
		warm := newProcs(s.Warmup, "")
		wctx, cancel := context.WithTimeout(ctx, s.Warmup+90*time.Second)
		runProcs(wctx, warm, env, logDir)
		cancel()
		for _, p := range warm {
			res.Pgbench = append(res.Pgbench, commandRecord{What: "pgbench warm-up", Argv: redactArgv(p.argv),
				Env: redactEnv(env), Exit: exitText(p.cmd)})
			if p.err != nil {
				res.Error = fmt.Sprintf("warm-up: pgbench: %v%s", p.err, prefixed(": ", pgbenchErrorLine(p.stderr.String())))
				return res
			}
		}
	}
	procs := newProcs(s.Duration, logPrefix)
	measured := len(res.Pgbench) // index of the first measured pgbench's record
	for _, p := range procs {
		res.Pgbench = append(res.Pgbench, commandRecord{What: "pgbench run", Argv: redactArgv(p.argv), Env: redactEnv(env)})
	}

	relayBefore := make([]uint64, len(relays))
	for i, relay := range relays {
		st, err := readStat(relay.Pid())
		if err != nil {
			res.Error = fmt.Sprintf("reading /proc for the relay: %v", err)
			return res
		}
		relayBefore[i] = st.Self()
	}
	before := make([]treeCPU, len(s.Workers))
	for i, w := range s.Workers {
		if before[i], err = readTree(w.Pid); err != nil {
			res.Error = fmt.Sprintf("reading /proc for the postmaster of %s: %v", w.Name, err)
			return res
		}
	}
	var pids []int
	for _, w := range s.Workers {
		pids = append(pids, w.Pid)
	}
	sampler := startPssSampler(pids, time.Second)

	// pgbench: bounded by its -T plus a margin; on cancellation it gets
	// SIGINT, then SIGKILL after 10 s.
	limit := s.Duration + 90*time.Second
	pctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	start := time.Now()
	runProcs(pctx, procs, env, logDir)
	res.WallSeconds = time.Since(start).Seconds()
	res.Memory.WorkerPeakPssKiB = sampler.stop()

	var stdouts, stderrs []string
	for i, p := range procs {
		rec := &res.Pgbench[measured+i]
		rec.Seconds, rec.Exit = res.WallSeconds, exitText(p.cmd)
		stdouts = append(stdouts, p.stdout.String())
		stderrs = append(stderrs, p.stderr.String())
		if ps := p.cmd.ProcessState; ps != nil {
			if res.ExitCode == 0 {
				res.ExitCode = ps.ExitCode()
			}
			res.CPU.PgbenchUserMicros += float64(ps.UserTime().Microseconds())
			res.CPU.PgbenchSysMicros += float64(ps.SystemTime().Microseconds())
			if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
				res.Memory.PgbenchMaxRSSKiB = max(res.Memory.PgbenchMaxRSSKiB, ru.Maxrss)
			}
		}
	}
	res.Stdout = strings.Join(stdouts, "\n")
	res.Stderr = tailString(strings.Join(stderrs, "\n"), 4096)
	res.CPU.PgbenchMicros = res.CPU.PgbenchUserMicros + res.CPU.PgbenchSysMicros

	// The relays' CPU and peak memory now, before they are stopped; then
	// stop them so that their server connections close and the workers reap
	// their backends.
	for i, relay := range relays {
		if st, err := readStat(relay.Pid()); err == nil && !relay.Exited() {
			res.CPU.RelayMicros += ticksToMicros(st.Self()-relayBefore[i], s.Hz)
			res.Relays[i].PeakRSSKiB = readStatusKiB(relay.Pid(), "VmHWM")
			res.Memory.RelayPeakRSSKiB += res.Relays[i].PeakRSSKiB
		} else {
			res.Error = appendErr(res.Error, "the relay process exited during the run: "+relay.ExitStatus())
		}
	}
	stopRelays()
	for i, w := range s.Workers {
		left := waitChildrenGone(w.Pid, baselines[i].Children, 2*time.Second)
		after, err := readTree(w.Pid)
		// A backend counted live before that has exited but is not reaped
		// yet (a zombie: in neither count) makes the total go back; on a
		// loaded machine the postmaster reaps it a moment later.
		for try := 0; err == nil && after.Ticks < before[i].Ticks && try < 20; try++ {
			time.Sleep(100 * time.Millisecond)
			after, err = readTree(w.Pid)
		}
		if err != nil {
			res.Error = appendErr(res.Error, fmt.Sprintf("reading /proc for the postmaster of %s: %v", w.Name, err))
		}
		var us float64
		if after.Ticks >= before[i].Ticks {
			us = ticksToMicros(after.Ticks-before[i].Ticks, s.Hz)
		}
		res.CPU.BackendsLeft += left
		res.CPU.WorkerMicros += us
		if i == 0 {
			res.CPU.WorkerBefore, res.CPU.WorkerAfter = before[i], after
		}
		if len(s.Workers) > 1 {
			res.CPU.PerWorker = append(res.CPU.PerWorker, workerCPU{Name: w.Name, Before: before[i], After: after,
				Micros: us, BackendsLeft: left})
		}
	}
	res.LoadAvgAfter = loadAvg()

	var perr error
	for i, p := range procs {
		sum, err := parsePgbenchOutput(stdouts[i], stderrs[i])
		if i == 0 {
			res.Summary = sum
		} else {
			res.Summary.add(sum)
		}
		if err != nil && perr == nil {
			perr = err
		}
		if p.err != nil {
			msg := fmt.Sprintf("pgbench: %v", p.err)
			if pctx.Err() == context.DeadlineExceeded {
				msg = fmt.Sprintf("pgbench did not finish within %s and was stopped", limit)
			} else if ctx.Err() != nil {
				msg = "interrupted"
			}
			if l := pgbenchErrorLine(stderrs[i]); l != "" {
				msg += ": " + l
			}
			res.Error = appendErr(res.Error, msg)
		}
	}
	if perr != nil && res.Error == "" {
		res.Error = perr.Error()
	}
	if perr == nil {
		if l, err := readTxLogs(logDir, logPrefix); err != nil {
			res.Error = appendErr(res.Error, "per-transaction log: "+err.Error())
		} else {
			res.TxLog = l
			res.Latency = l.stats()
			res.CDF = latencyCDF(l.latencies, chartCDFPoints)
			res.Aborts = abortDetails(res.Summary.FirstAbortMessages, l)
			l.latencies, l.clients = nil, nil
		}
	}
	if res.Aborts == nil {
		res.Aborts = abortDetails(res.Summary.FirstAbortMessages, nil)
	}
	if q := float64(res.Summary.Transactions); q > 0 {
		res.CPU.RelayPerQuery = res.CPU.RelayMicros / q
		res.CPU.WorkerPerQuery = res.CPU.WorkerMicros / q
		res.CPU.PgbenchPerQuery = res.CPU.PgbenchMicros / q
	}
	return res
}

// runProcs runs pgbench processes together in dir and waits for all of
// them. On cancellation each gets SIGINT, then SIGKILL after 10 s.
func runProcs(ctx context.Context, procs []*pgbenchProc, env []string, dir string) {
	var wg sync.WaitGroup
	for _, p := range procs {
		p.cmd = exec.CommandContext(ctx, p.argv[0], p.argv[1:]...)
		p.cmd.Env = cleanEnv(env...)
		p.cmd.Dir = dir
		p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		cmd := p.cmd
		p.cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGINT) }
		p.cmd.WaitDelay = 10 * time.Second
		wg.Add(1)
		go func() { defer wg.Done(); p.err = cmd.Run() }()
	}
	wg.Wait()
}

// exitText is how a finished command ended, "" before it has.
func exitText(cmd *exec.Cmd) string {
	if cmd == nil || cmd.ProcessState == nil {
		return ""
	}
	return cmd.ProcessState.String()
}

// redactArgv hides the password of a connection URL in a recorded command.
func redactArgv(argv []string) []string {
	out := append([]string(nil), argv...)
	for i, a := range out {
		out[i] = redactURL(a)
	}
	return out
}

func redactEnv(env []string) []string {
	var out []string
	for _, e := range env {
		if strings.HasPrefix(e, "PGPASSWORD=") {
			e = "PGPASSWORD=..."
		}
		out = append(out, e)
	}
	return out
}
