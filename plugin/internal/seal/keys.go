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

// KeyFromSecret derives a key from a secret string that is not itself a
// key (such as CouchDB's `[chttpd_auth] secret`), with HKDF-SHA256. label
// tells apart keys derived from one secret for different uses.
func KeyFromSecret(secret, label string) *Key {
	material, err := hkdf.Key(sha256.New, []byte(secret), nil, label, KeySize)
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
