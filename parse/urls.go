package parse

import (
	"net/url"
	"strings"
	"unicode/utf8"
)

// userinfo locates the userinfo of an absolute URL string without fully
// parsing it (passwords may hold characters a strict parser rejects).
// It returns the index just after "://", the index of the '@' that ends the
// userinfo, and whether the URL has userinfo at all. The user part (before
// the first ':') may not contain '/', '?' or '#'; the userinfo ends at the
// last '@' before any query or fragment, so a password holding '@' or '/'
// is covered whole (CouchDB database names cannot contain '@').
func userinfo(u string) (start, at int, ok bool) {
	i := strings.Index(u, "://")
	if i < 0 {
		return 0, 0, false
	}
	start = i + 3
	rest := u[start:]
	first := strings.IndexByte(rest, '@')
	if first < 0 {
		return 0, 0, false
	}
	user := rest[:first]
	if c := strings.IndexByte(user, ':'); c >= 0 {
		user = user[:c]
	}
	if strings.ContainsAny(user, "/?#") {
		return 0, 0, false
	}
	end := len(rest)
	if e := strings.IndexAny(rest[first:], "?#"); e >= 0 {
		end = first + e
	}
	at = strings.LastIndexByte(rest[:end], '@')
	return start, start + at, true
}

// RedactURL returns u with the password of its userinfo replaced by "*****"
// ("http://user:*****@host/db/"); the user name is kept, as CouchDB shows
// it. A URL without a password is returned unchanged. It never fails: the
// URL is not parsed strictly, so a malformed URL cannot leak its password.
func RedactURL(u string) string {
	start, at, ok := userinfo(u)
	if !ok {
		return u
	}
	ui := u[start:at]
	c := strings.IndexByte(ui, ':')
	if c < 0 {
		return u
	}
	return u[:start] + ui[:c] + ":" + redactedPassword + u[at:]
}

// stripUserinfo removes "user:password@" from an http(s) URL string, as
// reading a `_replicator` doc as a non-owner does. URLs without a password
// are returned unchanged.
func stripUserinfo(u string) string {
	if !hasHTTPScheme(u) {
		return u
	}
	start, at, ok := userinfo(u)
	if !ok || !strings.Contains(u[start:at], ":") {
		return u
	}
	return u[:start] + u[at+1:]
}

// stripAnyUserinfo removes "user:password@" from a URL of any scheme
// (proxy URLs may be socks5://).
func stripAnyUserinfo(u string) string {
	start, at, ok := userinfo(u)
	if !ok || !strings.Contains(u[start:at], ":") {
		return u
	}
	return u[:start] + u[at+1:]
}

// hasHTTPScheme reports whether u starts with "http://" or "https://"
// (case-insensitively).
// validScheme reports whether s has the form of a URL scheme (RFC 3986:
// a letter, then letters, digits, "+", "-" or ".").
func validScheme(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i, c := range s {
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !letter && (i == 0 || !(c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return false
		}
	}
	return true
}

func hasHTTPScheme(u string) bool {
	return hasPrefixFold(u, "http://") || hasPrefixFold(u, "https://")
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// splitCredentials removes the userinfo from an http(s) URL and returns the
// URL without it and the credential it held. A userinfo without a password,
// or one that does not percent-decode to UTF-8, yields no credential
// (CouchDB tolerates bad userinfo as no credentials); it is removed anyway.
func splitCredentials(u string) (string, *BasicAuth) {
	start, at, ok := userinfo(u)
	if !ok {
		return u, nil
	}
	ui := u[start:at]
	bare := u[:start] + u[at+1:]
	c := strings.IndexByte(ui, ':')
	if c < 0 {
		return bare, nil
	}
	user, err1 := url.PathUnescape(ui[:c])
	pass, err2 := url.PathUnescape(ui[c+1:])
	if err1 != nil || err2 != nil || !utf8.ValidString(user) || !utf8.ValidString(pass) {
		return bare, nil
	}
	return bare, &BasicAuth{Username: user, Password: pass}
}

// addTrailingSlash appends "/" unless the URL has a query or already ends
// in "/", as CouchDB does for endpoint URLs.
func addTrailingSlash(u string) string {
	if strings.Contains(u, "?") || strings.HasSuffix(u, "/") {
		return u
	}
	return u + "/"
}

// hostPortPath splits an endpoint URL (no userinfo) into the parts the
// replication id uses: host as written (brackets of IPv6 literals removed),
// port ("" when absent) and the path including any query string ("/" when
// empty). ok is false when the URL has no host.
func hostPortPath(u string) (host, port, path string, ok bool) {
	i := strings.Index(u, "://")
	if i < 0 {
		return "", "", "", false
	}
	rest := u[i+3:]
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	hostport := rest[:end]
	path = rest[end:]
	if path == "" || path[0] != '/' {
		path = "/" + path
	}
	host = hostport
	if strings.HasPrefix(hostport, "[") {
		if j := strings.IndexByte(hostport, ']'); j > 0 {
			host = hostport[1:j]
			if p := hostport[j+1:]; strings.HasPrefix(p, ":") {
				port = p[1:]
			}
		}
	} else if c := strings.LastIndexByte(hostport, ':'); c >= 0 {
		host, port = hostport[:c], hostport[c+1:]
	}
	return host, port, path, host != ""
}

// validHTTPURL reports whether u (no userinfo) is an http or https URL with
// a host and a numeric port, if any.
func validHTTPURL(u string) bool {
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || p.User != nil {
		return false
	}
	if port := p.Port(); port != "" {
		for _, c := range port {
			if c < '0' || c > '9' {
				return false
			}
		}
	}
	return true
}

// validProxyURL reports whether a proxy URL parses with a host and a
// supported scheme, returning a reason otherwise.
func checkProxyURL(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.Host == "" {
		return reasonInvalidProxy
	}
	switch strings.ToLower(p.Scheme) {
	case "http", "https", "socks5":
		return ""
	}
	return reasonProxyProtocol
}
