package bench

import (
	"bufio"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgcluster"
)

// IdleOptions configure RunIdle.
type IdleOptions struct {
	Clients  int   // idle client connections at the end of the ramp
	Points   []int // client counts at which memory is measured (Clients is always one)
	PoolSize int   // coordinator --pool-size
	// IdleSleep is the coordinator's --idle-sleep (0: its default; negative:
	// sessions never sleep).
	IdleSleep time.Duration
	// Query runs one SELECT 1 on every client after its startup, so that
	// every session has been used once before it goes idle.
	Query    bool
	Settle   time.Duration // wait after each point before measuring
	Parallel int           // clients connecting at once
	// WaitGC waits, at each point, for the coordinator's next garbage
	// collection (the runtime forces one every 2 minutes when idle) before
	// measuring, so the Go heap figures are those of idle sessions only.
	WaitGC      bool
	TargetBytes int           // the target: coordinator bytes per idle client
	Timeout     time.Duration // bound on the whole benchmark
	OutDir      string

	// Executable is the pgfleet binary run as "serve"; empty means this
	// process's own executable.
	Executable string
	// Stdout gets the Markdown report, Stderr progress; nil means os.Stdout
	// and os.Stderr.
	Stdout, Stderr io.Writer
}

// DefaultIdleOptions are the defaults of pgfleet bench idle.
func DefaultIdleOptions() IdleOptions {
	return IdleOptions{Clients: 10000, Points: []int{1000, 5000}, PoolSize: 8, Query: true,
		Settle: 5 * time.Second, Parallel: 16, TargetBytes: 8 << 10, Timeout: 20 * time.Minute,
		OutDir: filepath.Join("bench", "results")}
}

func (o *IdleOptions) validate() error {
	switch {
	case o.Clients < 1:
		return errors.New("--clients must be at least 1")
	case o.PoolSize < 1:
		return errors.New("--pool-size must be at least 1")
	case o.Parallel < 1:
		return errors.New("--parallel must be at least 1")
	case o.Settle < 0:
		return errors.New("--settle must not be negative")
	case o.Timeout < time.Minute:
		return errors.New("--timeout must be at least 1m")
	case o.OutDir == "":
		return errors.New("--out must not be empty")
	}
	for _, p := range o.Points {
		if p < 1 {
			return fmt.Errorf("--points: %d is not a positive client count", p)
		}
	}
	return nil
}

// ParsePoints parses --points: client counts separated by commas ("" is
// none).
func ParsePoints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(strings.ReplaceAll(f, "_", ""))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--points: %q is not a positive client count", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// idleRampPoints are the client counts to measure at, ascending, without
// duplicates, none above clients, and ending with clients.
func idleRampPoints(points []int, clients int) []int {
	seen := map[int]bool{clients: true}
	out := []int{clients}
	for _, p := range points {
		if p >= 1 && p < clients && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	sort.Ints(out)
	return out
}

// idleMem is what /proc/<pid>/status and /proc/<pid>/smaps_rollup say of a
// process's memory, in bytes.
type idleMem struct {
	VmRSS     int64 `json:"vm_rss"`
	VmHWM     int64 `json:"vm_hwm"`
	RssAnon   int64 `json:"rss_anon"`
	RssFile   int64 `json:"rss_file"`
	VmData    int64 `json:"vm_data"`
	Threads   int   `json:"threads"`
	SmapsRss  int64 `json:"smaps_rss,omitempty"`
	SmapsPss  int64 `json:"smaps_pss,omitempty"`
	SmapsAnon int64 `json:"smaps_anonymous,omitempty"`
}

// idleParseKB reads "Key:   1234 kB" lines: the value of each key in want, in
// bytes (a line without a unit is a plain number, as Threads).
func idleParseKB(b []byte, want map[string]*int64) {
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		dst := want[strings.TrimSpace(k)]
		if dst == nil {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		if len(f) > 1 && strings.EqualFold(f[1], "kB") {
			n *= 1024
		}
		*dst = n
	}
}

// idleParseStatus parses /proc/<pid>/status.
func idleParseStatus(b []byte) idleMem {
	var m idleMem
	var threads int64
	idleParseKB(b, map[string]*int64{"VmRSS": &m.VmRSS, "VmHWM": &m.VmHWM, "RssAnon": &m.RssAnon,
		"RssFile": &m.RssFile, "VmData": &m.VmData, "Threads": &threads})
	m.Threads = int(threads)
	return m
}

// idleParseSmaps adds /proc/<pid>/smaps_rollup's totals to m.
func idleParseSmaps(b []byte, m *idleMem) {
	idleParseKB(b, map[string]*int64{"Rss": &m.SmapsRss, "Pss": &m.SmapsPss, "Anonymous": &m.SmapsAnon})
}

func idleReadMem(pid int) (idleMem, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return idleMem{}, err
	}
	m := idleParseStatus(b)
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid)); err == nil {
		idleParseSmaps(b, &m)
	}
	return m, nil
}

// idleCountFDs is the number of open file descriptors of pid.
func idleCountFDs(pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return -1
	}
	return len(ents)
}

