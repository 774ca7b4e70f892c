package replicate

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/minicouchtest"
	"github.com/couchepi/couchepi/parse"
)

// refusingTarget starts a minicouch of its own (stopped when t ends)
// whose `[couchdb] max_document_size` is 4096 bytes, with a db whose
// validate_doc_update refuses docs that have `"refuse": true`.
func refusingTarget(t *testing.T) (*testServer, string) {
	t.Helper()
	mc := minicouchtest.Start(t, minicouchtest.Options{Config: "[couchdb]\nmax_document_size = 4096\n"})
	s := &testServer{Kind: "minicouch", Base: mc.URL, User: mc.User, Pass: mc.Pass, mc: mc}
	db := s.newDB(t, "tgt")
	s.mustDo(t, "PUT", db+"/_design/guard", map[string]any{"validate_doc_update": `function(newDoc) {
		if (newDoc.refuse) throw({forbidden: 'refused by the test: ' + newDoc._id});
	}`})
	return s, db
}

// attachment is a small inline attachment: a doc with one is written
// with its own PUT, not in a _bulk_docs.
var attachment = map[string]any{"a.txt": map[string]any{"content_type": "text/plain", "data": base64.StdEncoding.EncodeToString([]byte("hello"))}}

// big is a field value that takes a doc past the target's max_document_size.
var big = strings.Repeat("x", 8000)

// sourceRevs returns the winning revision of each doc of db.
func sourceRevs(t *testing.T, s *testServer, db string) map[string]string {
	var all struct {
		Rows []struct {
			ID    string `json:"id"`
			Value struct {
				Rev string `json:"rev"`
			} `json:"value"`
		} `json:"rows"`
	}
	json.Unmarshal(s.mustDo(t, "GET", db+"/_all_docs", nil), &all)
	revs := map[string]string{}
	for _, r := range all.Rows {
		revs[r.ID] = r.Value.Rev
	}
	return revs
}

// TestWriteFailures (issue #31 item 2): docs a target refuses, whether
// its validate_doc_update or its max_document_size refuses them, in a
// _bulk_docs or in their own PUT (attachments), and a doc whose id is
// longer than max_document_id_length are counted in doc_write_failures
// and by kind, kept in the run's stats with their revision, status,
// error and reason, and counted in the run's Group; the others are written.
func TestWriteFailures(t *testing.T) {
	s := startServer(t)
	tgtS, tgt := refusingTarget(t)
	src := s.newDB(t, "src")
	addDocs(t, s, src, 0, 20)
	longID := "long-" + strings.Repeat("i", 120)
	s.mustDo(t, "PUT", src+"/"+url.PathEscape(longID), map[string]any{"n": 1})
	want := map[string]struct {
		status int
		error  string
		reason string
	}{
		"refuse-1":          {403, "forbidden", "refused by the test: refuse-1"},
		"refuse-2":          {403, "forbidden", "refused by the test: refuse-2"},
		"refuse-3":          {403, "forbidden", "refused by the test: refuse-3"},
		"refuse-att":        {403, "forbidden", "refused by the test: refuse-att"},
		"big-1":             {413, "document_too_large", "big-1"},
		"big-2":             {413, "document_too_large", "big-2"},
		"big-att":           {413, "document_too_large", "big-att"},
		longID[:64] + "...": {0, "id_too_long", "the document id is 125 bytes long, longer than max_document_id_length (100)"},
	}
	for id := range want {
		doc := map[string]any{}
		switch {
		case strings.HasPrefix(id, "refuse"):
			doc["refuse"] = true
		case strings.HasPrefix(id, "big"):
			doc["big"] = big
		default:
			continue
		}
		if strings.HasSuffix(id, "-att") {
			doc["_attachments"] = attachment
		}
		s.mustDo(t, "PUT", src+"/"+id, doc)
	}
	revs := sourceRevs(t, s, src)
	group := new(Group)

	rep := testRep(s, src, tgt)
	rep.Target = tgtS.endpoint(tgt)
	res := runRep(t, rep, Options{MaxDocumentIDLength: 100, Group: group})

	st := res.Stats
	if st.DocWriteFailures != 8 || st.DocsWritten != 20 {
		t.Errorf("doc_write_failures %d, docs_written %d; want 8 and 20", st.DocWriteFailures, st.DocsWritten)
	}
	wantKinds := map[string]int64{ReasonForbidden: 4, ReasonTooLarge: 3, ReasonIDTooLong: 1}
	if fmt.Sprint(st.DocWriteFailuresByReason) != fmt.Sprint(wantKinds) {
		t.Errorf("by reason %v, want %v", st.DocWriteFailuresByReason, wantKinds)
	}
	totals := group.Stats()
	for _, r := range WriteFailureReasons() {
		if got := totals.DocWriteFailuresByReason[r]; got != wantKinds[r] {
			t.Errorf("group's %s: %d, want %d", r, got, wantKinds[r])
		}
	}
	if len(st.FailedDocs) != len(want) {
		t.Fatalf("failed docs %+v, want %d", st.FailedDocs, len(want))
	}
	for i, f := range st.FailedDocs {
		w, ok := want[f.ID]
		if !ok || f.Status != w.status || f.Error != w.error || f.Reason != w.reason || f.Time < time.Now().Add(-time.Minute).Unix() {
			t.Errorf("failed doc %+v, want %+v", f, w)
		}
		wantRev := revs[f.ID]
		if f.ID == longID[:64]+"..." {
			wantRev = revs[longID]
		}
		if f.Rev == "" || f.Rev != wantRev {
			t.Errorf("failed doc %s: rev %q, the source's %q", f.ID, f.Rev, wantRev)
		}
		if i > 0 && f.Time > st.FailedDocs[i-1].Time {
			t.Errorf("failed docs not newest first: %+v", st.FailedDocs)
		}
		delete(want, f.ID)
	}
	got := tgtS.contents(t, tgt)
	for id := range revs {
		_, written := got[id]
		refused := strings.HasPrefix(id, "refuse") || strings.HasPrefix(id, "big") || id == longID
		if written == refused {
			t.Errorf("doc %.20s: on the target %v", id, written)
		}
	}
}

