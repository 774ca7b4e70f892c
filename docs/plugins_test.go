package docs

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/minicouchtest"
)

func TestMain(m *testing.M) {
	code := minicouchtest.Main(m)
	if greeters.dir != "" {
		os.RemoveAll(greeters.dir)
	}
	os.Exit(code)
}

// greeterBuilds are the build commands plugins.md gives, run from
// examples/greeter (a module of its own, as a plugin outside this
// repository is) with their output path replaced.
var greeterBuilds = []struct{ doc, out string }{
	{`go build -o ../../bin/greeter .`, "greeter"},
	{`go build -ldflags "-X main.version=2" -o ../../bin/greeter-v2 .`, "greeter-v2"},
}

// greeters is the directory of the greeter builds, made once per test
// process (three tests load them; a build takes seconds) and removed by
// TestMain.
var greeters struct {
	once sync.Once
	dir  string
	err  error
}

// greeterBinaries returns the directory holding greeter and greeter-v2,
// built from examples/greeter as each of greeterBuilds.
func greeterBinaries(t *testing.T) string {
	t.Helper()
	page := readPage(t, "plugins.md")
	for _, b := range greeterBuilds {
		if !strings.Contains(page, b.doc) {
			t.Fatalf("plugins.md no longer says %q", b.doc)
		}
	}
	greeters.once.Do(func() {
		greeters.dir, greeters.err = os.MkdirTemp("", "couchepi-greeter-")
		for _, b := range greeterBuilds {
			if greeters.err != nil {
				return
			}
			args := []string{"build", "-o", filepath.Join(greeters.dir, b.out)}
			if strings.Contains(b.doc, "-ldflags") {
				args = append(args, "-ldflags", "-X main.version=2")
			}
			cmd := exec.Command("go", append(args, ".")...)
			cmd.Dir = filepath.Join("..", "examples", "greeter")
			if out, err := cmd.CombinedOutput(); err != nil {
				greeters.err = fmt.Errorf("%s: %v\n%s", b.doc, err, out)
			}
		}
	})
	if greeters.err != nil {
		t.Fatal(greeters.err)
	}
	return greeters.dir
}

// TestStandalonePlugin builds examples/greeter as plugins.md says, loads it
// into a running minicouch with POST /_node/_local/_plugins, uses its hook
// and its route, and swaps in v2 with _reload.
func TestStandalonePlugin(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a plugin module and runs minicouch")
	}
	dir := greeterBinaries(t)
	srv := minicouchtest.Start(t, minicouchtest.Options{})
	type answer struct {
		OK     bool   `json:"ok"`
		Error  string `json:"error"`
		Reason string `json:"reason"`
		Plugin struct {
			Name, Version, State string
		} `json:"plugin"`
	}
	var a answer
	if st := srv.JSON(t, "POST", "/_node/_local/_plugins", map[string]string{"path": filepath.Join(dir, "greeter")}, &a); st != 201 ||
		a.Plugin.Name != "greeter" || a.Plugin.Version != "1" || a.Plugin.State != "running" {
		t.Fatalf("load: %d %+v", st, a)
	}
	a = answer{}
	if st := srv.JSON(t, "POST", "/_node/_local/_plugins", map[string]string{"path": filepath.Join(dir, "greeter-v2")}, &a); st != 409 || a.Error != "conflict" {
		t.Fatalf("loading a second greeter: %d %+v", st, a)
	}
	srv.JSON(t, "PUT", "/greetings", nil, nil)
	a = answer{}
	if st := srv.JSON(t, "PUT", "/greetings/a", map[string]string{"to": "bob"}, &a); st != 403 || a.Reason != "Every greeting needs a greeting." {
		t.Fatalf("doc without greeting: %d %+v", st, a)
	}
	var put struct{ Rev string }
	if st := srv.JSON(t, "PUT", "/greetings/b", map[string]string{"greeting": "hi"}, &put); st != 201 {
		t.Fatalf("doc with greeting: %d", st)
	}
	if st := srv.JSON(t, "DELETE", "/greetings/b?rev="+put.Rev, nil, nil); st != 200 {
		t.Fatalf("delete: %d (deletes reach before_doc_update as {_id,_rev,_deleted})", st)
	}
	var hello struct {
		Greeting, Version string
		Writes            int
	}
	deadline := time.Now().Add(10 * time.Second)
	for srv.JSON(t, "GET", "/_greeter", nil, &hello); hello.Writes < 2; srv.JSON(t, "GET", "/_greeter", nil, &hello) {
		if time.Now().After(deadline) {
			t.Fatalf("GET /_greeter = %+v, want 2 writes counted", hello)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if hello.Greeting != "hello "+srv.User || hello.Version != "1" {
		t.Errorf("GET /_greeter = %+v", hello)
	}
	a = answer{}
	if st := srv.JSON(t, "POST", "/_node/_local/_plugins/greeter/_reload", map[string]string{"path": filepath.Join(dir, "greeter-v2")}, &a); st != 200 || a.Plugin.Version != "2" {
		t.Fatalf("reload: %d %+v", st, a)
	}
	var after json.RawMessage
	srv.JSON(t, "GET", "/_greeter", nil, &after)
	if !strings.Contains(string(after), `"version":"2"`) {
		t.Errorf("after reload GET /_greeter = %s", after)
	}
}
