package bench

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"math/rand"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

func TestLatencyCDF(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	random := make([]int64, 100_000)
	for i := range random {
		random[i] = int64(200 + rng.ExpFloat64()*300)
	}
	ramp := make([]int64, 1000)
	for i := range ramp {
		ramp[i] = int64(i + 1)
	}
	dups := make([]int64, 5000)
	for i := range dups {
		dups[i] = int64(100 + i%3*100)
	}
	tests := []struct {
		name      string
		lat       []int64
		maxPoints int
		want      int // expected number of points; -1: any (at least 1)
	}{
		{"empty", nil, 200, 0},
		{"no points wanted", ramp, 0, 0},
		{"one latency", []int64{1500}, 200, 1},
		{"all equal", []int64{7, 7, 7, 7}, 200, 1},
		{"zero latencies", []int64{0, 0, 5}, 200, 2},
		{"three values", dups, 200, 3},
		{"ramp", ramp, 200, -1},
		{"ramp, one point", ramp, 1, 1},
		{"ramp, two points", ramp, 2, 2},
		{"ramp, few points", ramp, 7, -1},
		{"fewer latencies than points", ramp[:50], 200, 50},
		{"random unsorted", random, 200, -1},
		{"random unsorted, 10 points", random, 10, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := slices.Clone(tt.lat)
			got := latencyCDF(in, tt.maxPoints)
			if !slices.Equal(in, tt.lat) {
				t.Fatal("latencyCDF modified its input")
			}
			if tt.want >= 0 && len(got) != tt.want {
				t.Fatalf("got %d points, want %d: %v", len(got), tt.want, got)
			}
			if len(tt.lat) == 0 || tt.maxPoints < 1 {
				return
			}
			if len(got) == 0 || len(got) > tt.maxPoints {
				t.Fatalf("got %d points, want 1 to %d", len(got), tt.maxPoints)
			}
			sorted := slices.Clone(tt.lat)
			slices.Sort(sorted)
			for i, p := range got {
				if i > 0 && (p.Ms <= got[i-1].Ms || p.Frac <= got[i-1].Frac) {
					t.Fatalf("not strictly increasing at %d: %v then %v", i, got[i-1], p)
				}
				// Frac is the share of latencies at or below Ms.
				us := int64(math.Round(p.Ms * 1000))
				atOrBelow := sort.Search(len(sorted), func(k int) bool { return sorted[k] > us })
				if want := float64(atOrBelow) / float64(len(sorted)); p.Frac != want {
					t.Fatalf("point %d %v: fraction at or below is %v", i, p, want)
				}
			}
			last := got[len(got)-1]
			if last.Frac != 1 || last.Ms != float64(sorted[len(sorted)-1])/1000 {
				t.Fatalf("last point %v, want (%v ms, 1)", last, float64(sorted[len(sorted)-1])/1000)
			}
			if tt.maxPoints >= 2 && got[0].Ms != float64(sorted[0])/1000 {
				t.Fatalf("first point %v, want the minimum %v ms", got[0], float64(sorted[0])/1000)
			}
			if len(tt.lat) >= 1000 && tt.maxPoints >= 200 && len(got) >= 10 {
				// The tail is covered: a point at or beyond p99.
				var p99 bool
				for _, p := range got[:len(got)-1] {
					p99 = p99 || p.Frac >= 0.99
				}
				if !p99 {
					t.Fatalf("no point in the tail (fraction ≥ 0.99) but the maximum: %v", got)
				}
			}
		})
	}
}

// svgNode is an element of a parsed SVG document.
type svgNode struct {
	XMLName xml.Name
	Attrs   []xml.Attr `xml:",any,attr"`
	Text    string     `xml:",chardata"`
	Nodes   []svgNode  `xml:",any"`
}

