package parse

import (
	"errors"
	"net/netip"
	"net/url"
	"reflect"
	"strings"
	"testing"
)

func TestParseAllowedHosts(t *testing.T) {
	pfx := netip.MustParsePrefix
	cases := []struct {
		in   string
		want []HostPattern
		bad  string // an entry the error names; "" = no error
	}{
		{"", nil, ""},
		{"*", []HostPattern{{Name: "*"}}, ""},
		{"*:443", []HostPattern{{Name: "*", Port: 443}}, ""},
		{"Couch.Example.COM.", []HostPattern{{Name: "couch.example.com"}}, ""},
		{"couchdb, *.example.com:6984", []HostPattern{{Name: "couchdb"}, {Name: "*.example.com", Port: 6984}}, ""},
		{"my_db.internal", []HostPattern{{Name: "my_db.internal"}}, ""},
		{"10.0.0.5:5984", []HostPattern{{Network: pfx("10.0.0.5/32"), Port: 5984}}, ""},
		{"10.1.2.3/16", []HostPattern{{Network: pfx("10.1.0.0/16")}}, ""},
		{"10.0.0.0/8:5984", []HostPattern{{Network: pfx("10.0.0.0/8"), Port: 5984}}, ""},
		{"fd00::/8", []HostPattern{{Network: pfx("fd00::/8")}}, ""},
		{"::1", []HostPattern{{Network: pfx("::1/128")}}, ""},
		{"[::1]:5984", []HostPattern{{Network: pfx("::1/128"), Port: 5984}}, ""},
		{"[fd00::/8]:5984", []HostPattern{{Network: pfx("fd00::/8"), Port: 5984}}, ""},
		{"::ffff:192.168.0.0/112", []HostPattern{{Network: pfx("192.168.0.0/16")}}, ""},
		{"a.example, -bad.example, b.example", []HostPattern{{Name: "a.example"}, {Name: "b.example"}}, "-bad.example"},
		{"127.1", nil, "127.1"}, // an IPv4 shorthand, not a name
		{"0x7f.1", nil, "0x7f.1"},
		{"host:0", nil, "host:0"},
		{"host:65536", nil, "host:65536"},
		{"host:+80", nil, "host:+80"},
		{"[10.0.0.1]:80", nil, "[10.0.0.1]:80"},
		{"[::1]80", nil, "[::1]80"},
		{"[::1", nil, "[::1"},
		{"fe80::1%eth0", nil, "fe80::1%eth0"},
		{"http://couch.example", nil, "http://couch.example"},
		{"a..b", nil, "a..b"},
		{"*.*.example", nil, "*.*.example"},
	}
	for _, tc := range cases {
		got, err := ParseAllowedHosts(tc.in)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseAllowedHosts(%q) = %v, want %v", tc.in, got, tc.want)
		}
		switch {
		case tc.bad == "" && err != nil:
			t.Errorf("ParseAllowedHosts(%q): %v", tc.in, err)
		case tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad) || !strings.Contains(err.Error(), "allowed_hosts")):
			t.Errorf("ParseAllowedHosts(%q) error %v, want one naming allowed_hosts and %q", tc.in, err, tc.bad)
		}
	}
}

func TestParseDeniedNetworks(t *testing.T) {
	got, err := ParseDeniedNetworks("127.0.0.0/8, ::1, 10.9.8.7/8 ,, 169.254.0.0/16")
	want := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"), netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("169.254.0.0/16")}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("= %v, %v; want %v", got, err, want)
	}
	got, err = ParseDeniedNetworks("10.0.0.0/8, private, 192.168.0.0/33")
	if !reflect.DeepEqual(got, want[2:3]) || err == nil || !strings.Contains(err.Error(), "denied_networks") ||
		!strings.Contains(err.Error(), "private") || !strings.Contains(err.Error(), "192.168.0.0/33") {
		t.Fatalf("bad entries: %v, %v", got, err)
	}
}

// policy builds a HostPolicy from the two settings, failing on bad entries.
func policy(t *testing.T, allowed, denied string) HostPolicy {
	t.Helper()
	o, err := OptionsFromConfig(map[string]string{"allowed_hosts": allowed, "denied_networks": denied})
	if err != nil {
		t.Fatal(err)
	}
	return o.Hosts
}

