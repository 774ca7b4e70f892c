package seal

import (
	"bytes"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// legacySeal seals plain as versions before bindings did (s1, the head
// alone authenticated).
func legacySeal(k *Key, plain []byte) string {
	head := "s1." + k.ID() + "."
	return head + base64.RawURLEncoding.EncodeToString(k.aead.Seal(nil, nil, plain, []byte(head)))
}

func TestSealOpen(t *testing.T) {
	oldKey, newKey, other := RandomKey(), RandomKey(), RandomKey()
	rotating := NewKeyring(newKey, oldKey)
	plain := []byte(`{"password":"hunter2"}`)
	job1, job2 := []byte(`"job1","bob"`), []byte(`"job2","bob"`)
	byOld := NewKeyring(oldKey).Seal(plain, job1)
	byNew := rotating.Seal(plain, job1)
	legacy := legacySeal(oldKey, plain)
	if strings.Contains(byNew, "hunter2") {
		t.Fatalf("sealed value shows the plaintext: %s", byNew)
	}
	if byNew == rotating.Seal(plain, job1) {
		t.Fatal("two seals of one plaintext are equal: the nonce is not random")
	}
	tamper := func(s string, i int) string {
		b := []byte(s)
		b[i] ^= 1
		return string(b)
	}
	relabelled := "s2." + oldKey.ID() + byNew[len("s2.")+len(newKey.ID()):]
	for _, tc := range []struct {
		name    string
		ring    *Keyring
		sealed  string
		binding []byte
		keyID   string
		err     error
	}{
		{"current key", rotating, byNew, job1, newKey.ID(), nil},
		{"previous key", rotating, byOld, job1, oldKey.ID(), nil},
		{"key not held", NewKeyring(other), byNew, job1, newKey.ID(), ErrUnknownKey},
		{"rotated out", NewKeyring(newKey), byOld, job1, oldKey.ID(), ErrUnknownKey},
		{"ciphertext changed", rotating, tamper(byNew, len(byNew)-5), job1, newKey.ID(), ErrBroken},
		{"relabelled to another key", rotating, relabelled, job1, oldKey.ID(), ErrBroken},
		{"another binding", rotating, byNew, job2, newKey.ID(), ErrBroken},
		{"no binding", rotating, byNew, nil, newKey.ID(), ErrBroken},
		{"relabelled to the legacy version", rotating, "s1" + byNew[2:], job1, newKey.ID(), ErrBroken},
		{"legacy version, any binding", rotating, legacy, job2, oldKey.ID(), nil},
		{"other version", rotating, "s3" + byNew[2:], job1, "", ErrBroken},
		{"not sealed", rotating, "hunter2", job1, "", ErrBroken},
		{"empty body", rotating, "s2." + newKey.ID() + ".", job1, "", ErrBroken},
		{"bad base64", rotating, "s2." + newKey.ID() + ".!!!", job1, newKey.ID(), ErrBroken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, id, err := tc.ring.Open(tc.sealed, tc.binding)
			if !errors.Is(err, tc.err) {
				t.Fatalf("Open: error %v, want %v", err, tc.err)
			}
			if id != tc.keyID {
				t.Errorf("key id %q, want %q", id, tc.keyID)
			}
			if err == nil && !bytes.Equal(got, plain) {
				t.Errorf("opened %q, want %q", got, plain)
			}
			if err != nil && strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error quotes the secret: %v", err)
			}
			// Errors may reach clients: a key id would let them test
			// guesses of the secret it was derived from (issue 38 item 5).
			for _, k := range []*Key{oldKey, newKey, other} {
				if err != nil && strings.Contains(err.Error(), k.ID()) {
					t.Errorf("error names key %s: %v", k.ID(), err)
				}
			}
		})
	}
	if id, ok := KeyID(byOld); !ok || id != oldKey.ID() {
		t.Errorf("KeyID = %q, %v; want %q", id, ok, oldKey.ID())
	}
	if !Legacy(legacy) || Legacy(byNew) {
		t.Errorf("Legacy(s1) = %v, Legacy(s2) = %v", Legacy(legacy), Legacy(byNew))
	}
	if !rotating.Holds(oldKey.ID()) || rotating.Holds(other.ID()) || rotating.ID() != newKey.ID() {
		t.Errorf("keyring: ID %s, holds old %v, holds other %v", rotating.ID(), rotating.Holds(oldKey.ID()), rotating.Holds(other.ID()))
	}
}

