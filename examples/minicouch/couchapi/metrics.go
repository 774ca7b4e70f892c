package couchapi

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/auth"
	"github.com/couchepi/couchepi/examples/minicouch/store"
	"github.com/couchepi/couchepi/hooks"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// PrometheusContentType is the Content-Type of `_prometheus` responses,
// the text exposition format 0.0.4 as CouchDB serves it.
const PrometheusContentType = "text/plain; version=0.0.4; charset=utf-8"

// requestDurationBuckets span a cached GET to a long _bulk_docs.
var requestDurationBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// httpMetrics counts minicouch's HTTP requests with CouchDB's metric names
// (couchdb_httpd_*) plus a latency histogram, and Go runtime and process
// figures.
type httpMetrics struct {
	reg      *prometheus.Registry
	requests prometheus.Counter
	methods  *prometheus.CounterVec
	codes    *prometheus.CounterVec
	duration *prometheus.HistogramVec
	window   timeWindow // request times of the last 10 s, for couchdb.request_time
}

func newHTTPMetrics() *httpMetrics {
	mx := &httpMetrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "couchdb_httpd_requests_total", Help: "number of HTTP requests"}),
		methods: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "couchdb_httpd_request_methods", Help: "number of HTTP requests by method"}, []string{"method"}),
		codes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "couchdb_httpd_status_codes", Help: "number of HTTP responses by status code"}, []string{"code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "minicouch_http_request_duration_seconds", Help: "Time from a request's arrival to the end of its response, by method.",
			Buckets: requestDurationBuckets}, []string{"method"}),
	}
	mx.reg.MustRegister(mx.requests, mx.methods, mx.codes, mx.duration,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return mx
}

// knownMethods keeps the method label bounded: anything else is "OTHER".
var knownMethods = map[string]bool{"GET": true, "HEAD": true, "POST": true, "PUT": true, "DELETE": true, "COPY": true, "OPTIONS": true}

// begin wraps w to see the response status.
func (mx *httpMetrics) begin(w http.ResponseWriter) *statusRecorder {
	if rec, ok := w.(*statusRecorder); ok {
		return rec
	}
	return &statusRecorder{ResponseWriter: w, status: 200}
}

// end counts one finished request.
func (mx *httpMetrics) end(rec *statusRecorder, method string, start time.Time) {
	if !knownMethods[method] {
		method = "OTHER"
	}
	mx.requests.Inc()
	mx.methods.WithLabelValues(method).Inc()
	mx.codes.WithLabelValues(strconv.Itoa(rec.status)).Inc()
	took := time.Since(start)
	mx.duration.WithLabelValues(method).Observe(took.Seconds())
	mx.window.add(start.Add(took), took)
}

// registerStore exposes the store's counters with CouchDB's names.
func (mx *httpMetrics) registerStore(st *store.Store) {
	counter := func(name, help string, v func(store.Counters) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(v(st.Counters())) })
	}
	mx.reg.MustRegister(
		counter("couchdb_database_reads_total", "number of times a document was read from a database", func(c store.Counters) uint64 { return c.DatabaseReads }),
		counter("couchdb_database_writes_total", "number of times a database was changed", func(c store.Counters) uint64 { return c.DatabaseWrites }),
		counter("couchdb_document_inserts_total", "number of documents inserted", func(c store.Counters) uint64 { return c.DocumentInserts }),
		counter("couchdb_document_writes_total", "number of document write operations", func(c store.Counters) uint64 { return c.DocumentWrites }),
		counter("couchdb_local_document_writes_total", "number of _local document write operations", func(c store.Counters) uint64 { return c.LocalDocumentWrites }),
		// CouchDB's name and "counter" type, although the number can fall.
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "couchdb_open_databases_total", Help: "number of open databases"},
			func() float64 { names, _ := st.ListDBs(); return float64(len(names)) }),
	)
}

// handlePrometheus is `GET /_node/{node}/_prometheus`: the server's
// metrics and, through the plugin host, the host's and every plugin's, in
// the Prometheus text format. Server admins only, like CouchDB.
func (s *Server) handlePrometheus(q *request) {
	if err := auth.CheckServerAdmin(q.user); err != nil {
		writeError(q.w, err)
		return
	}
	s.writePrometheus(q.w, q.r)
}

// gather collects minicouch's metric families and, through the plugin
// host, the host's and every plugin's. What was gathered is returned even
// when a plugin failed: one must not blank the rest.
func (s *Server) gather() []*dto.MetricFamily {
	gatherers := prometheus.Gatherers{s.mx.reg}
	if g, ok := s.hooks.(interface{ Gatherer() prometheus.Gatherer }); ok {
		gatherers = append(gatherers, g.Gatherer())
	}
	mfs, err := gatherers.Gather()
	if err != nil {
		s.log.Warn("gathering metrics", "error", err)
	}
	return mfs
}

// writePrometheus writes the gathered metrics.
func (s *Server) writePrometheus(w http.ResponseWriter, r *http.Request) {
	mfs := s.gather()
	w.Header().Set("Content-Type", PrometheusContentType)
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			s.log.Warn("writing metrics", "error", err)
			return
		}
	}
}

// PrometheusHandler serves CouchDB's `[prometheus] additional_port`: GET
// /_node/{_local|node}/_prometheus without authentication, and nothing
// else (404), so a scraper needs no credentials and reaches no data.
func (s *Server) PrometheusHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		node, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/_node/"), "/")
		if !strings.HasPrefix(r.URL.Path, "/_node/") || rest != "_prometheus" || (node != "_local" && node != s.node) {
			writeError(w, hooks.NotFound("missing"))
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			writeError(w, methodNotAllowed("GET,HEAD"))
			return
		}
		s.writePrometheus(w, r)
	})
}
