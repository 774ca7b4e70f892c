package parse

import (
	"errors"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// HostPolicy is the `[replicator]` allowed_hosts and denied_networks
// settings: the hosts the replications of users who are not server admins
// may reach (see Options.LimitsHosts). CouchDB has no such control. The
// zero value, no setting, allows every host as CouchDB does, but for
// link-local and unspecified addresses (defaultDenied), which a
// replication reaches only if an Allowed entry names them.
//
// A host name that an Allowed entry names is reachable whatever it
// resolves to. Any other host is judged by the addresses it is, or resolves
// to when connecting: an address an Allowed address entry holds is
// reachable; otherwise it must be allowed by "*" (or Allowed be empty) and
// lie in no Denied network nor in defaultDenied. So a specific entry of
// allowed_hosts opens a hole in denied_networks, and "*" does not. An
// address that carries an IPv4 address (NAT64, 6to4, IPv4-compatible) is
// judged as that address too, and an unspecified address (0.0.0.0/8, ::),
// which connects to the local host, as its loopback address: an entry must
// hold it, and no Denied network may hold any loopback address.
type HostPolicy struct {
	// Allowed is allowed_hosts: when not empty, a restricted replication
	// reaches only hosts an entry matches.
	Allowed []HostPattern
	// Denied is denied_networks: networks a restricted replication may not
	// connect to, unless an Allowed entry other than "*" names the host.
	Denied []netip.Prefix
	// Invalid is set when either setting has an entry that does not parse:
	// restricted replications then reach no host but the server itself
	// until it is fixed, rather than more hosts than meant.
	Invalid bool
	// Unlimited lifts every limit, the default denials included: for a
	// tool whose replications reach what whoever runs it can (couchrep).
	Unlimited bool
}

// HostPattern is one allowed_hosts entry.
type HostPattern struct {
	// Name is a host name in lower case, "*.domain" for the names under
	// domain (not domain itself), or "*" for every host; "" when the
	// entry is an address.
	Name string
	// Network is the entry's address or network (an address is a /32 or
	// /128); the zero Prefix when Name is set.
	Network netip.Prefix
	// Port limits the entry to one port; 0 is any port.
	Port int
}

// String writes the entry as allowed_hosts takes it.
func (h HostPattern) String() string {
	host := h.Name
	if host == "" {
		host = h.Network.String()
		if h.Network.IsSingleIP() {
			host = h.Network.Addr().String()
		}
		if h.Port != 0 && h.Network.Addr().Is6() {
			host = "[" + host + "]"
		}
	}
	if h.Port != 0 {
		return host + ":" + strconv.Itoa(h.Port)
	}
	return host
}

// ReasonHostNotAllowed is the one reason of every refusal of a
// replication endpoint (or proxy) by the host policy, whichever it is.
const ReasonHostNotAllowed = "Replication endpoint not allowed: this server limits the hosts replications may reach"

// ParseAllowedHosts reads an allowed_hosts value: comma-separated entries,
// each "*", a host name, "*.domain", an IP address or a CIDR network,
// optionally followed by ":port" (an IPv6 address or network is then in
// brackets: "[fd00::/8]:5984"). Entries that do not parse are reported in
// the error and left out.
func ParseAllowedHosts(v string) ([]HostPattern, error) {
	out, bad := parseList(v, parseHostPattern)
	if len(bad) > 0 {
		return out, errors.New("[replicator] invalid allowed_hosts entries (want *, a host name, *.domain, an IP address or a CIDR network, each with an optional :port): " + strings.Join(bad, ", "))
	}
	return out, nil
}

// ParseDeniedNetworks reads a denied_networks value: comma-separated IP
// addresses and CIDR networks. Entries that do not parse are reported in
// the error and left out.
func ParseDeniedNetworks(v string) ([]netip.Prefix, error) {
	out, bad := parseList(v, parseNetwork)
	if len(bad) > 0 {
		return out, errors.New("[replicator] invalid denied_networks entries (want IP addresses or CIDR networks): " + strings.Join(bad, ", "))
	}
	return out, nil
}

// parseList parses the non-empty entries of a comma-separated list, and
// returns those that do not parse apart.
func parseList[T any](v string, parseEntry func(string) (T, bool)) (out []T, bad []string) {
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		if x, ok := parseEntry(e); ok {
			out = append(out, x)
		} else {
			bad = append(bad, e)
		}
	}
	return out, bad
}

