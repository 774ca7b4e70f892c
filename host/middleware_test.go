package host

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/couchepi/couchepi/hooks"
)

// hooklessServer is a CouchDB-like HTTP server over a memServer that knows
// nothing of plugins, as a server a Middleware wraps: it counts the
// requests that reach it.
type hooklessServer struct {
	s      *memServer
	served atomic.Int64
}

func (h *hooklessServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.served.Add(1)
	segs := splitEscaped(r.URL.EscapedPath())
	body, _ := io.ReadAll(r.Body)
	switch {
	case len(segs) == 1 && segs[0] == "_active_tasks":
		hooks.WriteJSON(w, 200, []map[string]string{{"type": "indexer"}})
	case len(segs) == 1 && r.Method == "PUT":
		h.s.mu.Lock()
		h.s.dbs[segs[0]] = &memDB{uuid: "uuid-" + segs[0], docs: map[string]*memDoc{}}
		h.s.mu.Unlock()
		hooks.WriteJSON(w, 201, map[string]bool{"ok": true})
	case len(segs) == 1 && r.Method == "DELETE":
		h.s.mu.Lock()
		delete(h.s.dbs, segs[0])
		h.s.mu.Unlock()
		hooks.WriteJSON(w, 200, map[string]bool{"ok": true})
	case len(segs) == 2 && segs[1] == "_bulk_docs":
		hooks.WriteJSON(w, 201, []any{})
	case len(segs) == 1 && r.Method == "POST", len(segs) == 2 && (r.Method == "PUT" || r.Method == "DELETE"):
		var doc map[string]any
		if r.Method == "DELETE" {
			doc = map[string]any{"_id": segs[1], "_rev": r.URL.Query().Get("rev"), "_deleted": true}
		} else if json.Unmarshal(body, &doc) != nil {
			hooks.WriteError(w, &hooks.Error{Status: 400, Err: "bad_request", Reason: "invalid UTF-8 JSON"})
			return
		}
		if len(segs) == 2 {
			doc["_id"] = segs[1]
		}
		b, _ := json.Marshal(doc)
		ev, err := h.s.store(segs[0], b)
		if err != nil {
			hooks.WriteError(w, err)
			return
		}
		hooks.WriteJSON(w, 201, map[string]any{"ok": true, "id": ev.DocID, "rev": ev.Rev})
	case len(segs) == 2 && r.Method == "GET":
		doc, err := h.s.GetDoc(r.Context(), segs[0], segs[1])
		if err != nil {
			hooks.WriteError(w, err)
			return
		}
		w.Header().Set("ETag", `"etag"`)
		w.Write(doc)
	default:
		hooks.WriteError(w, hooks.NotFound("missing"))
	}
}

// written is a Middleware.Written over the memServer.
func (h *hooklessServer) written(_ context.Context, db, id, rev string) (hooks.DocWrite, error) {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	d := h.s.dbs[db].docs[id]
	return hooks.DocWrite{DB: db, DBUUID: h.s.dbs[db].uuid, DocID: id, Rev: d.rev, Seq: strconv.Itoa(d.seq), Deleted: d.deleted, Doc: d.body}, nil
}

