package bench

import (
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// cdfPoint is one point of a latency distribution: Frac of the
// transactions took at most Ms milliseconds.
type cdfPoint struct {
	Ms   float64 `json:"ms"`
	Frac float64 `json:"frac"`
}

// chartCDFPoints is how many points of a run's latency distribution are
// kept for the chart.
const chartCDFPoints = 200

// chartPoint is one configuration's figures in a chart. Figures that are
// NaN, infinite or negative are missing ("n/a" in the chart).
type chartPoint struct {
	Label               string     // e.g. "pgfleet (pool 20) prepared"
	Group               string     // workload, e.g. "point-select"; "" for none
	QPS                 float64    //
	P50, P95, P99, P999 float64    // milliseconds
	CDF                 []cdfPoint // optional latency distribution, ascending
	Note                string     // shown instead of missing figures, e.g. "no successful run"
}

// latencyCDF summarises latencies (microseconds, as txLog holds them) as at
// most maxPoints points of their empirical distribution, in milliseconds:
// the minimum, evenly spaced fractions for the body, fractions 1-10^-t
// for the tail up to the slowest transaction, whose fraction is exactly
// 1. Both coordinates strictly increase. latencies are not modified; they
// are copied and sorted unless already sorted (txLog.stats sorts them).
func latencyCDF(latencies []int64, maxPoints int) []cdfPoint {
	n := len(latencies)
	if n == 0 || maxPoints < 1 {
		return nil
	}
	v := latencies
	if !slices.IsSorted(v) {
		v = slices.Clone(v)
		slices.Sort(v)
	}
	// maxPoints candidate fractions: 0 (the minimum) when there is room,
	// the body, the tail, and 1.
	fracs := make([]float64, 0, maxPoints)
	if maxPoints >= 2 {
		fracs = append(fracs, 0)
	}
	rest := maxPoints - len(fracs) - 1
	body := (rest + 1) / 2
	tail := rest - body
	for i := 1; i <= body; i++ {
		fracs = append(fracs, float64(i)/float64(body+1))
	}
	decades := math.Log10(float64(n)) // 1-1/n is the last fraction below 1
	for i := 1; i <= tail; i++ {
		fracs = append(fracs, 1-math.Pow(10, -decades*float64(i)/float64(tail)))
	}
	fracs = append(fracs, 1)
	sort.Float64s(fracs)

	out := make([]cdfPoint, 0, len(fracs))
	last := -1
	for _, f := range fracs {
		rank := int(math.Ceil(math.Round(f*float64(n)*1e9) / 1e9)) // as percentile does
		rank = min(max(rank, 1), n)
		// The last transaction with the same latency, so that Frac is the
		// share at or below it.
		i := sort.Search(n, func(k int) bool { return v[k] > v[rank-1] }) - 1
		if i <= last {
			continue
		}
		last = i
		out = append(out, cdfPoint{Ms: float64(v[i]) / 1000, Frac: float64(i+1) / float64(n)})
	}
	return out
}

// chartPointsFromConfigs makes a chart point of the median run of each
// configuration that has runs and was not skipped; a configuration without
// a successful run has missing figures and a note.
func chartPointsFromConfigs(configs []*configResult) []chartPoint {
	var out []chartPoint
	for _, c := range configs {
		if c == nil || c.Skipped != "" || len(c.Runs) == 0 {
			continue
		}
		p := chartPoint{Label: strings.TrimSpace(c.Label + " " + c.Mode), Group: c.Workload}
		m := medianRun(c.Runs)
		if m < 0 {
			nan := math.NaN()
			p.QPS, p.P50, p.P95, p.P99, p.P999 = nan, nan, nan, nan, nan
			p.Note = "no successful run"
			out = append(out, p)
			continue
		}
		r := &c.Runs[m]
		p.QPS = r.Summary.TPS
		if r.Latency.Count > 0 {
			p.P50, p.P95 = float64(r.Latency.P50)/1000, float64(r.Latency.P95)/1000
			p.P99, p.P999 = float64(r.Latency.P99)/1000, float64(r.Latency.P999)/1000
		} else {
			nan := math.NaN()
			p.P50, p.P95, p.P99, p.P999 = nan, nan, nan, nan
		}
		p.CDF = r.CDF
		out = append(out, p)
	}
	return out
}

// Chart layout, in pixels.
const (
	chartWidth       = 1000
	chartMargin      = 16
	chartRowH        = 20 // a configuration's row in the bar panels
	chartGroupH      = 22 // a workload's heading row
	chartBarH        = 12
	chartValueW      = 72 // room for the value label right of the longest bar
	chartLabelRunes  = 56 // longer labels are truncated (the tooltip has them whole)
	chartLegendW     = 290
	chartLegendRunes = 42
	chartLegendRowH  = 16
)

// chartPalette are the configurations' colours (Tableau 10), in order of
// first appearance of their labels; they repeat after ten.
var chartPalette = []string{"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
	"#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#79706e"}

// chartDashes tell apart the CDF lines of the same colour: one per workload,
// and the next when colours repeat.
var chartDashes = []string{"", "7 3", "2 2", "9 3 2 3"}

// writeChartSVG writes a standalone SVG chart of points: throughput and
// p99 latency (with p50) per configuration, grouped by workload, and the
// latency distributions of those that have one.
func writeChartSVG(w io.Writer, title string, points []chartPoint) error {
	c := &svgChart{}
	height := c.draw(title, points)
	var doc strings.Builder
	doc.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	fmt.Fprintf(&doc, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%s" viewBox="0 0 %d %s" `+
		`font-family="Helvetica, Arial, sans-serif" font-size="12" fill="#222">`+"\n",
		chartWidth, svgNum(height), chartWidth, svgNum(height))
	fmt.Fprintf(&doc, "<title>%s</title>\n", svgEsc(title))
	fmt.Fprintf(&doc, `<rect width="100%%" height="100%%" fill="#ffffff"/>`+"\n")
	doc.WriteString(c.b.String())
	doc.WriteString("</svg>\n")
	_, err := io.WriteString(w, doc.String())
	return err
}

// writeChartFile writes the chart of points to path.
func writeChartFile(path, title string, points []chartPoint) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := writeChartSVG(f, title, points); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// svgChart accumulates the SVG elements of a chart.
type svgChart struct {
	b strings.Builder
}

func (c *svgChart) printf(format string, args ...any) { fmt.Fprintf(&c.b, format, args...) }

// text writes a text element; attrs are extra attributes.
func (c *svgChart) text(x, y float64, s, attrs string) {
	c.printf(`<text x="%s" y="%s"%s>%s</text>`+"\n", svgNum(x), svgNum(y), attrs, svgEsc(s))
}

func (c *svgChart) line(x1, y1, x2, y2 float64, attrs string) {
	c.printf(`<line x1="%s" y1="%s" x2="%s" y2="%s"%s/>`+"\n", svgNum(x1), svgNum(y1), svgNum(x2), svgNum(y2), attrs)
}

func (c *svgChart) rect(x, y, w, h float64, attrs string) {
	c.printf(`<rect x="%s" y="%s" width="%s" height="%s"%s/>`+"\n", svgNum(x), svgNum(y), svgNum(max(w, 0)), svgNum(max(h, 0)), attrs)
}

// chartRow is a row of the bar panels: a workload heading or a point.
type chartRow struct {
	heading string
	p       *chartPoint
	colour  int // index into chartPalette
	y       float64
}

// draw writes the chart's elements and returns its height.
func (c *svgChart) draw(title string, points []chartPoint) float64 {
	c.text(chartMargin, 30, chartTrunc(title, 110), ` font-size="18" font-weight="bold"`)
	if len(points) == 0 {
		c.text(chartMargin, 70, "No data: no configuration has a run.", ` fill="#777" font-style="italic"`)
		return 100
	}

	// Colours by label, in order of first appearance; rows by workload, in
	// order of first appearance, then in the order given.
	colourOf := map[string]int{}
	var groups []string
	byGroup := map[string][]int{}
	maxRunes := 0
	for i, p := range points {
		if _, ok := colourOf[p.Label]; !ok {
			colourOf[p.Label] = len(colourOf)
		}
		if _, ok := byGroup[p.Group]; !ok {
			groups = append(groups, p.Group)
		}
		byGroup[p.Group] = append(byGroup[p.Group], i)
		maxRunes = max(maxRunes, utf8.RuneCountInString(chartTruncMiddle(p.Label, chartLabelRunes)))
	}
	headings := len(groups) > 1 || groups[0] != ""
	groupIdx := map[string]int{}
	for i, g := range groups {
		groupIdx[g] = i
	}

	// Columns: labels, the QPS panel, the latency panel.
	labelW := min(max(float64(maxRunes)*6.2+12, 110), 360)
	x1 := chartMargin + labelW + 8
	const gap = 28
	panelW := (chartWidth - chartMargin - x1 - gap) / 2
	barW := panelW - chartValueW
	qpsX, latX := x1, x1+panelW+gap

	// Rows.
	top := 56.0
	c.text(qpsX, top+12, "Throughput, QPS", ` font-weight="bold"`)
	c.text(latX, top+12, "Latency, ms", ` font-weight="bold"`)
	kx := latX + 92
	c.rect(kx, top+3, 14, 10, ` fill="#999"`)
	c.text(kx+18, top+12, "p99", ` font-size="11"`)
	c.line(kx+48, top+1, kx+48, top+15, ` stroke="#111" stroke-width="2"`)
	c.text(kx+53, top+12, "p50", ` font-size="11"`)
	y := top + 22
	var rows []chartRow
	for _, g := range groups {
		if headings {
			rows = append(rows, chartRow{heading: g, y: y})
			y += chartGroupH
		}
		for _, i := range byGroup[g] {
			rows = append(rows, chartRow{p: &points[i], colour: colourOf[points[i].Label], y: y})
			y += chartRowH
		}
	}
	rowsTop, rowsEnd := top+22, y

	// Scales.
	var maxQPS, maxMs float64
	for _, p := range points {
		if v, ok := chartValue(p.QPS); ok {
			maxQPS = max(maxQPS, v)
		}
		for _, v := range []float64{p.P50, p.P99} {
			if v, ok := chartValue(v); ok {
				maxMs = max(maxMs, v)
			}
		}
	}
	qpsStep, qpsTop := chartNiceScale(maxQPS)
	msStep, msTop := chartNiceScale(maxMs)

	// Backgrounds, then grid lines, then bars.
	n := 0
	for _, r := range rows {
		if r.p == nil {
			c.rect(chartMargin, r.y, chartWidth-2*chartMargin, chartGroupH-2, ` fill="#e6eaf0"`)
			c.text(chartMargin+6, r.y+15, chartGroupName(r.heading, chartLabelRunes), ` font-weight="bold" font-size="12"`)
			continue
		}
		if n%2 == 0 {
			c.rect(chartMargin, r.y, chartWidth-2*chartMargin, chartRowH, ` fill="#f4f5f7"`)
		}
		n++
	}
	c.axisTicks(qpsX, barW, rowsTop, rowsEnd, qpsStep, qpsTop, chartCompact)
	c.axisTicks(latX, barW, rowsTop, rowsEnd, msStep, msTop, chartTickLabel)
	c.text(qpsX+barW/2, rowsEnd+30, "transactions per second (median run)", ` font-size="11" fill="#555" text-anchor="middle"`)
	c.text(latX+barW/2, rowsEnd+30, "milliseconds, from the per-transaction log", ` font-size="11" fill="#555" text-anchor="middle"`)

	for _, r := range rows {
		if r.p == nil {
			continue
		}
		p := r.p
		colour := chartPalette[r.colour%len(chartPalette)]
		c.printf(`<g class="cfg">` + "\n")
		c.printf("<title>%s</title>\n", svgEsc(chartTooltip(p)))
		c.text(chartMargin+6, r.y+14, chartTruncMiddle(p.Label, chartLabelRunes), ` class="label" font-size="11"`)
		missing := p.Note
		if missing == "" {
			missing = "n/a"
		}
		by := r.y + (chartRowH-chartBarH)/2

		qps, ok := chartValue(p.QPS)
		w := qps / qpsTop * barW
		c.rect(qpsX, by, w, chartBarH, fmt.Sprintf(` class="bar-qps" fill="%s"`, colour))
		if ok {
			c.text(qpsX+w+4, r.y+14, chartQPSLabel(qps), ` font-size="11"`)
		} else {
			c.text(qpsX+4, r.y+14, chartTrunc(missing, 40), ` font-size="11" fill="#888" font-style="italic"`)
		}

		p99, ok := chartValue(p.P99)
		w = p99 / msTop * barW
		c.rect(latX, by, w, chartBarH, fmt.Sprintf(` class="bar-p99" fill="%s"`, colour))
		if p50, ok50 := chartValue(p.P50); ok50 {
			x := latX + p50/msTop*barW
			c.line(x, by-2, x, by+chartBarH+2, ` class="p50" stroke="#111" stroke-width="2"`)
		}
		if ok {
			c.text(latX+w+4, r.y+14, chartMs(p99), ` font-size="11"`)
		} else {
			c.text(latX+4, r.y+14, chartTrunc(missing, 40), ` font-size="11" fill="#888" font-style="italic"`)
		}
		c.printf("</g>\n")
	}
	height := rowsEnd + 44

	// The latency distributions.
	type series struct {
		p      *chartPoint
		pts    []cdfPoint
		colour string
		dash   string
	}
	var ss []series
	lo, hi := math.Inf(1), math.Inf(-1)
	for i := range points {
		p := &points[i]
		var pts []cdfPoint
		for _, q := range p.CDF {
			if ms, ok := chartValue(q.Ms); ok && !math.IsNaN(q.Frac) && q.Frac >= 0 && q.Frac <= 1 {
				pts = append(pts, cdfPoint{Ms: ms, Frac: q.Frac})
				if ms > 0 {
					lo, hi = min(lo, ms), max(hi, ms)
				}
			}
		}
		if len(pts) == 0 {
			continue
		}
		ci := colourOf[p.Label]
		ss = append(ss, series{p: p, pts: pts, colour: chartPalette[ci%len(chartPalette)],
			dash: chartDashes[(groupIdx[p.Group]+ci/len(chartPalette))%len(chartDashes)]})
	}
	if len(ss) == 0 {
		return height
	}
	// In the order of the rows: by workload.
	sort.SliceStable(ss, func(a, b int) bool { return groupIdx[ss[a].p.Group] < groupIdx[ss[b].p.Group] })
	legendRows := len(ss)
	if headings {
		legendRows += len(groups)
	}
	if math.IsInf(lo, 1) { // every latency is 0
		lo, hi = 0.001, 0.001
	}
	dlo, dhi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if dhi <= dlo {
		dhi = dlo + 1
	}
	if dhi-dlo > 9 { // keep the slowest nine decades
		dlo = dhi - 9
	}
	xmin := math.Pow(10, dlo)

	cdfTop := height + 16
	c.text(chartMargin, cdfTop, "Latency distribution (median run)", ` font-weight="bold"`)
	c.text(chartMargin+250, cdfTop, "share of transactions at or below each latency; log-scaled latency axis", ` font-size="11" fill="#555"`)
	plotTop := cdfTop + 16
	plotH := max(260, float64(legendRows)*chartLegendRowH+8)
	plotL := float64(chartMargin + 52)
	legendX := float64(chartWidth - chartMargin - chartLegendW)
	plotR := legendX - 24
	plotW := plotR - plotL
	px := func(ms float64) float64 {
		return plotL + (math.Log10(max(ms, xmin))-dlo)/(dhi-dlo)*plotW
	}
	py := func(f float64) float64 { return plotTop + (1-f)*plotH }

	// Grid: decades (labelled), their 2..9 multiples, quarters of the share
	// and the 99th percentile.
	for d := dlo; d <= dhi; d++ {
		x := px(math.Pow(10, d))
		c.line(x, plotTop, x, plotTop+plotH, ` stroke="#cccccc"`)
		c.text(x, plotTop+plotH+15, chartTickLabel(math.Pow(10, d)), ` font-size="10" fill="#555" text-anchor="middle"`)
		if d == dhi {
			break
		}
		for m := 2.0; m <= 9; m++ {
			v := m * math.Pow(10, d)
			x := px(v)
			c.line(x, plotTop, x, plotTop+plotH, ` stroke="#eeeeee"`)
			if dhi-dlo <= 2 && (m == 2 || m == 5) {
				c.text(x, plotTop+plotH+15, chartTickLabel(v), ` font-size="10" fill="#999" text-anchor="middle"`)
			}
		}
	}
	for _, f := range []float64{0, 0.25, 0.5, 0.75, 1} {
		c.line(plotL, py(f), plotR, py(f), ` stroke="#cccccc"`)
		c.text(plotL-6, py(f)+4, fmt.Sprintf("%.0f%%", f*100), ` font-size="10" fill="#555" text-anchor="end"`)
	}
	c.line(plotL, py(0.99), plotR, py(0.99), ` stroke="#999999" stroke-dasharray="4 3"`)
	c.text(plotR-4, py(0.99)+12, "p99", ` font-size="10" fill="#777" text-anchor="end"`)
	c.rect(plotL, plotTop, plotW, plotH, ` fill="none" stroke="#999999"`)
	c.text(plotL+plotW/2, plotTop+plotH+32, "latency, ms (log scale)", ` font-size="11" fill="#555" text-anchor="middle"`)
	yl := plotTop + plotH/2
	c.printf(`<text x="%s" y="%s" transform="rotate(-90 %s %s)" font-size="11" fill="#555" text-anchor="middle">transactions ≤ latency</text>`+"\n",
		svgNum(chartMargin+8), svgNum(yl), svgNum(chartMargin+8), svgNum(yl))

	ly := plotTop + 4
	prevGroup := ""
	for i, s := range ss {
		dash := ""
		if s.dash != "" {
			dash = fmt.Sprintf(` stroke-dasharray="%s"`, s.dash)
		}
		var pts []string
		for _, q := range s.pts {
			pts = append(pts, svgNum(px(q.Ms))+","+svgNum(py(q.Frac)))
		}
		if len(pts) == 1 { // a lone point: a short flat line to be visible
			pts = append(pts, svgNum(px(s.pts[0].Ms)+2)+","+svgNum(py(s.pts[0].Frac)))
		}
		name := s.p.Label
		if s.p.Group != "" {
			name += " — " + s.p.Group
		}
		c.printf(`<g class="cdf">`+"\n"+`<title>%s</title>`+"\n", svgEsc(name))
		c.printf(`<polyline points="%s" fill="none" stroke="%s" stroke-width="1.8" stroke-linejoin="round"%s/>`+"\n",
			strings.Join(pts, " "), s.colour, dash)
		c.printf("</g>\n")

		// Legend entry, under its workload's heading.
		if headings && (i == 0 || s.p.Group != prevGroup) {
			c.text(legendX, ly+10, chartGroupName(s.p.Group, chartLegendRunes+4), ` font-size="11" font-weight="bold"`)
			ly += chartLegendRowH
		}
		prevGroup = s.p.Group
		c.line(legendX+4, ly+6, legendX+28, ly+6, fmt.Sprintf(` stroke="%s" stroke-width="2.5"%s`, s.colour, dash))
		c.text(legendX+34, ly+10, chartTruncMiddle(s.p.Label, chartLegendRunes), ` class="legend" font-size="11"`)
		ly += chartLegendRowH
	}
	return plotTop + plotH + 48
}

// axisTicks draws the grid lines and tick labels of a bar panel from x,
// barW wide, whose scale goes from 0 to top in steps of step.
func (c *svgChart) axisTicks(x, barW, rowsTop, rowsEnd, step, top float64, format func(float64) string) {
	ticks := int(math.Round(top / step))
	for i := 0; i <= ticks; i++ {
		v := float64(i) * step
		tx := x + v/top*barW
		c.line(tx, rowsTop, tx, rowsEnd, ` stroke="#d8d8d8"`)
		c.text(tx, rowsEnd+14, format(v), ` font-size="10" fill="#555" text-anchor="middle"`)
	}
	c.line(x, rowsTop, x, rowsEnd, ` stroke="#888888"`)
}

// chartValue is v when it is a figure to draw (finite, not negative).
func chartValue(v float64) (float64, bool) {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, false
	}
	return v, true
}

