package bench

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// pgbenchSummary is what pgbench prints at the end of a run.
type pgbenchSummary struct {
	TPS                float64  `json:"tps"`                                 // without initial connection time
	TPSIncludingConns  float64  `json:"tps_including_connections,omitempty"` // older pgbench only
	LatencyAvgMs       float64  `json:"latency_avg_ms"`                      //
	LatencyStddevMs    float64  `json:"latency_stddev_ms,omitempty"`         // with -P or --rate only
	InitialConnMs      float64  `json:"initial_connection_ms"`               //
	Transactions       int64    `json:"transactions"`                        // actually processed
	Failed             int64    `json:"failed"`                              // PostgreSQL 15+; 0 before
	FailedReported     bool     `json:"failed_reported"`                     // the line was there
	Clients            int      `json:"clients"`                             //
	Threads            int      `json:"threads"`                             //
	QueryMode          string   `json:"query_mode"`                          //
	TransactionType    string   `json:"transaction_type"`                    //
	ScalingFactor      int      `json:"scaling_factor"`                      //
	AbortedClients     int      `json:"aborted_clients"`                     // "client N ... aborted" lines
	RunAborted         bool     `json:"run_aborted"`                         // "Run was aborted"
	FirstAbortMessages []string `json:"abort_messages,omitempty"`            // the first few
}

var (
	reTPS       = regexp.MustCompile(`^tps = ([0-9.]+) \((.*)\)`)
	reTxns      = regexp.MustCompile(`^number of transactions actually processed: (\d+)`)
	reFailed    = regexp.MustCompile(`^number of failed transactions: (\d+)`)
	reLatAvg    = regexp.MustCompile(`^latency average = ([0-9.]+) ms`)
	reLatStd    = regexp.MustCompile(`^latency stddev = ([0-9.]+) ms`)
	reConnTime  = regexp.MustCompile(`^initial connection time = ([0-9.]+) ms`)
	reClients   = regexp.MustCompile(`^number of clients: (\d+)`)
	reThreads   = regexp.MustCompile(`^number of threads: (\d+)`)
	reQueryMode = regexp.MustCompile(`^query mode: (\S+)`)
	reTxType    = regexp.MustCompile(`^transaction type: (.*)$`)
	reScale     = regexp.MustCompile(`^scaling factor: (\d+)`)
	reAborted   = regexp.MustCompile(`client \d+ .*aborted`)
)

// parsePgbenchOutput reads pgbench's summary from its standard output and
// error (either may be empty). It fails when there is no tps line and no
// transaction count, which means pgbench did not get to run.
func parsePgbenchOutput(stdout, stderr string) (pgbenchSummary, error) {
	var s pgbenchSummary
	var haveTPS, haveTxns bool
	for _, line := range strings.Split(stdout+"\n"+stderr, "\n") {
		line = strings.TrimSpace(line)
		if m := reTPS.FindStringSubmatch(line); m != nil {
			v, _ := strconv.ParseFloat(m[1], 64)
			switch {
			case strings.Contains(m[2], "without initial connection time"), strings.Contains(m[2], "excluding"):
				s.TPS, haveTPS = v, true
			case strings.Contains(m[2], "including"):
				s.TPSIncludingConns = v
			}
			continue
		}
		if m := reTxns.FindStringSubmatch(line); m != nil {
			s.Transactions, _ = strconv.ParseInt(m[1], 10, 64)
			haveTxns = true
		} else if m := reFailed.FindStringSubmatch(line); m != nil {
			s.Failed, _ = strconv.ParseInt(m[1], 10, 64)
			s.FailedReported = true
		} else if m := reLatAvg.FindStringSubmatch(line); m != nil {
			s.LatencyAvgMs, _ = strconv.ParseFloat(m[1], 64)
		} else if m := reLatStd.FindStringSubmatch(line); m != nil {
			s.LatencyStddevMs, _ = strconv.ParseFloat(m[1], 64)
		} else if m := reConnTime.FindStringSubmatch(line); m != nil {
			s.InitialConnMs, _ = strconv.ParseFloat(m[1], 64)
		} else if m := reClients.FindStringSubmatch(line); m != nil {
			s.Clients, _ = strconv.Atoi(m[1])
		} else if m := reThreads.FindStringSubmatch(line); m != nil {
			s.Threads, _ = strconv.Atoi(m[1])
		} else if m := reQueryMode.FindStringSubmatch(line); m != nil {
			s.QueryMode = m[1]
		} else if m := reTxType.FindStringSubmatch(line); m != nil {
			s.TransactionType = m[1]
		} else if m := reScale.FindStringSubmatch(line); m != nil {
			s.ScalingFactor, _ = strconv.Atoi(m[1])
		} else if reAborted.MatchString(line) {
			s.AbortedClients++
			if len(s.FirstAbortMessages) < 5 {
				s.FirstAbortMessages = append(s.FirstAbortMessages, trunc(line, 300))
			}
		} else if strings.Contains(line, "Run was aborted") {
			s.RunAborted = true
		}
	}
	if !haveTPS && !haveTxns {
		return s, fmt.Errorf("pgbench printed no summary (no tps or transaction count)")
	}
	return s, nil
}

