package bench

import (
	"reflect"
	"strings"
	"testing"
)

const pg15Output = `pgbench (15.18 (Debian 15.18-0+deb12u1))
transaction type: <builtin: select only>
scaling factor: 5
query mode: prepared
number of clients: 32
number of threads: 2
maximum number of tries: 1
duration: 10 s
number of transactions actually processed: 198823
number of failed transactions: 0 (0.000%)
latency average = 1.604 ms
initial connection time = 23.114 ms
tps = 19950.421337 (without initial connection time)
`

const pg15Aborted = `pgbench (15.18 (Debian 15.18-0+deb12u1))
transaction type: <builtin: select only>
scaling factor: 5
query mode: extended
number of clients: 32
number of threads: 2
maximum number of tries: 1
duration: 3 s
number of transactions actually processed: 8
number of failed transactions: 3 (27.273%)
latency average = 252852.676 ms
initial connection time = 9.189 ms
tps = 0.126556 (without initial connection time)
`

const pg15AbortedStderr = `pgbench: error: FATAL:  query_wait_timeout
server closed the connection unexpectedly
pgbench: error: client 5 aborted in command 1 (SQL) of script 0; SQL command send failed
pgbench: error: client 19 aborted in command 1 (SQL) of script 0; SQL command send failed
pgbench: error: Run was aborted; the above results are incomplete.
`

const pg13Output = `starting vacuum...end.
transaction type: <builtin: select only>
scaling factor: 1
query mode: simple
number of clients: 4
number of threads: 1
duration: 5 s
number of transactions actually processed: 50000
latency average = 0.400 ms
latency stddev = 0.120 ms
tps = 9990.000000 (including connections establishing)
tps = 10000.500000 (excluding connections establishing)
`

