package e2e

// End-to-end tests through minicouch's HTTP API only: minicouch and this
// plugin are built once (minicouchtest) and run as processes. Skipped with
// -short.

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/minicouchtest"
	"github.com/couchepi/couchepi/plugin/kv/etcd/etcdtest"
)

func TestMain(m *testing.M) {
	etcdtest.ServeMember() // a member of a process cluster (TestFaults) runs here
	os.Exit(minicouchtest.Main(m))
}

// skipShort skips end-to-end tests (not benchmarks) with -short.
func skipShort(t testing.TB) {
	t.Helper()
	if _, isTest := t.(*testing.T); isTest && testing.Short() {
		t.Skip("end-to-end test (skipped with -short)")
	}
}

// couch is a running minicouch with the replicator.
type couch struct {
	t    testing.TB
	s    *minicouchtest.Server
	addr string
}

// e2eConfig makes the scheduler fast enough for tests. Idle jobs are not
// parked (the tests of rotation, fair share and failover count running
// jobs); park_test.go turns parking on.
const e2eConfig = `[replicator]
idle_park_sec = 0
interval_sec = 1
min_run_time_sec = 2
min_backoff_penalty_sec = 2
max_backoff_penalty_sec = 8
startup_jitter = 100
stats_update_interval_sec = 1
checkpoint_interval = 500
`

// startCouch runs minicouch with the replicator (v1) and waits until the
// plugin answers; it is stopped when t ends.
func startCouch(t testing.TB, extraConfig string) *couch {
	skipShort(t)
	data := t.TempDir()
	cfg := e2eConfig + "jobs_store = " + filepath.Join(data, "replicator.db") + "\n" + extraConfig
	s := minicouchtest.Start(t, minicouchtest.Options{
		Data: data, Config: cfg, Plugins: []string{minicouchtest.Replicator(t, "v1")},
	})
	c := &couch{t: t, s: s, addr: s.Addr}
	c.waitUp()
	return c
}

// waitUp waits until the replicator serves its routes.
func (c *couch) waitUp() {
	c.t.Helper()
	c.eventually("minicouch up with the replicator", 20*time.Second, func() bool {
		code, _ := c.req("GET", "/_scheduler/jobs", "")
		return code == 200
	})
}

// start restarts a stopped or killed minicouch on the same address and data.
func (c *couch) start() {
	c.t.Helper()
	c.s.Restart(c.t)
	c.waitUp()
}

// stop stops minicouch with SIGTERM.
func (c *couch) stop() { c.s.Stop() }

func (c *couch) url() string { return "http://admin:pass@" + c.addr + "/" }

// req sends a request as admin and returns the status and body.
func (c *couch) req(method, path, body string) (int, string) {
	return c.reqAs("admin:pass", method, path, body)
}

func (c *couch) reqAs(auth, method, path, body string) (int, string) {
	c.t.Helper()
	u, p, _ := strings.Cut(auth, ":")
	code, b, err := c.s.DoAs(u, p, method, path, body)
	if err != nil {
		return 0, err.Error()
	}
	return code, string(b)
}

func (c *couch) must(method, path, body string, want ...int) string {
	c.t.Helper()
	code, resp := c.req(method, path, body)
	for _, w := range want {
		if code == w {
			return resp
		}
	}
	c.t.Fatalf("%s %s: %d %s (want %v)", method, path, code, resp, want)
	return ""
}

