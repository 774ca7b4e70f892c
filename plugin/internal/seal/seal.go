// Package seal keeps secrets unreadable at rest: it seals them with
// authenticated encryption (AES-256-GCM) under a key named by an id, and
// opens them again with any key of a Keyring, so that keys can rotate
// while records sealed with the previous key stay readable.
//
// A sealed value is text, safe inside JSON:
//
//	s2.<key id>.<base64url(nonce | ciphertext | tag)>
//
// The version, the key id and the caller's binding (what the value belongs
// to, kept outside it: a job's id and the rights it runs with) are
// authenticated with the ciphertext, so a value cannot be relabelled to
// another key, nor opened under another binding (copied to another job, or
// left under a changed user_ctx). Values of version s1, sealed before
// bindings existed, still open (with no binding) so that they can be
// sealed again. Nonces are random (96 bits): seal fewer than 2^32 values
// per key (callers re-use a sealed value whose plaintext did not change
// rather than sealing it again).
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
)

// KeySize is the size of a key in bytes (AES-256).
const KeySize = 32

// version is the first field of every value Seal returns; legacyVersion
// that of values sealed without a binding, which Open still opens.
const (
	version       = "s2"
	legacyVersion = "s1"
)

var (
	// ErrUnknownKey: the value was sealed with a key the keyring does not
	// hold (another node's, or one rotated out too early).
	ErrUnknownKey = errors.New("seal: sealed with a key this keyring does not hold")
	// ErrBroken: the value is not a sealed value, or it was changed or
	// damaged after sealing (authentication failed).
	ErrBroken = errors.New("seal: not a valid sealed value")
	// ErrLegacy: the value is of the legacy version, which the keyring
	// no longer opens (CloseLegacy). It wraps ErrBroken.
	ErrLegacy = fmt.Errorf("%w: sealed without a binding, refused since every record was sealed again", ErrBroken)
)

// Key is one sealing key. Its id is derived from the key, so it names the
// key without revealing it and two processes given the same key agree on
// its id.
type Key struct {
	id   string
	aead cipher.AEAD
}

// NewKey returns the key made of material, which must be KeySize bytes.
func NewKey(material []byte) (*Key, error) {
	if len(material) != KeySize {
		return nil, fmt.Errorf("seal: a key is %d bytes, got %d", KeySize, len(material))
	}
	block, err := aes.NewCipher(material)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCMWithRandomNonce(block)
	if err != nil {
		return nil, err
	}
	mac := hmac.New(sha256.New, material)
	mac.Write([]byte("couchepi seal key id"))
	return &Key{id: hex.EncodeToString(mac.Sum(nil)[:6]), aead: aead}, nil
}

// ID names the key: 12 hex digits.
func (k *Key) ID() string { return k.id }

// Keyring seals with its current key and opens with any of its keys. It is
// safe for concurrent use.
type Keyring struct {
	current *Key
	byID    map[string]*Key
	// legacyClosed: Open refuses values of the legacy version.
	legacyClosed atomic.Bool
}

// CloseLegacy makes Open refuse values of the legacy version (s1) with
// ErrLegacy from now on: call it once every such value was sealed again,
// after which only someone without the key puts one in a store.
func (r *Keyring) CloseLegacy() { r.legacyClosed.Store(true) }

// LegacyClosed reports whether CloseLegacy was called.
func (r *Keyring) LegacyClosed() bool { return r.legacyClosed.Load() }

// NewKeyring returns a keyring that seals with current and opens values
// sealed with current or any of previous.
func NewKeyring(current *Key, previous ...*Key) *Keyring {
	r := &Keyring{current: current, byID: map[string]*Key{current.id: current}}
	for _, k := range previous {
		if _, dup := r.byID[k.id]; !dup {
			r.byID[k.id] = k
		}
	}
	return r
}

// ID is the id of the key the keyring seals with.
func (r *Keyring) ID() string { return r.current.id }

// IDs lists the ids of every key of the keyring, the current one first.
func (r *Keyring) IDs() []string {
	ids := []string{r.current.id}
	for id := range r.byID {
		if id != r.current.id {
			ids = append(ids, id)
		}
	}
	return ids
}

// Holds reports whether the keyring holds the key named id.
func (r *Keyring) Holds(id string) bool {
	_, ok := r.byID[id]
	return ok
}

// Seal returns plain sealed with the current key, bound to binding: Open
// opens it only with the same binding.
func (r *Keyring) Seal(plain, binding []byte) string {
	head := version + "." + r.current.id + "."
	ct := r.current.aead.Seal(nil, nil, plain, aad(head, binding))
	return head + base64.RawURLEncoding.EncodeToString(ct)
}

// aad is what a value's authentication covers besides its ciphertext: its
// head (version and key id), then its binding.
func aad(head string, binding []byte) []byte {
	return append([]byte(head), binding...)
}

// Open returns the plaintext of a value Seal returned with binding, with
// the id of the key that sealed it. A value of the legacy version (s1)
// opens whatever the binding: Legacy tells them apart, for callers to seal
// them again. It fails with ErrUnknownKey when that key is not in the
// keyring, and with ErrBroken when the value is malformed or does not
// authenticate (changed, or under another binding). Its errors never name
// keys: they may reach clients, and a key id lets one test guesses of a
// secret the key was derived from; callers log keyID instead.
func (r *Keyring) Open(sealed string, binding []byte) (plain []byte, keyID string, err error) {
	v, keyID, body, ok := split(sealed)
	if !ok {
		return nil, "", ErrBroken
	}
	k := r.byID[keyID]
	if k == nil {
		return nil, keyID, ErrUnknownKey
	}
	ct, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil {
		return nil, keyID, ErrBroken
	}
	head := v + "." + keyID + "."
	if v == legacyVersion {
		if r.legacyClosed.Load() {
			return nil, keyID, ErrLegacy
		}
		binding = nil
	}
	plain, err = k.aead.Open(nil, nil, ct, aad(head, binding))
	if err != nil {
		return nil, keyID, ErrBroken
	}
	return plain, keyID, nil
}

// KeyID returns the id of the key sealed was sealed with, without opening
// it; ok is false when sealed is not a sealed value.
func KeyID(sealed string) (id string, ok bool) {
	_, id, _, ok = split(sealed)
	return id, ok
}

// Legacy reports whether sealed is of the version sealed without a
// binding (s1), which callers should seal again.
func Legacy(sealed string) bool {
	v, _, _, ok := split(sealed)
	return ok && v == legacyVersion
}

// split cuts a sealed value into its version, key id and body.
func split(sealed string) (v, keyID, body string, ok bool) {
	v, rest, ok := strings.Cut(sealed, ".")
	if !ok || (v != version && v != legacyVersion) {
		return "", "", "", false
	}
	keyID, body, ok = strings.Cut(rest, ".")
	return v, keyID, body, ok && keyID != "" && body != ""
}

// RandomKey returns a new random key.
func RandomKey() *Key {
	material := make([]byte, KeySize)
	rand.Read(material)
	k, err := NewKey(material)
	if err != nil {
		panic(err)
	}
	return k
}
