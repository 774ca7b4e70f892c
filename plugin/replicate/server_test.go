package replicate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/minicouchtest"
	"github.com/couchepi/couchepi/internal/childproc"
	"github.com/couchepi/couchepi/parse"
)

// testServer is a real CouchDB-compatible server the tests replicate with.
type testServer struct {
	Kind string // "minicouch" or "pouchdb-server"
	Base string // http://127.0.0.1:port/ (no credentials)
	User string
	Pass string
	mc   *minicouchtest.Server // the minicouch process (Kind "minicouch")
	cmd  *exec.Cmd             // the pouchdb-server process (Kind "pouchdb-server")
	dir  string                // pouchdb-server's directory, removed when it stops
}

// pid is the server's process id.
func (s *testServer) pid() int {
	switch {
	case s.mc != nil:
		return s.mc.PID()
	case s.cmd != nil && s.cmd.Process != nil:
		return s.cmd.Process.Pid
	}
	return 0
}

var (
	serverOnce sync.Once
	shared     *testServer
	serverErr  error
	dbCounter  atomic.Int64
)

// TestMain stops the shared far-end servers after the tests (minicouch ones
// through minicouchtest.Main).
func TestMain(m *testing.M) {
	code := minicouchtest.Main(m)
	for _, s := range append(extraServers, shared) {
		if s != nil && s.cmd != nil && s.cmd.Process != nil {
			s.cmd.Process.Kill()
			s.cmd.Wait()
		}
		if s != nil && s.dir != "" {
			os.RemoveAll(s.dir)
		}
	}
	os.Exit(code)
}

// repoRoot finds the module root from this file's location.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startServer returns the shared far end: minicouch when it builds (or when
// COUCHEPI_FAR_END=minicouch), else pouchdb-server from test/interop.
// COUCHEPI_FAR_END=pouchdb forces pouchdb-server.
func startServer(t testing.TB) *testServer {
	t.Helper()
	serverOnce.Do(func() {
		choice := os.Getenv("COUCHEPI_FAR_END")
		if choice != "pouchdb" {
			shared, serverErr = startMinicouch()
			if serverErr == nil || choice == "minicouch" {
				return
			}
			t.Logf("minicouch unavailable (%v); using pouchdb-server", serverErr)
		}
		shared, serverErr = startPouchDBServer(t)
	})
	if serverErr != nil {
		t.Fatalf("no far-end server: %v", serverErr)
	}
	return shared
}

var (
	extraServers []*testServer
	extraMu      sync.Mutex
)

// startExtraServer starts another far end of the same kind as the shared one
// (the benchmark puts source and target on separate servers); it is stopped after the tests.
func startExtraServer(t testing.TB) *testServer {
	t.Helper()
	kind := startServer(t).Kind
	var s *testServer
	var err error
	if kind == "minicouch" {
		s, err = startMinicouch()
	} else {
		s, err = startPouchDBServer(t)
	}
	if err != nil {
		t.Fatalf("second far end: %v", err)
	}
	extraMu.Lock()
	extraServers = append(extraServers, s)
	extraMu.Unlock()
	return s
}

// startMinicouch runs a minicouch shared by the package's tests (stopped
// by TestMain).
func startMinicouch() (*testServer, error) {
	mc, err := minicouchtest.StartProcess(minicouchtest.Options{})
	if err != nil {
		return nil, err
	}
	return &testServer{Kind: "minicouch", Base: mc.URL, User: mc.User, Pass: mc.Pass, mc: mc}, nil
}

func startPouchDBServer(t testing.TB) (*testServer, error) {
	bin := filepath.Join(repoRoot(), "test", "interop", "node_modules", ".bin", "pouchdb-server")
	if _, err := os.Stat(bin); err != nil {
		return nil, err
	}
	port := freePort(t)
	dir, _ := os.MkdirTemp("", "pouchdb-server-test")
	s := &testServer{Kind: "pouchdb-server", Base: fmt.Sprintf("http://127.0.0.1:%d/", port), dir: dir}
	s.cmd = exec.Command(bin, "--in-memory", "-p", fmt.Sprint(port), "-o", "127.0.0.1", "-n")
	s.cmd.Dir = dir
	s.cmd.Stdout, s.cmd.Stderr = io.Discard, io.Discard
	childproc.DieWithParent(s.cmd)
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	if err := s.waitUp(); err != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
		return nil, err
	}
	return s, nil
}

func (s *testServer) waitUp() error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(s.Base)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("server at %s did not come up", s.Base)
}

// newDB creates a fresh database and returns its name.
func (s *testServer) newDB(t testing.TB, prefix string) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano()%1e9, dbCounter.Add(1))
	status, body := s.do(t, "PUT", name, nil)
	if status != 201 && status != 202 {
		t.Fatalf("create db %s: %d %s", name, status, body)
	}
	return name
}

