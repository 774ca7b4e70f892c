package host

import (
	"github.com/couchepi/couchepi/hooks"
	"github.com/prometheus/client_golang/prometheus"
)

// Results of a synchronous hook call, the "result" label of
// couchepi_host_hook_calls_total.
const (
	resultOK          = "ok"          // the plugin answered with a doc
	resultRejected    = "rejected"    // the plugin answered with a CouchDB error
	resultUnavailable = "unavailable" // the host refused with 503: no live plugin answered in time
)

// hookDurationBuckets span a local round trip (tens of µs) to HookTimeout.
var hookDurationBuckets = []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1, 5}

// metrics is the host's own instrumentation: hook calls are counted and
// timed as they happen; queue, delivery and lifecycle figures are read from
// the plugins at scrape time by hostCollector.
type metrics struct {
	reg      *prometheus.Registry
	calls    *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newMetrics(h *Host) *metrics {
	mx := &metrics{
		reg: prometheus.NewRegistry(),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "couchepi_host_hook_calls_total",
			Help: "Synchronous hook calls (before_doc_update, after_doc_read) per plugin, by result: ok, rejected (the plugin refused the doc) or unavailable (the host answered 503).",
		}, []string{"hook", "plugin", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "couchepi_host_hook_duration_seconds",
			Help:    "Latency of synchronous hook calls per plugin, as seen by the host.",
			Buckets: hookDurationBuckets,
		}, []string{"hook", "plugin"}),
	}
	mx.reg.MustRegister(mx.calls, mx.duration, &hostCollector{h: h})
	return mx
}

// hookMetrics are one plugin's pre-resolved series for one sync hook, so
// the write path does no label lookups.
type hookMetrics struct {
	ok, rejected, unavailable prometheus.Counter
	duration                  prometheus.Observer
}

// pluginMetrics holds a plugin's pre-resolved sync hook series.
type pluginMetrics struct {
	beforeDocUpdate, afterDocRead hookMetrics
}

func (mx *metrics) forPlugin(name string) *pluginMetrics {
	resolve := func(hook hooks.Hook) hookMetrics {
		return hookMetrics{
			ok:          mx.calls.WithLabelValues(string(hook), name, resultOK),
			rejected:    mx.calls.WithLabelValues(string(hook), name, resultRejected),
			unavailable: mx.calls.WithLabelValues(string(hook), name, resultUnavailable),
			duration:    mx.duration.WithLabelValues(string(hook), name),
		}
	}
	return &pluginMetrics{beforeDocUpdate: resolve(hooks.BeforeDocUpdate), afterDocRead: resolve(hooks.AfterDocRead)}
}

// hook returns the series of a sync hook; nil for others.
func (pm *pluginMetrics) hook(h hooks.Hook) *hookMetrics {
	if pm == nil {
		return nil
	}
	switch h {
	case hooks.BeforeDocUpdate:
		return &pm.beforeDocUpdate
	case hooks.AfterDocRead:
		return &pm.afterDocRead
	}
	return nil
}

// observe counts one call with its result and records its latency.
func (hm *hookMetrics) observe(result string, seconds float64) {
	if hm == nil {
		return
	}
	switch result {
	case resultOK:
		hm.ok.Inc()
	case resultRejected:
		hm.rejected.Inc()
	default:
		hm.unavailable.Inc()
	}
	hm.duration.Observe(seconds)
}
