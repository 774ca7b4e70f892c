package couchapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/auth"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
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
	mx.duration.WithLabelValues(method).Observe(time.Since(start).Seconds())
}

// handlePrometheus is `GET /_node/{node}/_prometheus`: the server's
// metrics and, through the plugin host, the host's and every plugin's, in
// the Prometheus text format. Server admins only, like CouchDB.
func (s *Server) handlePrometheus(q *request) {
	if err := auth.CheckServerAdmin(q.user); err != nil {
		writeError(q.w, err)
		return
	}
	gatherers := prometheus.Gatherers{s.mx.reg}
	if g, ok := s.hooks.(interface{ Gatherer() prometheus.Gatherer }); ok {
		gatherers = append(gatherers, g.Gatherer())
	}
	mfs, err := gatherers.Gather()
	if err != nil {
		// Serve what was gathered; one failing plugin must not blank the rest.
		s.log.Warn("gathering metrics", "error", err)
	}
	q.w.Header().Set("Content-Type", PrometheusContentType)
	q.w.WriteHeader(http.StatusOK)
	if q.r.Method == http.MethodHead {
		return
	}
	enc := expfmt.NewEncoder(q.w, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			s.log.Warn("writing metrics", "error", err)
			return
		}
	}
}
