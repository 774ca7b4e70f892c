package monitor

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/couchepi/couchepi/plugin/internal/jobdata"
)

// refusedRecords are a running and a crashing job whose targets refused
// documents (issue #31 item 2).
func refusedRecords() map[string]*jobdata.Record {
	recs := sampleRecords()
	running := *recs["u1|cont"]
	running.Stats.DocWriteFailures = 3
	running.Stats.DocWriteFailuresByReason = map[string]int64{"too_large": 1, "forbidden": 2}
	running.Stats.FailedDocs = []jobdata.FailedDoc{
		{ID: "big", Rev: "1-b", Status: 413, Error: "document_too_large", Reason: "big", Time: ts(55)},
		{ID: "b2", Rev: "1-a", Status: 403, Error: "forbidden", Reason: "no b docs", Time: ts(54)},
		{ID: "long…", Error: "id_too_long", Reason: "the document id is 300 bytes long", Time: ts(54)},
	}
	crashReason := "doc_write_failed: document `b2` revision 1-a was refused by the target: 403 forbidden: no b docs; the replication's doc_write_failure is `fail`"
	crash := *recs["u1|crash"]
	crash.LastError, crash.StateInfo = crashReason, jobdata.ErrorInfo(crashReason)
	crash.History = []jobdata.Event{{Type: "crashed", Timestamp: ts(55), Reason: crashReason}}
	crash.Stats = jobdata.Stats{DocWriteFailures: 1, DocWriteFailuresByReason: map[string]int64{"forbidden": 1},
		FailedDocs: []jobdata.FailedDoc{{ID: "b2", Rev: "1-a", Status: 403, Error: "forbidden", Reason: "no b docs", Time: ts(55)}}}
	return map[string]*jobdata.Record{"u1|cont": &running, "u1|crash": &crash}
}

