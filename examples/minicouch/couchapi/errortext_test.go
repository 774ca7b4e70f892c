package couchapi

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// goWords are fragments of Go's own error texts that must never reach a
// client: CouchDB's clients get CouchDB's sentences.
var goWords = []string{"json: ", "Go value", "Go struct", "interface {}", "unmarshal", "map[string]", "[]string", "strconv."}

// jsonEndpoints take a JSON request body.
var jsonEndpoints = []struct{ method, path string }{
	{"POST", "/db"},
	{"PUT", "/db/doc"},
	{"POST", "/db/_bulk_docs"},
	{"POST", "/db/_bulk_get"},
	{"POST", "/db/_all_docs"},
	{"POST", "/db/_design_docs"},
	{"POST", "/db/_revs_diff"},
	{"POST", "/db/_missing_revs"},
	{"POST", "/db/_changes?filter=_doc_ids"},
	{"POST", "/db/_changes?filter=_selector"},
	{"POST", "/db/_find"},
	{"POST", "/db/_explain"},
	{"POST", "/db/_index"},
	{"PUT", "/db/_security"},
	{"PUT", "/db/_revs_limit"},
	{"POST", "/db/_purge"},
	{"POST", "/db/_design/v/_view/by_n"},
	{"POST", "/_dbs_info"},
	{"POST", "/_session"},
	{"PUT", "/_node/_local/_config/section/key"},
	{"PUT", "/_users/org.couchdb.user:zed"},
}

// wrongValues are values of every JSON type, to put where another is due.
var wrongValues = []string{`-1.5`, `"s"`, `[]`, `{}`, `true`, `null`, `[1]`}

// memberNames are the members the endpoints above read.
var memberNames = []string{"docs", "keys", "doc_ids", "selector", "new_edits", "fields", "sort", "limit", "skip", "id", "rev",
	"revs", "atts_since", "name", "password", "members", "admins", "index", "ddoc", "type", "use_index", "bookmark",
	"_id", "_rev", "_deleted", "_attachments", "_revisions", "roles", "include_docs", "descending", "startkey", "endkey", "queries"}

// TestNoGoErrorTexts sends every endpoint that reads JSON bodies of every
// wrong shape and fails if Go's words reach the answer.
func TestNoGoErrorTexts(t *testing.T) {
	ts, _ := newTestServer(t)
	runSteps(t, ts.URL, []step{
		{name: "db", method: "PUT", path: "/db", status: 201},
		{name: "view", method: "PUT", path: "/db/_design/v", body: `{"views":{"by_n":{"map":"function(d){emit(d.n,1)}"}}}`, status: 201},
	})
	var bodies, inDocs []string // inDocs: the same inside a docs list
	bodies = append(bodies, wrongValues...)
	for _, m := range memberNames {
		for _, v := range wrongValues {
			bodies = append(bodies, `{"`+m+`":`+v+`}`)
			inDocs = append(inDocs, `{"docs":[{"`+m+`":`+v+`}]}`)
		}
	}
	for _, ep := range jsonEndpoints {
		for _, body := range bodies {
			checkNoGoWords(t, ts.URL, ep.method, ep.path, body)
		}
		if strings.Contains(ep.path, "_bulk_") || strings.Contains(ep.path, "_purge") {
			for _, body := range inDocs {
				checkNoGoWords(t, ts.URL, ep.method, ep.path, body)
			}
		}
	}
}

// FuzzNoGoErrorTexts: whatever the body, no endpoint answers in Go's words.
func FuzzNoGoErrorTexts(f *testing.F) {
	for i := range jsonEndpoints {
		f.Add(uint8(i), `{"docs":[{"_id":1}]}`)
		f.Add(uint8(i), `{"keys":"x","selector":[]}`)
	}
	ts, _ := newTestServer(f)
	req, _ := http.NewRequest("PUT", ts.URL+"/db", nil)
	req.SetBasicAuth("admin", "pass")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	f.Fuzz(func(t *testing.T, i uint8, body string) {
		ep := jsonEndpoints[int(i)%len(jsonEndpoints)]
		checkNoGoWords(t, ts.URL, ep.method, ep.path, body)
	})
}

func checkNoGoWords(t *testing.T, base, method, path, body string) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth("admin", "pass")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, w := range goWords {
		if strings.Contains(string(b), w) {
			t.Errorf("%s %s %s: %d %s (has %q)", method, path, body, resp.StatusCode, b, w)
			return
		}
	}
}

