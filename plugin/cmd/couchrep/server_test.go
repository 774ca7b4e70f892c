package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/minicouchtest"
)

// testServer is a real CouchDB-compatible server for the tests: minicouch
// (built from this tree, or $COUCHREP_MINICOUCH), else pouchdb-server from
// test/interop when minicouch does not build.
type testServer struct {
	// base is the server URL with credentials ("http://admin:pass@127.0.0.1:PORT/").
	base string
	// plain is the same without credentials.
	plain string
	user  string
	pass  string
	kind  string
}

func TestMain(m *testing.M) { os.Exit(minicouchtest.Main(m)) }

// repoRoot is the module root (this file is plugin/cmd/couchrep/server_test.go).
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// startServer starts a server bound to 127.0.0.1 on a free port and stops it when the test ends.
func startServer(t *testing.T) *testServer {
	t.Helper()
	bin := os.Getenv("COUCHREP_MINICOUCH")
	var err error
	if bin == "" {
		bin, err = minicouchtest.Binary(minicouchtest.Build{Pkg: minicouchtest.MinicouchPkg})
	}
	if err == nil {
		mc := minicouchtest.Start(t, minicouchtest.Options{Bin: bin, Args: []string{"--log-level", "warn"}})
		return &testServer{base: mc.AdminURL, plain: mc.URL, user: mc.User, pass: mc.Pass, kind: "minicouch"}
	}
	pds := filepath.Join(repoRoot(), "test", "interop", "node_modules", ".bin", "pouchdb-server")
	if _, serr := os.Stat(pds); serr != nil {
		t.Skipf("no server to test against: %v; and %s missing (make interop-deps)", err, pds)
	}
	t.Logf("minicouch unavailable, using pouchdb-server: %v", err)
	addr, aerr := minicouchtest.FreeAddr()
	if aerr != nil {
		t.Fatal(aerr)
	}
	_, port, _ := strings.Cut(addr, ":")
	s := &testServer{plain: "http://" + addr + "/", kind: "pouchdb-server"}
	s.base = s.plain
	cmd := exec.Command(pds, "--in-memory", "-p", port, "-n")
	cmd.Dir = t.TempDir()
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("%s output:\n%s", s.kind, logs.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if st, _ := s.do(t, "GET", "", nil); st == 200 {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer on %s", s.kind, addr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// do sends one request with the admin credentials and returns status and body.
func (s *testServer) do(t *testing.T, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.plain+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if s.user != "" {
		req.SetBasicAuth(s.user, s.pass)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (s *testServer) mustDo(t *testing.T, method, path string, body any, want ...int) []byte {
	t.Helper()
	st, b := s.do(t, method, path, body)
	for _, w := range want {
		if st == w {
			return b
		}
	}
	t.Fatalf("%s /%s: %d %s", method, path, st, b)
	return nil
}

// seed creates db with n small docs written in batches of 1000.
func (s *testServer) seed(t *testing.T, db string, n int) {
	t.Helper()
	s.mustDo(t, "PUT", db, nil, 201, 202)
	for i := 0; i < n; i += 1000 {
		docs := []map[string]any{}
		for j := i; j < min(n, i+1000); j++ {
			docs = append(docs, map[string]any{"_id": fmt.Sprintf("doc%07d", j), "n": j, "text": strings.Repeat("x", 64)})
		}
		s.mustDo(t, "POST", db+"/_bulk_docs", map[string]any{"docs": docs}, 201, 200)
	}
}

// docCount returns db's doc_count.
func (s *testServer) docCount(t *testing.T, db string) int64 {
	t.Helper()
	var info struct {
		DocCount int64 `json:"doc_count"`
	}
	if err := json.Unmarshal(s.mustDo(t, "GET", db, nil, 200), &info); err != nil {
		t.Fatal(err)
	}
	return info.DocCount
}
