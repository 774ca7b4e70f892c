package main

import (
	"sync"

	"github.com/couchepi/couchepi/plugin/internal/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// metricsRegistry is the replicator's registry, made at the first scrape.
var (
	metricsOnce     sync.Once
	metricsRegistry *prometheus.Registry
)

// Metrics exposes the replicator's Prometheus metrics to the host
// (sdk.MetricsGatherer): job states, docs, checkpoints and HTTP counters.
func (p *replicator) Metrics() prometheus.Gatherer {
	metricsOnce.Do(func() {
		metricsRegistry = metrics.NewRegistry(p.metricsSources, p.log)
	})
	return metricsRegistry
}

// metricsSources hands the collector the started job records and pool.
func (p *replicator) metricsSources() metrics.Sources {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.started {
		return metrics.Sources{}
	}
	src := metrics.Sources{Records: p.recs, Pool: p.pool, LagAlert: p.serverConf.LagAlert}
	if p.server != nil {
		src.Lags = p.server.Lags
	}
	return src
}
