package main

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/couchepi/couchepi/examples/minicouch/minicouchtest"
)

// TestReplicationAttachmentLimit is CouchDB's own
// couch_replicator_attachments_too_large over HTTP: a doc whose 1000-byte
// attachment the target's `[couchdb] max_attachment_size` refuses is
// counted in doc_write_failures and the replication goes on with the
// others; at a limit of 1000 it is copied. Source and target are on one
// server, as in CouchDB's test, so the limit is lowered after the source
// doc was written.
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
	att := func(n int) map[string]any {
		return map[string]any{"_attachments": map[string]any{"att": map[string]any{
			"content_type": "app/binary", "data": base64.StdEncoding.EncodeToString([]byte(strings.Repeat("x", n)))}}}
	}
	mustDo("PUT", "/src", nil, 201)
	mustDo("PUT", "/src/big", att(1000), 201)
	mustDo("PUT", "/src/small", att(10), 201)
	mustDo("PUT", "/src/plain", `{"a":1}`, 201)
	for _, tc := range []struct {
		limit, target string
		written       int
		failures      int
		big           int // status of GET target/big
	}{
		{"1000", "tgt_fits", 3, 0, 200},
		{"999", "tgt_refuses", 2, 1, 404},
	} {
		mustDo("PUT", "/_node/_local/_config/couchdb/max_attachment_size", `"`+tc.limit+`"`, 200)
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
			t.Fatalf("limit %s: %d %+v", tc.limit, st, res)
		}
		if h := res.History[0]; h.DocsRead != 3 || h.DocsWritten != tc.written || h.DocWriteFailures != tc.failures {
			t.Errorf("limit %s: %+v, want 3 read, %d written, %d failures", tc.limit, h, tc.written, tc.failures)
		}
		for id, want := range map[string]int{"big": tc.big, "small": 200, "plain": 200} {
			if st, b, _ := srv.Do("GET", "/"+tc.target+"/"+id, nil); st != want {
				t.Errorf("limit %s: target's %s: %d %s, want %d", tc.limit, id, st, b, want)
			}
		}
	}
}
