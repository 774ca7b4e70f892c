package docs

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/minicouchtest"
)

// pageRun says how TestDocCommandsRun runs one page's curl and couchrep
// commands, in the page's order, against a fresh minicouch of its own.
type pageRun struct {
	// replicator loads the replicator plugin into the server.
	replicator bool
	// setup prepares what the page takes as already there (dbs, files in
	// dir, the working directory of the server and of couchrep) and
	// returns the text to replace in the commands, beyond docAddr.
	setup func(t *testing.T, srv *minicouchtest.Server, dir string) map[string]string
	// serverDir is run before the server starts, in its working directory.
	serverDir func(t *testing.T, dir string)
	// after checks what the commands should have done.
	after func(t *testing.T, srv *minicouchtest.Server)
	// until are the commands (by a part of their text) that do not exit
	// by themselves: each runs until its function returns, then gets the
	// Ctrl-C of a reader, and must exit 130 as couchrep.md says.
	until map[string]func(*testing.T, *minicouchtest.Server)
}

// pageRuns are the pages with commands to run. A page with a curl or
// couchrep command and no entry here fails TestDocCommandsRun.
var pageRuns = map[string]pageRun{
	"README.md":     {replicator: true, after: delivered("dst", "doc1")},
	"cluster.md":    {replicator: true, after: clusterJobRuns},
	"minicouch.md":  {replicator: true},
	"replicator.md": {replicator: true, setup: reloadSameReplicator},
	"plugins.md":    {serverDir: greetersInBin, after: greeterReloaded},
	"couchrep.md": {
		setup: couchrepDBs, after: couchrepCopied,
		until: map[string]func(*testing.T, *minicouchtest.Server){"--continuous": delivered("db-continuous", "doc1")},
	},
}

// TestDocCommandsRun runs every curl and couchrep command of the pages, as
// a reader types them: a page's in order against a minicouch of its own on
// a free port. A curl must succeed (curl -f) unless the page shows its
// output after a `$ ` prompt, which it must then print.
func TestDocCommandsRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs minicouch, curl and couchrep")
	}
	t.Parallel()
	byPage := map[string][]docCommand{}
	for _, c := range allCommands(t) {
		if k := kindOf(c); k != nil && !c.inline && (k.kind == "curl" || k.kind == "couchrep") {
			byPage[c.page] = append(byPage[c.page], c)
		}
	}
	for page, cmds := range byPage {
		run, ok := pageRuns[page]
		if !ok {
			t.Errorf("%s: has commands to run but no entry in pageRuns", page)
			continue
		}
		t.Run(page, func(t *testing.T) {
			t.Parallel()
			run.run(t, cmds)
		})
	}
}

// run starts the page's server and runs its commands.
func (r pageRun) run(t *testing.T, cmds []docCommand) {
	for _, c := range cmds {
		if _, err := exec.LookPath("curl"); err != nil && kindOf(c).kind == "curl" {
			t.Skip("needs curl (.ci/run installs it)")
		}
	}
	dir := t.TempDir()
	if r.serverDir != nil {
		r.serverDir(t, dir)
	}
	o := minicouchtest.Options{Dir: dir}
	if r.replicator {
		o.Plugins = []string{minicouchtest.Replicator(t, "")}
	}
	srv := minicouchtest.Start(t, o)
	rewrite := map[string]string{docAddr: srv.Addr}
	if r.setup != nil {
		for old, new := range r.setup(t, srv, dir) {
			rewrite[old] = new
		}
	}
	replacer := strings.NewReplacer(flatten(rewrite)...)
	for _, c := range cmds {
		if kindOf(c).kind == "curl" {
			runCurl(t, c, replacer, dir)
		} else {
			runCouchrep(t, c, replacer, dir, r.interruptAfter(c, srv))
		}
	}
	if r.after != nil {
		r.after(t, srv)
	}
}

// interruptAfter returns what to wait for before interrupting c, or nil
// when c exits by itself.
func (r pageRun) interruptAfter(c docCommand, srv *minicouchtest.Server) func(*testing.T) {
	for part, wait := range r.until {
		if strings.Contains(c.text, part) {
			return func(t *testing.T) { wait(t, srv) }
		}
	}
	return nil
}

// flatten turns a map of replacements into strings.NewReplacer's pairs,
// longest first so that a longer text wins over its prefix.
func flatten(m map[string]string) []string {
	olds := make([]string, 0, len(m))
	for old := range m {
		olds = append(olds, old)
	}
	sort.Slice(olds, func(i, j int) bool { return len(olds[i]) > len(olds[j]) })
	var pairs []string
	for _, old := range olds {
		pairs = append(pairs, old, m[old])
	}
	return pairs
}

