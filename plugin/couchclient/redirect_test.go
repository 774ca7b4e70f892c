package couchclient

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/couchepi/couchepi/parse"
)

// seen records the requests a test server received.
type seen struct {
	mu   sync.Mutex
	reqs []seenRequest
}

type seenRequest struct {
	method, path, body string
	header             http.Header
}

func (s *seen) add(r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, seenRequest{r.Method, r.URL.Path, string(b), r.Header.Clone()})
}

func (s *seen) all() []seenRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seenRequest(nil), s.reqs...)
}

// onLocalhost returns srv's URL with "localhost" as its host: another
// origin than srv.URL (127.0.0.1) on the same machine.
func onLocalhost(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return "http://localhost:" + u.Port()
}

// TestRedirectDropsCredentials (issue #30 item 11): a redirect from the
// endpoint's origin to another scheme, host or port carries neither the
// endpoint's credentials (basic auth, the session cookie) nor its user
// headers, for the rest of the chain; a redirect within the origin keeps
// them. The redirecting server is on 127.0.0.1, the other on localhost or
// on another port.
func TestRedirectDropsCredentials(t *testing.T) {
	const token = "X-Token"
	cases := []struct {
		name string
		// session: the endpoint's server grants an AuthSession cookie
		// (else it has no _session and basic auth is used).
		session bool
		// to builds the Location of /db/doc's redirect from the two
		// servers' URLs ("home" redirects, "other" does not).
		to func(home, other, otherLocal string) string
		// endsHome: the chain ends at the endpoint's origin (else at the
		// other server); wantCreds: its last request carries the
		// credentials and the user header.
		endsHome, wantCreds bool
	}{
		{"basic auth, to localhost", false, func(h, o, ol string) string { return ol + "/db/doc" }, false, false},
		{"session cookie, to localhost", true, func(h, o, ol string) string { return ol + "/db/doc" }, false, false},
		{"basic auth, to another port of the same host", false, func(h, o, ol string) string { return o + "/db/doc" }, false, false},
		{"session cookie, to another port of the same host", true, func(h, o, ol string) string { return o + "/db/doc" }, false, false},
		{"basic auth, within the origin", false, func(h, o, ol string) string { return h + "/db/moved" }, true, true},
		{"session cookie, within the origin", true, func(h, o, ol string) string { return "/db/moved" }, true, true},
		{"back to the origin after leaving it", false, func(h, o, ol string) string { return ol + "/bounce?to=" + url.QueryEscape(h+"/db/moved") }, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var homeSeen, otherSeen seen
			other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				otherSeen.add(r)
				if to := r.URL.Query().Get("to"); r.URL.Path == "/bounce" && to != "" {
					http.Redirect(w, r, to, http.StatusFound)
					return
				}
				// A foreign session cookie must not become the endpoint's.
				http.SetCookie(w, &http.Cookie{Name: "AuthSession", Value: "foreign"})
				w.Write([]byte(`{"other":true}`))
			}))
			defer other.Close()
			var home *httptest.Server
			home = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				homeSeen.add(r)
				switch r.URL.Path {
				case "/_session":
					if !tc.session {
						http.NotFound(w, r)
						return
					}
					http.SetCookie(w, &http.Cookie{Name: "AuthSession", Value: "home-session"})
					w.Write([]byte(`{"ok":true}`))
				case "/db/doc":
					http.Redirect(w, r, tc.to(home.URL, other.URL, onLocalhost(t, other)), http.StatusFound)
				default:
					w.Write([]byte(`{"home":true}`))
				}
			}))
			defer home.Close()

			p := testPool()
			defer p.Close()
			ep := parse.Endpoint{URL: home.URL + "/db/", Auth: &parse.BasicAuth{Username: "u", Password: "secret"}, Headers: map[string]string{token: "t0ken"}}
			c := p.Endpoint(ep, &parse.Rep{RetriesPerRequest: 0})
			for i := 0; i < 2; i++ { // the second request after the foreign cookie
				resp, err := c.Do(context.Background(), &Request{Method: "GET", Path: "doc", Buffer: true})
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
			}

			hasCreds := func(r seenRequest) bool {
				return r.header.Get("Authorization") != "" || r.header.Get("Cookie") != "" || r.header.Get(token) != ""
			}
			for _, r := range otherSeen.all() {
				if hasCreds(r) {
					t.Errorf("the other origin got credentials on %s %s: %v", r.method, r.path, r.header)
				}
				if ref := r.header.Get("Referer"); ref != "" {
					t.Errorf("the other origin got the endpoint's URL as Referer: %s", ref)
				}
				if r.header.Get("User-Agent") != "CouchDB-Replicator/"+DefaultVersion || r.header.Get("Accept") != "application/json" {
					t.Errorf("the other origin lost the default headers: %v", r.header)
				}
			}
			var answered []seenRequest // home's requests other than the redirecting one
			for _, r := range homeSeen.all() {
				if strings.Contains(r.header.Get("Cookie"), "foreign") {
					t.Errorf("a cookie set by another origin came back to the endpoint: %v", r.header)
				}
				if r.path == "/db/doc" {
					if !hasCreds(r) || r.header.Get(token) != "t0ken" {
						t.Errorf("the endpoint's own request lacks its credentials: %v", r.header)
					}
					continue
				}
				if r.path != "/_session" {
					answered = append(answered, r)
				}
			}
			if tc.endsHome {
				if len(answered) != 2 {
					t.Fatalf("the origin answered %d redirected requests, want 2", len(answered))
				}
				for _, r := range answered {
					if hasCreds(r) != tc.wantCreds || tc.wantCreds && r.header.Get(token) != "t0ken" {
						t.Errorf("redirected request to %s: credentials %v, want %v (%v)", r.path, hasCreds(r), tc.wantCreds, r.header)
					}
				}
			} else if len(otherSeen.all()) != 2 {
				t.Fatalf("the other origin got %d requests, want 2", len(otherSeen.all()))
			}
		})
	}
}

// TestSessionNotRedirected: the `_session` POST carries the password in its
// body; a 307 would have Go's client send it on to wherever it points. It
// is not followed: the endpoint falls back to basic auth, whose header a
// redirect elsewhere drops.
func TestSessionNotRedirected(t *testing.T) {
	var otherSeen seen
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		otherSeen.add(r)
		w.Write([]byte(`{}`))
	}))
	defer other.Close()
	home := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/_session" {
			http.Redirect(w, r, onLocalhost(t, other)+"/_session", http.StatusTemporaryRedirect)
			return
		}
		if r.Header.Get("Authorization") == "" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.Write([]byte(`{}`))
	}))
	defer home.Close()
	p := testPool()
	defer p.Close()
	c := p.Endpoint(parse.Endpoint{URL: home.URL + "/db/", Auth: &parse.BasicAuth{Username: "u", Password: "secret"}}, &parse.Rep{RetriesPerRequest: 0})
	resp, err := c.Do(context.Background(), &Request{Method: "GET", Buffer: true})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: basic auth was not used after the session redirect", resp.StatusCode)
	}
	for _, r := range otherSeen.all() {
		t.Errorf("the other origin got %s %s body %q", r.method, r.path, r.body)
	}
}
