// Package browser runs Fauxton, CouchDB's web UI, in a headless chromium
// against minicouch with the replicator plugin loaded, and checks the
// replication screens end to end (fauxton.spec.js does the clicking).
//
// It needs the system chromium (/usr/bin/chromium, or $CHROMIUM), node, and
// this directory's npm packages (`npm ci` here); it never downloads a
// browser. It is slow, so it only runs with COUCHEPI_BROWSER_TEST=1:
//
//	(cd test/browser && npm ci) && COUCHEPI_BROWSER_TEST=1 go test ./test/browser/
//
// Screenshots of every step, every request the page made, and the requests
// the server answered with >= 400 are saved under artifacts/browser/.
package browser

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/minicouchtest"
)

const (
	admin    = "admin"
	password = "pass"
	sourceDB = "fauxton-src"
	nDocs    = 100
)

// here is this package's directory.
func here() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

func repoRoot() string { return filepath.Clean(filepath.Join(here(), "..", "..")) }

// requireTools fails the test with what to install when a tool is missing.
func requireTools(t *testing.T) (chromium string) {
	t.Helper()
	chromium = os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("no chromium at %s (apt-get install -y chromium, or set CHROMIUM)", chromium)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatal("node not found")
	}
	if _, err := os.Stat(filepath.Join(here(), "node_modules", "playwright-core", "package.json")); err != nil {
		t.Fatal("npm packages missing: run (cd test/browser && npm ci)")
	}
	return chromium
}

func TestMain(m *testing.M) { os.Exit(minicouchtest.Main(m)) }

// couch sends one admin request to the server.
func couch(srv *minicouchtest.Server, method, path string, body any) (int, []byte) {
	st, b, err := srv.Do(method, path, body)
	if err != nil {
		return 0, []byte(err.Error())
	}
	return st, b
}

func TestFauxtonReplication(t *testing.T) {
	if os.Getenv("COUCHEPI_BROWSER_TEST") != "1" {
		t.Skip("set COUCHEPI_BROWSER_TEST=1 to run the Fauxton browser test (needs chromium and `npm ci` in test/browser)")
	}
	chromium := requireTools(t)
	tmp := t.TempDir()
	replicator := minicouchtest.Replicator(t, "")

	fauxtonDir := filepath.Join(tmp, "fauxton")
	if b, err := exec.Command(filepath.Join(here(), "fauxton.sh"), fauxtonDir).CombinedOutput(); err != nil {
		t.Fatalf("fauxton.sh: %v\n%s", err, b)
	}

	artifacts := filepath.Join(repoRoot(), "artifacts", "browser")
	os.RemoveAll(artifacts)
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(artifacts, "minicouch.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logFile.Close() }) // after the server has stopped

	if err := os.MkdirAll(filepath.Join(tmp, "data"), 0o755); err != nil { // holds the test's ini
		t.Fatal(err)
	}
	srv := minicouchtest.Start(t, minicouchtest.Options{
		Data: filepath.Join(tmp, "data"), Admin: admin + ":" + password,
		Plugins: []string{replicator}, Fauxton: fauxtonDir, Args: []string{"--log-level", "info"},
		Dir: tmp, // the plugin may keep state in its working directory
		Log: logFile,
		// Parks the continuous job soon after it caught up, so the
		// page is checked to show a parked job running.
		Config: "[replicator]\nidle_park_sec = 3\n",
	})
	base := strings.TrimSuffix(srv.URL, "/")
	deadline := time.Now().Add(60 * time.Second)
	for {
		if st, _ := couch(srv, "GET", "/_up", nil); st == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("minicouch did not come up on %s; log in %s", srv.Addr, logFile.Name())
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The replicator database and a source with docs doc000…doc099.
	if st, b := couch(srv, "PUT", "/_replicator", nil); st != 201 && st != 412 {
		t.Fatalf("PUT /_replicator: %d %s", st, b)
	}
	if st, b := couch(srv, "PUT", "/"+sourceDB, nil); st != 201 {
		t.Fatalf("PUT /%s: %d %s", sourceDB, st, b)
	}
	docs := make([]map[string]any, nDocs)
	for i := range docs {
		docs[i] = map[string]any{"_id": fmt.Sprintf("doc%03d", i), "n": i}
	}
	if st, b := couch(srv, "POST", "/"+sourceDB+"/_bulk_docs", map[string]any{"docs": docs}); st != 201 {
		t.Fatalf("_bulk_docs: %d %s", st, b)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	node := exec.CommandContext(ctx, "node", "fauxton.spec.js")
	node.Dir = here()
	node.Env = append(os.Environ(),
		"COUCH_URL="+base, "COUCH_USER="+admin, "COUCH_PASS="+password,
		"SOURCE_DB="+sourceDB, "ARTIFACTS="+artifacts, "CHROMIUM="+chromium)
	var out bytes.Buffer
	node.Stdout, node.Stderr = io.MultiWriter(&out, testWriter{t}), io.MultiWriter(&out, testWriter{t})
	runErr := node.Run()

	failed, _ := os.ReadFile(filepath.Join(artifacts, "failed-requests.json"))
	if runErr != nil {
		t.Errorf("fauxton.spec.js: %v", runErr)
		t.Logf("requests answered >= 400 (artifacts/browser/failed-requests.json):\n%s", failed)
		t.Logf("screenshots and logs in %s", artifacts)
	}
}

// testWriter sends a child's output lines to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		w.t.Log(line)
	}
	return len(p), nil
}