func (n *svgNode) attr(name string) string {
	for _, a := range n.Attrs {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

// walk calls f for n and every element under it.
func (n *svgNode) walk(f func(*svgNode)) {
	f(n)
	for i := range n.Nodes {
		n.Nodes[i].walk(f)
	}
}

// find is every element under n (n included) named name with class class
// ("" for any).
func (n *svgNode) find(name, class string) []*svgNode {
	var out []*svgNode
	n.walk(func(e *svgNode) {
		if e.XMLName.Local == name && (class == "" || e.attr("class") == class) {
			out = append(out, e)
		}
	})
	return out
}

// allText is the character data of n and its descendants.
func (n *svgNode) allText() string {
	var sb strings.Builder
	n.walk(func(e *svgNode) { sb.WriteString(e.Text) })
	return sb.String()
}

// parseSVG checks that doc is well-formed XML throughout and returns its
// root element.
func parseSVG(t *testing.T, doc []byte) *svgNode {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(doc))
	for {
		_, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the SVG is not well-formed XML: %v\n%s", err, doc)
		}
	}
	var root svgNode
	if err := xml.Unmarshal(doc, &root); err != nil {
		t.Fatalf("unmarshalling the SVG: %v", err)
	}
	if root.XMLName.Local != "svg" || root.XMLName.Space != "http://www.w3.org/2000/svg" {
		t.Fatalf("root element %v, want svg in the SVG namespace", root.XMLName)
	}
	return &root
}

// numericAttrs are the attributes that must hold finite, non-negative
// (for sizes) numbers.
var numericAttrs = map[string]bool{"x": true, "y": true, "x1": true, "y1": true, "x2": true, "y2": true,
	"width": true, "height": true}

func syntheticCDF(rng *rand.Rand, n int, baseUs, spreadUs float64) []cdfPoint {
	lat := make([]int64, n)
	for i := range lat {
		lat[i] = int64(baseUs + rng.ExpFloat64()*spreadUs + math.Pow(rng.Float64(), 40)*spreadUs*20)
	}
	return latencyCDF(lat, chartCDFPoints)
}

func manyPoints(n int, withCDF bool) []chartPoint {
	rng := rand.New(rand.NewSource(int64(n)))
	var out []chartPoint
	for i := range n {
		p := chartPoint{Label: fmt.Sprintf("config %d", i), Group: []string{"point-select", "citus-mix"}[i%2],
			QPS: 10000 + float64(i)*1000, P50: 0.3 + float64(i)/100, P95: 0.6, P99: 0.9 + float64(i)/50, P999: 2}
		if withCDF {
			p.CDF = syntheticCDF(rng, 2000, 200+float64(i)*10, 100)
		}
		out = append(out, p)
	}
	return out
}

