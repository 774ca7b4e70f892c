package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// serverUUID returns the uuid couchrep puts into replication ids. The
// replication id (and so which checkpoint a run resumes from) depends on it,
// so it is kept in dir/server_uuid and reused by every later run; dir is
// created when missing. Passing a server's own [couchdb] uuid with
// --server-uuid instead makes couchrep share checkpoints with that server's
// replications of the same source and target.
func serverUUID(dir string) (string, error) {
	path := filepath.Join(dir, "server_uuid")
	if b, err := os.ReadFile(path); err == nil {
		if u := strings.TrimSpace(string(b)); validUUID(u) {
			return u, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	u := newUUID()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(u+"\n"), 0o600); err != nil {
		return "", err
	}
	return u, os.Rename(tmp, path)
}

// configDir is where couchrep keeps its state: $COUCHREP_HOME, else
// <user config dir>/couchrep.
func configDir() (string, error) {
	if d := os.Getenv("COUCHREP_HOME"); d != "" {
		return d, nil
	}
	d, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no place to keep the server uuid (set COUCHREP_HOME or --server-uuid): %w", err)
	}
	return filepath.Join(d, "couchrep"), nil
}

func newUUID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b[:])
}

// validUUID reports whether u is 32 lower-case hex digits, CouchDB's uuid form.
func validUUID(u string) bool {
	if len(u) != 32 {
		return false
	}
	_, err := hex.DecodeString(u)
	return err == nil && strings.ToLower(u) == u
}