// idleOpenFilesLimit is the soft "Max open files" of /proc/<pid>/limits (-1
// when unknown, 0 for unlimited).
func idleOpenFilesLimit(b []byte) int64 {
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "Max open files") {
			continue
		}
		f := strings.Fields(strings.TrimPrefix(line, "Max open files"))
		if len(f) == 0 {
			return -1
		}
		if f[0] == "unlimited" {
			return 0
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return -1
		}
		return n
	}
	return -1
}

// idleGC is one line of the Go runtime's GODEBUG=gctrace=1 output:
// "gc 7 @1.234s 2%: ... ms cpu, 12->13->6 MB, 14 MB goal, 0 MB stacks, 0 MB globals, 2 P (forced)".
// Sizes are in MB (2^20 bytes), as the runtime prints them (rounded down).
type idleGC struct {
	Num       int     `json:"num"`
	AtSeconds float64 `json:"at_seconds"` // since the process started
	HeapStart int64   `json:"heap_start_mb"`
	HeapEnd   int64   `json:"heap_end_mb"`
	HeapLive  int64   `json:"heap_live_mb"` // marked live: the heap that survived
	Goal      int64   `json:"goal_mb"`
	Stacks    int64   `json:"stacks_mb"` // scannable stack bytes (used, not allocated)
	Globals   int64   `json:"globals_mb"`
	Forced    bool    `json:"forced,omitempty"` // started by runtime.GC
	Line      string  `json:"line"`
}

var idleGCLineRE = regexp.MustCompile(`^gc (\d+) @([0-9.]+)s .*?(\d+)->(\d+)->(\d+) MB, (\d+) MB goal, (\d+) MB stacks, (\d+) MB globals`)

// idleParseGCLine parses one gctrace line.
func idleParseGCLine(line string) (idleGC, bool) {
	m := idleGCLineRE.FindStringSubmatch(line)
	if m == nil {
		return idleGC{}, false
	}
	g := idleGC{Line: line, Forced: strings.HasSuffix(strings.TrimSpace(line), "(forced)")}
	g.Num, _ = strconv.Atoi(m[1])
	g.AtSeconds, _ = strconv.ParseFloat(m[2], 64)
	for i, dst := range []*int64{&g.HeapStart, &g.HeapEnd, &g.HeapLive, &g.Goal, &g.Stacks, &g.Globals} {
		*dst, _ = strconv.ParseInt(m[3+i], 10, 64)
	}
	return g, true
}

// idleLastGC is the last gctrace line in the log at path.
func idleLastGC(path string) (idleGC, bool) {
	f, err := os.Open(path)
	if err != nil {
		return idleGC{}, false
	}
	defer f.Close()
	var last idleGC
	found := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		if g, ok := idleParseGCLine(sc.Text()); ok {
			last, found = g, true
		}
	}
	return last, found
}

// idlePromValues sums the samples of each metric in names in a Prometheus text
// exposition (over all label sets).
func idlePromValues(text string, names ...string) map[string]float64 {
	out := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		name := line
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		for _, n := range names {
			if name != n {
				continue
			}
			// name{labels} value [timestamp]: the value follows the labels.
			f := strings.Fields(line[len(name):])
			if i := strings.LastIndexByte(line, '}'); i >= 0 {
				f = strings.Fields(line[i+1:])
			}
			if len(f) == 0 {
				continue
			}
			if v, err := strconv.ParseFloat(f[0], 64); err == nil {
				out[n] += v
			}
		}
	}
	return out
}

// idleSlope is the least-squares idleSlope of y over x (0 with fewer than two
// distinct x).
func idleSlope(x, y []float64) float64 {
	n := float64(len(x))
	if len(x) < 2 || len(x) != len(y) {
		return 0
	}
	var sx, sy, sxx, sxy float64
	for i := range x {
		sx += x[i]
		sy += y[i]
		sxx += x[i] * x[i]
		sxy += x[i] * y[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}

// idleNofileLimit is the RLIMIT_NOFILE to set so that need descriptors fit:
// the soft limit raised to the hard one, and the hard one raised to need
// when we may (root). ok is false when need does not fit.
func idleNofileLimit(cur syscall.Rlimit, need uint64, root bool) (syscall.Rlimit, bool) {
	next := cur
	if next.Max < need && root {
		next.Max = need
	}
	next.Cur = next.Max
	return next, next.Cur >= need
}

// idleRaiseNofile raises this process's RLIMIT_NOFILE for need descriptors;
// children started afterwards inherit it.
func idleRaiseNofile(need uint64) (before, after syscall.Rlimit, err error) {
	if err = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &before); err != nil {
		return before, before, err
	}
	next, ok := idleNofileLimit(before, need, os.Geteuid() == 0)
	// Set it even when it does not change: Go raises the soft limit of its
	// own process at start and gives children the original one back, unless
	// the program sets the limit itself.
	if err = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &next); err != nil {
		return before, before, fmt.Errorf("setrlimit NOFILE %d: %w", next.Cur, err)
	}
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &after)
	if !ok {
		return before, after, fmt.Errorf("open files limit %d (hard %d) is below the %d needed; raise it (ulimit -n) or use fewer --clients",
			after.Cur, after.Max, need)
	}
	return before, after, nil
}

