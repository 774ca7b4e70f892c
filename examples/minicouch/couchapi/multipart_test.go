package couchapi

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// putMultipart writes doc id with attachments sent as multipart/related
// parts, as the CouchDB replicator does.
func putMultipart(t *testing.T, base, path, doc string, parts map[string]string, order []string) (int, string) {
	t.Helper()
	var atts []string
	for _, name := range order {
		atts = append(atts, name, parts[name])
	}
	body, ctype := multipartDoc("multipart/related; boundary={boundary}", doc, atts...)
	req, _ := http.NewRequest("PUT", base+path, strings.NewReader(body))
	req.SetBasicAuth("admin", "pass")
	req.Header.Set("Content-Type", ctype)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// readParts fetches path with an Accept header and returns the parts'
// content types and bodies (nested multipart parts flattened, gzipped
// ones inflated).
func readParts(t *testing.T, base, path, accept string) []string {
	t.Helper()
	req, _ := http.NewRequest("GET", base+path, nil)
	req.SetBasicAuth("admin", "pass")
	req.Header.Set("Accept", accept)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []string
	var walk func(r io.Reader, ct string)
	walk = func(r io.Reader, ct string) {
		mt, params, err := mime.ParseMediaType(ct)
		if err != nil || !strings.HasPrefix(mt, "multipart/") {
			b, _ := io.ReadAll(r)
			out = append(out, ct+" "+string(b))
			return
		}
		mr := multipart.NewReader(r, params["boundary"])
		for {
			p, err := mr.NextPart()
			if err != nil {
				return
			}
			var pr io.Reader = p
			if p.Header.Get("Content-Encoding") == "gzip" {
				if pr, err = gzip.NewReader(p); err != nil {
					t.Fatal(err)
				}
			}
			walk(pr, p.Header.Get("Content-Type"))
		}
	}
	walk(resp.Body, resp.Header.Get("Content-Type"))
	return out
}

func TestMultipart(t *testing.T) {
	ts, _ := newTestServer(t)
	runSteps(t, ts.URL, []step{{name: "db", method: "PUT", path: "/db", status: 201}})
	doc := `{"_id":"m","_rev":"1-abc","_revisions":{"start":1,"ids":["abc"]},"v":1,"_attachments":{` +
		`"a.txt":{"content_type":"text/plain","follows":true,"length":5},` +
		`"b.bin":{"content_type":"application/octet-stream","follows":true,"length":3}}}`
	// Parts out of order, matched by filename.
	st, body := putMultipart(t, ts.URL, "/db/m?new_edits=false", doc, map[string]string{"a.txt": "hello", "b.bin": "xyz"}, []string{"b.bin", "a.txt"})
	if st != 201 {
		t.Fatalf("multipart put: %d %s", st, body)
	}
	st, body = putMultipart(t, ts.URL, "/db/m2", `{"_attachments":{"a.txt":{"content_type":"text/plain","follows":true}}}`, nil, nil)
	if st != 400 {
		t.Errorf("missing part: %d %s", st, body)
	}
	runSteps(t, ts.URL, []step{
		{name: "stored", method: "GET", path: "/db/m/a.txt", status: 200, has: []string{"hello"}},
		{name: "stored bin", method: "GET", path: "/db/m/b.bin", status: 200, has: []string{"xyz"}},
		{name: "inline", method: "GET", path: "/db/m?attachments=true", status: 200, has: []string{`"data":"aGVsbG8="`, `"data":"eHl6"`}},
		{name: "atts_since", method: "GET", path: `/db/m?atts_since=["1-abc"]`, status: 200, has: []string{`"stub":true`}},
		{name: "no multipart", method: "GET", path: "/db/missing?open_revs=all", status: 404},
	})
	parts := readParts(t, ts.URL, "/db/m?attachments=true", "multipart/related")
	if len(parts) != 3 || !strings.Contains(parts[0], `"follows":true`) || !strings.HasSuffix(parts[1], " hello") || !strings.HasSuffix(parts[2], " xyz") {
		t.Errorf("multipart/related doc: %q", parts)
	}
	parts = readParts(t, ts.URL, `/db/m?open_revs=["1-abc","2-nope"]&attachments=true`, "multipart/mixed")
	if len(parts) != 4 || !strings.HasSuffix(parts[1], " hello") || !strings.Contains(parts[3], `{"missing":"2-nope"}`) {
		t.Errorf("open_revs multipart/mixed: %q", parts)
	}
	// _bulk_get as multipart/mixed.
	req, _ := http.NewRequest("POST", ts.URL+"/db/_bulk_get?attachments=true", strings.NewReader(`{"docs":[{"id":"m"},{"id":"zz"}]}`))
	req.SetBasicAuth("admin", "pass")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "multipart/mixed")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "multipart/mixed") || !bytes.Contains(b, []byte("xyz")) ||
		!bytes.Contains(b, []byte(`"id":"zz"`)) {
		t.Errorf("_bulk_get multipart: %s %s", resp.Header.Get("Content-Type"), b)
	}
}

