package monitor

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
)

const seq9 = `"9-g1AAAA…"`

func ts(sec int) int64 { return time.Date(2026, 11, 21, 20, 8, sec, 0, time.UTC).Unix() }

func rep(src, tgt string, continuous bool) *parse.Rep {
	auth := &parse.BasicAuth{Username: "admin", Password: "pass"}
	return &parse.Rep{
		Source:             parse.Endpoint{URL: "http://127.0.0.1:25984/" + src + "/", Auth: auth, Headers: map[string]string{"X-Token": "secret-token"}},
		Target:             parse.Endpoint{URL: "http://127.0.0.1:25984/" + tgt + "/", Auth: auth},
		Continuous:         continuous,
		CheckpointInterval: 1000,
	}
}

func i64(n int64) *int64 { return &n }

func stats10(pending *int64, withSeqs bool) jobdata.Stats {
	s := jobdata.Stats{RevisionsChecked: 10, MissingRevisionsFound: 10, DocsRead: 10, DocsWritten: 10,
		ChangesPending: pending, BulkGetDocs: 8, BulkGetAttempts: 9, CheckpointedSourceSeq: json.RawMessage(seq9)}
	if withSeqs {
		s.SourceSeq, s.ThroughSeq = json.RawMessage(seq9), json.RawMessage(seq9)
	}
	if pending != nil { // the source's position is known: caught up
		s.LagSec = i64(0)
	}
	return s
}

// The records behind samples 13–20 of couchdb-3.5.0-samples.md.
func sampleRecords() map[string]*jobdata.Record {
	running := &jobdata.Record{
		Rep: rep("src", "tgt2", true), RepID: "b9691fedaee4243ba089bca27b0feb4d+continuous", BaseID: "b9691fedaee4243ba089bca27b0feb4d",
		DBName: "_replicator", DBUUID: "u1", DocID: "cont", Stats: stats10(i64(0), true), State: jobdata.Running,
		StartTime: ts(53), LastUpdated: ts(53), LastStart: ts(53), StatsUpdated: ts(56), Node: "couchdb@127.0.0.1", PID: "<0.2978.0>",
		History: []jobdata.Event{{Type: "started", Timestamp: ts(53)}, {Type: "added", Timestamp: ts(53)}},
	}
	completed := &jobdata.Record{
		Rep: rep("src", "tgt1", false), RepID: "068acea017c6d0412b3bd60ed49e2383", DBName: "_replicator", DBUUID: "u1", DocID: "oneshot",
		Stats: stats10(nil, true), State: jobdata.Completed, StartTime: ts(52), LastStart: ts(53), LastUpdated: ts(56), Node: "couchdb@127.0.0.1",
	}
	reason := "Replication `b9691fedaee4243ba089bca27b0feb4d+continuous` specified by document `dup` already started, triggered by document `cont` from db `_replicator`"
	dup := &jobdata.Record{
		Rep: rep("src", "tgt2", true), DBName: "_replicator", DBUUID: "u1", DocID: "dup", State: jobdata.Failed, ErrorCount: 1,
		StateInfo: jobdata.ErrorInfo(reason), LastError: reason, StartTime: ts(58), LastUpdated: ts(58),
	}
	crashReason := "db_not_found: could not open http://127.0.0.1:25984/nosuchdb/"
	crash := &jobdata.Record{
		Rep: rep("nosuchdb", "tgt_extra", false), RepID: "ff6b656bcddc4f6b55c13e0dd168b83d", DBName: "_replicator", DBUUID: "u1", DocID: "crash",
		State: jobdata.Crashing, ErrorCount: 1, LastError: crashReason, StateInfo: jobdata.ErrorInfo(crashReason),
		StartTime: ts(53), LastStart: ts(53), LastUpdated: ts(55), Node: "couchdb@127.0.0.1",
		History: []jobdata.Event{{Type: "crashed", Timestamp: ts(55), Reason: crashReason}, {Type: "started", Timestamp: ts(53)}, {Type: "added", Timestamp: ts(53)}},
	}
	return map[string]*jobdata.Record{"u1|cont": running, "u1|oneshot": completed, "u1|dup": dup, "u1|crash": crash}
}

// compact removes insignificant whitespace so goldens can be written readably.
func compact(t *testing.T, s string) string {
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		t.Fatalf("bad golden %s: %v", s, err)
	}
	return b.String()
}