func TestHostPolicy(t *testing.T) {
	const private = "127.0.0.0/8, ::1, 10.0.0.0/8, 192.168.0.0/16"
	type check struct {
		host   string
		port   int
		ok     bool
		undec  bool // AllowsHost cannot decide without the addresses
		reason string
	}
	cases := []struct {
		name, allowed, denied string
		checks                []check
	}{
		{"no policy", "", "", []check{
			{"127.0.0.1", 22, true, false, "everything, as CouchDB"},
			{"anything.example", 80, false, true, "a name: its addresses decide, as link-local ones are denied (issue 38 item 2)"},
		}},
		{"denied networks only", "", private, []check{
			{"127.0.0.1", 5984, false, false, "loopback denied"},
			{"::1", 5984, false, false, "IPv6 loopback denied"},
			{"::ffff:127.0.0.1", 5984, false, false, "IPv4-mapped loopback denied"},
			{"10.20.30.40", 80, false, false, ""},
			{"203.0.113.9", 80, true, false, "a public address"},
			{"couch.example", 5984, false, true, "a name is decided by its addresses"},
			{"localhost", 5984, false, false, "but localhost is loopback (RFC 6761)"},
		}},
		{"allow list", "couch.example.com:6984, *.corp.example, 203.0.113.0/24", "", []check{
			{"couch.example.com", 6984, true, false, ""},
			{"COUCH.example.com.", 6984, true, false, "names compared without case and trailing dot"},
			{"couch.example.com", 443, false, true, "not the entry's port; the address entry may match its addresses"},
			{"db.corp.example", 1234, true, false, "wildcard, any port"},
			{"corp.example", 80, false, true, "the wildcard is for names under it; an address entry may still match"},
			{"203.0.113.7", 5984, true, false, ""},
			{"198.51.100.1", 80, false, false, "an address no entry holds"},
			{"elsewhere.example", 80, false, true, "may resolve into 203.0.113.0/24"},
		}},
		{"allow list of names only", "couch.example.com", "", []check{
			{"elsewhere.example", 80, false, false, "no entry can match: refused without DNS"},
			{"10.0.0.1", 80, false, false, ""},
		}},
		{"explicit entries open holes in denied networks", "10.0.0.5:5984, couchdb, *", private, []check{
			{"10.0.0.5", 5984, true, false, "a listed address inside a denied network"},
			{"10.0.0.5", 22, false, false, "not on another port"},
			{"10.0.0.6", 5984, false, false, "* does not open denied networks"},
			{"couchdb", 5984, true, false, "a listed name, whatever it resolves to"},
			{"203.0.113.9", 443, true, false, "*"},
			{"other", 80, false, true, "*, if its addresses are not denied"},
		}},
		{"* on one port", "*:443", "", []check{
			{"203.0.113.9", 443, true, false, ""},
			{"203.0.113.9", 80, false, false, ""},
			{"any.example", 80, false, false, "no entry for port 80"},
			{"any.example", 443, false, true, ""},
		}},
	}
	for _, tc := range cases {
		p := policy(t, tc.allowed, tc.denied)
		for _, c := range tc.checks {
			ok, decided := p.AllowsHost(c.host, c.port)
			if ok != c.ok || decided == c.undec {
				t.Errorf("%s: AllowsHost(%s, %d) = %v, decided %v; want %v, decided %v (%s)", tc.name, c.host, c.port, ok, decided, c.ok, !c.undec, c.reason)
			}
		}
	}
}

// TestHostPolicyAddresses: the check made on the addresses a name resolves
// to, when connecting.
func TestHostPolicyAddresses(t *testing.T) {
	p := policy(t, "10.0.0.5:5984, *", "127.0.0.0/8, ::1, 10.0.0.0/8")
	cases := []struct {
		addr string
		port int
		want bool
	}{
		{"127.0.0.1", 5984, false},
		{"::ffff:127.0.0.1", 5984, false},
		{"::1", 80, false},
		{"10.0.0.5", 5984, true},
		{"10.0.0.5", 5985, false},
		{"203.0.113.9", 80, true},
		{"fe80::1%eth0", 80, false}, // link-local, denied by default (issue 38 item 2)
	}
	for _, tc := range cases {
		if got := p.AllowsAddr(netip.MustParseAddr(tc.addr), tc.port); got != tc.want {
			t.Errorf("AllowsAddr(%s, %d) = %v, want %v", tc.addr, tc.port, got, tc.want)
		}
	}
}

