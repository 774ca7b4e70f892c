package parse

import (
	"encoding/base64"
	"encoding/json"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/couchepi/couchepi/internal/jsonobj"
)

// header is one user header, in document order.
type header struct{ Name, Value string }

// local describes how POST /_replicate rewrites bare database names; a nil
// *local (replication docs) makes bare names invalid.
type local struct {
	baseURL string
	headers map[string]string
}

// parseEndpoint turns the raw `source`/`target` value into an Endpoint:
// URL without userinfo and with the trailing-slash rule applied, the one
// basic credential after CouchDB's precedence rules, the remaining headers,
// other auth settings and the proxy.
func parseEndpoint(side string, raw json.RawMessage, proxy string, loc *local) (Endpoint, *Error) {
	var (
		rawURL  string
		headers []header
		authMs  jsonobj.Object
		hasAuth bool
	)
	switch kindOf(raw) {
	case kindInvalid, kindNull:
		return Endpoint{}, newError(reasonMissing(side))
	case kindString:
		rawURL, _ = rawString(raw)
		if rawURL == "" {
			return Endpoint{}, newError(reasonMissing(side))
		}
	case kindObject:
		ms, err := jsonobj.Parse(raw)
		if err != nil {
			return Endpoint{}, newError(reasonEndpointType(side))
		}
		u, ok := ms.Get("url")
		if !ok {
			return Endpoint{}, newError(reasonNeedsURL(side))
		}
		if rawURL, ok = rawString(u); !ok || rawURL == "" {
			return Endpoint{}, newError(reasonInvalidURL(side))
		}
		if h, ok := ms.Get("headers"); ok {
			if headers, err = parseHeaders(h); err != nil {
				return Endpoint{}, err.(*Error)
			}
		}
		if a, ok := ms.Get("auth"); ok {
			if kindOf(a) != kindObject {
				return Endpoint{}, newError(reasonAuthObject)
			}
			if authMs, err = jsonobj.Parse(a); err != nil {
				return Endpoint{}, newError(reasonAuthObject)
			}
			hasAuth = true
		}
	default:
		return Endpoint{}, newError(reasonEndpointType(side))
	}

	if !hasHTTPScheme(rawURL) {
		if scheme, _, ok := strings.Cut(rawURL, "://"); ok && validScheme(scheme) {
			return Endpoint{}, newError(reasonURLScheme(side, scheme))
		}
		if loc == nil {
			return Endpoint{}, newError(reasonLocalEndpoint(side))
		}
		rawURL = strings.TrimSuffix(loc.baseURL, "/") + "/" + url.PathEscape(rawURL)
		headers = mergeLocalHeaders(headers, loc.headers)
	}

	e := Endpoint{Proxy: proxy}
	bare, urlCreds := splitCredentials(rawURL)
	e.URL = addTrailingSlash(bare)
	if !validHTTPURL(e.URL) {
		return Endpoint{}, newError(reasonInvalidURL(side))
	}

	headers, headerCreds := takeBasicHeader(headers)
	var authCreds *BasicAuth
	if hasAuth {
		var other jsonobj.Object
		for _, m := range authMs {
			if m.Key == "basic" {
				if authCreds == nil {
					authCreds = basicFromAuth(m.Value)
				}
				continue
			}
			other = append(other, m)
		}
		if len(other) > 0 {
			e.AuthOther = compact(other.Bytes())
		}
	}
	switch {
	case authCreds != nil:
		e.Auth = authCreds
	case urlCreds != nil:
		e.Auth = urlCreds
	case headerCreds != nil:
		e.Auth = headerCreds
	}
	if len(headers) > 0 {
		e.Headers = make(map[string]string, len(headers))
		for _, h := range headers {
			if _, dup := e.Headers[h.Name]; !dup {
				e.Headers[h.Name] = h.Value
			}
		}
	}
	return e, nil
}

// parseHeaders reads an endpoint's `headers` object in document order.
func parseHeaders(raw json.RawMessage) ([]header, error) {
	if kindOf(raw) != kindObject {
		return nil, newError(reasonHeadersObject)
	}
	ms, err := jsonobj.Parse(raw)
	if err != nil {
		return nil, newError(reasonHeadersObject)
	}
	hs := make([]header, 0, len(ms))
	for _, m := range ms {
		v, ok := rawString(m.Value)
		if !ok {
			return nil, newError(reasonHeaderValues)
		}
		hs = append(hs, header{Name: m.Key, Value: v})
	}
	return hs, nil
}

// mergeLocalHeaders adds the request's headers copied for a local endpoint
// under the user's own (a user header of the same name wins).
func mergeLocalHeaders(hs []header, localHeaders map[string]string) []header {
	for name, v := range localHeaders {
		found := false
		for _, h := range hs {
			if strings.EqualFold(h.Name, name) {
				found = true
				break
			}
		}
		if !found {
			hs = append(hs, header{Name: name, Value: v})
		}
	}
	return hs
}

// takeBasicHeader removes the first `Authorization: Basic …` header (name
// and scheme case-insensitive) and decodes its credential. The header is
// removed even when its base64 or "user:password" form is bad, in which
// case there is no credential. Other Authorization schemes stay.
func takeBasicHeader(hs []header) ([]header, *BasicAuth) {
	for i, h := range hs {
		if !strings.EqualFold(h.Name, "authorization") {
			continue
		}
		scheme, rest, _ := strings.Cut(h.Value, " ")
		if !strings.EqualFold(scheme, "basic") {
			return hs, nil
		}
		out := append(append([]header(nil), hs[:i]...), hs[i+1:]...)
		return out, decodeBasic(strings.TrimSpace(rest))
	}
	return hs, nil
}

// decodeBasic decodes the base64 "user:password" of a basic credential.
func decodeBasic(b64 string) *BasicAuth {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		if raw, err = base64.RawStdEncoding.DecodeString(b64); err != nil {
			return nil
		}
	}
	user, pass, ok := strings.Cut(string(raw), ":")
	if !ok || !utf8.ValidString(user) || !utf8.ValidString(pass) {
		return nil
	}
	return &BasicAuth{Username: user, Password: pass}
}

// basicFromAuth reads `auth.basic` = {"username":…, "password":…}; anything
// else is tolerated as no credential.
func basicFromAuth(raw json.RawMessage) *BasicAuth {
	if kindOf(raw) != kindObject {
		return nil
	}
	ms, err := jsonobj.Parse(raw)
	if err != nil {
		return nil
	}
	u, ok1 := ms.Get("username")
	p, ok2 := ms.Get("password")
	if !ok1 || !ok2 {
		return nil
	}
	user, ok1 := rawString(u)
	pass, ok2 := rawString(p)
	if !ok1 || !ok2 {
		return nil
	}
	return &BasicAuth{Username: user, Password: pass}
}
