package host

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// livePluginChildren counts this process's children running a plugin
// binary (their command line names docguard), zombies excluded.
func livePluginChildren(t *testing.T) int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	n := 0
	for _, d := range dirs {
		st, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …
		f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
		if len(f) < 2 || f[0] == "Z" || f[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join(d, "cmdline"))
		if strings.Contains(string(cmd), "docguard") {
			n++
		}
	}
	return n
}

// TestCloseDuringLoad: a Load racing with Close never leaves a plugin
// process running after both return.
func TestCloseDuringLoad(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc")
	}
	before := livePluginChildren(t)
	for i := 0; i < 8; i++ {
		h := New(Config{})
		done := make(chan error, 1)
		go func() { done <- h.Load(context.Background(), Spec{Path: docguardV1}) }()
		time.Sleep(time.Duration(i) * 15 * time.Millisecond)
		h.Close()
		<-done
		deadline := time.Now().Add(5 * time.Second)
		for livePluginChildren(t) > before && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if n := livePluginChildren(t); n > before {
			t.Fatalf("round %d: %d plugin processes still running after Load and Close returned", i, n-before)
		}
	}
}

// pluginGoroutines lists the goroutines running a managed plugin's loops,
// a plugin process's spawn or its HostServices server, by their function.
func pluginGoroutines() []string {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var found []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, fn := range []string{"host.(*managed).monitor(", "host.(*managed).deliverLoop(", "host.(*managed).restartLoop(", "host.(*Host).spawn.func", "plugin.(*GRPCBroker).AcceptAndServe("} {
			if strings.Contains(g, fn) {
				found = append(found, strings.TrimSuffix(fn, "("))
			}
		}
	}
	return found
}

// TestCloseWaitsForPluginGoroutines: when Close returns, no goroutine of
// the plugin's runs any more (monitor, delivery, restart, the process's
// spawn goroutine, its HostServices server) and the process's pid file is gone, whether the plugin
// was running or restarting after a crash.
func TestCloseWaitsForPluginGoroutines(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc")
	}
	for _, tc := range []struct {
		name   string
		crash  bool
		rounds int // how long a goroutine takes to end after Close varies
	}{
		{"running", false, 2},
		{"restarting", true, 6},
	} {
		for round := 0; round < tc.rounds; round++ {
			t.Run(tc.name, func(t *testing.T) {
				// Those of hosts closed before this one may still be ending.
				eventually(t, 30*time.Second, "no plugin goroutine from an earlier test", func() bool {
					return len(pluginGoroutines()) == 0
				})
				stateDir := t.TempDir()
				h, _ := newTestHost(t, Config{Config: guardConfig(nil), StateDir: stateDir}, Spec{Path: docguardV1})
				if tc.crash {
					pid := h.Plugins()[0].PID
					if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
						t.Fatal(err)
					}
					eventually(t, 30*time.Second, "the host to see the crash", func() bool {
						return h.Plugins()[0].PID != pid
					})
				}
				if len(pluginGoroutines()) == 0 {
					t.Fatal("no plugin goroutine found before Close: the stack match is out of date")
				}
				if err := h.Close(); err != nil {
					t.Logf("close: %v", err)
				}
				if left := pluginGoroutines(); len(left) > 0 {
					t.Errorf("after Close returned, still running: %v", left)
				}
				if pids, _ := filepath.Glob(filepath.Join(stateDir, "plugin-*.pid")); len(pids) > 0 {
					t.Errorf("after Close returned, pid files remain: %v", pids)
				}
			})
		}
	}
}
