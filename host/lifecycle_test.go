package host

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/couchepi/couchepi/hooks"
	"github.com/hashicorp/go-hclog"
)

// writer writes docs to a set of dbs until stopped, recording what was
// accepted and how long writes were refused.
type writer struct {
	srv  *memServer
	dbs  []string
	doc  string // JSON fields after _id
	stop chan struct{}
	wg   sync.WaitGroup

	mu           sync.Mutex
	accepted     map[string]int
	refused      int
	otherErrs    []error
	refusedSince map[string]time.Time // per db: start of the current refusal streak
	longest      time.Duration
	n            atomic.Int64
}

func startWriter(srv *memServer, workers int, doc string, dbs ...string) *writer {
	w := &writer{srv: srv, dbs: dbs, doc: doc, stop: make(chan struct{}), accepted: map[string]int{}, refusedSince: map[string]time.Time{}}
	for k := 0; k < workers; k++ {
		w.wg.Add(1)
		go w.run(k)
	}
	return w
}

func (w *writer) run(k int) {
	defer w.wg.Done()
	for i := 0; ; i++ {
		select {
		case <-w.stop:
			return
		default:
		}
		for _, db := range w.dbs {
			id := fmt.Sprintf("w%d-%d", k, i)
			_, err := w.srv.put(context.Background(), db, []byte(`{"_id":"`+id+`",`+w.doc+`}`), alice)
			w.n.Add(1)
			now := time.Now()
			w.mu.Lock()
			var he *hooks.Error
			switch {
			case err == nil:
				w.accepted[db]++
				if since, ok := w.refusedSince[db]; ok {
					if d := now.Sub(since); d > w.longest {
						w.longest = d
					}
					delete(w.refusedSince, db)
				}
			case errors.As(err, &he) && he.Status == 503 && he.Err == "service_unavailable":
				w.refused++
				if _, ok := w.refusedSince[db]; !ok {
					w.refusedSince[db] = now
				}
			default:
				w.otherErrs = append(w.otherErrs, err)
			}
			w.mu.Unlock()
		}
		time.Sleep(time.Millisecond)
	}
}

func (w *writer) halt() {
	close(w.stop)
	w.wg.Wait()
}

// waitWrites waits until n more writes were answered.
func (w *writer) waitWrites(t *testing.T, n int64) {
	target := w.n.Load() + n
	eventually(t, 30*time.Second, "writes", func() bool { return w.n.Load() >= target })
}

// TestCrashRestart: SIGKILL the plugin mid-traffic. Writes to guarded dbs
// get 503 until the restart, then succeed; no after_doc_write is lost: the
// restarted plugin gets the unacknowledged events again and catches up on
// dbs whose events were dropped while it was down.
func TestCrashRestart(t *testing.T) {
	stateFile := filepath.Join(t.TempDir(), "audit.log")
	h, srv := newTestHost(t, Config{Config: guardConfig(map[string]string{"state_file": stateFile})}, Spec{Path: docguardV1})
	srv.createDB("c_guarded")
	srv.createDB("audit_c")
	w := startWriter(srv, 2, `"type":"t","owner":"o"`, "c_guarded", "audit_c")
	w.waitWrites(t, 200)

	oldPID := h.Plugins()[0].PID
	if err := syscall.Kill(oldPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "a refused write", func() bool { w.mu.Lock(); defer w.mu.Unlock(); return w.refused > 0 })
	eventually(t, 60*time.Second, "restart", func() bool {
		p := h.Plugins()[0]
		return p.State == StateRunning && p.PID != 0 && p.PID != oldPID
	})
	w.waitWrites(t, 200)
	if _, err := srv.put(context.Background(), "c_guarded", []byte(`{"_id":"after-restart","type":"t","owner":"o"}`), alice); err != nil {
		t.Errorf("write after restart: %v", err)
	} else {
		w.mu.Lock()
		w.accepted["c_guarded"]++
		w.mu.Unlock()
	}
	w.halt()

	if len(w.otherErrs) > 0 {
		t.Fatalf("unexpected write errors: %v", w.otherErrs[:min(3, len(w.otherErrs))])
	}
	if w.accepted["c_guarded"] == 0 || w.accepted["audit_c"] == 0 {
		t.Fatalf("accepted = %v", w.accepted)
	}
	eventually(t, 30*time.Second, "the plugin to have audited every accepted write", func() bool {
		s := stats(t, h)
		return s.Audit["c_guarded"].Docs == w.accepted["c_guarded"] && s.Audit["audit_c"].Docs == w.accepted["audit_c"]
	})
	s := stats(t, h)
	t.Logf("accepted %v, refused %d (longest %s), catch-ups %v", w.accepted, w.refused, w.longest, s.CatchUp)
	if s.CatchUp["audit_c"] == 0 {
		t.Errorf("no catch-up for audit_c, whose writes went on while the plugin was down")
	}
	if processAlive(oldPID) {
		t.Errorf("killed plugin %d still runs", oldPID)
	}
}

