package couchclient

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/couchepi/couchepi/parse"
)

// errStray ends a connection the test's dialer would not make.
var errStray = errors.New("test: no connection but to 127.0.0.1 and ::1")

// watchDials makes p's connections go only to 127.0.0.1 and ::1, and send
// no DNS query: any other address that gets past the host policy is
// refused just before connecting, and returned by the function (the
// test fails on it or expects it).
func watchDials(t *testing.T, p *Pool) (dialed func() []string) {
	t.Helper()
	var mu sync.Mutex
	var got []string
	p.tuneDialer = func(d *net.Dialer) {
		d.ControlContext = func(_ context.Context, _, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err == nil && (ap.Addr() == netip.MustParseAddr("127.0.0.1") || ap.Addr() == netip.IPv6Loopback()) {
				return nil
			}
			mu.Lock()
			got = append(got, address)
			mu.Unlock()
			return errStray
		}
		d.Resolver = &net.Resolver{PreferGo: true, Dial: func(_ context.Context, _, address string) (net.Conn, error) {
			t.Errorf("a DNS query to %s", address)
			return nil, errStray
		}}
	}
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}
}

// unspecifiedHosts are the spellings of the local host of issue 38 item
// 1, as a URL writes them: all refused under a policy denying loopback.
var unspecifiedHosts = []string{
	"0.0.0.0", "[::]", "[::0]", "[0:0:0:0:0:0:0:0]", "[::ffff:0.0.0.0]", "0", "0.0.0.0.",
	"127.1", "2130706433", "0x7f000001", "0177.0.0.1", "[::ffff:127.0.0.1]", "[0:0:0:0:0:0:0:1]",
	"[::127.0.0.1]", "[64:ff9b::127.0.0.1]", "localhost", "localhost.", "LOCALHOST",
}

// TestHostPolicyUnspecifiedDial (issue 38 item 1): under `denied_networks
// = 127.0.0.0/8, ::1` no spelling of the local host reaches it, the
// unspecified addresses included, whether the endpoint, a redirect, a
// proxy or a connect_to override names it; refused before any connection.
func TestHostPolicyUnspecifiedDial(t *testing.T) {
	local, _ := countingServer(t, nil)
	other, otherHits := countingServer(t, nil)
	port := other.URL[strings.LastIndexByte(other.URL, ':')+1:]
	type route struct{ url, proxy, connectTo string }
	var routes []route
	for _, h := range unspecifiedHosts {
		routes = append(routes, route{url: "http://bob:pw@" + h + ":" + port + "/db/"})
	}
	for _, h := range []string{"0.0.0.0", "[::]", "[::ffff:0.0.0.0]"} {
		routes = append(routes,
			route{url: "http://couch.invalid:5984/db/", proxy: "http://" + h + ":" + port},
			route{url: "http://couch.invalid:5984/db/", proxy: "socks5://" + h + ":" + port},
			route{url: "http://couch.invalid:5984/db/", connectTo: "couch.invalid:5984:" + h + ":" + port})
	}
	for _, r := range routes {
		cfg := map[string]string{"denied_networks": loopback, "connect_to": r.connectTo}
		p := policyPool(t, local.URL+"/", cfg)
		dialed := watchDials(t, p)
		err := getAs(p, parse.Endpoint{URL: r.url, Proxy: r.proxy}, bob)
		if !errors.Is(err, ErrNotAllowed) {
			t.Errorf("%+v: err %v, want ErrNotAllowed", r, err)
		}
		if d := dialed(); len(d) > 0 {
			t.Errorf("%+v: the policy let a connection to %v through", r, d)
		}
	}
	// A redirect from the server itself to each of them.
	for _, h := range unspecifiedHosts {
		to := "http://" + h + ":" + port
		from, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, to+r.URL.Path, http.StatusFound)
		})
		p := policyPool(t, from.URL+"/", map[string]string{"denied_networks": loopback})
		dialed := watchDials(t, p)
		if err := getAs(p, parse.Endpoint{URL: from.URL + "/db/"}, bob); !errors.Is(err, ErrNotAllowed) {
			t.Errorf("redirect to %s: err %v, want ErrNotAllowed", to, err)
		}
		if d := dialed(); len(d) > 0 {
			t.Errorf("redirect to %s: the policy let a connection to %v through", to, d)
		}
	}
	if n := otherHits.Load(); n != 0 {
		t.Errorf("the local host got %d requests through its other spellings", n)
	}
}