func TestWriteChartSVG(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	long := strings.Repeat("pgfleet router (8 workers, 1024 shards, pool 200) ", 4) + "prepared <&\"'>"
	tests := []struct {
		name   string
		points []chartPoint
		cdfs   int // CDF lines expected
	}{
		{"no points", nil, 0},
		{"one point", []chartPoint{{Label: "direct PostgreSQL prepared", QPS: 51234.5, P50: 0.41, P95: 0.8, P99: 1.2, P999: 3}}, 0},
		{"one point, no group, with CDF", []chartPoint{{Label: "pgfleet prepared", QPS: 40000, P50: 0.5, P99: 1.5,
			CDF: latencyCDF([]int64{300, 400, 500, 2000}, 200)}}, 1},
		{"zeros", []chartPoint{{Label: "a", Group: "point-select"}, {Label: "b", Group: "point-select"}}, 0},
		{"NaN and Inf", []chartPoint{
			{Label: "nan", QPS: nan, P50: nan, P95: nan, P99: nan, P999: nan, Note: "no successful run"},
			{Label: "unbounded", QPS: inf, P50: inf, P99: math.Inf(-1)},
			{Label: "negative", QPS: -5, P50: -1, P99: -2},
			{Label: "ok", QPS: 100, P50: 1, P99: 2},
		}, 0},
		{"long and awkward labels", []chartPoint{
			{Label: long, Group: long, QPS: 1e6, P50: 0.2, P99: 0.4, CDF: []cdfPoint{{0.1, 0.5}, {0.4, 1}}},
			{Label: "tab\tand\nnewline and \x01 control", Group: "g<2>", QPS: 3, P50: 0.01, P99: 0.02},
			{Label: "", Group: "", QPS: 1, P50: 1, P99: 1},
		}, 1},
		{"many configurations", manyPoints(25, false), 0},
		{"many configurations with CDFs", manyPoints(24, true), 24},
		{"odd CDFs", []chartPoint{
			{Label: "all zero latency", QPS: 1, P99: 0, CDF: []cdfPoint{{0, 1}}},
			{Label: "one point", QPS: 2, P99: 1, CDF: []cdfPoint{{1, 1}}},
			{Label: "invalid points only", QPS: 3, P99: 1, CDF: []cdfPoint{{nan, 0.5}, {inf, 1}, {-1, 1}, {1, nan}, {1, 2}}},
			{Label: "huge range", QPS: 4, P99: 1, CDF: []cdfPoint{{1e-9, 0.1}, {1e9, 1}}},
		}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := writeChartSVG(&buf, "Router benchmark <2025-01-01> & co", tt.points); err != nil {
				t.Fatal(err)
			}
			doc := buf.Bytes()
			root := parseSVG(t, doc)
			for _, bad := range []string{"NaN", "Inf"} {
				if bytes.Contains(doc, []byte(bad)) {
					t.Fatalf("the SVG contains %q", bad)
				}
			}
			root.walk(func(e *svgNode) {
				for _, a := range e.Attrs {
					if !numericAttrs[a.Name.Local] || strings.HasSuffix(a.Value, "%") {
						continue
					}
					v, err := strconv.ParseFloat(a.Value, 64)
					if err != nil || math.IsNaN(v) || math.IsInf(v, 0) ||
						((a.Name.Local == "width" || a.Name.Local == "height") && v < 0) {
						t.Fatalf("<%s %s=%q>", e.XMLName.Local, a.Name.Local, a.Value)
					}
				}
				if pts := e.attr("points"); pts != "" {
					for _, xy := range strings.Fields(pts) {
						for _, s := range strings.Split(xy, ",") {
							if _, err := strconv.ParseFloat(s, 64); err != nil {
								t.Fatalf("polyline point %q", xy)
							}
						}
					}
				}
			})
			if w := root.attr("width"); w != "1000" {
				t.Errorf("width %q, want 1000", w)
			}
			if h, _ := strconv.ParseFloat(root.attr("height"), 64); h < 80 || h > 5000 {
				t.Errorf("height %v", h)
			}

			cfgs := root.find("g", "cfg")
			if len(cfgs) != len(tt.points) {
				t.Fatalf("%d configuration rows, want %d", len(cfgs), len(tt.points))
			}
			// Rows are grouped by workload, in order of first appearance.
			rowOrder := slices.Clone(tt.points)
			first := map[string]int{}
			for i, p := range tt.points {
				if _, ok := first[p.Group]; !ok {
					first[p.Group] = i
				}
			}
			sort.SliceStable(rowOrder, func(a, b int) bool { return first[rowOrder[a].Group] < first[rowOrder[b].Group] })
			for i, g := range cfgs {
				p := rowOrder[i]
				if n := len(g.find("rect", "bar-qps")); n != 1 {
					t.Errorf("%q: %d QPS bars", p.Label, n)
				}
				if n := len(g.find("rect", "bar-p99")); n != 1 {
					t.Errorf("%q: %d p99 bars", p.Label, n)
				}
				titles := g.find("title", "")
				if len(titles) != 1 || !strings.HasPrefix(titles[0].Text, strings.ToValidUTF8(strings.ReplaceAll(p.Label, "\x01", "\uFFFD"), "")) {
					t.Errorf("%q: tooltip %+v", p.Label, titles)
				}
				labels := g.find("text", "label")
				want := chartTruncMiddle(strings.ReplaceAll(p.Label, "\x01", "\uFFFD"), chartLabelRunes)
				if len(labels) != 1 || labels[0].Text != want {
					t.Errorf("label %+v, want %q", labels, want)
				}
				if n := len([]rune(labels[0].Text)); n > chartLabelRunes {
					t.Errorf("label %q has %d characters", labels[0].Text, n)
				}
			}
			if n := len(root.find("g", "cdf")); n != tt.cdfs {
				t.Errorf("%d CDF lines, want %d", n, tt.cdfs)
			}
			if n := len(root.find("text", "legend")); n != tt.cdfs {
				t.Errorf("%d legend entries, want %d", n, tt.cdfs)
			}
			if len(tt.points) == 0 && !strings.Contains(root.allText(), "No data") {
				t.Error("no 'No data' message")
			}
		})
	}
}

