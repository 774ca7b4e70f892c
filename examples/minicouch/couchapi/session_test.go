package couchapi

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// TestSessionAsCouchDB: POST /_session takes the user as `name` or, as
// CouchDB 3.5 also does, `username`, in JSON and form bodies; its cookie
// carries Expires and Max-Age on a login, a failed login and a logout
// alike; `next` and `fail` redirect. Expected answers are CouchDB 3.5.0's.
func TestSessionAsCouchDB(t *testing.T) {
	ts, _ := newTestServer(t)
	const form = "application/x-www-form-urlencoded"
	session := regexp.MustCompile(`^AuthSession=[A-Za-z0-9_-]+; Version=1; Expires=\w{3}, \d{2}-\w{3}-\d{4} \d{2}:\d{2}:\d{2} GMT; Max-Age=600; Path=/; HttpOnly$`)
	cleared := regexp.MustCompile(`^AuthSession=; Version=1; Expires=\w{3}, \d{2}-\w{3}-\d{4} \d{2}:\d{2}:\d{2} GMT; Max-Age=600; Path=/; HttpOnly$`)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		name, method, path, ctype, body string
		status                          int
		want                            string         // exact JSON body when set
		cookie                          *regexp.Regexp // the Set-Cookie header; nil: none
		location                        string         // the Location header's path
	}{
		{name: "json name", method: "POST", path: "/_session", ctype: "application/json", body: `{"name":"admin","password":"pass"}`,
			status: 200, want: `{"ok":true,"name":"admin","roles":["_admin"]}`, cookie: session},
		{name: "json username", method: "POST", path: "/_session", ctype: "application/json", body: `{"username":"admin","password":"pass"}`,
			status: 200, want: `{"ok":true,"name":"admin","roles":["_admin"]}`, cookie: session},
		{name: "form username", method: "POST", path: "/_session", ctype: form, body: `username=admin&password=pass`,
			status: 200, want: `{"ok":true,"name":"admin","roles":["_admin"]}`, cookie: session},
		{name: "form name", method: "POST", path: "/_session", ctype: form, body: `name=admin&password=pass`,
			status: 200, want: `{"ok":true,"name":"admin","roles":["_admin"]}`, cookie: session},
		{name: "both, the same", method: "POST", path: "/_session", ctype: "application/json", body: `{"name":"admin","username":"admin","password":"pass"}`,
			status: 200, cookie: session},
		{name: "both, different", method: "POST", path: "/_session", ctype: "application/json", body: `{"name":"admin","username":"bob","password":"pass"}`,
			status: 400, want: `{"error":"bad_request","reason":"request body contains different usernames"}`},
		{name: "no user", method: "POST", path: "/_session", ctype: form, body: `password=pass`,
			status: 400, want: `{"error":"bad_request","reason":"request body must contain a username"}`},
		{name: "wrong password", method: "POST", path: "/_session", ctype: "application/json", body: `{"username":"admin","password":"nope"}`,
			status: 401, want: `{"error":"unauthorized","reason":"Name or password is incorrect."}`, cookie: cleared},
		{name: "other content type", method: "POST", path: "/_session", ctype: "text/plain", body: `name=admin`,
			status: 415, want: `{"error":"bad_content_type","reason":"Content-Type must be 'application/x-www-form-urlencoded' or 'application/json'"}`},
		{name: "next", method: "POST", path: "/_session?next=/_all_dbs", ctype: form, body: `name=admin&password=pass`,
			status: 302, want: `{"ok":true,"name":"admin","roles":["_admin"]}`, cookie: session, location: "/_all_dbs"},
		{name: "fail", method: "POST", path: "/_session?fail=/login", ctype: form, body: `name=admin&password=nope`,
			status: 302, want: `{"error":"unauthorized","reason":"Name or password is incorrect."}`, cookie: cleared, location: "/login"},
		{name: "logout", method: "DELETE", path: "/_session", status: 200, want: `{"ok":true}`, cookie: cleared},
		{name: "logout next", method: "DELETE", path: "/_session?next=/", status: 302, want: `{"ok":true}`, cookie: cleared, location: "/"},
		{name: "anonymous", method: "GET", path: "/_session", status: 200,
			want: `{"ok":true,"userCtx":{"name":null,"roles":[]},"info":{"authentication_handlers":["cookie","default"]}}`},
		{name: "basic asks for a login", method: "GET", path: "/_session?basic=true", status: 401,
			want: `{"error":"unauthorized","reason":"Please login."}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, ts.URL+tc.path, strings.NewReader(tc.body))
			if tc.ctype != "" {
				req.Header.Set("Content-Type", tc.ctype)
			}
			resp, err := noRedirect.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, b)
			}
			if tc.want != "" && !jsonEqual(b, []byte(tc.want)) {
				t.Errorf("body %s, want %s", b, tc.want)
			}
			got := resp.Header.Values("Set-Cookie")
			switch {
			case tc.cookie == nil && len(got) > 0:
				t.Errorf("Set-Cookie %q, want none", got)
			case tc.cookie != nil && (len(got) != 1 || !tc.cookie.MatchString(got[0])):
				t.Errorf("Set-Cookie %q, want %s", got, tc.cookie)
			}
			wantLoc := ""
			if tc.location != "" {
				wantLoc = ts.URL + tc.location
			}
			if loc := resp.Header.Get("Location"); loc != wantLoc {
				t.Errorf("Location %q, want %q", loc, wantLoc)
			}
		})
	}
}

// TestSessionCookieAttributes: [chttpd_auth] cookie_domain and same_site,
// and allow_persistent_cookies = false, shape the cookie of every answer
// as in CouchDB.
func TestSessionCookieAttributes(t *testing.T) {
	ts, srv := newTestServer(t)
	srv.cfg.Set("chttpd_auth", "cookie_domain", "example.org")
	srv.cfg.Set("chttpd_auth", "same_site", "Strict")
	srv.cfg.Set("chttpd_auth", "allow_persistent_cookies", "false")
	for _, tc := range []struct{ name, body, want string }{
		{"login", `{"name":"admin","password":"pass"}`, `^AuthSession=[A-Za-z0-9_-]+; Version=1; Domain=example.org; Path=/; HttpOnly; SameSite=Strict$`},
		{"failed login", `{"name":"admin","password":"nope"}`, `^AuthSession=; Version=1; Domain=example.org; Path=/; HttpOnly; SameSite=Strict$`},
	} {
		resp, _ := step{method: "POST", path: "/_session", body: tc.body, user: "-"}.do(t, ts.URL)
		if c := resp.Header.Get("Set-Cookie"); !regexp.MustCompile(tc.want).MatchString(c) {
			t.Errorf("%s: Set-Cookie %q, want %s", tc.name, c, tc.want)
		}
	}
}