// TestHostPolicyInvalid: a setting with a bad entry is reported, and the
// policy then refuses every host rather than keep the default (no limit).
func TestHostPolicyInvalid(t *testing.T) {
	for _, cfg := range []map[string]string{
		{"denied_networks": "10.0.0.0/8, 192.168.0.0/166"},
		{"allowed_hosts": "couch.example.com, [bad"},
	} {
		o, err := OptionsFromConfig(cfg)
		if err == nil || !o.Hosts.Invalid || !o.Hosts.Active() {
			t.Fatalf("%v: err %v, policy %+v", cfg, err, o.Hosts)
		}
		for _, h := range []string{"203.0.113.9", "couch.example.com", "other.example"} {
			if ok, decided := o.Hosts.AllowsHost(h, 80); ok || !decided {
				t.Errorf("%v: %s allowed (%v, %v) by an invalid policy", cfg, h, ok, decided)
			}
		}
		if o.Hosts.AllowsAddr(netip.MustParseAddr("203.0.113.9"), 80) || o.Hosts.AllowsName("couch.example.com", 80) {
			t.Errorf("%v: an invalid policy allows", cfg)
		}
	}
}

func TestCheckHosts(t *testing.T) {
	opts := DefaultOptions()
	opts.Hosts = policy(t, "", "127.0.0.0/8, ::1")
	opts.LocalURL = "http://127.0.0.1:5984/"
	user := UserCtx{Name: "bob"}
	admin := UserCtx{Name: "admin", Roles: []string{"_admin"}}
	rep := func(u UserCtx, src, tgt, proxy string) *Rep {
		return &Rep{UserCtx: u, Source: Endpoint{URL: src, Proxy: proxy}, Target: Endpoint{URL: tgt}}
	}
	cases := []struct {
		name string
		rep  *Rep
		ok   bool
	}{
		{"remote endpoints", rep(user, "http://203.0.113.9:5984/a/", "https://couch.example/b/", ""), true},
		{"the server itself", rep(user, "http://127.0.0.1:5984/a/", "http://127.0.0.1:5984/b/", ""), true},
		{"another port of the server's host", rep(user, "http://127.0.0.1:5984/a/", "http://127.0.0.1:22/b/", ""), false},
		{"the server's port over https", rep(user, "https://127.0.0.1:5984/a/", "http://127.0.0.1:5984/b/", ""), false},
		{"IPv6 loopback", rep(user, "http://[::1]:5984/a/", "http://127.0.0.1:5984/b/", ""), false},
		{"a name: decided when connecting", rep(user, "http://couch.example:5984/a/", "http://127.0.0.1:5984/b/", ""), true},
		{"localhost: loopback", rep(user, "http://localhost:5984/a/", "http://127.0.0.1:5984/b/", ""), false},
		{"a denied proxy", rep(user, "http://203.0.113.9/a/", "http://203.0.113.9/b/", "socks5://127.0.0.1"), false},
		{"an admin", rep(admin, "http://127.0.0.1:22/a/", "http://[::1]:5984/b/", "socks5://127.0.0.1"), true},
	}
	for _, tc := range cases {
		err := CheckHosts(tc.rep, opts)
		var pe *Error
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case !tc.ok && (!errors.As(err, &pe) || pe.Reason != ReasonHostNotAllowed):
			t.Errorf("%s: err %v, want the reason %q", tc.name, err, ReasonHostNotAllowed)
		}
	}
	opts.Hosts = HostPolicy{}
	if err := CheckHosts(rep(user, "http://127.0.0.1:22/a/", "http://[::1]:1/b/", ""), opts); err != nil {
		t.Errorf("no policy: %v", err)
	}
}

func TestOrigin(t *testing.T) {
	cases := []struct {
		a, b string
		same bool
	}{
		{"http://h/db", "http://h:80/x", true},
		{"https://h/db", "https://h:443/", true},
		{"HTTP://Couch.Example/db", "http://couch.example/other", true},
		{"http://[::1]/db", "http://[::1]:80/db", true},
		{"http://h/db", "https://h/db", false},
		{"http://h:80/db", "http://h:8080/db", false},
		{"http://a.example/", "http://sub.a.example/", false},
		{"http://127.0.0.1:5984/", "http://localhost:5984/", false},
	}
	for _, tc := range cases {
		a, _ := url.Parse(tc.a)
		b, _ := url.Parse(tc.b)
		if got := Origin(a) == Origin(b); got != tc.same {
			t.Errorf("Origin(%s) == Origin(%s): %v, want %v (%s, %s)", tc.a, tc.b, got, tc.same, Origin(a), Origin(b))
		}
	}
}

