package main

import (
	"github.com/couchepi/couchepi/plugin/internal/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics exposes the replicator's Prometheus metrics to the host
// (sdk.MetricsGatherer): job states, docs, checkpoints and HTTP counters.
func (p *replicator) Metrics() prometheus.Gatherer {
	p.metricsOnce.Do(func() {
		p.metricsRegistry = metrics.NewRegistry(p.metricsSources, p.log)
	})
	return p.metricsRegistry
}

// metricsSources hands the collector the totals of the replications
// (counted for the plugin's life), the components last started, whose
// counts stay readable after Stop, and the started job records and pool.
func (p *replicator) metricsSources() metrics.Sources {
	p.mu.Lock()
	defer p.mu.Unlock()
	src := metrics.Sources{Runs: p.runs, Frontend: p.front, Server: p.server, Waker: p.waker}
	if !p.started {
		return src
	}
	src.Records, src.Pool, src.LagAlert = p.recs, p.pool, p.serverConf.LagAlert
	if p.server != nil {
		src.Lags = p.server.Lags
	}
	return src
}