// chartNiceScale is the smallest step of 1, 2 or 5 times a power of ten
// that covers maxV in at most seven steps, and the multiple of it at or
// above maxV where the scale ends.
func chartNiceScale(maxV float64) (step, top float64) {
	if math.IsNaN(maxV) || math.IsInf(maxV, 0) || maxV <= 0 {
		return 0.2, 1
	}
	mag := math.Pow(10, math.Floor(math.Log10(maxV/7)))
	for _, m := range []float64{1, 2, 5, 10, 20} {
		step = m * mag
		if math.Ceil(maxV/step-1e-9) <= 7 {
			break
		}
	}
	top = math.Ceil(maxV/step-1e-9) * step
	if top <= 0 {
		top = step
	}
	return step, top
}

// chartTickLabel formats a tick value (a multiple of 1, 2 or 5 times a
// power of ten) with the decimals it needs.
func chartTickLabel(v float64) string {
	if v >= 1000 {
		return chartThousands(v)
	}
	d := 0
	for ; d < 9; d++ {
		x := v * math.Pow(10, float64(d))
		if math.Abs(x-math.Round(x)) <= 1e-6*max(1, math.Abs(x)) {
			break
		}
	}
	return strconv.FormatFloat(v, 'f', d, 64)
}

// chartCompact formats a QPS tick: 20k, 1.5M.
func chartCompact(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(math.Round(v/1e4)/100, 'f', -1, 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(math.Round(v/10)/100, 'f', -1, 64) + "k"
	}
	return chartTickLabel(v)
}