// TestReloadUnderLoad swaps docguard v1 → v2 while writes go on: every write
// is answered, none refused for more than 1s, afterwards only v2 answers,
// the audit log was handed over without losing an event, and the old
// process is gone.
func TestReloadUnderLoad(t *testing.T) {
	stateFile := filepath.Join(t.TempDir(), "audit.log")
	h, srv := newTestHost(t, Config{Config: guardConfig(map[string]string{"state_file": stateFile})}, Spec{Path: docguardV1})
	srv.createDB("r_guarded")
	w := startWriter(srv, 3, `"type":"t","owner":"o","created_at":"now"`, "r_guarded")
	w.waitWrites(t, 100)
	oldPID := h.Plugins()[0].PID

	if err := h.Reload(context.Background(), "docguard", Spec{Path: docguardV2}); err != nil {
		t.Fatalf("reload: %v", err)
	}
	w.waitWrites(t, 100)
	w.halt()

	if len(w.otherErrs) > 0 {
		t.Fatalf("unexpected write errors: %v", w.otherErrs[:min(3, len(w.otherErrs))])
	}
	if w.longest > time.Second || len(w.refusedSince) > 0 {
		t.Errorf("writes refused for %s (still refused: %v)", w.longest, len(w.refusedSince) > 0)
	}
	t.Logf("accepted %d, refused %d, longest refusal %s", w.accepted["r_guarded"], w.refused, w.longest)

	p := h.Plugins()[0]
	if p.Version != "v2" || p.PID == oldPID || p.State != StateRunning || p.Path != docguardV2 {
		t.Errorf("after reload: %+v", p)
	}
	_, err := srv.put(context.Background(), "r_guarded", []byte(`{"_id":"nov2","type":"t","owner":"o"}`), alice)
	if err == nil || !strings.Contains(err.Error(), `"created_at"`) {
		t.Errorf("v2 should require created_at, got %v", err)
	}
	if s := stats(t, h); s.Version != "v2" || s.PID != p.PID {
		t.Errorf("route answered by %s pid %d", s.Version, s.PID)
	}
	eventually(t, 30*time.Second, "audit handed over", func() bool {
		return stats(t, h).Audit["r_guarded"].Docs == w.accepted["r_guarded"]
	})
	eventually(t, 10*time.Second, "old process to exit", func() bool { return !processAlive(oldPID) })
}

// TestParentDeath: when the server is SIGKILLed, its plugin dies too; and a
// plugin left behind is killed by the next host using the same StateDir.
func TestParentDeath(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	stateDir := t.TempDir()
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), childHostEnv+"="+docguardV1, "COUCHEPI_TEST_STATE_DIR="+stateDir)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line := readLine(t, bufio.NewReader(out))
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "pid ")))
	if err != nil {
		cmd.Process.Kill()
		t.Fatalf("child host said %q", line)
	}
	if files, _ := filepath.Glob(filepath.Join(stateDir, "plugin-*.pid")); len(files) != 1 {
		t.Errorf("pid files = %v", files)
	}
	cmd.Process.Kill()
	cmd.Wait()
	eventually(t, 10*time.Second, "plugin to die with its server", func() bool { return !processAlive(pid) })

	// A stale plugin process recorded in StateDir is killed by New.
	stale := exec.Command(docguardV1)
	stale.Env = append(os.Environ(), "COUCHEPI_PLUGIN=b5e0c6a1d1f34bb0a3c7e0a5f2d4c6e8", "PLUGIN_PROTOCOL_VERSIONS=1")
	if err := stale.Start(); err != nil {
		t.Fatal(err)
	}
	defer stale.Process.Kill()
	writePidFile(stateDir, stale.Process.Pid, docguardV1, hclog.NewNullLogger())
	go stale.Wait()
	New(Config{StateDir: stateDir})
	eventually(t, 10*time.Second, "stale plugin to be killed", func() bool { return !processAlive(stale.Process.Pid) })
	if files, _ := filepath.Glob(filepath.Join(stateDir, "plugin-*.pid")); len(files) != 0 {
		t.Errorf("pid files left: %v", files)
	}
}