// TestDocWriteFailureFail: with doc_write_failure "fail" the first refused
// doc ends the run with doc_write_failed naming it, the checkpoint stays
// before it, and once the target accepts it the next run writes it: it
// is never passed over.
func TestDocWriteFailureFail(t *testing.T) {
	s := startServer(t)
	tests := []struct {
		name string
		doc  map[string]any
		id   string
		// reason is what the error says after the doc's name.
		reason string
		// lift makes the target accept the doc (or the run not skip it).
		lift func(t *testing.T, tgtS *testServer, tgt string, opts *Options)
	}{
		{"validate_doc_update, in a _bulk_docs", map[string]any{"refuse": true}, "refuse-1",
			"was refused by the target: 403 forbidden: refused by the test: refuse-1",
			func(t *testing.T, tgtS *testServer, tgt string, _ *Options) {
				var d struct {
					Rev string `json:"_rev"`
				}
				json.Unmarshal(tgtS.mustDo(t, "GET", tgt+"/_design/guard", nil), &d)
				tgtS.mustDo(t, "DELETE", tgt+"/_design/guard?rev="+d.Rev, nil)
			}},
		{"max_document_size, in its own PUT", map[string]any{"big": big, "_attachments": attachment}, "big-att",
			"was refused by the target: 413 document_too_large: big-att",
			func(t *testing.T, tgtS *testServer, _ string, _ *Options) {
				tgtS.mustDo(t, "PUT", "_node/_local/_config/couchdb/max_document_size", `"100000"`)
			}},
		{"max_document_id_length", map[string]any{"n": 1}, "long-" + strings.Repeat("i", 120),
			"was skipped: the document id is 125 bytes long, longer than max_document_id_length (100)",
			func(_ *testing.T, _ *testServer, _ string, opts *Options) { opts.MaxDocumentIDLength = 0 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tgtS, tgt := refusingTarget(t)
			src := s.newDB(t, "src")
			addDocs(t, s, src, 0, 12)
			s.mustDo(t, "PUT", src+"/"+url.PathEscape(tc.id), tc.doc)
			addDocs(t, s, src, 12, 15)
			rep := testRep(s, src, tgt)
			rep.Target = tgtS.endpoint(tgt)
			rep.WorkerProcesses, rep.WorkerBatchSize = 1, 4
			rep.DocWriteFailure = parse.DocWriteFailureFail
			opts := Options{MaxDocumentIDLength: 100, ServerUUID: "0123456789abcdef0123456789abcdef"}
			var last Stats
			opts.OnStats = func(st Stats) { last = st }

			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			_, err := Run(ctx, rep, opts)
			var e *Error
			shown := clip(tc.id)
			if len(tc.id) > 100 {
				shown = tc.id[:64] + "..."
			}
			if !errors.As(err, &e) || e.Kind != ErrDocWriteFailed || !strings.Contains(e.Reason, "document `"+shown+"`") ||
				!strings.Contains(e.Reason, tc.reason) || !strings.HasSuffix(e.Reason, "the replication's doc_write_failure is `fail`") {
				t.Fatalf("run ended with %v, want doc_write_failed naming %s: %s", err, shown, tc.reason)
			}
			if last.DocWriteFailures != 1 || len(last.FailedDocs) != 1 || last.FailedDocs[0].ID != shown {
				t.Errorf("final stats %+v", last)
			}
			if got := tgtS.contents(t, tgt); got[tc.id] != nil {
				t.Fatalf("the refused doc is on the target")
			}
			// The checkpoint is past the first batch and before the doc.
			id, err := ComputeRepID(ctx, rep, opts.ServerUUID, nil)
			if err != nil {
				t.Fatal(err)
			}
			var cp Checkpoint
			json.Unmarshal(tgtS.mustDo(t, "GET", tgt+"/_local/"+id.Base, nil), &cp)
			var after struct {
				Results []struct{ ID string } `json:"results"`
			}
			json.Unmarshal(s.mustDo(t, "GET", src+"/_changes?since="+url.QueryEscape(seqString(cp.SourceLastSeq)), nil), &after)
			var ids []string
			for _, r := range after.Results {
				ids = append(ids, r.ID)
			}
			// The batch that holds the doc is not written: the doc is at
			// most a batch after the checkpoint.
			if i := slices.Index(ids, tc.id); i < 0 || i >= rep.WorkerBatchSize {
				t.Fatalf("changes after the checkpoint %s: %v; want the refused doc in the first %d", cp.SourceLastSeq, ids, rep.WorkerBatchSize)
			}

			tc.lift(t, tgtS, tgt, &opts)
			res := runRep(t, rep, opts)
			got := tgtS.contents(t, tgt)
			for id := range sourceRevs(t, s, src) {
				if got[id] == nil {
					t.Errorf("after the target accepts it: %.20s not on the target", id)
				}
			}
			if res.Stats.DocWriteFailures != 1 {
				t.Errorf("second run: doc_write_failures %d, want the first run's 1", res.Stats.DocWriteFailures)
			}
		})
	}
}