// add folds the summary of another pgbench process of the same run into s:
// counts and rates add up, the average latency is weighted by transactions.
func (s *pgbenchSummary) add(o pgbenchSummary) {
	if n := s.Transactions + o.Transactions; n > 0 {
		s.LatencyAvgMs = (s.LatencyAvgMs*float64(s.Transactions) + o.LatencyAvgMs*float64(o.Transactions)) / float64(n)
	}
	s.TPS += o.TPS
	s.TPSIncludingConns += o.TPSIncludingConns
	s.Transactions += o.Transactions
	s.Failed += o.Failed
	s.FailedReported = s.FailedReported && o.FailedReported
	s.Clients += o.Clients
	s.Threads += o.Threads
	s.InitialConnMs = max(s.InitialConnMs, o.InitialConnMs)
	s.AbortedClients += o.AbortedClients
	s.RunAborted = s.RunAborted || o.RunAborted
	for _, m := range o.FirstAbortMessages {
		if len(s.FirstAbortMessages) < 5 {
			s.FirstAbortMessages = append(s.FirstAbortMessages, m)
		}
	}
	s.LatencyStddevMs = 0 // not combinable from the summaries; the logs give the distribution
}

// txLog is what the per-transaction logs (pgbench --log) hold.
type txLog struct {
	Files     int     `json:"files"`
	Lines     int64   `json:"lines"`
	OK        int64   `json:"ok"`        // lines with a latency
	Failed    int64   `json:"failed"`    // "failed" in the time field
	Skipped   int64   `json:"skipped"`   // "skipped" in the time field
	Malformed int64   `json:"malformed"` // lines that could not be read
	latencies []int64 // µs, of the OK lines

	firstUs int64              // time of the earliest line (time_epoch*1e6 + time_us)
	clients map[int]*clientTxs // lines per client
}

// clientTxs is what the log says about one client.
type clientTxs struct {
	n      int64 // lines, whatever their outcome
	lastUs int64 // time of its latest line
}

// clientAbort is what is known about a client pgbench reported as aborted.
type clientAbort struct {
	Client       int     `json:"client"`
	Message      string  `json:"message"`
	Transactions int64   `json:"logged_transactions"`          // its lines in the per-transaction log
	LastTxAt     float64 `json:"last_tx_at_seconds,omitempty"` // its last logged transaction, after the run's first
}

var reAbortClient = regexp.MustCompile(`client (\d+) .*aborted`)

// abortDetails matches pgbench's abort messages with the per-transaction
// log (l may be nil): how many transactions each aborted client completed
// and when its last one ended.
func abortDetails(messages []string, l *txLog) []clientAbort {
	var out []clientAbort
	for _, m := range messages {
		sm := reAbortClient.FindStringSubmatch(m)
		if sm == nil {
			continue
		}
		a := clientAbort{Message: m}
		a.Client, _ = strconv.Atoi(sm[1])
		if l != nil {
			if c := l.clients[a.Client]; c != nil {
				a.Transactions = c.n
				a.LastTxAt = float64(c.lastUs-l.firstUs) / 1e6
			}
		}
		out = append(out, a)
	}
	return out
}

