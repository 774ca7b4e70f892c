package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
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

var minicouchBin string

func TestMain(m *testing.M) {
	code := func() int {
		dir, err := os.MkdirTemp("", "minicouch-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		minicouchBin = filepath.Join(dir, "minicouch")
		cmd := exec.Command("go", "build", "-o", minicouchBin, ".")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build minicouch:", err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

// freePort returns a free 127.0.0.1 port.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startMinicouch runs the minicouch binary on a free port with admin
// admin:pass and a low pbkdf2 iteration count; it is stopped with SIGTERM
// when the test ends. It returns the base URL without credentials.
func startMinicouch(t testing.TB, extra ...string) string {
	t.Helper()
	u, _ := startMinicouchIn(t, t.TempDir(), extra...)
	return u
}

// mcProc is a running minicouch process.
type mcProc struct {
	*os.Process
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
}

// exitState waits for the process to exit and returns its state.
func (p *mcProc) exitState(timeout time.Duration) (*os.ProcessState, bool) {
	select {
	case <-p.done:
		return p.cmd.ProcessState, true
	case <-time.After(timeout):
		return nil, false
	}
}

// startMinicouchIn is startMinicouch on a given data dir; it also returns
// the process so a test can signal or kill it.
func startMinicouchIn(t testing.TB, data string, extra ...string) (string, *mcProc) {
	t.Helper()
	ini := filepath.Join(data, "test.ini")
	if err := os.WriteFile(ini, []byte("[chttpd_auth]\niterations = 1000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	args := append([]string{"--addr", addr, "--data", data, "--admin", "admin:pass", "--config", ini, "--log-level", "warn"}, extra...)
	cmd := exec.Command(minicouchBin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "minicouch listening on "); ok {
				ready <- strings.TrimSuffix(u, "/")
			}
		}
	}()
	select {
	case u := <-ready:
		return u, &mcProc{Process: cmd.Process, cmd: cmd, done: done}
	case <-done:
		t.Fatal("minicouch exited at start-up")
	case <-time.After(30 * time.Second):
		t.Fatal("minicouch did not start")
	}
	return "", nil
}

// withCreds inserts admin:pass into a base URL.
func withCreds(base string) string {
	return strings.Replace(base, "http://", "http://admin:pass@", 1)
}

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
	base := startMinicouch(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "testdata/replicate.js")
	cmd.Env = append(os.Environ(), "POUCHDB_DIR="+interopDir, "COUCH_URL="+withCreds(base), "WORK_DIR="+t.TempDir())
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