// TestChartRowsGrouped checks that rows are grouped by workload, in order
// of first appearance, and that the bar lengths follow the figures.
func TestChartRowsGrouped(t *testing.T) {
	points := []chartPoint{
		{Label: "direct prepared", Group: "point-select", QPS: 100, P50: 1, P99: 4},
		{Label: "direct prepared", Group: "citus-mix", QPS: 50, P50: 1, P99: 2},
		{Label: "pgfleet prepared", Group: "point-select", QPS: 200, P50: 1, P99: 1},
	}
	var buf bytes.Buffer
	if err := writeChartSVG(&buf, "t", points); err != nil {
		t.Fatal(err)
	}
	root := parseSVG(t, buf.Bytes())
	var order []string
	widths := map[string]float64{}
	for _, g := range root.find("g", "cfg") {
		title := g.find("title", "")[0].Text
		order = append(order, strings.SplitN(title, "\n", 2)[0])
		w, _ := strconv.ParseFloat(g.find("rect", "bar-qps")[0].attr("width"), 64)
		widths[order[len(order)-1]] = w
	}
	want := []string{"direct prepared — point-select", "pgfleet prepared — point-select", "direct prepared — citus-mix"}
	if !slices.Equal(order, want) {
		t.Fatalf("rows %q, want %q", order, want)
	}
	if a, b := widths[want[0]], widths[want[1]]; math.Abs(b-2*a) > 0.5 {
		t.Errorf("QPS bars %v and %v, want the second twice the first", a, b)
	}
	// The same label has the same colour in both workloads.
	var fills []string
	for _, g := range root.find("g", "cfg") {
		fills = append(fills, g.find("rect", "bar-qps")[0].attr("fill"))
	}
	if fills[0] != fills[2] || fills[0] == fills[1] {
		t.Errorf("colours %v: want the same for the same label, another for another", fills)
	}
}

func TestChartPointsFromConfigs(t *testing.T) {
	run := func(n int, tps float64, p50us int64, errText string) runResult {
		r := runResult{Run: n, Error: errText, Summary: pgbenchSummary{TPS: tps, Transactions: int64(tps * 10)},
			Latency: latencyStats{Count: 10, P50: p50us, P95: 2 * p50us, P99: 3 * p50us, P999: 4 * p50us}}
		r.CDF = latencyCDF([]int64{p50us, p50us, 3 * p50us}, chartCDFPoints)
		return r
	}
	configs := []*configResult{
		{relayConfig: relayConfig{targetDirect, modePrepared}, Workload: workloadPointSelect, Label: "direct",
			Runs: []runResult{run(1, 300, 1000, ""), run(2, 100, 2000, ""), run(3, 200, 3000, "")}},
		{relayConfig: relayConfig{targetPgfleet, modeExtended}, Label: "pgfleet (pool 4)",
			Runs: []runResult{run(1, 0, 0, "pgbench: exit status 1")}},
		{relayConfig: relayConfig{targetBouncerSess, modePrepared}, Label: "PgBouncer", Skipped: "PgBouncer not available"},
		{relayConfig: relayConfig{targetBouncerTx, modeExtended}, Label: "not run yet"},
		nil,
	}
	got := chartPointsFromConfigs(configs)
	if len(got) != 2 {
		t.Fatalf("%d points, want 2: %+v", len(got), got)
	}
	d := got[0]
	if d.Label != "direct prepared" || d.Group != workloadPointSelect || d.QPS != 200 || d.P50 != 3 || d.P95 != 6 ||
		d.P99 != 9 || d.P999 != 12 || d.Note != "" {
		t.Errorf("median point %+v", d)
	}
	if len(d.CDF) != 2 || d.CDF[1] != (cdfPoint{Ms: 9, Frac: 1}) {
		t.Errorf("CDF %v", d.CDF)
	}
	f := got[1]
	if f.Label != "pgfleet (pool 4) extended" || !math.IsNaN(f.QPS) || !math.IsNaN(f.P99) || f.Note == "" {
		t.Errorf("failed configuration %+v", f)
	}
	// Without per-transaction latencies there is no CDF.
	configs[0].Runs[2].CDF = nil
	if got := chartPointsFromConfigs(configs[:1]); got[0].CDF != nil {
		t.Errorf("CDF %v without latencies", got[0].CDF)
	}
}
