package parse

import (
	"errors"
	"net"
	"regexp"
	"strconv"
	"strings"
)

// ConnectTo is one `[replicator] connect_to` override: connections to
// Host:Port go to TargetHost:TargetPort instead, while the URL (and so the
// Host header, TLS server name and certificate check, and the replication
// id) keep the original name, as curl's --connect-to does.
type ConnectTo struct {
	// Host is a host name, lower case, or "*.domain" for any name under
	// domain (not domain itself).
	Host string
	Port int
	// TargetHost is a name or IP address (an IPv6 address without brackets).
	TargetHost string
	TargetPort int
}

var connectToEntry = regexp.MustCompile(`^([^:\[]+):([0-9]+):([^:]+|\[[^\]]+\]):([0-9]+)$`)

// ParseConnectTo reads a connect_to value: comma-separated
// HOST:PORT:TARGET:TARGET_PORT entries, e.g.
// "*.example.com:443:proxy.internal:8443,api.example.com:443:[2001:db8::1]:443".
// Entries that do not parse are skipped and reported in the error; the
// others are returned.
func ParseConnectTo(v string) ([]ConnectTo, error) {
	var out []ConnectTo
	var bad []string
	for _, e := range strings.Split(v, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		m := connectToEntry.FindStringSubmatch(e)
		port, perr := strconv.Atoi(safeIndex(m, 2))
		tport, terr := strconv.Atoi(safeIndex(m, 4))
		if m == nil || perr != nil || terr != nil || port < 1 || port > 65535 || tport < 1 || tport > 65535 {
			bad = append(bad, e)
			continue
		}
		out = append(out, ConnectTo{
			Host: strings.ToLower(m[1]), Port: port,
			TargetHost: strings.TrimSuffix(strings.TrimPrefix(m[3], "["), "]"), TargetPort: tport,
		})
	}
	if len(bad) > 0 {
		return out, errors.New("[replicator] invalid connect_to entries (want HOST:PORT:TARGET:TARGET_PORT): " + strings.Join(bad, ", "))
	}
	return out, nil
}

func safeIndex(m []string, i int) string {
	if i < len(m) {
		return m[i]
	}
	return ""
}

// ResolveConnectTo returns the address to dial for host:port under the
// first matching override, and whether one matched. Names match without
// regard to case; a "*." pattern matches names under its domain only.
func ResolveConnectTo(list []ConnectTo, host string, port int) (string, bool) {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, c := range list {
		if c.Port != port {
			continue
		}
		match := c.Host == host
		if d, ok := strings.CutPrefix(c.Host, "*."); ok {
			match = strings.HasSuffix(host, "."+d)
		}
		if match {
			return net.JoinHostPort(c.TargetHost, strconv.Itoa(c.TargetPort)), true
		}
	}
	return "", false
}
