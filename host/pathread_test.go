package host

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"regexp"
	"strings"
	"testing"

	"github.com/couchepi/couchepi/hooks"
)

// pathRouter is a router in front of a server that reads paths its own
// way: rewrite turns the escaped path into the one the server splits.
type pathRouter struct {
	name    string
	rewrite func(escaped string) string
	decoded bool // routes on r.URL.Path: %2F is a slash
}

func (p pathRouter) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = r.Clone(r.Context())
		u := *r.URL
		escaped := u.EscapedPath()
		if p.decoded {
			escaped = (&url.URL{Path: u.Path}).EscapedPath()
		}
		escaped = p.rewrite(escaped)
		u.Path, _ = url.PathUnescape(escaped)
		u.RawPath = escaped
		r.URL = &u
		next.ServeHTTP(w, r)
	})
}

var slashes = regexp.MustCompile(`/+`)

// pathRouters read paths as routers in Go servers do.
var pathRouters = []pathRouter{
	{name: "verbatim", rewrite: func(p string) string { return p }},
	{name: "merges //", rewrite: func(p string) string { return slashes.ReplaceAllString(p, "/") }},
	{name: "cleans like ServeMux", rewrite: func(p string) string {
		c := path.Clean(p)
		if strings.HasSuffix(p, "/") && c != "/" {
			c += "/"
		}
		return c
	}},
	{name: "decodes %2F", decoded: true, rewrite: func(p string) string { return p }},
	{name: "cuts ;params", rewrite: func(p string) string {
		segs := strings.Split(p, "/")
		for i, s := range segs {
			segs[i], _, _ = strings.Cut(s, ";")
		}
		return strings.Join(segs, "/")
	}},
}

// TestMiddlewarePathReadings (issue 38 item 3): whatever way the server
// behind reads a path, a non-admin never reads a doc of a filtered db
// past after_doc_read nor writes one past before_doc_update: the
// middleware classifies the request as the server will, or refuses it
// with 400. Requests to dbs no plugin subscribes to pass whatever their
// form.
func TestMiddlewarePathReadings(t *testing.T) {
	h, mem := newTestHost(t, Config{Config: guardConfig(nil)}, Spec{Path: docguardV1})
	users := map[string]hooks.UserCtx{"admin": {Name: "admin", Roles: []string{"_admin"}}, "bob": {Name: "bob"}}
	gets := []string{
		"/x_guarded//d1", "//x_guarded/d1", "/x_guarded/d1/", "/x_guarded/./d1", "/x_guarded/d1/.",
		"/x_guarded/zz/../d1", "/plain/../x_guarded/d1", "/_utils/../x_guarded/d1", "/x_guarded/%2E/d1",
		"/x_guarded/%2e%2e/x_guarded/d1", "/x_guarded;p/d1", "/x_guarded/_design;p/../d1", "/x_guarded%2Fd1",
		"/x_guarded/zz%2F..%2Fd1", "/x_guarded/d1;p", "/x_guarded/d1//",
	}
	for _, rt := range pathRouters {
		t.Run(rt.name, func(t *testing.T) {
			next := &hooklessServer{s: mem}
			mw := &Middleware{Host: h, Next: rt.wrap(next),
				User: func(r *http.Request) hooks.UserCtx { return users[r.Header.Get("X-User")] }}
			srv := httptest.NewServer(mw)
			defer srv.Close()
			do := func(method, path, user, body string) (int, string) {
				t.Helper()
				req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("X-User", user)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			do("PUT", "/x_guarded", "admin", "")
			do("PUT", "/plain", "admin", "")
			if st, body := do("PUT", "/x_guarded/d1", "admin", `{"type":"t","owner":"o","secret":"hidden-value"}`); st != 201 {
				t.Fatalf("store d1: %d %s", st, body)
			}
			if st, body := do("GET", "/x_guarded/d1", "bob", ""); st != 200 || strings.Contains(body, "hidden-value") {
				t.Fatalf("the plain read: %d %s", st, body)
			}
			for _, p := range gets {
				st, body := do("GET", p, "bob", "")
				if strings.Contains(body, "hidden-value") {
					t.Errorf("GET %s: the filtered field reached a non-admin: %d %s", p, st, body)
				}
				if st == 400 && !strings.Contains(body, `"error":"bad_request"`) {
					t.Errorf("GET %s: %d %s", p, st, body)
				}
				// The same paths as writes of a doc the plugin refuses.
				w := strings.Replace(p, "d1", "bad", -1)
				do("PUT", w, "bob", `{"type":"t"}`)
				do("POST", strings.TrimSuffix(strings.Replace(w, "/bad", "", -1), "/"), "bob", `{"_id":"bad","type":"t"}`)
				if doc, err := mem.GetDoc(t.Context(), "x_guarded", "bad"); err == nil {
					t.Fatalf("PUT %s: an invalid doc was stored: %s", w, doc)
				}
			}
			// A method in lower case, which some servers take for its capitals.
			if st, body := do("put", "/x_guarded/bad", "admin", `{"type":"t"}`); st != 400 || !strings.Contains(body, "bad_request") {
				t.Errorf("put in lower case: %d %s", st, body)
			}
			// Other dbs are left alone, whatever their paths' form.
			for _, p := range []string{"/plain//p1", "/plain/./p1", "/plain/p1/", "/plain%2Fp1", "//plain/p1"} {
				if st, body := do("PUT", p, "bob", `{}`); st == 400 && strings.Contains(body, "plain form") {
					t.Errorf("PUT %s refused: %s", p, body)
				}
			}
		})
	}
}

// BenchmarkMiddlewarePathReading is what reading a plain path every way
// costs each request through the middleware.
func BenchmarkMiddlewarePathReading(b *testing.B) {
	m := &Middleware{}
	r := httptest.NewRequest("GET", "/_replicator/some-doc-id?revs=true", nil)
	b.ReportAllocs()
	for b.Loop() {
		if _, plain, _ := m.segments(r); !plain {
			b.Fatal("not plain")
		}
	}
}
