package couchclient

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
)

// TestSharedSessions: the endpoints of one pool with the same server and
// credentials log in once between them (a fan-out's jobs used to log in
// once each); other credentials log in on their own; a cookie renewed by
// one endpoint is the one the others retry a rejected request with,
// without logging in again.
func TestSharedSessions(t *testing.T) {
	cases := []struct {
		name         string
		users        []string // one endpoint each
		renewAfter   int      // the server rejects cookies older than this many logins (0: never)
		wantSessions int32
	}{
		{"one login for ten endpoints", []string{"bob", "bob", "bob", "bob", "bob", "bob", "bob", "bob", "bob", "bob"}, 0, 1},
		{"one login per user", []string{"bob", "ann", "bob", "ann"}, 0, 2},
		{"a renewed cookie is shared", []string{"bob", "bob", "bob"}, 1, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var sessions, gen atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/_session" {
					sessions.Add(1)
					r.ParseForm()
					g := gen.Add(1)
					http.SetCookie(w, &http.Cookie{Name: "AuthSession", Value: r.Form.Get("name") + "-" + strconv.Itoa(int(g)), MaxAge: 600})
					w.Write([]byte(`{"ok":true}`))
					return
				}
				ck, err := r.Cookie("AuthSession")
				if err != nil {
					w.WriteHeader(401)
					return
				}
				if who := r.URL.Query().Get("who"); who != "" {
					// The first renewAfter cookies have expired. The
					// others' requests (who > 0) are answered once the
					// first one's has renewed the cookie.
					n, _ := strconv.Atoi(ck.Value[len(ck.Value)-1:])
					for who != "0" && gen.Load() <= int32(tc.renewAfter) {
						time.Sleep(time.Millisecond)
					}
					if n <= tc.renewAfter {
						w.WriteHeader(401)
						return
					}
				}
				w.Write([]byte(`{}`))
			}))
			defer srv.Close()
			p := testPool()
			defer p.Close()
			var clients []*Client
			for _, u := range tc.users {
				clients = append(clients, p.Endpoint(parse.Endpoint{URL: srv.URL + "/db/", Auth: &parse.BasicAuth{Username: u, Password: "pw"}}, nil))
			}
			get := func(c *Client, query string) {
				resp, err := c.Do(context.Background(), &Request{Method: "GET", Path: "doc", Query: query, Buffer: true})
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Errorf("status %d", resp.StatusCode)
				}
			}
			var wg sync.WaitGroup
			for _, c := range clients {
				wg.Add(1)
				go func() { defer wg.Done(); get(c, "") }()
			}
			wg.Wait()
			if tc.renewAfter > 0 {
				// Every client's request is rejected: the first renews the
				// cookie, the others were sent with the old one and retry
				// with the new (a refresh is at most one per minRefreshGap).
				clients[0].auth.mu.Lock()
				clients[0].auth.lastRefresh = clients[0].auth.lastRefresh.Add(-2 * minRefreshGap)
				clients[0].auth.mu.Unlock()
				for i, c := range clients {
					wg.Add(1)
					go func() { defer wg.Done(); get(c, "who="+strconv.Itoa(i)) }()
				}
				wg.Wait()
			}
			if got := sessions.Load(); got != tc.wantSessions {
				t.Errorf("_session requests %d, want %d", got, tc.wantSessions)
			}
		})
	}
}
