package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/minicouchtest"
)

// TestProgressBarInTmux runs the couchrep binary in a detached tmux pane (a
// real terminal) replicating COUCHREP_TTY_DOCS docs (default 100000) and
// captures the live progress bar. It needs tmux and is slow, so it runs only
// with COUCHREP_TTY_TEST=1; the captures are saved to artifacts/couchrep/.
func TestProgressBarInTmux(t *testing.T) {
	if os.Getenv("COUCHREP_TTY_TEST") != "1" {
		t.Skip("set COUCHREP_TTY_TEST=1 to run the tmux progress-bar test")
	}
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux not installed (apt-get install -y tmux)")
	}
	n := 100000
	if v := os.Getenv("COUCHREP_TTY_DOCS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatalf("COUCHREP_TTY_DOCS: %v", err)
		}
	}
	dir := t.TempDir()
	bin := minicouchtest.MustBinary(t, minicouchtest.Build{Pkg: minicouchtest.CouchrepPkg})
	s := startServer(t)
	seedStart := time.Now()
	s.seed(t, "src", n)
	t.Logf("seeded %d docs in %v", n, time.Since(seedStart).Round(time.Millisecond))

	socket := "couchrep-test-" + strconv.Itoa(os.Getpid())
	tmux := func(args ...string) (string, error) {
		out, err := exec.Command("tmux", append([]string{"-L", socket}, args...)...).CombinedOutput()
		return string(out), err
	}
	exitFile := filepath.Join(dir, "exit")
	script := fmt.Sprintf("COUCHREP_HOME=%s %s --create-target %s %s; echo $? > %s; sleep 600",
		dir, bin, s.base+"src", s.base+"tgt", exitFile)
	if out, err := tmux("new-session", "-d", "-s", "rep", "-x", "110", "-y", "8", script); err != nil {
		t.Fatalf("tmux: %v %s", err, out)
	}
	t.Cleanup(func() { tmux("kill-server") })

	artifacts := filepath.Join(repoRoot(), "artifacts", "couchrep")
	os.MkdirAll(artifacts, 0o755)
	bar := regexp.MustCompile(`\[[=> ]*\]\s+\d+%\s+[\d,]+ docs\s+[\d,]+ docs/s`)
	var captures []string
	deadline := time.Now().Add(10 * time.Minute)
	for {
		pane, err := tmux("capture-pane", "-p", "-t", "rep")
		if err != nil {
			t.Fatalf("capture-pane: %v %s", err, pane)
		}
		if bar.MatchString(pane) {
			captures = append(captures, strings.TrimRight(pane, "\n"))
		}
		if b, err := os.ReadFile(exitFile); err == nil {
			code := strings.TrimSpace(string(b))
			final := strings.TrimRight(pane, "\n")
			os.WriteFile(filepath.Join(artifacts, "tty-progress.txt"),
				[]byte(strings.Join(append(captures, final), "\n-----\n")+"\n"), 0o644)
			if code != "0" {
				t.Fatalf("couchrep exit %s\n%s", code, final)
			}
			if len(captures) == 0 {
				t.Fatalf("no progress bar seen; final screen:\n%s", final)
			}
			want := fmt.Sprintf("completed: %s docs read, %s written, 0 failed", thousands(int64(n)), thousands(int64(n)))
			if !strings.Contains(final, want) {
				t.Errorf("final screen lacks %q:\n%s", want, final)
			}
			if strings.Contains(final, s.pass+"@") && s.pass != "" {
				t.Errorf("password on screen")
			}
			t.Logf("%d progress captures; last:\n%s\nfinal:\n%s", len(captures), captures[len(captures)-1], final)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("couchrep did not finish; screen:\n%s", pane)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if got := s.docCount(t, "tgt"); got != int64(n) {
		t.Errorf("target has %d docs, want %d", got, n)
	}
}