func TestParsePgbenchOutput(t *testing.T) {
	tests := []struct {
		name           string
		stdout, stderr string
		want           pgbenchSummary
		wantErr        bool
	}{
		{
			name:   "pg15",
			stdout: pg15Output,
			want: pgbenchSummary{TPS: 19950.421337, LatencyAvgMs: 1.604, InitialConnMs: 23.114, Transactions: 198823,
				FailedReported: true, Clients: 32, Threads: 2, QueryMode: "prepared",
				TransactionType: "<builtin: select only>", ScalingFactor: 5},
		},
		{
			name:   "pg15 aborted clients",
			stdout: pg15Aborted, stderr: pg15AbortedStderr,
			want: pgbenchSummary{TPS: 0.126556, LatencyAvgMs: 252852.676, InitialConnMs: 9.189, Transactions: 8,
				Failed: 3, FailedReported: true, Clients: 32, Threads: 2, QueryMode: "extended",
				TransactionType: "<builtin: select only>", ScalingFactor: 5, AbortedClients: 2, RunAborted: true,
				FirstAbortMessages: []string{
					"pgbench: error: client 5 aborted in command 1 (SQL) of script 0; SQL command send failed",
					"pgbench: error: client 19 aborted in command 1 (SQL) of script 0; SQL command send failed"}},
		},
		{
			name:   "pg13 including and excluding connections",
			stdout: pg13Output,
			want: pgbenchSummary{TPS: 10000.5, TPSIncludingConns: 9990, LatencyAvgMs: 0.4, LatencyStddevMs: 0.12,
				Transactions: 50000, Clients: 4, Threads: 1, QueryMode: "simple",
				TransactionType: "<builtin: select only>", ScalingFactor: 1},
		},
		{
			name:    "connection failure",
			stderr:  "pgbench: error: connection to server at \"127.0.0.1\", port 1 failed: Connection refused\n",
			wantErr: true,
		},
		{name: "empty", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parsePgbenchOutput(tc.stdout, tc.stderr)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if err == nil && !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestTxLogParse(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want txLog
		lat  []int64
	}{
		{
			name: "ok lines",
			in:   "0 1 812 0 1700000000 123456\n1 1 1503 0 1700000000 124000\n0 2 97 0 1700000000 125001\n",
			want: txLog{Lines: 3, OK: 3}, lat: []int64{812, 1503, 97},
		},
		{
			name: "failed skipped and retries columns",
			in:   "0 1 failed 0 1700000000 1\n0 2 skipped 0 1700000000 2 500\n3 9 2000 0 1700000000 3 10 1\n",
			want: txLog{Lines: 3, OK: 1, Failed: 1, Skipped: 1}, lat: []int64{2000},
		},
		{
			name: "malformed and blank lines",
			in:   "\n0 1\nabc def ghi\n0 1 -5 0 0 0\n0 2 40 0 1 2",
			want: txLog{Lines: 4, OK: 1, Malformed: 3}, lat: []int64{40},
		},
		{name: "empty", in: "", want: txLog{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var l txLog
			if err := l.parse(strings.NewReader(tc.in)); err != nil {
				t.Fatal(err)
			}
			lat := l.latencies
			l.latencies, l.clients, l.firstUs = nil, nil, 0
			if !reflect.DeepEqual(l, tc.want) {
				t.Fatalf("got %+v, want %+v", l, tc.want)
			}
			if len(lat) != len(tc.lat) || (len(lat) > 0 && !reflect.DeepEqual(lat, tc.lat)) {
				t.Fatalf("latencies %v, want %v", lat, tc.lat)
			}
		})
	}
}

func seq(n int) []int64 {
	v := make([]int64, n)
	for i := range v {
		v[i] = int64(i + 1)
	}
	return v
}

func TestPercentile(t *testing.T) {
	tests := []struct {
		name   string
		sorted []int64
		p      float64
		want   int64
	}{
		{"empty", nil, 50, 0},
		{"single", []int64{7}, 99.9, 7},
		{"p0 is min", []int64{1, 2, 3}, 0, 1},
		{"p100 is max", []int64{1, 2, 3}, 100, 3},
		{"median of odd", []int64{10, 20, 30}, 50, 20},
		{"median of even is lower middle", []int64{10, 20, 30, 40}, 50, 20},
		{"p50 of 1..100", seq(100), 50, 50},
		{"p95 of 1..100", seq(100), 95, 95},
		{"p99 of 1..100", seq(100), 99, 99},
		{"p99.9 of 1..100 is max", seq(100), 99.9, 100},
		{"p99.9 of 1..1000", seq(1000), 99.9, 999},
		{"p99.9 of 1..10000", seq(10000), 99.9, 9990},
		{"p99 of 1..1000", seq(1000), 99, 990},
		{"rank rounds up", []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 50, 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := percentile(tc.sorted, tc.p); got != tc.want {
				t.Fatalf("percentile(%d values, %v) = %d, want %d", len(tc.sorted), tc.p, got, tc.want)
			}
		})
	}
}

func TestComputeLatencyStats(t *testing.T) {
	tests := []struct {
		name string
		in   []int64
		want latencyStats
	}{
		{"empty", nil, latencyStats{}},
		{"unsorted", []int64{300, 100, 200}, latencyStats{Count: 3, Mean: 200, Min: 100, P50: 200, P95: 300, P99: 300, P999: 300, Max: 300}},
		{"1..1000 reversed", reverse(seq(1000)), latencyStats{Count: 1000, Mean: 500.5, Min: 1, P50: 500, P95: 950, P99: 990, P999: 999, Max: 1000}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := computeLatencyStats(tc.in); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func reverse(v []int64) []int64 {
	for i, j := 0, len(v)-1; i < j; i, j = i+1, j-1 {
		v[i], v[j] = v[j], v[i]
	}
	return v
}

func TestPgbenchErrorLine(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"server error and abort", pg15AbortedStderr,
			"FATAL:  query_wait_timeout / client 5 aborted in command 1 (SQL) of script 0; SQL command send failed"},
		{"connection refused", "pgbench: error: connection to server at \"127.0.0.1\", port 1 failed: Connection refused\n",
			"connection to server at \"127.0.0.1\", port 1 failed: Connection refused"},
		{"only run aborted", "pgbench: error: Run was aborted; the above results are incomplete.\n", ""},
		{"empty", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := pgbenchErrorLine(tc.in); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestAbortDetails(t *testing.T) {
	var l txLog
	log := "0 1 800 0 1700000000 000000\n31 1 900 0 1700000000 500000\n31 2 700 0 1700000002 250000\n0 2 failed 0 1700000003 0\n"
	if err := l.parse(strings.NewReader(log)); err != nil {
		t.Fatal(err)
	}
	msgs := []string{
		"pgbench: error: client 31 script 0 aborted in command 1 query 0: ERROR:  boom",
		"pgbench: error: client 7 aborted in command 1 (SQL) of script 0; SQL command send failed",
		"pgbench: error: Run was aborted; the above results are incomplete.",
	}
	tests := []struct {
		name string
		l    *txLog
		want []clientAbort
	}{
		{"with log", &l, []clientAbort{{Client: 31, Message: msgs[0], Transactions: 2, LastTxAt: 2.25}, {Client: 7, Message: msgs[1]}}},
		{"without log", nil, []clientAbort{{Client: 31, Message: msgs[0]}, {Client: 7, Message: msgs[1]}}},
	}
	for _, tc := range tests {
		if got := abortDetails(msgs, tc.l); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
	if got := abortDetails(nil, &l); got != nil {
		t.Errorf("no messages: %+v", got)
	}
}
