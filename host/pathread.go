package host

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/couchepi/couchepi/hooks"
)

// A server reads a request's path into a db, a doc and the rest in one of
// several ways: CouchDB (and the middleware) split the escaped path at its
// slashes and unescape each segment; routers over r.URL.Path split the
// decoded path, where %2F is a slash; some merge empty segments, resolve
// dot segments or cut ;parameters off segments. A request that reads the
// same under all of them is classified as it reads; one that does not
// cannot be classified without doubt and is refused when any reading
// names a db the plugins subscribe to (its doc could be read or written
// past the hooks), and let through untouched otherwise.

// errDoubtfulPath answers requests whose path may name another db or doc
// on the server than it seems to (or whose method is not in capitals).
var errDoubtfulPath = &hooks.Error{Status: http.StatusBadRequest, Err: "bad_request",
	Reason: "The request may name another database, document or method on this server than it seems to (an empty or dot segment, a trailing slash, an escaped slash, a ';' or a method not in capitals): send it in its plain form."}

// dbHooks are the hooks whose subscriptions make a db one the middleware
// must classify requests to.
var dbHooks = []hooks.Hook{hooks.BeforeDocUpdate, hooks.AfterDocRead, hooks.AfterDocWrite,
	hooks.AfterDBCreate, hooks.AfterDBDelete, hooks.DBUpdated}

// segments returns the unescaped segments of r's path as the middleware
// classifies them; plain is false for a path that does not read the same
// to every server (then err is set when it may touch a subscribed db).
func (m *Middleware) segments(r *http.Request) (segs []string, plain bool, err *hooks.Error) {
	escaped := r.URL.EscapedPath()
	own := split(escaped, true)
	upper := strings.ToUpper(r.Method) == r.Method // some servers read methods without case
	if upper && plainForm(escaped) {
		return own, true, nil
	}
	if (r.Method == http.MethodGet || r.Method == http.MethodHead) && len(own) == 2 && own[1] == "" &&
		!strings.ContainsAny(escaped, ";%") && own[0] != "" && own[0] != "." && own[0] != ".." {
		// GET /db/ is the db's info to every reading (or a doc named "",
		// which no server stores).
		return own[:1], true, nil
	}
	readings := [][]string{own}
	if !m.EscapedPaths {
		readings = append(readings, split(r.URL.Path, false))
	}
	for _, rd := range readings[:len(readings)] {
		readings = append(readings, merged(rd), cleaned(rd), paramsCut(rd))
	}
	plain = upper && !hasEmptyOrDot(own)
	for _, rd := range readings[1:] {
		plain = plain && shape(rd) == shape(own)
	}
	if plain {
		return own, true, nil
	}
	for _, rd := range readings {
		if len(rd) > 0 && m.touches(rd[0]) {
			return nil, false, errDoubtfulPath
		}
	}
	return own, false, nil
}

// plainForm reports whether an escaped path reads the same every way
// without looking further: nothing escaped, no ';', no empty or dot
// segment (most requests).
func plainForm(escaped string) bool {
	if strings.ContainsAny(escaped, "%;") || strings.Contains(escaped, "//") || len(escaped) > 1 && strings.HasSuffix(escaped, "/") {
		return false
	}
	for i := strings.Index(escaped, "/."); i >= 0; i = strings.Index(escaped, "/.") {
		escaped = escaped[i+2:]
		if escaped == "" || escaped[0] == '/' || escaped[0] == '.' && (len(escaped) == 1 || escaped[1] == '/') {
			return false
		}
	}
	return true
}

// touches reports whether a plugin subscribes to any hook of db.
func (m *Middleware) touches(db string) bool {
	for _, h := range dbHooks {
		if m.Host.Subscribed(h, db) {
			return true
		}
	}
	return false
}

// split splits a path at its slashes, keeping empty segments (the
// leading slash starts none); unescape unescapes each segment.
func split(path string, unescape bool) []string {
	path = strings.TrimPrefix(path, "/")
	if path == "" {
		return nil
	}
	parts := strings.Split(path, "/")
	if unescape {
		for i, p := range parts {
			if u, err := url.PathUnescape(p); err == nil {
				parts[i] = u
			}
		}
	}
	return parts
}

// merged is segs without its empty segments (a router merging //).
func merged(segs []string) []string {
	var out []string
	for _, s := range segs {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// cleaned is segs with dot segments resolved, as path.Clean does.
func cleaned(segs []string) []string {
	var out []string
	for _, s := range segs {
		switch s {
		case "", ".":
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		default:
			out = append(out, s)
		}
	}
	return out
}

// paramsCut is segs with ;parameters cut off every segment.
func paramsCut(segs []string) []string {
	out := make([]string, len(segs))
	for i, s := range segs {
		out[i], _, _ = strings.Cut(s, ";")
	}
	return out
}

func hasEmptyOrDot(segs []string) bool {
	for _, s := range segs {
		if s == "" || s == "." || s == ".." {
			return true
		}
	}
	return false
}

// shape is what decides how a request is classified: its db, how many
// segments follow and which of them are special (_design, _local,
// _all_docs…); doc ids and attachment names are not part of it, since a
// doc read or written under another id still passes the hooks.
func shape(segs []string) string {
	var b strings.Builder
	for i, s := range segs {
		if i > 0 {
			b.WriteByte('/')
			if !strings.HasPrefix(s, "_") {
				s = "*"
			}
		}
		b.WriteString(s)
	}
	return b.String()
}