func TestEventSourceAndLongpoll(t *testing.T) {
	ts, _ := newTestServer(t)
	runSteps(t, ts.URL, []step{
		{name: "db", method: "PUT", path: "/db", status: 201},
		{name: "doc", method: "PUT", path: "/db/a", body: `{}`, status: 201},
	})
	resp, b := step{method: "GET", path: "/db/_changes?feed=eventsource&timeout=10"}.do(t, ts.URL)
	if resp.Header.Get("Content-Type") != "text/event-stream" || !bytes.Contains(b, []byte(`data: {"seq":"1-`)) || !bytes.Contains(b, []byte("\nid: 1-")) {
		t.Errorf("eventsource: %s %q", resp.Header.Get("Content-Type"), b)
	}
	// A longpoll waiting from now wakes up on the next write.
	done := make(chan []byte)
	go func() {
		req, _ := http.NewRequest("GET", ts.URL+"/db/_changes?feed=longpoll&since=now&timeout=10000", nil)
		req.SetBasicAuth("admin", "pass")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- nil
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- b
	}()
	for i := 0; ; i++ {
		runSteps(t, ts.URL, []step{{name: "write", method: "POST", path: "/db", body: `{"w":1}`, status: 201}})
		select {
		case b := <-done:
			if !bytes.Contains(b, []byte(`"results":[`)) || !bytes.Contains(b, []byte(`"changes":[{"rev":"1-`)) {
				t.Fatalf("longpoll: %s", b)
			}
			return
		default:
		}
		if i > 100 {
			t.Fatal("longpoll did not return")
		}
	}
}

// TestOpenRevsForCouchDBReplicator: CouchDB 3.5's replicator fetches a doc
// with attachments as recorded below (no attachments=true) and refuses a
// stub it does not have, so a multipart/mixed open_revs answer carries the
// bodies of every attachment newer than atts_since, as CouchDB's does.
func TestOpenRevsForCouchDBReplicator(t *testing.T) {
	ts, _ := newTestServer(t)
	put := func(path, ctype, body string) string {
		t.Helper()
		req, _ := http.NewRequest("PUT", ts.URL+path, strings.NewReader(body))
		req.SetBasicAuth("admin", "pass")
		req.Header.Set("Content-Type", ctype)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r struct{ Rev string }
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != 201 {
			t.Fatalf("PUT %s: %d %v", path, resp.StatusCode, err)
		}
		return r.Rev
	}
	put("/db", "application/json", "")
	rev1 := put("/db/d", "application/json", `{"v":1,"_attachments":{"old.txt":{"content_type":"text/plain","data":"aGVsbG8="}}}`)
	rev2 := put("/db/d/new.bin?rev="+rev1, "application/octet-stream", "zzz")
	q := func(s string) string { return url.QueryEscape(s) }
	tests := []struct {
		name, path, accept string
		bodies, stubs      []string // attachment bodies sent; attachments sent as stubs
	}{
		{"the replicator's fetch", "/db/d?revs=true&open_revs=" + q(`["`+rev2+`"]`) + "&latest=true", "multipart/mixed",
			[]string{"hello", "zzz"}, nil},
		{"with atts_since, as when the target has the parent", "/db/d?revs=true&open_revs=" + q(`["`+rev2+`"]`) + "&latest=true&atts_since=" + q(`["`+rev1+`"]`), "multipart/mixed",
			[]string{"zzz"}, []string{"old.txt"}},
		{"open_revs=all", "/db/d?open_revs=all", "multipart/mixed", []string{"hello", "zzz"}, nil},
		{"JSON keeps stubs", "/db/d?open_revs=all", "application/json", nil, []string{"old.txt", "new.bin"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parts := strings.Join(readParts(t, ts.URL, tt.path, tt.accept), "\n")
			for _, b := range tt.bodies {
				if !strings.Contains(parts, " "+b) {
					t.Errorf("no body %q in %q", b, parts)
				}
			}
			if n := strings.Count(parts, `"stub":true`); n != len(tt.stubs) {
				t.Errorf("%d stubs, want %v: %q", n, tt.stubs, parts)
			}
			for _, s := range tt.stubs {
				if !strings.Contains(parts, `"`+s+`":{"content_type"`) {
					t.Errorf("no stub for %s in %q", s, parts)
				}
			}
		})
	}
}

