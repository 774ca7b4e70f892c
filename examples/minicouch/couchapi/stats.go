package couchapi

import (
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/auth"
	"github.com/couchepi/couchepi/hooks"
	dto "github.com/prometheus/client_model/go"
)

// CouchDB's stats tree (GET /_node/{node}/_stats) names every figure by a
// path, with a type and a description. minicouch serves the ones it keeps,
// read from the Prometheus families that expose the same figures (its own
// and, through the plugin host, the replicator's), so both views agree.

// stat is one entry of the tree: read from Prometheus family prom (the
// series whose label has value, when label is set), or from the request
// time window for the one histogram.
type stat struct {
	path         []string
	kind         string // counter, gauge or histogram
	desc         string
	prom         string
	label, value string
}

// couchStats are the couchdb.* entries minicouch keeps, with CouchDB's
// paths, types and descriptions.
var couchStats = func() []stat {
	st := []stat{
		{path: []string{"couchdb", "database_reads"}, kind: "counter", desc: "number of times a document was read from a database", prom: "couchdb_database_reads_total"},
		{path: []string{"couchdb", "database_writes"}, kind: "counter", desc: "number of times a database was changed", prom: "couchdb_database_writes_total"},
		{path: []string{"couchdb", "document_inserts"}, kind: "counter", desc: "number of documents inserted", prom: "couchdb_document_inserts_total"},
		{path: []string{"couchdb", "document_writes"}, kind: "counter", desc: "number of document write operations", prom: "couchdb_document_writes_total"},
		{path: []string{"couchdb", "local_document_writes"}, kind: "counter", desc: "number of _local document write operations", prom: "couchdb_local_document_writes_total"},
		{path: []string{"couchdb", "open_databases"}, kind: "counter", desc: "number of open databases", prom: "couchdb_open_databases_total"},
		{path: []string{"couchdb", "httpd", "requests"}, kind: "counter", desc: "number of HTTP requests", prom: "couchdb_httpd_requests_total"},
		{path: []string{"couchdb", "request_time"}, kind: "histogram", desc: "length of a request inside CouchDB without MochiWeb"},
	}
	for _, m := range []string{"COPY", "DELETE", "GET", "HEAD", "OPTIONS", "POST", "PUT"} {
		st = append(st, stat{path: []string{"couchdb", "httpd_request_methods", m}, kind: "counter",
			desc: "number of HTTP " + m + " requests", prom: "couchdb_httpd_request_methods", label: "method", value: m})
	}
	for _, c := range []struct {
		code int
		text string
	}{{200, "200 OK responses"}, {201, "201 Created responses"}, {202, "202 Accepted responses"}, {204, "204 No Content responses"},
		{206, "206 Partial Content"}, {301, "301 Moved Permanently responses"}, {302, "302 Found responses"},
		{304, "304 Not Modified responses"}, {400, "400 Bad Request responses"}, {401, "401 Unauthorized responses"},
		{403, "403 Forbidden responses"}, {404, "404 Not Found responses"}, {405, "405 Method Not Allowed responses"},
		{406, "406 Not Acceptable responses"}, {409, "409 Conflict responses"}, {412, "412 Precondition Failed responses"},
		{413, "413 Request Entity Too Long responses"}, {414, "414 Request URI Too Long responses"},
		{415, "415 Unsupported Media Type responses"}, {416, "416 Requested Range Not Satisfiable responses"},
		{417, "417 Expectation Failed responses"}, {500, "500 Internal Server Error responses"},
		{501, "501 Not Implemented responses"}, {503, "503 Service unavailable responses"}, {507, "507 Insufficient Storage responses"}} {
		code := strconv.Itoa(c.code)
		st = append(st, stat{path: []string{"couchdb", "httpd_status_codes", code}, kind: "counter",
			desc: "number of HTTP " + c.text, prom: "couchdb_httpd_status_codes", label: "code", value: code})
	}
	return st
}()

