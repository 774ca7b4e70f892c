package couchapi

import (
	"encoding/json"
	"fmt"
	"testing"
)

// statsOf reads /_node/_local/_stats.
func statsOf(t *testing.T, base string) map[string]any {
	t.Helper()
	resp, b := step{method: "GET", path: "/_node/_local/_stats"}.do(t, base)
	if resp.StatusCode != 200 {
		t.Fatalf("_stats: %d %s", resp.StatusCode, b)
	}
	var tree map[string]any
	if err := json.Unmarshal(b, &tree); err != nil {
		t.Fatal(err)
	}
	return tree
}

// statAt returns the entry at path.
func statAt(t *testing.T, tree map[string]any, path ...string) map[string]any {
	t.Helper()
	var node any = tree
	for _, p := range path {
		m, _ := node.(map[string]any)
		node = m[p]
	}
	e, ok := node.(map[string]any)
	if !ok {
		t.Fatalf("no stat %v", path)
	}
	return e
}

// TestStats: after a known workload the couchdb.* counters moved by
// exactly it, entries have CouchDB's shape, and a path reads a subtree.
func TestStats(t *testing.T) {
	ts, _ := newTestServer(t)
	runSteps(t, ts.URL, []step{{name: "db", method: "PUT", path: "/db", status: 201}})
	before := statsOf(t, ts.URL)
	var steps []step
	for i := 0; i < 5; i++ {
		steps = append(steps, step{name: "write", method: "PUT", path: fmt.Sprintf("/db/d%d", i), body: `{}`, status: 201})
	}
	steps = append(steps, step{name: "local", method: "PUT", path: "/db/_local/l", body: `{}`, status: 201})
	for i := 0; i < 3; i++ {
		steps = append(steps, step{name: "read", method: "GET", path: fmt.Sprintf("/db/d%d", i), status: 200})
	}
	steps = append(steps, step{name: "missing", method: "GET", path: "/db/nope", status: 404})
	runSteps(t, ts.URL, steps)
	after := statsOf(t, ts.URL)
	delta := func(path ...string) float64 {
		return statAt(t, after, path...)["value"].(float64) - statAt(t, before, path...)["value"].(float64)
	}
	for _, c := range []struct {
		path []string
		want float64
	}{
		{[]string{"couchdb", "document_writes"}, 5},
		{[]string{"couchdb", "document_inserts"}, 5},
		{[]string{"couchdb", "database_writes"}, 5},
		{[]string{"couchdb", "local_document_writes"}, 1},
		{[]string{"couchdb", "database_reads"}, 4},
		{[]string{"couchdb", "httpd_request_methods", "PUT"}, 6},
		{[]string{"couchdb", "httpd_status_codes", "201"}, 6},
		{[]string{"couchdb", "httpd_status_codes", "404"}, 1},
		{[]string{"couchdb", "httpd", "requests"}, 11}, // the ten above and the first _stats read
	} {
		if got := delta(c.path...); got != c.want {
			t.Errorf("%v moved by %v, want %v", c.path, got, c.want)
		}
	}
	if e := statAt(t, after, "couchdb", "open_databases"); e["value"].(float64) != 3 || e["type"] != "counter" || e["desc"] != "number of open databases" {
		t.Errorf("open_databases = %v", e)
	}
	rt := statAt(t, after, "couchdb", "request_time")
	v, _ := rt["value"].(map[string]any)
	if rt["type"] != "histogram" || v == nil || v["n"].(float64) < 11 {
		t.Fatalf("request_time = %v", rt)
	}
	for _, k := range []string{"min", "max", "arithmetic_mean", "geometric_mean", "harmonic_mean", "median", "variance",
		"standard_deviation", "skewness", "kurtosis", "percentile", "histogram", "n"} {
		if _, ok := v[k]; !ok {
			t.Errorf("request_time has no %s", k)
		}
	}
	runSteps(t, ts.URL, []step{
		{name: "a subtree", method: "GET", path: "/_node/_local/_stats/couchdb/httpd/requests", status: 200, has: []string{`"type":"counter"`, `"desc":"number of HTTP requests"`}},
		{name: "the same under /_stats", method: "GET", path: "/_stats/couchdb/open_databases", status: 200, has: []string{`"value":3`}},
		{name: "no such stat", method: "GET", path: "/_node/_local/_stats/couchdb/nope", status: 404},
		{name: "admins only", method: "GET", path: "/_node/_local/_stats", user: "-", status: 401},
	})
}

// TestHistogramValue checks the histogram figures on known samples.
func TestHistogramValue(t *testing.T) {
	v := histogramValue([]float64{1, 2, 3, 4, 10})
	if v["min"] != 1.0 || v["max"] != 10.0 || v["arithmetic_mean"] != 4.0 || v["median"] != 3.0 || v["n"] != 5 {
		t.Errorf("figures: %v", v)
	}
	bins := v["histogram"].([][2]float64)
	total := 0.0
	for _, b := range bins {
		total += b[1]
	}
	if len(bins) != 10 || total != 5 || bins[9][0] != 10 {
		t.Errorf("histogram %v", bins)
	}
	if e := histogramValue(nil); e["n"] != 0 || e["min"] != 0.0 {
		t.Errorf("empty: %v", e)
	}
}
