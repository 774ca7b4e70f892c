package park

import (
	"net"
	"net/url"
	"strings"

	"github.com/couchepi/couchepi/parse"
)

// source names the db a parked job reads: the server it lives on and the
// db's name. server is the server's root URL for the local server, and
// the root URL plus the user the job reads as for a remote one (jobs of
// different users on one server do not share a feed).
type source struct {
	server string
	db     string
}

// splitDB splits a db URL into its server's root URL (with a trailing
// "/") and the db name (unescaped). ok is false when the URL names no db.
func splitDB(dbURL string) (root, db string, ok bool) {
	u, err := url.Parse(dbURL)
	if err != nil || u.Host == "" || u.RawQuery != "" {
		return "", "", false
	}
	p := strings.TrimSuffix(u.EscapedPath(), "/")
	i := strings.LastIndexByte(p, '/')
	if i < 0 || i == len(p)-1 {
		return "", "", false
	}
	name, err := url.PathUnescape(p[i+1:])
	if err != nil {
		return "", "", false
	}
	u.RawPath, u.Path = "", ""
	root = u.Scheme + "://" + normalHost(u) + p[:i+1]
	return root, name, true
}

// normalHost is u's host:port in lower case with the scheme's default
// port made explicit, and "localhost" as 127.0.0.1, so two spellings of
// one server compare equal.
func normalHost(u *url.URL) string {
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	if host == "localhost" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// localRoot normalises the server's own base URL as splitDB does; "" when
// it is not an http(s) URL.
func localRoot(base string) string {
	u, err := url.Parse(base)
	if err != nil || u.Host == "" || u.Scheme != "http" && u.Scheme != "https" {
		return ""
	}
	p := u.EscapedPath()
	if !strings.HasSuffix(p, "/") {
		p += "/"
	}
	return u.Scheme + "://" + normalHost(u) + p
}

// sourceOf returns the source of a job reading ep, and whether it is on
// the local server (local is the localRoot of the server's URL).
func sourceOf(ep parse.Endpoint, local string) (src source, isLocal, ok bool) {
	root, db, ok := splitDB(ep.URL)
	if !ok {
		return source{}, false, false
	}
	if root == local && ep.Proxy == "" {
		return source{server: root, db: db}, true, true
	}
	user := ""
	if ep.Auth != nil {
		user = ep.Auth.Username
	}
	return source{server: root + "\x00" + user, db: db}, false, true
}

// rootURL is the root URL of a server key.
func rootURL(server string) string {
	root, _, _ := strings.Cut(server, "\x00")
	return root
}
