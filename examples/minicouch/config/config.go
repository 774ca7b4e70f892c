// Package config holds minicouch's CouchDB-style ini configuration: an
// optional base file given with --config, overlaid by `local.ini` in the data
// directory where every change made through `/_node/_local/_config` is
// persisted (as CouchDB writes changes to its last ini file).
package config

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"

	"github.com/couchepi/couchepi/hooks"
	"gopkg.in/ini.v1"
)

// Defaults returns CouchDB 3.x's values for the settings minicouch reads,
// by section and key: a new map at each call, so no caller can change
// another's defaults.
func Defaults() map[string]map[string]string {
	return map[string]map[string]string{
		"couchdb": {
			"max_document_size":             "8000000",
			"single_node":                   "true",
			"default_security":              "admin_only",
			"users_db_suffix":               "_users",
			"max_dbs_open":                  "500",
			"attachment_stream_buffer_size": "4096",
		},
		"chttpd": {
			"bind_address":          "127.0.0.1",
			"port":                  "5984",
			"max_http_request_size": "4294967296",
			"require_valid_user":    "false",
			"admin_only_all_dbs":    "true",
		},
		"chttpd_auth": {
			"timeout":                  "600",
			"iterations":               "600000",
			"pbkdf2_prf":               "sha256",
			"allow_persistent_cookies": "true",
		},
		"prometheus": {
			"additional_port": "false",
			"bind_address":    "127.0.0.1",
			"port":            "17986",
		},
		"replicator": {},
		"admins":     {},
	}
}

// Config is the server's live configuration, safe for concurrent use.
type Config struct {
	mu        sync.RWMutex
	values    map[string]map[string]string
	defaults  map[string]map[string]string // Defaults(), what save leaves out
	volatile  map[string]bool              // "section\x00key" set by Override: never saved
	localPath string
	listeners []func(section, key string)
}

// Load reads the optional base ini at basePath (may be "") and then the
// persisted overlay at <dataDir>/local.ini. It generates and persists
// `[couchdb] uuid` and `[chttpd_auth] secret` when they are absent.
func Load(basePath, dataDir string) (*Config, error) {
	c := &Config{values: map[string]map[string]string{}, defaults: Defaults(), localPath: filepath.Join(dataDir, "local.ini")}
	for sec, kv := range c.defaults {
		for k, v := range kv {
			c.set(sec, k, v)
		}
		if _, ok := c.values[sec]; !ok {
			c.values[sec] = map[string]string{}
		}
	}
	for _, p := range []string{basePath, c.localPath} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); os.IsNotExist(err) && p == c.localPath {
			continue
		}
		f, err := ini.Load(p)
		if err != nil {
			return nil, fmt.Errorf("read config %s: %w", p, err)
		}
		for _, s := range f.Sections() {
			if s.Name() == ini.DefaultSection && len(s.Keys()) == 0 {
				continue
			}
			for _, k := range s.Keys() {
				c.set(s.Name(), k.Name(), k.Value())
			}
		}
	}
	changed := false
	if c.get("couchdb", "uuid") == "" {
		c.set("couchdb", "uuid", randomHex(16))
		changed = true
	}
	if c.get("chttpd_auth", "secret") == "" {
		c.set("chttpd_auth", "secret", randomHex(16))
		changed = true
	}
	if changed {
		if err := c.save(); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func (c *Config) set(sec, key, val string) {
	m := c.values[sec]
	if m == nil {
		m = map[string]string{}
		c.values[sec] = m
	}
	m[key] = val
}

func (c *Config) get(sec, key string) string { return c.values[sec][key] }

// Get returns the value of section/key and whether it is set.
func (c *Config) Get(section, key string) (string, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	v, ok := c.values[section][key]
	return v, ok
}

// GetDefault returns the value of section/key, or def when it is unset.
func (c *Config) GetDefault(section, key, def string) string {
	if v, ok := c.Get(section, key); ok {
		return v
	}
	return def
}

// Int returns section/key as an integer, or def when unset or not a number.
func (c *Config) Int(section, key string, def int64) int64 {
	v, ok := c.Get(section, key)
	if !ok {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return def
	}
	return n
}

// Section returns a copy of one section (nil when it does not exist).
func (c *Config) Section(name string) (map[string]string, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	m, ok := c.values[name]
	if !ok {
		return nil, false
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out, true
}

// All returns a copy of the whole configuration in the hooks form.
func (c *Config) All() hooks.Config {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := hooks.Config{}
	for s, m := range c.values {
		cp := make(map[string]string, len(m))
		for k, v := range m {
			cp[k] = v
		}
		out[s] = cp
	}
	return out
}

// Set stores section/key = value, persists it and returns the previous
// value ("" and false when there was none).
func (c *Config) Set(section, key, value string) (string, bool, error) {
	c.mu.Lock()
	delete(c.volatile, section+"\x00"+key)
	old, had := c.values[section][key]
	c.set(section, key, value)
	err := c.save()
	c.mu.Unlock()
	c.notify(section, key)
	return old, had, err
}

// Override sets section/key = value for this process only (from the
// environment, say): it is never written to local.ini, unless a later Set
// of the same key makes it a persisted value.
func (c *Config) Override(section, key, value string) {
	c.mu.Lock()
	if c.volatile == nil {
		c.volatile = map[string]bool{}
	}
	c.volatile[section+"\x00"+key] = true
	c.set(section, key, value)
	c.mu.Unlock()
	c.notify(section, key)
}

// Delete removes section/key, persists the change and returns the removed
// value; ok is false when the key was not set.
func (c *Config) Delete(section, key string) (string, bool, error) {
	c.mu.Lock()
	old, had := c.values[section][key]
	if !had {
		c.mu.Unlock()
		return "", false, nil
	}
	delete(c.values[section], key)
	err := c.save()
	c.mu.Unlock()
	c.notify(section, key)
	return old, true, err
}

// OnChange registers fn to be called after every Set or Delete.
func (c *Config) OnChange(fn func(section, key string)) {
	c.mu.Lock()
	c.listeners = append(c.listeners, fn)
	c.mu.Unlock()
}

func (c *Config) notify(section, key string) {
	c.mu.RLock()
	ls := append([]func(string, string){}, c.listeners...)
	c.mu.RUnlock()
	for _, fn := range ls {
		fn(section, key)
	}
}

// save writes every value that differs from its default to local.ini
// atomically (temp file + rename). Callers hold c.mu.
func (c *Config) save() error {
	f := ini.Empty()
	secs := make([]string, 0, len(c.values))
	for s := range c.values {
		secs = append(secs, s)
	}
	sort.Strings(secs)
	for _, s := range secs {
		keys := make([]string, 0, len(c.values[s]))
		for k := range c.values[s] {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			v := c.values[s][k]
			if d, ok := c.defaults[s][k]; ok && d == v || c.volatile[s+"\x00"+k] {
				continue
			}
			sec, err := f.NewSection(s)
			if err != nil {
				return err
			}
			if _, err := sec.NewKey(k, v); err != nil {
				return err
			}
		}
	}
	if err := os.MkdirAll(filepath.Dir(c.localPath), 0o700); err != nil {
		return err
	}
	tmp := c.localPath + ".tmp"
	if err := f.SaveTo(tmp); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, c.localPath)
}