// TestKeyFromSecret (issue 38 item 5): keys derived from a secret are
// salted (a key derived without the salt, as before, differs), legacy
// keys still come out as they did, and weak secrets are refused.
func TestKeyFromSecret(t *testing.T) {
	const secret = "5f0c2b9e8a7d41c3b6e2f0a9d8c7b6a5"
	unsalted, err := hkdf.Key(sha256.New, []byte(secret), nil, "label", KeySize)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := NewKey(unsalted)
	if got := KeyFromSecret(secret, "label"); got.ID() == before.ID() {
		t.Error("the key derived from a secret is the unsalted HKDF of it")
	}
	if got := LegacyKeyFromSecret(secret, "label"); got.ID() != before.ID() {
		t.Errorf("legacy key %s, want the unsalted %s", got.ID(), before.ID())
	}
	if KeyFromSecret(secret, "label").ID() == KeyFromSecret(secret, "other").ID() {
		t.Error("two labels give one key")
	}
	for _, tc := range []struct {
		secret string
		weak   bool
	}{
		{"", true},
		{"x", true},
		{"correct horse battery staple", true},      // 28 characters
		{strings.Repeat("a", 64), true},             // one symbol
		{strings.Repeat("abc123", 8), true},         // six
		{secret, false},                             // openssl rand -hex 16
		{"4Jx0mQ2pLr8vT6yB1nZc5wKe9hUa3sDf", false}, // base64
		{"a long passphrase of many words, seven or more", false}, // as long and varied
	} {
		err := CheckSecret(tc.secret)
		if (err != nil) != tc.weak {
			t.Errorf("CheckSecret(%d characters) = %v, want weak %v", len(tc.secret), err, tc.weak)
		}
		if err != nil && (!strings.Contains(err.Error(), "openssl rand -hex 32") || (len(tc.secret) > 3 && strings.Contains(err.Error(), tc.secret))) {
			t.Errorf("error %q: want how to make one, never the secret", err)
		}
	}
}

func TestKeyIDsAreStable(t *testing.T) {
	material := bytes.Repeat([]byte{7}, KeySize)
	a, _ := NewKey(material)
	b, _ := NewKey(material)
	if a.ID() != b.ID() || len(a.ID()) != 12 {
		t.Fatalf("ids %q and %q of one key", a.ID(), b.ID())
	}
	if strings.Contains(hex.EncodeToString(material), a.ID()) {
		t.Fatal("the id is part of the key")
	}
	if _, err := NewKey(material[:16]); err == nil {
		t.Fatal("a 16-byte key was accepted")
	}
	s1, s2 := KeyFromSecret("cluster secret", "jobs"), KeyFromSecret("cluster secret", "jobs")
	if s1.ID() != s2.ID() {
		t.Fatal("one secret derived two keys")
	}
	if KeyFromSecret("cluster secret", "other use").ID() == s1.ID() || KeyFromSecret("other secret", "jobs").ID() == s1.ID() {
		t.Fatal("different secrets or labels derived the same key")
	}
}

func TestReadKeyFile(t *testing.T) {
	k1 := bytes.Repeat([]byte{1}, KeySize)
	k2 := bytes.Repeat([]byte{2}, KeySize)
	want1, _ := NewKey(k1)
	want2, _ := NewKey(k2)
	for _, tc := range []struct {
		name, text string
		ids        []string
		err        string
	}{
		{"hex", hex.EncodeToString(k1) + "\n", []string{want1.ID()}, ""},
		{"base64 and comments", "# new key first\n\n" + base64.StdEncoding.EncodeToString(k2) + "\n  " + hex.EncodeToString(k1) + "  \n", []string{want2.ID(), want1.ID()}, ""},
		{"short key", hex.EncodeToString(k1[:16]) + "\n", nil, "line 1"},
		{"garbage", "# ok\nnot-a-key-" + hex.EncodeToString(k1) + "\n", nil, "line 2"},
		{"empty", "# nothing\n", nil, "holds no key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "key")
			os.WriteFile(path, []byte(tc.text), 0o600)
			keys, err := ReadKeyFile(path)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one saying %q", err, tc.err)
				}
				if strings.Contains(err.Error(), hex.EncodeToString(k1)) {
					t.Fatalf("error quotes the key: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, k := range keys {
				ids = append(ids, k.ID())
			}
			if strings.Join(ids, ",") != strings.Join(tc.ids, ",") {
				t.Fatalf("ids %v, want %v", ids, tc.ids)
			}
		})
	}
}

func TestLoadOrCreateKeyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "replicator.key")
	k, created, err := LoadOrCreateKeyFile(path)
	if err != nil || !created {
		t.Fatalf("first call: created %v, error %v", created, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, want 0600", fi.Mode().Perm())
	}
	again, created, err := LoadOrCreateKeyFile(path)
	if err != nil || created || again.ID() != k.ID() {
		t.Fatalf("second call: key %s (want %s), created %v, error %v", again.ID(), k.ID(), created, err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("the directory holds %d files, want only the key file", len(entries))
	}
	os.WriteFile(path, []byte("damaged\n"), 0o600)
	if _, _, err := LoadOrCreateKeyFile(path); err == nil {
		t.Fatal("a damaged key file was replaced or accepted, not reported")
	}
}