// runCurl runs a curl command with sh (pages pipe curl into grep), with
// -sS, and -f unless the page shows its output.
func runCurl(t *testing.T, c docCommand, r *strings.Replacer, dir string) {
	t.Helper()
	flags := "curl -sS -f "
	if c.output != "" {
		flags = "curl -sS "
	}
	cmd := exec.Command("sh", "-c", strings.Replace(r.Replace(c.text), "curl ", flags, 1))
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	checkOutput(t, c, out, err)
}

// runCouchrep runs a couchrep command with this tree's couchrep, its
// uuid kept in dir. One that does not exit is interrupted once until
// returns, and must then exit 130.
func runCouchrep(t *testing.T, c docCommand, r *strings.Replacer, dir string, until func(*testing.T)) {
	t.Helper()
	_, w := c.words()
	args := make([]string, len(w)-1)
	for i, a := range w[1:] {
		args[i] = r.Replace(a)
	}
	cmd := exec.Command(minicouchtest.MustBinary(t, minicouchtest.Build{Pkg: minicouchtest.CouchrepPkg}), args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "COUCHREP_HOME="+dir)
	if until == nil {
		out, err := cmd.CombinedOutput()
		checkOutput(t, c, out, err)
		return
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	until(t)
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); cmd.ProcessState.ExitCode() != 130 {
		t.Errorf("%s: interrupted, exited with %v, want 130\n%s", c, err, out.String())
	}
}

// checkOutput: a command without shown output succeeded; one with shown
// output printed exactly that.
func checkOutput(t *testing.T, c docCommand, out []byte, err error) {
	t.Helper()
	if c.output == "" && err != nil {
		t.Errorf("%s: %v\n%s", c, err, out)
	}
	if c.output != "" && strings.TrimSpace(string(out)) != strings.TrimSpace(c.output) {
		t.Errorf("%s: printed\n%s\nthe page shows\n%s", c, out, c.output)
	}
}

// delivered checks that the page's replication brings doc to db.
func delivered(db, doc string) func(*testing.T, *minicouchtest.Server) {
	return func(t *testing.T, srv *minicouchtest.Server) {
		t.Helper()
		waitFor(t, srv, "/"+db+"/"+doc, "the page's replication did not deliver "+doc+" to "+db)
	}
}

// clusterJobRuns: cluster.md's continuous replication delivers the doc, and
// _scheduler/jobs names the node running it, as the page's comment shows
// (here the single node's nonode@nohost: the page's cluster needs etcd).
func clusterJobRuns(t *testing.T, srv *minicouchtest.Server) {
	delivered("dst", "doc1")(t, srv)
	var jobs struct{ Jobs []struct{ Node string } }
	srv.JSON(t, "GET", "/_scheduler/jobs", nil, &jobs)
	if len(jobs.Jobs) != 1 || jobs.Jobs[0].Node != "nonode@nohost" {
		t.Errorf("GET /_scheduler/jobs = %+v, want one job with its node", jobs)
	}
}

// waitFor waits up to 30 s for GET path to answer 200.
func waitFor(t *testing.T, srv *minicouchtest.Server, path, failure string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if st, _, _ := srv.Do("GET", path, nil); st == 200 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(failure)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// reloadSameReplicator: replicator.md's reload names a v2 binary and a
// pin; the test reloads the running binary, pinned by its real SHA-256.
func reloadSameReplicator(t *testing.T, _ *minicouchtest.Server, _ string) map[string]string {
	bin := minicouchtest.Replicator(t, "")
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return map[string]string{"/opt/couchepi/replicator-v2": bin, "<optional pin>": hex.EncodeToString(sum[:])}
}

// greetersInBin puts the greeter plugin, v1 and v2, in bin/ of the
// server's working directory, where plugins.md's curls load them from.
func greetersInBin(t *testing.T, dir string) {
	if err := os.Symlink(greeterBinaries(t), filepath.Join(dir, "bin")); err != nil {
		t.Fatal(err)
	}
}

// greeterReloaded: after plugins.md's load and reload, v2 answers.
func greeterReloaded(t *testing.T, srv *minicouchtest.Server) {
	var hello struct{ Version string }
	if st := srv.JSON(t, "GET", "/_greeter", nil, &hello); st != 200 || hello.Version != "2" {
		t.Errorf("after plugins.md's reload, GET /_greeter = %d %+v", st, hello)
	}
}

// couchrepDBs makes what couchrep.md's commands take as there: a source db
// with a doc on the server (which stands for every host the page names:
// 127.0.0.1:5984 and a:5984 with db, backup:5984 with db-backup and
// b.example.com with db-continuous), and the rep.json of its --json
// example.
func couchrepDBs(t *testing.T, srv *minicouchtest.Server, dir string) map[string]string {
	for _, db := range []string{"/db", "/db-backup"} {
		if st := srv.JSON(t, "PUT", db, nil, nil); st != 201 {
			t.Fatalf("PUT %s: %d", db, st)
		}
	}
	if st := srv.JSON(t, "PUT", "/db/doc1", map[string]string{"hello": "world"}, nil); st != 201 {
		t.Fatalf("PUT /db/doc1: %d", st)
	}
	rep, err := json.Marshal(map[string]any{"source": srv.AdminURL + "db", "target": srv.AdminURL + "db-json", "create_target": true})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rep.json"), rep, 0o600); err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		"http://admin:secret@" + docAddr + "/db": srv.AdminURL + "db",
		"http://admin:secret@backup:5984/db":     srv.AdminURL + "db-backup",
		"http://a:5984/db":                       srv.AdminURL + "db",
		"https://user:pw@b.example.com/db":       srv.AdminURL + "db-continuous",
	}
}

