package bench

import (
	"bufio"
	"bytes"
	"math"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

func TestParsePointsAndRamp(t *testing.T) {
	p, err := ParsePoints(" 1000, 5_000,,200 ")
	if err != nil || !reflect.DeepEqual(p, []int{1000, 5000, 200}) {
		t.Fatalf("ParsePoints = %v, %v", p, err)
	}
	if p, err := ParsePoints(""); err != nil || p != nil {
		t.Fatalf("ParsePoints(\"\") = %v, %v", p, err)
	}
	for _, bad := range []string{"0", "-3", "x"} {
		if _, err := ParsePoints(bad); err == nil {
			t.Errorf("ParsePoints(%q): no error", bad)
		}
	}
	got := idleRampPoints([]int{5000, 1000, 1000, 10000, 20000}, 10000)
	if want := []int{1000, 5000, 10000}; !reflect.DeepEqual(got, want) {
		t.Errorf("idleRampPoints = %v, want %v", got, want)
	}
	if got := idleRampPoints(nil, 7); !reflect.DeepEqual(got, []int{7}) {
		t.Errorf("idleRampPoints(nil, 7) = %v", got)
	}
}

func TestIdleParseStatusAndSmaps(t *testing.T) {
	status := "Name:\tpgfleet\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\nRssAnon:\t   90000 kB\n" +
		"RssFile:\t   12400 kB\nVmData:\t  300000 kB\nThreads:\t7\n"
	m := idleParseStatus([]byte(status))
	want := idleMem{VmRSS: 102400 << 10, VmHWM: 204800 << 10, RssAnon: 90000 << 10, RssFile: 12400 << 10,
		VmData: 300000 << 10, Threads: 7}
	if m != want {
		t.Fatalf("idleParseStatus = %+v, want %+v", m, want)
	}
	rollup := "00400000-7fff0000 ---p 00000000 00:00 0 [rollup]\nRss:              102000 kB\nPss:               101000 kB\n" +
		"Pss_Anon:           90000 kB\nAnonymous:          89000 kB\n"
	idleParseSmaps([]byte(rollup), &m)
	if m.SmapsRss != 102000<<10 || m.SmapsPss != 101000<<10 || m.SmapsAnon != 89000<<10 {
		t.Fatalf("idleParseSmaps: %+v", m)
	}
}

func TestIdleOpenFilesLimit(t *testing.T) {
	limits := "Limit                     Soft Limit           Hard Limit           Units     \n" +
		"Max processes             unlimited            unlimited            processes \n" +
		"Max open files            20000                20000                files     \n"
	if n := idleOpenFilesLimit([]byte(limits)); n != 20000 {
		t.Errorf("idleOpenFilesLimit = %d", n)
	}
	if n := idleOpenFilesLimit([]byte("Max open files            unlimited  unlimited  files\n")); n != 0 {
		t.Errorf("unlimited = %d", n)
	}
	if n := idleOpenFilesLimit(nil); n != -1 {
		t.Errorf("missing = %d", n)
	}
}

func TestIdleParseGCLine(t *testing.T) {
	line := "gc 12 @34.567s 1%: 0.021+3.1+0.004 ms clock, 0.042+0.51/2.9/0+0.009 ms cpu, 180->182->95 MB, 190 MB goal, 3 MB stacks, 0 MB globals, 2 P"
	g, ok := idleParseGCLine(line)
	if !ok {
		t.Fatal("not parsed")
	}
	want := idleGC{Num: 12, AtSeconds: 34.567, HeapStart: 180, HeapEnd: 182, HeapLive: 95, Goal: 190, Stacks: 3, Line: line}
	if g != want {
		t.Fatalf("idleParseGCLine = %+v, want %+v", g, want)
	}
	g, ok = idleParseGCLine(line + " (forced)")
	if !ok || !g.Forced {
		t.Fatalf("forced: %+v %v", g, ok)
	}
	if _, ok := idleParseGCLine(`time=2026 level=INFO msg="coordinator ready"`); ok {
		t.Error("a log line parsed as a GC line")
	}
	lines := idleNonGCLines("gc 1 @0.1s 0%: x\nlevel=INFO msg=ready\ngc 2 @0.2s 0%: y")
	if !reflect.DeepEqual(lines, []string{"level=INFO msg=ready"}) {
		t.Errorf("idleNonGCLines = %q", lines)
	}
}

func TestIdlePromValues(t *testing.T) {
	text := "# HELP pgfleet_client_connections Client connections.\n# TYPE pgfleet_client_connections gauge\n" +
		"pgfleet_client_connections 10000\n" +
		"pgfleet_server_connections{worker=\"127.0.0.1:5432\"} 7\n" +
		"pgfleet_server_connections{worker=\"127.0.0.1:5433\"} 1\n" +
		"pgfleet_server_connections_dropped_total{worker=\"127.0.0.1:5432\"} 3\n"
	got := idlePromValues(text, "pgfleet_client_connections", "pgfleet_server_connections")
	want := map[string]float64{"pgfleet_client_connections": 10000, "pgfleet_server_connections": 8}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("idlePromValues = %v, want %v", got, want)
	}
}

