package host

import (
	"github.com/prometheus/client_golang/prometheus"
)

// pluginStates are the values of the state label of couchepi_host_plugin_state.
var pluginStates = []State{StateStarting, StateRunning, StateReloading, StateRestarting, StateFailed, StateStopped}

var (
	descQueued = prometheus.NewDesc("couchepi_host_events_queued_total",
		"after_* events queued for a plugin.", []string{"plugin"}, nil)
	descDelivered = prometheus.NewDesc("couchepi_host_events_delivered_total",
		"after_* events a plugin acknowledged.", []string{"plugin"}, nil)
	descDropped = prometheus.NewDesc("couchepi_host_events_dropped_total",
		"after_* events dropped (queue full, plugin down or failed batch) and replaced by a catch-up of their db.", []string{"plugin"}, nil)
	descCatchUps = prometheus.NewDesc("couchepi_host_catch_ups_total",
		"CatchUp calls a plugin completed (it re-read a db's changes feed instead of dropped events).", []string{"plugin"}, nil)
	descQueueLen = prometheus.NewDesc("couchepi_host_event_queue_length",
		"after_* events waiting for delivery to a plugin.", []string{"plugin"}, nil)
	descRestarts = prometheus.NewDesc("couchepi_host_plugin_restarts_total",
		"Times a crashed or unhealthy plugin process was restarted.", []string{"plugin"}, nil)
	descReloads = prometheus.NewDesc("couchepi_host_plugin_reloads_total",
		"Live version swaps of a plugin, by result (ok or failed).", []string{"plugin", "result"}, nil)
	descState = prometheus.NewDesc("couchepi_host_plugin_state",
		"1 for the plugin's current state, 0 for the others.", []string{"plugin", "state"}, nil)
	descInfo = prometheus.NewDesc("couchepi_host_plugin_info",
		"Always 1; labels name the running plugin binary.", []string{"plugin", "version", "sha256"}, nil)
)

// hostCollector reads each plugin's queue, delivery and lifecycle figures at
// scrape time.
type hostCollector struct{ h *Host }

// Describe sends every descriptor the collector uses.
func (c *hostCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descQueued, descDelivered, descDropped, descCatchUps, descQueueLen, descRestarts, descReloads, descState, descInfo} {
		ch <- d
	}
}

// Collect sends the current figures of every loaded plugin.
func (c *hostCollector) Collect(ch chan<- prometheus.Metric) {
	c.h.mu.Lock()
	ms := append([]*managed(nil), c.h.plugins...)
	c.h.mu.Unlock()
	for _, m := range ms {
		st := m.status()
		name := st.Name
		queued, dropped, length := m.q.counts()
		counter := func(d *prometheus.Desc, v uint64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append([]string{name}, labels...)...)
		}
		counter(descQueued, queued)
		counter(descDelivered, m.delivered.Load())
		counter(descDropped, dropped)
		counter(descCatchUps, m.catchUps.Load())
		ch <- prometheus.MustNewConstMetric(descQueueLen, prometheus.GaugeValue, float64(length), name)
		counter(descRestarts, m.restarts.Load())
		counter(descReloads, m.reloadsOK.Load(), "ok")
		counter(descReloads, m.reloadsFailed.Load(), "failed")
		for _, s := range pluginStates {
			v := 0.0
			if s == st.State {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descState, prometheus.GaugeValue, v, name, string(s))
		}
		ch <- prometheus.MustNewConstMetric(descInfo, prometheus.GaugeValue, 1, name, st.Version, st.SHA256)
	}
}
