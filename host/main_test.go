package host

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/internal/docguard"
	"github.com/couchepi/couchepi/internal/wire"
	"github.com/couchepi/couchepi/sdk"
	"github.com/hashicorp/go-hclog"
)

// Paths of the docguard plugins for the package's tests: copies of this
// test binary, which serves internal/docguard when a host starts it (as
// go-plugin's own tests re-run their binary as the plugin), so no build is
// needed. The v2 copy ends in versionTrailer+"v2": the pin tests need two
// binaries with different bytes, as two builds would be.
var docguardV1, docguardV2 string

// versionTrailer, appended to an executable, names the version the copy
// serves; a binary without it serves v1.
const versionTrailer = "\ncouchepi-docguard-version="

func TestMain(m *testing.M) {
	if os.Getenv(wire.Handshake.MagicCookieKey) == wire.Handshake.MagicCookieValue {
		sdk.Serve(docguard.New(servedVersion()))
		return
	}
	if os.Getenv(childHostEnv) != "" {
		runChildHost()
		return
	}
	os.Exit(runTests(m))
}

// servedVersion reads the version trailer at the end of the running binary.
func servedVersion() string {
	exe, err := os.Executable()
	if err != nil {
		return "v1"
	}
	f, err := os.Open(exe)
	if err != nil {
		return "v1"
	}
	defer f.Close()
	tail := make([]byte, 64)
	if st, err := f.Stat(); err == nil && st.Size() > int64(len(tail)) {
		n, _ := f.ReadAt(tail, st.Size()-int64(len(tail)))
		if _, v, ok := strings.Cut(string(tail[:n]), versionTrailer); ok {
			return strings.TrimSpace(v)
		}
	}
	return "v1"
}

func runTests(m *testing.M) int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "test binary:", err)
		return 1
	}
	self, err := os.ReadFile(exe)
	if err != nil {
		fmt.Fprintln(os.Stderr, "test binary:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "couchepi-host-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	docguardV1 = filepath.Join(dir, "docguard-v1")
	docguardV2 = filepath.Join(dir, "docguard-v2")
	v2 := append(self[:len(self):len(self)], versionTrailer+"v2\n"...)
	for path, b := range map[string][]byte{docguardV1: self, docguardV2: v2} {
		if err := os.WriteFile(path, b, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if pre := os.Getenv(prebuiltDocguardEnv); pre != "" {
		// A/B runs of sdk changes: the benchmark drives a docguard built
		// from another tree.
		docguardV1 = pre
	}
	if pre := os.Getenv(prebuiltDocguardEnv + "_V2"); pre != "" {
		docguardV2 = pre
	}
	return m.Run()
}

// prebuiltDocguardEnv names a prebuilt docguard binary to load instead of
// this test binary, so A/B runs of sdk changes can drive docguards built
// from different trees; prebuiltDocguardEnv+"_V2" does the same for v2
// (built with -ldflags "-X main.version=v2").
const prebuiltDocguardEnv = "COUCHEPI_TEST_DOCGUARD"

// childHostEnv makes the test binary run as a server embedding the host
// (for the parent-death test): it loads the plugin named by the variable,
// prints the plugin's pid and waits to be killed.
const childHostEnv = "COUCHEPI_TEST_CHILD_HOST"

func runChildHost() {
	srv := newMemServer()
	h := New(Config{Services: srv, Logger: hclog.NewNullLogger(), StateDir: os.Getenv("COUCHEPI_TEST_STATE_DIR")})
	srv.host = h
	if err := h.Load(context.Background(), Spec{Path: os.Getenv(childHostEnv)}); err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("pid", h.Plugins()[0].PID)
	select {}
}

// guardConfig is the docguard config most tests use.
func guardConfig(extra map[string]string) hooks.Config {
	c := map[string]string{"dbs": "*_guarded", "required": "type,owner", "audit": "audit_*", "hidden": "secret"}
	for k, v := range extra {
		c[k] = v
	}
	return hooks.Config{"docguard": c}
}

// newTestHost starts a host with a memServer and loads the given binary.
func newTestHost(t testing.TB, cfg Config, spec Spec) (*Host, *memServer) {
	t.Helper()
	srv := newMemServer()
	cfg.Services = srv
	if cfg.Logger == nil {
		level := hclog.Warn
		if l := os.Getenv("COUCHEPI_TEST_LOG"); l != "" {
			level = hclog.LevelFromString(l)
		}
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "test", Level: level, Output: os.Stderr})
	}
	h := New(cfg)
	srv.host = h
	t.Cleanup(func() { h.Close() })
	if spec.Path != "" {
		if err := h.Load(context.Background(), spec); err != nil {
			t.Fatalf("load %s: %v", spec.Path, err)
		}
	}
	return h, srv
}

// guardStats is the JSON of GET /_docguard/stats.
type guardStats struct {
	Version string                      `json:"version"`
	PID     int                         `json:"pid"`
	Started bool                        `json:"started"`
	Calls   map[string]map[string]int64 `json:"calls"`
	CatchUp map[string]int64            `json:"catch_up"`
	Audit   map[string]struct {
		Docs    int    `json:"docs"`
		LastSeq string `json:"last_seq"`
	} `json:"audit"`
}

// do sends one request through h.ServeHTTP as user.
func do(t testing.TB, h *Host, method, target string, body io.Reader, user hooks.UserCtx) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, target, body)
	r = r.WithContext(WithUser(r.Context(), user))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func stats(t testing.TB, h *Host) guardStats {
	t.Helper()
	w := do(t, h, "GET", "/_docguard/stats", nil, hooks.UserCtx{})
	if w.Code != 200 {
		t.Fatalf("stats: %d %s", w.Code, w.Body.String())
	}
	var s guardStats
	if err := json.Unmarshal(w.Body.Bytes(), &s); err != nil {
		t.Fatalf("stats: %v", err)
	}
	return s
}

// eventually polls cond until it holds or timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// processAlive reports whether pid runs (and is not a zombie).
func processAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// Field 3 is the state; Z = zombie, X = dead.
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == ')' {
			return i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
		}
	}
	return true
}

// readLine reads one line from a child's stdout with a deadline.
func readLine(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	ch := make(chan string, 1)
	go func() {
		s, _ := r.ReadString('\n')
		ch <- s
	}()
	select {
	case s := <-ch:
		return s
	case <-time.After(60 * time.Second):
		t.Fatal("child host printed nothing")
		return ""
	}
}

var _ http.Handler = (*Host)(nil)
