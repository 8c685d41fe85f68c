package coordinator

import "github.com/prometheus/client_golang/prometheus"

// poolCollector reports the pools by worker at each scrape: connections
// in use and idle, and checkouts waiting, every database and user
// together.
type poolCollector struct {
	s                   *Server
	busy, idle, waiting *prometheus.Desc
}

func newPoolCollector(s *Server) *poolCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"worker"}, nil)
	}
	return &poolCollector{s: s,
		busy:    d("pgfleet_pool_connections_in_use", "Server connections checked out of the pools, by worker."),
		idle:    d("pgfleet_pool_connections_idle", "Server connections idle in the pools, by worker."),
		waiting: d("pgfleet_pool_waiting", "Checkouts waiting for a server connection, by worker.")}
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.busy
	ch <- c.idle
	ch <- c.waiting
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	type counts struct{ busy, idle, waiting int }
	by := map[string]*counts{}
	c.s.mu.Lock()
	for k, p := range c.s.pools {
		open, busy, waiting := p.Stats()
		n := by[k.worker]
		if n == nil {
			n = &counts{}
			by[k.worker] = n
		}
		n.busy += busy
		n.idle += open - busy
		n.waiting += waiting
	}
	c.s.mu.Unlock()
	for w, n := range by {
		ch <- prometheus.MustNewConstMetric(c.busy, prometheus.GaugeValue, float64(n.busy), w)
		ch <- prometheus.MustNewConstMetric(c.idle, prometheus.GaugeValue, float64(n.idle), w)
		ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(n.waiting), w)
	}
}
