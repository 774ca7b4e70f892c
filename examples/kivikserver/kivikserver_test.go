package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/minicouchtest"
	"github.com/couchepi/couchepi/internal/readmatrix"
)

func TestMain(m *testing.M) { os.Exit(minicouchtest.Main(m)) }

// build builds pkg (relative to dir) into bin, with ldflags when given,
// and returns its path.
func build(t *testing.T, dir, pkg, bin string, ldflags ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), bin)
	args := []string{"build", "-o", out}
	for _, f := range ldflags {
		args = append(args, "-ldflags", f)
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// kivikProc is a running kivikserver.
type kivikProc struct {
	t    *testing.T
	cmd  *exec.Cmd
	url  string // http://127.0.0.1:port/
	log  *bytes.Buffer
	done chan struct{}
}

func startKivik(t *testing.T, bin string, args ...string) *kivikProc {
	t.Helper()
	addr, err := minicouchtest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"-addr", addr, "-admin", "admin:pass", "-state", t.TempDir()}, args...)...)
	out, _ := cmd.StdoutPipe()
	k := &kivikProc{t: t, cmd: cmd, url: "http://" + addr + "/", log: &bytes.Buffer{}, done: make(chan struct{})}
	cmd.Stderr = k.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "listening on") {
				ready <- sc.Text()
			}
		}
	}()
	go func() { cmd.Wait(); close(k.done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-k.done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-k.done
		}
		if t.Failed() {
			t.Logf("kivikserver log:\n%s", k.log)
		}
	})
	select {
	case <-ready:
	case <-k.done:
		t.Fatalf("kivikserver exited:\n%s", k.log)
	case <-time.After(60 * time.Second):
		t.Fatalf("kivikserver did not start:\n%s", k.log)
	}
	return k
}

// do sends a request as the admin and returns the status and body.
func (k *kivikProc) do(method, path string, body any) (int, []byte) {
	k.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, k.url+strings.TrimPrefix(path, "/"), rd)
	req.SetBasicAuth("admin", "pass")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		k.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// pluginPID returns the pid of the kivikserver's child running a binary
// named like bin (the host runs a private copy of it).
func (k *kivikProc) pluginPID(bin string) int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		st, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue
		}
		f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:]))
		if len(f) < 2 || f[0] == "Z" || f[1] != strconv.Itoa(k.cmd.Process.Pid) {
			continue
		}
		if cmd, _ := os.ReadFile(filepath.Join(d, "cmdline")); strings.Contains(string(cmd), "/"+filepath.Base(bin)) {
			pid, _ := strconv.Atoi(filepath.Base(d))
			return pid
		}
	}
	return 0
}

