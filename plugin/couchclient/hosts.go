package couchclient

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"

	"github.com/couchepi/couchepi/parse"
)

// ErrNotAllowed is the error of a connection or request of a restricted
// replication (parse.Options.LimitsHosts) to a host that `[replicator]`
// allowed_hosts and denied_networks forbid, or that is link-local or
// unspecified, which they must allow explicitly. It is not retried.
var ErrNotAllowed = errors.New("host not allowed by [replicator] allowed_hosts and denied_networks (link-local and unspecified addresses are denied unless allowed_hosts names them)")

// checkHost applies the host policy to u as written, without resolving
// names, for an endpoint of a restricted replication: the request itself,
// a redirect, and the host behind a proxy (which the proxy resolves, so
// this is all that can be checked of it). The dialer checks addresses.
func (c *Client) checkHost(u *url.URL) error {
	if !c.restricted {
		return nil
	}
	hosts := c.pool.settings.Load().opts.Hosts
	if hosts.Unlimited || c.pool.localOrigin != "" && parse.Origin(u) == c.pool.localOrigin {
		return nil
	}
	port, _ := strconv.Atoi(u.Port())
	if port == 0 {
		port = defaultPort(u.Scheme)
	}
	if ok, decided := hosts.AllowsHost(u.Hostname(), port); decided && !ok {
		return ErrNotAllowed
	}
	return nil
}

func defaultPort(scheme string) int {
	if strings.EqualFold(scheme, "https") {
		return 443
	}
	return 80
}

// guard wraps dial for the transports of restricted replications, with a
// policy set or not (the default denies link-local and unspecified
// addresses): a connection to the server itself (PoolOptions.LocalURL),
// or to a host an allowed_hosts entry names, is made as usual; any other
// goes to the addresses the host resolves to only if the policy allows
// each one, checked on the socket's own address just before it connects
// (net.Dialer.ControlContext), so a name that resolves into a denied
// network, or resolves differently the second time (DNS rebinding), is
// refused. addr is the URL's host, or the proxy's; connect_to overrides
// apply before the address check.
func (p *Pool) guard(d *net.Dialer) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		hosts := p.settings.Load().opts.Hosts
		host, portStr, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		port, _ := strconv.Atoi(portStr)
		if hosts.Unlimited || strings.EqualFold(addr, p.localAddr) || hosts.AllowsName(host, port) {
			return p.connectTo(d.DialContext)(ctx, network, addr)
		}
		checked := *d
		next := d.ControlContext
		checked.ControlContext = func(ctx context.Context, network, address string, c syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil || !hosts.AllowsAddr(ap.Addr(), int(ap.Port())) {
				return ErrNotAllowed
			}
			if next != nil {
				return next(ctx, network, address, c)
			}
			return nil
		}
		return p.connectTo(checked.DialContext)(ctx, network, addr)
	}
}

// dialFunc is a dial function; as a proxy.Dialer it dials a SOCKS5 proxy.
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Dial dials without a context.
func (f dialFunc) Dial(network, addr string) (net.Conn, error) {
	return f(context.Background(), network, addr)
}

// DialContext dials.
func (f dialFunc) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return f(ctx, network, addr)
}
