package config

import (
	"os"
	"path/filepath"
	"testing"
)

func TestLoadSetPersist(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base.ini")
	if err := os.WriteFile(base, []byte("[chttpd]\nport = 6000\n[replicator]\nworker_processes = 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(base, dir)
	if err != nil {
		t.Fatal(err)
	}
	uuid, _ := c.Get("couchdb", "uuid")
	if len(uuid) != 32 {
		t.Fatalf("uuid %q", uuid)
	}
	tests := []struct{ sec, key, want string }{
		{"chttpd", "port", "6000"},
		{"replicator", "worker_processes", "2"},
		{"chttpd", "max_http_request_size", "4294967296"},
	}
	for _, tc := range tests {
		if got, _ := c.Get(tc.sec, tc.key); got != tc.want {
			t.Errorf("%s/%s = %q, want %q", tc.sec, tc.key, got, tc.want)
		}
	}
	old, had, err := c.Set("replicator", "worker_processes", "8")
	if err != nil || !had || old != "2" {
		t.Fatalf("Set: %q %v %v", old, had, err)
	}
	var seen string
	c.OnChange(func(s, k string) { seen = s + "/" + k })
	if _, _, err := c.Set("custom", "k", "v"); err != nil {
		t.Fatal(err)
	}
	if seen != "custom/k" {
		t.Errorf("listener saw %q", seen)
	}
	if _, ok, _ := c.Delete("custom", "nokey"); ok {
		t.Error("delete of a missing key reported ok")
	}
	c2, err := Load(base, dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ sec, key, want string }{
		{"couchdb", "uuid", uuid}, {"replicator", "worker_processes", "8"}, {"custom", "k", "v"},
	} {
		if got, _ := c2.Get(tc.sec, tc.key); got != tc.want {
			t.Errorf("after reload %s/%s = %q, want %q", tc.sec, tc.key, got, tc.want)
		}
	}
}

// TestOverrideNotPersisted: a value from the environment applies but never
// lands in local.ini; a later Set of the same key does.
func TestOverrideNotPersisted(t *testing.T) {
	dir := t.TempDir()
	c, err := Load("", dir)
	if err != nil {
		t.Fatal(err)
	}
	c.Override("node_types", "replication", "false")
	c.Set("couchdb", "max_dbs_open", "7")
	if v, _ := c.Get("node_types", "replication"); v != "false" {
		t.Fatalf("override not applied: %q", v)
	}
	c2, err := Load("", dir)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := c2.Get("node_types", "replication"); ok {
		t.Fatalf("override persisted: %q", v)
	}
	c.Set("node_types", "replication", "false")
	c3, _ := Load("", dir)
	if v, _ := c3.Get("node_types", "replication"); v != "false" {
		t.Fatalf("Set after Override not persisted: %q", v)
	}
}
