package couchapi

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"testing"
)

// fuzzCall sends one request and checks the answer is CouchDB-shaped: no
// 5xx, and JSON for every JSON answer.
func fuzzCall(t testing.TB, method, u string, body []byte) {
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	if err != nil {
		return // not a valid URL: nothing to send
	}
	req.SetBasicAuth("admin", "pass")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 500 {
		t.Fatalf("%s %s: status %d: %s", method, u, resp.StatusCode, b)
	}
	if resp.Header.Get("Content-Type") == "application/json" && resp.StatusCode != 304 && !json.Valid(bytes.TrimSpace(b)) && len(b) > 0 {
		t.Fatalf("%s %s: invalid JSON answer %q", method, u, b)
	}
}

// FuzzDocWrite PUTs arbitrary bodies with arbitrary ids and query strings.
func FuzzDocWrite(f *testing.F) {
	f.Add("doc", "", []byte(`{"a":1}`))
	f.Add("doc", "new_edits=false", []byte(`{"_rev":"1-a","_revisions":{"start":1,"ids":["a"]}}`))
	f.Add("_design/x", "rev=1-abc", []byte(`{"views":{"v":{"map":"function(d){emit(1)}"}}}`))
	f.Add("_local/c", "", []byte(`{"_rev":"0-1"}`))
	f.Add("d%2Fx", "batch=ok", []byte(`{"_attachments":{"a":{"data":"!!"}}}`))
	f.Add("doc", "rev=", []byte(`{"_deleted":true}`))
	ts, _ := newTestServer(f)
	fuzzCall(f, "PUT", ts.URL+"/fz", nil)
	f.Fuzz(func(t *testing.T, id, query string, body []byte) {
		u := ts.URL + "/fz/" + url.PathEscape(id)
		if query != "" {
			u += "?" + query
		}
		fuzzCall(t, "PUT", u, body)
	})
}

// FuzzChangesQuery reads _changes and _all_docs with arbitrary query
// strings (feeds forced to return at once).
func FuzzChangesQuery(f *testing.F) {
	for _, q := range []string{"since=0", "since=now", "since=3-abc", "limit=0", "descending=true&limit=1",
		"style=all_docs&include_docs=true&conflicts=true", `filter=_doc_ids&doc_ids=["a"]`, "filter=_design", "seq_interval=2",
		`keys=["a","b"]`, `startkey="a"&endkey="b"&inclusive_end=false`, "skip=1&limit=1"} {
		f.Add(q)
	}
	ts, _ := newTestServer(f)
	fuzzCall(f, "PUT", ts.URL+"/fz", nil)
	fuzzCall(f, "POST", ts.URL+"/fz/_bulk_docs", []byte(`{"docs":[{"_id":"a"},{"_id":"b","_deleted":true},{"_id":"_design/d","filters":{"f":"function(d){return true}"}}]}`))
	f.Fuzz(func(t *testing.T, query string) {
		fuzzCall(t, "GET", ts.URL+"/fz/_changes?feed=normal&timeout=1&heartbeat=&"+query, nil)
		fuzzCall(t, "GET", ts.URL+"/fz/_all_docs?"+query, nil)
	})
}
