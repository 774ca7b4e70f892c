package couchapi

import "testing"

// TestDocRenderNoHTMLEscaping checks that documents rendered by the store
// (GET, _all_docs include_docs, _bulk_get, open_revs) carry <, > and & in
// ids, attachment names, content types and revs as CouchDB sends them.
func TestDocRenderNoHTMLEscaping(t *testing.T) {
	ts, _ := newTestServer(t)
	doc := `{"v":"<x>&","_attachments":{"a&b<c>.txt":{"content_type":"text/x-<y>","data":"aGk="}}}`
	runSteps(t, ts.URL, []step{
		{name: "db", method: "PUT", path: "/db", status: 201},
		{name: "doc", method: "PUT", path: "/db/%3Cd%3E%26", body: doc, status: 201},
		{name: "get", method: "GET", path: "/db/%3Cd%3E%26", status: 200,
			has: []string{`"_id":"<d>&"`, `"v":"<x>&"`, `"a&b<c>.txt":{"content_type":"text/x-<y>"`}},
		{name: "all_docs", method: "GET", path: "/db/_all_docs?include_docs=true", status: 200,
			has: []string{`"id":"<d>&","key":"<d>&"`, `"_id":"<d>&"`}},
		{name: "bulk_get", method: "POST", path: "/db/_bulk_get", body: `{"docs":[{"id":"<d>&"}]}`, status: 200,
			has: []string{`"id":"<d>&"`, `"_id":"<d>&"`}},
		{name: "replicated rev", method: "POST", path: "/db/_bulk_docs", body: `{"new_edits":false,"docs":[{"_id":"r","_revisions":{"start":2,"ids":["<b>","a&"]}}]}`, status: 201},
		{name: "revs", method: "GET", path: "/db/r?revs=true", status: 200,
			has: []string{`"_rev":"2-<b>"`, `"_revisions":{"start":2,"ids":["<b>","a&"]}`}},
	})
}

// TestBareRevNewEditsFalse is PouchDB's "7829 bare rev 1- with
// new_edits=false": CouchDB stores the revision "1-".
func TestBareRevNewEditsFalse(t *testing.T) {
	ts, _ := newTestServer(t)
	runSteps(t, ts.URL, []step{
		{name: "db", method: "PUT", path: "/db", status: 201},
		{name: "bulk", method: "POST", path: "/db/_bulk_docs", body: `{"new_edits":false,"docs":[{"_id":"foo","_rev":"1-","integer":1}]}`, status: 201, want: `[]`},
		{name: "get", method: "GET", path: "/db/foo", status: 200, want: `{"_id":"foo","_rev":"1-","integer":1}`},
	})
}