// chartQPSLabel formats a bar's QPS.
func chartQPSLabel(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v < 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case v < 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return chartThousands(v)
}

// chartMs formats milliseconds with three significant digits or so.
func chartMs(v float64) string {
	switch {
	case v < 0.1:
		return strconv.FormatFloat(v, 'f', 3, 64)
	case v < 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case v < 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return chartThousands(v)
}

// chartThousands is v rounded, with thousands separated by commas.
func chartThousands(v float64) string {
	s := strconv.FormatFloat(math.Round(v), 'f', 0, 64)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// chartGroupName is the heading of a workload's rows, at most n runes.
func chartGroupName(g string, n int) string {
	if strings.TrimSpace(g) == "" {
		return "other"
	}
	return chartTrunc(g, n)
}

// chartTooltip is a configuration's whole label and figures.
func chartTooltip(p *chartPoint) string {
	s := p.Label
	if p.Group != "" {
		s += " — " + p.Group
	}
	f := func(v float64, format func(float64) string) string {
		if v, ok := chartValue(v); ok {
			return format(v)
		}
		return "n/a"
	}
	s += fmt.Sprintf("\nQPS %s; latency p50 %s, p95 %s, p99 %s, p99.9 %s ms", f(p.QPS, chartQPSLabel),
		f(p.P50, chartMs), f(p.P95, chartMs), f(p.P99, chartMs), f(p.P999, chartMs))
	if p.Note != "" {
		s += "\n" + p.Note
	}
	return s
}

// chartTrunc is s on one line, cut to n runes with an ellipsis.
func chartTrunc(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return strings.TrimRight(string(r[:max(n-1, 0)]), " ") + "…"
}

// chartTruncMiddle is s on one line, cut to n runes by an ellipsis in the
// middle, so that both ends of a long label (the target and the mode)
// stay.
func chartTruncMiddle(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	if n < 8 {
		return chartTrunc(s, n)
	}
	tail := (n - 1) * 2 / 5
	head := n - 1 - tail
	return strings.TrimRight(string(r[:head]), " ") + "…" + strings.TrimLeft(string(r[len(r)-tail:]), " ")
}

// svgNum formats a coordinate; anything not finite is 0, so that no NaN
// or Inf reaches the document.
func svgNum(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "0"
	}
	v = math.Round(v*10) / 10
	if v == 0 {
		return "0" // not -0
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// svgEsc escapes s for XML text and attribute values; characters XML does
// not allow become U+FFFD.
func svgEsc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
