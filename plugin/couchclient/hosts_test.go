package couchclient

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
)

// countingServer answers {} and counts its requests.
func countingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		if h != nil {
			h(w, r)
			return
		}
		w.Write([]byte(`{}`))
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// policyPool is a pool under a host policy (bad entries included, which
// make it invalid), its server at localURL.
func policyPool(t *testing.T, localURL string, cfg map[string]string) *Pool {
	t.Helper()
	o, _ := parse.OptionsFromConfig(cfg)
	p := NewPool(PoolOptions{RetryWait: 5 * time.Millisecond, LocalURL: localURL})
	t.Cleanup(func() { p.Close() })
	p.Configure(o)
	return p
}

// getAs sends one GET as the endpoint of rep; nil when it got an answer.
func getAs(p *Pool, ep parse.Endpoint, rep *parse.Rep) error {
	resp, err := p.Endpoint(ep, rep).Do(context.Background(), &Request{Method: "GET", Buffer: true})
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

var (
	bob   = &parse.Rep{UserCtx: parse.UserCtx{Name: "bob"}, RetriesPerRequest: 3}
	admin = &parse.Rep{UserCtx: parse.UserCtx{Name: "admin", Roles: []string{"_admin"}}, RetriesPerRequest: 3}
)

// loopback is a denied_networks value holding both loopback networks, so
// that "localhost" is denied whichever address it resolves to.
const loopback = "127.0.0.0/8, ::1"

// TestHostPolicyDial (issue #30 item 14): a restricted replication cannot
// reach a host the policy forbids: a literal address is refused before any
// connection, a name that resolves into a denied network when connecting,
// not retried; the server's own origin and a host allowed_hosts names stay
// reachable, and admins are not restricted.
func TestHostPolicyDial(t *testing.T) {
	local, _ := countingServer(t, nil)
	other, otherHits := countingServer(t, nil)
	otherLocalhost := onLocalhost(t, other)
	otherPort := strings.TrimPrefix(otherLocalhost, "http://localhost:")
	cases := []struct {
		name    string
		cfg     map[string]string
		url     string
		rep     *parse.Rep
		allowed bool
	}{
		{"no policy", nil, other.URL, bob, true},
		{"denied address", map[string]string{"denied_networks": loopback}, other.URL, bob, false},
		{"a name resolving into a denied network", map[string]string{"denied_networks": loopback}, otherLocalhost, bob, false},
		{"an admin", map[string]string{"denied_networks": loopback}, otherLocalhost, admin, true},
		{"no replication (nil rep)", map[string]string{"denied_networks": loopback}, otherLocalhost, nil, true},
		{"the server itself", map[string]string{"denied_networks": loopback}, local.URL, bob, true},
		{"a name allowed_hosts names", map[string]string{"denied_networks": loopback, "allowed_hosts": "localhost:" + otherPort}, otherLocalhost, bob, true},
		{"that name on another port", map[string]string{"denied_networks": loopback, "allowed_hosts": "localhost:1"}, otherLocalhost, bob, false},
		{"an address allowed_hosts holds", map[string]string{"denied_networks": loopback, "allowed_hosts": "127.0.0.1:" + otherPort}, otherLocalhost, bob, true},
		{"not on the allow list", map[string]string{"allowed_hosts": "couch.example.com"}, otherLocalhost, bob, false},
		{"* does not open denied networks", map[string]string{"denied_networks": loopback, "allowed_hosts": "*"}, otherLocalhost, bob, false},
		{"an invalid policy", map[string]string{"denied_networks": "127.0.0.0/88"}, otherLocalhost, bob, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := policyPool(t, local.URL+"/", tc.cfg)
			before := otherHits.Load()
			err := getAs(p, parse.Endpoint{URL: tc.url + "/db/"}, tc.rep)
			switch {
			case tc.allowed && err != nil:
				t.Fatalf("refused: %v", err)
			case !tc.allowed && !errors.Is(err, ErrNotAllowed):
				t.Fatalf("err = %v, want ErrNotAllowed", err)
			case !tc.allowed && otherHits.Load() != before:
				t.Fatalf("the forbidden host got a request")
			}
			if st := p.Stats(); !tc.allowed && st.Retries != 0 {
				t.Errorf("a refused request was retried %d times", st.Retries)
			}
		})
	}
}