// TestQueueOverflow: when a plugin's event queue overflows, the dropped
// events are not lost: the plugin is told to catch up from the changes feed.
func TestQueueOverflow(t *testing.T) {
	h, srv := newTestHost(t, Config{QueueSize: 4, Config: guardConfig(nil)}, Spec{Path: docguardV1})
	srv.createDB("audit_o")
	const n = 500
	for i := 0; i < n; i++ {
		if _, err := srv.put(context.Background(), "audit_o", []byte(fmt.Sprintf(`{"_id":"d%d"}`, i)), alice); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 30*time.Second, "every write audited", func() bool { return stats(t, h).Audit["audit_o"].Docs == n })
	if s := stats(t, h); s.CatchUp["audit_o"] == 0 {
		t.Errorf("no catch-up after overflow: %+v", s.CatchUp)
	}
}

// TestCatchUpFailureStaysWithItsDB: a db whose catch-up keeps failing
// (the plugin cannot read its changes) is retried on its own, while the
// other dbs' events and catch-ups are delivered; once it can be read, it
// catches up with every write.
func TestCatchUpFailureStaysWithItsDB(t *testing.T) {
	h, srv := newTestHost(t, Config{QueueSize: 4, Config: guardConfig(nil)}, Spec{Path: docguardV1})
	srv.createDB("audit_bad")
	srv.createDB("audit_good")
	srv.failChanges("audit_bad", &hooks.Error{Status: 500, Err: "error", Reason: "the db's file cannot be read"})
	write := func(db string, from, n int) {
		for i := from; i < from+n; i++ {
			if _, err := srv.put(context.Background(), db, []byte(fmt.Sprintf(`{"_id":"d%d"}`, i)), alice); err != nil {
				t.Fatal(err)
			}
		}
	}
	// More writes than the queue holds: audit_bad waits for a catch-up,
	// which fails.
	write("audit_bad", 0, 100)
	eventually(t, 30*time.Second, "a catch-up of audit_bad tried", func() bool { return stats(t, h).CatchUp["audit_bad"] > 0 })
	// Another db's events and catch-ups go through meanwhile.
	write("audit_good", 0, 100)
	eventually(t, 30*time.Second, "audit_good audited while audit_bad fails", func() bool { return stats(t, h).Audit["audit_good"].Docs == 100 })
	srv.failChanges("audit_bad", nil)
	eventually(t, 30*time.Second, "audit_bad audited once readable", func() bool { return stats(t, h).Audit["audit_bad"].Docs == 100 })
}

// TestReloadRefused: a reload whose new binary cannot take over (missing,
// not the pinned checksum, not a plugin) fails with the reason and leaves
// the running process in charge: same pid and version, still enforcing its
// rules, and later reloads still work.
func TestReloadRefused(t *testing.T) {
	h, srv := newTestHost(t, Config{Config: guardConfig(nil)}, Spec{Path: docguardV1})
	srv.createDB("r_guarded")
	before := h.Plugins()[0]
	v1sum, err := checksum(docguardV1)
	if err != nil {
		t.Fatal(err)
	}
	notPlugin := filepath.Join(t.TempDir(), "not-a-plugin")
	if err := os.WriteFile(notPlugin, []byte("#!/bin/sh\necho hello\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		spec Spec
		want string // part of the error
	}{
		{"missing binary", Spec{Path: filepath.Join(t.TempDir(), "gone")}, "gone"},
		{"checksum mismatch", Spec{Path: docguardV2, SHA256: v1sum}, "checksum mismatch"},
		{"not a plugin", Spec{Path: notPlugin}, notPlugin},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := h.Reload(context.Background(), "docguard", tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Reload = %v, want an error containing %q", err, tc.want)
			}
			p := h.Plugins()[0]
			if p.PID != before.PID || p.Version != "v1" || p.State != StateRunning || p.Path != docguardV1 {
				t.Fatalf("after a refused reload: %+v, want %+v", p, before)
			}
			if _, err := srv.put(context.Background(), "r_guarded", []byte(`{"_id":"bad","type":"t"}`), alice); err == nil ||
				!strings.Contains(err.Error(), `"owner"`) {
				t.Errorf("v1 no longer enforces its rules: %v", err)
			}
			if _, err := srv.put(context.Background(), "r_guarded", []byte(fmt.Sprintf(`{"_id":"ok%d","type":"t","owner":"o"}`, i)), alice); err != nil {
				t.Errorf("a valid write was refused: %v", err)
			}
		})
	}
	if err := h.Reload(context.Background(), "docguard", Spec{Path: docguardV2}); err != nil {
		t.Fatalf("a good reload after refused ones: %v", err)
	}
	if p := h.Plugins()[0]; p.Version != "v2" || p.State != StateRunning {
		t.Errorf("after the good reload: %+v", p)
	}
	eventually(t, 10*time.Second, "v1 to exit", func() bool { return !processAlive(before.PID) })
}