// idleSourceIP is the loopback address client i connects from: 20,000 clients
// per address (the default ephemeral port range has about 28,000 ports), so
// that any number of clients find a port. The first 20,000 get nil: the
// kernel picks the address and port at connect, where a port only has to be
// unique for the destination (binding first would also avoid the ports of
// the previous run's connections in TIME_WAIT).
func idleSourceIP(i int) net.IP {
	k := 1 + i/20000
	if k == 1 {
		return nil
	}
	return net.IPv4(127, byte(k>>16), byte(k>>8), byte(k))
}

// idleStartupMsg is a protocol 3.0 StartupMessage.
func idleStartupMsg(params ...string) []byte {
	body := []byte{0, 0, 0, 0, 0, 3, 0, 0}
	for _, s := range params {
		body = append(append(body, s...), 0)
	}
	body = append(body, 0)
	binary.BigEndian.PutUint32(body, uint32(len(body)))
	return body
}

// idleQueryMsg is a Query message.
func idleQueryMsg(sql string) []byte {
	b := append([]byte{'Q', 0, 0, 0, 0}, sql...)
	b = append(b, 0)
	binary.BigEndian.PutUint32(b[1:], uint32(len(b)-1))
	return b
}

// idleReadUntilReady reads backend messages until ReadyForQuery. It fails on
// ErrorResponse (with its message) and on an authentication request other
// than AuthenticationOk.
func idleReadUntilReady(br *bufio.Reader) (msgs int, err error) {
	var hdr [5]byte
	var firstErr error
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return msgs, err
		}
		n := int(binary.BigEndian.Uint32(hdr[1:])) - 4
		if n < 0 || n > 1<<20 {
			return msgs, fmt.Errorf("invalid message length %d of message %q", n+4, hdr[0])
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(br, body); err != nil {
			return msgs, err
		}
		msgs++
		switch hdr[0] {
		case 'Z':
			return msgs, firstErr
		case 'E':
			if firstErr == nil {
				firstErr = errors.New(idleErrorText(body))
			}
			if strings.Contains(string(body), "\x00SFATAL\x00") || strings.HasPrefix(string(body), "SFATAL\x00") {
				return msgs, firstErr
			}
		case 'R':
			if n < 4 || binary.BigEndian.Uint32(body) != 0 {
				return msgs, fmt.Errorf("authentication request %d: the benchmark needs trust authentication", binary.BigEndian.Uint32(body))
			}
		}
	}
}

// idleErrorText is "SEVERITY CODE: message" of an ErrorResponse body.
func idleErrorText(body []byte) string {
	var sev, code, msg string
	for _, f := range strings.Split(string(body), "\x00") {
		if f == "" {
			continue
		}
		switch f[0] {
		case 'S':
			sev = f[1:]
		case 'C':
			code = f[1:]
		case 'M':
			msg = f[1:]
		}
	}
	return fmt.Sprintf("%s %s: %s", sev, code, msg)
}

// idleSample is one measurement of the coordinator.
type idleSample struct {
	Label         string             `json:"label"`   // "before", "N clients", "after close"
	Clients       int                `json:"clients"` // idle clients connected
	TakenAt       time.Time          `json:"taken_at"`
	Mem           idleMem            `json:"memory"`
	FDs           int                `json:"fds"`
	LastGC        *idleGC            `json:"last_gc,omitempty"` // the last garbage collection before the sample
	GCWaited      string             `json:"gc_wait,omitempty"` // with --wait-gc: what the wait saw
	Metrics       map[string]float64 `json:"metrics,omitempty"`
	Worker        *idleWorkerConns   `json:"worker_connections,omitempty"`
	RampSeconds   float64            `json:"ramp_seconds,omitempty"`              // connecting this point's new clients
	PerClient     *float64           `json:"bytes_per_client,omitempty"`          // (VmRSS - before) / clients
	Marginal      *float64           `json:"marginal_bytes_per_client,omitempty"` // since the previous point
	HeapPerClient *float64           `json:"heap_live_bytes_per_client,omitempty"`
}

// idleWorkerConns are the worker's client backends (other than the benchmark's
// own) from pg_stat_activity.
type idleWorkerConns struct {
	Total   int            `json:"total"`
	Catalog int            `json:"catalog"` // running or last ran a query on the pgfleet catalog
	Pool    int            `json:"pool"`    // the others: the coordinator's server connections
	ByQuery map[string]int `json:"by_state_and_query"`
	Error   string         `json:"error,omitempty"`
}

// idleReport is the JSON report.
type idleReport struct {
	Tool        string       `json:"tool"`
	StartedAt   time.Time    `json:"started_at"`
	FinishedAt  time.Time    `json:"finished_at"`
	Interrupted bool         `json:"interrupted,omitempty"`
	Error       string       `json:"error,omitempty"`
	Options     idleRepOpts  `json:"options"`
	Versions    versions     `json:"versions"`
	Machine     machine      `json:"machine"`
	Worker      workerInfo   `json:"worker"`
	Coordinator *relayRun    `json:"coordinator,omitempty"`
	Nofile      string       `json:"open_files_limit"` // ours before -> after, and the coordinator's
	Samples     []idleSample `json:"samples"`
	// Slope is the least-squares idleSlope of VmRSS over the client count at
	// the ramp's points (bytes per client); HeapSlope that of the Go heap
	// marked live at the last GC before each point.
	Slope       *float64 `json:"rss_slope_bytes_per_client,omitempty"`
	HeapSlope   *float64 `json:"heap_live_slope_bytes_per_client,omitempty"`
	PerClient   *float64 `json:"bytes_per_client,omitempty"` // at Clients
	TargetMet   *bool    `json:"target_met,omitempty"`
	ClientErrs  []string `json:"client_errors,omitempty"` // the first few
	NClientErrs int      `json:"client_error_count"`
	Problems    []string `json:"problems,omitempty"`
	Notes       []string `json:"notes,omitempty"`
	MarkdownOut string   `json:"markdown_file,omitempty"`
}