// replicatorStats are CouchDB's couch_replicator.* entries the replicator
// plugin exports (its Prometheus names are CouchDB's, see docs/replicator.md).
var replicatorStats = func() []stat {
	var st []stat
	add := func(kind, desc string, path ...string) {
		name := "couchdb_" + strings.Join(path, "_")
		if kind == "counter" {
			name += "_total"
		}
		st = append(st, stat{path: path, kind: kind, desc: desc, prom: name})
	}
	add("counter", "number of failed replicator changes read failures", "couch_replicator", "changes_read_failures")
	add("counter", "number of checkpoints successfully saves", "couch_replicator", "checkpoints", "success")
	add("counter", "number of failed checkpoint saves", "couch_replicator", "checkpoints", "failure")
	add("counter", "number of replications that have failed to start", "couch_replicator", "failed_starts")
	add("counter", "number of HTTP requests made by the replicator", "couch_replicator", "requests")
	add("counter", "number of failed HTTP responses received by the replicator", "couch_replicator", "responses", "failure")
	add("counter", "number of successful HTTP responses received by the replicator", "couch_replicator", "responses", "success")
	add("counter", "number of replicator workers started", "couch_replicator", "workers_started")
	add("counter", "number of times replicator db scans have been started", "couch_replicator", "db_scans")
	add("counter", "number of 'failed' state document updates", "couch_replicator", "docs", "failed_state_updates")
	add("counter", "number of 'completed' state document updates", "couch_replicator", "docs", "completed_state_updates")
	add("counter", "number of jobs added to replicator scheduler", "couch_replicator", "jobs", "adds")
	add("counter", "number of duplicate jobs added to replicator scheduler", "couch_replicator", "jobs", "duplicate_adds")
	add("counter", "number of jobs removed from replicator scheduler", "couch_replicator", "jobs", "removes")
	add("counter", "number of jobs started by replicator scheduler", "couch_replicator", "jobs", "starts")
	add("counter", "number of jobs stopped by replicator scheduler", "couch_replicator", "jobs", "stops")
	add("counter", "number of job crashed noticed by replicator scheduler", "couch_replicator", "jobs", "crashes")
	add("gauge", "replicator scheduler running jobs", "couch_replicator", "jobs", "running")
	add("gauge", "replicator scheduler pending jobs", "couch_replicator", "jobs", "pending")
	add("gauge", "replicator scheduler crashed jobs", "couch_replicator", "jobs", "crashed")
	add("gauge", "total number of replicator scheduler jobs", "couch_replicator", "jobs", "total")
	add("counter", "number of connections created", "couch_replicator", "connection", "creates")
	return st
}()

// handleStats is GET /_node/{node}/_stats[/path…] (and /_stats[/path…]):
// the stats tree, or the part of it under path. Server admins only.
func (s *Server) handleStats(q *request, path []string) {
	if err := auth.CheckServerAdmin(q.user); err != nil {
		writeError(q.w, err)
		return
	}
	tree := s.statsTree()
	var node any = tree
	for _, p := range path {
		m, ok := node.(map[string]any)
		if !ok || m[p] == nil {
			writeError(q.w, hooks.NotFound("missing"))
			return
		}
		node = m[p]
	}
	writeJSON(q.w, 200, node)
}

// statsTree builds the whole tree from the gathered metric families.
func (s *Server) statsTree() map[string]any {
	families := map[string]*dto.MetricFamily{}
	for _, mf := range s.gather() {
		families[mf.GetName()] = mf
	}
	tree := map[string]any{}
	for _, st := range couchStats {
		if st.kind == "histogram" {
			put(tree, st.path, map[string]any{"value": s.mx.window.stats(time.Now()), "type": st.kind, "desc": st.desc})
			continue
		}
		v, _ := seriesValue(families[st.prom], st.label, st.value)
		put(tree, st.path, map[string]any{"value": v, "type": st.kind, "desc": st.desc})
	}
	for _, st := range replicatorStats {
		// Only what a loaded replicator reports: no plugin, no entries.
		if v, ok := seriesValue(families[st.prom], "", ""); ok {
			put(tree, st.path, map[string]any{"value": v, "type": st.kind, "desc": st.desc})
		}
	}
	return tree
}

// seriesValue is the value of the series of mf whose label has value (any
// series when label is ""), summed over plugins; 0 and false when absent.
func seriesValue(mf *dto.MetricFamily, label, value string) (float64, bool) {
	if mf == nil {
		return 0, false
	}
	sum, found := 0.0, false
	for _, m := range mf.GetMetric() {
		if label != "" && !hasLabel(m, label, value) {
			continue
		}
		found = true
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Untyped != nil:
			sum += m.GetUntyped().GetValue()
		}
	}
	return sum, found
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue() == value
		}
	}
	return false
}

