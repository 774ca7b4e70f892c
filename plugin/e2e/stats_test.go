package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/minicouchtest"
)

// TestE2EStats scrapes a live minicouch with the replicator after a known
// workload: the couch_replicator counters of _stats and Prometheus moved
// by exactly it, and the unauthenticated scrape port serves the metrics
// and nothing else.
func TestE2EStats(t *testing.T) {
	promAddr, err := minicouchtest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(promAddr, ":")
	// A long backoff: the crashing job runs once, so every count is exact.
	c := startCouch(t, "min_backoff_penalty_sec = 120\nmax_backoff_penalty_sec = 240\n"+
		"[prometheus]\nadditional_port = true\nbind_address = "+host+"\nport = "+port+"\n")
	if got := c.must("GET", "/_node/_local/_config/replicator/min_backoff_penalty_sec", "", 200); got != `"120"` {
		t.Fatalf("min_backoff_penalty_sec = %s, want the test's 120", got)
	}
	stat := func(path string) float64 {
		t.Helper()
		code, body := c.req("GET", "/_node/_local/_stats/"+path, "")
		var e struct {
			Value float64 `json:"value"`
			Type  string  `json:"type"`
		}
		if code != 200 || json.Unmarshal([]byte(body), &e) != nil {
			t.Fatalf("_stats/%s: %d %s", path, code, body)
		}
		return e.Value
	}
	counters := []string{"jobs/adds", "jobs/starts", "jobs/crashes", "jobs/removes", "docs/completed_state_updates", "workers_started"}
	before := map[string]float64{}
	for _, p := range counters {
		before[p] = stat("couch_replicator/" + p)
	}

	// Two one-shot jobs that complete, one whose source is missing.
	c.must("PUT", "/src", "", 201)
	c.putDocs("src", 0, 10)
	for i := 0; i < 2; i++ {
		c.must("PUT", fmt.Sprintf("/_replicator/ok%d", i), c.repDoc("src", fmt.Sprintf("tgt%d", i), `,"create_target":true`), 201)
	}
	c.must("PUT", "/_replicator/crash", c.repDoc("nosuchdb", "tgt9", ""), 201)
	c.waitState("_replicator", "ok0", "completed", 60*time.Second)
	c.waitState("_replicator", "ok1", "completed", 60*time.Second)
	c.waitState("_replicator", "crash", "crashing", 60*time.Second)
	c.must("DELETE", "/_replicator/crash?rev="+c.revOf("/_replicator/crash"), "", 200)
	c.eventually("the removal counted", 10*time.Second, func() bool { return stat("couch_replicator/jobs/removes")-before["jobs/removes"] == 1 })

	want := map[string]float64{"jobs/adds": 3, "jobs/starts": 3, "jobs/crashes": 1, "jobs/removes": 1, "docs/completed_state_updates": 2}
	for p, w := range want {
		if got := stat("couch_replicator/"+p) - before[p]; got != w {
			t.Errorf("couch_replicator.%s moved by %v, want %v", strings.ReplaceAll(p, "/", "."), got, w)
		}
	}
	if got := stat("couch_replicator/workers_started") - before["workers_started"]; got < 2 {
		t.Errorf("workers_started moved by %v", got)
	}
	if stat("couch_replicator/jobs/total") != 2 || stat("couch_replicator/jobs/running") != 0 {
		t.Errorf("jobs gauges: total %v running %v", stat("couch_replicator/jobs/total"), stat("couch_replicator/jobs/running"))
	}

	// The scrape port: no credentials, the same counters, nothing else.
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + promAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := get("/_node/_local/_prometheus")
	if code != 200 {
		t.Fatalf("scrape port: %d %s", code, body)
	}
	adds := stat("couch_replicator/jobs/adds")
	if line := `couchdb_couch_replicator_jobs_adds_total{plugin="replicator"} ` + strconv.FormatFloat(adds, 'f', -1, 64); !strings.Contains(body, line) {
		t.Errorf("scrape lacks %q", line)
	}
	for _, metric := range []string{"couchdb_database_writes_total", "couchdb_httpd_requests_total", "couchdb_couch_replicator_jobs_starts_total"} {
		if !strings.Contains(body, "\n"+metric) {
			t.Errorf("scrape lacks %s", metric)
		}
	}
	for _, path := range []string{"/", "/_all_dbs", "/src", "/_node/_local/_stats", "/_node/_local/_config"} {
		if code, body := get(path); code != 404 {
			t.Errorf("scrape port GET %s: %d %s, want 404", path, code, body)
		}
	}
	if code, _ := c.reqAs(":", "GET", "/_node/_local/_prometheus", ""); code != 401 {
		t.Errorf("main port without credentials: %d, want 401", code)
	}
}
