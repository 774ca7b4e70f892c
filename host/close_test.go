package host

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