// TestErrorsInCouchDBWords: the answers CouchDB 3.5 gives to these bodies.
func TestErrorsInCouchDBWords(t *testing.T) {
	ts, _ := newTestServer(t)
	runSteps(t, ts.URL, []step{
		{name: "db", method: "PUT", path: "/db", status: 201},
		{name: "revs_diff not an object", method: "POST", path: "/db/_revs_diff", body: `[1]`, status: 400,
			want: `{"error":"bad_request","reason":"Request body must be a JSON object"}`},
		{name: "doc_ids not a list", method: "POST", path: "/db/_changes?filter=_doc_ids", body: `{"doc_ids":"x"}`, status: 400,
			want: "{\"error\":\"bad_request\",\"reason\":\"`doc_ids` filter parameter is not a list of doc ids.\"}"},
		{name: "selector not an object", method: "POST", path: "/db/_find", body: `{"selector":5}`, status: 400,
			want: `{"error":"bad_request","reason":"Selector error: expected a JSON object"}`},
		{name: "unknown operator", method: "POST", path: "/db/_find", body: `{"selector":{"a":{"$bad":1}}}`, status: 400,
			want: `{"error":"invalid_operator","reason":"Invalid operator: $bad"}`},
		{name: "new_edits false without rev", method: "POST", path: "/db/_bulk_docs", body: `{"docs":[{"_id":"a"}],"new_edits":false}`, status: 400,
			want: "{\"error\":\"bad_request\",\"reason\":\"When `new_edits: false`, the document needs `_rev` or `_revisions` specified\"}"},
		{name: "new_edits false without rev or id", method: "POST", path: "/db/_bulk_docs", body: `{"docs":[{"a":1}],"new_edits":false}`, status: 400,
			want: "{\"error\":\"bad_request\",\"reason\":\"When `new_edits: false`, the document needs `_rev` or `_revisions` specified\"}"},
		{name: "PUT new_edits=false without rev", method: "PUT", path: "/db/b?new_edits=false", body: `{"a":1}`, status: 400,
			want: "{\"error\":\"bad_request\",\"reason\":\"When `new_edits: false`, the document needs `_rev` or `_revisions` specified\"}"},
		{name: "batch PUT new_edits=false without rev", method: "PUT", path: "/db/c?new_edits=false&batch=ok", body: `{"a":1}`, status: 400,
			want: "{\"error\":\"bad_request\",\"reason\":\"When `new_edits: false`, the document needs `_rev` or `_revisions` specified\"}"},
		{name: "POST _changes _selector without selector", method: "POST", path: "/db/_changes?filter=_selector", body: `{}`, status: 400,
			want: `{"error":"bad_request","reason":"Selector error: expected a JSON object"}`},
		{name: "POST _changes _selector not an object", method: "POST", path: "/db/_changes?filter=_selector", body: `{"selector":[1]}`, status: 400,
			want: `{"error":"bad_request","reason":"Selector error: expected a JSON object"}`},
		{name: "GET _changes _selector", method: "GET", path: "/db/_changes?filter=_selector", status: 400,
			want: `{"error":"bad_request","reason":"Selector must be specified in POST payload"}`},
		{name: "bulk_get without id", method: "POST", path: "/db/_bulk_get", body: `{"docs":[{"rev":"1-a"}]}`, status: 200,
			want: `{"results":[{"id":null,"docs":[{"error":{"rev":null,"reason":"document id missed","id":null,"error":"bad_request"}}]}]}`},
		{name: "keys not a list", method: "POST", path: "/db/_all_docs", body: `{"keys":"a"}`, status: 400,
			want: "{\"error\":\"bad_request\",\"reason\":\"`keys` member must be an array.\"}"},
	})
}

// TestExplain: the plan is CouchDB's shape for the _all_docs scan, the one
// minicouch's _find follows.
func TestExplain(t *testing.T) {
	ts, _ := newTestServer(t)
	runSteps(t, ts.URL, []step{
		{name: "db", method: "PUT", path: "/db", status: 201},
		{name: "explain", method: "POST", path: "/db/_explain", body: `{"selector":{"_id":{"$gt":null}}}`, status: 200,
			want: `{"dbname":"db","index":{"ddoc":null,"name":"_all_docs","type":"special","def":{"fields":[{"_id":"asc"}]}},"partitioned":false,` +
				`"selector":{"_id":{"$gt":null}},"opts":{"use_index":[],"bookmark":"nil","limit":25,"skip":0,"sort":{},"fields":"all_fields",` +
				`"partition":"","r":[49],"conflicts":false,"stale":false,"update":true,"stable":false,"execution_stats":false},` +
				`"limit":25,"skip":0,"fields":"all_fields","range":null}`},
		{name: "with options", method: "POST", path: "/db/_explain", body: `{"selector":{"a":1},"fields":["a"],"sort":["_id"],"limit":3,"skip":1}`, status: 200,
			has: []string{`"fields":["a"]`, `"sort":{"_id":"asc"}`, `"limit":3`, `"skip":1`}},
		{name: "a sort no index serves", method: "POST", path: "/db/_explain", body: `{"selector":{"a":1},"sort":["a"]}`, status: 400, has: []string{`no_usable_index`}},
		{name: "no selector", method: "POST", path: "/db/_explain", body: `{}`, status: 400, has: []string{"missing_required_key"}},
		{name: "GET", method: "GET", path: "/db/_explain", status: 405},
	})
}
