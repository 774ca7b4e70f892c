package docguard

import (
	"github.com/prometheus/client_golang/prometheus"
)

var descCalls = prometheus.NewDesc("docguard_hook_calls_total",
	"Hook calls docguard handled, per hook and db.", []string{"hook", "db"}, nil)

// Metrics exposes docguard's hook call counts (sdk.MetricsGatherer); the
// host labels them plugin="docguard".
func (g *guard) Metrics() prometheus.Gatherer {
	reg := prometheus.NewRegistry()
	reg.MustRegister(guardCollector{g})
	return reg
}

// guardCollector reads the call counts at scrape time.
type guardCollector struct{ g *guard }

// Describe sends the collector's only descriptor.
func (c guardCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descCalls }

// Collect sends one counter per hook and db.
func (c guardCollector) Collect(ch chan<- prometheus.Metric) {
	c.g.mu.Lock()
	defer c.g.mu.Unlock()
	for hook, dbs := range c.g.calls {
		for db, n := range dbs {
			ch <- prometheus.MustNewConstMetric(descCalls, prometheus.CounterValue, float64(n), string(hook), db)
		}
	}
}
