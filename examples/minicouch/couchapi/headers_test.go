package couchapi

import (
	"encoding/json"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

// TestHeadersAsCouchDB: cache and session headers where CouchDB 3.5 sends
// them, and conditional GETs on the answers that carry an ETag.
func TestHeadersAsCouchDB(t *testing.T) {
	ts, _ := newTestServer(t)
	runSteps(t, ts.URL, []step{
		{name: "db", method: "PUT", path: "/db", status: 201},
		{name: "doc", method: "PUT", path: "/db/a", body: `{}`, status: 201},
		{name: "uuids bust caches", method: "GET", path: "/_uuids", status: 200, header: map[string]string{
			"Cache-Control": "no-cache", "Pragma": "no-cache", "Expires": "Mon, 01 Jan 1990 00:00:00 GMT"}},
		{name: "JSON answers must revalidate", method: "GET", path: "/db", status: 200, header: map[string]string{"Cache-Control": "must-revalidate"}},
	})
	for _, path := range []string{"/_uuids", "/_all_dbs", "/db/_changes", "/db/a"} {
		resp, _ := step{method: "GET", path: path}.do(t, ts.URL)
		if resp.Header.Get("ETag") == "" {
			t.Errorf("GET %s has no ETag", path)
		}
	}
	for _, path := range []string{"/_all_dbs", "/db/_changes", "/db/a"} {
		resp, _ := step{method: "GET", path: path}.do(t, ts.URL)
		etag := resp.Header.Get("ETag")
		again, _ := step{method: "GET", path: path, headers: map[string]string{"If-None-Match": etag}}.do(t, ts.URL)
		if again.StatusCode != http.StatusNotModified {
			t.Errorf("GET %s If-None-Match %s: %d, want 304", path, etag, again.StatusCode)
		}
	}
	// A write changes the changes feed's ETag; another query has its own.
	resp, _ := step{method: "GET", path: "/db/_changes"}.do(t, ts.URL)
	before := resp.Header.Get("ETag")
	runSteps(t, ts.URL, []step{{name: "another doc", method: "PUT", path: "/db/b", body: `{}`, status: 201}})
	for _, path := range []string{"/db/_changes", "/db/_changes?limit=1"} {
		if r, _ := (step{method: "GET", path: path, headers: map[string]string{"If-None-Match": before}}).do(t, ts.URL); r.StatusCode != 200 {
			t.Errorf("GET %s with a stale ETag: %d", path, r.StatusCode)
		}
	}

	// Sessions: a persistent cookie with Expires and Max-Age of the
	// session timeout; a failed login clears the cookie, with the same
	// attributes (TestSessionAsCouchDB has the rest).
	login := func(password string) *http.Response {
		req, _ := http.NewRequest("POST", ts.URL+"/_session", strings.NewReader(`{"name":"admin","password":"`+password+`"}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	ok := regexp.MustCompile(`^AuthSession=[A-Za-z0-9_-]+; Version=1; Expires=\w{3}, \d{2}-\w{3}-\d{4} \d{2}:\d{2}:\d{2} GMT; Max-Age=600; Path=/; HttpOnly$`)
	if c := login("pass").Header.Get("Set-Cookie"); !ok.MatchString(c) {
		t.Errorf("login cookie %q", c)
	}
	cleared := regexp.MustCompile(`^AuthSession=; Version=1; Expires=\w{3}, \d{2}-\w{3}-\d{4} \d{2}:\d{2}:\d{2} GMT; Max-Age=600; Path=/; HttpOnly$`)
	if r := login("wrong"); r.StatusCode != 401 || !cleared.MatchString(r.Header.Get("Set-Cookie")) {
		t.Errorf("failed login: %d, cookie %q", r.StatusCode, r.Header.Get("Set-Cookie"))
	}
}

// TestSmallerDifferences: answers CouchDB 3.5 gives that minicouch did
// not.
func TestSmallerDifferences(t *testing.T) {
	ts, _ := newTestServer(t)
	runSteps(t, ts.URL, []step{
		{name: "up has seeds", method: "GET", path: "/_up", user: "-", status: 200, want: `{"status":"ok","seeds":{}}`},
		{name: "db", method: "PUT", path: "/db", status: 201},
		{name: "doc", method: "PUT", path: "/db/a", body: `{}`, status: 201},
		{name: "all_docs with keys has no offset", method: "POST", path: "/db/_all_docs", body: `{"keys":["a"]}`, status: 200, has: []string{`"total_rows":1,"offset":null`}},
		{name: "session names no authentication_db", method: "GET", path: "/_session", status: 200,
			want: `{"ok":true,"userCtx":{"name":"admin","roles":["_admin"]},"info":{"authentication_handlers":["cookie","default"],"authenticated":"default"}}`},
		{name: "versions", method: "GET", path: "/_node/_local/_versions", status: 200, has: []string{`"javascript_engine":{"name":"goja"`}},
		{name: "views not an object", method: "PUT", path: "/db/_design/a", body: `{"views":5}`, status: 400,
			want: "{\"error\":\"invalid_design_doc\",\"reason\":\"`views` field must have object type\"}"},
		{name: "view without map", method: "PUT", path: "/db/_design/a", body: `{"views":{"v":{"reduce":"_count"}}}`, status: 400,
			want: "{\"error\":\"invalid_design_doc\",\"reason\":\"View `v` must contain map function\"}"},
		{name: "map not a string", method: "PUT", path: "/db/_design/a", body: `{"views":{"v":{"map":5}}}`, status: 400,
			want: "{\"error\":\"invalid_design_doc\",\"reason\":\"`map` field must have string type\"}"},
		{name: "in _bulk_docs too", method: "POST", path: "/db/_bulk_docs", body: `{"docs":[{"_id":"_design/b","views":[]}]}`, status: 400, has: []string{`invalid_design_doc`}},
		{name: "a good one", method: "PUT", path: "/db/_design/a", body: `{"views":{"v":{"map":"function(d){emit(1)}","reduce":"_count"}},"language":"javascript"}`, status: 201},
		{name: "a Mango one", method: "PUT", path: "/db/_design/m", body: `{"language":"query","views":{"i":{"map":{"fields":{"a":"asc"}},"reduce":"_count"}}}`, status: 201},
	})
}

// TestDBUpdatesFeed: _db_updates lists each database's newest event, from
// since, in every feed style a client uses.
func TestDBUpdatesFeed(t *testing.T) {
	ts, _ := newTestServer(t)
	runSteps(t, ts.URL, []step{
		{name: "a", method: "PUT", path: "/a", status: 201},
		{name: "b", method: "PUT", path: "/b", status: 201},
		{name: "write a", method: "PUT", path: "/a/x", body: `{}`, status: 201},
		{name: "delete b", method: "DELETE", path: "/b", status: 200},
		{name: "admins only", method: "GET", path: "/_db_updates", user: "-", status: 401},
		{name: "bad feed", method: "GET", path: "/_db_updates?feed=nope", status: 400},
	})
	resp, body := step{method: "GET", path: "/_db_updates"}.do(t, ts.URL)
	var page struct {
		Results []struct {
			DBName string `json:"db_name"`
			Type   string `json:"type"`
			Seq    string `json:"seq"`
		} `json:"results"`
		LastSeq string `json:"last_seq"`
	}
	if err := json.Unmarshal(body, &page); err != nil || resp.StatusCode != 200 {
		t.Fatalf("normal feed: %d %s", resp.StatusCode, body)
	}
	var got []string
	for _, r := range page.Results {
		got = append(got, r.DBName+":"+r.Type)
	}
	// _users and _replicator were created first; then a's update and b's
	// deletion (updates are written in batches, so those two come in
	// either order).
	sort.Strings(got[2:])
	if want := "_users:created _replicator:created a:updated b:deleted"; strings.Join(got, " ") != want {
		t.Fatalf("feed %v, want %s", got, want)
	}
	if page.LastSeq != page.Results[len(page.Results)-1].Seq {
		t.Errorf("last_seq %s, last row %s", page.LastSeq, page.Results[len(page.Results)-1].Seq)
	}
	// since: only what came after.
	_, body = step{method: "GET", path: "/_db_updates?since=" + page.Results[1].Seq}.do(t, ts.URL)
	if !strings.Contains(string(body), `"db_name":"a"`) || strings.Contains(string(body), `"_users"`) {
		t.Errorf("since: %s", body)
	}
	// longpoll from now waits for the next event.
	done := make(chan string)
	go func() {
		_, b := step{method: "GET", path: "/_db_updates?feed=longpoll&since=now&timeout=10000"}.do(t, ts.URL)
		done <- string(b)
	}()
	time.Sleep(100 * time.Millisecond)
	runSteps(t, ts.URL, []step{{name: "c", method: "PUT", path: "/c", status: 201}})
	select {
	case b := <-done:
		if !strings.Contains(b, `"db_name":"c","type":"created"`) {
			t.Errorf("longpoll: %s", b)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("longpoll did not return on the event")
	}
	// continuous with a limit.
	_, body = step{method: "GET", path: "/_db_updates?feed=continuous&limit=2&timeout=1000"}.do(t, ts.URL)
	if lines := strings.Split(strings.TrimSpace(string(body)), "\n"); len(lines) != 3 || !strings.HasPrefix(lines[2], `{"last_seq":`) {
		t.Errorf("continuous: %q", body)
	}
}

// TestDocHeadersAsCouchDB: ETag, Location and Cache-Control of the doc,
// attachment, _local, design-doc and _changes answers, as a CouchDB 3.5.0
// single node sends them for the same requests. etag is "rev" for the
// written or read revision in quotes, "any" for an opaque one, "" for
// none; location is the path after the server's URL, "" for none.
func TestDocHeadersAsCouchDB(t *testing.T) {
	ts, _ := newTestServer(t)
	const rev1 = "1-23202479633c2b380f79507a776743d5" // of {"a":1}
	runSteps(t, ts.URL, []step{
		{name: "db", method: "PUT", path: "/db", status: 201},
		{name: "doc", method: "PUT", path: "/db/doc1", body: `{"a":1}`, status: 201},
		{name: "conflicts", method: "POST", path: "/db/_bulk_docs", body: `{"new_edits":false,"docs":[{"_id":"c","_rev":"1-aaa"},{"_id":"c","_rev":"1-bbb"},{"_id":"c","_rev":"2-ccc","_revisions":{"start":2,"ids":["ccc","aaa"]}},{"_id":"c","_rev":"2-ddd","_revisions":{"start":2,"ids":["ddd","aaa"]}}]}`, status: 201},
	})
	for _, tc := range []struct {
		name, method, path, body, ctype string
		headers                         map[string]string
		status                          int
		etag, location, cacheControl    string
	}{
		{name: "PUT doc", method: "PUT", path: "/db/doc2", body: `{"a":1}`, status: 201, etag: `"` + rev1 + `"`, location: "/db/doc2", cacheControl: "must-revalidate"},
		{name: "POST doc: no ETag", method: "POST", path: "/db", body: `{"_id":"doc3","a":1}`, status: 201, location: "/db/doc3", cacheControl: "must-revalidate"},
		{name: "POST design doc: slash encoded", method: "POST", path: "/db", body: `{"_id":"_design/d2"}`, status: 201, location: "/db/_design%2Fd2", cacheControl: "must-revalidate"},
		{name: "POST odd id: CouchDB's escapes", method: "POST", path: "/db", body: `{"_id":"sp ace+plus~t"}`, status: 201, location: "/db/sp%20ace%2Bplus%7Et", cacheControl: "must-revalidate"},
		{name: "PUT design doc: slash encoded", method: "PUT", path: "/db/_design/d1", body: `{"a":1}`, status: 201, etag: "any", location: "/db/_design%2Fd1", cacheControl: "must-revalidate"},
		{name: "COPY to a design doc", method: "COPY", path: "/db/doc1", headers: map[string]string{"Destination": "_design/d5"}, status: 201, etag: `"` + rev1 + `"`, location: "/db/_design%2Fd5", cacheControl: "must-revalidate"},
		{name: "GET doc", method: "GET", path: "/db/doc1", status: 200, etag: `"` + rev1 + `"`, cacheControl: "must-revalidate"},
		{name: "GET doc revs", method: "GET", path: "/db/doc1?revs=true", status: 200, etag: `"` + rev1 + `"`, cacheControl: "must-revalidate"},
		{name: "GET doc revs_info: no ETag", method: "GET", path: "/db/doc1?revs_info=true", status: 200, cacheControl: "must-revalidate"},
		{name: "GET doc local_seq: no ETag", method: "GET", path: "/db/doc1?local_seq=true", status: 200, cacheControl: "must-revalidate"},
		{name: "GET doc meta: no ETag", method: "GET", path: "/db/doc1?meta=true", status: 200, cacheControl: "must-revalidate"},
		{name: "GET doc conflicts, none", method: "GET", path: "/db/doc1?conflicts=true", status: 200, etag: `"` + rev1 + `"`, cacheControl: "must-revalidate"},
		{name: "GET doc conflicts, some: no ETag", method: "GET", path: "/db/c?conflicts=true", status: 200, cacheControl: "must-revalidate"},
		{name: "GET doc revs_info at a rev", method: "GET", path: "/db/doc1?revs_info=true&rev=" + rev1, status: 200, etag: `"` + rev1 + `"`, cacheControl: "must-revalidate"},
		{name: "revs_info ignores If-None-Match", method: "GET", path: "/db/doc1?revs_info=true", headers: map[string]string{"If-None-Match": `"` + rev1 + `"`}, status: 200, cacheControl: "must-revalidate"},
		{name: "open_revs: no ETag", method: "GET", path: "/db/doc1?open_revs=all", headers: map[string]string{"Accept": "application/json"}, status: 200, cacheControl: "must-revalidate"},
		{name: "open_revs multipart: no Cache-Control", method: "GET", path: "/db/doc1?open_revs=all", headers: map[string]string{"Accept": "multipart/mixed"}, status: 200},
		{name: "_bulk_get multipart: no Cache-Control", method: "POST", path: "/db/_bulk_get", body: `{"docs":[{"id":"doc1"}]}`, headers: map[string]string{"Accept": "multipart/mixed"}, status: 200},
		{name: "PUT attachment: no ETag", method: "PUT", path: "/db/doc1/a%2Fb.txt?rev=" + rev1, body: "hello", ctype: "text/plain", status: 201, location: "/db/doc1/a%2Fb.txt", cacheControl: "must-revalidate"},
		{name: "PUT design attachment", method: "PUT", path: "/db/_design/d2/att?rev=1-967a00dff5e02add41819138abb3284d", body: "x", ctype: "text/plain", status: 201, location: "/db/_design%2Fd2/att", cacheControl: "must-revalidate"},
		{name: "GET attachment: its digest", method: "GET", path: "/db/doc1/a%2Fb.txt", status: 200, etag: `"iMaiC8wqiFlD2NjLTemvCQ=="`, cacheControl: "must-revalidate"},
		{name: "GET doc with data as multipart: no Cache-Control", method: "GET", path: "/db/doc1?attachments=true", headers: map[string]string{"Accept": "multipart/related"}, status: 200, etag: "any"},
		{name: "DELETE attachment: no ETag", method: "DELETE", path: "/db/doc1/a%2Fb.txt?rev=2-f399abcc152df71f218ba4ebc4ddae58", status: 200, cacheControl: "must-revalidate"},
		{name: "DELETE doc: no Location", method: "DELETE", path: "/db/doc2?rev=" + rev1, status: 200, etag: "any", cacheControl: "must-revalidate"},
		{name: "PUT _local", method: "PUT", path: "/db/_local/l1", body: `{"x":1}`, status: 201, etag: "any", location: "/db/_local%2Fl1", cacheControl: "must-revalidate"},
		{name: "DELETE _local: no Location", method: "DELETE", path: "/db/_local/l1", status: 200, etag: "any", cacheControl: "must-revalidate"},
		{name: "changes", method: "GET", path: "/db/_changes", status: 200, etag: "any", cacheControl: "must-revalidate"},
		{name: "changes HEAD", method: "HEAD", path: "/db/_changes", status: 200, etag: "any", cacheControl: "must-revalidate"},
		{name: "changes POST doc_ids", method: "POST", path: "/db/_changes?filter=_doc_ids", body: `{"doc_ids":["doc1"]}`, status: 200, etag: "any", cacheControl: "must-revalidate"},
		{name: "changes POST selector", method: "POST", path: "/db/_changes?filter=_selector", body: `{"selector":{"a":1}}`, status: 200, etag: "any", cacheControl: "must-revalidate"},
		{name: "changes longpoll: no ETag", method: "GET", path: "/db/_changes?feed=longpoll&since=now&timeout=10", status: 200, cacheControl: "must-revalidate"},
		{name: "changes continuous: no ETag", method: "GET", path: "/db/_changes?feed=continuous&timeout=10", status: 200, cacheControl: "must-revalidate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := step{method: tc.method, path: tc.path, body: tc.body, ctype: tc.ctype, headers: tc.headers}.do(t, ts.URL)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, b)
			}
			switch etag := resp.Header.Get("ETag"); {
			case tc.etag == "any" && etag == "", tc.etag != "any" && etag != tc.etag:
				t.Errorf("ETag %q, want %q", etag, tc.etag)
			}
			want := ""
			if tc.location != "" {
				want = ts.URL + tc.location
			}
			if loc := resp.Header.Get("Location"); loc != want {
				t.Errorf("Location %q, want %q", loc, want)
			}
			if cc := resp.Header.Get("Cache-Control"); cc != tc.cacheControl {
				t.Errorf("Cache-Control %q, want %q", cc, tc.cacheControl)
			}
		})
	}
	// A _local doc's ETag follows its body, which may change under the
	// same rev (a PUT without _rev keeps 0-1), so If-None-Match never
	// answers 304 for a body the client has not seen.
	runSteps(t, ts.URL, []step{{name: "local", method: "PUT", path: "/db/_local/l2", body: `{"v":1}`, status: 201}})
	resp, _ := step{method: "GET", path: "/db/_local/l2"}.do(t, ts.URL)
	first := resp.Header.Get("ETag")
	runSteps(t, ts.URL, []step{{name: "local again", method: "PUT", path: "/db/_local/l2", body: `{"v":2}`, status: 201, has: []string{`"rev":"0-1"`}}})
	if resp, _ = (step{method: "GET", path: "/db/_local/l2", headers: map[string]string{"If-None-Match": first}}).do(t, ts.URL); resp.StatusCode != 200 {
		t.Errorf("a changed _local doc answered %d to its old ETag %s", resp.StatusCode, first)
	}
	// The POST feed's ETag answers 304 as the GET one does, for the same body only.
	resp, _ = step{method: "POST", path: "/db/_changes?filter=_doc_ids", body: `{"doc_ids":["doc1"]}`}.do(t, ts.URL)
	etag := resp.Header.Get("ETag")
	for body, status := range map[string]int{`{"doc_ids":["doc1"]}`: 304, `{"doc_ids":["c"]}`: 200} {
		if r, _ := (step{method: "POST", path: "/db/_changes?filter=_doc_ids", body: body, headers: map[string]string{"If-None-Match": etag}}).do(t, ts.URL); r.StatusCode != status {
			t.Errorf("POST _changes %s with If-None-Match: %d, want %d", body, r.StatusCode, status)
		}
	}
}
