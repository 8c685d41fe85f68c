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
	"syscall"
	"time"
)

// runSpec is one measured pgbench run: what to start, what to run and which
// PostgreSQL servers' CPU to count. The relay and router benchmarks share it.
type runSpec struct {
	Target, Mode string
	Workload     string // "" for the relay benchmark's pgbench -S
	Run          int    // 1-based

	// Workers are the postmasters whose CPU is counted (their own, their
	// reaped and their live children's); at least one.
	Workers []*workerProc
	// StartRelay starts the relay (coordinator or PgBouncer) for this run;
	// nil means pgbench connects to Host:Port directly.
	StartRelay func(context.Context) (*child, *relayRun, error)
	Host       string
	Port       int
	Database   string
	// Script is pgbench's workload arguments: -S, or -f FILE@W ... -D NAME=V.
	Script []string

	Clients, Jobs int
	Duration      time.Duration // pgbench -T, rounded up to whole seconds
	Pgbench       string        // pgbench binary
	Dir           string        // parent of the run's per-transaction log directory
	Hz            int           // clock ticks per second
	// Cur, when not nil, points at the running relay while the run lasts, so
	// that the benchmark's cleanup can stop it on an interrupt.
	Cur **child
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

// seconds is pgbench -T for d: whole seconds, rounded up.
func durationSeconds(d time.Duration) int {
	return int((d + time.Second - 1) / time.Second)
}

// pgbenchRunArgv is the pgbench command line of a measured run.
func pgbenchRunArgv(pgbench string, script []string, mode string, clients, jobs, seconds int, logPrefix, host string, port int, db string) []string {
	argv := append([]string{pgbench, "-n"}, script...)
	return append(argv, "-M", mode, "-c", strconv.Itoa(clients), "-j", strconv.Itoa(jobs),
		"-T", strconv.Itoa(seconds), "--log", "--log-prefix="+logPrefix,
		"-h", host, "-p", strconv.Itoa(port), "-U", "postgres", db)
}

// measureRun runs pgbench once as s says and measures it: CPU of the relay
// and of the workers before and after, pgbench's summary and per-transaction
// logs. Any problem is in the result's Error.
func measureRun(ctx context.Context, s runSpec) (res runResult) {
	res = runResult{Target: s.Target, Mode: s.Mode, Workload: s.Workload, Run: s.Run, StartedAt: time.Now()}
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
	host, port := s.Host, s.Port
	var relay *child
	if s.StartRelay != nil {
		var rr *relayRun
		var err error
		relay, rr, err = s.StartRelay(ctx)
		res.Relay = rr
		if err != nil {
			res.Error = err.Error()
			return res
		}
		if s.Cur != nil {
			*s.Cur = relay
		}
		host, port = "127.0.0.1", atoiOr(rr.Addr[strings.LastIndexByte(rr.Addr, ':')+1:], 0)
	}
	stopRelay := func() {
		if relay == nil {
			return
		}
		res.Relay.ExitedEarly = relay.Exited()
		res.Relay.Killed = relay.Stop(syscall.SIGTERM, 10*time.Second)
		res.Relay.Exit = relay.ExitStatus()
		res.Relay.LogProblems, res.Relay.ProblemCount = logProblems(relay.LogPath, 20)
		res.Relay.LogTail = tailFile(relay.LogPath, 2048)
		if s.Cur != nil {
			*s.Cur = nil
		}
		relay = nil
	}
	defer stopRelay()

	logDir, err := os.MkdirTemp(s.Dir, "txlog-")
	if err != nil {
		res.Error = err.Error()
		return res
	}
	defer os.RemoveAll(logDir)
	const logPrefix = "pgbench_log"
	argv := pgbenchRunArgv(s.Pgbench, s.Script, s.Mode, s.Clients, s.Jobs, durationSeconds(s.Duration),
		filepath.Join(logDir, logPrefix), host, port, s.Database)
	env := []string{"PGSSLMODE=disable", "PGCONNECT_TIMEOUT=10"}
	res.Pgbench = commandRecord{What: "pgbench run", Argv: argv, Env: env}

	var relayBefore uint64
	if relay != nil {
		st, err := readStat(relay.Pid())
		if err != nil {
			res.Error = fmt.Sprintf("reading /proc for the relay: %v", err)
			return res
		}
		relayBefore = st.Self()
	}
	before := make([]treeCPU, len(s.Workers))
	for i, w := range s.Workers {
		if before[i], err = readTree(w.Pid); err != nil {
			res.Error = fmt.Sprintf("reading /proc for the postmaster of %s: %v", w.Name, err)
			return res
		}
	}

	// pgbench: bounded by its -T plus a margin; on cancellation it gets
	// SIGINT, then SIGKILL after 10 s.
	limit := s.Duration + 90*time.Second
	pctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.CommandContext(pctx, argv[0], argv[1:]...)
	cmd.Env = cleanEnv(env...)
	cmd.Dir = logDir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGINT) }
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	runErr := cmd.Run()
	res.WallSeconds = time.Since(start).Seconds()
	res.Pgbench.Seconds = res.WallSeconds
	res.Stdout = stdout.String()
	res.Stderr = tailString(stderr.String(), 4096)
	if cmd.ProcessState != nil {
		res.ExitCode = cmd.ProcessState.ExitCode()
		res.Pgbench.Exit = cmd.ProcessState.String()
		res.CPU.PgbenchUserMicros = float64(cmd.ProcessState.UserTime().Microseconds())
		res.CPU.PgbenchSysMicros = float64(cmd.ProcessState.SystemTime().Microseconds())
		res.CPU.PgbenchMicros = res.CPU.PgbenchUserMicros + res.CPU.PgbenchSysMicros
	}

	// The relay's CPU now, before it is stopped; then stop it so that its
	// server connections close and the workers reap their backends.
	if relay != nil {
		if st, err := readStat(relay.Pid()); err == nil && !relay.Exited() {
			res.CPU.RelayBeforeTicks, res.CPU.RelayAfterTicks = relayBefore, st.Self()
			res.CPU.RelayMicros = ticksToMicros(st.Self()-relayBefore, s.Hz)
		} else {
			res.Error = appendErr(res.Error, "the relay process exited during the run: "+relay.ExitStatus())
		}
		stopRelay()
	}
	for i, w := range s.Workers {
		left := waitChildrenGone(w.Pid, baselines[i].Children, 2*time.Second)
		after, err := readTree(w.Pid)
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

	sum, perr := parsePgbenchOutput(res.Stdout, stderr.String())
	res.Summary = sum
	if runErr != nil {
		msg := fmt.Sprintf("pgbench: %v", runErr)
		if pctx.Err() == context.DeadlineExceeded {
			msg = fmt.Sprintf("pgbench did not finish within %s and was stopped", limit)
		} else if ctx.Err() != nil {
			msg = "interrupted"
		}
		if l := pgbenchErrorLine(stderr.String()); l != "" {
			msg += ": " + l
		}
		res.Error = appendErr(res.Error, msg)
	} else if perr != nil {
		res.Error = appendErr(res.Error, perr.Error())
	}
	if perr == nil {
		if l, err := readTxLogs(logDir, logPrefix); err != nil {
			res.Error = appendErr(res.Error, "per-transaction log: "+err.Error())
		} else {
			res.TxLog = l
			res.Latency = l.stats()
			res.Aborts = abortDetails(sum.FirstAbortMessages, l)
			l.latencies, l.clients = nil, nil
		}
	}
	if res.Aborts == nil {
		res.Aborts = abortDetails(sum.FirstAbortMessages, nil)
	}
	if q := float64(sum.Transactions); q > 0 {
		res.CPU.RelayPerQuery = res.CPU.RelayMicros / q
		res.CPU.WorkerPerQuery = res.CPU.WorkerMicros / q
		res.CPU.PgbenchPerQuery = res.CPU.PgbenchMicros / q
	}
	return res
}
