package auth

import (
	"context"
	"encoding/base64"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/config"
	"github.com/couchepi/couchepi/hooks"
)

// UserLookup returns the decoded `_users` doc `org.couchdb.user:<name>`, or
// nil when there is none.
type UserLookup func(ctx context.Context, name string) (map[string]any, error)

// Authenticator resolves the user context of requests.
type Authenticator struct {
	cfg    *config.Config
	lookup UserLookup
	now    func() time.Time

	mu    sync.Mutex
	cache map[string]time.Time // credKey -> expiry of a verified password

	lock *lockout
}

// ErrLocked is CouchDB 3.5's answer for a locked-out account.
var ErrLocked = &hooks.Error{Status: 403, Err: "forbidden", Reason: "Account is temporarily locked due to multiple authentication failures"}

// New returns an Authenticator reading admins and the cookie secret from
// cfg and users through lookup.
func New(cfg *config.Config, lookup UserLookup) *Authenticator {
	return &Authenticator{cfg: cfg, lookup: lookup, now: time.Now, cache: map[string]time.Time{}, lock: newLockout()}
}

// HashAdmins replaces every plain-text password in `[admins]` by its pbkdf2
// hash and persists the result, as CouchDB does at start-up.
func HashAdmins(cfg *config.Config) error {
	admins, _ := cfg.Section("admins")
	prf := cfg.GetDefault("chttpd_auth", "pbkdf2_prf", "sha256")
	it := int(cfg.Int("chttpd_auth", "iterations", 600000))
	for name, v := range admins {
		if IsHashedAdmin(v) {
			continue
		}
		h, err := HashAdminPassword(v, prf, it)
		if err != nil {
			return err
		}
		if _, _, err := cfg.Set("admins", name, h); err != nil {
			return err
		}
	}
	return nil
}

// credentials returns the stored credentials and roles of name.
func (a *Authenticator) credentials(ctx context.Context, name string) (Credentials, []string, bool) {
	if v, ok := a.cfg.Get("admins", name); ok {
		c, err := ParseAdminHash(v)
		if err != nil {
			return Credentials{}, nil, false
		}
		return c, []string{"_admin"}, true
	}
	if a.lookup == nil {
		return Credentials{}, nil, false
	}
	doc, err := a.lookup(ctx, name)
	if err != nil || doc == nil {
		return Credentials{}, nil, false
	}
	c, ok := UserCredentials(doc)
	if !ok {
		return Credentials{}, nil, false
	}
	roles := []string{}
	if rs, ok := doc["roles"].([]any); ok {
		for _, r := range rs {
			if s, ok := r.(string); ok {
				roles = append(roles, s)
			}
		}
	}
	return c, roles, true
}

// Login verifies name/password sent from peer (the client's address) with
// CouchDB's lockout: an existing user with too many recent failures from
// peer gets ErrLocked; wrong credentials get ErrUnauthorized.
func (a *Authenticator) Login(ctx context.Context, name, password, peer string) (hooks.UserCtx, *hooks.Error) {
	enforce := a.cfg.GetDefault("chttpd_auth_lockout", "mode", "enforce") == "enforce"
	threshold := int(a.cfg.Int("chttpd_auth_lockout", "threshold", 5))
	lifetime := time.Duration(a.cfg.Int("chttpd_auth_lockout", "max_lifetime", 300000)) * time.Millisecond
	now := a.now()
	if enforce && a.lock.locked(name, peer, threshold, lifetime, now) {
		return hooks.UserCtx{}, ErrLocked
	}
	u, ok := a.CheckPassword(ctx, name, password)
	if !ok {
		if _, _, exists := a.credentials(ctx, name); exists {
			a.lock.fail(name, peer, lifetime, now)
		}
		return hooks.UserCtx{}, ErrUnauthorized
	}
	return u, nil
}

// CheckPassword verifies name/password and returns the user's context.
// Successful checks are cached for the session timeout so that basic auth
// on every request does not pay a full pbkdf2 derivation.
func (a *Authenticator) CheckPassword(ctx context.Context, name, password string) (hooks.UserCtx, bool) {
	c, roles, ok := a.credentials(ctx, name)
	if !ok {
		return hooks.UserCtx{}, false
	}
	key := credKey(name, c, password)
	now := a.now()
	a.mu.Lock()
	exp, hit := a.cache[key]
	a.mu.Unlock()
	if !hit || now.After(exp) {
		if !c.Verify(password) {
			return hooks.UserCtx{}, false
		}
		a.mu.Lock()
		if len(a.cache) > 10000 {
			a.cache = map[string]time.Time{}
		}
		a.cache[key] = now.Add(a.timeout())
		a.mu.Unlock()
	}
	return hooks.UserCtx{Name: name, Roles: roles}, true
}