// FuzzParseAllowedHosts: any value parses without panicking; each entry it
// keeps is written back by String as an entry that parses to itself, and
// the checks accept any host.
func FuzzParseAllowedHosts(f *testing.F) {
	for _, s := range []string{"*", "*:443", "couch.example.com:6984", "*.corp.example", "10.0.0.0/8:5984",
		"[fd00::/8]:5984", "::ffff:192.168.0.0/112", "a,,b", "[::1", "host:+80", "127.1"} {
		f.Add(s, "127.0.0.1")
	}
	f.Fuzz(func(t *testing.T, v, host string) {
		entries, _ := ParseAllowedHosts(v)
		for _, e := range entries {
			again, err := ParseAllowedHosts(e.String())
			if err != nil || len(again) != 1 || again[0] != e {
				t.Fatalf("%q: entry %+v written as %q parses to %+v, %v", v, e, e.String(), again, err)
			}
		}
		denied, _ := ParseDeniedNetworks(v)
		p := HostPolicy{Allowed: entries, Denied: denied}
		ok, decided := p.AllowsHost(host, 80)
		if ok && !decided {
			t.Fatalf("AllowsHost(%q) allowed but undecided", host)
		}
		p.AllowsName(host, 80)
	})
}

// TestBeforeDocUpdateHosts: a `_replicator` doc whose job the host policy
// would refuse a host its URLs name is refused when written; its job acts
// with the doc's user_ctx, so only `_admin` there lifts the policy.
func TestBeforeDocUpdateHosts(t *testing.T) {
	opts := DefaultOptions()
	opts.Hosts = policy(t, "", "127.0.0.0/8, ::1")
	opts.LocalURL = "http://127.0.0.1:5984/"
	bob := UserCtx{Name: "bob"}
	admin := UserCtx{Name: "admin", Roles: []string{"_admin"}}
	doc := func(src, extra string) []byte {
		return []byte(`{"source":"` + src + `","target":"http://203.0.113.9/b"` + extra + `}`)
	}
	cases := []struct {
		name   string
		doc    []byte
		user   UserCtx
		reason string // "" = accepted
	}{
		{"a user's doc to a denied address", doc("http://127.0.0.1:22/a", ""), bob, ReasonHostNotAllowed},
		{"a user's doc through a denied proxy", doc("http://203.0.113.9/a", `,"source_proxy":"http://[::1]:3128"`), bob, ReasonHostNotAllowed},
		{"a user's doc to the server itself", doc("http://127.0.0.1:5984/a", ""), bob, ""},
		{"a user's doc to a name", doc("http://couch.example:22/a", ""), bob, ""},
		{"an admin's doc without user_ctx", doc("http://127.0.0.1:22/a", ""), admin, ReasonHostNotAllowed + reasonAdminUserCtxHint},
		{"an admin's doc acting as admin", doc("http://127.0.0.1:22/a", `,"user_ctx":{"roles":["_admin"]}`), admin, ""},
		{"a user claiming _admin", doc("http://127.0.0.1:22/a", `,"user_ctx":{"roles":["_admin"]}`), bob, reasonUserCtxRoleClaim("_admin")},
		{"a deleted doc", doc("http://127.0.0.1:22/a", `,"_deleted":true`), bob, ""},
	}
	for _, tc := range cases {
		_, err := BeforeDocUpdateHosts(tc.doc, tc.user, opts)
		var pe *Error
		switch {
		case tc.reason == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.reason != "" && (!errors.As(err, &pe) || pe.Reason != tc.reason):
			t.Errorf("%s: %v, want %q", tc.name, err, tc.reason)
		}
		if _, err := BeforeDocUpdate(tc.doc, tc.user); err != nil && tc.reason != reasonUserCtxRoleClaim("_admin") {
			t.Errorf("%s: refused without a policy: %v", tc.name, err)
		}
	}
}
