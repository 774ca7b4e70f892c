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
