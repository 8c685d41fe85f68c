package coordinator

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgfleet/pgfleet/internal/wire"
	"github.com/pgfleet/pgfleet/planner"
)

// planKinds are the plan kinds statements are counted by.
var planKinds = []planner.Kind{planner.KindDefault, planner.KindRouter, planner.KindReferenceRead, planner.KindReferenceWrite,
	planner.KindInsertSplit, planner.KindCopyIn, planner.KindMultiShard, planner.KindMultiShardWrite, planner.KindCopyOut, planner.KindFunction}

// kindCounters are pgfleet_statements_total's counters by plan kind, made
// once: counting a statement is one atomic add.
type kindCounters map[planner.Kind]prometheus.Counter

func newKindCounters(v *prometheus.CounterVec) kindCounters {
	m := kindCounters{}
	for _, k := range planKinds {
		m[k] = v.WithLabelValues(string(k))
	}
	return m
}

// count counts a statement of plan kind k.
func (m kindCounters) count(k planner.Kind) {
	if c := m[k]; c != nil {
		c.Inc()
	}
}

// countErrors counts the ErrorResponses among the frames of out, a client's
// answer about to be written, by SQLSTATE: the one place every error a
// client gets passes, whether a worker's relayed or the coordinator's own.
// It reads each frame's type (five bytes), and the fields of errors only.
func (m *metrics) countErrors(out []byte) {
	for {
		typ, body, n, ok := wire.SplitFrame(out)
		if !ok {
			return
		}
		if typ == 'E' {
			m.errors.WithLabelValues(sqlstate(body)).Inc()
		}
		out = out[n:]
	}
}

// sqlstate is an ErrorResponse's code field, or "other" when it has none
// of five letters and digits (any may come from a worker's RAISE).
func sqlstate(body []byte) string {
	for len(body) > 0 && body[0] != 0 {
		t := body[0]
		end := 1
		for end < len(body) && body[end] != 0 {
			end++
		}
		if t == 'C' {
			code := body[1:end]
			if len(code) != 5 {
				return "other"
			}
			for _, c := range code {
				if !('0' <= c && c <= '9' || 'A' <= c && c <= 'Z') {
					return "other"
				}
			}
			return string(code)
		}
		if end == len(body) {
			break
		}
		body = body[end+1:]
	}
	return "other"
}

// propagation times catalog changes from the member that committed one
// announcing it to this coordinator holding it.
type propagation struct {
	mu      sync.Mutex
	version int64     // the newest version announced to this coordinator
	sent    time.Time // when its announcement was sent (the sender's clock)
}

// announced records a member's announcement of version v sent at sent.
func (p *propagation) announced(v int64, sent time.Time) {
	if sent.IsZero() {
		return
	}
	p.mu.Lock()
	if v > p.version {
		p.version, p.sent = v, sent
	}
	p.mu.Unlock()
}

// holds observes the delay of the announced version once this coordinator
// holds version v (or a later one), once.
func (p *propagation) holds(v int64, h prometheus.Histogram) {
	p.mu.Lock()
	var d time.Duration
	ok := !p.sent.IsZero() && v >= p.version
	if ok {
		d = max(0, time.Since(p.sent))
		p.sent = time.Time{}
	}
	p.mu.Unlock()
	if ok {
		h.Observe(d.Seconds())
	}
}
