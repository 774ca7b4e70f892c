package parse

import (
	"errors"
	"net/netip"
	"testing"
)

// loopbackDenied is the policy of issue 38 item 1.
const loopbackDenied = "127.0.0.0/8, ::1"

// TestHostPolicyUnspecified (issue 38 item 1): under a policy denying
// loopback, every spelling of the local host in a URL is refused, the
// unspecified addresses (which connect to the local host on Linux and
// macOS) and localhost names (RFC 6761) included; other names are left
// to the addresses they resolve to.
// want: "refused" when the URL is refused as written, "dial" when only
// its addresses can decide.
func TestHostPolicyUnspecified(t *testing.T) {
	opts := DefaultOptions()
	opts.Hosts = policy(t, "", loopbackDenied)
	opts.LocalURL = "http://127.0.0.1:5984/"
	bob := UserCtx{Name: "bob"}
	for _, tc := range []struct{ host, want string }{
		{"0.0.0.0", "refused"},
		{"[::]", "refused"},
		{"[::0]", "refused"},
		{"[0:0:0:0:0:0:0:0]", "refused"},
		{"[::ffff:0.0.0.0]", "refused"},
		{"0", "refused"},
		{"0.0.0.0.", "refused"},
		{"0.1.2.3", "refused"},
		{"127.1", "refused"},
		{"2130706433", "refused"},
		{"0x7f000001", "refused"},
		{"0177.0.0.1", "refused"},
		{"127.0.0.1.", "refused"},
		{"[::ffff:127.0.0.1]", "refused"},
		{"[0:0:0:0:0:0:0:1]", "refused"},
		{"[::127.0.0.1]", "refused"},
		{"[64:ff9b::127.0.0.1]", "refused"},
		{"[2002:7f00:1::1]", "refused"},
		{"db.localhost", "refused"},
		{"[::ffff:7f00:1]", "refused"},
		{"[::1%25lo]", "refused"},
		{"0x7f.1", "refused"},
		{"couch.example", "dial"},
		{"localhost", "refused"},
		{"localhost.", "refused"},
		{"LOCALHOST", "refused"},
	} {
		u := "http://bob:pw@" + tc.host + ":5984/db/"
		rep := &Rep{UserCtx: bob, Source: Endpoint{URL: u}, Target: Endpoint{URL: u}}
		err := CheckHosts(rep, opts)
		var pe *Error
		switch {
		case tc.want == "refused" && (!errors.As(err, &pe) || pe.Reason != ReasonHostNotAllowed):
			t.Errorf("%s: CheckHosts = %v, want refused", tc.host, err)
		case tc.want == "dial" && err != nil:
			t.Errorf("%s: CheckHosts = %v, want left to the addresses", tc.host, err)
		}
		doc := []byte(`{"source":"` + u + `","target":"` + u + `"}`)
		if _, err := BeforeDocUpdateHosts(doc, bob, opts); (tc.want == "refused") != (err != nil) {
			t.Errorf("%s: the doc: %v, want %s", tc.host, err, tc.want)
		}
		proxied := &Rep{UserCtx: bob, Source: Endpoint{URL: "http://203.0.113.9/a/", Proxy: "http://" + tc.host + ":3128"}, Target: Endpoint{URL: "http://203.0.113.9/b/"}}
		if err := CheckHosts(proxied, opts); (tc.want == "refused") != (err != nil) {
			t.Errorf("%s as a proxy: %v, want %s", tc.host, err, tc.want)
		}
	}
}

