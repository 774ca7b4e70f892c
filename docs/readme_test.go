package docs

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/minicouchtest"
)

// TestReadmeQuickStart runs the README's first curl commands, as a new
// user types them after `make demo`, against a minicouch with the
// replicator (on a free port instead of 5984): every one must succeed, and
// the replication they ask for must deliver the doc.
func TestReadmeQuickStart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs minicouch and curl")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("needs curl (.ci/run installs it)")
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "Then, in another terminal:\n\n```sh\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("the README's quick start block is gone")
	}
	srv := minicouchtest.Start(t, minicouchtest.Options{Plugins: []string{minicouchtest.Replicator(t, "")}})
	cmds := strings.Split(strings.ReplaceAll(block, "\\\n", " "), "\n")
	ran := 0
	for _, cmd := range cmds {
		cmd = strings.TrimSpace(cmd)
		if cmd == "" {
			continue
		}
		if !strings.HasPrefix(cmd, "curl ") {
			t.Fatalf("the quick start has a command this test does not know: %s", cmd)
		}
		cmd = strings.ReplaceAll(cmd, "127.0.0.1:5984", srv.Addr)
		out, err := exec.Command("sh", "-c", strings.Replace(cmd, "curl ", "curl -sS -f ", 1)).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, out)
		}
		ran++
	}
	if ran < 4 {
		t.Fatalf("ran %d commands", ran)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if st, _, _ := srv.Do("GET", "/dst/doc1", nil); st == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the quick start's replication did not deliver doc1 to dst")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