func TestIdleSlopeAndPerClient(t *testing.T) {
	x := []float64{1000, 5000, 10000}
	y := []float64{100e6 + 12000*1000, 100e6 + 12000*5000, 100e6 + 12000*10000}
	if s := idleSlope(x, y); math.Abs(s-12000) > 1e-6 {
		t.Errorf("idleSlope = %v, want 12000", s)
	}
	if s := idleSlope([]float64{1}, []float64{2}); s != 0 {
		t.Errorf("one point: %v", s)
	}
	if s := idleSlope([]float64{3, 3}, []float64{1, 2}); s != 0 {
		t.Errorf("same x: %v", s)
	}
	first := idleSample{Clients: 0, Mem: idleMem{VmRSS: 50 << 20}, LastGC: &idleGC{HeapLive: 10}}
	prev := idleSample{Clients: 1000, Mem: idleMem{VmRSS: 50<<20 + 16000*1000}}
	s := idleSample{Clients: 5000, Mem: idleMem{VmRSS: 50<<20 + 16000*1000 + 8000*4000}, LastGC: &idleGC{HeapLive: 30}}
	idlePerClient(&s, first, prev)
	if s.PerClient == nil || *s.PerClient != float64(16000*1000+8000*4000)/5000 {
		t.Errorf("PerClient = %v", s.PerClient)
	}
	if s.Marginal == nil || *s.Marginal != 8000 {
		t.Errorf("Marginal = %v", s.Marginal)
	}
	if s.HeapPerClient == nil || *s.HeapPerClient != float64(20<<20)/5000 {
		t.Errorf("HeapPerClient = %v", s.HeapPerClient)
	}
}

func TestIdleNofileLimit(t *testing.T) {
	cases := []struct {
		cur  syscall.Rlimit
		need uint64
		root bool
		want syscall.Rlimit
		ok   bool
	}{
		{syscall.Rlimit{Cur: 1024, Max: 20000}, 10256, false, syscall.Rlimit{Cur: 20000, Max: 20000}, true},
		{syscall.Rlimit{Cur: 1024, Max: 4096}, 10256, false, syscall.Rlimit{Cur: 4096, Max: 4096}, false},
		{syscall.Rlimit{Cur: 1024, Max: 4096}, 10256, true, syscall.Rlimit{Cur: 10256, Max: 10256}, true},
		{syscall.Rlimit{Cur: 50000, Max: 50000}, 10256, true, syscall.Rlimit{Cur: 50000, Max: 50000}, true},
	}
	for _, c := range cases {
		got, ok := idleNofileLimit(c.cur, c.need, c.root)
		if got != c.want || ok != c.ok {
			t.Errorf("idleNofileLimit(%+v, %d, %v) = %+v, %v; want %+v, %v", c.cur, c.need, c.root, got, ok, c.want, c.ok)
		}
	}
}

func TestIdleSourceIP(t *testing.T) {
	if ip := idleSourceIP(19999); ip != nil {
		t.Errorf("idleSourceIP(19999) = %s, want nil (the kernel's choice)", ip)
	}
	for i, want := range map[int]string{20000: "127.0.0.2", 45000: "127.0.0.3", 65536*20000 - 1: "127.1.0.0"} {
		if got := idleSourceIP(i).String(); got != want {
			t.Errorf("idleSourceIP(%d) = %s, want %s", i, got, want)
		}
	}
}

