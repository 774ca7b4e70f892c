package parse

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// defaultDenied are the networks a replication the host policy limits
// (Options.LimitsHosts) may not reach even when no policy is set, unless
// an allowed_hosts entry names the host or holds the address: link-local
// (cloud metadata services at 169.254.169.254, other hosts' link-local
// services), the metadata addresses some clouds put elsewhere (AWS's over
// IPv6, Alibaba Cloud's), and the unspecified addresses, which connect to
// the local host on Linux and macOS.
var defaultDenied = []netip.Prefix{
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("fd00:ec2::254/128"),
	netip.MustParsePrefix("100.100.100.200/32"),
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("::/128"),
}

// DefaultDeniedNetworks returns the networks denied by default (see
// HostPolicy), for documentation and tools.
func DefaultDeniedNetworks() []netip.Prefix { return slices.Clone(defaultDenied) }

var (
	thisNetwork  = netip.MustParsePrefix("0.0.0.0/8")
	loopbackNets = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	// The IPv6 forms that carry an IPv4 address in their last 32 bits,
	// and lead to it: IPv4-compatible (deprecated, but tunnelled by some
	// kernels), IPv4-translated (SIIT) and NAT64's well-known prefix.
	ipv4Compatible  = netip.MustParsePrefix("::/96")
	ipv4Translated  = netip.MustParsePrefix("::ffff:0:0:0/96")
	nat64WellKnown  = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour       = netip.MustParsePrefix("2002::/16") // the IPv4 address in bits 16 to 47
	ipv6Unspecified = netip.IPv6Unspecified()
)

// unspecified reports whether a (unmapped) is an address that connects
// to the local host: 0.0.0.0/8 or ::.
func unspecified(a netip.Addr) bool {
	return thisNetwork.Contains(a) || a == ipv6Unspecified
}

// loopbackOf is the loopback address a connection to the unspecified
// address a reaches.
func loopbackOf(a netip.Addr) netip.Addr {
	if a.Is4() {
		return netip.AddrFrom4([4]byte{127, 0, 0, 1})
	}
	return netip.IPv6Loopback()
}

// embeddedIPv4 returns the IPv4 address an IPv6 address (unmapped, no
// zone) carries and leads to, if it has one. :: and ::1 are not
// IPv4-compatible addresses.
func embeddedIPv4(a netip.Addr) (netip.Addr, bool) {
	if !a.Is6() {
		return netip.Addr{}, false
	}
	b := a.As16()
	switch {
	case ipv4Compatible.Contains(a):
		if b[12] == 0 && b[13] == 0 && b[14] == 0 && b[15] <= 1 {
			return netip.Addr{}, false
		}
		return netip.AddrFrom4([4]byte(b[12:16])), true
	case ipv4Translated.Contains(a), nat64WellKnown.Contains(a):
		return netip.AddrFrom4([4]byte(b[12:16])), true
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	}
	return netip.Addr{}, false
}

// hostAddr reads a URL's host as the address a connection to it reaches,
// if it is one: an IP address (brackets, a zone allowed), with a trailing
// dot, or in the numeric forms resolvers read as IPv4 (inet_aton: "127.1",
// "2130706433", "0x7f000001", "0177.0.0.1"). A host that is none of
// these is a name.
func hostAddr(host string) (netip.Addr, bool) {
	h := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if a, err := netip.ParseAddr(h); err == nil {
		return a, true
	}
	h = strings.TrimSuffix(h, ".")
	if a, err := netip.ParseAddr(h); err == nil {
		return a, true
	}
	return parseIPv4Numbers(h)
}

// parseIPv4Numbers reads the inet_aton forms of an IPv4 address: one to
// four dot-separated numbers, each decimal, octal (leading 0) or hex
// (leading 0x), the last filling the bytes left.
func parseIPv4Numbers(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var v uint64
	for i, p := range parts {
		base := 10
		switch {
		case p == "":
			return netip.Addr{}, false
		case len(p) > 1 && (p[:2] == "0x" || p[:2] == "0X"):
			base, p = 16, p[2:]
			if p == "" {
				p = "0"
			}
		case len(p) > 1 && p[0] == '0':
			base, p = 8, p[1:]
		}
		if p[0] == '+' || p[0] == '-' {
			return netip.Addr{}, false
		}
		n, err := strconv.ParseUint(p, base, 32)
		if err != nil {
			return netip.Addr{}, false
		}
		if i < len(parts)-1 {
			if n > 255 {
				return netip.Addr{}, false
			}
			v |= n << (8 * (3 - i))
			continue
		}
		if n >= 1<<(8*(4-i)) {
			return netip.Addr{}, false
		}
		v |= n
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

// localhostName reports whether host is "localhost" or a name under it,
// which resolve to loopback addresses (RFC 6761), in any case, with or
// without a trailing dot.
func localhostName(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	return h == "localhost" || strings.HasSuffix(h, ".localhost")
}
