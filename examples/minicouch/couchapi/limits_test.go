package couchapi

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"github.com/couchepi/couchepi/examples/minicouch/couchgzip"
)

// nest is n levels of nested arrays.
func nest(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

// TestDocLimitsEveryPath: each bound a direct write enforces
// (max_document_size, max_attachment_size, max_document_id_length, and
// minicouch's own nesting bound, maxDocDepth) holds
// on every write path, with new_edits=false (a replicator's writes) as
// without, with CouchDB 3.5's answers: one CouchDB-shaped error for the
// request, _bulk_docs included (couch_doc:from_json_obj_validate throws
// for the first doc over a bound, before any is written), and a doc at
// the bound is written. A gzip-encoded attachment, as a replicator sends
// a compressible one, is counted by the larger of its encoded and decoded
// lengths: what a direct PUT refuses, a replication cannot write either.
func TestDocLimitsEveryPath(t *testing.T) {
	ts, srv := newTestServer(t)
	xs := strings.Repeat("x", 1000)
	gz, _ := couchgzip.Gzip([]byte(xs), 8)
	type doc struct {
		id, body string
		att      string // data of attachment "a" when set
		gzip     bool   // att is gzip data sent encoded (multipart only)
	}
	tooLarge := func(e, r string) string { return fmt.Sprintf(`{"error":%q,"reason":%q}`, e, r) }
	cases := []struct {
		name, key, value string
		doc              doc
		multipartOnly    bool
		status           int    // of a refusal; 0: written
		want             string // the refusal
	}{
		{"doc over max_document_size", "max_document_size", "50", doc{id: "d", body: `"x":"` + strings.Repeat("a", 60) + `"`}, false,
			413, tooLarge("document_too_large", "d")},
		{"doc within max_document_size", "max_document_size", "50", doc{id: "d", body: `"x":"a"`}, false, 0, ""},
		{"attachment over max_attachment_size", "max_attachment_size", "999", doc{id: "d", att: xs}, false,
			413, tooLarge("attachment_too_large", "a")},
		{"attachment at max_attachment_size", "max_attachment_size", "1000", doc{id: "d", att: xs}, false, 0, ""},
		{"gzip attachment over, by its encoded bytes", "max_attachment_size", fmt.Sprint(len(gz) - 1), doc{id: "d", att: string(gz), gzip: true}, true,
			413, tooLarge("attachment_too_large", "a")},
		{"gzip attachment over, by its decoded bytes", "max_attachment_size", "999", doc{id: "d", att: string(gz), gzip: true}, true,
			413, tooLarge("attachment_too_large", "a")},
		{"gzip attachment at, by its decoded bytes", "max_attachment_size", "1000", doc{id: "d", att: string(gz), gzip: true}, true, 0, ""},
		{"id over max_document_id_length", "max_document_id_length", "8", doc{id: "abcdefghi"}, false,
			400, tooLarge("illegal_docid", "Document id is too long")},
		{"id at max_document_id_length", "max_document_id_length", "8", doc{id: "abcdefgh"}, false, 0, ""},
		{"doc nested deeper than maxDocDepth", "", "", doc{id: "d", body: `"a":` + nest(maxDocDepth)}, false,
			400, fmt.Sprintf(`{"error":"bad_request","reason":%q}`, errDocTooDeep.Reason)},
		{"doc nested maxDocDepth deep", "", "", doc{id: "d", body: `"a":` + nest(maxDocDepth-1)}, false, 0, ""},
	}
	const rev = "1-0123456789abcdef0123456789abcdef"
	render := func(d doc, newEdits, follows bool) string {
		var b strings.Builder
		fmt.Fprintf(&b, `{"_id":%q`, d.id)
		if !newEdits {
			fmt.Fprintf(&b, `,"_rev":%q`, rev)
		}
		if d.body != "" {
			b.WriteString("," + d.body)
		}
		switch {
		case d.att == "":
		case d.gzip:
			fmt.Fprintf(&b, `,"_attachments":{"a":{"content_type":"text/plain","follows":true,"length":%d,"encoding":"gzip","encoded_length":%d}}`, len(xs), len(d.att))
		case follows:
			fmt.Fprintf(&b, `,"_attachments":{"a":{"content_type":"text/plain","follows":true,"length":%d}}`, len(d.att))
		default:
			fmt.Fprintf(&b, `,"_attachments":{"a":{"content_type":"text/plain","data":%q}}`, base64.StdEncoding.EncodeToString([]byte(d.att)))
		}
		return b.String() + "}"
	}
	n := 0
	for _, tc := range cases {
		for _, path := range []string{"PUT", "multipart PUT", "_bulk_docs"} {
			if tc.multipartOnly && path != "multipart PUT" {
				continue
			}
			for _, newEdits := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/%s/new_edits=%v", tc.name, path, newEdits), func(t *testing.T) {
					n++
					db := fmt.Sprintf("/db%d", n)
					if tc.key != "" {
						srv.cfg.Set("couchdb", tc.key, tc.value)
						defer srv.cfg.Delete("couchdb", tc.key)
					}
					runSteps(t, ts.URL, []step{{name: "db", method: "PUT", path: db, status: 201}})
					q := ""
					if !newEdits {
						q = "?new_edits=false"
					}
					var st int
					var body string
					switch path {
					case "PUT":
						resp, b := step{method: "PUT", path: db + "/" + tc.doc.id + q, body: render(tc.doc, newEdits, false)}.do(t, ts.URL)
						st, body = resp.StatusCode, string(b)
					case "multipart PUT":
						parts := map[string]string{}
						var order []string
						if tc.doc.att != "" {
							parts["a"], order = tc.doc.att, []string{"a"}
						}
						st, body = putMultipart(t, ts.URL, db+"/"+tc.doc.id+q, render(tc.doc, newEdits, true), parts, order)
					case "_bulk_docs":
						other := `{"_id":"ok"}`
						if !newEdits {
							other = `{"_id":"ok","_rev":"` + rev + `"}`
						}
						resp, b := step{method: "POST", path: db + "/_bulk_docs",
							body: fmt.Sprintf(`{"new_edits":%v,"docs":[%s,%s]}`, newEdits, other, render(tc.doc, newEdits, false))}.do(t, ts.URL)
						st, body = resp.StatusCode, string(b)
					}
					if tc.status == 0 {
						if st != 201 || strings.Contains(body, `"error"`) {
							t.Fatalf("%d %s, want it written", st, body)
						}
						runSteps(t, ts.URL, []step{{name: "written", method: "GET", path: db + "/" + tc.doc.id, status: 200}})
						return
					}
					if st != tc.status || !jsonEqual([]byte(body), []byte(tc.want)) {
						t.Fatalf("%d %s, want %d %s", st, body, tc.status, tc.want)
					}
					// Nothing of the request is written.
					runSteps(t, ts.URL, []step{
						{name: "refused doc absent", method: "GET", path: db + "/" + tc.doc.id, status: 404},
						{name: "other doc absent", method: "GET", path: db + "/ok", status: 404},
					})
				})
			}
		}
	}
}