// TestReplicatorInKivikServer loads the replicator into kivik's x/server:
// an invalid _replicator doc is refused with the parser's reason, a valid
// one replicates a minicouch db into another and shows completed in
// _scheduler/docs, _replicate and _scheduler/jobs answer, a live swap
// works, and while the plugin is down _replicator writes get 503 until it
// is back.
func TestReplicatorInKivikServer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs minicouch, the replicator and kivikserver")
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("finds the plugin process through /proc")
	}
	root, _ := filepath.Abs("../..")
	replicator := build(t, root, "./plugin/cmd/replicator", "replicator")
	couch := minicouchtest.Start(t, minicouchtest.Options{Bin: build(t, root, "./examples/minicouch", "minicouch")})
	k := startKivik(t, build(t, ".", ".", "kivikserver"), "-plugin", replicator)

	// 1. Validation at write time, with the parser's reason.
	st, body := k.do("POST", "/_replicator", map[string]any{"_id": "bad", "source": "http://127.0.0.1:1/a", "target": "http://127.0.0.1:1/b", "worker_processes": 0})
	if st != 403 || !strings.Contains(string(body), "`worker_processes` must be a positive integer") {
		t.Fatalf("invalid doc: %d %s", st, body)
	}
	if st, _ := k.do("GET", "/_replicator/bad", nil); st != 404 {
		t.Fatalf("the refused doc was stored: %d", st)
	}

	// 2. A valid doc replicates between two minicouch dbs.
	couch.JSON(t, "PUT", "/src", nil, nil)
	for i := 0; i < 20; i++ {
		couch.JSON(t, "PUT", fmt.Sprintf("/src/d%02d", i), map[string]int{"n": i}, nil)
	}
	src, tgt := couch.AdminURL+"src", couch.AdminURL+"tgt"
	if st, body := k.do("POST", "/_replicator", map[string]any{"_id": "r1", "source": src, "target": tgt, "create_target": true}); st != 201 {
		t.Fatalf("valid doc: %d %s", st, body)
	}
	var doc struct {
		State string `json:"state"`
		Info  struct {
			DocsWritten int `json:"docs_written"`
		} `json:"info"`
	}
	deadline := time.Now().Add(60 * time.Second)
	for doc.State != "completed" {
		if time.Now().After(deadline) {
			t.Fatalf("replication not completed: %+v", doc)
		}
		time.Sleep(100 * time.Millisecond)
		_, body := k.do("GET", "/_scheduler/docs/_replicator/r1", nil)
		json.Unmarshal(body, &doc)
	}
	var info struct {
		DocCount int `json:"doc_count"`
	}
	couch.JSON(t, "GET", "/tgt", nil, &info)
	if info.DocCount != 20 || doc.Info.DocsWritten != 20 {
		t.Fatalf("target has %d docs, the job wrote %d; want 20", info.DocCount, doc.Info.DocsWritten)
	}
	if _, body := k.do("GET", "/_active_tasks", nil); !bytes.HasPrefix(bytes.TrimSpace(body), []byte("[")) {
		t.Errorf("_active_tasks: %s", body)
	}

	// 3. _replicate and _scheduler/jobs are the plugin's, as on minicouch.
	if st, body := k.do("POST", "/_replicate", map[string]any{"source": src, "target": couch.AdminURL + "tgt2", "create_target": true}); st != 200 ||
		!strings.Contains(string(body), `"ok":true`) || !strings.Contains(string(body), `"docs_written":20`) {
		t.Fatalf("POST /_replicate: %d %s", st, body)
	}
	if st, body := k.do("GET", "/_scheduler/jobs", nil); st != 200 || !strings.Contains(string(body), `"jobs":[`) {
		t.Fatalf("GET /_scheduler/jobs: %d %s", st, body)
	}

	// 4. A live swap to another build of the plugin.
	v2 := build(t, root, "./plugin/cmd/replicator", "replicator-v2", "-X main.version=v2")
	st, body = k.do("POST", "/_node/_local/_plugins/replicator/_reload", map[string]string{"path": v2})
	if st != 200 || !strings.Contains(string(body), `"version":"v2"`) {
		t.Fatalf("reload: %d %s", st, body)
	}
	if st, body := k.do("POST", "/_replicator", map[string]any{"_id": "bad2", "source": src}); st != 403 || !strings.Contains(string(body), "Missing `target` field") {
		t.Fatalf("invalid doc after the swap: %d %s", st, body)
	}
	replicator = v2

	// 5. kill -9 of the plugin: writes get 503 while it is down (its
	// binary is moved away, so restarts fail), then succeed.
	pid := k.pluginPID(replicator)
	if pid == 0 {
		t.Fatal("no replicator process under the kivikserver")
	}
	if err := os.Rename(replicator, replicator+".away"); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(pid, syscall.SIGKILL)
	refused := 0
	for i := 0; i < 5; i++ {
		st, body := k.do("POST", "/_replicator", map[string]any{"_id": fmt.Sprintf("down%d", i), "source": src, "target": tgt})
		if st != 503 {
			t.Fatalf("write %d while the plugin is down: %d %s, want 503", i, st, body)
		}
		refused++
		time.Sleep(100 * time.Millisecond)
	}
	if err := os.Rename(replicator+".away", replicator); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(60 * time.Second)
	for {
		st, body := k.do("POST", "/_replicator", map[string]any{"_id": "back", "source": src, "target": tgt})
		if st == 201 {
			break
		}
		if st != 503 || time.Now().After(deadline) {
			t.Fatalf("write after the plugin's binary is back: %d %s", st, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%d writes refused with 503 while the plugin was down; accepted once it restarted", refused)
	if st, _ := k.do("GET", "/_replicator/down0", nil); st != 404 {
		t.Errorf("a write refused while the plugin was down was stored: %d", st)
	}
}

// TestReadMatrixInKivikServer (issue 38 items 3 and 4): on kivik's
// x/server with the host, no read path of _replicator shows a non-admin a
// credential or the stored revision of another user's doc (the matrix
// minicouch runs too), and no path form writes a doc past the plugin.
func TestReadMatrixInKivikServer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the replicator and kivikserver")
	}
	root, _ := filepath.Abs("../..")
	replicator := build(t, root, "./plugin/cmd/replicator", "replicator")
	k := startKivik(t, build(t, ".", ".", "kivikserver"), "-plugin", replicator,
		"-user", "alice:alicepw", "-user", "bob:bobpw", "-set", "replicator.max_jobs=0")
	base := strings.TrimSuffix(k.url, "/")
	host := strings.TrimPrefix(base, "http://")
	as := func(user, method, path, body string) (int, string) {
		t.Helper()
		u, p, _ := strings.Cut(user, ":")
		resp, err := readmatrix.Do(base, u, p, readmatrix.Request{Method: method, Path: path, Body: body,
			Header: map[string]string{"Content-Type": "application/json"}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Status, resp.Body
	}
	as("admin:pass", "PUT", "/_replicator/_design/peek", readmatrix.DesignDoc) // x/server has no design docs
	withCreds, creds := readmatrix.CredentialDoc(host)
	docs := []readmatrix.Doc{{ID: "c2"}, {ID: "plain"}}
	for i, body := range []string{withCreds, readmatrix.PlainDoc(host)} {
		body = `{"_id":"` + docs[i].ID + `",` + body[1:]
		if st, resp := as("alice:alicepw", "POST", "/_replicator", body); st != 201 {
			t.Fatalf("alice creates %s: %d %s", docs[i].ID, st, resp)
		}
	}
	for i := range docs {
		st, body := as("admin:pass", "GET", "/_replicator/"+docs[i].ID, "")
		var d struct {
			Rev   string `json:"_rev"`
			Owner string `json:"owner"`
		}
		json.Unmarshal([]byte(body), &d)
		if st != 200 || d.Owner != "alice" || d.Rev == "" {
			t.Fatalf("%s as stored: %d %s", docs[i].ID, st, body)
		}
		docs[i].Rev = d.Rev
	}
	rows := readmatrix.Rows("_replicator", docs)
	answered, refused := readmatrix.Check(t, base, "bob", "bobpw", rows, readmatrix.Secrets(creds, docs))
	t.Logf("read matrix on kivik x/server: %d rows, %d answered, %d refused", len(rows), answered, refused)
	if st, body := as("bob:bobpw", "GET", "/_replicator/c2", ""); st != 200 || !strings.Contains(body, `"_rev":"1-`) {
		t.Errorf("bob reads c2: %d %s", st, body)
	}

	// Item 3: a doc the plugin refuses is not written under any path form.
	for _, p := range []string{"/_replicator/", "//_replicator", "/_replicator/.", "/x/../_replicator", "/_replicator;x", "/_replicator//"} {
		st, body := as("bob:bobpw", "POST", p, `{"_id":"bad","source":"http://127.0.0.1:1/a"}`)
		if st/100 == 2 {
			t.Errorf("POST %s: %d %s", p, st, body)
		}
		if st, body := as("admin:pass", "GET", "/_replicator/bad", ""); st != 404 {
			t.Fatalf("POST %s stored a doc the plugin refuses: %d %s", p, st, body)
		}
	}
}