// endpoint returns the parse.Endpoint of db, credentials in Auth.
func (s *testServer) endpoint(db string) parse.Endpoint {
	ep := parse.Endpoint{URL: s.Base + db + "/"}
	if s.User != "" {
		ep.Auth = &parse.BasicAuth{Username: s.User, Password: s.Pass}
	}
	return ep
}

// do sends a JSON request to the server as admin.
func (s *testServer) do(t testing.TB, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, s.Base+path, rd)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if s.User != "" {
		req.SetBasicAuth(s.User, s.Pass)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// mustDo is do that fails the test on a status outside 2xx.
func (s *testServer) mustDo(t testing.TB, method, path string, body any) []byte {
	t.Helper()
	status, out := s.do(t, method, path, body)
	if status/100 != 2 {
		t.Fatalf("%s %s: %d %s", method, path, status, out)
	}
	return out
}

// putDocs writes docs with new_edits=false (revs given) or normally.
func (s *testServer) bulk(t testing.TB, db string, newEdits bool, docs ...map[string]any) {
	t.Helper()
	s.mustDo(t, "POST", db+"/_bulk_docs", map[string]any{"docs": docs, "new_edits": newEdits})
}

// revTree is a db's content: doc id → sorted leaf revs with their bodies.
type revTree map[string]map[string]string

// contents reads every doc's leaf revisions (open_revs=all) as canonical JSON.
func (s *testServer) contents(t testing.TB, db string) revTree {
	t.Helper()
	var all struct {
		Rows []struct {
			ID string `json:"id"`
		} `json:"rows"`
	}
	json.Unmarshal(s.mustDo(t, "GET", db+"/_all_docs", nil), &all)
	out := revTree{}
	ids := []string{}
	for _, r := range all.Rows {
		ids = append(ids, r.ID)
	}
	// Deleted docs: read from the changes feed too.
	var ch struct {
		Results []struct {
			ID      string `json:"id"`
			Deleted bool   `json:"deleted"`
		} `json:"results"`
	}
	json.Unmarshal(s.mustDo(t, "GET", db+"/_changes?style=all_docs", nil), &ch)
	for _, r := range ch.Results {
		if r.Deleted {
			ids = append(ids, r.ID)
		}
	}
	for _, id := range ids {
		p := docPath(id)
		body := s.mustDo(t, "GET", db+"/"+p+"?open_revs=all&revs=true&attachments=true", nil)
		var rows []map[string]json.RawMessage
		if err := json.Unmarshal(body, &rows); err != nil {
			t.Fatalf("open_revs=all %s: %v %s", id, err, body)
		}
		revs := map[string]string{}
		for _, r := range rows {
			ok, has := r["ok"]
			if !has {
				continue
			}
			var doc map[string]any
			json.Unmarshal(ok, &doc)
			if atts, ok := doc["_attachments"].(map[string]any); ok {
				for _, a := range atts {
					if m, ok := a.(map[string]any); ok {
						delete(m, "revpos")
						delete(m, "digest")
						delete(m, "stub")
						delete(m, "length")
						delete(m, "encoding")
						delete(m, "encoded_length")
					}
				}
			}
			canon, _ := json.Marshal(doc)
			revs[doc["_rev"].(string)] = string(canon)
		}
		out[id] = revs
	}
	return out
}

// diffTrees lists what differs between two db contents, ignoring ids in skip.
func diffTrees(a, b revTree, skip map[string]bool) []string {
	var d []string
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		if skip[k] {
			continue
		}
		ar, br := a[k], b[k]
		if len(ar) != len(br) {
			d = append(d, fmt.Sprintf("%s: %d leaf revs vs %d", k, len(ar), len(br)))
			continue
		}
		for rev, body := range ar {
			if br[rev] != body {
				d = append(d, fmt.Sprintf("%s %s: %s vs %s", k, rev, body, br[rev]))
			}
		}
	}
	return d
}

// testRep is a replication from src to tgt with CouchDB's defaults, small and quick for tests.
func testRep(s *testServer, src, tgt string) *parse.Rep {
	return &parse.Rep{
		Source: s.endpoint(src), Target: s.endpoint(tgt),
		UseCheckpoints: true, CheckpointInterval: 500, WorkerProcesses: 4, WorkerBatchSize: 50,
		HTTPConnections: 20, ConnectionTimeout: 30000, RetriesPerRequest: 5, UseBulkGet: true,
	}
}

// runRep runs rep one-shot with a deadline.
func runRep(t testing.TB, rep *parse.Rep, opts Options) *Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if opts.ServerUUID == "" {
		opts.ServerUUID = "0123456789abcdef0123456789abcdef"
	}
	res, err := Run(ctx, rep, opts)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}
