// Package auth authenticates minicouch requests as CouchDB 3.x does: server
// admins from `[admins]`, users from the `_users` db (pbkdf2 password
// hashes), HTTP basic auth, `AuthSession` cookies, and `_security`
// members/admins checks.
package auth

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"hash"
	"strconv"
	"strings"
)

// NewSalt returns a random 32-hex-digit salt, as couch_uuids:random/0.
func NewSalt() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func prfHash(prf string) (func() hash.Hash, int, error) {
	switch prf {
	case "", "sha":
		return sha1.New, sha1.Size, nil
	case "sha224", "sha256":
		return sha256.New, sha256.Size, nil
	}
	return nil, 0, fmt.Errorf("unsupported pbkdf2_prf %q", prf)
}

// DeriveKey returns the hex pbkdf2 derived key of password with the hex
// salt string used as bytes, as CouchDB's couch_passwords:pbkdf2 does.
func DeriveKey(prf, password, salt string, iterations int) (string, error) {
	h, size, err := prfHash(prf)
	if err != nil {
		return "", err
	}
	if iterations < 1 {
		return "", fmt.Errorf("iterations must be positive")
	}
	dk, err := pbkdf2.Key(h, password, []byte(salt), iterations, size)
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(dk), nil
}

// HashAdminPassword returns CouchDB 3.x's `[admins]` form of a password:
// "-pbkdf2:<prf>-<derived key>,<salt>,<iterations>".
func HashAdminPassword(password, prf string, iterations int) (string, error) {
	salt := NewSalt()
	dk, err := DeriveKey(prf, password, salt, iterations)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("-pbkdf2:%s-%s,%s,%d", prf, dk, salt, iterations), nil
}

// IsHashedAdmin reports whether an `[admins]` value is already hashed.
func IsHashedAdmin(v string) bool {
	return strings.HasPrefix(v, "-pbkdf2") || strings.HasPrefix(v, "-hashed-")
}

// Credentials is a stored password hash, from `[admins]` or a `_users` doc.
type Credentials struct {
	Scheme     string // "pbkdf2" or "simple"
	PRF        string // pbkdf2 prf: "sha" (sha1) or "sha256"
	DerivedKey string // hex; for "simple" the password_sha
	Salt       string
	Iterations int
}

// ParseAdminHash parses an `[admins]` value (both the 3.x
// "-pbkdf2:sha256-…" and the older "-pbkdf2-…" and "-hashed-…" forms).
func ParseAdminHash(v string) (Credentials, error) {
	switch {
	case strings.HasPrefix(v, "-hashed-"):
		parts := strings.Split(strings.TrimPrefix(v, "-hashed-"), ",")
		if len(parts) != 2 {
			return Credentials{}, fmt.Errorf("bad admin hash")
		}
		return Credentials{Scheme: "simple", DerivedKey: parts[0], Salt: parts[1]}, nil
	case strings.HasPrefix(v, "-pbkdf2"):
		rest := strings.TrimPrefix(v, "-pbkdf2")
		prf := "sha"
		if strings.HasPrefix(rest, ":") {
			i := strings.Index(rest, "-")
			if i < 0 {
				return Credentials{}, fmt.Errorf("bad admin hash")
			}
			prf, rest = rest[1:i], rest[i:]
		}
		parts := strings.Split(strings.TrimPrefix(rest, "-"), ",")
		if len(parts) != 3 {
			return Credentials{}, fmt.Errorf("bad admin hash")
		}
		it, err := strconv.Atoi(parts[2])
		if err != nil {
			return Credentials{}, fmt.Errorf("bad admin hash iterations")
		}
		return Credentials{Scheme: "pbkdf2", PRF: prf, DerivedKey: parts[0], Salt: parts[1], Iterations: it}, nil
	}
	return Credentials{}, fmt.Errorf("admin password is not hashed")
}

// UserCredentials extracts the credentials of a decoded `_users` doc.
func UserCredentials(doc map[string]any) (Credentials, bool) {
	str := func(k string) string { s, _ := doc[k].(string); return s }
	scheme := str("password_scheme")
	if scheme == "" {
		scheme = "simple"
	}
	c := Credentials{Scheme: scheme, Salt: str("salt"), PRF: str("pbkdf2_prf")}
	switch scheme {
	case "pbkdf2":
		c.DerivedKey = str("derived_key")
		if f, ok := doc["iterations"].(float64); ok {
			c.Iterations = int(f)
		}
		if c.PRF == "" {
			c.PRF = "sha"
		}
	case "simple":
		c.DerivedKey = str("password_sha")
	default:
		return c, false
	}
	return c, c.DerivedKey != ""
}

// Verify reports whether password matches the credentials.
func (c Credentials) Verify(password string) bool {
	var got string
	switch c.Scheme {
	case "pbkdf2":
		dk, err := DeriveKey(c.PRF, password, c.Salt, c.Iterations)
		if err != nil {
			return false
		}
		got = dk
	case "simple":
		sum := sha1.Sum([]byte(password + c.Salt))
		got = hex.EncodeToString(sum[:])
	default:
		return false
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(strings.ToLower(c.DerivedKey))) == 1
}

// HashUserDoc replaces a plain "password" field of a decoded `_users` doc by
// CouchDB's pbkdf2 fields (password_scheme, pbkdf2_prf, iterations,
// derived_key, salt), as CouchDB does on write. It reports whether it did.
func HashUserDoc(doc map[string]any, prf string, iterations int) (bool, error) {
	pw, ok := doc["password"]
	if !ok {
		return false, nil
	}
	s, ok := pw.(string)
	if !ok {
		return false, fmt.Errorf("password must be a string")
	}
	salt := NewSalt()
	dk, err := DeriveKey(prf, s, salt, iterations)
	if err != nil {
		return false, err
	}
	delete(doc, "password")
	doc["password_scheme"] = "pbkdf2"
	doc["pbkdf2_prf"] = prf
	doc["iterations"] = iterations
	doc["derived_key"] = dk
	doc["salt"] = salt
	return true, nil
}

// credKey is the cache key of one successful password check: it changes
// when the stored hash changes, so a changed password invalidates it.
func credKey(name string, c Credentials, password string) string {
	m := hmac.New(sha256.New, []byte(c.DerivedKey+c.Salt))
	m.Write([]byte(name + "\x00" + password))
	return hex.EncodeToString(m.Sum(nil))
}
