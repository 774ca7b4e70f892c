package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/minicouchtest"
)

// interopDir holds the npm packages (PouchDB, pouchdb-server) that
// `make interop-deps` installs.
var interopDir = func() string {
	if d := os.Getenv("INTEROP_NODE_MODULES"); d != "" {
		return d
	}
	abs, _ := filepath.Abs("../../test/interop/node_modules")
	return abs
}()

func TestMain(m *testing.M) { os.Exit(minicouchtest.Main(m)) }

// testConfig is the ini the package's tests run minicouch with: a low
// pbkdf2 iteration count.
const testConfig = "[chttpd_auth]\niterations = 1000\n"

// startServer runs minicouch (admin admin:pass, testConfig, warnings only)
// with extra flags; it is stopped when the test ends. MINICOUCH_BIN names
// a prebuilt binary to run instead of building this tree's, so that one
// test binary can measure two builds in turn.
func startServer(t testing.TB, extra ...string) *minicouchtest.Server {
	t.Helper()
	return minicouchtest.Start(t, minicouchtest.Options{Bin: os.Getenv("MINICOUCH_BIN"), Config: testConfig,
		Args: append([]string{"--log-level", "warn"}, extra...)})
}

// startMinicouch is startServer returning the base URL without credentials
// or trailing slash.
func startMinicouch(t testing.TB, extra ...string) string {
	t.Helper()
	return baseURL(startServer(t, extra...))
}

// baseURL is the server's URL without the trailing slash.
func baseURL(s *minicouchtest.Server) string { return strings.TrimSuffix(s.URL, "/") }

func requireNode(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(interopDir, "pouchdb")); err != nil {
		t.Skipf("PouchDB is not installed in %s (run `make interop-deps`)", interopDir)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed")
	}
}

// TestPouchDBReplication replicates a db with conflicts, deletions, _local
// docs and attachments from minicouch into a local PouchDB and back into
// another minicouch db, one-shot and live, with real PouchDB, and checks
// that PouchDB sees the same docs, conflicts and attachments everywhere.
func TestPouchDBReplication(t *testing.T) {
	requireNode(t)
	s := startServer(t)
	base := baseURL(s)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "testdata/replicate.js")
	cmd.Env = append(os.Environ(), "POUCHDB_DIR="+interopDir, "COUCH_URL="+strings.TrimSuffix(s.AdminURL, "/"), "WORK_DIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("PouchDB interop failed: %v\n%s", err, out)
	}
	t.Logf("%s", out)
	// The server is still healthy afterwards.
	resp, err := http.Get(base + "/_up")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("_up after interop: %v %v", resp, err)
	}
	resp.Body.Close()
}
