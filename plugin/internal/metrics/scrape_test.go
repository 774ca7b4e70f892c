package metrics_test

// A Prometheus scrape of a running minicouch with the replicator loaded:
// minicouch and the plugin are built once (minicouchtest) and run as processes,
// a one-shot and a continuous replication run, and the exposition text of
// /_node/_local/_prometheus is parsed and checked. Skipped with -short.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/minicouchtest"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// testConfig makes the scheduler fast enough for a test.
const testConfig = `[replicator]
interval_sec = 1
startup_jitter = 100
stats_update_interval_sec = 1
checkpoint_interval = 500
`

func TestMain(m *testing.M) { os.Exit(minicouchtest.Main(m)) }

// server is a running minicouch with the replicator.
type server struct {
	t    *testing.T
	addr string
}

// startServer runs minicouch with the replicator and testConfig; it is
// stopped when t ends.
func startServer(t *testing.T) *server {
	t.Helper()
	mc := minicouchtest.Start(t, minicouchtest.Options{
		Config: testConfig, Plugins: []string{minicouchtest.Replicator(t, "")},
	})
	return &server{t: t, addr: mc.Addr}
}

// do sends a request with basic auth user:pass ("" = anonymous).
func (s *server) do(auth, method, path, body string) (*http.Response, string) {
	s.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r, err := http.NewRequest(method, "http://"+s.addr+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	if u, p, ok := strings.Cut(auth, ":"); ok {
		r.SetBasicAuth(u, p)
	}
	r.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func (s *server) must(method, path, body string, want int) string {
	s.t.Helper()
	resp, b := s.do("admin:pass", method, path, body)
	if resp.StatusCode != want {
		s.t.Fatalf("%s %s: %d %s (want %d)", method, path, resp.StatusCode, b, want)
	}
	return b
}

func (s *server) eventually(what string, cond func() bool) {
	s.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			s.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (s *server) state(docID string) string {
	resp, b := s.do("admin:pass", "GET", "/_scheduler/docs/_replicator/"+docID, "")
	if resp.StatusCode != 200 {
		return ""
	}
	var d struct {
		State string `json:"state"`
	}
	json.Unmarshal([]byte(b), &d)
	return d.State
}

func (s *server) docCount(db string) int {
	var info struct {
		DocCount int `json:"doc_count"`
	}
	json.Unmarshal([]byte(s.must("GET", "/"+db, "", 200)), &info)
	return info.DocCount
}

// scrape fetches and parses the metrics at path.
func (s *server) scrape(path string) map[string]*dto.MetricFamily {
	s.t.Helper()
	resp, body := s.do("admin:pass", "GET", path, "")
	if resp.StatusCode != 200 {
		s.t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/plain; version=0.0.4; charset=utf-8" {
		s.t.Fatalf("Content-Type %q", ct)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		s.t.Fatalf("parse exposition: %v\n%s", err, body)
	}
	return mfs
}

// value returns the value of the family's metric carrying all labels
// (pairs of name, value); histograms give their sample count.
func value(mfs map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
next:
	for _, m := range mf.GetMetric() {
		have := map[string]string{}
		for _, lp := range m.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if have[labels[i]] != labels[i+1] {
				continue next
			}
		}
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			return m.GetCounter().GetValue(), true
		case dto.MetricType_GAUGE:
			return m.GetGauge().GetValue(), true
		case dto.MetricType_HISTOGRAM:
			return float64(m.GetHistogram().GetSampleCount()), true
		default:
			return m.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

func TestPrometheusScrape(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs minicouch with the replicator (skipped with -short)")
	}
	s := startServer(t)
	const n = 40
	for _, db := range []string{"src", "tgt_once", "tgt_cont"} {
		s.must("PUT", "/"+db, "", 201)
	}
	var docs []string
	for i := 0; i < n; i++ {
		docs = append(docs, fmt.Sprintf(`{"_id":"d%03d","n":%d}`, i, i))
	}
	s.must("POST", "/src/_bulk_docs", `{"docs":[`+strings.Join(docs, ",")+`]}`, 201)
	ep := func(db string) string { return "http://admin:pass@" + s.addr + "/" + db }
	s.must("PUT", "/_replicator/once", fmt.Sprintf(`{"source":%q,"target":%q}`, ep("src"), ep("tgt_once")), 201)
	s.must("PUT", "/_replicator/cont", fmt.Sprintf(`{"source":%q,"target":%q,"continuous":true}`, ep("src"), ep("tgt_cont")), 201)
	// A doc the replicator rejects at write time.
	if resp, b := s.do("admin:pass", "PUT", "/_replicator/bad", `{"source":"x"}`); resp.StatusCode != 403 {
		t.Fatalf("invalid replication doc: %d %s", resp.StatusCode, b)
	}
	s.eventually("one-shot completed", func() bool { return s.state("once") == "completed" })
	s.eventually("continuous running with every doc", func() bool {
		return s.state("cont") == "running" && s.docCount("tgt_cont") == n
	})
	// The continuous job's stats and checkpoint reach the counters.
	s.eventually("docs written and checkpoints of both replications counted", func() bool {
		mfs := s.scrape("/_node/_local/_prometheus")
		written, _ := value(mfs, "couchepi_replicator_docs_written_total")
		checkpoints, _ := value(mfs, "couchdb_couch_replicator_checkpoints_success_total")
		return written >= 2*n && checkpoints >= 2
	})

	// Admin only, like CouchDB.
	if resp, _ := s.do("", "GET", "/_node/_local/_prometheus", ""); resp.StatusCode != 401 {
		t.Fatalf("anonymous scrape: %d, want 401", resp.StatusCode)
	}

	for _, path := range []string{"/_node/_local/_prometheus", "/_node/nonode@nohost/_prometheus"} {
		mfs := s.scrape(path)
		rep := []string{"plugin", "replicator"}
		tests := []struct {
			name   string
			labels []string
			ok     func(float64) bool
			want   string
		}{
			{"couchdb_couch_replicator_jobs_running", rep, func(v float64) bool { return v == 1 }, "1 (the continuous job)"},
			{"couchdb_couch_replicator_jobs_pending", rep, func(v float64) bool { return v == 0 }, "0"},
			{"couchdb_couch_replicator_jobs_crashed", rep, func(v float64) bool { return v == 0 }, "0"},
			{"couchdb_couch_replicator_jobs_total", rep, func(v float64) bool { return v == 2 }, "2"},
			{"couchepi_replicator_jobs", append([]string{"state", "completed"}, rep...), func(v float64) bool { return v == 1 }, "1 completed"},
			{"couchdb_couch_replicator_checkpoints_success_total", rep, func(v float64) bool { return v >= 2 }, ">= 2"},
			{"couchdb_couch_replicator_checkpoints_failure_total", rep, func(v float64) bool { return v == 0 }, "0"},
			{"couchdb_couch_replicator_requests_total", rep, func(v float64) bool { return v > 0 }, "> 0"},
			{"couchdb_couch_replicator_responses_success_total", rep, func(v float64) bool { return v > 0 }, "> 0"},
			{"couchepi_replicator_docs_read_total", rep, func(v float64) bool { return v >= 2*n }, fmt.Sprintf(">= %d", 2*n)},
			{"couchepi_replicator_docs_written_total", rep, func(v float64) bool { return v >= 2*n }, fmt.Sprintf(">= %d", 2*n)},
			{"couchepi_replicator_doc_write_failures_total", rep, func(v float64) bool { return v == 0 }, "0"},
			{"couchepi_replicator_doc_write_failures_by_reason_total", append([]string{"reason", "forbidden"}, rep...), func(v float64) bool { return v == 0 }, "0, and present"},
			{"couchepi_replicator_doc_write_failures_by_reason_total", append([]string{"reason", "other"}, rep...), func(v float64) bool { return v == 0 }, "0, and present"},
			{"couchepi_replicator_changes_read_total", rep, func(v float64) bool { return v >= 2*n }, fmt.Sprintf(">= %d", 2*n)},
			{"couchepi_replicator_responses_too_many_requests_total", rep, func(v float64) bool { return v == 0 }, "0"},
			{"couchepi_replicator_rate_limiter_backoffs_total", rep, func(v float64) bool { return v == 0 }, "0"},
			{"couchepi_host_hook_calls_total", []string{"hook", "before_doc_update", "plugin", "replicator", "result", "ok"}, func(v float64) bool { return v >= 2 }, ">= 2"},
			{"couchepi_host_hook_calls_total", []string{"hook", "before_doc_update", "plugin", "replicator", "result", "rejected"}, func(v float64) bool { return v == 1 }, "1"},
			{"couchepi_host_hook_duration_seconds", []string{"hook", "before_doc_update", "plugin", "replicator"}, func(v float64) bool { return v >= 3 }, ">= 3 observations"},
			{"couchepi_host_events_delivered_total", rep, func(v float64) bool { return v > 0 }, "> 0"},
			{"couchepi_host_plugin_state", append([]string{"state", "running"}, rep...), func(v float64) bool { return v == 1 }, "1"},
			{"couchepi_host_plugin_restarts_total", rep, func(v float64) bool { return v == 0 }, "0"},
			{"couchdb_httpd_request_methods", []string{"method", "PUT"}, func(v float64) bool { return v >= 5 }, ">= 5"},
			{"couchdb_httpd_status_codes", []string{"code", "201"}, func(v float64) bool { return v >= 5 }, ">= 5"},
			{"minicouch_http_request_duration_seconds", []string{"method", "GET"}, func(v float64) bool { return v > 0 }, "> 0 observations"},
		}
		for _, tc := range tests {
			v, ok := value(mfs, tc.name, tc.labels...)
			if !ok || !tc.ok(v) {
				t.Errorf("%s %s: %s%v = %v (present %v), want %s", path, tc.name, tc.name, tc.labels, v, ok, tc.want)
			}
		}
	}
}