func parseHostPattern(e string) (HostPattern, bool) {
	var h HostPattern
	host := e
	if rest, ok := strings.CutPrefix(e, "["); ok {
		inner, port, ok := strings.Cut(rest, "]")
		if !ok {
			return h, false
		}
		if port != "" {
			if h.Port, ok = parsePort(strings.TrimPrefix(port, ":")); !ok || port[0] != ':' {
				return h, false
			}
		}
		n, ok := parseNetwork(inner)
		if !ok || !n.Addr().Is6() {
			return h, false
		}
		h.Network = n
		return h, true
	}
	if strings.Count(e, ":") == 1 { // name, IPv4 address or network, with a port
		var port string
		host, port, _ = strings.Cut(e, ":")
		var ok bool
		if h.Port, ok = parsePort(port); !ok {
			return h, false
		}
	}
	if n, ok := parseNetwork(host); ok {
		h.Network = n
		return h, true
	}
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	if name == "*" || validHostName(strings.TrimPrefix(name, "*.")) {
		h.Name = name
		return h, true
	}
	return h, false
}

// parsePort reads a port number, 1 to 65535.
func parsePort(s string) (int, bool) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 || s[0] == '+' {
		return 0, false
	}
	return n, true
}

// parseNetwork reads an IP address (as a /32 or /128) or a CIDR network,
// without zone. IPv4 written as IPv4-mapped IPv6 is taken as IPv4, as
// connections to it are.
func parseNetwork(s string) (netip.Prefix, bool) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, false
		}
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		return p.Masked(), true
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, false
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), true
}

// validHostName reports whether s is a DNS host name: dot-separated labels
// of 1 to 63 letters, digits, '-' (not first or last) or '_', at most 253
// bytes, the last label not all digits (that would be an IPv4 shorthand,
// which resolvers read as an address).
func validHostName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	labels := strings.Split(s, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	last := labels[len(labels)-1]
	return strings.Trim(last, "0123456789") != ""
}

// Equal reports whether two policies are the same.
func (p HostPolicy) Equal(q HostPolicy) bool {
	return p.Invalid == q.Invalid && p.Unlimited == q.Unlimited && slices.Equal(p.Allowed, q.Allowed) && slices.Equal(p.Denied, q.Denied)
}

// Active reports whether an operator set a policy (allowed_hosts or
// denied_networks, valid or not). The default denials apply without one.
func (p HostPolicy) Active() bool {
	return len(p.Allowed) > 0 || len(p.Denied) > 0 || p.Invalid
}