func (c *couch) eventually(what string, d time.Duration, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// schedDoc returns the `_scheduler/docs` entry of a doc.
func (c *couch) schedDoc(db, id string) map[string]any {
	code, body := c.req("GET", "/_scheduler/docs/"+db+"/"+id, "")
	if code != 200 {
		return nil
	}
	var m map[string]any
	json.Unmarshal([]byte(body), &m)
	return m
}

func (c *couch) waitState(db, id, state string, d time.Duration) map[string]any {
	c.t.Helper()
	var m map[string]any
	c.eventually(fmt.Sprintf("%s/%s %s", db, id, state), d, func() bool {
		m = c.schedDoc(db, id)
		return m != nil && m["state"] == state
	})
	return m
}

func (c *couch) endpoint(db string) string { return c.url() + url.PathEscape(db) }

func (c *couch) repDoc(src, tgt string, extra string) string {
	return fmt.Sprintf(`{"source":%q,"target":%q%s}`, c.endpoint(src), c.endpoint(tgt), extra)
}

func (c *couch) putDocs(db string, from, n int) {
	c.t.Helper()
	var docs []string
	for i := from; i < from+n; i++ {
		docs = append(docs, fmt.Sprintf(`{"_id":"d%05d","n":%d}`, i, i))
	}
	c.must("POST", "/"+url.PathEscape(db)+"/_bulk_docs", `{"docs":[`+strings.Join(docs, ",")+`]}`, 201)
}

func (c *couch) docCount(db string) int {
	return docCountOf(c.req("GET", "/"+url.PathEscape(db), ""))
}

// docCountOf reads doc_count from a GET /db answer; -1 when it failed.
func docCountOf(code int, body string) int {
	if code != 200 {
		return -1
	}
	var info struct {
		DocCount int `json:"doc_count"`
	}
	json.Unmarshal([]byte(body), &info)
	return info.DocCount
}

func TestE2EReplicatorDocs(t *testing.T) {
	t.Parallel()
	c := startCouch(t, "")
	c.must("PUT", "/src", "", 201)
	c.putDocs("src", 0, 20)

	t.Run("one-shot completes", func(t *testing.T) {
		c.t = t
		c.must("PUT", "/_replicator/oneshot", c.repDoc("src", "tgt1", `,"create_target":true`), 201)
		m := c.waitState("_replicator", "oneshot", "completed", 20*time.Second)
		if m["id"] != nil || m["info"].(map[string]any)["docs_written"].(float64) != 20 {
			t.Fatalf("completed doc: %v", m)
		}
		if n := c.docCount("tgt1"); n != 20 {
			t.Fatalf("target has %d docs", n)
		}
		if strings.Contains(c.must("GET", "/_scheduler/docs", "", 200), "pass") {
			t.Fatal("credentials in _scheduler/docs")
		}
	})
	t.Run("completed state written into the doc", func(t *testing.T) {
		c.t = t
		c.eventually("_replication_state completed", 10*time.Second, func() bool {
			return strings.Contains(c.must("GET", "/_replicator/oneshot", "", 200), `"_replication_state":"completed"`)
		})
	})
	t.Run("continuous runs, duplicate fails, delete cancels", func(t *testing.T) {
		c.t = t
		c.must("PUT", "/_replicator/cont", c.repDoc("src", "tgt2", `,"continuous":true,"create_target":true`), 201)
		m := c.waitState("_replicator", "cont", "running", 20*time.Second)
		repID, _ := m["id"].(string)
		if !strings.HasSuffix(repID, "+continuous+create_target") {
			t.Fatalf("running doc: %v", m)
		}
		c.putDocs("src", 20, 5)
		c.eventually("new docs replicated", 20*time.Second, func() bool { return c.docCount("tgt2") == 25 })
		c.must("PUT", "/_replicator/dup", c.repDoc("src", "tgt2", `,"continuous":true,"create_target":true`), 201)
		d := c.waitState("_replicator", "dup", "failed", 20*time.Second)
		want := "Replication `" + repID + "` specified by document `dup` already started, triggered by document `cont` from db `_replicator`"
		if d["info"].(map[string]any)["error"] != want {
			t.Fatalf("duplicate: %v", d)
		}
		rev := c.revOf("/_replicator/cont")
		c.must("DELETE", "/_replicator/cont?rev="+rev, "", 200)
		c.eventually("job gone", 10*time.Second, func() bool {
			code, body := c.req("GET", "/_scheduler/jobs/"+url.PathEscape(repID), "")
			if code != 404 {
				t.Logf("%d %s", code, body)
			}
			return code == 404
		})
	})
	t.Run("missing source crashes with growing error count", func(t *testing.T) {
		c.t = t
		c.must("PUT", "/_replicator/crash", c.repDoc("nosuchdb", "tgt3", ""), 201)
		m := c.waitState("_replicator", "crash", "crashing", 20*time.Second)
		if !strings.HasPrefix(m["info"].(map[string]any)["error"].(string), "db_not_found: could not open http://") {
			t.Fatalf("crashing doc: %v", m)
		}
		c.eventually("second crash", 20*time.Second, func() bool {
			m := c.schedDoc("_replicator", "crash")
			return m != nil && m["error_count"].(float64) >= 2
		})
	})
	t.Run("invalid doc rejected at write time", func(t *testing.T) {
		c.t = t
		code, body := c.req("PUT", "/_replicator/bad", c.repDoc("src", "tgt4", `,"worker_processes":"a few"`))
		if code != 403 || !strings.Contains(body, `"error":"forbidden"`) {
			t.Fatalf("bad doc: %d %s", code, body)
		}
	})
	t.Run("another/_replicator", func(t *testing.T) {
		c.t = t
		c.must("PUT", "/another%2F_replicator", "", 201)
		c.must("PUT", "/another%2F_replicator/r", c.repDoc("src", "tgt5", `,"continuous":true,"create_target":true`), 201)
		c.waitState("another%2F_replicator", "r", "running", 20*time.Second)
		c.must("DELETE", "/another%2F_replicator", "", 200)
		c.eventually("jobs of deleted db gone", 10*time.Second, func() bool {
			return !strings.Contains(c.must("GET", "/_scheduler/jobs", "", 200), `"another/_replicator"`)
		})
	})
	t.Run("filter code change restarts with a new id", func(t *testing.T) {
		c.t = t
		c.must("PUT", "/fsrc", "", 201)
		c.must("PUT", "/fsrc/_design/f", `{"filters":{"by":"function(doc){ return doc.n % 2 == 0; }"}}`, 201)
		c.putDocs("fsrc", 0, 10)
		c.must("PUT", "/_replicator/filtered", c.repDoc("fsrc", "ftgt", `,"continuous":true,"create_target":true,"filter":"f/by"`), 201)
		m := c.waitState("_replicator", "filtered", "running", 20*time.Second)
		c.eventually("even docs replicated", 20*time.Second, func() bool { return c.docCount("ftgt") == 5 })
		oldID := m["id"]
		rev := c.revOf("/fsrc/_design/f")
		c.must("PUT", "/fsrc/_design/f", `{"_rev":"`+rev+`","filters":{"by":"function(doc){ return true; }"}}`, 201)
		c.putDocs("fsrc", 10, 1)
		c.eventually("new replication id", 30*time.Second, func() bool {
			m := c.schedDoc("_replicator", "filtered")
			return m != nil && m["state"] == "running" && m["id"] != nil && m["id"] != oldID
		})
		c.eventually("all docs replicated with the new filter", 20*time.Second, func() bool { return c.docCount("ftgt") >= 11 })
	})
	t.Run("non-admin", func(t *testing.T) {
		c.t = t
		code, body := c.reqAs("", "GET", "/_scheduler/jobs", "")
		if code != 401 {
			t.Fatalf("anonymous _scheduler/jobs: %d %s", code, body)
		}
	})
}

func (c *couch) revOf(path string) string {
	var d struct {
		Rev string `json:"_rev"`
	}
	json.Unmarshal([]byte(c.must("GET", path, "", 200)), &d)
	return d.Rev
}

func TestE2EReplicate(t *testing.T) {
	t.Parallel()
	c := startCouch(t, "")
	c.must("PUT", "/src", "", 201)
	c.putDocs("src", 0, 10)
	body := fmt.Sprintf(`{"source":%q,"target":%q,"create_target":true}`, c.endpoint("src"), c.endpoint("t1"))
	resp := c.must("POST", "/_replicate", body, 200)
	var r struct {
		OK      bool   `json:"ok"`
		Session string `json:"session_id"`
		History []struct {
			DocsWritten int `json:"docs_written"`
		} `json:"history"`
	}
	if json.Unmarshal([]byte(resp), &r); !r.OK || r.Session == "" || len(r.History) == 0 || r.History[0].DocsWritten != 10 {
		t.Fatalf("one-shot: %s", resp)
	}
	cont := `{"source":"src","target":"t2","create_target":true,"continuous":true}`
	resp = c.must("POST", "/_replicate", cont, 202)
	var lr struct {
		LocalID string `json:"_local_id"`
	}
	json.Unmarshal([]byte(resp), &lr)
	if !strings.HasSuffix(lr.LocalID, "+continuous+create_target") {
		t.Fatalf("continuous: %s", resp)
	}
	c.eventually("continuous replicated", 20*time.Second, func() bool { return c.docCount("t2") == 10 })
	resp = c.must("POST", "/_replicate", `{"replication_id":"`+lr.LocalID+`","cancel":true}`, 200)
	if resp != `{"ok":true,"_local_id":"`+lr.LocalID+`"}` {
		t.Fatalf("cancel: %s", resp)
	}
	code, resp := c.req("POST", "/_replicate", `{"replication_id":"nonexistent","cancel":true}`)
	if code != 404 || resp != `{"error":"not_found","reason":"missing"}` {
		t.Fatalf("cancel unknown: %d %s", code, resp)
	}
	code, resp = c.req("POST", "/_replicate", `{"source":"nosuchdb","target":"t9"}`)
	if code != 500 || !strings.HasPrefix(resp, `{"error":"db_not_found","reason":"could not open http://`) {
		t.Fatalf("one-shot from a missing db: %d %s", code, resp)
	}
	code, resp = c.req("POST", "/_replicate", `{}`)
	if code != 400 || resp != "{\"error\":\"bad_request\",\"reason\":\"Missing `source` field\"}" {
		t.Fatalf("empty body: %d %s", code, resp)
	}
}

func TestE2ERestart(t *testing.T) {
	t.Parallel()
	c := startCouch(t, "")
	c.must("PUT", "/src", "", 201)
	c.putDocs("src", 0, 10)
	c.must("PUT", "/_replicator/done", c.repDoc("src", "t1", `,"create_target":true`), 201)
	c.waitState("_replicator", "done", "completed", 20*time.Second)
	c.must("PUT", "/_replicator/cont", c.repDoc("src", "t2", `,"continuous":true,"create_target":true`), 201)
	c.waitState("_replicator", "cont", "running", 20*time.Second)
	c.eventually("continuous caught up", 20*time.Second, func() bool { return c.docCount("t2") == 10 })
	c.must("POST", "/_replicate", `{"source":"src","target":"tr","create_target":true,"continuous":true}`, 202)
	c.eventually("transient caught up", 20*time.Second, func() bool { return c.docCount("tr") == 10 })
	c.stop()
	c.start()
	c.eventually("transient job running again", 20*time.Second, func() bool {
		return strings.Contains(c.must("GET", "/_scheduler/jobs?states=running", "", 200), `"database":null`)
	})
	if m := c.schedDoc("_replicator", "done"); m == nil || m["state"] != "completed" {
		t.Fatalf("completed doc after restart: %v", m)
	}
	c.waitState("_replicator", "cont", "running", 20*time.Second)
	c.putDocs("src", 10, 5)
	c.eventually("continuous resumed", 20*time.Second, func() bool { return c.docCount("t2") == 15 })
	c.eventually("transient resumed", 20*time.Second, func() bool { return c.docCount("tr") == 15 })
	// Written while the plugin ran; after a restart the doc is not re-processed into a new job.
	if strings.Count(c.must("GET", "/_scheduler/jobs", "", 200), `"doc_id":"cont"`) != 1 {
		t.Fatal("duplicate jobs after restart")
	}

	// kill -9 of minicouch, a doc written just before, then a restart.
	c.must("PUT", "/_replicator/late", c.repDoc("src", "t3", `,"create_target":true`), 201)
	c.s.Kill()
	c.start()
	if m := c.schedDoc("_replicator", "done"); m == nil || m["state"] != "completed" {
		t.Fatalf("completed doc after kill -9: %v", m)
	}
	c.waitState("_replicator", "late", "completed", 30*time.Second)
	c.waitState("_replicator", "cont", "running", 30*time.Second)
	c.putDocs("src", 15, 5)
	c.eventually("continuous resumed after kill -9", 30*time.Second, func() bool { return c.docCount("t2") == 20 })
}
