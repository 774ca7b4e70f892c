package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/minicouchtest"
)

// buildDocguard builds the docguard example plugin once per test process.
func buildDocguard(t *testing.T) string {
	t.Helper()
	bin, err := minicouchtest.Binary(minicouchtest.Build{Pkg: minicouchtest.DocguardPkg})
	if err != nil {
		t.Skipf("docguard does not build yet: %v", err)
	}
	return bin
}

// call sends one request as the admin and returns status and body.
func call(t *testing.T, s *minicouchtest.Server, method, path, body string) (int, string) {
	t.Helper()
	st, b, err := s.Do(method, path, body)
	if err != nil {
		t.Fatal(err)
	}
	return st, string(b)
}

// TestPluginHooks loads a real plugin (docguard) into minicouch: writes to
// subscribed dbs pass through before_doc_update and a rejection reaches the
// client as-is (per doc in _bulk_docs); unsubscribed dbs are untouched;
// plugin routes and the plugin list are served.
func TestPluginHooks(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a plugin")
	}
	bin := buildDocguard(t)
	dir := t.TempDir()
	ini := filepath.Join(dir, "guard.ini")
	os.WriteFile(ini, []byte("[docguard]\ndbs = *_guarded\nrequired = type\n"), 0o600)
	proc := startServer(t, "--plugin", bin, "--config", ini)
	tests := []struct {
		method, path, body string
		status             int
		has                string
	}{
		{"GET", "/_node/_local/_plugins", "", 200, `"name":"docguard"`},
		{"PUT", "/x_guarded", "", 201, `{"ok":true}`},
		{"PUT", "/x_guarded/d1", `{"a":1}`, 403, `{"error":"forbidden","reason":"Document is missing required field \"type\"."}`},
		{"PUT", "/x_guarded/d2", `{"type":"t"}`, 201, `"id":"d2"`},
		{"POST", "/x_guarded/_bulk_docs", `{"docs":[{"_id":"a"},{"_id":"b","type":"t"}]}`, 201,
			`[{"id":"a","error":"forbidden","reason":"Document is missing required field \"type\"."},{"ok":true,"id":"b"`},
		{"GET", "/x_guarded/a", "", 404, `"reason":"missing"`},
		{"PUT", "/free", "", 201, ""},
		{"PUT", "/free/d1", `{"a":1}`, 201, `"id":"d1"`},
		{"GET", "/_docguard/stats", "", 200, ""},
		// after_doc_read: docguard hides "secret" from non-admin readers.
		{"PUT", "/x_guarded/s1", `{"type":"t","secret":"hush","open":1}`, 201, ""},
		{"PUT", "/_users/org.couchdb.user:bob", `{"name":"bob","type":"user","roles":[],"password":"bobpw"}`, 201, ""},
		{"PUT", "/x_guarded/_security", `{"members":{"names":["bob"]},"admins":{}}`, 200, ""},
		{"GET", "/x_guarded/s1", "", 200, `"secret":"hush"`},
	}
	for _, tc := range tests {
		st, body := call(t, proc, tc.method, tc.path, tc.body)
		if st != tc.status || !strings.Contains(body, tc.has) {
			t.Errorf("%s %s: %d %s, want %d containing %s", tc.method, tc.path, st, body, tc.status, tc.has)
		}
	}
	code, b, err := proc.DoAs("bob", "bobpw", "GET", "/x_guarded/s1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if code != 200 || strings.Contains(string(b), "hush") || !strings.Contains(string(b), `"open":1`) {
		t.Errorf("non-admin read through after_doc_read: %d %s", code, b)
	}
	// Reload through the HTTP API keeps the plugin serving.
	st, body := call(t, proc, "POST", "/_node/_local/_plugins/docguard/_reload", "")
	if st != 200 {
		t.Fatalf("reload: %d %s", st, body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, body = call(t, proc, "PUT", "/x_guarded/d3", `{"a":1}`)
		if st == 403 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st != 403 {
		t.Fatalf("after reload: %d %s", st, body)
	}
	// SIGHUP reloads every plugin from its path: a new process serves.
	before := pluginPID(t, proc, "docguard")
	if err := proc.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(15 * time.Second)
	for {
		if pid := pluginPID(t, proc, "docguard"); pid != 0 && pid != before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("SIGHUP did not reload docguard (pid still %d)", before)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st, body := call(t, proc, "PUT", "/x_guarded/d4", `{"a":1}`); st != 403 {
		t.Fatalf("after SIGHUP: %d %s", st, body)
	}
}

// pluginPID returns the pid minicouch reports for the named plugin.
func pluginPID(t *testing.T, s *minicouchtest.Server, name string) int {
	t.Helper()
	pid, err := s.PluginPID(name)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}