type idleRepOpts struct {
	Clients     int     `json:"clients"`
	Points      []int   `json:"points"`
	PoolSize    int     `json:"pool_size"`
	IdleSleep   string  `json:"idle_sleep,omitempty"`
	Query       bool    `json:"select_1_each"`
	Settle      float64 `json:"settle_seconds"`
	Parallel    int     `json:"parallel"`
	WaitGC      bool    `json:"wait_gc"`
	TargetBytes int     `json:"target_bytes_per_client"`
	Executable  string  `json:"pgfleet_executable"`
}

// idleBench is one RunIdle invocation.
type idleBench struct {
	*base
	o       IdleOptions
	rep     *idleReport
	worker  *pgcluster.Server
	coord   *child // the coordinator
	metrics string // the coordinator's metrics address
	conns   []net.Conn
	nerr    int
	errs    []string
	mu      sync.Mutex
}

// RunIdle measures what idle client connections cost the coordinator: it
// starts one PostgreSQL worker and a coordinator process, opens o.Clients
// client connections in steps (o.Points), each through startup and,
// with o.Query, one SELECT 1, and reads the coordinator's memory from /proc
// before the first client and at each step once the clients sit idle. It
// prints a Markdown report and writes it, with a JSON file of every figure,
// to o.OutDir, and stops everything it started, also when ctx is cancelled.
func RunIdle(ctx context.Context, o IdleOptions) error {
	if err := o.validate(); err != nil {
		return err
	}
	o.Points = idleRampPoints(o.Points, o.Clients)
	b := &base{out: o.Stdout, log: o.Stderr, hz: clockTicks(), exe: o.Executable}
	if b.out == nil {
		b.out = os.Stdout
	}
	if b.log == nil {
		b.log = os.Stderr
	}
	var err error
	if b.exe == "" {
		if b.exe, err = os.Executable(); err != nil {
			return fmt.Errorf("finding the pgfleet executable: %w", err)
		}
	}
	if b.bin, err = pgcluster.BinDir(); err != nil {
		return err
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	// Each side of every client connection is a descriptor: ours in this
	// process, the coordinator's in its own (it inherits our limit).
	need := uint64(o.Clients) + 256
	before, after, err := idleRaiseNofile(need)
	if err != nil {
		return err
	}
	if b.dir, err = os.MkdirTemp("", "pgfleet-bench-idle-"); err != nil {
		return err
	}
	ib := &idleBench{base: b, o: o}
	describe, build := pgfleetVersion()
	ib.rep = &idleReport{Tool: "pgfleet bench idle", StartedAt: time.Now(),
		Options: idleRepOpts{Clients: o.Clients, Points: o.Points, PoolSize: o.PoolSize, IdleSleep: idleSleepText(o.IdleSleep), Query: o.Query,
			Settle: o.Settle.Seconds(), Parallel: o.Parallel, WaitGC: o.WaitGC, TargetBytes: o.TargetBytes, Executable: b.exe},
		Versions: versions{Pgfleet: describe, PgfleetBuildVCS: build, Go: runtimeVersion(),
			Postgres: commandOutput(nil, filepath.Join(b.bin, "postgres"), "--version")},
		Machine: readMachine(b.hz),
		Nofile:  fmt.Sprintf("bench: %d (hard %d) -> %d (hard %d)", before.Cur, before.Max, after.Cur, after.Max)}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	return runBenchmark(ctx, ib)
}

func (b *idleBench) cleanup() {
	b.closeClients()
	if b.coord != nil && b.rep.Coordinator != nil {
		rr := b.rep.Coordinator
		// The logs are read before the processes stop: stopping makes
		// PostgreSQL log FATALs for the connections it terminates.
		rr.LogProblems, rr.ProblemCount = logProblems(b.coord.LogPath, 10)
		rr.Killed = b.coord.Stop(syscall.SIGTERM, 10*time.Second)
		rr.Exit = b.coord.ExitStatus()
		rr.LogTail = tailString(strings.Join(idleNonGCLines(tailFile(b.coord.LogPath, 20000)), "\n"), 2000)
	}
	b.coord.Stop(syscall.SIGTERM, 10*time.Second) // nil or stopped: nothing to do
	if b.worker != nil {
		b.rep.Worker.Log, b.rep.Worker.NLog = logProblems(b.worker.LogFile, 10)
		b.worker.Stop()
		b.worker = nil
	}
	b.removeDir()
}

// idleNonGCLines are the lines of s that are not gctrace output.
func idleNonGCLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(l, "gc ") {
			out = append(out, l)
		}
	}
	return out
}

func (b *idleBench) closeClients() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.conns {
		c.Close()
	}
	b.conns = nil
}

