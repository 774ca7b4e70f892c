package couchapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/couchepi/couchepi/examples/minicouch/auth"
	"github.com/couchepi/couchepi/examples/minicouch/config"
	"github.com/couchepi/couchepi/examples/minicouch/store"
	"github.com/couchepi/couchepi/host"
)

// newTestServer runs the real API over a real store and a host with no
// plugin loaded, with admin:pass as server admin.
func newTestServer(t testing.TB) (*httptest.Server, *Server) {
	t.Helper()
	dir := t.TempDir()
	cfg, err := config.Load("", dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Set("chttpd_auth", "iterations", "10")
	cfg.Set("admins", "admin", "pass")
	if err := auth.HashAdmins(cfg); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(dir, store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := New(Options{Store: st, Config: cfg})
	h := host.New(host.Config{Services: srv})
	srv.SetHooks(h)
	ts := httptest.NewServer(srv)
	srv.SetURL(ts.URL + "/")
	if err := srv.EnsureSystemDBs(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ts.Close()
		h.Close()
		st.Close()
	})
	return ts, srv
}

// step is one request of a table-driven conversation with the server.
type step struct {
	name    string
	method  string
	path    string
	body    string
	ctype   string // default application/json when body != ""
	user    string // "user:pass"; "" = admin, "-" = anonymous
	headers map[string]string
	status  int
	want    string            // exact JSON (compared semantically) when set
	has     []string          // substrings the body must contain
	header  map[string]string // response headers that must match
}

func (s step) do(t *testing.T, base string) (*http.Response, []byte) {
	t.Helper()
	var body io.Reader
	if s.body != "" {
		body = strings.NewReader(s.body)
	}
	req, err := http.NewRequest(s.method, base+s.path, body)
	if err != nil {
		t.Fatal(err)
	}
	if s.body != "" {
		ct := s.ctype
		if ct == "" {
			ct = "application/json"
		}
		req.Header.Set("Content-Type", ct)
	}
	switch s.user {
	case "":
		req.SetBasicAuth("admin", "pass")
	case "-":
	default:
		u, p, _ := strings.Cut(s.user, ":")
		req.SetBasicAuth(u, p)
	}
	for k, v := range s.headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func runSteps(t *testing.T, base string, steps []step) {
	t.Helper()
	for _, s := range steps {
		resp, b := s.do(t, base)
		if resp.StatusCode != s.status {
			t.Errorf("%s: %s %s: status %d, want %d: %s", s.name, s.method, s.path, resp.StatusCode, s.status, b)
			continue
		}
		if s.want != "" && !jsonEqual(b, []byte(s.want)) {
			t.Errorf("%s: body %s, want %s", s.name, b, s.want)
		}
		for _, h := range s.has {
			if !bytes.Contains(b, []byte(h)) {
				t.Errorf("%s: body %s lacks %s", s.name, b, h)
			}
		}
		for k, v := range s.header {
			if got := resp.Header.Get(k); got != v {
				t.Errorf("%s: header %s = %q, want %q", s.name, k, got, v)
			}
		}
	}
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	ja, _ := json.Marshal(x)
	jb, _ := json.Marshal(y)
	return bytes.Equal(ja, jb)
}

const illegalBad = `{"error":"illegal_database_name","reason":"Name: 'Bad'. Only lowercase characters (a-z), digits (0-9), and any of the characters _, $, (, ), +, -, and / are allowed. Must begin with a letter."}`

func TestServerAndDatabases(t *testing.T) {
	ts, _ := newTestServer(t)
	runSteps(t, ts.URL, []step{
		{name: "welcome", method: "GET", path: "/", status: 200, has: []string{`"couchdb":"Welcome"`, `"version":"3.5.0"`, `"vendor":{"name":"couchepi minicouch"}`},
			header: map[string]string{"Server": ServerHeader, "Content-Type": "application/json"}},
		{name: "up", method: "GET", path: "/_up", user: "-", status: 200, want: `{"status":"ok","seeds":{}}`},
		{name: "system dbs", method: "GET", path: "/_all_dbs", status: 200, want: `["_replicator","_users"]`},
		{name: "anon create", method: "PUT", path: "/db", user: "-", status: 401, want: `{"error":"unauthorized","reason":"You are not a server admin."}`},
		{name: "unknown _name, anonymous", method: "GET", path: "/_duck", user: "-", status: 401, want: `{"error":"unauthorized","reason":"You are not a server admin."}`},
		{name: "unknown _name", method: "GET", path: "/_duck", status: 404, want: `{"error":"not_found","reason":"Database does not exist."}`},
		{name: "below an unknown _name", method: "GET", path: "/_duck/_all_docs", status: 404, want: `{"error":"not_found","reason":"Database does not exist."}`},
		{name: "create an unknown _name", method: "PUT", path: "/_duck", status: 400, has: []string{`"illegal_database_name"`, `Name: '_duck'`}},
		{name: "wrong password", method: "GET", path: "/", user: "admin:nope", status: 401, want: `{"error":"unauthorized","reason":"Name or password is incorrect."}`},
		{name: "partitioned", method: "PUT", path: "/pdb?partitioned=true", status: 400, want: `{"error":"bad_request","reason":"Partitioned feature is not enabled."}`},
		{name: "partitioned junk", method: "PUT", path: "/pdb?partitioned=yes", status: 400, want: `{"error":"bad_request","reason":"Invalid ` + "`partitioned`" + ` parameter"}`},
		{name: "refused partitioned db not made", method: "GET", path: "/pdb", status: 404},
		{name: "partitioned=false", method: "PUT", path: "/pdb?partitioned=false", status: 201},
		{name: "drop it", method: "DELETE", path: "/pdb", status: 200},
		{name: "create", method: "PUT", path: "/db?q=1&n=1", status: 201, want: `{"ok":true}`},
		{name: "create again", method: "PUT", path: "/db", status: 412, want: `{"error":"file_exists","reason":"The database could not be created, the file already exists."}`},
		{name: "bad name", method: "PUT", path: "/Bad", status: 400, want: illegalBad},
		{name: "escaped slash", method: "PUT", path: "/another%2F_replicator", status: 201},
		{name: "list", method: "GET", path: "/_all_dbs", status: 200, want: `["_replicator","_users","another/_replicator","db"]`},
		{name: "double slash", method: "GET", path: "//db", status: 200, has: []string{`"db_name":"db"`, `"update_seq":"0-`}},
		{name: "missing db", method: "GET", path: "/nodb", status: 404, want: `{"error":"not_found","reason":"Database does not exist."}`},
		{name: "security default", method: "GET", path: "/db/_security", status: 200, want: string(defaultSecurity)},
		{name: "anon read admin-only db", method: "GET", path: "/db", user: "-", status: 401, want: `{"error":"unauthorized","reason":"You are not authorized to access this db."}`},
		{name: "uuids", method: "GET", path: "/_uuids?count=3", status: 200, has: []string{`"uuids":["`}},
		{name: "uuids too many", method: "GET", path: "/_uuids?count=1001", status: 400, want: `{"error":"bad_request","reason":"count parameter too large"}`},
		{name: "membership", method: "GET", path: "/_membership", status: 200, want: `{"all_nodes":["nonode@nohost"],"cluster_nodes":["nonode@nohost"]}`},
		{name: "active tasks anon", method: "GET", path: "/_active_tasks", user: "-", status: 401},
		{name: "active tasks", method: "GET", path: "/_active_tasks", status: 200, want: `[]`},
		{name: "plugins", method: "GET", path: "/_node/_local/_plugins", status: 200, want: `[]`},
		{name: "reload unknown", method: "POST", path: "/_node/_local/_plugins/nope/_reload", status: 404},
		{name: "load without path", method: "POST", path: "/_node/_local/_plugins", body: `{}`, status: 400, has: []string{"`path`"}},
		{name: "load with bad JSON", method: "POST", path: "/_node/_local/_plugins", body: `{"path":`, status: 400, want: `{"error":"bad_request","reason":"invalid UTF-8 JSON"}`},
		{name: "load a missing binary", method: "POST", path: "/_node/_local/_plugins", body: `{"path":"/nonexistent/plugin"}`, status: 500, has: []string{`"load_failed"`, `/nonexistent/plugin`}},
		{name: "load anonymously", method: "POST", path: "/_node/_local/_plugins", body: `{"path":"/bin/true"}`, user: "-", status: 401},
		{name: "plugins after refused loads", method: "GET", path: "/_node/_local/_plugins", status: 200, want: `[]`},
		{name: "config put", method: "PUT", path: "/_node/_local/_config/replicator/worker_processes", body: `"8"`, status: 200, want: `""`},
		{name: "config put again", method: "PUT", path: "/_node/nonode@nohost/_config/replicator/worker_processes", body: `"9"`, status: 200, want: `"8"`},
		{name: "config get", method: "GET", path: "/_node/_local/_config/replicator/worker_processes", status: 200, want: `"9"`},
		{name: "config section", method: "GET", path: "/_node/_local/_config/replicator", status: 200, want: `{"worker_processes":"9"}`},
		{name: "config delete", method: "DELETE", path: "/_node/_local/_config/replicator/worker_processes", status: 200, want: `"9"`},
		{name: "config missing", method: "GET", path: "/_node/_local/_config/replicator/worker_processes", status: 404, want: `{"error":"not_found","reason":"unknown_config_value"}`},
		{name: "config bad json", method: "PUT", path: "/_node/_local/_config/a/b", body: `nope`, status: 400, want: `{"error":"bad_request","reason":"invalid UTF-8 JSON"}`},
		{name: "config anon", method: "GET", path: "/_node/_local/_config", user: "-", status: 401},
		{name: "revs_limit", method: "PUT", path: "/db/_revs_limit", body: `5`, status: 200, want: `{"ok":true}`},
		{name: "revs_limit get", method: "GET", path: "/db/_revs_limit", status: 200, want: `5`},
		{name: "ensure full commit", method: "POST", path: "/db/_ensure_full_commit", body: `{}`, status: 201, want: `{"ok":true,"instance_start_time":"0"}`},
		{name: "compact", method: "POST", path: "/db/_compact", body: `{}`, status: 202, want: `{"ok":true}`},
		{name: "replicator all_docs non-admin", method: "GET", path: "/_replicator/_all_docs", user: "-", status: 401},
		{name: "delete db", method: "DELETE", path: "/another%2F_replicator", status: 200, want: `{"ok":true}`},
		{name: "delete missing db", method: "DELETE", path: "/another%2F_replicator", status: 404},
		{name: "require valid user", method: "PUT", path: "/_node/_local/_config/chttpd/require_valid_user", body: `"true"`, status: 200},
		{name: "anonymous refused", method: "GET", path: "/", user: "-", status: 401, want: `{"error":"unauthorized","reason":"Authentication required."}`},
		{name: "anonymous _up", method: "GET", path: "/_up", user: "-", status: 200},
		{name: "admin still in", method: "GET", path: "/", status: 200},
		{name: "require valid user off", method: "DELETE", path: "/_node/_local/_config/chttpd/require_valid_user", status: 200},
		{name: "anonymous welcome", method: "GET", path: "/", user: "-", status: 200},
	})
}

func TestDocumentsAndBadInput(t *testing.T) {
	ts, _ := newTestServer(t)
	var rev1 string
	runSteps(t, ts.URL, []step{
		{name: "create", method: "PUT", path: "/db", status: 201},
		// Bad input: every case is a CouchDB error and changes nothing.
		{name: "malformed json", method: "PUT", path: "/db/doc", body: `{"a":`, status: 400, want: `{"error":"bad_request","reason":"invalid UTF-8 JSON"}`},
		{name: "invalid utf8", method: "PUT", path: "/db/doc", body: "{\"a\":\"\xff\"}", status: 400, want: `{"error":"bad_request","reason":"invalid UTF-8 JSON"}`},
		{name: "not an object", method: "PUT", path: "/db/doc", body: `[1]`, status: 400, want: `{"error":"bad_request","reason":"Document must be a JSON object"}`},
		{name: "underscore id", method: "PUT", path: "/db/_bad", body: `{}`, status: 400, want: `{"error":"illegal_docid","reason":"Only reserved document ids may start with underscore."}`},
		{name: "underscore id in post", method: "POST", path: "/db", body: `{"_id":"_bad"}`, status: 400, want: `{"error":"illegal_docid","reason":"Only reserved document ids may start with underscore."}`},
		{name: "bad rev", method: "PUT", path: "/db/doc", body: `{"_rev":"bogus"}`, status: 400, want: `{"error":"bad_request","reason":"Invalid rev format"}`},
		{name: "bad rev query", method: "GET", path: "/db/doc?rev=bogus", status: 400, want: `{"error":"bad_request","reason":"Invalid rev format"}`},
		{name: "bad special member", method: "PUT", path: "/db/doc", body: `{"_foo":1}`, status: 400, want: `{"error":"doc_validation","reason":"Bad special document member: _foo"}`},
		{name: "post text/plain", method: "POST", path: "/db", body: `{}`, ctype: "text/plain", status: 415, want: `{"error":"bad_content_type","reason":"Content-Type must be application/json"}`},
		{name: "bulk text/plain", method: "POST", path: "/db/_bulk_docs", body: `{"docs":[]}`, ctype: "text/plain", status: 415, want: `{"error":"bad_content_type","reason":"Content-Type must be application/json"}`},
		{name: "bulk no docs", method: "POST", path: "/db/_bulk_docs", body: `{}`, status: 400, want: "{\"error\":\"bad_request\",\"reason\":\"POST body must include `docs` parameter.\"}"},
		{name: "bulk docs not array", method: "POST", path: "/db/_bulk_docs", body: `{"docs":5}`, status: 400, want: "{\"error\":\"bad_request\",\"reason\":\"`docs` parameter must be an array.\"}"},
		{name: "bulk malformed", method: "POST", path: "/db/_bulk_docs", body: `{"docs":[{]}`, status: 400, want: `{"error":"bad_request","reason":"invalid UTF-8 JSON"}`},
		{name: "doc nested too deeply", method: "PUT", path: "/db/doc", body: `{"a":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`, status: 400, want: `{"error":"bad_request","reason":"JSON nested too deeply: more than 10000 levels of objects and arrays"}`},
		{name: "bulk nested too deeply", method: "POST", path: "/db/_bulk_docs", body: `{"docs":[` + strings.Repeat(`{"a":`, 10001) + "1" + strings.Repeat("}", 10001) + `]}`, status: 400, want: `{"error":"bad_request","reason":"JSON nested too deeply: more than 10000 levels of objects and arrays"}`},
		{name: "request nested too deeply", method: "POST", path: "/db/_revs_diff", body: `{"a":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`, status: 400, want: `{"error":"bad_request","reason":"JSON nested too deeply: more than 10000 levels of objects and arrays"}`},
		{name: "revs_diff bad rev", method: "POST", path: "/db/_revs_diff", body: `{"a":["x"]}`, status: 400, want: `{"error":"bad_request","reason":"Invalid rev format"}`},
		{name: "bad since", method: "GET", path: "/db/_changes?since=garbage", status: 400, want: `{"error":"bad_request","reason":"Malformed sequence supplied in 'since' parameter."}`},
		{name: "nothing stored", method: "GET", path: "/db", status: 200, has: []string{`"doc_count":0`, `"update_seq":"0-`}},
		// Documents.
		{name: "put", method: "PUT", path: "/db/doc", body: `{"a":1}`, status: 201, has: []string{`"ok":true`, `"id":"doc"`, `"rev":"1-`}},
		{name: "put conflict", method: "PUT", path: "/db/doc", body: `{"a":2}`, status: 409, want: `{"error":"conflict","reason":"Document update conflict."}`},
		{name: "missing", method: "GET", path: "/db/nope", status: 404, want: `{"error":"not_found","reason":"missing"}`},
		{name: "delete without rev", method: "DELETE", path: "/db/doc", status: 409, want: `{"error":"conflict","reason":"Document update conflict."}`},
		{name: "delete bad rev", method: "DELETE", path: "/db/doc?rev=zz", status: 400, want: `{"error":"bad_request","reason":"Invalid rev format"}`},
		{name: "rev mismatch", method: "PUT", path: "/db/doc?rev=1-a", body: `{"_rev":"1-b"}`, status: 400, want: `{"error":"bad_request","reason":"Document rev from request body and query string have different values"}`},
		{name: "url id wins", method: "PUT", path: "/db/urlid", body: `{"_id":"bodyid","x":1}`, status: 201, has: []string{`"id":"urlid"`}},
		{name: "local put", method: "PUT", path: "/db/_local/ck", body: `{"x":1}`, status: 201, want: `{"ok":true,"id":"_local/ck","rev":"0-1"}`},
		{name: "local get", method: "GET", path: "/db/_local/ck", status: 200, want: `{"_id":"_local/ck","_rev":"0-1","x":1}`},
		{name: "design put", method: "PUT", path: "/db/_design/app", body: `{"filters":{"odd":"function(doc, req){ return doc.n % 2 == 1 && req.query.x == 'y'; }"},"views":{"v":{"map":"function(doc){ if (doc.n > 2) emit(doc._id); }"}}}`, status: 201},
		{name: "bulk", method: "POST", path: "/db/_bulk_docs", body: `{"docs":[{"_id":"n1","n":1},{"_id":"n2","n":2},{"_id":"n3","n":3},{"_id":"doc","a":9}]}`, status: 201,
			has: []string{`{"ok":true,"id":"n1","rev":"1-`, `{"id":"doc","error":"conflict","reason":"Document update conflict."}`}},
		{name: "bulk new_edits false", method: "POST", path: "/db/_bulk_docs", body: `{"new_edits":false,"docs":[{"_id":"r1","_rev":"2-bbb","_revisions":{"start":2,"ids":["bbb","aaa"]},"b":1},{"_id":"r1","_rev":"2-ccc","_revisions":{"start":2,"ids":["ccc","aaa"]},"c":1}]}`, status: 201, want: `[]`},
		{name: "conflicts", method: "GET", path: "/db/r1?conflicts=true", status: 200, want: `{"_id":"r1","_rev":"2-ccc","c":1,"_conflicts":["2-bbb"]}`},
		{name: "open_revs all", method: "GET", path: "/db/r1?open_revs=all", status: 200, want: `[{"ok":{"_id":"r1","_rev":"2-bbb","b":1}},{"ok":{"_id":"r1","_rev":"2-ccc","c":1}}]`},
		{name: "open_revs list", method: "GET", path: `/db/r1?open_revs=["2-bbb","9-zzz"]`, status: 200, want: `[{"ok":{"_id":"r1","_rev":"2-bbb","b":1}},{"missing":"9-zzz"}]`},
		{name: "revs_diff", method: "POST", path: "/db/_revs_diff", body: `{"r1":["2-bbb","3-ddd"],"nodoc":["1-x"]}`, status: 200,
			want: `{"r1":{"missing":["3-ddd"],"possible_ancestors":["2-ccc","2-bbb"]},"nodoc":{"missing":["1-x"]}}`},
		{name: "bulk_get", method: "POST", path: "/db/_bulk_get?revs=true", body: `{"docs":[{"id":"r1","rev":"2-bbb"},{"id":"nodoc"},{"id":"r1","rev":"9-ddd"}]}`, status: 200,
			want: `{"results":[{"id":"r1","docs":[{"ok":{"_id":"r1","_rev":"2-bbb","b":1,"_revisions":{"start":2,"ids":["bbb","aaa"]}}}]},` +
				`{"id":"nodoc","docs":[{"error":{"rev":"undefined","reason":"missing","id":"nodoc","error":"not_found"}}]},` +
				`{"id":"r1","docs":[{"error":{"rev":"9-ddd","reason":"missing","id":"r1","error":"not_found"}}]}]}`},
		{name: "filter unknown", method: "GET", path: "/db/_changes?filter=app/nope", status: 404, want: `{"error":"not_found","reason":"missing json key: nope"}`},
		{name: "filter js", method: "GET", path: "/db/_changes?filter=app/odd&x=y", status: 200, has: []string{`"id":"n1"`, `"id":"n3"`}},
		{name: "filter view", method: "GET", path: "/db/_changes?filter=_view&view=app/v", status: 200, has: []string{`"id":"n3"`}},
		{name: "filter doc_ids", method: "POST", path: "/db/_changes?filter=_doc_ids", body: `{"doc_ids":["n2","nodoc"]}`, status: 200, has: []string{`"id":"n2"`}},
		{name: "filter selector", method: "POST", path: "/db/_changes?filter=_selector", body: `{"selector":{"n":{"$gt":2}}}`, status: 200, has: []string{`"id":"n3"`}},
		{name: "filter design", method: "GET", path: "/db/_changes?filter=_design", status: 200, has: []string{`"id":"_design/app"`}},
		{name: "all_docs style", method: "GET", path: "/db/_changes?style=all_docs&filter=_doc_ids&doc_ids=[\"r1\"]", status: 200, has: []string{`"changes":[{"rev":"2-ccc"},{"rev":"2-bbb"}]`}},
		{name: "longpoll now", method: "GET", path: "/db/_changes?feed=longpoll&since=now&timeout=1", status: 200, has: []string{`"results":[`, `"pending":0`}},
		{name: "continuous", method: "GET", path: "/db/_changes?feed=continuous&timeout=1&since=0&limit=2", status: 200, has: []string{`"last_seq":`}},
		{name: "all_docs keys", method: "POST", path: "/db/_all_docs", body: `{"keys":["n1","zz"]}`, status: 200, has: []string{`"id":"n1"`, `{"key":"zz","error":"not_found"}`}},
		{name: "all_docs range", method: "GET", path: `/db/_all_docs?startkey="n1"&endkey="n2"`, status: 200, has: []string{`"total_rows":7`, `"offset":2`, `"id":"n1"`, `"id":"n2"`}},
		{name: "design_docs", method: "GET", path: "/db/_design_docs", status: 200, has: []string{`"id":"_design/app"`}},
		{name: "local_docs", method: "GET", path: "/db/_local_docs", status: 200, has: []string{`"id":"_local/ck"`}},
		{name: "att bad md5", method: "PUT", path: "/db/withatt/a.txt", body: "hello", ctype: "text/plain", headers: map[string]string{"Content-MD5": "AAAAAAAAAAAAAAAAAAAAAA=="}, status: 400,
			want: `{"error":"content_md5_mismatch","reason":"Possible message corruption."}`},
		{name: "att absent after mismatch", method: "GET", path: "/db/withatt", status: 404},
		{name: "att put", method: "PUT", path: "/db/withatt/a.txt", body: "hello", ctype: "text/plain", headers: map[string]string{"Content-MD5": "XUFAKrxLKna5cZ2REBfFkg=="}, status: 201},
		{name: "att get", method: "GET", path: "/db/withatt/a.txt", status: 200, want: "", has: []string{"hello"},
			header: map[string]string{"Content-Type": "text/plain", "ETag": `"iMaiC8wqiFlD2NjLTemvCQ=="`, "Content-MD5": ""}},
		{name: "gzipped att ignores range", method: "GET", path: "/db/withatt/a.txt", headers: map[string]string{"Range": "bytes=1-3"}, status: 200,
			header: map[string]string{"Accept-Ranges": "none", "Content-Range": ""}, has: []string{"hello"}},
		{name: "binary att put", method: "PUT", path: "/db/withbin/b.bin", body: "hello", ctype: "application/octet-stream", status: 201},
		{name: "att range", method: "GET", path: "/db/withbin/b.bin", headers: map[string]string{"Range": "bytes=1-3"}, status: 206,
			header: map[string]string{"Content-Range": "bytes 1-3/5", "Content-Length": "3"}, has: []string{"ell"}},
		{name: "att suffix range", method: "GET", path: "/db/withbin/b.bin", headers: map[string]string{"Range": "bytes=-2"}, status: 206, has: []string{"lo"}},
		{name: "att bad range", method: "GET", path: "/db/withbin/b.bin", headers: map[string]string{"Range": "bytes=9-"}, status: 416},
		{name: "att inline", method: "GET", path: "/db/withatt?attachments=true", status: 200, has: []string{`"data":"aGVsbG8="`}},
		{name: "att stub", method: "GET", path: "/db/withatt", status: 200, has: []string{`"stub":true`, `"digest":"md5-iMaiC8wqiFlD2NjLTemvCQ=="`, `"length":5`}},
		{name: "binary att stub", method: "GET", path: "/db/withbin", status: 200, has: []string{`"digest":"md5-XUFAKrxLKna5cZ2REBfFkg=="`, `"length":5`}},
	})
	// Oversized bodies: a small max_http_request_size gives 413 and stores nothing.
	runSteps(t, ts.URL, []step{
		{name: "limit", method: "PUT", path: "/_node/_local/_config/chttpd/max_http_request_size", body: `"100"`, status: 200},
		{name: "too large", method: "PUT", path: "/db/big", body: `{"x":"` + strings.Repeat("a", 200) + `"}`, status: 413, want: `{"error":"too_large","reason":"the request entity is too large"}`},
		{name: "too large bulk", method: "POST", path: "/db/_bulk_docs", body: `{"docs":[{"x":"` + strings.Repeat("a", 200) + `"}]}`, status: 413},
		{name: "unlimit", method: "DELETE", path: "/_node/_local/_config/chttpd/max_http_request_size", status: 200},
		{name: "big absent", method: "GET", path: "/db/big", status: 404},
	})
	resp, b := step{method: "GET", path: "/db/doc"}.do(t, ts.URL)
	if resp.StatusCode != 200 || resp.Header.Get("ETag") == "" {
		t.Fatalf("get doc: %d %s", resp.StatusCode, b)
	}
	rev1 = strings.Trim(resp.Header.Get("ETag"), `"`)
	runSteps(t, ts.URL, []step{
		{name: "not modified", method: "GET", path: "/db/doc", headers: map[string]string{"If-None-Match": `"` + rev1 + `"`}, status: 304},
		{name: "delete", method: "DELETE", path: "/db/doc?rev=" + rev1, status: 200, has: []string{`"ok":true`, `"rev":"2-`}},
		{name: "deleted", method: "GET", path: "/db/doc", status: 404, want: `{"error":"not_found","reason":"deleted"}`},
		{name: "deleted by rev", method: "GET", path: "/db/doc?rev=" + rev1, status: 200, has: []string{`"a":1`}},
		{name: "delete a deleted doc", method: "DELETE", path: "/db/doc?rev=" + rev1, status: 404, want: `{"error":"not_found","reason":"deleted"}`},
		{name: "delete a missing doc", method: "DELETE", path: "/db/nodoc?rev=1-9c65296036141e575d32ba9c034dd3ee", status: 404, want: `{"error":"not_found","reason":"missing"}`},
		{name: "delete a missing doc without rev", method: "DELETE", path: "/db/nodoc", status: 404, want: `{"error":"not_found","reason":"missing"}`},
	})
}

func TestUsersSecurityAndSessions(t *testing.T) {
	ts, _ := newTestServer(t)
	runSteps(t, ts.URL, []step{
		{name: "signup", method: "PUT", path: "/_users/org.couchdb.user:bob", user: "-", body: `{"name":"bob","type":"user","roles":[],"password":"bobpw"}`, status: 201},
		{name: "bad user type", method: "PUT", path: "/_users/org.couchdb.user:eve", body: `{"name":"eve","type":"nope","password":"x"}`, status: 403, want: `{"error":"forbidden","reason":"doc.type must be user"}`},
		{name: "anon roles", method: "PUT", path: "/_users/org.couchdb.user:zed", user: "-", body: `{"name":"zed","type":"user","roles":["r"],"password":"x"}`, status: 403, want: `{"error":"forbidden","reason":"Only _admin may set roles"}`},
		{name: "system role", method: "PUT", path: "/_users/org.couchdb.user:zed", body: `{"name":"zed","type":"user","roles":["_admin"],"password":"x"}`, status: 403, want: `{"error":"forbidden","reason":"No system roles (starting with underscore) in users db."}`},
		{name: "id mismatch", method: "PUT", path: "/_users/org.couchdb.user:zed", body: `{"name":"zz","type":"user","roles":[],"password":"x"}`, status: 403, want: `{"error":"forbidden","reason":"Doc ID must be of the form org.couchdb.user:name"}`},
		{name: "eve", method: "PUT", path: "/_users/org.couchdb.user:eve", body: `{"name":"eve","type":"user","roles":["r"],"password":"evepw"}`, status: 201},
		{name: "hashed", method: "GET", path: "/_users/org.couchdb.user:bob", status: 200, has: []string{`"password_scheme":"pbkdf2"`, `"derived_key":`, `"salt":`}},
		{name: "own doc", method: "GET", path: "/_users/org.couchdb.user:bob", user: "bob:bobpw", status: 200},
		{name: "other's doc", method: "GET", path: "/_users/org.couchdb.user:eve", user: "bob:bobpw", status: 403},
		{name: "users all_docs", method: "GET", path: "/_users/_all_docs", user: "bob:bobpw", status: 403},
		{name: "session anon", method: "GET", path: "/_session", user: "-", status: 200, want: `{"ok":true,"userCtx":{"name":null,"roles":[]},"info":{"authentication_handlers":["cookie","default"]}}`},
		{name: "session basic", method: "GET", path: "/_session", user: "bob:bobpw", status: 200, has: []string{`"userCtx":{"name":"bob","roles":[]}`, `"authenticated":"default"`}},
		{name: "all_dbs anon", method: "GET", path: "/_all_dbs", user: "-", status: 401, want: `{"error":"unauthorized","reason":"You are not a server admin."}`},
		{name: "all_dbs user", method: "GET", path: "/_all_dbs", user: "bob:bobpw", status: 401, want: `{"error":"unauthorized","reason":"You are not a server admin."}`},
		{name: "all_dbs double slash", method: "GET", path: "//_all_dbs", user: "bob:bobpw", status: 401},
		{name: "all_dbs escaped", method: "GET", path: "/%5Fall_dbs", user: "bob:bobpw", status: 401},
		{name: "dbs_info user", method: "GET", path: "/_dbs_info", user: "bob:bobpw", status: 401},
		{name: "all_dbs opened", method: "PUT", path: "/_node/_local/_config/chttpd/admin_only_all_dbs", body: `"false"`, status: 200},
		{name: "all_dbs user allowed", method: "GET", path: "/_all_dbs", user: "bob:bobpw", status: 200},
		{name: "all_dbs closed", method: "DELETE", path: "/_node/_local/_config/chttpd/admin_only_all_dbs", status: 200},
		{name: "all_dbs user again", method: "GET", path: "/_all_dbs", user: "bob:bobpw", status: 401},
		{name: "login wrong", method: "POST", path: "/_session", user: "-", body: `{"name":"bob","password":"x"}`, status: 401, want: `{"error":"unauthorized","reason":"Name or password is incorrect."}`},
		{name: "login ctype", method: "POST", path: "/_session", user: "-", body: `x`, ctype: "text/plain", status: 415},
		{name: "db", method: "PUT", path: "/db", status: 201},
		{name: "security", method: "PUT", path: "/db/_security", body: `{"members":{"names":["bob"],"roles":["r"]},"admins":{"names":[],"roles":[]}}`, status: 200},
		{name: "security by member", method: "PUT", path: "/db/_security", user: "bob:bobpw", body: `{}`, status: 401, want: `{"error":"unauthorized","reason":"You are not a db or server admin."}`},
		{name: "member", method: "PUT", path: "/db/d1", user: "bob:bobpw", body: `{}`, status: 201},
		{name: "member by role", method: "GET", path: "/db/d1", user: "eve:evepw", status: 200},
		{name: "anon", method: "GET", path: "/db/d1", user: "-", status: 401, want: `{"error":"unauthorized","reason":"You are not authorized to access this db."}`},
		{name: "design by member", method: "PUT", path: "/db/_design/x", user: "bob:bobpw", body: `{}`, status: 401, want: `{"error":"unauthorized","reason":"You are not a db or server admin."}`},
	})
	// Cookie login, form-encoded, then use the cookie.
	req, _ := http.NewRequest("POST", ts.URL+"/_session", strings.NewReader("name=bob&password=bobpw"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var cookie string
	for _, c := range resp.Cookies() {
		if c.Name == auth.CookieName {
			cookie = c.Value
		}
	}
	if resp.StatusCode != 200 || cookie == "" {
		t.Fatalf("login: %d cookie %q", resp.StatusCode, cookie)
	}
	// Only the cookie: the step runner would add basic auth, so use the raw client.
	req, _ = http.NewRequest("GET", ts.URL+"/db/d1", nil)
	req.AddCookie(&http.Cookie{Name: auth.CookieName, Value: cookie})
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("cookie auth: %d", resp.StatusCode)
	}
}

// FuzzBulkDocs sends arbitrary bodies to _bulk_docs through the handler: the
// server must answer with a CouchDB-shaped response (201 array or an error
// object) and never panic or 500.
func FuzzBulkDocs(f *testing.F) {
	for _, s := range []string{
		`{"docs":[{"_id":"a","x":1}]}`,
		`{"docs":[{"_id":"a","_rev":"1-abc","_revisions":{"start":1,"ids":["abc"]}}],"new_edits":false}`,
		`{"docs":[{"_attachments":{"a":{"data":"aGk=","content_type":"text/plain"}}}]}`,
		`{"docs":[{"_id":"_local/x"},{"_id":"_design/d","views":{}}]}`,
		`{"docs":[{"_id":"a","_deleted":true}]}`, `{"docs":{}}`, `[]`, `{`, "\xff",
		`{"docs":[{"_id":"g","_rev":"9223372036854775807-aaaa"}],"new_edits":false}`,
		`{"docs":[{"_id":"g","_revisions":{"start":9007199254740992,"ids":["a"]}}],"new_edits":false}`,
	} {
		f.Add([]byte(s))
	}
	ts, _ := newTestServer(f)
	req, _ := http.NewRequest("PUT", ts.URL+"/fz", nil)
	req.SetBasicAuth("admin", "pass")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, _ := http.NewRequest("POST", ts.URL+"/fz/_bulk_docs", bytes.NewReader(body))
		req.SetBasicAuth("admin", "pass")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 500 {
			t.Fatalf("status %d for %q: %s", resp.StatusCode, body, b)
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("non-JSON answer %q for %q", b, body)
		}
		if resp.StatusCode != 201 {
			m, ok := v.(map[string]any)
			if !ok || m["error"] == nil || m["reason"] == nil {
				t.Fatalf("error answer not CouchDB-shaped: %s", b)
			}
		}
	})
}

func TestChangesPaging(t *testing.T) {
	ts, _ := newTestServer(t)
	runSteps(t, ts.URL, []step{
		{name: "db", method: "PUT", path: "/db", status: 201},
		{name: "docs", method: "POST", path: "/db/_bulk_docs", body: `{"docs":[{"_id":"a","k":1},{"_id":"b","k":2},{"_id":"c","k":1},{"_id":"d","k":2}]}`, status: 201},
	})
	tests := []struct {
		path    string
		ids     []string
		last    string
		pending int64
	}{
		{"/db/_changes?limit=2", []string{"a", "b"}, "2-", 2},
		{"/db/_changes?limit=2&since=2", []string{"c", "d"}, "4-", 0},
		{"/db/_changes?limit=0", nil, "0-", 4},
		{"/db/_changes?since=now", nil, "4-", 0},
		{"/db/_changes?descending=true&limit=1", []string{"d"}, "4-", 0},
		// By id, CouchDB folds over the named docs only: pending is every
		// change after since it did not fold over (3.5.0 sample 6).
		{`/db/_changes?filter=_doc_ids&doc_ids=["b","d"]&limit=1`, []string{"b"}, "2-", 3},
		{`/db/_changes?filter=_doc_ids&doc_ids=["d","b","nodoc"]`, []string{"b", "d"}, "4-", 2},
		{`/db/_changes?filter=_design`, nil, "4-", 4},
	}
	for _, tc := range tests {
		_, b := step{method: "GET", path: tc.path}.do(t, ts.URL)
		var res struct {
			Results []struct {
				ID string `json:"id"`
			} `json:"results"`
			LastSeq string `json:"last_seq"`
			Pending int64  `json:"pending"`
		}
		if err := json.Unmarshal(b, &res); err != nil {
			t.Fatalf("%s: %s", tc.path, b)
		}
		var ids []string
		for _, r := range res.Results {
			ids = append(ids, r.ID)
		}
		if strings.Join(ids, ",") != strings.Join(tc.ids, ",") || !strings.HasPrefix(res.LastSeq, tc.last) || res.Pending != tc.pending {
			t.Errorf("%s: ids %v last %s pending %d, want %v %s… %d", tc.path, ids, res.LastSeq, res.Pending, tc.ids, tc.last, tc.pending)
		}
	}
}

// TestChangesSeqInterval: with seq_interval, a row carries its seq when
// the limit left (CouchDB counts it down per row; 10^15 when none is
// given) is a multiple of the interval, so without a limit the first row
// always has one (PouchDB's "changes respects seq_interval" relies on it).
func TestChangesSeqInterval(t *testing.T) {
	ts, _ := newTestServer(t)
	runSteps(t, ts.URL, []step{
		{name: "db", method: "PUT", path: "/db", status: 201},
		{name: "docs", method: "POST", path: "/db/_bulk_docs", body: `{"docs":[{"_id":"a"},{"_id":"b"},{"_id":"c"},{"_id":"d"},{"_id":"e"}]}`, status: 201},
	})
	tests := []struct {
		query string
		shown string // per row: s when it has a seq, - when null
	}{
		{"seq_interval=4", "s---s"},
		{"seq_interval=2", "s-s-s"},
		{"seq_interval=1", "sssss"},
		{"seq_interval=2&limit=3", "-s-"},
		{"seq_interval=3&limit=5", "--s--"},
	}
	for _, tc := range tests {
		_, b := step{method: "GET", path: "/db/_changes?" + tc.query}.do(t, ts.URL)
		var res struct {
			Results []struct {
				Seq *string `json:"seq"`
			} `json:"results"`
			LastSeq *string `json:"last_seq"`
		}
		if err := json.Unmarshal(b, &res); err != nil {
			t.Fatalf("%s: %s", tc.query, b)
		}
		got := ""
		for _, r := range res.Results {
			if r.Seq != nil {
				got += "s"
			} else {
				got += "-"
			}
		}
		if got != tc.shown || res.LastSeq == nil {
			t.Errorf("%s: rows %s (last_seq %v), want %s and a last_seq", tc.query, got, res.LastSeq, tc.shown)
		}
	}
}

func TestValidateDocUpdate(t *testing.T) {
	ts, _ := newTestServer(t)
	runSteps(t, ts.URL, []step{
		{name: "db", method: "PUT", path: "/db", status: 201},
		{name: "vdu", method: "PUT", path: "/db/_design/v", body: `{"validate_doc_update":"function(n, o, u) { if (!n.foo) throw({forbidden: 'Document must have a foo.'}); if (n.who && n.who !== u.name) throw({unauthorized: 'not you'}); }"}`, status: 201},
		{name: "refused", method: "PUT", path: "/db/a", body: `{}`, status: 403, want: `{"error":"forbidden","reason":"Document must have a foo."}`},
		{name: "unauthorized", method: "PUT", path: "/db/a", body: `{"foo":1,"who":"bob"}`, status: 401, want: `{"error":"unauthorized","reason":"not you"}`},
		{name: "accepted", method: "PUT", path: "/db/a", body: `{"foo":1,"who":"admin"}`, status: 201},
		{name: "bulk per doc", method: "POST", path: "/db/_bulk_docs", body: `{"new_edits":false,"docs":[{"_id":"x","_rev":"1-x","foo":1},{"_id":"y","_rev":"1-y"}]}`, status: 201,
			want: `[{"id":"y","error":"forbidden","reason":"Document must have a foo."}]`},
		{name: "local not validated", method: "PUT", path: "/db/_local/l", body: `{}`, status: 201},
	})
}

func TestViews(t *testing.T) {
	ts, _ := newTestServer(t)
	runSteps(t, ts.URL, []step{
		{name: "db", method: "PUT", path: "/db", status: 201},
		{name: "docs", method: "POST", path: "/db/_bulk_docs", body: `{"docs":[{"_id":"a","n":3,"t":"x"},{"_id":"b","n":1,"t":"y"},{"_id":"c","n":2,"t":"x"}]}`, status: 201},
		{name: "ddoc", method: "PUT", path: "/db/_design/v", body: `{"views":{"by_n":{"map":"function(doc){ emit(doc.n, doc.t); }"},` +
			`"by_t":{"map":"function(doc){ emit([doc.t, doc.n], 1); }","reduce":"_count"},` +
			`"js":{"map":"function(doc){ emit(doc.t, doc.n); }","reduce":"function(keys, values, rereduce){ return sum(values); }"}}}`, status: 201},
		{name: "map", method: "GET", path: "/db/_design/v/_view/by_n", status: 200,
			want: `{"total_rows":3,"offset":0,"rows":[{"id":"b","key":1,"value":"y"},{"id":"c","key":2,"value":"x"},{"id":"a","key":3,"value":"x"}]}`},
		{name: "range desc", method: "GET", path: "/db/_design/v/_view/by_n?descending=true&startkey=2&limit=1", status: 200,
			want: `{"total_rows":3,"offset":1,"rows":[{"id":"c","key":2,"value":"x"}]}`},
		{name: "key", method: "GET", path: "/db/_design/v/_view/by_n?key=3&include_docs=true", status: 200, has: []string{`"doc":{"_id":"a"`}},
		{name: "reduce", method: "GET", path: "/db/_design/v/_view/by_t", status: 200, want: `{"rows":[{"key":null,"value":3}]}`},
		{name: "map update_seq", method: "GET", path: "/db/_design/v/_view/by_n?update_seq=true&limit=0", status: 200, has: []string{`"offset":0,"update_seq":"4-`}},
		{name: "reduce update_seq", method: "GET", path: "/db/_design/v/_view/by_t?update_seq=true", status: 200, has: []string{`"update_seq":"4-`, `"value":3`}},
		{name: "group_level", method: "GET", path: "/db/_design/v/_view/by_t?group_level=1", status: 200, want: `{"rows":[{"key":["x"],"value":2},{"key":["y"],"value":1}]}`},
		{name: "no reduce", method: "GET", path: "/db/_design/v/_view/by_t?reduce=false&limit=1", status: 200, has: []string{`"key":["x",2]`}},
		{name: "js reduce", method: "GET", path: "/db/_design/v/_view/js?group=true", status: 200, want: `{"rows":[{"key":"x","value":5},{"key":"y","value":1}]}`},
		{name: "missing view", method: "GET", path: "/db/_design/v/_view/nope", status: 404, want: `{"error":"not_found","reason":"missing_named_view"}`},
		{name: "design info", method: "GET", path: "/db/_design/v/_info", status: 200, has: []string{`"name":"v"`, `"language":"javascript"`}},
	})
}

func TestFindAndDBsInfo(t *testing.T) {
	ts, _ := newTestServer(t)
	runSteps(t, ts.URL, []step{
		{name: "db", method: "PUT", path: "/db", status: 201},
		{name: "docs", method: "POST", path: "/db/_bulk_docs", body: `{"docs":[{"_id":"a","n":3,"t":"x","o":{"p":1}},{"_id":"b","n":1,"t":"y"},{"_id":"c","n":2,"t":"x"}]}`, status: 201},
		{name: "sorting needs an index", method: "POST", path: "/db/_index", body: `{"index":{"fields":["n"]}}`, status: 200, has: []string{`"result":"created"`}},
		{name: "find", method: "POST", path: "/db/_find", body: `{"selector":{"t":"x","n":{"$gt":null}},"fields":["_id","n"],"sort":[{"n":"asc"}]}`, status: 200,
			want: `{"docs":[{"_id":"c","n":2},{"_id":"a","n":3}],"bookmark":"nil"}`},
		{name: "find nested field", method: "POST", path: "/db/_find", body: `{"selector":{"o.p":{"$gte":1}},"fields":["o.p"]}`, status: 200, has: []string{`"docs":[{"o":{"p":1}}]`}},
		{name: "find limit", method: "POST", path: "/db/_find", body: `{"selector":{"n":{"$gt":0}},"limit":1,"skip":1,"sort":["n"]}`, status: 200, has: []string{`"_id":"c"`}},
		{name: "find no selector", method: "POST", path: "/db/_find", body: `{}`, status: 400, want: `{"error":"missing_required_key","reason":"Missing required key: selector"}`},
		{name: "index", method: "GET", path: "/db/_index", status: 200, has: []string{`"name":"_all_docs"`, `"fields":[{"n":"asc"}]`}},
		{name: "dbs_info", method: "POST", path: "/_dbs_info", body: `{"keys":["db","nope"]}`, status: 200, has: []string{`"key":"db","info":{`, `{"key":"nope","error":"not_found"}`}},
	})
}

func TestCORS(t *testing.T) {
	ts, _ := newTestServer(t)
	runSteps(t, ts.URL, []step{
		{name: "no cors", method: "GET", path: "/", user: "-", headers: map[string]string{"Origin": "http://app.example"}, status: 200,
			header: map[string]string{"Access-Control-Allow-Origin": ""}},
		{name: "enable", method: "PUT", path: "/_node/_local/_config/chttpd/enable_cors", body: `"true"`, status: 200},
		{name: "origins", method: "PUT", path: "/_node/_local/_config/cors/origins", body: `"http://app.example"`, status: 200},
		{name: "credentials", method: "PUT", path: "/_node/_local/_config/cors/credentials", body: `"true"`, status: 200},
		{name: "simple", method: "GET", path: "/", user: "-", headers: map[string]string{"Origin": "http://app.example"}, status: 200,
			header: map[string]string{"Access-Control-Allow-Origin": "http://app.example", "Access-Control-Allow-Credentials": "true"}},
		{name: "other origin", method: "GET", path: "/", user: "-", headers: map[string]string{"Origin": "http://evil.example"}, status: 200,
			header: map[string]string{"Access-Control-Allow-Origin": ""}},
		{name: "preflight", method: "OPTIONS", path: "/db/_bulk_docs", user: "-", headers: map[string]string{"Origin": "http://app.example",
			"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "Content-Type, Authorization, X-Bogus"}, status: 200,
			header: map[string]string{"Access-Control-Allow-Origin": "http://app.example", "Access-Control-Allow-Methods": corsDefaultMethods,
				"Access-Control-Allow-Headers": "content-type, authorization", "Access-Control-Max-Age": "600"}},
	})
}

func TestCopy(t *testing.T) {
	ts, _ := newTestServer(t)
	runSteps(t, ts.URL, []step{
		{name: "db", method: "PUT", path: "/db", status: 201},
		{name: "src", method: "PUT", path: "/db/src", body: `{"v":1,"_attachments":{"a.txt":{"content_type":"text/plain","data":"aGVsbG8="}}}`, status: 201},
		{name: "copy", method: "COPY", path: "/db/src", headers: map[string]string{"Destination": "dst"}, status: 201, has: []string{`"id":"dst"`, `"rev":"1-`}},
		{name: "copied", method: "GET", path: "/db/dst?attachments=true", status: 200, has: []string{`"v":1`, `"data":"aGVsbG8="`}},
		{name: "copy conflict", method: "COPY", path: "/db/src", headers: map[string]string{"Destination": "dst"}, status: 409},
		{name: "no destination", method: "COPY", path: "/db/src", status: 400},
	})
}

func TestNoHTMLEscaping(t *testing.T) {
	ts, _ := newTestServer(t)
	runSteps(t, ts.URL, []step{
		{name: "db", method: "PUT", path: "/db", status: 201},
		{name: "doc", method: "PUT", path: "/db/a%3Cb%3E%26c", body: `{"v":"<x>&"}`, status: 201, has: []string{`"id":"a<b>&c"`}},
		{name: "bulk_docs", method: "POST", path: "/db/_bulk_docs", body: `{"docs":[{"_id":"<y>"}]}`, status: 201, has: []string{`"id":"<y>"`}},
		{name: "changes", method: "GET", path: "/db/_changes", status: 200, has: []string{`"id":"<y>"`}},
		{name: "find", method: "POST", path: "/db/_find", body: `{"selector":{"v":"<x>&"}}`, status: 200, has: []string{`"v":"<x>&"`}},
	})
}

// TestLineSeparatorsAsCouchDB: an id holding U+2028 and a value holding
// U+2029 are written as they are, as CouchDB's encoder writes them, by
// every answer: those built string by string (a doc, _all_docs,
// _changes, _bulk_docs) and those encoded whole (a view's rows, _find).
// minicouch once escaped them in the second kind only, so one id was
// written two ways.
func TestLineSeparatorsAsCouchDB(t *testing.T) {
	ts, _ := newTestServer(t)
	const id, value = "a\u2028b", "x\u2029y"
	steps := []step{
		{name: "db", method: "PUT", path: "/db", status: 201},
		{name: "put", method: "PUT", path: "/db/a%E2%80%A8b", body: `{"v":"` + value + `"}`, status: 201},
		{name: "bulk_docs", method: "POST", path: "/db/_bulk_docs", body: `{"docs":[{"_id":"` + id + `2","v":"` + value + `"}]}`, status: 201},
		{name: "get", method: "GET", path: "/db/a%E2%80%A8b", status: 200},
		{name: "all_docs", method: "GET", path: "/db/_all_docs", status: 200},
		{name: "changes", method: "GET", path: "/db/_changes", status: 200},
		{name: "ddoc", method: "PUT", path: "/db/_design/v", body: `{"views":{"v":{"map":"function(doc){ emit(doc._id, doc.v); }"}}}`, status: 201},
		{name: "view", method: "GET", path: "/db/_design/v/_view/v", status: 200},
		{name: "find", method: "POST", path: "/db/_find", body: `{"selector":{"v":"` + value + `"}}`, status: 200},
	}
	for _, s := range steps {
		resp, b := s.do(t, ts.URL)
		if resp.StatusCode != s.status {
			t.Fatalf("%s: status %d: %s", s.name, resp.StatusCode, b)
		}
		if bytes.Contains(b, []byte(`\u2028`)) || bytes.Contains(b, []byte(`\u2029`)) {
			t.Errorf("%s: escaped a line separator: %s", s.name, b)
		}
		if s.name != "db" && s.name != "ddoc" && !bytes.Contains(b, []byte(`"`+id)) {
			t.Errorf("%s: the id is not in %s", s.name, b)
		}
	}
}

// TestRevGenerationBounds (issue 11 item 6): a client-supplied generation
// past revtree.MaxImportGen is refused, so no doc can reach a generation
// whose next update would wrap; a doc at the bound still updates and
// deletes.
func TestRevGenerationBounds(t *testing.T) {
	ts, _ := newTestServer(t)
	const bad = `"error":"bad_request","reason":"Invalid rev format"`
	runSteps(t, ts.URL, []step{
		{name: "db", method: "PUT", path: "/db", status: 201},
		{name: "int64 max", method: "POST", path: "/db/_bulk_docs", body: `{"new_edits":false,"docs":[{"_id":"a","_rev":"9223372036854775807-aaaa"}]}`, status: 201, has: []string{bad}},
		{name: "2^53", method: "POST", path: "/db/_bulk_docs", body: `{"new_edits":false,"docs":[{"_id":"a","_rev":"9007199254740992-aaaa"}]}`, status: 201, has: []string{bad}},
		{name: "revisions start int64 max", method: "POST", path: "/db/_bulk_docs", body: `{"new_edits":false,"docs":[{"_id":"a","_revisions":{"start":9223372036854775807,"ids":["aaaa"]}}]}`, status: 201, has: []string{bad}},
		{name: "revisions start negative", method: "POST", path: "/db/_bulk_docs", body: `{"new_edits":false,"docs":[{"_id":"a","_revisions":{"start":-1,"ids":["aaaa"]}}]}`, status: 400},
		{name: "put new_edits false", method: "PUT", path: "/db/a?new_edits=false", body: `{"_rev":"9223372036854775807-aaaa"}`, status: 400, has: []string{bad}},
		{name: "at the bound", method: "POST", path: "/db/_bulk_docs", body: `{"new_edits":false,"docs":[{"_id":"b","_rev":"9007199254740991-bbbb"}]}`, status: 201, want: `[]`},
		{name: "update at the bound", method: "PUT", path: "/db/b", body: `{"_rev":"9007199254740991-bbbb","x":1}`, status: 201, has: []string{`"rev":"9007199254740992-`}},
		{name: "nothing wrapped", method: "GET", path: "/db/_all_docs", status: 200, has: []string{`"rev":"9007199254740992-`}},
		{name: "not planted", method: "GET", path: "/db/a", status: 404},
	})
}

// TestLocalDocsAsCouchDB3: _local docs have no conflict check, revs 0-N,
// _revisions on ?revs=true, and a Location with the slash escaped.
func TestLocalDocsAsCouchDB3(t *testing.T) {
	ts, _ := newTestServer(t)
	runSteps(t, ts.URL, []step{
		{name: "db", method: "PUT", path: "/ldb", status: 201},
		{name: "create", method: "PUT", path: "/ldb/_local/x", body: `{"a":1}`, status: 201, want: `{"ok":true,"id":"_local/x","rev":"0-1"}`,
			header: map[string]string{"Location": ts.URL + "/ldb/_local%2Fx"}},
		{name: "again without _rev", method: "PUT", path: "/ldb/_local/x", body: `{"a":2}`, status: 201, want: `{"ok":true,"id":"_local/x","rev":"0-1"}`},
		{name: "a stale _rev", method: "PUT", path: "/ldb/_local/x", body: `{"_rev":"0-9","a":3}`, status: 201, want: `{"ok":true,"id":"_local/x","rev":"0-10"}`},
		{name: "a bad _rev", method: "PUT", path: "/ldb/_local/x", body: `{"_rev":"0-z","a":3}`, status: 400},
		{name: "revs", method: "GET", path: "/ldb/_local/x?revs=true", status: 200, want: `{"_id":"_local/x","_rev":"0-10","a":3,"_revisions":{"start":0,"ids":["10"]}}`},
		{name: "delete without rev", method: "DELETE", path: "/ldb/_local/x", status: 200, want: `{"ok":true,"id":"_local/x","rev":"0-0"}`},
		{name: "gone", method: "GET", path: "/ldb/_local/x", status: 404},
		{name: "delete a missing one", method: "DELETE", path: "/ldb/_local/x", status: 404, want: `{"error":"not_found","reason":"missing"}`},
	})
}