// TestFailureShapes: couchepi's doc_write_failures_by_reason follows
// CouchDB's keys in every entry; failed_docs, newest first, only in the
// one-entry endpoints; `_active_tasks` has the counts, in its key order.
func TestFailureShapes(t *testing.T) {
	recs := refusedRecords()
	const runningJob = `{
  "database": "_replicator", "id": "b9691fedaee4243ba089bca27b0feb4d+continuous", "pid": "<0.2978.0>",
  "source": "http://127.0.0.1:25984/src/", "target": "http://127.0.0.1:25984/tgt2/", "user": null, "doc_id": "cont",
  "info": {"revisions_checked": 10, "missing_revisions_found": 10, "docs_read": 10, "docs_written": 10,
    "changes_pending": 0, "doc_write_failures": 3, "bulk_get_docs": 8, "bulk_get_attempts": 9,
    "checkpointed_source_seq": "9-g1AAAA…", "source_seq": "9-g1AAAA…", "through_seq": "9-g1AAAA…", "lag_sec": 0},
  "history": [{"timestamp": "2026-11-21T20:08:53Z", "type": "started"}, {"timestamp": "2026-11-21T20:08:53Z", "type": "added"}],
  "node": "couchdb@127.0.0.1", "start_time": "2026-11-21T20:08:53Z",
  "doc_write_failures_by_reason": {"forbidden": 2, "too_large": 1}`
	const runningFailed = `,
  "failed_docs": [
    {"id": "big", "rev": "1-b", "status": 413, "error": "document_too_large", "reason": "big", "time": "2026-11-21T20:08:55Z"},
    {"id": "b2", "rev": "1-a", "status": 403, "error": "forbidden", "reason": "no b docs", "time": "2026-11-21T20:08:54Z"},
    {"id": "long…", "rev": null, "status": null, "error": "id_too_long", "reason": "the document id is 300 bytes long", "time": "2026-11-21T20:08:54Z"}]`
	const crashingDoc = `{
  "database": "_replicator", "doc_id": "crash", "id": "ff6b656bcddc4f6b55c13e0dd168b83d",
  "node": "couchdb@127.0.0.1", "source": "http://127.0.0.1:25984/nosuchdb/", "target": "http://127.0.0.1:25984/tgt_extra/",
  "state": "crashing", "info": {"error": "doc_write_failed: document ` + "`b2`" + ` revision 1-a was refused by the target: 403 forbidden: no b docs; the replication's doc_write_failure is ` + "`fail`" + `"},
  "error_count": 1, "last_updated": "2026-11-21T20:08:55Z", "start_time": "2026-11-21T20:08:53Z",
  "source_proxy": null, "target_proxy": null,
  "doc_write_failures_by_reason": {"forbidden": 1}`
	const crashingFailed = `,
  "failed_docs": [{"id": "b2", "rev": "1-a", "status": 403, "error": "forbidden", "reason": "no b docs", "time": "2026-11-21T20:08:55Z"}]`
	tests := []struct {
		name   string
		render func() json.RawMessage
		want   string
	}{
		{"_scheduler/jobs entry", func() json.RawMessage { return jobJSON(recs["u1|cont"]) }, runningJob + `}`},
		{"_scheduler/jobs/{id}", func() json.RawMessage { return jobDetailJSON(recs["u1|cont"]) }, runningJob + runningFailed + `}`},
		{"_scheduler/docs entry", func() json.RawMessage { return docJSON(recs["u1|crash"]) }, crashingDoc + `}`},
		{"_scheduler/docs/{db}/{docid}", func() json.RawMessage { return docDetailJSON(recs["u1|crash"]) }, crashingDoc + crashingFailed + `}`},
		{"_active_tasks", func() json.RawMessage { return activeTask(recs["u1|cont"]) }, `{
    "node": "couchdb@127.0.0.1", "pid": "<0.2978.0>", "process_status": "waiting",
    "bulk_get_attempts": 9, "bulk_get_docs": 8, "changes_pending": 0, "checkpoint_interval": 1000,
    "checkpointed_source_seq": "9-g1AAAA…", "continuous": true, "database": "_replicator", "doc_id": "cont",
    "doc_write_failures": 3, "doc_write_failures_by_reason": {"forbidden": 2, "too_large": 1},
    "docs_read": 10, "docs_written": 10, "lag_sec": 0, "missing_revisions_found": 10,
    "replication_id": "b9691fedaee4243ba089bca27b0feb4d+continuous", "revisions_checked": 10,
    "source": "http://127.0.0.1:25984/src/", "source_seq": "9-g1AAAA…", "started_on": 1795291733,
    "target": "http://127.0.0.1:25984/tgt2/", "through_seq": "9-g1AAAA…", "type": "replication",
    "updated_on": 1795291736, "user": null}`},
		{"no failures, no keys: CouchDB's shape", func() json.RawMessage { return jobDetailJSON(sampleRecords()["u1|cont"]) }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(tt.render())
			if tt.want == "" {
				if strings.Contains(got, "doc_write_failures_by_reason") || strings.Contains(got, "failed_docs") {
					t.Fatalf("a job without refused docs shows them: %s", got)
				}
				return
			}
			if want := compact(t, tt.want); got != want {
				t.Fatalf("got\n%s\nwant\n%s", got, want)
			}
		})
	}
}

// TestFailureEndpoints: the listings carry the counts and not the
// documents; the one-entry endpoints carry both.
func TestFailureEndpoints(t *testing.T) {
	h := New(memSource(refusedRecords()))
	tests := []struct {
		path      string
		failedDoc bool
	}{
		{"/_scheduler/jobs", false},
		{"/_scheduler/docs", false},
		{"/_scheduler/docs/_replicator", false},
		{"/_scheduler/jobs/b9691fedaee4243ba089bca27b0feb4d%2Bcontinuous", true},
		{"/_scheduler/docs/_replicator/crash", true},
	}
	for _, tt := range tests {
		w := httptest.NewRecorder()
		h.Serve(w, httptest.NewRequest(http.MethodGet, tt.path, nil), true)
		body := w.Body.String()
		if w.Code != 200 || !strings.Contains(body, `"doc_write_failures_by_reason":{"forbidden":`) {
			t.Errorf("%s: %d %s, want the counts", tt.path, w.Code, body)
		}
		if strings.Contains(body, `"failed_docs"`) != tt.failedDoc {
			t.Errorf("%s: failed_docs present %v, want %v: %s", tt.path, !tt.failedDoc, tt.failedDoc, body)
		}
	}
}