// TestFailureLog: the run keeps the newest MaxFailedDocs refused docs,
// each revision once (a retried run refuses it again), counts every
// refusal, and logs the first, then at most one a minute with the count
// of those it did not log.
func TestFailureLog(t *testing.T) {
	var l failureLog
	t0 := time.Unix(1000, 0)
	steps := []struct {
		id, rev     string
		at          time.Duration
		log         bool
		unlogged    int
		wantNewest  string
		wantListLen int
	}{
		{"a", "1-a", 0, true, 0, "a", 1},
		{"b", "1-b", time.Second, false, 0, "b", 2},
		{"a", "1-a", 2 * time.Second, false, 0, "a", 2},
		{"a", "2-a", 3 * time.Second, false, 0, "a", 3},
		{"c", "1-c", time.Minute, true, 3, "c", 4},
	}
	for i, s := range steps {
		logIt, unlogged := l.add(FailedDoc{ID: s.id, Rev: s.rev}, ReasonForbidden, t0.Add(s.at))
		docs, counts := l.snapshot()
		if logIt != s.log || unlogged != s.unlogged || docs[0].ID != s.id || docs[0].Rev != s.rev || len(docs) != s.wantListLen || counts[ReasonForbidden] != int64(i+1) {
			t.Fatalf("step %d: log %v unlogged %d, list %+v, counts %v", i, logIt, unlogged, docs, counts)
		}
	}
	for i := 0; i < 2*MaxFailedDocs; i++ {
		l.add(FailedDoc{ID: fmt.Sprint("d", i)}, ReasonTooLarge, t0.Add(2*time.Minute))
	}
	docs, counts := l.snapshot()
	if len(docs) != MaxFailedDocs || docs[0].ID != fmt.Sprint("d", 2*MaxFailedDocs-1) || counts[ReasonTooLarge] != 2*MaxFailedDocs || counts[ReasonForbidden] != 5 {
		t.Fatalf("after %d more: %d docs, newest %s, counts %v", 2*MaxFailedDocs, len(docs), docs[0].ID, counts)
	}
	// A snapshot is a copy: the stats handed out do not move.
	docs[0].ID = "changed"
	counts[ReasonOther] = 9
	if d, c := l.snapshot(); d[0].ID == "changed" || c[ReasonOther] != 0 {
		t.Fatal("snapshot shares memory with the log")
	}
}

// TestWriteFailureReason: a refusal's kind is its error name's, else its
// status's, from a fixed set.
func TestWriteFailureReason(t *testing.T) {
	tests := []struct {
		status int
		err    string
		want   string
	}{
		{403, "forbidden", ReasonForbidden},
		{0, "forbidden", ReasonForbidden},
		{401, "unauthorized", ReasonUnauthorized},
		{413, "document_too_large", ReasonTooLarge},
		{413, "attachment_too_large", ReasonTooLarge},
		{413, "", ReasonTooLarge},
		{0, "too_large", ReasonTooLarge},
		{409, "conflict", ReasonConflict},
		{400, "bad_request", ReasonBadRequest},
		{0, "illegal_docid", ReasonBadRequest},
		{412, "missing_stub", ReasonMissingStub},
		{0, "id_too_long", ReasonIDTooLong},
		{403, "my_app_says_no", ReasonForbidden},
		{415, "unsupported_media_type", ReasonOther},
		{0, "boom", ReasonOther},
	}
	for _, tt := range tests {
		if got := writeFailureReason(tt.status, tt.err); got != tt.want {
			t.Errorf("%d %q: %q, want %q", tt.status, tt.err, got, tt.want)
		}
	}
}
