package main

import (
	"encoding/base64"
	"slices"
	"strings"
	"testing"

	"github.com/couchepi/couchepi/examples/minicouch/minicouchtest"
)

// TestReplicationAttachmentLimit is CouchDB's own
// couch_replicator_attachments_too_large over HTTP, with the other
// limits of a target: a doc whose 1000-byte attachment the target's
// `[couchdb] max_attachment_size` refuses, or whose body its
// `max_document_size` refuses, is counted in doc_write_failures and the
// replication goes on with the others; at the limit it is copied. A
// compressible attachment travels gzipped and is refused by its decoded
// length as a direct PUT of it is (CouchDB 3.5 counts only its encoded
// bytes, so a CouchDB target would take it). Source and target are on one server, as
// in CouchDB's test, so the limits are set after the source docs were
// written.
func TestReplicationAttachmentLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the replicator plugin")
	}
	srv := minicouchtest.Start(t, minicouchtest.Options{
		Plugins: []string{minicouchtest.Replicator(t, "")},
		Config:  "[chttpd_auth]\niterations = 1000\n",
	})
	mustDo := func(method, path string, body any, want int) {
		t.Helper()
		if st, b, err := srv.Do(method, path, body); err != nil || st != want {
			t.Fatalf("%s %s: %d %s %v (want %d)", method, path, st, b, err, want)
		}
	}
	att := func(ctype string, n int) map[string]any {
		return map[string]any{"_attachments": map[string]any{"att": map[string]any{
			"content_type": ctype, "data": base64.StdEncoding.EncodeToString([]byte(strings.Repeat("x", n)))}}}
	}
	mustDo("PUT", "/src", nil, 201)
	mustDo("PUT", "/src/big", att("app/binary", 1000), 201)
	mustDo("PUT", "/src/small", att("app/binary", 10), 201)
	mustDo("PUT", "/src/text", att("text/plain", 1000), 201) // stored gzipped: ~30 bytes
	mustDo("PUT", "/src/plain", `{"a":1}`, 201)
	mustDo("PUT", "/src/bigdoc", map[string]any{"a": strings.Repeat("y", 2000)}, 201)
	const docs = 5
	for _, tc := range []struct {
		maxAtt, maxDoc, target string
		refused                []string // the docs the target refuses
	}{
		{"1000", "8000000", "tgt_fits", nil},
		{"999", "8000000", "tgt_refuses_att", []string{"big", "text"}},
		{"1000", "1500", "tgt_refuses_doc", []string{"bigdoc"}},
	} {
		mustDo("PUT", "/_node/_local/_config/couchdb/max_attachment_size", `"`+tc.maxAtt+`"`, 200)
		mustDo("PUT", "/_node/_local/_config/couchdb/max_document_size", `"`+tc.maxDoc+`"`, 200)
		var res struct {
			OK      bool `json:"ok"`
			History []struct {
				DocsRead         int `json:"docs_read"`
				DocsWritten      int `json:"docs_written"`
				DocWriteFailures int `json:"doc_write_failures"`
			} `json:"history"`
		}
		if st := srv.JSON(t, "POST", "/_replicate", map[string]any{
			"source": srv.AdminURL + "src", "target": srv.AdminURL + tc.target, "create_target": true,
		}, &res); st != 200 || !res.OK || len(res.History) == 0 {
			t.Fatalf("%s: %d %+v", tc.target, st, res)
		}
		failures := len(tc.refused)
		if h := res.History[0]; h.DocsRead != docs || h.DocsWritten != docs-failures || h.DocWriteFailures != failures {
			t.Errorf("%s: %+v, want %d read, %d written, %d failures", tc.target, h, docs, docs-failures, failures)
		}
		for _, id := range []string{"big", "small", "text", "plain", "bigdoc"} {
			want := 200
			if slices.Contains(tc.refused, id) {
				want = 404
			}
			if st, b, _ := srv.Do("GET", "/"+tc.target+"/"+id, nil); st != want {
				t.Errorf("%s: target's %s: %d %s, want %d", tc.target, id, st, b, want)
			}
		}
	}
}