// TestHostPolicyDefaultDial (issue 38 item 2): with no policy set, a user's
// replication does not connect to a link-local or unspecified address,
// whether its URL, a proxy, a redirect or a name (connect_to here, DNS in
// life) leads there; an allowed_hosts entry naming them opens them; an
// admin's replication is not limited; other hosts are open as in CouchDB.
func TestHostPolicyDefaultDial(t *testing.T) {
	srv, _ := countingServer(t, nil)
	port := srv.URL[strings.LastIndexByte(srv.URL, ':')+1:]
	viaName := "metadata.invalid:80:169.254.169.254:80"
	cases := []struct {
		name                   string
		cfg                    map[string]string
		url, proxy, redirectTo string
		rep                    *parse.Rep
		want                   string // "refused", "dialed" (the test's dialer refuses it), "ok"
	}{
		{"metadata", nil, "http://169.254.169.254/latest/", "", "", bob, "refused"},
		{"metadata, decimal", nil, "http://2852039166/latest/", "", "", bob, "refused"},
		{"metadata, IPv4-mapped", nil, "http://[::ffff:169.254.169.254]/latest/", "", "", bob, "refused"},
		{"metadata, NAT64", nil, "http://[64:ff9b::a9fe:a9fe]/latest/", "", "", bob, "refused"},
		{"IPv6 link-local with a zone", nil, "http://[fe80::1%25eth0]:5984/db/", "", "", bob, "refused"},
		{"AWS metadata over IPv6", nil, "http://[fd00:ec2::254]/latest/", "", "", bob, "refused"},
		{"unspecified", nil, "http://0.0.0.0:" + port + "/db/", "", "", bob, "refused"},
		{"unspecified IPv6", nil, "http://[::]:" + port + "/db/", "", "", bob, "refused"},
		{"a name resolving to metadata", map[string]string{"connect_to": viaName}, "http://metadata.invalid/latest/", "", "", bob, "refused"},
		{"a metadata proxy", nil, "http://couch.invalid/db/", "http://169.254.169.254:3128", "", bob, "refused"},
		{"a metadata socks5 proxy", nil, "http://couch.invalid/db/", "socks5://169.254.169.254:1080", "", bob, "refused"},
		{"a redirect to metadata", nil, srv.URL + "/db/", "", "http://169.254.169.254/latest/", bob, "refused"},
		{"an admin", nil, "http://169.254.169.254/latest/", "", "", admin, "dialed"},
		{"an admin by name", map[string]string{"connect_to": viaName}, "http://metadata.invalid/latest/", "", "", admin, "dialed"},
		{"allowed by an entry", map[string]string{"allowed_hosts": "*, 169.254.169.254"}, "http://169.254.169.254/latest/", "", "", bob, "dialed"},
		{"allowed by name", map[string]string{"allowed_hosts": "*, metadata.invalid", "connect_to": viaName}, "http://metadata.invalid/latest/", "", "", bob, "dialed"},
		{"* does not open them", map[string]string{"allowed_hosts": "*"}, "http://169.254.169.254/latest/", "", "", bob, "refused"},
		{"loopback, as in CouchDB", nil, srv.URL + "/db/", "", "", bob, "ok"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := policyPool(t, "", tc.cfg)
			dialed := watchDials(t, p)
			u := tc.url
			if tc.redirectTo != "" {
				from, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
					http.Redirect(w, r, tc.redirectTo, http.StatusFound)
				})
				u = from.URL + "/db/"
			}
			err := getAs(p, parse.Endpoint{URL: u, Proxy: tc.proxy}, tc.rep)
			d := dialed()
			switch tc.want {
			case "refused":
				if !errors.Is(err, ErrNotAllowed) || len(d) > 0 {
					t.Errorf("err %v, dialed %v; want ErrNotAllowed before any connection", err, d)
				}
			case "dialed":
				if errors.Is(err, ErrNotAllowed) || len(d) == 0 {
					t.Errorf("err %v, dialed %v; want a connection", err, d)
				}
			case "ok":
				if err != nil || len(d) > 0 {
					t.Errorf("err %v, dialed %v", err, d)
				}
			}
			if st := p.Stats(); tc.want == "refused" && st.Retries != 0 {
				t.Errorf("a refused request was retried %d times", st.Retries)
			}
		})
	}
}