// put sets tree[path…] = v, making the maps on the way.
func put(tree map[string]any, path []string, v any) {
	for _, p := range path[:len(path)-1] {
		next, ok := tree[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			tree[p] = next
		}
		tree = next
	}
	tree[path[len(path)-1]] = v
}

// statsWindow is how far back CouchDB's histograms look ([stats] interval).
const statsWindow = 10 * time.Second

// timeWindow keeps the request times of the last statsWindow (at most
// cap samples) for couchdb.request_time, in milliseconds as CouchDB's.
type timeWindow struct {
	mu      sync.Mutex
	samples []timedSample // ring, oldest first from next
	next    int
	full    bool
}

type timedSample struct {
	at time.Time
	ms float64
}

// windowCap bounds the samples kept: a busy server's histogram is over its
// most recent requests.
const windowCap = 4096

func (w *timeWindow) add(at time.Time, d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.samples == nil {
		w.samples = make([]timedSample, windowCap)
	}
	w.samples[w.next] = timedSample{at, float64(d) / float64(time.Millisecond)}
	w.next = (w.next + 1) % windowCap
	if w.next == 0 {
		w.full = true
	}
}

// stats returns CouchDB's histogram value for the samples of the window
// ending at now.
func (w *timeWindow) stats(now time.Time) map[string]any {
	w.mu.Lock()
	n := w.next
	if w.full {
		n = windowCap
	}
	var xs []float64
	for i := 0; i < n; i++ {
		if sm := w.samples[i]; now.Sub(sm.at) <= statsWindow {
			xs = append(xs, sm.ms)
		}
	}
	w.mu.Unlock()
	return histogramValue(xs)
}

// histogramValue computes the figures of CouchDB's histogram stats (as its
// bear library names them) over xs.
func histogramValue(xs []float64) map[string]any {
	out := map[string]any{"min": 0.0, "max": 0.0, "arithmetic_mean": 0.0, "geometric_mean": 0.0, "harmonic_mean": 0.0,
		"median": 0.0, "variance": 0.0, "standard_deviation": 0.0, "skewness": 0.0, "kurtosis": 0.0,
		"percentile": [][2]float64{{50, 0}, {75, 0}, {90, 0}, {95, 0}, {99, 0}, {999, 0}},
		"histogram":  [][2]float64{{0, 0}}, "n": len(xs)}
	if len(xs) == 0 {
		return out
	}
	sort.Float64s(xs)
	n := float64(len(xs))
	var sum, logSum, invSum float64
	for _, x := range xs {
		sum += x
		logSum += math.Log(math.Max(x, 1e-9))
		invSum += 1 / math.Max(x, 1e-9)
	}
	mean := sum / n
	var m2, m3, m4 float64
	for _, x := range xs {
		d := x - mean
		m2 += d * d
		m3 += d * d * d
		m4 += d * d * d * d
	}
	variance := 0.0
	if len(xs) > 1 {
		variance = m2 / (n - 1)
	}
	sd := math.Sqrt(variance)
	skew, kurt := 0.0, 0.0
	if sd > 0 {
		skew = (m3 / n) / math.Pow(m2/n, 1.5)
		kurt = (m4/n)/math.Pow(m2/n, 2) - 3
	}
	pct := func(p float64) float64 {
		i := int(math.Ceil(p*n)) - 1
		return xs[max(0, min(i, len(xs)-1))]
	}
	out["min"], out["max"] = xs[0], xs[len(xs)-1]
	out["arithmetic_mean"], out["geometric_mean"], out["harmonic_mean"] = mean, math.Exp(logSum/n), n/invSum
	out["median"], out["variance"], out["standard_deviation"] = pct(0.5), variance, sd
	out["skewness"], out["kurtosis"] = skew, kurt
	out["percentile"] = [][2]float64{{50, pct(.5)}, {75, pct(.75)}, {90, pct(.9)}, {95, pct(.95)}, {99, pct(.99)}, {999, pct(.999)}}
	// Ten bins of equal width over [min, max], each named by its upper end.
	lo, hi := xs[0], xs[len(xs)-1]
	width := (hi - lo) / 10
	bins := make([][2]float64, 10)
	for i := range bins {
		bins[i][0] = lo + width*float64(i+1)
	}
	for _, x := range xs {
		i := 9
		if width > 0 {
			i = min(int((x-lo)/width), 9)
		}
		bins[i][1]++
	}
	out["histogram"] = bins
	return out
}