func (a *Authenticator) timeout() time.Duration {
	return time.Duration(a.cfg.Int("chttpd_auth", "timeout", 600)) * time.Second
}

// Cookie returns a fresh AuthSession cookie value for name.
func (a *Authenticator) Cookie(ctx context.Context, name string) (string, bool) {
	c, _, ok := a.credentials(ctx, name)
	if !ok {
		return "", false
	}
	secret, _ := a.cfg.Get("chttpd_auth", "secret")
	return MakeCookie(name, secret, c.Salt, a.now()), true
}

// SetCookieHeader formats the Set-Cookie header CouchDB sends for a
// session cookie made at now for a request to r, in mochiweb's order and
// date format: persistent (Expires and Max-Age of [chttpd_auth] timeout)
// unless [chttpd_auth] allow_persistent_cookies is false, Secure over
// https, and [chttpd_auth] cookie_domain and same_site when set. CouchDB
// clears a session (a failed login, DELETE /_session) with the same
// attributes and an empty value.
func (a *Authenticator) SetCookieHeader(r *http.Request, value string, now time.Time) string {
	h := CookieName + "=" + value + "; Version=1"
	if a.cfg.GetDefault("chttpd_auth", "allow_persistent_cookies", "true") != "false" {
		t := a.timeout()
		h += "; Expires=" + now.Add(t).UTC().Format("Mon, 02-Jan-2006 15:04:05 GMT") +
			"; Max-Age=" + strconv.Itoa(int(t/time.Second))
	}
	if r.TLS != nil {
		h += "; Secure"
	}
	if d := a.cfg.GetDefault("chttpd_auth", "cookie_domain", ""); d != "" {
		h += "; Domain=" + d
	}
	h += "; Path=/; HttpOnly"
	switch strings.ToLower(a.cfg.GetDefault("chttpd_auth", "same_site", "")) {
	case "none":
		h += "; SameSite=None"
	case "lax":
		h += "; SameSite=Lax"
	case "strict":
		h += "; SameSite=Strict"
	}
	return h
}

// ErrUnauthorized is CouchDB's 401 for bad basic-auth credentials.
var ErrUnauthorized = &hooks.Error{Status: 401, Err: "unauthorized", Reason: "Name or password is incorrect."}

// Authenticate returns the user context of r: from basic auth when an
// Authorization header is present (bad credentials → 401), else from a valid
// AuthSession cookie, else anonymous. refresh is a new cookie value to send
// when the session cookie is more than half-way to expiry, else "".
func (a *Authenticator) Authenticate(r *http.Request) (user hooks.UserCtx, refresh string, err *hooks.Error) {
	if h := r.Header.Get("Authorization"); h != "" {
		if name, pw, ok := parseBasic(h); ok {
			u, err := a.Login(r.Context(), name, pw, Peer(r))
			if err != nil {
				return hooks.UserCtx{}, "", err
			}
			return u, "", nil
		}
	}
	if ck, e := r.Cookie(CookieName); e == nil && ck.Value != "" {
		if u, fresh, ok := a.checkCookie(r.Context(), ck.Value); ok {
			return u, fresh, nil
		}
	}
	return hooks.UserCtx{Roles: []string{}}, "", nil
}

func (a *Authenticator) checkCookie(ctx context.Context, v string) (hooks.UserCtx, string, bool) {
	name, t, mac, ok := ParseCookie(v)
	if !ok {
		return hooks.UserCtx{}, "", false
	}
	c, roles, ok := a.credentials(ctx, name)
	if !ok {
		return hooks.UserCtx{}, "", false
	}
	secret, _ := a.cfg.Get("chttpd_auth", "secret")
	if !VerifyCookieMAC(name, t, mac, secret, c.Salt) {
		return hooks.UserCtx{}, "", false
	}
	now := a.now()
	timeout := a.timeout()
	if now.Sub(t) >= timeout {
		return hooks.UserCtx{}, "", false
	}
	fresh := ""
	if now.Sub(t) > timeout/2 {
		fresh = MakeCookie(name, secret, c.Salt, now)
	}
	return hooks.UserCtx{Name: name, Roles: roles}, fresh, true
}

func parseBasic(h string) (string, string, bool) {
	const prefix = "basic "
	if len(h) < len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return "", "", false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(h[len(prefix):]))
	if err != nil {
		return "", "", false
	}
	name, pw, ok := strings.Cut(string(raw), ":")
	return name, pw, ok
}

// Iterations returns the configured pbkdf2 iteration count for new hashes.
func Iterations(cfg *config.Config) int {
	n, err := strconv.Atoi(cfg.GetDefault("chttpd_auth", "iterations", "600000"))
	if err != nil || n < 1 {
		return 600000
	}
	return n
}

// Peer is the client address of r (without the port) for lockout.
func Peer(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
