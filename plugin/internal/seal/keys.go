package seal

import (
	"bufio"
	"bytes"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ReadKeyFile reads the keys of a key file, the first one being the key to
// seal with: one key per line, as 64 hex digits (`openssl rand -hex 32`)
// or the base64 of 32 bytes (`openssl rand -base64 32`). Blank lines and
// lines starting with # are skipped. Errors never quote the file's lines.
func ReadKeyFile(path string) ([]*Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var keys []*Key
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		material, err := hex.DecodeString(line)
		if err != nil || len(material) != KeySize {
			material, err = base64.StdEncoding.DecodeString(line)
		}
		if err != nil || len(material) != KeySize {
			return nil, fmt.Errorf("seal: key file %s, line %d: want %d bytes as 64 hex digits or base64", path, n, KeySize)
		}
		k, err := NewKey(material)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("seal: key file %s holds no key", path)
	}
	return keys, nil
}

// MinSecretLen is the shortest secret a key may be derived from: 32
// characters, the length of the secret CouchDB makes up when none is set
// (a random uuid: 32 hex digits, 128 bits) and of the one minicouch makes
// up. A key derived from a shorter (or hand-made) secret can be found by
// trying guesses offline against any sealed value, whatever the KDF:
// 128 bits is what it takes for guessing to be hopeless.
const MinSecretLen = 32

// minSecretSymbols is the fewest distinct characters a secret may have:
// 32 random hex digits have fewer than 8 distinct ones with a
// probability under 10^-7, a repeated or keyboard pattern usually has.
const minSecretSymbols = 8

// ErrWeakSecret: a secret too short or too plain to derive a key from.
var ErrWeakSecret = fmt.Errorf("too weak to derive a sealing key from: it needs at least %d random characters "+
	"(anyone who reads a sealed value can test guesses of a shorter one offline); make one with `openssl rand -hex 32`", MinSecretLen)

// CheckSecret returns ErrWeakSecret when secret is shorter than
// MinSecretLen or has fewer than 8 distinct characters. It never quotes
// the secret.
func CheckSecret(secret string) error {
	symbols := map[rune]bool{}
	for _, c := range secret {
		symbols[c] = true
	}
	if len(secret) < MinSecretLen || len(symbols) < minSecretSymbols {
		return ErrWeakSecret
	}
	return nil
}

// secretSalt is the HKDF salt of every key derived from a secret: fixed
// and versioned, it sets these keys apart from any other use of the same
// secret (CouchDB signs its session cookies with it) and from keys other
// programs derive from it without a salt. It is public by design: a salt
// does not make a weak secret strong (CheckSecret refuses those), it only
// keeps a guess computed for one use from serving another.
const secretSalt = "couchepi seal: key from secret, salt v2"

// KeyFromSecret derives a key from a secret string that is not itself a
// key (such as CouchDB's `[chttpd_auth] secret`), with HKDF-SHA256 salted
// by secretSalt. label tells apart keys derived from one secret for
// different uses. Check the secret with CheckSecret first.
func KeyFromSecret(secret, label string) *Key {
	return deriveKey(secret, []byte(secretSalt), label)
}

// LegacyKeyFromSecret is the key versions before secretSalt derived from
// secret (HKDF-SHA256 without a salt): a keyring holds it only to open
// the values it sealed, which are then sealed again.
func LegacyKeyFromSecret(secret, label string) *Key {
	return deriveKey(secret, nil, label)
}

func deriveKey(secret string, salt []byte, label string) *Key {
	material, err := hkdf.Key(sha256.New, []byte(secret), salt, label, KeySize)
	if err != nil {
		panic(err) // only for lengths HKDF-SHA256 cannot produce
	}
	k, err := NewKey(material)
	if err != nil {
		panic(err)
	}
	return k
}

// LoadOrCreateKeyFile returns the first key of the key file at path,
// creating the file with a new random key (mode 0600, fsynced, never
// half-written) when it does not exist; created reports which.
func LoadOrCreateKeyFile(path string) (k *Key, created bool, err error) {
	keys, err := ReadKeyFile(path)
	if err == nil {
		return keys[0], false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, err
	}
	k, err = createKeyFile(path)
	if errors.Is(err, fs.ErrExist) { // created meanwhile by someone else
		keys, err := ReadKeyFile(path)
		if err != nil {
			return nil, false, err
		}
		return keys[0], false, nil
	}
	return k, err == nil, err
}

// createKeyFile writes a new random key to a temporary file and links it
// at path, which fails with fs.ErrExist if path exists.
func createKeyFile(path string) (*Key, error) {
	material := make([]byte, KeySize)
	rand.Read(material) // never fails (crypto/rand)
	k, err := NewKey(material)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".key-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return nil, err
	}
	text := "# couchepi seal key (id " + k.ID() + "): keep it secret, keep it safe\n" + hex.EncodeToString(material) + "\n"
	if _, err := tmp.WriteString(text); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		return nil, err
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return k, nil
}
