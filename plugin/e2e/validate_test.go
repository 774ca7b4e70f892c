package e2e

import (
	"encoding/json"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"
)

// forbidden decodes a 403 body and returns its reason; it fails t unless
// the body is exactly {"error":"forbidden","reason":…}.
func forbidden(t testing.TB, body string) string {
	t.Helper()
	var e map[string]string
	if err := json.Unmarshal([]byte(body), &e); err != nil || len(e) != 2 || e["error"] != "forbidden" {
		t.Fatalf("not a forbidden error: %s", body)
	}
	return e["reason"]
}

// TestE2EDocValidation: writes to `_replicator` through minicouch are
// validated by the replicator's parser (403 forbidden with its reason);
// with the plugin killed they are refused with 503 until the host restarts
// it, while writes to an ordinary db never are.
func TestE2EDocValidation(t *testing.T) {
	t.Parallel()
	c := startCouch(t, "max_jobs = 0\nmax_churn = 0\n")
	c.must("PUT", "/src", "", 201)
	c.must("PUT", "/plain", "", 201)
	c.must("PUT", "/_users/org.couchdb.user:bob", `{"name":"bob","type":"user","roles":[],"password":"bobpw"}`, 201)
	c.must("PUT", "/_replicator/_security", `{"members":{"names":["bob"]},"admins":{}}`, 200)
	src, tgt := c.endpoint("src"), c.endpoint("tgt")
	doc := func(fields string) string {
		return fmt.Sprintf(`{"source":%q,"target":%q%s}`, src, tgt, fields)
	}
	tests := []struct {
		name, auth, body, reason string
	}{
		{"missing source", "admin:pass", fmt.Sprintf(`{"target":%q}`, tgt), "Missing `source` field"},
		{"missing target", "admin:pass", fmt.Sprintf(`{"source":%q}`, src), "Missing `target` field"},
		{"continuous not a boolean", "admin:pass", doc(`,"continuous":"yes"`), "`continuous` must be a boolean"},
		{"worker_processes not an integer", "admin:pass", doc(`,"worker_processes":"a few"`), "`worker_processes` must be an integer"},
		{"worker_processes zero", "admin:pass", doc(`,"worker_processes":0`), "`worker_processes` must be a positive integer"},
		{"doc_ids with filter", "admin:pass", doc(`,"doc_ids":["a"],"filter":"d/f"`), "`doc_ids`,`filter`,`selector` are mutually  exclusive"},
		{"bad filter", "admin:pass", doc(`,"filter":"nodesign"`), "Invalid filter. Must match `ddocname/filtername`."},
		{"query_params not an object", "admin:pass", doc(`,"query_params":1`), "`query_params` is not `null` or object"},
		{"bare db name source", "admin:pass", fmt.Sprintf(`{"source":"src","target":%q}`, tgt), "Local endpoints are not supported: `source` must be an http:// or https:// URL"},
		{"non-http url", "admin:pass", fmt.Sprintf(`{"source":"ftp://%s/src","target":%q}`, c.addr, tgt), "`source` must be an http:// or https:// URL, not ftp://"},
		{"another user's owner", "bob:bobpw", doc(`,"owner":"alice"`), "Can't update replication documents from other users."},
		{"selector regex that does not compile", "admin:pass", doc(`,"selector":{"a":{"$regex":"(("}}`), "`selector` is invalid: `$regex` \"((\" is not a valid regular expression: missing closing )"},
	}
	for i, tc := range tests {
		code, body := c.reqAs(tc.auth, "PUT", fmt.Sprintf("/_replicator/bad%d", i), tc.body)
		if code != 403 {
			t.Errorf("%s: %d %s, want 403", tc.name, code, body)
			continue
		}
		if got := forbidden(t, body); got != tc.reason {
			t.Errorf("%s: reason %q, want %q", tc.name, got, tc.reason)
		}
	}
	c.must("PUT", "/_replicator/good", doc(`,"create_target":true`), 201)
	c.must("PUT", "/_replicator/bobs", doc(`,"owner":"bob"`), 201)

	// Plugin down: kill -9 it; _replicator writes answer 503 until the host
	// has restarted it, then 201; writes to an ordinary db keep succeeding.
	pid, err := c.s.PluginPID("replicator")
	if err != nil || pid == 0 {
		t.Fatalf("replicator pid: %d %v", pid, err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var plainWrites int
	var plainErr string
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if code, body := c.req("PUT", fmt.Sprintf("/plain/p%05d", i), `{"v":1}`); code != 201 {
				plainErr = fmt.Sprintf("write %d to an ordinary db: %d %s", i, code, body)
				return
			}
			plainWrites++
			time.Sleep(10 * time.Millisecond)
		}
	}()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	refused := 0
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; ; i++ {
		code, body := c.req("PUT", fmt.Sprintf("/_replicator/down%03d", i), doc(""))
		if code == 201 {
			break
		}
		if code != 503 {
			t.Fatalf("_replicator write with the plugin down: %d %s, want 503 or 201", code, body)
		}
		var e map[string]string
		if json.Unmarshal([]byte(body), &e); e["error"] != "service_unavailable" || e["reason"] == "" {
			t.Fatalf("503 body: %s", body)
		}
		refused++
		if time.Now().After(deadline) {
			t.Fatalf("the replicator was not restarted within 60s (%d writes refused)", refused)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if refused == 0 {
		t.Error("no _replicator write was refused right after the plugin was killed")
	}
	if plainErr != "" {
		t.Error(plainErr)
	}
	if plainWrites == 0 {
		t.Error("no ordinary write completed while the plugin was down")
	}
	c.eventually("the restarted plugin listed as running", 30*time.Second, func() bool {
		newPID, _ := c.s.PluginPID("replicator")
		return newPID != 0 && newPID != pid
	})
	// Validation is back: an invalid doc is refused by the new process.
	code, body := c.req("PUT", "/_replicator/badagain", doc(`,"continuous":"yes"`))
	if code != 403 || forbidden(t, body) != "`continuous` must be a boolean" {
		t.Fatalf("invalid doc after the restart: %d %s", code, body)
	}
	t.Logf("%d _replicator writes refused with 503 while the plugin was down; %d ordinary writes meanwhile", refused, plainWrites)
}