// TestHostPolicyDefault (issue 38 item 2): with no policy set, a
// replication of a user who is not an admin may not reach link-local or
// unspecified addresses (cloud metadata services, the local host through
// 0.0.0.0), in any spelling; everything else is open as in CouchDB. An
// allowed_hosts entry naming them opens them; an admin is not limited.
func TestHostPolicyDefault(t *testing.T) {
	cases := []struct {
		name, allowed, denied string
		addr                  string
		want                  bool
	}{
		{"metadata", "", "", "169.254.169.254", false},
		{"IPv4 link-local", "", "", "169.254.1.1", false},
		{"IPv4-mapped link-local", "", "", "::ffff:169.254.169.254", false},
		{"IPv4-compatible link-local", "", "", "::169.254.169.254", false},
		{"NAT64 link-local", "", "", "64:ff9b::169.254.169.254", false},
		{"6to4 link-local", "", "", "2002:a9fe:a9fe::1", false},
		{"IPv6 link-local", "", "", "fe80::1", false},
		{"IPv6 link-local with a zone", "", "", "fe80::1%eth0", false},
		{"IPv6 link-local, top of fe80::/10", "", "", "febf::1", false},
		{"AWS metadata over IPv6", "", "", "fd00:ec2::254", false},
		{"unspecified IPv4", "", "", "0.0.0.0", false},
		{"this network", "", "", "0.1.2.3", false},
		{"unspecified IPv6", "", "", "::", false},
		{"IPv4-mapped unspecified", "", "", "::ffff:0.0.0.0", false},
		{"loopback, as in CouchDB", "", "", "127.0.0.1", true},
		{"IPv6 loopback, as in CouchDB", "", "", "::1", true},
		{"private, as in CouchDB", "", "", "10.1.2.3", true},
		{"public", "", "", "203.0.113.9", true},
		{"public over NAT64", "", "", "64:ff9b::203.0.113.9", true},
		{"ULA, as in CouchDB", "", "", "fd00::1", true},
		{"other denied networks keep the default", "", "10.0.0.0/8", "169.254.169.254", false},
		{"* does not open them", "*", "", "169.254.169.254", false},
		{"an entry holding it opens link-local", "*, 169.254.0.0/16", "", "169.254.169.254", true},
		{"only for its port", "*, 169.254.0.0/16:8080", "", "169.254.169.254", false},
		{"an IPv6 entry", "*, fe80::/10", "", "fe80::1%eth0", true},
		{"an entry opens the unspecified address", "*, 0.0.0.0", "", "0.0.0.0", true},
		{"an entry opens ::", "*, ::", "", "::", true},
		{"not while loopback is denied", "*, 0.0.0.0", loopbackDenied, "0.0.0.0", false},
		{"not while any loopback network is denied", "*, ::", "127.0.0.2", "::", false},
		{"nor on an allow list without loopback", "0.0.0.0", "", "0.0.0.0", false},
		{"loopback allowed on the allow list", "0.0.0.0, 127.0.0.1", "", "0.0.0.0", true},
		{"an entry for the IPv4 address opens its NAT64 form", "*, 169.254.169.254", "", "64:ff9b::169.254.169.254", true},
		{"denied_networks apply to embedded addresses", "", "10.0.0.0/8", "64:ff9b::10.1.2.3", false},
	}
	for _, tc := range cases {
		p := policy(t, tc.allowed, tc.denied)
		if got := p.AllowsAddr(netip.MustParseAddr(tc.addr), 80); got != tc.want {
			t.Errorf("%s: AllowsAddr(%s) = %v, want %v", tc.name, tc.addr, got, tc.want)
		}
		host := netip.MustParseAddr(tc.addr).String()
		if ok, decided := p.AllowsHost(host, 80); ok != tc.want || !decided {
			t.Errorf("%s: AllowsHost(%s) = %v, decided %v; want %v", tc.name, host, ok, decided, tc.want)
		}
	}

	opts := DefaultOptions()
	opts.LocalURL = "http://127.0.0.1:5984/"
	rep := func(u UserCtx) *Rep {
		return &Rep{UserCtx: u, Source: Endpoint{URL: "http://169.254.169.254/latest/"}, Target: Endpoint{URL: "http://127.0.0.1:5984/b/"}}
	}
	if err := CheckHosts(rep(UserCtx{Name: "bob"}), opts); err == nil {
		t.Error("no policy: bob reaches the metadata service")
	}
	for _, proxy := range []string{"http://169.254.169.254:3128", "socks5://[fe80::1%25eth0]", "http://0.0.0.0:3128"} {
		r := &Rep{UserCtx: UserCtx{Name: "bob"}, Source: Endpoint{URL: "http://203.0.113.9/a/"}, Target: Endpoint{URL: "http://203.0.113.9/b/", Proxy: proxy}}
		if err := CheckHosts(r, opts); err == nil {
			t.Errorf("no policy: bob's replication goes through the proxy %s", proxy)
		}
	}
	if err := CheckHosts(rep(UserCtx{Name: "admin", Roles: []string{"_admin"}}), opts); err != nil {
		t.Errorf("no policy: an admin is refused: %v", err)
	}
	for _, tc := range []struct {
		allowed, denied string
		hides           bool
	}{
		{"", "", false},
		{"*, 169.254.169.254", "", false},
		{"169.254.169.254, *", "", false},
		{"*:443, 169.254.169.254", "", true},
		{"couch.example", "", true},
		{"", "10.0.0.0/8", true},
		{"*, 169.254.169.254", "10.0.0.0/8", true},
	} {
		o := opts
		o.Hosts = policy(t, tc.allowed, tc.denied)
		if got := o.Restricts(rep(UserCtx{Name: "bob"})); got != tc.hides {
			t.Errorf("allowed_hosts %q, denied_networks %q: failures hidden %v, want %v", tc.allowed, tc.denied, got, tc.hides)
		}
	}
	opts.Hosts.Unlimited = true
	if err := CheckHosts(rep(UserCtx{Name: "bob"}), opts); err != nil {
		t.Errorf("an unlimited policy refuses: %v", err)
	}
}

// TestHostAddr: the hosts a resolver reads as addresses, and those it
// looks up as names.
func TestHostAddr(t *testing.T) {
	for _, tc := range []struct{ host, want string }{
		{"127.1", "127.0.0.1"},
		{"127.0.1", "127.0.0.1"},
		{"2130706433", "127.0.0.1"},
		{"0x7f000001", "127.0.0.1"},
		{"0X7F.1", "127.0.0.1"},
		{"0177.0.0.1", "127.0.0.1"},
		{"0", "0.0.0.0"},
		{"0x", "0.0.0.0"},
		{"169.254.43518", "169.254.169.254"},
		{"2852039166", "169.254.169.254"},
		{"127.0.0.1.", "127.0.0.1"},
		{"[fe80::1%eth0]", "fe80::1%eth0"},
		{"::ffff:0.0.0.0", "::ffff:0.0.0.0"},
		{"4294967296", ""},
		{"256.0.0.1", ""},
		{"1.2.3.4.5", ""},
		{"08", ""},
		{"1..2", ""},
		{"+1", ""},
		{"1e1", ""},
		{"example.com", ""},
		{"localhost.", ""},
	} {
		a, ok := hostAddr(tc.host)
		if got := a.String(); ok != (tc.want != "") || ok && got != tc.want {
			t.Errorf("hostAddr(%q) = %s, %v; want %q", tc.host, got, ok, tc.want)
		}
	}
}