// TestReloadStartFails: the new process takes over the hooks, the old one
// is stopped, and then the new one fails to start (its audit log's
// directory is missing). Writes are refused with 503 meanwhile, never let
// through unchecked, and the restart loop brings the new version up once
// the directory exists.
func TestReloadStartFails(t *testing.T) {
	dir := t.TempDir()
	h, srv := newTestHost(t, Config{Config: guardConfig(map[string]string{"state_file": filepath.Join(dir, "audit.log")})}, Spec{Path: docguardV1})
	srv.createDB("r_guarded")
	oldPID := h.Plugins()[0].PID
	// The running v1 keeps its open log; only a process starting now needs the new path.
	missing := filepath.Join(dir, "later")
	h.SetConfig(context.Background(), guardConfig(map[string]string{"state_file": filepath.Join(missing, "audit.log")}))

	err := h.Reload(context.Background(), "docguard", Spec{Path: docguardV2})
	if err == nil || !strings.Contains(err.Error(), "later") {
		t.Fatalf("Reload = %v, want the new process's start error", err)
	}
	if st := h.Plugins()[0].State; st != StateRestarting && st != StateFailed {
		t.Errorf("state after a failed start: %s", st)
	}
	eventually(t, 10*time.Second, "the old process to exit", func() bool { return !processAlive(oldPID) })
	_, err = srv.put(context.Background(), "r_guarded", []byte(`{"_id":"unchecked"}`), alice)
	var he *hooks.Error
	if !errors.As(err, &he) || he.Status != 503 {
		t.Fatalf("a write with no plugin to check it: %v, want 503", err)
	}
	if err := os.Mkdir(missing, 0o700); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "v2 running after the restart loop", func() bool {
		p := h.Plugins()[0]
		return p.State == StateRunning && p.Version == "v2"
	})
	if _, err := srv.put(context.Background(), "r_guarded", []byte(`{"_id":"checked","type":"t","owner":"o","created_at":"now"}`), alice); err != nil {
		t.Errorf("a valid write after recovery: %v", err)
	}
	if _, err := srv.put(context.Background(), "r_guarded", []byte(`{"_id":"nov2","type":"t","owner":"o"}`), alice); err == nil {
		t.Error("v2's rule (created_at) is not enforced after recovery")
	}
}

// TestPluginStoreOutage (issue 30 item 6): a plugin whose own store is
// down fails its catch-ups and event batches but answers health checks:
// the host keeps the process (no restart), retries less and less often,
// logs the repeated failure about once per interval with a count instead
// of at every attempt, and delivers everything once the store is back.
func TestPluginStoreOutage(t *testing.T) {
	var logs strings.Builder
	var logMu sync.Mutex
	logger := hclog.New(&hclog.LoggerOptions{Name: "test", Level: hclog.Warn, Output: &lockedWriter{mu: &logMu, w: &logs}})
	h, srv := newTestHost(t, Config{QueueSize: 4, Logger: logger, Config: guardConfig(map[string]string{"audit_unavailable": "true"})}, Spec{Path: docguardV1})
	pid := h.Plugins()[0].PID
	srv.createDB("audit_down")
	const n = 50
	for i := 0; i < n; i++ {
		if _, err := srv.put(context.Background(), "audit_down", []byte(fmt.Sprintf(`{"_id":"d%d"}`, i)), alice); err != nil {
			t.Fatal(err)
		}
	}
	// Some seconds of failing catch-ups: a retry every 200 ms would be
	// dozens of them, each logged.
	eventually(t, 30*time.Second, "catch-ups tried several times", func() bool { return stats(t, h).CatchUp["audit_down"] >= 4 })
	time.Sleep(3 * time.Second)
	if got := h.Plugins()[0]; got.PID != pid || got.State != StateRunning {
		t.Fatalf("plugin restarted or down during its store's outage: %+v (pid was %d)", got, pid)
	}
	logMu.Lock()
	failures := strings.Count(logs.String(), "catch-up failed") + strings.Count(logs.String(), "event batch")
	logMu.Unlock()
	tries := stats(t, h).CatchUp["audit_down"]
	if failures > 3 {
		t.Errorf("%d log lines for %d failed catch-ups: want one per interval", failures, tries)
	}
	h.SetConfig(context.Background(), guardConfig(nil))
	eventually(t, 30*time.Second, "every write audited once the store is back", func() bool { return stats(t, h).Audit["audit_down"].Docs == n })
	if got := h.Plugins()[0].PID; got != pid {
		t.Fatalf("plugin restarted: pid %d, was %d", got, pid)
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