// TestHostPolicyRedirect: a restricted endpoint is not redirected to a
// forbidden host, whether its address is literal or a name resolves to it.
func TestHostPolicyRedirect(t *testing.T) {
	other, otherHits := countingServer(t, nil)
	for _, to := range []string{other.URL, onLocalhost(t, other)} {
		local, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, to+r.URL.Path, http.StatusFound)
		})
		p := policyPool(t, local.URL, map[string]string{"denied_networks": loopback})
		if err := getAs(p, parse.Endpoint{URL: local.URL + "/db/"}, bob); !errors.Is(err, ErrNotAllowed) {
			t.Errorf("redirect to %s: err %v, want ErrNotAllowed", to, err)
		}
		if err := getAs(p, parse.Endpoint{URL: local.URL + "/db/"}, admin); err != nil {
			t.Errorf("redirect to %s as admin: %v", to, err)
		}
	}
	if n := otherHits.Load(); n != 2 {
		t.Errorf("the redirect target got %d requests, want the admin's 2", n)
	}
}

// TestHostPolicyChange: a policy set at runtime applies to the next
// request; a connection made before it is not used again (the name's
// address is checked when connecting).
func TestHostPolicyChange(t *testing.T) {
	other, _ := countingServer(t, nil)
	p := policyPool(t, "", nil)
	c := p.Endpoint(parse.Endpoint{URL: onLocalhost(t, other) + "/db/"}, bob)
	do := func() error {
		resp, err := c.Do(context.Background(), &Request{Method: "GET", Buffer: true})
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := do(); err != nil {
		t.Fatal(err)
	}
	o, _ := parse.OptionsFromConfig(map[string]string{"denied_networks": loopback})
	p.Configure(o)
	if err := do(); !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("after denying loopback: %v", err)
	}
	p.Configure(parse.DefaultOptions())
	if err := do(); err != nil {
		t.Fatalf("after lifting the policy: %v", err)
	}
}

// TestHostPolicyProxy: through a proxy the replicator connects to the
// proxy, which the policy judges like any host; the host behind it is
// judged as written (the proxy resolves names).
func TestHostPolicyProxy(t *testing.T) {
	proxy, proxied := countingServer(t, nil)
	proxyByName := onLocalhost(t, proxy)
	port := strings.TrimPrefix(proxyByName, "http://localhost:")
	cfg := map[string]string{"denied_networks": loopback, "allowed_hosts": "localhost:" + port + ", *"}
	cases := []struct {
		name, url, proxy string
		allowed          bool
	}{
		{"a name behind an allowed proxy", "http://couch.invalid:5984/db/", proxyByName, true},
		{"a denied address behind an allowed proxy", "http://127.0.0.1:5984/db/", proxyByName, false},
		{"a denied proxy", "http://couch.invalid:5984/db/", proxy.URL, false},
	}
	for _, tc := range cases {
		p := policyPool(t, "", cfg)
		before := proxied.Load()
		err := getAs(p, parse.Endpoint{URL: tc.url, Proxy: tc.proxy}, bob)
		if tc.allowed != (err == nil) || !tc.allowed && !errors.Is(err, ErrNotAllowed) {
			t.Errorf("%s: err %v, want allowed %v", tc.name, err, tc.allowed)
		}
		if got := proxied.Load() - before; tc.allowed != (got == 1) {
			t.Errorf("%s: the proxy got %d requests", tc.name, got)
		}
	}
}

// TestHostPolicyLocalOrigin: only the server's own origin is exempt, not
// another name or port of its host.
func TestHostPolicyLocalOrigin(t *testing.T) {
	local, _ := countingServer(t, nil)
	u, _ := url.Parse(local.URL)
	p := policyPool(t, local.URL+"/", map[string]string{"denied_networks": loopback})
	for _, tc := range []struct {
		url     string
		allowed bool
	}{
		{local.URL + "/db/", true},
		{"http://127.0.0.1:" + u.Port() + "/other%2Fdb/", true},
		{onLocalhost(t, local) + "/db/", false},
		{"http://127.0.0.1:1/db/", false},
	} {
		err := getAs(p, parse.Endpoint{URL: tc.url}, bob)
		if tc.allowed != (err == nil) {
			t.Errorf("%s: %v, want allowed %v", tc.url, err, tc.allowed)
		}
	}
}
