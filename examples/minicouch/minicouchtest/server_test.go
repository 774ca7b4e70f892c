package minicouchtest

import (
	"os"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// TestServerLifecycle starts minicouch, writes through the JSON helper,
// kills it with SIGKILL, restarts it on the same data dir and address, and
// stops it with SIGTERM (exit status 0).
func TestServerLifecycle(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs minicouch")
	}
	s := Start(t, Options{})
	steps := []struct {
		method, path string
		body         any
		status       int
	}{
		{"PUT", "/db", nil, 201},
		{"PUT", "/db/a", map[string]any{"x": 1}, 201},
		{"PUT", "db/b", `{"x":2}`, 201},
		{"GET", "/db/missing", nil, 404},
	}
	for _, st := range steps {
		var out map[string]any
		if got := s.JSON(t, st.method, st.path, st.body, &out); got != st.status {
			t.Fatalf("%s %s: %d %v, want %d", st.method, st.path, got, out, st.status)
		}
	}
	addr, pid := s.Addr, s.PID()
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Fatalf("pid %d still alive after Kill", pid)
	}
	s.Restart(t)
	if s.Addr != addr || s.PID() == pid || s.PID() == 0 {
		t.Fatalf("restart: addr %s pid %d (was %s %d)", s.Addr, s.PID(), addr, pid)
	}
	var info struct {
		DocCount int `json:"doc_count"`
	}
	if st := s.JSON(t, "GET", "/db", nil, &info); st != 200 || info.DocCount != 2 {
		t.Fatalf("after kill -9 and restart: %d doc_count %d", st, info.DocCount)
	}
	if st, _, _ := s.DoAs("", "", "PUT", "/db2", nil); st != 401 {
		t.Fatalf("anonymous PUT /db2: %d, want 401", st)
	}
	if err := s.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if st, ok := s.Wait(20 * time.Second); !ok || !st.Success() {
		t.Fatalf("SIGTERM: exited %v %v", ok, st)
	}
}

// TestBinaryOnce: the same Build is built once per process.
func TestBinaryOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds minicouch")
	}
	a := Minicouch(t)
	b := Minicouch(t)
	if a != b {
		t.Fatalf("two builds: %s %s", a, b)
	}
	if _, err := Binary(Build{Pkg: modulePath + "/no/such/pkg"}); err == nil {
		t.Fatal("building a missing package succeeded")
	}
}