// TestShapes renders the recorded CouchDB 3.5.0 samples: byte for byte
// CouchDB's, but for couchepi's additions after CouchDB's keys (lag_sec).
func TestShapes(t *testing.T) {
	recs := sampleRecords()
	tests := []struct {
		name   string
		render func() json.RawMessage
		want   string
	}{
		{"sample 13 completed doc", func() json.RawMessage { return docJSON(recs["u1|oneshot"]) }, `{
  "database": "_replicator", "doc_id": "oneshot", "id": null,
  "source": "http://127.0.0.1:25984/src/", "target": "http://127.0.0.1:25984/tgt1/",
  "state": "completed", "error_count": 0,
  "info": {"revisions_checked": 10, "missing_revisions_found": 10, "docs_read": 10, "docs_written": 10,
    "changes_pending": null, "doc_write_failures": 0, "bulk_get_docs": 8, "bulk_get_attempts": 9,
    "checkpointed_source_seq": "9-g1AAAA…"},
  "start_time": "2026-11-21T20:08:53Z", "last_updated": "2026-11-21T20:08:56Z"}`},
		{"sample 14 _replication_stats", func() json.RawMessage { return recs["u1|oneshot"].ReplicationStats() }, `{
    "revisions_checked": 10, "missing_revisions_found": 10, "docs_read": 10, "docs_written": 10,
    "changes_pending": null, "doc_write_failures": 0, "bulk_get_docs": 8, "bulk_get_attempts": 9,
    "checkpointed_source_seq": "9-g1AAAA…", "start_time": "2026-11-21T20:08:53Z"}`},
		{"sample 15 running doc", func() json.RawMessage { return docJSON(recs["u1|cont"]) }, `{
  "database": "_replicator", "doc_id": "cont", "id": "b9691fedaee4243ba089bca27b0feb4d+continuous",
  "node": "couchdb@127.0.0.1", "source": "http://127.0.0.1:25984/src/", "target": "http://127.0.0.1:25984/tgt2/",
  "state": "running",
  "info": {"revisions_checked": 10, "missing_revisions_found": 10, "docs_read": 10, "docs_written": 10,
    "changes_pending": 0, "doc_write_failures": 0, "bulk_get_docs": 8, "bulk_get_attempts": 9,
    "checkpointed_source_seq": "9-g1AAAA…", "source_seq": "9-g1AAAA…", "through_seq": "9-g1AAAA…", "lag_sec": 0},
  "error_count": 0, "last_updated": "2026-11-21T20:08:53Z", "start_time": "2026-11-21T20:08:53Z",
  "source_proxy": null, "target_proxy": null}`},
		{"sample 16 running job", func() json.RawMessage { return jobJSON(recs["u1|cont"]) }, `{
  "database": "_replicator", "id": "b9691fedaee4243ba089bca27b0feb4d+continuous", "pid": "<0.2978.0>",
  "source": "http://127.0.0.1:25984/src/", "target": "http://127.0.0.1:25984/tgt2/", "user": null, "doc_id": "cont",
  "info": {"revisions_checked": 10, "missing_revisions_found": 10, "docs_read": 10, "docs_written": 10,
    "changes_pending": 0, "doc_write_failures": 0, "bulk_get_docs": 8, "bulk_get_attempts": 9,
    "checkpointed_source_seq": "9-g1AAAA…", "source_seq": "9-g1AAAA…", "through_seq": "9-g1AAAA…", "lag_sec": 0},
  "history": [{"timestamp": "2026-11-21T20:08:53Z", "type": "started"}, {"timestamp": "2026-11-21T20:08:53Z", "type": "added"}],
  "node": "couchdb@127.0.0.1", "start_time": "2026-11-21T20:08:53Z"}`},
		{"sample 17 active task", func() json.RawMessage { return activeTask(recs["u1|cont"]) }, `{
    "node": "couchdb@127.0.0.1", "pid": "<0.2978.0>", "process_status": "waiting",
    "bulk_get_attempts": 9, "bulk_get_docs": 8, "changes_pending": 0, "checkpoint_interval": 1000,
    "checkpointed_source_seq": "9-g1AAAA…", "continuous": true, "database": "_replicator", "doc_id": "cont",
    "doc_write_failures": 0, "docs_read": 10, "docs_written": 10, "lag_sec": 0, "missing_revisions_found": 10,
    "replication_id": "b9691fedaee4243ba089bca27b0feb4d+continuous", "revisions_checked": 10,
    "source": "http://127.0.0.1:25984/src/", "source_seq": "9-g1AAAA…", "started_on": 1795291733,
    "target": "http://127.0.0.1:25984/tgt2/", "through_seq": "9-g1AAAA…", "type": "replication",
    "updated_on": 1795291736, "user": null}`},
		{"running job keeping its checkpoints on the target alone", func() json.RawMessage {
			r := *recs["u1|cont"]
			r.Stats.Checkpoint = "target"
			return jobJSON(&r)
		}, `{
  "database": "_replicator", "id": "b9691fedaee4243ba089bca27b0feb4d+continuous", "pid": "<0.2978.0>",
  "source": "http://127.0.0.1:25984/src/", "target": "http://127.0.0.1:25984/tgt2/", "user": null, "doc_id": "cont",
  "info": {"revisions_checked": 10, "missing_revisions_found": 10, "docs_read": 10, "docs_written": 10,
    "changes_pending": 0, "doc_write_failures": 0, "bulk_get_docs": 8, "bulk_get_attempts": 9,
    "checkpointed_source_seq": "9-g1AAAA…", "source_seq": "9-g1AAAA…", "through_seq": "9-g1AAAA…", "lag_sec": 0,
    "checkpoint": "target"},
  "history": [{"timestamp": "2026-11-21T20:08:53Z", "type": "started"}, {"timestamp": "2026-11-21T20:08:53Z", "type": "added"}],
  "node": "couchdb@127.0.0.1", "start_time": "2026-11-21T20:08:53Z"}`},
		{"active task keeping its checkpoints on the target alone", func() json.RawMessage {
			r := *recs["u1|cont"]
			r.Stats.Checkpoint = "target"
			return activeTask(&r)
		}, `{
    "node": "couchdb@127.0.0.1", "pid": "<0.2978.0>", "process_status": "waiting",
    "bulk_get_attempts": 9, "bulk_get_docs": 8, "changes_pending": 0, "checkpoint": "target", "checkpoint_interval": 1000,
    "checkpointed_source_seq": "9-g1AAAA…", "continuous": true, "database": "_replicator", "doc_id": "cont",
    "doc_write_failures": 0, "docs_read": 10, "docs_written": 10, "lag_sec": 0, "missing_revisions_found": 10,
    "replication_id": "b9691fedaee4243ba089bca27b0feb4d+continuous", "revisions_checked": 10,
    "source": "http://127.0.0.1:25984/src/", "source_seq": "9-g1AAAA…", "started_on": 1795291733,
    "target": "http://127.0.0.1:25984/tgt2/", "through_seq": "9-g1AAAA…", "type": "replication",
    "updated_on": 1795291736, "user": null}`},
		{"sample 18 failed duplicate doc", func() json.RawMessage { return docJSON(recs["u1|dup"]) }, `{
  "database": "_replicator", "doc_id": "dup", "id": null,
  "source": "http://127.0.0.1:25984/src/", "target": "http://127.0.0.1:25984/tgt2/",
  "state": "failed", "error_count": 1,
  "info": {"error": "Replication ` + "`b9691fedaee4243ba089bca27b0feb4d+continuous`" + ` specified by document ` + "`dup`" + ` already started, triggered by document ` + "`cont`" + ` from db ` + "`_replicator`" + `"},
  "start_time": "2026-11-21T20:08:58Z", "last_updated": "2026-11-21T20:08:58Z"}`},
		{"failed after crashing: CouchDB reads it from the doc", func() json.RawMessage {
			r := *recs["u1|dup"]
			r.ErrorCount, r.StartTime = 3, ts(40) // crashed twice before it found its duplicate
			return docJSON(&r)
		}, `{
  "database": "_replicator", "doc_id": "dup", "id": null,
  "source": "http://127.0.0.1:25984/src/", "target": "http://127.0.0.1:25984/tgt2/",
  "state": "failed", "error_count": 1,
  "info": {"error": "Replication ` + "`b9691fedaee4243ba089bca27b0feb4d+continuous`" + ` specified by document ` + "`dup`" + ` already started, triggered by document ` + "`cont`" + ` from db ` + "`_replicator`" + `"},
  "start_time": "2026-11-21T20:08:58Z", "last_updated": "2026-11-21T20:08:58Z"}`},
		{"sample 19 crashing doc", func() json.RawMessage { return docJSON(recs["u1|crash"]) }, `{
  "database": "_replicator", "doc_id": "crash", "id": "ff6b656bcddc4f6b55c13e0dd168b83d",
  "node": "couchdb@127.0.0.1", "source": "http://127.0.0.1:25984/nosuchdb/", "target": "http://127.0.0.1:25984/tgt_extra/",
  "state": "crashing", "info": {"error": "db_not_found: could not open http://127.0.0.1:25984/nosuchdb/"},
  "error_count": 1, "last_updated": "2026-11-21T20:08:55Z", "start_time": "2026-11-21T20:08:53Z",
  "source_proxy": null, "target_proxy": null}`},
		{"sample 20 crashing job", func() json.RawMessage { return jobJSON(recs["u1|crash"]) }, `{
  "database": "_replicator", "id": "ff6b656bcddc4f6b55c13e0dd168b83d", "pid": null,
  "source": "http://127.0.0.1:25984/nosuchdb/", "target": "http://127.0.0.1:25984/tgt_extra/",
  "user": null, "doc_id": "crash", "info": null,
  "history": [
    {"timestamp": "2026-11-21T20:08:55Z", "type": "crashed", "reason": "db_not_found: could not open http://127.0.0.1:25984/nosuchdb/"},
    {"timestamp": "2026-11-21T20:08:53Z", "type": "started"},
    {"timestamp": "2026-11-21T20:08:53Z", "type": "added"}],
  "node": "couchdb@127.0.0.1", "start_time": "2026-11-21T20:08:53Z"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(tt.render())
			if want := compact(t, tt.want); got != want {
				t.Fatalf("got\n%s\nwant\n%s", got, want)
			}
			if strings.Contains(got, "pass") || strings.Contains(got, "secret-token") {
				t.Fatalf("credentials leaked: %s", got)
			}
		})
	}
}

// memSource is a test fixture: job records in a map.
type memSource map[string]*jobdata.Record

func (m memSource) FoldSummaries(_ context.Context, fn func(string, jobdata.Summary) error) error {
	for id, r := range m {
		if err := fn(id, r.Summary()); err != nil {
			return err
		}
	}
	return nil
}

func (m memSource) Get(_ context.Context, jobID string) (*jobdata.Record, error) {
	if r, ok := m[jobID]; ok {
		return r, nil
	}
	return nil, ErrNotFound
}

func (m memSource) GetMany(_ context.Context, ids []string) ([]*jobdata.Record, error) {
	out := make([]*jobdata.Record, len(ids))
	for i, id := range ids {
		out[i] = m[id]
	}
	return out, nil
}

func (m memSource) Lookup(_ context.Context, id string) (*jobdata.Record, error) {
	if r, ok := m[id]; ok {
		return r, nil
	}
	for _, r := range m {
		if r.RepID == id {
			return r, nil
		}
	}
	return nil, ErrNotFound
}

func (m memSource) Doc(_ context.Context, db, docID string) (*jobdata.Record, error) {
	for _, r := range m {
		if !r.Transient() && r.DBName == db && r.DocID == docID {
			return r, nil
		}
	}
	return nil, ErrNotFound
}

func TestHandler(t *testing.T) {
	src := memSource(sampleRecords())
	other := &jobdata.Record{Rep: rep("a", "b", false), DBName: "x/y/_replicator", DBUUID: "u2", DocID: "d/1", State: jobdata.Pending, StartTime: ts(1), LastUpdated: ts(1)}
	src["u2|d/1"] = other
	// _replicate jobs: one that completed, one that crashed (CouchDB 3.x removes those).
	src["t1"] = &jobdata.Record{Rep: rep("a", "c", false), RepID: "1111aaaa", State: jobdata.Completed, StartTime: ts(1), LastUpdated: ts(2)}
	src["t2"] = &jobdata.Record{Rep: rep("a", "d", true), RepID: "2222bbbb+continuous", State: jobdata.Failed, ErrorCount: 1, StartTime: ts(1), LastUpdated: ts(2)}
	h := New(src)
	tests := []struct {
		name       string
		path       string
		admin      bool
		wantStatus int
		wantSub    string // substring of the body
		wantNot    string
	}{
		{"not admin", "/_scheduler/jobs", false, 401, `{"error":"unauthorized","reason":"You are not a server admin."}`, ""},
		{"jobs list", "/_scheduler/jobs", true, 200, `"total_rows":3,"offset":0,"jobs":[{"database":"_replicator","id":"b9691fedaee4243ba089bca27b0feb4d+continuous"`, "oneshot"},
		{"jobs skip", "/_scheduler/jobs?skip=5", true, 200, `{"total_rows":3,"offset":3,"jobs":[]}`, ""},
		{"jobs limit", "/_scheduler/jobs?limit=1", true, 200, `"total_rows":3,"offset":0`, `ff6b656bcddc4f6b55c13e0dd168b83d`},
		{"jobs bad limit", "/_scheduler/jobs?limit=x", true, 400, `{"error":"query_parse_error","reason":"limit must be an integer"}`, ""},
		{"jobs negative skip", "/_scheduler/jobs?skip=-1", true, 400, `{"error":"query_parse_error","reason":"skip not in range of [0,infinity]"}`, ""},
		{"jobs states", "/_scheduler/jobs?states=CRASHING", true, 200, `"total_rows":1`, `"cont"`},
		{"jobs unknown state", "/_scheduler/jobs?states=running,bogus", true, 400, `{"error":"query_parse_error","reason":"States must be one or more of [initializing,error,running,pending,crashing,completed,failed]"}`, ""},
		{"docs unknown state", "/_scheduler/docs?states=bogus", true, 400, `{"error":"query_parse_error","reason":"States must be one or more of [initializing,error,running,pending,crashing,completed,failed]"}`, ""},
		{"docs empty states", "/_scheduler/docs?states=", true, 200, `"total_rows":5`, ""},
		{"docs states without a name", "/_scheduler/docs?states=,", true, 200, `"total_rows":5`, ""},
		{"job by rep id", "/_scheduler/jobs/b9691fedaee4243ba089bca27b0feb4d%2Bcontinuous", true, 200, `"doc_id":"cont"`, ""},
		{"finished job hidden", "/_scheduler/jobs/u1%7Coneshot", true, 404, `{"error":"not_found","reason":"missing"}`, ""},
		{"unknown job", "/_scheduler/jobs/nope", true, 404, `"reason":"missing"`, ""},
		{"completed _replicate job shown", "/_scheduler/jobs/1111aaaa", true, 200, `"id":"1111aaaa"`, ""},
		{"crashed _replicate job gone", "/_scheduler/jobs/2222bbbb%2Bcontinuous", true, 404, `{"error":"not_found","reason":"missing"}`, ""},
		{"docs all", "/_scheduler/docs", true, 200, `"total_rows":5`, ""},
		{"docs of db", "/_scheduler/docs/_replicator?states=completed,failed", true, 200, `"total_rows":2`, `"crash"`},
		{"docs of slashed db", "/_scheduler/docs/x/y/_replicator", true, 200, `"total_rows":1`, ""},
		{"docs of escaped db", "/_scheduler/docs/x%2Fy%2F_replicator", true, 200, `"total_rows":1`, ""},
		{"doc in slashed db", "/_scheduler/docs/x/y/_replicator/d%2F1", true, 200, `"doc_id":"d/1","id":null,"node":null`, ""},
		{"doc", "/_scheduler/docs/_replicator/oneshot", true, 200, `"state":"completed"`, ""},
		{"unknown doc", "/_scheduler/docs/_replicator/nope", true, 404, `"reason":"missing"`, ""},
		{"not a replicator db", "/_scheduler/docs/foo", true, 400, `{"error":"bad_request","reason":"Invalid path"}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			h.Serve(w, httptest.NewRequest(http.MethodGet, tt.path, nil), tt.admin)
			body := w.Body.String()
			if w.Code != tt.wantStatus || !strings.Contains(body, tt.wantSub) || (tt.wantNot != "" && strings.Contains(body, tt.wantNot)) {
				t.Fatalf("%s → %d %s\nwant %d containing %s", tt.path, w.Code, body, tt.wantStatus, tt.wantSub)
			}
			if strings.Contains(body, "pass") || strings.Contains(body, "secret-token") {
				t.Fatalf("credentials leaked: %s", body)
			}
		})
	}
	tasks, err := ActiveTasks(context.Background(), src)
	if err != nil || len(tasks) != 1 || !strings.Contains(string(tasks[0]), `"doc_id":"cont"`) {
		t.Fatalf("active tasks %s, %v", tasks, err)
	}
}

func TestSplitDocsPath(t *testing.T) {
	tests := []struct{ in, db, doc string }{
		{"", "", ""},
		{"_replicator", "_replicator", ""},
		{"_replicator/", "_replicator", ""},
		{"_replicator/doc", "_replicator", "doc"},
		{"a%2F_replicator/doc", "a/_replicator", "doc"},
		{"a/b/_replicator/_design%2Fx", "a/b/_replicator", "_design/x"},
	}
	for _, tt := range tests {
		db, doc, err := splitDocsPath(tt.in)
		if err != nil || db != tt.db || doc != tt.doc {
			t.Errorf("splitDocsPath(%q) = %q, %q, %v; want %q, %q", tt.in, db, doc, err, tt.db, tt.doc)
		}
	}
	if _, _, err := splitDocsPath("nodb/x"); err == nil {
		t.Errorf("non-replicator path accepted")
	}
}
