package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/minicouchtest"
	"github.com/couchepi/couchepi/plugin/internal/jobstore"
	"github.com/couchepi/couchepi/plugin/kv/etcd/etcdtest"
)

// One tenant must not hurt the others (issue 30): a replication too large
// to be a job is refused at write time, one that gets past it fails alone,
// and docs written after it, in any replicator db, start at once.

// idsMember is a `doc_ids` member of n ids of 10 characters (about 13
// bytes of job record each).
func idsMember(n int) string {
	var b strings.Builder
	b.WriteString(`,"doc_ids":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"id%08d"`, i)
	}
	return b.String() + "]"
}

// errorBody decodes a CouchDB error answer.
func errorBody(t testing.TB, body string) (name, reason string) {
	t.Helper()
	var e map[string]string
	if err := json.Unmarshal([]byte(body), &e); err != nil || len(e) != 2 {
		t.Fatalf("not a CouchDB error: %s", body)
	}
	return e["error"], e["reason"]
}

// startsWithin writes a continuous replication doc and returns how long it
// took to be running; it fails t after limit.
func (c *couch) startsWithin(db, id, tgt string, limit time.Duration) time.Duration {
	c.t.Helper()
	start := time.Now()
	c.must("PUT", "/"+db+"/"+id, c.repDoc("src", tgt, `,"continuous":true,"create_target":true`), 201)
	c.waitState(db, id, "running", limit)
	return time.Since(start)
}

// TestE2EOversizedReplications: on one node with bolt, a `_replicator` doc
// or `_replicate` body too large for the job queue is refused with the
// limit in the reason (nothing stored), bodies the plugin cannot read say
// why, and docs written afterwards in other replicator dbs start at once.
func TestE2EOversizedReplications(t *testing.T) {
	t.Parallel()
	c := startCouch(t, "")
	c.must("PUT", "/src", "", 201)
	c.must("PUT", "/b%2F_replicator", "", 201)
	limit := fmt.Sprintf("over the limit of %d bytes", jobstore.MaxNewSize)

	big := c.repDoc("src", "tbig", idsMember(100_000))
	code, body := c.req("PUT", "/b%2F_replicator/big", big)
	if name, reason := errorBody(t, body); code != 403 || name != "forbidden" || !strings.HasPrefix(reason, "Replication too large for the job queue: its job would be ") || !strings.Contains(reason, limit) {
		t.Fatalf("oversized doc: %d %s", code, body)
	}
	if code, _ := c.req("GET", "/b%2F_replicator/big", ""); code != 404 {
		t.Fatalf("the refused doc was stored (GET %d)", code)
	}
	code, body = c.req("POST", "/_replicate", big)
	if name, reason := errorBody(t, body); code != 400 || name != "bad_request" || !strings.Contains(reason, limit) {
		t.Errorf("oversized _replicate: %d %s", code, body)
	}
	huge := c.repDoc("src", "thuge", `,"filter":"d/f","query_params":{"q":"`+strings.Repeat("x", 7<<20)+`"}`)
	code, body = c.req("POST", "/_replicate", huge)
	if name, _ := errorBody(t, body); code != 413 || name != "too_large" {
		t.Errorf("7 MB _replicate body: %d %s", code, body)
	}
	deep := `{"source":"a","target":"b","selector":` + strings.Repeat(`{"a":`, 10001) + "1" + strings.Repeat("}", 10001) + `}`
	code, body = c.req("POST", "/_replicate", deep)
	if name, reason := errorBody(t, body); code != 400 || name != "bad_request" || !strings.Contains(reason, "nested too deeply: more than 10000 levels") {
		t.Errorf("deeply nested _replicate body: %d %s", code, body)
	}
	code, body = c.req("PUT", "/_replicator/deep", deep)
	if name, reason := errorBody(t, body); code != 400 || name != "bad_request" || !strings.Contains(reason, "nested too deeply: more than 10000 levels") {
		t.Errorf("deeply nested doc: %d %s", code, body)
	}
	took := c.startsWithin("_replicator", "after", "tafter", 30*time.Second)
	t.Logf("a doc written after the refused ones ran after %s", took.Round(time.Millisecond))
}

