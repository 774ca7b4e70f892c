package couchclient

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Session auth timings, CouchDB's couch_replicator_auth_session values.
const (
	// sessionRefreshInterval is used when the cookie has no Max-Age (session_refresh_interval_sec).
	sessionRefreshInterval = 550 * time.Second
	// minRefreshGap is the least time between two refreshes caused by 401/403.
	minRefreshGap = 5 * time.Second
)

// session is the AuthSession cookie auth of one endpoint, falling back to
// HTTP basic auth when the server has no `_session` (404) or refuses it.
type session struct {
	c *Client

	mu          sync.Mutex
	basic       bool // fall back to basic auth for good
	cookie      string
	refreshAt   time.Time
	lastRefresh time.Time
}

func newSession(c *Client) *session {
	return &session{c: c, basic: c.ep.Auth == nil}
}

// active reports whether requests carry a session cookie (so a 401/403 may mean it expired).
func (s *session) active() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.basic
}

// authorize adds the cookie, or basic credentials, to req.
func (s *session) authorize(ctx context.Context, req *http.Request) {
	ba := s.c.ep.Auth
	if ba == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.basic && (s.cookie == "" || time.Now().After(s.refreshAt)) {
		s.refreshLocked(ctx)
	}
	if s.basic || s.cookie == "" {
		req.SetBasicAuth(ba.Username, ba.Password)
		return
	}
	req.Header.Set("Cookie", "AuthSession="+s.cookie)
}

// refreshDue logs in when the cookie is missing or due for renewal, as
// part of the request about to be sent (whose place in its server's budget
// it uses).
func (s *session) refreshDue(ctx context.Context) {
	if s.c.ep.Auth == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.basic && (s.cookie == "" || time.Now().After(s.refreshAt)) {
		s.refreshLocked(ctx)
	}
}

// refreshAfterReject renews the cookie after a 401/403; it reports whether a retry makes sense.
func (s *session) refreshAfterReject(ctx context.Context) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.basic || time.Since(s.lastRefresh) < minRefreshGap {
		return false
	}
	return s.refreshLocked(ctx)
}

// observe picks up a renewed AuthSession cookie from any response of the
// endpoint's origin (not from a host a redirect led to).
func (s *session) observe(resp *http.Response) {
	if s.c.ep.Auth == nil || !s.c.sameOrigin(resp) {
		return
	}
	for _, ck := range resp.Cookies() {
		if ck.Name == "AuthSession" && ck.Value != "" {
			s.mu.Lock()
			if !s.basic {
				s.setLocked(ck)
			}
			s.mu.Unlock()
		}
	}
}

func (s *session) setLocked(ck *http.Cookie) {
	s.cookie = ck.Value
	if ck.MaxAge > 0 {
		s.refreshAt = time.Now().Add(time.Duration(float64(ck.MaxAge) * 0.9 * float64(time.Second)))
	} else {
		s.refreshAt = time.Now().Add(sessionRefreshInterval)
	}
}

// refreshLocked POSTs name/password to <root>/_session. 404 (no session
// support) switches the endpoint to basic auth for good; other failures use
// basic auth for this request and try the session again at the next refresh.
func (s *session) refreshLocked(ctx context.Context) bool {
	s.lastRefresh = time.Now()
	ba := s.c.ep.Auth
	u := *s.c.base
	u.Path, u.RawPath, u.RawQuery, u.User = "/_session", "", "", nil
	form := url.Values{"name": {ba.Username}, "password": {ba.Password}}.Encode()
	rctx, cancel := context.WithTimeout(ctx, s.c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, u.String(), strings.NewReader(form))
	if err != nil {
		return false
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", s.c.headers.Get("User-Agent"))
	hc, err := s.c.httpClient()
	if err != nil {
		return false
	}
	// The body is the password: a redirect is not followed (a 307 or 308
	// would send it on), and counts as no session.
	resp, err := (&http.Client{Transport: hc.Transport, CheckRedirect: noRedirect}).Do(req)
	if err != nil {
		s.c.log.Debug("session request failed, using basic auth", "error", err.Error())
		s.cookie = ""
		s.refreshAt = time.Now().Add(minRefreshGap)
		return false
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	// A server asking to wait (Retry-After) asks every request, this one's too.
	s.c.budget.observe(nil, resp.StatusCode, resp.Header)
	if resp.StatusCode == http.StatusNotFound {
		s.c.log.Debug("endpoint has no _session, using basic auth")
		s.basic = true
		s.cookie = ""
		return false
	}
	if resp.StatusCode/100 == 2 {
		for _, ck := range resp.Cookies() {
			if ck.Name == "AuthSession" && ck.Value != "" {
				s.setLocked(ck)
				return true
			}
		}
	}
	s.c.log.Debug("session not granted, using basic auth", "status", resp.StatusCode)
	s.cookie = ""
	s.refreshAt = time.Now().Add(sessionRefreshInterval)
	return false
}