// note records a line of client at time us (0: unknown).
func (l *txLog) note(client int, us int64) {
	if l.clients == nil {
		l.clients = map[int]*clientTxs{}
	}
	c := l.clients[client]
	if c == nil {
		c = &clientTxs{}
		l.clients[client] = c
	}
	c.n++
	if us > 0 {
		c.lastUs = max(c.lastUs, us)
		if l.firstUs == 0 || us < l.firstUs {
			l.firstUs = us
		}
	}
}

// parseTxLog adds the lines of one pgbench per-transaction log to l. Each line
// is "client_id transaction_no time script_no time_epoch time_us [...]"; the
// third field is the transaction's latency in microseconds, or "failed" or
// "skipped".
func (l *txLog) parse(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		l.Lines++
		f := strings.Fields(line)
		if len(f) < 3 {
			l.Malformed++
			continue
		}
		if client, err := strconv.Atoi(f[0]); err == nil {
			var at int64
			if len(f) >= 6 {
				sec, err1 := strconv.ParseInt(f[4], 10, 64)
				us, err2 := strconv.ParseInt(f[5], 10, 64)
				if err1 == nil && err2 == nil {
					at = sec*1e6 + us
				}
			}
			l.note(client, at)
		}
		switch f[2] {
		case "failed":
			l.Failed++
			continue
		case "skipped":
			l.Skipped++
			continue
		}
		us, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil || us < 0 {
			l.Malformed++
			continue
		}
		l.OK++
		l.latencies = append(l.latencies, us)
	}
	return sc.Err()
}

// readTxLogs reads every file in dir whose name starts with prefix (pgbench
// writes prefix.<pid> for its first thread and prefix.<pid>.<n> for others).
func readTxLogs(dir, prefix string) (*txLog, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	l := &txLog{}
	for _, e := range ents {
		if e.IsDir() || !strings.HasPrefix(e.Name(), prefix+".") {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		err = l.parse(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.Name(), err)
		}
		l.Files++
	}
	if l.Files == 0 {
		return nil, fmt.Errorf("no per-transaction log files %s.* in %s", prefix, dir)
	}
	return l, nil
}

// latencyStats are latencies in microseconds.
type latencyStats struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean_us"`
	Min   int64   `json:"min_us"`
	P50   int64   `json:"p50_us"`
	P95   int64   `json:"p95_us"`
	P99   int64   `json:"p99_us"`
	P999  int64   `json:"p99_9_us"`
	Max   int64   `json:"max_us"`
}

// stats sorts the latencies and computes the percentiles.
func (l *txLog) stats() latencyStats {
	return computeLatencyStats(l.latencies)
}

// computeLatencyStats sorts v in place and summarises it.
func computeLatencyStats(v []int64) latencyStats {
	if len(v) == 0 {
		return latencyStats{}
	}
	sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
	var sum float64
	for _, x := range v {
		sum += float64(x)
	}
	return latencyStats{Count: int64(len(v)), Mean: sum / float64(len(v)), Min: v[0], Max: v[len(v)-1],
		P50: percentile(v, 50), P95: percentile(v, 95), P99: percentile(v, 99), P999: percentile(v, 99.9)}
}

// percentile is the nearest-rank percentile of sorted values: the smallest
// value such that at least p percent of the values are at or below it.
func percentile(sorted []int64, p float64) int64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if p <= 0 {
		return sorted[0]
	}
	// Round the rank to 1e-9 first so 99.9% of 1000 is rank 999, not 1000
	// through floating-point error.
	rank := int(math.Ceil(math.Round(p/100*float64(n)*1e9) / 1e9))
	if rank < 1 {
		rank = 1
	}
	if rank > n {
		rank = n
	}
	return sorted[rank-1]
}