// AllowsName reports whether an Allowed entry names host (a host name as
// a URL writes it) on port: such a host is reachable whatever its
// addresses.
func (p HostPolicy) AllowsName(host string, port int) bool {
	if p.Unlimited {
		return true
	}
	if p.Invalid {
		return false
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, h := range p.Allowed {
		if h.Name == "" || h.Name == "*" || h.Port != 0 && h.Port != port {
			continue
		}
		if d, ok := strings.CutPrefix(h.Name, "*."); ok {
			if strings.HasSuffix(host, "."+d) {
				return true
			}
		} else if host == h.Name {
			return true
		}
	}
	return false
}

// AllowsAddr reports whether a restricted replication may connect to
// addr on port, an address a URL's host is, or resolves to.
func (p HostPolicy) AllowsAddr(addr netip.Addr, port int) bool {
	switch {
	case p.Unlimited:
		return true
	case p.Invalid:
		return false
	}
	addr = addr.Unmap().WithZone("")
	if unspecified(addr) && (p.deniesLoopback() || !p.AllowsAddr(loopbackOf(addr), port)) {
		return false
	}
	wide := len(p.Allowed) == 0 // every host not denied
	for _, h := range p.Allowed {
		if h.Port != 0 && h.Port != port {
			continue
		}
		switch {
		case h.Name == "*":
			wide = true
		case h.Name == "" && h.Network.Contains(addr):
			return true
		}
	}
	if !wide {
		return false
	}
	for _, nets := range [][]netip.Prefix{p.Denied, defaultDenied} {
		for _, n := range nets {
			if n.Contains(addr) {
				return false
			}
		}
	}
	if v4, ok := embeddedIPv4(addr); ok {
		return p.AllowsAddr(v4, port)
	}
	return true
}

// deniesLoopback reports whether a Denied network holds a loopback
// address: the unspecified addresses, which reach the local host, are
// then denied too.
func (p HostPolicy) deniesLoopback() bool {
	for _, n := range p.Denied {
		for _, l := range loopbackNets {
			if n.Overlaps(l) {
				return true
			}
		}
	}
	return false
}

// AllowsHost applies the policy to a host and port as a URL writes them,
// without resolving names. decided is false for a host name that only its
// addresses decide (AllowsAddr, when connecting); ok is then false. A
// host a resolver reads as an address ("127.1", "0x7f000001", "0.0.0.0.")
// is judged as that address, and a localhost name (RFC 6761) as loopback.
func (p HostPolicy) AllowsHost(host string, port int) (ok, decided bool) {
	switch {
	case p.Unlimited:
		return true, true
	case p.Invalid:
		return false, true
	}
	if a, ok := hostAddr(host); ok {
		return p.AllowsAddr(a, port), true
	}
	if p.AllowsName(host, port) {
		return true, true
	}
	if localhostName(host) && !p.AllowsAddr(netip.AddrFrom4([4]byte{127, 0, 0, 1}), port) && !p.AllowsAddr(netip.IPv6Loopback(), port) {
		return false, true // no need to ask DNS ("localhost.") what it is
	}
	if len(p.Allowed) == 0 {
		return false, false
	}
	for _, h := range p.Allowed {
		if h.Name != "" && h.Name != "*" || h.Port != 0 && h.Port != port {
			continue
		}
		return false, false // "*" or an address entry may match its addresses
	}
	return false, true
}

// LimitsHosts reports whether the host policy applies to rep: rep was not
// created by a server admin (and the policy is not Unlimited). For a
// `POST /_replicate` that is the user who posted it; a document's
// replication acts with the rights of its `user_ctx` (as CouchDB 3.x
// delegates them), so it is limited unless that holds the `_admin` role,
// which only an admin can write. With no policy set only the default
// denials limit it.
func (o Options) LimitsHosts(rep *Rep) bool {
	return rep != nil && !o.Hosts.Unlimited && !rep.UserCtx.IsAdmin()
}

// Restricts reports whether a policy an operator set closes hosts to rep
// (HostPolicy.narrows): its failures then all read the same, so that it
// is no port scanner of the networks the operator closed. Otherwise they
// keep their reasons, as in CouchDB.
func (o Options) Restricts(rep *Rep) bool {
	return o.LimitsHosts(rep) && o.Hosts.narrows()
}

// narrows reports whether the settings close hosts the default leaves
// open: a denied network, an allow list without "*" for every port, or a
// setting that does not parse. Entries that only open default denials
// (`*, 169.254.169.254`) do not.
func (p HostPolicy) narrows() bool {
	if p.Invalid || len(p.Denied) > 0 {
		return true
	}
	for _, h := range p.Allowed {
		if h.Name == "*" && h.Port == 0 {
			return false
		}
	}
	return len(p.Allowed) > 0
}

// CheckHosts refuses a replication that the host policy of opts forbids,
// as far as its URLs tell without resolving names: an endpoint or proxy
// whose host is an address the policy denies, or a name no allowed_hosts
// entry can match. Names that only their addresses decide pass; the
// replicator checks them when it connects. The server's own origin
// (opts.LocalURL, what bare db names become) is always allowed, and
// replications the policy does not limit (Options.LimitsHosts) pass. The
// error is a *Error whose reason is ReasonHostNotAllowed, whatever the
// endpoint.
func CheckHosts(rep *Rep, opts Options) error {
	if !opts.LimitsHosts(rep) {
		return nil
	}
	local := ""
	if u, err := url.Parse(opts.LocalURL); err == nil && opts.LocalURL != "" {
		local = Origin(u)
	}
	for _, raw := range []string{rep.Source.URL, rep.Target.URL, rep.Source.Proxy, rep.Target.Proxy} {
		if raw == "" {
			continue
		}
		u, err := url.Parse(raw)
		if err != nil {
			return newError(ReasonHostNotAllowed)
		}
		if local != "" && Origin(u) == local {
			continue
		}
		port, _ := strconv.Atoi(originPort(u))
		if ok, decided := opts.Hosts.AllowsHost(u.Hostname(), port); decided && !ok {
			return newError(ReasonHostNotAllowed)
		}
	}
	return nil
}

// Origin is what an endpoint's credentials belong to: a URL's scheme, host
// and port, with the default port made explicit (http://h is http://h:80)
// and the host in lower case ("http://127.0.0.1:5984").
func Origin(u *url.URL) string {
	scheme := strings.ToLower(u.Scheme)
	return scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), originPort(u))
}

// originPort is u's port, or its scheme's default (proxies' too).
func originPort(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	switch strings.ToLower(u.Scheme) {
	case "http":
		return "80"
	case "https":
		return "443"
	case "socks5", "socks5h":
		return "1080"
	}
	return ""
}
