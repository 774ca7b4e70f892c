package e2e

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"
)

// refusingGuard is a validate_doc_update refusing docs with "refuse": true.
const refusingGuard = `{"validate_doc_update":"function(newDoc) { if (newDoc.refuse) throw({forbidden: 'refused here: ' + newDoc._id}); }"}`

// TestE2ERefusedDocs (issue #31 item 2), through minicouch's HTTP API: a
// target whose validate_doc_update refuses some docs and whose
// max_document_size refuses others. A counting job shows which docs and
// why in _scheduler/docs/{db}/{docid} and _scheduler/jobs/{id} (fresh on
// the node running it, though it writes its stats to the queue once a
// minute), the counts in the listings, _active_tasks and Prometheus; a
// job with doc_write_failure "fail" crashes naming the doc and, once the
// target accepts it, completes with it.
func TestE2ERefusedDocs(t *testing.T) {
	c := startCouch(t, "stats_update_interval_sec = 60\n")
	big := strings.Repeat("x", 8000)
	for _, db := range []string{"src", "tgt", "tgt_strict"} {
		c.must("PUT", "/"+db, "", 201)
	}
	c.putDocs("src", 0, 5)
	c.must("PUT", "/src/refuse-1", `{"refuse":true}`, 201)
	c.must("PUT", "/src/big-1", `{"big":"`+big+`"}`, 201)
	for _, db := range []string{"tgt", "tgt_strict"} {
		c.must("PUT", "/"+db+"/_design/guard", refusingGuard, 201)
	}
	c.must("PUT", "/_node/_local/_config/couchdb/max_document_size", `"4096"`, 200)

	t.Run("a bad doc_write_failure is refused at write time", func(t *testing.T) {
		c.t = t
		code, body := c.req("PUT", "/_replicator/bad", c.repDoc("src", "tgt", `,"doc_write_failure":"stop"`))
		if code != 403 || body != "{\"error\":\"forbidden\",\"reason\":\"`doc_write_failure` must be `count` or `fail`\"}" {
			t.Fatalf("PUT a doc with doc_write_failure \"stop\": %d %s", code, body)
		}
	})

	t.Run("counted: which docs and why", func(t *testing.T) {
		c.t = t
		c.must("PUT", "/_replicator/count", c.repDoc("src", "tgt", `,"continuous":true,"checkpoint_interval":60000`), 201)
		type entry struct {
			ID         string           `json:"id"`
			State      string           `json:"state"`
			Info       map[string]any   `json:"info"`
			ByReason   map[string]int64 `json:"doc_write_failures_by_reason"`
			FailedDocs []struct {
				ID, Rev, Error, Reason, Time string
				Status                       int
			} `json:"failed_docs"`
		}
		get := func(path string) (e entry) {
			json.Unmarshal([]byte(c.must("GET", path, "", 200)), &e)
			return e
		}
		var doc entry
		c.eventually("the two refused docs in _scheduler/docs/{db}/{docid}", 20*time.Second, func() bool {
			doc = get("/_scheduler/docs/_replicator/count")
			return doc.State == "running" && len(doc.FailedDocs) == 2
		})
		if doc.ByReason["forbidden"] != 1 || doc.ByReason["too_large"] != 1 || doc.Info["doc_write_failures"] != 2.0 || doc.Info["docs_written"] != 5.0 {
			t.Errorf("counts: by reason %v, info %v", doc.ByReason, doc.Info)
		}
		want := map[string]string{"refuse-1": "403 forbidden refused here: refuse-1", "big-1": "413 document_too_large big-1"}
		for _, f := range doc.FailedDocs {
			if got := fmt.Sprint(f.Status, " ", f.Error, " ", f.Reason); got != want[f.ID] || !strings.HasPrefix(f.Rev, "1-") || f.Time == "" {
				t.Errorf("failed doc %+v, want %s", f, want[f.ID])
			}
		}
		// A doc refused now shows first, as of the request.
		c.must("PUT", "/src/refuse-2", `{"refuse":true}`, 201)
		c.eventually("the new refusal within seconds (stats written to the queue once a minute)", 10*time.Second, func() bool {
			doc = get("/_scheduler/docs/_replicator/count")
			return len(doc.FailedDocs) == 3 && doc.FailedDocs[0].ID == "refuse-2" && doc.ByReason["forbidden"] == 2
		})
		if job := get("/_scheduler/jobs/" + url.PathEscape(doc.ID)); len(job.FailedDocs) != 3 || job.ByReason["forbidden"] != 2 {
			t.Errorf("_scheduler/jobs/{id}: %+v", job)
		}
		for _, path := range []string{"/_scheduler/jobs", "/_scheduler/docs", "/_scheduler/docs/_replicator"} {
			body := c.must("GET", path, "", 200)
			if !strings.Contains(body, `"doc_write_failures_by_reason":{"forbidden":2,"too_large":1}`) || strings.Contains(body, "failed_docs") {
				t.Errorf("%s: want the counts and not the docs: %s", path, body)
			}
		}
		if body := c.must("GET", "/_active_tasks", "", 200); !strings.Contains(body, `"doc_write_failures":3,"doc_write_failures_by_reason":{"forbidden":2,"too_large":1},"docs_read":`) {
			t.Errorf("_active_tasks: %s", body)
		}
		prom := c.must("GET", "/_node/_local/_prometheus", "", 200)
		for _, line := range []string{
			`couchepi_replicator_doc_write_failures_by_reason_total{plugin="replicator",reason="forbidden"} 2`,
			`couchepi_replicator_doc_write_failures_by_reason_total{plugin="replicator",reason="too_large"} 1`,
			`couchepi_replicator_doc_write_failures_by_reason_total{plugin="replicator",reason="other"} 0`,
		} {
			if !strings.Contains(prom, line+"\n") {
				t.Errorf("Prometheus lacks %s", line)
			}
		}
		if got := c.docCount("tgt"); got != 5+1 { // and the guard
			t.Errorf("target holds %d docs, want the 5 accepted and its design doc", got)
		}
		c.must("DELETE", "/_replicator/count?rev="+c.revOf("/_replicator/count"), "", 200)
	})

	t.Run("fail: the job crashes naming the doc, then completes with it", func(t *testing.T) {
		c.t = t
		c.must("PUT", "/_replicator/strict", c.repDoc("src", "tgt_strict", `,"doc_write_failure":"fail","worker_processes":1`), 201)
		var m map[string]any
		c.eventually("crashing on a refused doc", 30*time.Second, func() bool {
			m = c.schedDoc("_replicator", "strict")
			info, _ := m["info"].(map[string]any)
			reason, _ := info["error"].(string)
			return m["state"] == "crashing" && strings.HasPrefix(reason, "doc_write_failed: document `") &&
				strings.HasSuffix(reason, "; the replication's doc_write_failure is `fail`")
		})
		reason := m["info"].(map[string]any)["error"].(string)
		if !strings.Contains(reason, "was refused by the target: 403 forbidden: refused here: refuse-") &&
			!strings.Contains(reason, "was refused by the target: 413 document_too_large: big-1") {
			t.Errorf("crash reason %q names no refused doc", reason)
		}
		if failed, _ := m["failed_docs"].([]any); len(failed) == 0 {
			t.Errorf("a crashing job shows no failed_docs: %v", m)
		}
		// The target accepts them now: the next retry writes them.
		c.must("DELETE", "/tgt_strict/_design/guard?rev="+c.revOf("/tgt_strict/_design/guard"), "", 200)
		c.must("PUT", "/_node/_local/_config/couchdb/max_document_size", `"8000000"`, 200)
		c.waitState("_replicator", "strict", "completed", 60*time.Second)
		for _, id := range []string{"refuse-1", "refuse-2", "big-1", "d00004"} {
			c.must("GET", "/tgt_strict/"+id, "", 200)
		}
	})

	t.Run("a _replicate one-shot that fails answers 500 doc_write_failed", func(t *testing.T) {
		c.t = t
		c.must("PUT", "/tgt_once", "", 201)
		c.must("PUT", "/tgt_once/_design/guard", refusingGuard, 201)
		code, body := c.req("POST", "/_replicate", fmt.Sprintf(`{"source":%q,"target":%q,"doc_write_failure":"fail"}`, c.endpoint("src"), c.endpoint("tgt_once")))
		if code != 500 || !strings.HasPrefix(body, `{"error":"doc_write_failed","reason":"document `+"`refuse-") {
			t.Fatalf("POST /_replicate: %d %s", code, body)
		}
	})
}