// TestE2EOversizedDocFailsAlone: a doc too large to be a job that reached
// a replicator db while the replicator was not loaded (as a restore does)
// becomes a failed job with the reason once it is, the docs around it run,
// and docs written later, in its db and in the others, start at once.
func TestE2EOversizedDocFailsAlone(t *testing.T) {
	t.Parallel()
	skipShort(t)
	data := t.TempDir()
	plain := minicouchtest.Start(t, minicouchtest.Options{Data: data})
	write := func(method, path, body string, want int) {
		t.Helper()
		if code, resp, err := plain.Do(method, path, body); err != nil || code != want {
			t.Fatalf("%s %s: %d %s %v", method, path, code, resp, err)
		}
	}
	write("PUT", "/src", "", 201)
	write("PUT", "/b%2F_replicator", "", 201)
	if code, resp, _ := plain.Do("PUT", "/_replicator", ""); code != 201 && code != 412 {
		t.Fatalf("PUT /_replicator: %d %s", code, resp)
	}
	src := plain.AdminURL + "src"
	repDoc := func(tgt, extra string) string {
		return fmt.Sprintf(`{"source":%q,"target":%q,"continuous":true,"create_target":true%s}`, src, plain.AdminURL+tgt, extra)
	}
	write("PUT", "/b%2F_replicator/before", repDoc("tbefore", ""), 201)
	write("PUT", "/b%2F_replicator/big", repDoc("tbig", idsMember(100_000)), 201)
	write("PUT", "/b%2F_replicator/after", repDoc("tafter", ""), 201)
	write("PUT", "/_replicator/other", repDoc("tother", ""), 201)
	plain.Stop()

	s := minicouchtest.Start(t, minicouchtest.Options{
		Data: data, Addr: plain.Addr, Plugins: []string{minicouchtest.Replicator(t, "v1")},
		Config: e2eConfig + "jobs_store = " + filepath.Join(data, "replicator.db") + "\n",
	})
	c := &couch{t: t, s: s, addr: s.Addr}
	c.waitUp()
	m := c.waitState("b%2F_replicator", "big", "failed", 30*time.Second)
	if reason, _ := m["info"].(map[string]any)["error"].(string); !strings.HasPrefix(reason, "Replication too large for the job queue") {
		t.Fatalf("oversized doc: %v", m)
	}
	for _, d := range []struct{ db, id string }{{"b%2F_replicator", "before"}, {"b%2F_replicator", "after"}, {"_replicator", "other"}} {
		c.waitState(d.db, d.id, "running", 30*time.Second)
	}
	c.eventually("the failed state written into the doc", 30*time.Second, func() bool {
		return strings.Contains(c.must("GET", "/b%2F_replicator/big", "", 200), `"_replication_state":"failed"`)
	})
	for db, tgt := range map[string]string{"b%2F_replicator": "tlater-b", "_replicator": "tlater"} {
		took := c.startsWithin(db, "later", tgt, 30*time.Second)
		t.Logf("a doc written later in %s ran after %s", db, took.Round(time.Millisecond))
	}
}

// TestE2ELargeDocsOnEtcd: on a job queue in etcd (1.5 MiB per request),
// several large docs written at once, each of which fits the queue, all
// become jobs, an oversized one is refused, and a doc written next starts
// at once.
func TestE2ELargeDocsOnEtcd(t *testing.T) {
	skipShort(t)
	etcdc := etcdtest.StartCluster(t, 1)
	prefix := fmt.Sprintf("e2e-%d/", time.Now().UnixNano())
	c := startClusterNode(t, etcdc.Endpoints(), prefix, true, true, "")
	c.must("PUT", "/src", "", 201)
	var docs []string
	for i := 0; i < 3; i++ {
		docs = append(docs, fmt.Sprintf(`{"_id":"large%d","source":%q,"target":%q%s}`, i, c.endpoint("src"), c.endpoint(fmt.Sprintf("tlarge%d", i)), idsMember(50_000)))
	}
	c.must("POST", "/_replicator/_bulk_docs", `{"docs":[`+strings.Join(docs, ",")+`]}`, 201)
	code, body := c.req("PUT", "/_replicator/big", c.repDoc("src", "tbig", idsMember(100_000)))
	if name, _ := errorBody(t, body); code != 403 || name != "forbidden" {
		t.Fatalf("oversized doc: %d %s", code, body)
	}
	took := c.startsWithin("_replicator", "after", "tafter", 30*time.Second)
	t.Logf("a doc written after the large ones ran after %s", took.Round(time.Millisecond))
	for i := 0; i < 3; i++ {
		m := c.schedDoc("_replicator", fmt.Sprintf("large%d", i))
		if m == nil || m["state"] == "failed" {
			t.Errorf("large%d: %v, want a job", i, m)
		}
	}
}
