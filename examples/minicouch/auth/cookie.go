package auth

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"hash"
	"strconv"
	"strings"
	"time"
)

// CookieName is the name of CouchDB's session cookie.
const CookieName = "AuthSession"

func cookieMAC(h func() hash.Hash, secret, userSalt, data string) []byte {
	m := hmac.New(h, []byte(secret+userSalt))
	m.Write([]byte(data))
	return m.Sum(nil)
}

// MakeCookie returns the value of an AuthSession cookie for name issued at
// t: base64url(name ":" hex-unix-time ":" hmac-sha256(secret+userSalt)).
func MakeCookie(name, secret, userSalt string, t time.Time) string {
	data := name + ":" + strconv.FormatInt(t.Unix(), 16)
	mac := cookieMAC(sha256.New, secret, userSalt, data)
	return base64.RawURLEncoding.EncodeToString(append([]byte(data+":"), mac...))
}

// ParseCookie splits an AuthSession cookie value into the user name, the
// issue time and the raw MAC; ok is false when it is malformed.
func ParseCookie(v string) (name string, t time.Time, mac []byte, ok bool) {
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(v, "="))
	if err != nil {
		return "", time.Time{}, nil, false
	}
	// The name may contain ':' in principle; the timestamp and MAC follow
	// the last two separators, and the MAC is binary: find the separators
	// from the left of the name/timestamp part.
	s := string(raw)
	i := strings.Index(s, ":")
	if i < 0 {
		return "", time.Time{}, nil, false
	}
	j := strings.Index(s[i+1:], ":")
	if j < 0 {
		return "", time.Time{}, nil, false
	}
	ts, err := strconv.ParseInt(s[i+1:i+1+j], 16, 64)
	if err != nil {
		return "", time.Time{}, nil, false
	}
	return s[:i], time.Unix(ts, 0), raw[i+1+j+1:], true
}

// VerifyCookieMAC checks the MAC of a parsed cookie (sha256, or sha1 as
// older CouchDB issued).
func VerifyCookieMAC(name string, t time.Time, mac []byte, secret, userSalt string) bool {
	data := name + ":" + strconv.FormatInt(t.Unix(), 16)
	return hmac.Equal(mac, cookieMAC(sha256.New, secret, userSalt, data)) ||
		hmac.Equal(mac, cookieMAC(sha1.New, secret, userSalt, data))
}