func (b *idleBench) run(ctx context.Context) error {
	o := b.o
	b.logf("starting PostgreSQL worker...")
	w, err := pgcluster.Start(ctx, pgcluster.Options{Name: "worker1", Dir: b.dir})
	if err != nil {
		return fmt.Errorf("starting the PostgreSQL worker: %w", err)
	}
	b.worker = w
	b.rep.Worker = workerInfo{Addr: w.Addr(), Pid: w.Pid(), DataDir: w.DataDir, LogFile: w.LogFile,
		Command: procCmdline(w.Pid())}

	b.logf("starting the coordinator (pool size %d)...", o.PoolSize)
	ch, rr, err := b.startCoordinator(ctx)
	if err != nil {
		return fmt.Errorf("starting the coordinator: %w", err)
	}
	b.coord, b.rep.Coordinator = ch, rr
	if lb, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", ch.Pid())); err == nil {
		lim := idleOpenFilesLimit(lb)
		b.rep.Nofile += fmt.Sprintf("; coordinator: %d", lim)
		if lim > 0 && lim < int64(o.Clients)+64 {
			return fmt.Errorf("the coordinator's open files limit is %d, below the %d clients", lim, o.Clients)
		}
	}

	if err := idleSleep(ctx, o.Settle); err != nil {
		return err
	}
	first, err := b.sample(ctx, "before", 0)
	if err != nil {
		return err
	}
	b.rep.Samples = append(b.rep.Samples, first)
	b.logf("before any client: VmRSS %s", idleMiB(first.Mem.VmRSS))

	addr := rr.Addr
	startup := idleStartupMsg("user", "postgres", "database", "postgres")
	prev := first
	for _, p := range o.Points {
		from := len(b.conns)
		t0 := time.Now()
		if err := b.openClients(ctx, addr, startup, from, p); err != nil {
			return err
		}
		ramp := time.Since(t0).Seconds()
		if err := idleSleep(ctx, o.Settle); err != nil {
			return err
		}
		s, err := b.sample(ctx, fmt.Sprintf("%d clients", p), p)
		if err != nil {
			return err
		}
		s.RampSeconds = ramp
		idlePerClient(&s, first, prev)
		b.rep.Samples = append(b.rep.Samples, s)
		b.logf("%6d idle clients (%d connected in %.1f s): VmRSS %s, %s per client, marginal %s per client, worker connections %s",
			p, p-from, ramp, idleMiB(s.Mem.VmRSS), idleBytesText(s.PerClient), idleBytesText(s.Marginal), idleWorkerConnsText(s.Worker))
		prev = s
	}

	b.closeClients()
	if err := idleSleep(ctx, o.Settle); err != nil {
		return err
	}
	if s, err := b.sample(ctx, "after closing every client", 0); err == nil {
		b.rep.Samples = append(b.rep.Samples, s)
	}
	return nil
}

// idlePerClient fills s's per-client figures against the sample before any
// client and the previous point.
func idlePerClient(s *idleSample, first, prev idleSample) {
	if s.Clients <= 0 {
		return
	}
	v := float64(s.Mem.VmRSS-first.Mem.VmRSS) / float64(s.Clients)
	s.PerClient = &v
	if d := s.Clients - prev.Clients; d > 0 {
		m := float64(s.Mem.VmRSS-prev.Mem.VmRSS) / float64(d)
		s.Marginal = &m
	}
	if s.LastGC != nil && first.LastGC != nil {
		h := float64((s.LastGC.HeapLive-first.LastGC.HeapLive)<<20) / float64(s.Clients)
		s.HeapPerClient = &h
	}
}

// startCoordinator starts "pgfleet serve" with a metrics endpoint and the
// Go runtime's GC trace in its log (GODEBUG=gctrace=1).
func (b *idleBench) startCoordinator(ctx context.Context) (*child, *relayRun, error) {
	var maddr string
	metrics := func(int) ([]string, error) {
		mport, err := pgcluster.FreePort()
		if err != nil {
			return nil, err
		}
		maddr = fmt.Sprintf("127.0.0.1:%d", mport)
		args := []string{"--metrics-listen", maddr,
			"--max-client-connections", fmt.Sprint(b.o.Clients + 100)}
		if b.o.IdleSleep != 0 {
			args = append(args, "--idle-sleep", b.o.IdleSleep.String())
		}
		return args, nil
	}
	ch, rr, err := startCoordinatorWith(ctx, b.exe, b.dir, []string{b.worker.Addr()}, b.o.PoolSize, metrics,
		[]string{"GODEBUG=gctrace=1"})
	if err == nil {
		b.metrics = maddr
	}
	return ch, rr, err
}

