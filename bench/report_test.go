package bench

import (
	"strings"
	"testing"
	"time"
)

func run(tps float64, errMsg string) runResult {
	r := runResult{Error: errMsg}
	r.Summary.TPS = tps
	if tps > 0 {
		r.Summary.Transactions = int64(tps * 10)
	}
	return r
}

func TestMedianRun(t *testing.T) {
	tests := []struct {
		name string
		runs []runResult
		want int
	}{
		{"none", nil, -1},
		{"one", []runResult{run(100, "")}, 0},
		{"three", []runResult{run(300, ""), run(100, ""), run(200, "")}, 2},
		{"even count takes lower middle", []runResult{run(400, ""), run(100, ""), run(300, ""), run(200, "")}, 3},
		{"failed runs are ignored", []runResult{run(900, "boom"), run(100, ""), run(200, "")}, 1},
		{"all failed", []runResult{run(900, "boom"), run(0, "")}, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := medianRun(tc.runs); got != tc.want {
				t.Fatalf("medianRun = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestBuildRowsRatios(t *testing.T) {
	mk := func(target, mode string, tps float64) *configResult {
		r := run(tps, "")
		r.Target, r.Mode = target, mode
		r.CPU.RelayPerQuery = 12.5
		if target != targetDirect {
			r.Relays = []*relayRun{{}}
		}
		return &configResult{relayConfig: relayConfig{target, mode}, Label: target, Runs: []runResult{r}}
	}
	configs := []*configResult{
		mk(targetDirect, modePrepared, 1000), mk(targetDirect, modeExtended, 800), mk(targetDirect, modeSimple, 500),
		mk(targetPgfleet, modePrepared, 500), mk(targetPgfleet, modeExtended, 400), mk(targetPgfleet, modeSimple, 250),
		mk(targetBouncerSess, modePrepared, 250), mk(targetBouncerTx, modeExtended, 800),
	}
	rows := buildRows(configs)
	f := func(p *float64) float64 {
		if p == nil {
			return -1
		}
		return *p
	}
	tests := []struct {
		i                       int
		vsDirect, vsBouncer, rc float64 // -1: not applicable
	}{
		{0, 1, 4, -1},       // direct prepared vs PgBouncer session
		{1, 1, 1, -1},       // direct extended vs PgBouncer transaction
		{2, 1, -1, -1},      // simple: no PgBouncer reference
		{3, 0.5, 2, 12.5},   // pgfleet prepared
		{4, 0.5, 0.5, 12.5}, // pgfleet extended
		{5, 0.5, -1, 12.5},  // pgfleet simple
		{6, 0.25, 1, 12.5},  // PgBouncer session
		{7, 1, 1, 12.5},     // PgBouncer transaction
	}
	for _, tc := range tests {
		r := rows[tc.i]
		if !r.OK || f(r.VsDirect) != tc.vsDirect || f(r.VsPgbouncer) != tc.vsBouncer || f(r.RelayCPU) != tc.rc {
			t.Errorf("row %d %s/%s: ok %v vs direct %v vs PgBouncer %v relay CPU %v; want %v %v %v", tc.i, r.Target, r.Mode,
				r.OK, f(r.VsDirect), f(r.VsPgbouncer), f(r.RelayCPU), tc.vsDirect, tc.vsBouncer, tc.rc)
		}
	}
}

func TestBuildRowsSkippedAndFailed(t *testing.T) {
	ok := run(1000, "")
	configs := []*configResult{
		{relayConfig: relayConfig{targetDirect, modePrepared}, Label: "direct PostgreSQL", Runs: []runResult{ok}},
		{relayConfig: relayConfig{targetPgfleet, modePrepared}, Runs: []runResult{run(0, "pgbench: exit status 2")}},
		{relayConfig: relayConfig{targetBouncerSess, modePrepared}, Skipped: "PgBouncer not available"},
	}
	rows := buildRows(configs)
	if !rows[0].OK || rows[0].VsPgbouncer != nil {
		t.Fatalf("direct row: %+v", rows[0])
	}
	if rows[1].OK || !strings.Contains(rows[1].Note, "exit status 2") || rows[1].VsDirect != nil {
		t.Fatalf("failed row: %+v", rows[1])
	}
	if rows[2].OK || !strings.Contains(rows[2].Note, "skipped") {
		t.Fatalf("skipped row: %+v", rows[2])
	}
	rep := &relayReport{StartedAt: time.Unix(0, 0), Configs: configs}
	md := rep.markdown(rows, "x.json")
	for _, want := range []string{"| config | mode | QPS | vs direct | vs PgBouncer | p50 ms | p95 ms | p99 ms | p99.9 ms | failed |",
		"| direct PostgreSQL | prepared | 1000 | 1.00 | – |", "skipped: PgBouncer not available", "x.json"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

func TestIsProblemLine(t *testing.T) {
	tests := []struct {
		line string
		want bool
	}{
		{`time=2026-01-01T00:00:00Z level=INFO msg="coordinator ready"`, false},
		{`time=2026-01-01T00:00:00Z level=WARN msg="forwarding cancel request"`, true},
		{`time=2026-01-01T00:00:00Z level=ERROR msg=accept err=x`, true},
		{"2026-11-29 21:56:45.620 UTC [15518] WARNING C-0x55: postgres/postgres pooler error: query_wait_timeout", true},
		{"2026-11-29 21:56:45.620 UTC [15518] LOG stats: 0 xacts/s", false},
		{"panic: runtime error: index out of range", true},
		{"2026-11-29 22:01:13.600 UTC [18300] ERROR:  prepared statement \"P_1\" does not exist", true},
		{"2026-11-29 22:01:13.600 UTC [18300] LOG:  could not receive data from client: Connection reset by peer", false},
		{"2026-11-29 22:01:13.600 UTC [18300] FATAL:  terminating connection due to administrator command", true},
		{"2026-12-03 11:35:07.697 UTC [24281] ERROR:  canceling statement due to user request", false},
		{"2026-12-03 11:35:07.697 UTC [24281] ERROR:  canceling statement due to statement timeout", true},
		{"2026-12-04 11:33:52.773 UTC [13223] ERROR:  canceling autovacuum task", false},
	}
	for _, tc := range tests {
		if got := isProblemLine(tc.line); got != tc.want {
			t.Errorf("isProblemLine(%q) = %v, want %v", tc.line, got, tc.want)
		}
	}
}