// TestMiddleware drives a server that knows nothing of plugins through
// Middleware with docguard loaded: refused writes never reach the server,
// accepted ones are audited, reads are filtered, plugin routes and tasks
// are served.
func TestMiddleware(t *testing.T) {
	h, mem := newTestHost(t, Config{Config: guardConfig(nil)}, Spec{Path: docguardV1})
	next := &hooklessServer{s: mem}
	users := map[string]hooks.UserCtx{"admin": {Name: "admin", Roles: []string{"_admin"}}, "bob": {Name: "bob"}}
	mw := &Middleware{Host: h, Next: next, Written: next.written,
		User:      func(r *http.Request) hooks.UserCtx { return users[r.Header.Get("X-User")] },
		DBCreated: func(db string) string { return "uuid-" + db },
		DBDeleted: func(db string) string { return "uuid-" + db },
	}
	srv := httptest.NewServer(mw)
	defer srv.Close()
	do := func(method, path, user, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("X-User", user)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	steps := []struct {
		name, method, path, user, body string
		status                         int
		has                            string
		reachesServer                  bool
	}{
		{"create a guarded db", "PUT", "/x_guarded", "admin", "", 201, `"ok":true`, true},
		{"create an audited db", "PUT", "/audit_a", "admin", "", 201, `"ok":true`, true},
		{"refused PUT", "PUT", "/x_guarded/d1", "bob", `{"type":"t"}`, 403, `Document is missing required field \"owner\".`, false},
		{"refused POST", "POST", "/x_guarded", "bob", `{"_id":"d1","owner":"o"}`, 403, `required field \"type\"`, false},
		{"not JSON", "PUT", "/x_guarded/d1", "bob", `{"type"`, 400, `invalid UTF-8 JSON`, false},
		{"nested too deeply", "PUT", "/x_guarded/d1", "bob", `{"type":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`, 400, `"JSON nested too deeply: more than 10000 levels of objects and arrays"`, false},
		{"accepted PUT", "PUT", "/x_guarded/d1", "bob", `{"type":"t","owner":"o","secret":"s"}`, 201, `"id":"d1"`, true},
		{"accepted POST", "POST", "/x_guarded", "bob", `{"_id":"d2","type":"t","owner":"o"}`, 201, `"id":"d2"`, true},
		{"write to an audited db", "PUT", "/audit_a/a1", "bob", `{}`, 201, `"id":"a1"`, true},
		{"write elsewhere", "PUT", "/plain/p1", "bob", `{}`, 404, ``, true},
		{"_bulk_docs to a guarded db", "POST", "/x_guarded/_bulk_docs", "bob", `{"docs":[{}]}`, 501, `not_implemented`, false},
		{"_bulk_docs elsewhere", "POST", "/audit_a/_bulk_docs", "bob", `{"docs":[{}]}`, 201, `[]`, true},
		{"attachment to a guarded db", "PUT", "/x_guarded/d1/f.txt", "bob", `hi`, 501, `not_implemented`, false},
		{"a reader does not see the secret", "GET", "/x_guarded/d1", "bob", "", 200, `"owner":"o"`, true},
		{"_changes of a filtered db", "GET", "/x_guarded/_changes", "bob", "", 403, `Only admins may read x_guarded this way`, false},
		{"_all_docs of a filtered db", "GET", "/x_guarded/_all_docs", "bob", "", 403, `Only admins may read x_guarded this way`, false},
		{"_revs_diff of a filtered db", "POST", "/x_guarded/_revs_diff", "bob", `{"d1":["9-a"]}`, 403, `Only admins may read x_guarded this way`, false},
		{"_missing_revs of a filtered db", "POST", "/x_guarded/_missing_revs", "bob", `{"d1":["9-a"]}`, 403, `Only admins may read x_guarded this way`, false},
		{"_all_docs/queries of a filtered db", "POST", "/x_guarded/_all_docs/queries", "bob", `{"queries":[{}]}`, 403, `Only admins may read x_guarded this way`, false},
		{"POST _all_docs of a filtered db", "POST", "/x_guarded/_all_docs", "bob", `{"keys":["d1"]}`, 403, `Only admins may read x_guarded this way`, false},
		{"_design_docs of a filtered db", "GET", "/x_guarded/_design_docs", "bob", ``, 403, `Only admins may read x_guarded this way`, false},
		{"_design_docs/queries of a filtered db", "POST", "/x_guarded/_design_docs/queries", "bob", `{"queries":[{}]}`, 403, `Only admins may read x_guarded this way`, false},
		{"POST _changes of a filtered db", "POST", "/x_guarded/_changes?filter=_doc_ids", "bob", `{"doc_ids":["d1"]}`, 403, `Only admins may read x_guarded this way`, false},
		{"_bulk_get of a filtered db", "POST", "/x_guarded/_bulk_get", "bob", `{"docs":[{"id":"d1"}]}`, 403, `Only admins may read x_guarded this way`, false},
		{"_find of a filtered db", "POST", "/x_guarded/_find", "bob", `{"selector":{}}`, 403, `Only admins may read x_guarded this way`, false},
		{"_explain of a filtered db", "POST", "/x_guarded/_explain", "bob", `{"selector":{}}`, 403, `Only admins may read x_guarded this way`, false},
		{"_purged_infos of a filtered db", "GET", "/x_guarded/_purged_infos", "bob", ``, 403, `Only admins may read x_guarded this way`, false},
		{"a view of a filtered db", "GET", "/x_guarded/_design/v/_view/all?include_docs=TRUE", "bob", ``, 403, `Only admins may read x_guarded this way`, false},
		{"a partition of a filtered db", "GET", "/x_guarded/_partition/p/_all_docs", "bob", ``, 403, `Only admins may read x_guarded this way`, false},
		{"OPEN_REVS of a filtered db", "GET", "/x_guarded/d1?OPEN_REVS=all", "bob", ``, 403, `Only admins may read x_guarded this way`, false},
		{"COPY of a filtered db", "COPY", "/x_guarded/d1", "bob", ``, 403, `Only admins may read x_guarded this way`, false},
		{"an _update function of a guarded db", "POST", "/x_guarded/_design/u/_update/f/d1", "admin", `{}`, 501, `not_implemented`, false},
		{"a _rewrite of a guarded db", "PUT", "/x_guarded/_design/u/_rewrite/d1", "admin", `{}`, 501, `not_implemented`, false},
		{"a form POST to a doc of a guarded db", "POST", "/x_guarded/d1", "admin", `x`, 501, `not_implemented`, false},
		{"_security of a filtered db", "GET", "/x_guarded/_security", "bob", ``, 404, ``, true},
		{"_all_docs/queries, as an admin", "POST", "/x_guarded/_all_docs/queries", "admin", `{}`, 404, ``, true},
		{"_revs_diff, as an admin", "POST", "/x_guarded/_revs_diff", "admin", `{"d1":["9-a"]}`, 404, ``, true},
		{"_revs_diff elsewhere", "POST", "/audit_a/_revs_diff", "bob", `{"a1":["9-a"]}`, 404, ``, true},
		{"plugin route, as its user", "POST", "/_docguard/echo", "bob", `hello`, 200, `"user":{"name":"bob"`, false},
		{"active tasks merged", "GET", "/_active_tasks", "admin", "", 200, `"type":"indexer"`, true},
	}
	for _, s := range steps {
		before := next.served.Load()
		st, body := do(s.method, s.path, s.user, s.body)
		if st != s.status || !strings.Contains(body, s.has) {
			t.Errorf("%s: %d %s, want %d with %s", s.name, st, body, s.status, s.has)
		}
		if reached := next.served.Load() > before; reached != s.reachesServer {
			t.Errorf("%s: reached the server = %v, want %v", s.name, reached, s.reachesServer)
		}
	}
	if _, body := do("GET", "/x_guarded/d1", "bob", ""); strings.Contains(body, "secret") {
		t.Errorf("non-admin read shows the hidden field: %s", body)
	}
	if _, body := do("GET", "/x_guarded/d1", "admin", ""); !strings.Contains(body, `"secret":"s"`) {
		t.Errorf("admin read lost the field: %s", body)
	}
	// HEAD answers with the headers of the filtered GET: the ETag of the
	// revision the GET shows, a length that is the filtered body's.
	for _, user := range []string{"bob", "admin"} {
		req, _ := http.NewRequest("HEAD", srv.URL+"/x_guarded/d1", nil)
		req.Header.Set("X-User", user)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		_, get := do("GET", "/x_guarded/d1", user, "")
		if resp.StatusCode != 200 || resp.ContentLength != int64(len(get)) {
			t.Errorf("HEAD as %s: %d, length %d; the GET has %d bytes", user, resp.StatusCode, resp.ContentLength, len(get))
		}
		want := `"etag"`
		if user == "bob" {
			want = `"` + docRev([]byte(get)) + `"`
		}
		if etag := resp.Header.Get("ETag"); etag != want {
			t.Errorf("HEAD as %s: ETag %q", user, etag)
		}
	}
	if _, body := do("GET", "/_active_tasks", "admin", ""); !strings.Contains(body, `"type":"docguard_audit"`) {
		t.Errorf("active tasks lack the plugin's: %s", body)
	}
	eventually(t, 10*time.Second, "the accepted writes audited", func() bool {
		s := stats(t, h)
		return s.Audit["x_guarded"].Docs == 2 && s.Audit["audit_a"].Docs == 1
	})
}

// TestDocOfNamesTheRevision: before_doc_update sees the revision a write
// names wherever the request gives it, as CouchDB's hook does: a PUT with
// ?rev= or If-Match and no _rev in its body is an update, not a create
// (the replicator stops an edited doc's run only for updates).
func TestDocOfNamesTheRevision(t *testing.T) {
	for _, tc := range []struct {
		name, method, query, ifMatch, body string
		want                               string // the doc's _rev, "" for none
	}{
		{"create", "PUT", "", "", `{"a":1}`, ""},
		{"rev in the body", "PUT", "", "", `{"_rev":"1-a","a":1}`, "1-a"},
		{"?rev=", "PUT", "?rev=2-b", "", `{"a":1}`, "2-b"},
		{"If-Match", "PUT", "", `"3-c"`, `{"a":1}`, "3-c"},
		{"the body's wins", "PUT", "?rev=2-b", "", `{"_rev":"1-a"}`, "1-a"},
		{"DELETE ?rev=", "DELETE", "?rev=4-d", "", ``, "4-d"},
		{"DELETE If-Match", "DELETE", "", `"5-e"`, ``, "5-e"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, "/db/doc"+tc.query, strings.NewReader(tc.body))
			if tc.ifMatch != "" {
				r.Header.Set("If-Match", tc.ifMatch)
			}
			b, herr := (&Middleware{}).docOf(r, "doc")
			if herr != nil {
				t.Fatal(herr)
			}
			var doc struct {
				ID  string `json:"_id"`
				Rev string `json:"_rev"`
			}
			if err := json.Unmarshal(b, &doc); err != nil || doc.ID != "doc" || doc.Rev != tc.want {
				t.Fatalf("doc %s (%v), want _id doc and _rev %q", b, err, tc.want)
			}
		})
	}
}