// openClients connects clients from..to-1, with o.Parallel at a time.
func (b *idleBench) openClients(ctx context.Context, addr string, startup []byte, from, to int) error {
	query := idleQueryMsg("SELECT 1")
	if !b.o.Query {
		query = nil
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < b.o.Parallel; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			br := bufio.NewReaderSize(nil, 4096)
			for i := range next {
				c, err := idleOpenClient(ctx, addr, idleSourceIP(i), startup, query, br)
				b.mu.Lock()
				if err != nil {
					b.nerr++
					if len(b.errs) < 10 {
						b.errs = append(b.errs, fmt.Sprintf("client %d: %v", i, err))
					}
				} else {
					b.conns = append(b.conns, c)
				}
				b.mu.Unlock()
			}
		}()
	}
	var err error
	for i := from; i < to; i++ {
		if err = ctx.Err(); err != nil {
			break
		}
		b.mu.Lock()
		nerr := b.nerr
		b.mu.Unlock()
		if nerr > 0 {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	b.rep.NClientErrs, b.rep.ClientErrs = b.nerr, b.errs
	if err != nil {
		return err
	}
	if b.nerr > 0 {
		return fmt.Errorf("%d client(s) failed to connect; first: %s", b.nerr, b.errs[0])
	}
	return nil
}

// idleOpenClient connects from src, completes startup (trust) and, when query
// is not nil, runs it; the connection is then idle.
func idleOpenClient(ctx context.Context, addr string, src net.IP, startup, query []byte, br *bufio.Reader) (net.Conn, error) {
	d := net.Dialer{Timeout: 10 * time.Second}
	if src != nil {
		d.LocalAddr = &net.TCPAddr{IP: src}
	}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	br.Reset(c)
	err = func() error {
		if _, err := c.Write(startup); err != nil {
			return err
		}
		if _, err := idleReadUntilReady(br); err != nil {
			return fmt.Errorf("startup: %w", err)
		}
		if query != nil {
			if _, err := c.Write(query); err != nil {
				return err
			}
			if _, err := idleReadUntilReady(br); err != nil {
				return fmt.Errorf("SELECT 1: %w", err)
			}
		}
		if br.Buffered() > 0 {
			return fmt.Errorf("%d unexpected bytes after ReadyForQuery", br.Buffered())
		}
		return nil
	}()
	br.Reset(nil)
	if err != nil {
		c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// sample measures the coordinator now (after waiting for a GC with
// --wait-gc).
func (b *idleBench) sample(ctx context.Context, label string, clients int) (idleSample, error) {
	s := idleSample{Label: label, Clients: clients}
	if b.o.WaitGC {
		s.GCWaited = b.waitGC(ctx, 130*time.Second)
	}
	if b.coord.Exited() {
		return s, fmt.Errorf("the coordinator exited (%s); log:\n%s", b.coord.ExitStatus(), tailFile(b.coord.LogPath, 1500))
	}
	pid := b.coord.Pid()
	var err error
	s.TakenAt = time.Now()
	if s.Mem, err = idleReadMem(pid); err != nil {
		return s, fmt.Errorf("reading the coordinator's memory: %w", err)
	}
	s.FDs = idleCountFDs(pid)
	if g, ok := idleLastGC(b.coord.LogPath); ok {
		s.LastGC = &g
	}
	s.Metrics = b.readMetrics(ctx)
	s.Worker = b.workerConnections(ctx)
	return s, nil
}

// waitGC waits until the coordinator logs a garbage collection that starts
// after now, or limit passes, and says what happened.
func (b *idleBench) waitGC(ctx context.Context, limit time.Duration) string {
	start := time.Now()
	prev, ok := idleLastGC(b.coord.LogPath)
	if !ok {
		// The runtime's periodic collection runs 2 minutes after the last
		// one, and never before the first.
		return "no GC yet, so none is due: not waited"
	}
	for time.Since(start) < limit {
		if idleSleep(ctx, time.Second) != nil {
			return "interrupted"
		}
		if g, ok := idleLastGC(b.coord.LogPath); ok && g.Num > prev.Num {
			return fmt.Sprintf("gc %d after %.0f s", g.Num, time.Since(start).Seconds())
		}
	}
	return fmt.Sprintf("no GC within %s", limit)
}

// readMetrics reads the coordinator's client and server connection gauges.
func (b *idleBench) readMetrics(ctx context.Context) map[string]float64 {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+b.metrics+"/metrics", nil)
	if err != nil {
		return nil
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return map[string]float64{"error": 1}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return idlePromValues(string(body), "pgfleet_client_connections", "pgfleet_server_connections")
}

// idleWorkerConns counts the worker's client backends from pg_stat_activity.
func (b *idleBench) workerConnections(ctx context.Context) *idleWorkerConns {
	wc := &idleWorkerConns{ByQuery: map[string]int{}}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	url := fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable application_name=pgfleet-bench-idle",
		b.worker.Host, b.worker.Port)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		wc.Error = err.Error()
		return wc
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT coalesce(state, ''), left(regexp_replace(query, '\s+', ' ', 'g'), 60)
		FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()`)
	if err != nil {
		wc.Error = err.Error()
		return wc
	}
	defer rows.Close()
	for rows.Next() {
		var state, q string
		if err := rows.Scan(&state, &q); err != nil {
			wc.Error = err.Error()
			return wc
		}
		wc.Total++
		if idleCatalogQuery(q) {
			wc.Catalog++
		} else {
			wc.Pool++
		}
		wc.ByQuery[state+": "+q]++
	}
	if err := rows.Err(); err != nil {
		wc.Error = err.Error()
	}
	return wc
}

// idleCatalogQuery tells the coordinator's catalog connections (pgxpool,
// at most 4) from its pooled server connections by their last query.
func idleCatalogQuery(q string) bool {
	q = strings.ToLower(q)
	return strings.Contains(q, "pgfleet.") || strings.Contains(q, "citus_") || strings.Contains(q, "pg_advisory")
}

func idleSleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func idleMiB(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func idleBytesText(v *float64) string {
	if v == nil {
		return "–"
	}
	return fmt.Sprintf("%.0f B", *v)
}

func idleWorkerConnsText(w *idleWorkerConns) string {
	if w == nil {
		return "–"
	}
	if w.Error != "" {
		return "error: " + trunc(w.Error, 80)
	}
	return fmt.Sprintf("%d (%d pooled, %d catalog)", w.Total, w.Pool, w.Catalog)
}

func (b *idleBench) finish(runErr error, interrupted bool) error {
	rep := b.rep
	rep.FinishedAt, rep.Interrupted, rep.Error = time.Now(), interrupted, errText(runErr)
	rep.Machine.LoadAvgEnd = loadAvg()
	if len(rep.Samples) == 0 {
		return nil
	}
	rep.summarise(b.o)
	mdPath, jsonPath := reportPaths(b.o.OutDir, "idle", rep.StartedAt)
	rep.MarkdownOut = mdPath
	return b.writeReports(mdPath, rep.markdown(filepath.Base(jsonPath)), jsonPath, rep)
}

// points are the ramp's samples (those with clients).
func (rep *idleReport) points() []idleSample {
	var out []idleSample
	for _, s := range rep.Samples {
		if s.Clients > 0 {
			out = append(out, s)
		}
	}
	return out
}

// summarise computes the slopes, the figure at Clients, the verdict and
// the problems.
func (rep *idleReport) summarise(o IdleOptions) {
	pts := rep.points()
	var x, y, hx, hy []float64
	for _, s := range pts {
		x = append(x, float64(s.Clients))
		y = append(y, float64(s.Mem.VmRSS))
		if s.LastGC != nil {
			hx = append(hx, float64(s.Clients))
			hy = append(hy, float64(s.LastGC.HeapLive<<20))
		}
	}
	if len(x) >= 2 {
		v := idleSlope(x, y)
		rep.Slope = &v
	}
	if len(hx) >= 2 {
		v := idleSlope(hx, hy)
		rep.HeapSlope = &v
	}
	if n := len(pts); n > 0 && pts[n-1].Clients == o.Clients && pts[n-1].PerClient != nil {
		rep.PerClient = pts[n-1].PerClient
		met := *rep.PerClient <= float64(o.TargetBytes) && (rep.Slope == nil || *rep.Slope <= float64(o.TargetBytes))
		rep.TargetMet = &met
	}
	rep.Problems = nil
	if rep.NClientErrs > 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d client(s) failed; first: %s", rep.NClientErrs, strings.Join(rep.ClientErrs, "; ")))
	}
	for _, s := range pts {
		if w := s.Worker; w != nil {
			if w.Error != "" {
				rep.Problems = append(rep.Problems, fmt.Sprintf("%s: pg_stat_activity: %s", s.Label, w.Error))
			} else if w.Pool > o.PoolSize {
				rep.Problems = append(rep.Problems, fmt.Sprintf("%s: %d pooled server connections on the worker, above the pool size %d", s.Label, w.Pool, o.PoolSize))
			}
		}
		if v, ok := s.Metrics["pgfleet_server_connections"]; ok && v > float64(o.PoolSize) {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s: pgfleet_server_connections %.0f above the pool size %d", s.Label, v, o.PoolSize))
		}
		if v, ok := s.Metrics["pgfleet_client_connections"]; ok && int(v) != s.Clients {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s: pgfleet_client_connections is %.0f, want %d", s.Label, v, s.Clients))
		}
	}
	if c := rep.Coordinator; c != nil {
		rep.Problems = append(rep.Problems, relayProblems("coordinator", c)...)
	}
	if rep.Worker.NLog > 0 {
		rep.Problems = append(rep.Problems, workerLogProblem(rep.Worker))
	}
}

func (rep *idleReport) markdown(jsonName string) string {
	var sb strings.Builder
	o := rep.Options
	sb.WriteString("# pgfleet bench idle\n\n")
	writeStatus(&sb, rep.Interrupted, rep.Error)
	query := "startup only"
	if o.Query {
		query = "startup, then one `SELECT 1`"
	}
	fmt.Fprintf(&sb, "Coordinator memory per idle client connection: %d clients (%s each, then idle), "+
		"one PostgreSQL worker, `--pool-size %d`, `--idle-sleep %s`; measured %.0f s after each step.\n\n", o.Clients, query, o.PoolSize, cmp.Or(o.IdleSleep, "default"), o.Settle)
	if rep.PerClient != nil {
		verdict := "**missed**"
		if rep.TargetMet != nil && *rep.TargetMet {
			verdict = "**met**"
		}
		fmt.Fprintf(&sb, "Target: at most %s per idle client (%d clients): %s: %.0f B per client at %d clients",
			idleKiB(float64(o.TargetBytes)), o.Clients, verdict, *rep.PerClient, o.Clients)
		if rep.Slope != nil {
			fmt.Fprintf(&sb, ", slope %.0f B per client", *rep.Slope)
		}
		sb.WriteString(" (VmRSS).\n\n")
	}
	sb.WriteString("| step | clients | VmRSS | RSS anon | VmHWM | Δ VmRSS | B/client | marginal B/client | Go heap live (last GC) | GC stacks | fds | threads | worker conns (pooled + catalog) | server conns (gauge) | connect s |\n")
	sb.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	first := rep.Samples[0]
	for _, s := range rep.Samples {
		heap, stacks := "–", "–"
		if s.LastGC != nil {
			heap = fmt.Sprintf("%d MB (gc %d)", s.LastGC.HeapLive, s.LastGC.Num)
			stacks = fmt.Sprintf("%d MB", s.LastGC.Stacks)
		}
		gauge := "–"
		if v, ok := s.Metrics["pgfleet_server_connections"]; ok {
			gauge = fmt.Sprintf("%.0f", v)
		}
		ramp := "–"
		if s.RampSeconds > 0 {
			ramp = fmt.Sprintf("%.1f", s.RampSeconds)
		}
		fmt.Fprintf(&sb, "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %d | %d | %s | %s | %s |\n",
			s.Label, s.Clients, idleMiB(s.Mem.VmRSS), idleMiB(s.Mem.RssAnon), idleMiB(s.Mem.VmHWM),
			idleSignedMiB(s.Mem.VmRSS-first.Mem.VmRSS), idleBytesText(s.PerClient), idleBytesText(s.Marginal), heap, stacks,
			s.FDs, s.Mem.Threads, idleWorkerConnsText(s.Worker), gauge, ramp)
	}
	sb.WriteString("\n")
	if rep.Slope != nil {
		fmt.Fprintf(&sb, "- VmRSS slope over the steps (least squares): **%.0f B per idle client**\n", *rep.Slope)
	}
	if rep.HeapSlope != nil {
		fmt.Fprintf(&sb, "- Go heap marked live at the last GC before each step, slope: %.0f B per idle client "+
			"(the runtime prints MB, so ±1 MB per step)\n", *rep.HeapSlope)
	}
	if rep.Coordinator != nil {
		fmt.Fprintf(&sb, "- coordinator: `%s` (pid %d); open files limit %s\n", strings.Join(rep.Coordinator.Command.Argv[1:], " "),
			rep.Coordinator.Pid, rep.Nofile)
	}
	sb.WriteString("\n## What the figures mean\n\n")
	sb.WriteString("- **VmRSS**, **RSS anon**, **VmHWM**: `/proc/<pid>/status` of the coordinator process (resident memory, " +
		"its anonymous part, and the peak). **B/client** = (VmRSS − VmRSS before any client) / clients; **marginal** is the " +
		"same over the clients added since the previous step. RSS is what the machine pays: the live heap and the " +
		"goroutine stacks, plus heap garbage not collected yet (with GOGC=100 the heap grows to twice the live heap " +
		"before a collection) and freed memory the runtime has not returned to the kernel yet.\n")
	sb.WriteString("- **Go heap live**: from the coordinator's `GODEBUG=gctrace=1` log, the heap that survived the last " +
		"garbage collection before the measurement; **GC stacks** is the stack space the runtime scanned then (used, " +
		"not allocated). With `--wait-gc` each step waits for the next collection (the runtime runs one 2 minutes after the last).\n")
	sb.WriteString("- **worker conns**: client backends in the worker's `pg_stat_activity` other than the benchmark's own; " +
		"\"catalog\" are those whose last query touched the `pgfleet` catalog (the coordinator's catalog pool, at most 4), " +
		"the rest are pooled server connections and must stay at most the pool size. **server conns (gauge)** is the " +
		"coordinator's `pgfleet_server_connections`.\n")
	sb.WriteString("- Kernel socket buffers are not in the process's RSS and are not counted; the benchmark's own " +
		"client side is another process.\n")
	sb.WriteString("\n## Problems seen\n\n")
	if len(rep.Problems) == 0 {
		sb.WriteString("None: every client connected, the pooled server connections stayed within the pool size, " +
			"and no warning or error lines in the coordinator's or the worker's log.\n")
	}
	for _, p := range rep.Problems {
		fmt.Fprintf(&sb, "- %s\n", oneLine(p))
	}
	v, m := rep.Versions, rep.Machine
	sb.WriteString("\n## Environment\n\n")
	fmt.Fprintf(&sb, "- pgfleet %s (%s); %s\n", v.Pgfleet, v.Go, v.Postgres)
	fmt.Fprintf(&sb, "- %d CPUs (%s), %s, %s; load average at start %s, at end %s\n", m.Nproc, m.CPUModel, m.MemTotal, m.Kernel,
		loadTriple(m.LoadAvgStart), loadTriple(m.LoadAvgEnd))
	fmt.Fprintf(&sb, "- every figure: %s\n", jsonName)
	return sb.String()
}

func idleKiB(b float64) string {
	if math.Mod(b, 1024) == 0 {
		return fmt.Sprintf("%.0f KiB", b/1024)
	}
	return fmt.Sprintf("%.1f KiB", b/1024)
}

func idleSignedMiB(b int64) string {
	s := idleMiB(b)
	if b > 0 {
		s = "+" + s
	}
	return s
}

// idleSleepText is --idle-sleep as the report gives it.
func idleSleepText(d time.Duration) string {
	switch {
	case d == 0:
		return "default"
	case d < 0:
		return "off"
	}
	return d.String()
}
