package couchclient

import (
	"crypto/sha256"
	"weak"
)

// A pool's endpoints share their session cookies by server and
// credentials: each job used to log in on its own, so the thousand jobs
// of a fan-out sent a thousand `_session` requests to their source (and
// as many to their targets) every time they were woken. The cookies are
// kept through weak pointers: the state goes once no client holds it.

// sessionKey names a server and credentials, hashed so that the map holds
// no password: the origin, the proxy, whether the host policy applies
// (a restricted client's login must pass it) and the credentials.
type sessionKey [sha256.Size]byte

func sessionKeyOf(c *Client) sessionKey {
	h := sha256.New()
	restricted := "0"
	if c.restricted {
		restricted = "1"
	}
	for _, part := range []string{c.origin, c.ep.Proxy, restricted, c.ep.Auth.Username, c.ep.Auth.Password} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	var k sessionKey
	h.Sum(k[:0])
	return k
}

// sessionOf returns the session state c shares with the pool's other
// clients of the same server and credentials.
func (p *Pool) sessionOf(c *Client) *sessionState {
	k := sessionKeyOf(c)
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.sessions[k].Value(); s != nil {
		return s
	}
	if p.sessions == nil {
		p.sessions = map[sessionKey]weak.Pointer[sessionState]{}
	}
	if len(p.sessions) >= p.sessionsSweep {
		for key, w := range p.sessions {
			if w.Value() == nil {
				delete(p.sessions, key)
			}
		}
		p.sessionsSweep = max(64, 2*len(p.sessions))
	}
	s := &sessionState{}
	p.sessions[k] = weak.Make(s)
	return s
}
