package couchclient

import (
	"context"
	"errors"
	"net/http"

	"github.com/couchepi/couchepi/parse"
)

// maxRedirects is how many redirects one request follows, as Go's client.
const maxRedirects = 10

// credentialHeaders carry credentials: they never follow a redirect that
// leaves the endpoint's origin.
var credentialHeaders = []string{"Authorization", "Cookie", "Cookie2", "Proxy-Authorization"}

// ownHeadersKey is the context key of the headers a Request set itself
// (Request.Header), which may follow any redirect.
type ownHeadersKey struct{}

// checkRedirect follows up to maxRedirects redirects. Go's client copies
// the first request's headers into each redirect; once the chain has left
// the endpoint's origin, the rest of it (a way back included, as Go does
// since 1.22: the other host chose that path) carries no credential header,
// no Referer and none of the endpoint's user headers, whose defaults
// (Accept, User-Agent) are restored. Go would keep them for another port, another
// scheme or a subdomain. A restricted endpoint is not redirected to a host
// the host policy forbids.
func (c *Client) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return errors.New("stopped after 10 redirects")
	}
	if err := c.checkHost(req.URL); err != nil {
		return err
	}
	home := parse.Origin(via[0].URL)
	left := parse.Origin(req.URL) != home
	for _, r := range via[1:] {
		left = left || parse.Origin(r.URL) != home
	}
	if !left {
		return nil
	}
	for _, k := range credentialHeaders {
		delete(req.Header, k)
	}
	// Go adds the previous URL as Referer, query included (filter
	// parameters, say); CouchDB sends none.
	delete(req.Header, "Referer")
	own, _ := req.Context().Value(ownHeadersKey{}).(http.Header)
	for _, k := range c.userKeys {
		if _, ok := own[k]; ok {
			continue
		}
		delete(req.Header, k)
		if v, ok := c.defaults[k]; ok {
			req.Header[k] = v
		}
	}
	return nil
}

// sameOrigin reports whether resp came from the endpoint's own origin, not
// from a host a redirect led to.
func (c *Client) sameOrigin(resp *http.Response) bool {
	return resp.Request == nil || resp.Request.URL == nil || parse.Origin(resp.Request.URL) == c.origin
}

// withOwnHeaders records in ctx the headers r sets itself, for
// checkRedirect; only needed when the endpoint has user headers.
func (c *Client) withOwnHeaders(ctx context.Context, r *Request) context.Context {
	if len(c.userKeys) == 0 || len(r.Header) == 0 {
		return ctx
	}
	return context.WithValue(ctx, ownHeadersKey{}, r.Header)
}

// noRedirect makes a client return a redirect as the response.
func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
