package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseModes(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr string
	}{
		{"prepared,extended,simple", []string{"prepared", "extended", "simple"}, ""},
		{"simple, prepared", []string{"prepared", "simple"}, ""},
		{"extended,extended", []string{"extended"}, ""},
		{"extended,", []string{"extended"}, ""},
		{"", nil, "no pgbench query mode given"},
		{"prepared,fast", nil, `unknown pgbench query mode "fast"`},
	}
	for _, tc := range tests {
		got, err := ParseModes(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseModes(%q) error = %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseModes(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestWorkloadArgs(t *testing.T) {
	tests := []struct {
		workload string
		scale    int
		want     []string
	}{
		{workloadPointSelect, 5, []string{"-f", "/w/point-select.sql", "-D", "naccounts=500000"}},
		{workloadMix, 2, []string{"-f", "/w/hot.sql@80", "-f", "/w/uniform.sql@10", "-f", "/w/tellers.sql@5",
			"-f", "/w/branches.sql@5", "-D", "naccounts=200000", "-D", "hot_pct=5"}},
		{workloadPointSelect, 100, []string{"-f", "/w/point-select.sql", "-D", "naccounts=10000000"}},
	}
	for _, tc := range tests {
		if got := workloadArgs(tc.workload, "/w", tc.scale); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("workloadArgs(%s, %d) = %v, want %v", tc.workload, tc.scale, got, tc.want)
		}
	}
}

func TestWriteWorkloadsHasEveryScript(t *testing.T) {
	dir := t.TempDir()
	if err := writeWorkloads(dir); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{workloadPointSelect, workloadMix} {
		for _, a := range workloadArgs(w, dir, 1) {
			if !strings.HasPrefix(a, dir) {
				continue
			}
			path, _, _ := strings.Cut(a, "@")
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%s: %v", w, err)
			}
			if !strings.Contains(string(b), "SELECT") || !strings.Contains(string(b), ":naccounts") {
				t.Errorf("%s does not look like a pgbench script over :naccounts:\n%s", path, b)
			}
		}
	}
}

func TestRouterConfigs(t *testing.T) {
	key := func(cs []routerConfig) []string {
		var out []string
		for _, c := range cs {
			out = append(out, configKey(c.Target, c.Workload, c.Mode, c.Variant))
		}
		return out
	}
	tests := []struct {
		modes []string
		want  []string
	}{
		{[]string{modePrepared, modeExtended, modeSimple}, []string{
			"direct/point-select/prepared", "direct/point-select/extended", "direct/point-select/simple",
			"pgfleet/point-select/prepared", "pgfleet/point-select/extended", "pgfleet/point-select/simple",
			"pgbouncer-session/point-select/prepared", "pgbouncer-transaction/point-select/extended",
			"direct/citus-mix/prepared", "direct/citus-mix/extended", "direct/citus-mix/simple",
			"pgfleet/citus-mix/prepared", "pgfleet/citus-mix/extended", "pgfleet/citus-mix/simple",
			"pgbouncer-session/citus-mix/prepared", "pgbouncer-transaction/citus-mix/extended"}},
		{[]string{modeSimple}, []string{"direct/point-select/simple", "pgfleet/point-select/simple",
			"direct/citus-mix/simple", "pgfleet/citus-mix/simple"}},
		{[]string{modeExtended}, []string{"direct/point-select/extended", "pgfleet/point-select/extended",
			"pgbouncer-transaction/point-select/extended", "direct/citus-mix/extended", "pgfleet/citus-mix/extended",
			"pgbouncer-transaction/citus-mix/extended"}},
	}
	for _, tc := range tests {
		o := DefaultRouterOptions()
		o.Modes = tc.modes
		if got := key(mainConfigs(o)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("mainConfigs(%v) =\n%v\nwant\n%v", tc.modes, got, tc.want)
		}
	}
}

func TestRouterConfigsTargetsAndLadder(t *testing.T) {
	o := DefaultRouterOptions()
	o.Modes, o.Workloads = []string{modeExtended}, []string{workloadWrite, workloadScatter}
	o.Targets = []URLTarget{{Name: "citus", URL: "postgres://x@h/db"}}
	o.Workers, o.Coordinators = []int{1, 2}, []int{1, 3}
	var got []string
	for _, c := range mainConfigs(o) {
		got = append(got, configKey(c.Target, c.Workload, c.Mode, c.Variant))
	}
	want := []string{"direct/write/extended", "pgfleet/write/extended", "url:citus/write/extended",
		"direct/scatter/extended", "pgfleet/scatter/extended", "url:citus/scatter/extended"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("mainConfigs = %v, want %v", got, want)
	}
	var ladder []string
	for _, w := range o.Workers {
		for _, c := range ladderConfigs(o, w) {
			ladder = append(ladder, fmt.Sprintf("%s %d/%d", configKey(c.Target, c.Workload, c.Mode, c.Variant), c.Shape.Workers, c.Shape.Coordinators))
		}
	}
	want = []string{"pgfleet/point-select/extended/1w 3c 1/3", "pgfleet/point-select/extended/2w 1c 2/1",
		"pgfleet/point-select/extended/2w 3c 2/3"}
	if !reflect.DeepEqual(ladder, want) {
		t.Errorf("ladder = %v, want %v", ladder, want)
	}
	// tpcb-like's target is across workers: the ladder's first shape
	// with two or more runs it in every mode.
	o.Workloads, o.Modes = []string{workloadTPCB}, []string{modePrepared, modeSimple}
	ladder = nil
	for _, w := range o.Workers {
		for _, c := range ladderConfigs(o, w) {
			if c.Workload == workloadTPCB {
				ladder = append(ladder, fmt.Sprintf("%s %d/%d", configKey(c.Target, c.Workload, c.Mode, c.Variant), c.Shape.Workers, c.Shape.Coordinators))
			}
		}
	}
	want = []string{"pgfleet/tpcb-like/prepared/2w 1c 2/1", "pgfleet/tpcb-like/simple/2w 1c 2/1"}
	if !reflect.DeepEqual(ladder, want) {
		t.Errorf("tpcb-like ladder = %v, want %v", ladder, want)
	}
}

func TestParseFlags(t *testing.T) {
	if got, err := ParseCounts("--workers", "1, 2,4,2"); err != nil || !reflect.DeepEqual(got, []int{1, 2, 4}) {
		t.Errorf("ParseCounts = %v, %v", got, err)
	}
	for _, bad := range []string{"", "0", "1,x", "-1"} {
		if _, err := ParseCounts("--workers", bad); err == nil {
			t.Errorf("ParseCounts(%q): no error", bad)
		}
	}
	if got, err := ParseWorkloads("scatter,point-select"); err != nil || !reflect.DeepEqual(got, []string{workloadPointSelect, workloadScatter}) {
		t.Errorf("ParseWorkloads = %v, %v", got, err)
	}
	if _, err := ParseWorkloads("tpcb"); err == nil || !strings.Contains(err.Error(), "--workloads") {
		t.Errorf("ParseWorkloads(tpcb): %v", err)
	}
	tg, err := ParseURLTarget("citus=postgres://u:pw@10.0.0.1:5432/db?sslmode=disable")
	if err != nil || tg.Name != "citus" || tg.URL != "postgres://u:pw@10.0.0.1:5432/db?sslmode=disable" {
		t.Errorf("ParseURLTarget = %+v, %v", tg, err)
	}
	for _, bad := range []string{"postgres://x", "=postgres://x", "a b=postgres://x", "name="} {
		if _, err := ParseURLTarget(bad); err == nil {
			t.Errorf("ParseURLTarget(%q): no error", bad)
		}
	}
}

func TestRedactURL(t *testing.T) {
	tests := map[string]string{
		"postgres://u:secret@h:5432/db":            "postgres://u:xxxxx@h:5432/db",
		"postgresql://u@h/db":                      "postgresql://u@h/db",
		"host=h password=secret dbname=d":          "host=h password=xxxxx dbname=d",
		"host=h dbname=d password=secret":          "host=h dbname=d password=xxxxx",
		"-c":                                       "-c",
		"postgres://u:p%40ss@h/db?sslmode=require": "postgres://u:xxxxx@h/db?sslmode=require",
	}
	for in, want := range tests {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRouterLabel(t *testing.T) {
	o := DefaultRouterOptions()
	tests := []struct {
		c    routerConfig
		want string
	}{
		{routerConfig{Target: targetDirect}, "direct (db direct)"},
		{routerConfig{Target: targetDirect, Rate: 5000}, "direct (db direct, open loop 5000/s)"},
		{routerConfig{Target: targetPgfleet, Shape: fleetShape{1, 1}}, "pgfleet 1w 1c (32 shards, pool 8)"},
		{routerConfig{Target: targetPgfleet, Shape: fleetShape{2, 3}, Rate: 100}, "pgfleet 2w 3c (32 shards, pool 8, open loop 100/s)"},
		{routerConfig{Target: targetBouncerSess}, "PgBouncer session (pool 32)"},
		{routerConfig{Target: targetBouncerTx}, "PgBouncer transaction (pool 8)"},
		{routerConfig{Target: targetURL("citus")}, "citus (by URL)"},
	}
	for _, tc := range tests {
		if got := routerLabel(tc.c, o); got != tc.want {
			t.Errorf("routerLabel(%+v) = %q, want %q", tc.c, got, tc.want)
		}
	}
}

func TestRouterOptionsValidate(t *testing.T) {
	tests := []struct {
		name    string
		change  func(*RouterOptions)
		wantErr string
	}{
		{"defaults", func(*RouterOptions) {}, ""},
		{"no shards", func(o *RouterOptions) { o.Shards = 0 }, "--shards"},
		{"no workers", func(o *RouterOptions) { o.Workers = []int{0} }, "--workers"},
		{"too many workers", func(o *RouterOptions) { o.Workers = []int{1, 9} }, "--workers"},
		{"more coordinators than clients", func(o *RouterOptions) { o.Clients, o.Jobs, o.Coordinators = 2, 1, []int{3} }, "--coordinators"},
		{"bad workload", func(o *RouterOptions) { o.Workloads = []string{"tpcb"} }, "--workloads"},
		{"negative rate", func(o *RouterOptions) { o.Rate = -1 }, "--rate"},
		{"bad mode", func(o *RouterOptions) { o.Modes = []string{"turbo"} }, "--modes"},
		{"short run", func(o *RouterOptions) { o.Duration = time.Millisecond }, "--duration"},
		{"jobs above clients", func(o *RouterOptions) { o.Clients, o.Jobs = 1, 2 }, "--jobs"},
	}
	for _, tc := range tests {
		o := DefaultRouterOptions()
		tc.change(&o)
		err := o.validate()
		if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s: validate() = %v, want error containing %q", tc.name, err, tc.wantErr)
		}
	}
}

func TestDistributeStatements(t *testing.T) {
	want := []string{
		"SELECT create_distributed_table('pgbench_accounts', 'aid', shard_count => 4)",
		"SELECT create_reference_table('pgbench_branches')",
		"SELECT create_reference_table('pgbench_tellers')",
		"SELECT create_distributed_table('pgbench_history', 'aid', colocate_with => 'pgbench_accounts')",
	}
	if got := distributeStatements(4); !reflect.DeepEqual(got, want) {
		t.Fatalf("distributeStatements(4) = %q", got)
	}
}

func TestPgbenchRunArgv(t *testing.T) {
	tests := []struct {
		name   string
		script []string
		rate   float64
		conn   []string
		want   string
	}{
		{"relay", []string{"-S"}, 0, hostConn("127.0.0.1", 5432, "postgres"), "pgbench -n -S -M prepared -c 32 -j 2 -T 10 --log --log-prefix=/l/p -h 127.0.0.1 -p 5432 -U postgres postgres"},
		{"router", []string{"-f", "a.sql", "-D", "naccounts=1"}, 0, hostConn("127.0.0.1", 5432, "postgres"), "pgbench -n -f a.sql -D naccounts=1 -M prepared -c 32 -j 2 -T 10 --log --log-prefix=/l/p -h 127.0.0.1 -p 5432 -U postgres postgres"},
		{"open loop, URL", []string{"-S"}, 2500.04, []string{"postgres://h/db"}, "pgbench -n -S -M prepared -c 32 -j 2 -T 10 -R 2500.0 --log --log-prefix=/l/p postgres://h/db"},
	}
	for _, tc := range tests {
		got := strings.Join(pgbenchRunArgv("pgbench", tc.script, "prepared", 32, 2, 10, tc.rate, "/l/p", tc.conn), " ")
		if got != tc.want {
			t.Errorf("%s: %s\nwant %s", tc.name, got, tc.want)
		}
	}
}

func TestSplitEven(t *testing.T) {
	for _, tc := range []struct {
		n, k int
		want []int
	}{{32, 1, []int{32}}, {32, 3, []int{11, 11, 10}}, {2, 2, []int{1, 1}}, {5, 2, []int{3, 2}}} {
		if got := splitEven(tc.n, tc.k); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("splitEven(%d, %d) = %v, want %v", tc.n, tc.k, got, tc.want)
		}
	}
}

func TestSummaryAdd(t *testing.T) {
	a := pgbenchSummary{TPS: 100, Transactions: 1000, LatencyAvgMs: 1, Failed: 1, FailedReported: true, Clients: 16, Threads: 1,
		AbortedClients: 1, FirstAbortMessages: []string{"client 3 aborted"}}
	b := pgbenchSummary{TPS: 300, Transactions: 3000, LatencyAvgMs: 3, FailedReported: true, Clients: 16, Threads: 1, InitialConnMs: 5}
	a.add(b)
	want := pgbenchSummary{TPS: 400, Transactions: 4000, LatencyAvgMs: 2.5, Failed: 1, FailedReported: true, Clients: 32, Threads: 2,
		InitialConnMs: 5, AbortedClients: 1, FirstAbortMessages: []string{"client 3 aborted"}}
	if !reflect.DeepEqual(a, want) {
		t.Errorf("add = %+v\nwant %+v", a, want)
	}
}

func TestHalfPeakTarget(t *testing.T) {
	mk := func(target string, p99 float64) *configResult {
		r := run(1000, "")
		r.Latency.P99 = int64(p99 * 1000)
		return &configResult{relayConfig: relayConfig{Target: target, Mode: modePrepared}, Workload: workloadPointSelect,
			Variant: "rate 5000", Rate: 5000, Label: target, Runs: []runResult{r}}
	}
	for _, tc := range []struct {
		fleet, bouncer, direct float64
		want                   string
	}{{2.5, 3.0, 1.7, targetMet}, {3.0, 3.0, 1.7, targetMet}, {3.0, 2.5, 1.7, targetMissed}, {2.5, 0, 1.7, targetNA},
		// Direct's p99 above the proxies' (a stall of the machine): what
		// each adds is its p99 less direct's, so the comparison stands.
		{8.9, 15.2, 190.9, targetMet}, {8.9, 1.0, 5.0, targetMissed}} {
		crs := []*configResult{mk(targetDirect, tc.direct), mk(targetPgfleet, tc.fleet)}
		if tc.bouncer > 0 {
			crs = append(crs, mk(targetBouncerSess, tc.bouncer))
		}
		var got []targetCheck
		for _, c := range evaluateTargets(buildRows(crs), []string{modePrepared}, []string{workloadPointSelect}) {
			if strings.Contains(c.Target, "half of peak") {
				got = append(got, c)
			}
		}
		if len(got) != 1 || got[0].Status != tc.want || (got[0].Ratio == nil) != (tc.bouncer == 0) {
			t.Errorf("fleet p99 %.1f, PgBouncer %.1f, direct %.1f: %+v, want one check %s", tc.fleet, tc.bouncer, tc.direct, got, tc.want)
		}
	}
}

func TestScatterAndTPCBTargets(t *testing.T) {
	row := func(target, workload, mode, variant string, workers int, qps, workerCPU float64, failed int64) *tableRow {
		return &tableRow{Target: target, Workload: workload, Mode: mode, Variant: variant, Workers: workers, OK: true,
			QPS: qps, WorkerCPU: workerCPU, Failed: failed}
	}
	rows := []*tableRow{
		row(targetDirect, workloadScatter, modePrepared, "", 1, 3000, 600, 0),
		row(targetPgfleet, workloadScatter, modePrepared, "", 1, 1600, 800, 0), // 0.53 met, 1.33 met
		row(targetDirect, workloadScatter, modeExtended, "", 1, 3000, 600, 0),
		row(targetPgfleet, workloadScatter, modeExtended, "", 1, 1400, 1000, 0), // 0.47 missed, 1.67 missed
		row(targetDirect, workloadTPCB, modePrepared, "", 1, 2000, 900, 0),
		row(targetPgfleet, workloadTPCB, modePrepared, "", 1, 1900, 900, 0),      // one worker: not the target's
		row(targetPgfleet, workloadTPCB, modePrepared, "2w 1c", 2, 1100, 900, 0), // 0.55 met
		row(targetDirect, workloadTPCB, modeExtended, "", 1, 2000, 900, 0),       //
		row(targetPgfleet, workloadTPCB, modeExtended, "2w 1c", 2, 1100, 900, 3), // 0.55 but 3 failed: missed
		row(targetDirect, workloadTPCB, modeSimple, "", 1, 2000, 900, 0),         // no fleet run across workers: n/a
	}
	got := map[string]string{}
	for _, c := range evaluateTargets(rows, []string{modePrepared, modeExtended, modeSimple}, []string{workloadScatter, workloadTPCB}) {
		got[c.Target+" "+c.Workload+" "+c.Mode] = c.Status
	}
	want := map[string]string{
		"scatter throughput ≥ 0.5× direct's on one table scatter prepared":                        targetMet,
		"scatter worker CPU/query ≤ 1.5× direct's scatter prepared":                               targetMet,
		"scatter throughput ≥ 0.5× direct's on one table scatter extended":                        targetMissed,
		"scatter worker CPU/query ≤ 1.5× direct's scatter extended":                               targetMissed,
		"scatter throughput ≥ 0.5× direct's on one table scatter simple":                          targetNA,
		"scatter worker CPU/query ≤ 1.5× direct's scatter simple":                                 targetNA,
		"tpcb-like across workers ≥ 0.5× direct's TPS on one worker, 0 failed tpcb-like prepared": targetMet,
		"tpcb-like across workers ≥ 0.5× direct's TPS on one worker, 0 failed tpcb-like extended": targetMissed,
		"tpcb-like across workers ≥ 0.5× direct's TPS on one worker, 0 failed tpcb-like simple":   targetNA,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("targets:\n%v\nwant\n%v", got, want)
	}
}

func TestDurationSeconds(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int
	}{{time.Second, 1}, {1500 * time.Millisecond, 2}, {10 * time.Second, 10}, {0, 0}} {
		if got := durationSeconds(tc.d); got != tc.want {
			t.Errorf("durationSeconds(%s) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

func TestBouncerIniDatabases(t *testing.T) {
	c := bouncerConfig{PoolMode: "session", PoolSize: 32, Port: 6000, WorkerPort: 5000, QueryTimeout: time.Minute}
	plain := c.iniText("/a")
	if !strings.HasPrefix(plain, "[databases]\npostgres = host=127.0.0.1 port=5000 dbname=postgres user=postgres\n\n[pgbouncer]\n") {
		t.Errorf("without extra databases:\n%s", plain)
	}
	c.Databases = []string{"direct", "postgres"}
	ini := c.iniText("/a")
	for _, want := range []string{"postgres = host=127.0.0.1 port=5000 dbname=postgres user=postgres\n",
		"direct = host=127.0.0.1 port=5000 dbname=direct user=postgres\n", "pool_mode = session\n", "listen_port = 6000\n"} {
		if !strings.Contains(ini, want) {
			t.Errorf("ini lacks %q:\n%s", want, ini)
		}
	}
	if strings.Count(ini, "dbname=postgres") != 1 {
		t.Errorf("postgres listed twice:\n%s", ini)
	}
}

func TestLogProblemsFrom(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pg.log")
	before := "2026-11-29 22:42:25.562 UTC [1] FATAL:  the database system is starting up\n"
	after := "2026-11-29 22:42:26.000 UTC [2] LOG:  checkpoint starting\n2026-11-29 22:42:27.000 UTC [3] ERROR:  relation \"x\" does not exist\n"
	if err := os.WriteFile(path, []byte(before+after), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		offset int64
		want   int
	}{{0, 2}, {int64(len(before)), 1}, {int64(len(before + after)), 0}}
	for _, tc := range tests {
		lines, n := logProblemsFrom(path, tc.offset, 10)
		if n != tc.want || len(lines) != tc.want {
			t.Errorf("offset %d: %d problems %q, want %d", tc.offset, n, lines, tc.want)
		}
	}
}

// routerRows builds rows for targets tests: qps, relay CPU and worker CPU of
// each configuration key (target/workload/mode).
func routerRows(figs map[string][3]float64) []*tableRow {
	var configs []*configResult
	for _, c := range mainConfigs(DefaultRouterOptions()) {
		cr := &configResult{relayConfig: relayConfig{Target: c.Target, Mode: c.Mode}, Workload: c.Workload, Label: c.Target}
		if f, ok := figs[configKey(c.Target, c.Workload, c.Mode, "")]; ok {
			r := run(f[0], "")
			r.Target, r.Mode, r.Workload = c.Target, c.Mode, c.Workload
			r.CPU.RelayPerQuery, r.CPU.WorkerPerQuery = f[1], f[2]
			if c.Target != targetDirect {
				r.Relays = []*relayRun{{}}
			}
			cr.Runs = []runResult{r}
		} else {
			cr.Skipped = "not run"
		}
		configs = append(configs, cr)
	}
	return buildRows(configs)
}

func TestBuildRowsWithWorkloads(t *testing.T) {
	rows := routerRows(map[string][3]float64{
		"direct/point-select/prepared":            {1000, 0, 50},
		"pgfleet/point-select/prepared":           {500, 60, 55},
		"pgbouncer-session/point-select/prepared": {400, 30, 60},
		"direct/citus-mix/prepared":               {2000, 0, 40},
		"pgfleet/citus-mix/prepared":              {1000, 50, 44},
	})
	got := map[string]*tableRow{}
	for _, r := range rows {
		got[configKey(r.Target, r.Workload, r.Mode, r.Variant)] = r
	}
	ps, mix := got["pgfleet/point-select/prepared"], got["pgfleet/citus-mix/prepared"]
	if ps.VsDirect == nil || *ps.VsDirect != 0.5 || ps.VsPgbouncer == nil || *ps.VsPgbouncer != 1.25 {
		t.Errorf("point-select row: %+v", ps)
	}
	if mix.VsDirect == nil || *mix.VsDirect != 0.5 || mix.VsPgbouncer != nil { // PgBouncer's mix did not run
		t.Errorf("mix row compares with the wrong references: %+v", mix)
	}
}

func TestEvaluateTargets(t *testing.T) {
	rows := routerRows(map[string][3]float64{
		"direct/point-select/prepared":                {1000, 0, 50},
		"pgfleet/point-select/prepared":               {500, 60, 55}, // worker 1.10x: met at the limit
		"pgbouncer-session/point-select/prepared":     {400, 30, 60}, // coordinator QPS 1.25x met, CPU 2x missed
		"direct/point-select/extended":                {800, 0, 100},
		"pgfleet/point-select/extended":               {700, 40, 120}, // worker 1.2x missed
		"pgbouncer-transaction/point-select/extended": {600, 50, 90},  // QPS 1.17: missed (1.3 wanted)
		"direct/citus-mix/prepared":                   {2000, 0, 40},
		// pgfleet citus-mix prepared did not run: n/a
		"pgfleet/point-select/simple": {300, 70, 80}, // no direct simple: n/a
	})
	checks := evaluateTargets(rows, []string{modePrepared, modeExtended, modeSimple}, []string{workloadPointSelect, workloadMix})
	got := map[string]string{}
	for _, c := range checks {
		got[c.Target+" "+c.Workload+" "+c.Mode] = c.Status
	}
	want := map[string]string{
		"coordinator throughput ≥ PgBouncer session's point-select prepared":          targetMet,
		"coordinator CPU/query ≤ PgBouncer session's point-select prepared":           targetMissed,
		"coordinator throughput ≥ 1.3× PgBouncer transaction's point-select extended": targetMissed,
		"worker CPU per routed query ≤ 1.1× direct's point-select prepared":           targetMet,
		"worker CPU per routed query ≤ 1.1× direct's point-select extended":           targetMissed,
		"worker CPU per routed query ≤ 1.1× direct's point-select simple":             targetNA,
		"worker CPU per routed query ≤ 1.1× direct's citus-mix prepared":              targetNA,
		"worker CPU per routed query ≤ 1.1× direct's citus-mix extended":              targetNA,
		"worker CPU per routed query ≤ 1.1× direct's citus-mix simple":                targetNA,
		"coordinator throughput ≥ PgBouncer session's citus-mix prepared":             targetNA,
		"coordinator CPU/query ≤ PgBouncer session's citus-mix prepared":              targetNA,
		"coordinator throughput ≥ 1.3× PgBouncer transaction's citus-mix extended":    targetNA,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("targets:\n%v\nwant\n%v", got, want)
	}
	if len(checks) != len(want) {
		t.Errorf("%d checks, want %d", len(checks), len(want))
	}
	for _, c := range checks {
		if c.Status == targetNA && (c.Ratio != nil || c.Detail == "") {
			t.Errorf("n/a check %+v: want no ratio and a reason", c)
		}
		if c.Status != targetNA && (c.Ratio == nil || !strings.Contains(c.Detail, "coordinator")) {
			t.Errorf("check %+v: want a ratio and the figures", c)
		}
	}
}

func TestCompareTargetZeroReference(t *testing.T) {
	coord := &tableRow{OK: true, QPS: 10}
	ref := &tableRow{OK: true, QPS: 0}
	c := compareTarget(targetCheck{}, coord, ref, "direct", true, 1,
		func(r *tableRow) (float64, bool) { return r.QPS, true }, "%.0f")
	if c.Status != targetNA || c.Ratio != nil {
		t.Fatalf("zero reference: %+v", c)
	}
}

func TestRouterMarkdown(t *testing.T) {
	rows := routerRows(map[string][3]float64{
		"direct/point-select/prepared":            {1000, 0, 50},
		"pgfleet/point-select/prepared":           {500, 60, 55},
		"pgbouncer-session/point-select/prepared": {400, 30, 60},
	})
	rep := &routerReport{StartedAt: time.Unix(0, 0), Options: routerRepOpts{Scale: 1, Naccounts: 100000, Shards: 32, Workers: []int{1}},
		Data: []*dataCheck{{Workers: 1, Naccounts: 100000, DirectAccounts: 100000, Shards: 32, RoutedAccounts: 100000,
			PerWorker: []shardPlacement{{Worker: "worker1", Shards: 32, Rows: 100000}},
			Reads:     []readCheck{{Rows: 1}, {Rows: 0, Error: "boom"}}}}}
	rep.Targets = evaluateTargets(rows, []string{modePrepared}, []string{workloadPointSelect, workloadMix})
	md := rep.markdown(rows, "r.json", "")
	for _, want := range []string{
		"| config | workload | mode | QPS | vs direct | vs PgBouncer |",
		"| direct | point-select | prepared | 1000 | 1.00 | 2.50 |",
		"| pgfleet | point-select | prepared | 500 | 0.50 | 1.25 |",
		"- [x] **met** — coordinator throughput ≥ PgBouncer session's, point-select prepared: 1.25 (>= 1.00)",
		"- [ ] **missed** — coordinator CPU/query ≤ PgBouncer session's",
		"- [ ] **n/a** — worker CPU per routed query ≤ 1.1× direct's, citus-mix prepared:",
		"routed, 1 worker(s): 100000 accounts in 32 shards (worker1 32 shards / 100000 rows)",
		"| pgfleet | point-select | prepared | 500 | 16667 | 2.16 | 2.56 | 18182 | 5.05 | 2.80 |",
		"1 of 2 returned their one row", "| config | workload | mode | QPS per run |", "r.json",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

func TestRouterMarkdownFailedRuns(t *testing.T) {
	ok1, bad, ok3 := run(900, ""), run(500, "pgbench: exit status 2"), run(1000, "")
	ok1.Run, bad.Run, ok3.Run = 1, 2, 3
	configs := []*configResult{{relayConfig: relayConfig{Target: targetPgfleet, Mode: modeSimple}, Workload: workloadMix,
		Label: "pgfleet router", Runs: []runResult{ok1, bad, ok3}}}
	rows := buildRows(configs)
	if got := rows[0].RunsFailed; !reflect.DeepEqual(got, []int{2}) || rows[0].RunsOK != 2 || rows[0].QPS != 900 {
		t.Fatalf("row %+v", rows[0])
	}
	md := (&routerReport{StartedAt: time.Unix(0, 0)}).markdown(rows, "", "")
	for _, want := range []string{"| 0; 1 of 3 runs failed |", "| 900, 500 (failed), 1000 | 500 | 1000 |"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}
