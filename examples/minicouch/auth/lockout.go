package auth

import (
	"sync"
	"time"
)

// lockout implements CouchDB 3.5's `[chttpd_auth_lockout]`: after
// `threshold` failed logins of an existing user from one client address,
// that user is refused from that address for `max_lifetime` ms, even with
// the right password.
type lockout struct {
	mu       sync.Mutex
	failures map[lockKey]*lockEntry
}

type lockKey struct{ user, peer string }

type lockEntry struct {
	count int
	first time.Time
}

func newLockout() *lockout { return &lockout{failures: map[lockKey]*lockEntry{}} }

// locked reports whether user is locked out from peer at now.
func (l *lockout) locked(user, peer string, threshold int, lifetime time.Duration, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.failures[lockKey{user, peer}]
	if e == nil {
		return false
	}
	if now.Sub(e.first) > lifetime {
		delete(l.failures, lockKey{user, peer})
		return false
	}
	return e.count >= threshold
}

// fail records a failed login of user from peer.
func (l *lockout) fail(user, peer string, lifetime time.Duration, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.failures) > 100000 {
		l.failures = map[lockKey]*lockEntry{}
	}
	k := lockKey{user, peer}
	e := l.failures[k]
	if e == nil || now.Sub(e.first) > lifetime {
		e = &lockEntry{first: now}
		l.failures[k] = e
	}
	e.count++
}