// couchrepCopied: couchrep.md's one-shot replications copied the doc.
func couchrepCopied(t *testing.T, srv *minicouchtest.Server) {
	for _, db := range []string{"db-backup", "db-json"} {
		if st, body, _ := srv.Do("GET", "/"+db+"/doc1", nil); st != 200 {
			t.Errorf("couchrep.md's replication into %s: GET doc1 = %d %s", db, st, body)
		}
	}
}

// pluginBinaries are the plugins the pages' minicouch commands load, by
// the path they give, built for the test into dir.
var pluginBinaries = map[string]func(t *testing.T, dir string) string{
	"bin/replicator": func(t *testing.T, _ string) string { return minicouchtest.Replicator(t, "") },
	"bin/greeter":    func(t *testing.T, _ string) string { return filepath.Join(greeterBinaries(t), "greeter") },
}

// TestDocMinicouchCommands starts minicouch as each of the pages' commands
// does, with a free port and a fresh data directory in place of theirs: it
// must start, answer, and run every plugin it names.
func TestDocMinicouchCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("runs minicouch")
	}
	t.Parallel()
	for _, c := range allCommands(t) {
		if k := kindOf(c); c.inline || k == nil || k.kind != "minicouch" {
			continue
		}
		t.Run(c.page+":"+strconv.Itoa(c.line), func(t *testing.T) {
			t.Parallel()
			o, plugins := minicouchOptions(t, c)
			srv := minicouchtest.Start(t, o)
			var welcome struct{ CouchDB string }
			if st := srv.JSON(t, "GET", "/", nil, &welcome); st != 200 || welcome.CouchDB != "Welcome" {
				t.Errorf("%s: GET / = %d %+v", c, st, welcome)
			}
			var loaded []struct{ Name, State string }
			srv.JSON(t, "GET", "/_node/_local/_plugins", nil, &loaded)
			if len(loaded) != plugins {
				t.Errorf("%s: runs plugins %+v, want %d", c, loaded, plugins)
			}
			for _, p := range loaded {
				if p.State != "running" {
					t.Errorf("%s: plugin %s is %s", c, p.Name, p.State)
				}
			}
			if o.Fauxton != "" {
				if st, _, _ := srv.Do("GET", "/_utils/", nil); st != 200 {
					t.Errorf("%s: GET /_utils/ = %d", c, st)
				}
			}
		})
	}
}

// minicouchOptions are the options of a page's minicouch command: its
// admin, its plugins (see pluginBinaries) and a stand-in Fauxton; its
// address and data directory are left to minicouchtest. It also returns
// how many plugins the command loads.
func minicouchOptions(t *testing.T, c docCommand) (minicouchtest.Options, int) {
	t.Helper()
	_, w := c.words()
	dir := t.TempDir()
	var o minicouchtest.Options
	for i := 1; i < len(w); i++ {
		flag, val := strings.TrimLeft(w[i], "-"), ""
		if f, v, ok := strings.Cut(flag, "="); ok {
			flag, val = f, v
		} else if i+1 < len(w) && !strings.HasPrefix(w[i+1], "-") {
			i++
			val = w[i]
		}
		switch flag {
		case "addr", "data":
		case "admin":
			o.Admin = val
		case "plugin":
			build, ok := pluginBinaries[val]
			if !ok {
				t.Fatalf("%s: the test has no build of plugin %s (see pluginBinaries)", c, val)
			}
			o.Plugins = append(o.Plugins, build(t, dir))
		case "fauxton":
			o.Fauxton = filepath.Join(dir, "fauxton")
			if err := os.MkdirAll(o.Fauxton, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(o.Fauxton, "index.html"), []byte("<html></html>"), 0o600); err != nil {
				t.Fatal(err)
			}
		default:
			o.Args = append(o.Args, "--"+flag, val)
		}
	}
	return o, len(o.Plugins)
}