// TestMultipartCloseDelimiter: every multipart answer ends as CouchDB's do,
// with "--boundary--" and nothing after it, nested multipart/related parts
// included. CouchDB's replicator matches exactly "--" after the last
// boundary of an open_revs answer and failed every doc with attachments
// (open_doc_revs_failed) while minicouch added mime/multipart's CRLF.
func TestMultipartCloseDelimiter(t *testing.T) {
	ts, _ := newTestServer(t)
	runSteps(t, ts.URL, []step{
		{name: "db", method: "PUT", path: "/db", status: 201},
		{name: "with attachment", method: "PUT", path: "/db/a", body: `{"_attachments":{"a.txt":{"content_type":"text/plain","data":"aGVsbG8="}}}`, status: 201},
		{name: "plain", method: "PUT", path: "/db/p", body: `{"v":1}`, status: 201},
	})
	tests := []struct {
		name, method, path, body, accept string
		nested                           int // multipart/related parts inside
	}{
		{"open_revs, attachments", "GET", "/db/a?open_revs=all&revs=true&latest=true", "", "multipart/mixed", 1},
		{"open_revs, no attachments", "GET", "/db/p?open_revs=all", "", "multipart/mixed", 0},
		{"open_revs, a missing rev", "GET", `/db/p?open_revs=["9-x"]`, "", "multipart/mixed", 0},
		{"doc as multipart/related", "GET", "/db/a?attachments=true", "", "multipart/related", 0},
		{"_bulk_get", "POST", "/db/_bulk_get?attachments=true", `{"docs":[{"id":"a"},{"id":"p"},{"id":"zz"}]}`, "multipart/mixed", 1},
		{"_bulk_get, no docs", "POST", "/db/_bulk_get", `{"docs":[]}`, "multipart/mixed", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, b := step{method: tt.method, path: tt.path, body: tt.body, headers: map[string]string{"Accept": tt.accept}}.do(t, ts.URL)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			if n := checkCloseDelimiter(t, resp.Header.Get("Content-Type"), b); n != tt.nested {
				t.Errorf("%d nested multipart parts, want %d", n, tt.nested)
			}
		})
	}
}

// checkCloseDelimiter checks that a multipart body and its nested
// multipart parts end with their close delimiter; it returns how many
// nested ones it checked.
func checkCloseDelimiter(t *testing.T, ctype string, body []byte) int {
	t.Helper()
	_, params, err := mime.ParseMediaType(ctype)
	if err != nil || params["boundary"] == "" {
		t.Fatalf("Content-Type %q: %v", ctype, err)
	}
	if end := "--" + params["boundary"] + "--"; !bytes.HasSuffix(body, []byte(end)) {
		t.Errorf("body does not end with %q: ends with %q", end, body[max(0, len(body)-60):])
	}
	nested := 0
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			return nested
		}
		if err != nil {
			t.Fatal(err)
		}
		if pct := p.Header.Get("Content-Type"); strings.HasPrefix(pct, "multipart/") {
			pb, _ := io.ReadAll(p)
			nested += 1 + checkCloseDelimiter(t, pct, pb)
		}
	}
}