func TestIdleMessages(t *testing.T) {
	sm := idleStartupMsg("user", "postgres", "database", "postgres")
	want := "\x00\x00\x00\x29\x00\x03\x00\x00user\x00postgres\x00database\x00postgres\x00\x00"
	if string(sm) != want {
		t.Errorf("idleStartupMsg = %q, want %q", sm, want)
	}
	if q := idleQueryMsg("SELECT 1"); string(q) != "Q\x00\x00\x00\x0dSELECT 1\x00" {
		t.Errorf("idleQueryMsg = %q", q)
	}

	// AuthenticationOk, ParameterStatus, BackendKeyData, ReadyForQuery.
	var in bytes.Buffer
	in.WriteString("R\x00\x00\x00\x08\x00\x00\x00\x00")
	in.WriteString("S\x00\x00\x00\x11TimeZone\x00UTC\x00")
	in.WriteString("K\x00\x00\x00\x0c\x00\x00\x00\x01\x00\x00\x00\x02")
	in.WriteString("Z\x00\x00\x00\x05I")
	n, err := idleReadUntilReady(bufio.NewReader(&in))
	if err != nil || n != 4 {
		t.Fatalf("idleReadUntilReady = %d, %v", n, err)
	}
	// A SCRAM request is refused: the benchmark uses trust.
	_, err = idleReadUntilReady(bufio.NewReader(strings.NewReader("R\x00\x00\x00\x08\x00\x00\x00\x0a")))
	if err == nil || !strings.Contains(err.Error(), "trust") {
		t.Errorf("SASL request: %v", err)
	}
	// A FATAL ends the exchange with its text.
	body := "SFATAL\x00C53300\x00Msorry, too many clients already\x00\x00"
	msg := append([]byte{'E', 0, 0, 0, byte(len(body) + 4)}, body...)
	_, err = idleReadUntilReady(bufio.NewReader(bytes.NewReader(msg)))
	if err == nil || err.Error() != "FATAL 53300: sorry, too many clients already" {
		t.Errorf("FATAL: %v", err)
	}
	// An ERROR is reported at ReadyForQuery.
	body = "SERROR\x00C42601\x00Msyntax error\x00\x00"
	msg = append([]byte{'E', 0, 0, 0, byte(len(body) + 4)}, body...)
	msg = append(msg, "Z\x00\x00\x00\x05I"...)
	n, err = idleReadUntilReady(bufio.NewReader(bytes.NewReader(msg)))
	if err == nil || n != 2 || !strings.Contains(err.Error(), "42601") {
		t.Errorf("ERROR: %d, %v", n, err)
	}
}

func TestIdleCatalogQuery(t *testing.T) {
	if !idleCatalogQuery("SELECT version FROM pgfleet.catalog_version") {
		t.Error("catalog poll not recognised")
	}
	if idleCatalogQuery("SELECT 1") || idleCatalogQuery("RESET ALL") {
		t.Error("pooled connection's query taken for the catalog's")
	}
}

func TestIdleMarkdown(t *testing.T) {
	v := func(f float64) *float64 { return &f }
	met := false
	rep := &idleReport{Options: idleRepOpts{Clients: 2000, PoolSize: 8, Query: true, Settle: 5, TargetBytes: 16384},
		Samples: []idleSample{
			{Label: "before", Mem: idleMem{VmRSS: 40 << 20}},
			{Label: "1000 clients", Clients: 1000, Mem: idleMem{VmRSS: 60 << 20}, PerClient: v(20971.52), Marginal: v(20971.52),
				Worker: &idleWorkerConns{Total: 9, Pool: 8, Catalog: 1}, Metrics: map[string]float64{"pgfleet_server_connections": 8}},
			{Label: "2000 clients", Clients: 2000, Mem: idleMem{VmRSS: 80 << 20}, PerClient: v(20971.52), Marginal: v(20971.52)},
		},
		Slope: v(20971.52), PerClient: v(20971.52), TargetMet: &met}
	md := rep.markdown("idle-x.json")
	for _, want := range []string{"**missed**", "20972 B per client at 2000 clients", "| 1000 clients | 1000 | 60.0 MiB |",
		"9 (8 pooled, 1 catalog)", "+40.0 MiB", "idle-x.json"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}
