package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
)

// closedPort returns a 127.0.0.1 port nothing listens on (it did a moment
// ago).
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	return port
}

// TestE2EHostPolicy (issue #30 item 14): with `[replicator]
// denied_networks` denying loopback, a user who is not an admin cannot
// make the replicator reach a loopback port: a literal address is refused
// when the replication is posted or its doc written (403, one reason), a
// name leading there when connecting (loop.test, by connect_to: no DNS;
// localhost is loopback when written, issue 38), and a closed port
// and an open non-CouchDB one give the same answer, in `_replicate` and
// in `_scheduler/*`. Local dbs given by name still replicate, and an
// admin is not restricted. Then, with localhost allowed by name, real
// connection failures of both ports still read the same.
func TestE2EHostPolicy(t *testing.T) {
	t.Parallel()
	var webHits atomic.Int32
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		webHits.Add(1)
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte("<html>not here</html>"))
	}))
	defer web.Close()
	_, open, _ := net.SplitHostPort(web.Listener.Addr().String())
	closed := closedPort(t)
	c := startCouch(t, "denied_networks = 127.0.0.0/8, ::1\n"+
		"connect_to = loop.test:"+closed+":127.0.0.1:"+closed+", loop.test:"+open+":127.0.0.1:"+open+"\n")

	c.must("PUT", "/_users/org.couchdb.user:bob", `{"name":"bob","type":"user","roles":[],"password":"bobpw"}`, 201)
	for _, db := range []string{"src", "tgt"} {
		c.must("PUT", "/"+db, "", 201)
		c.must("PUT", "/"+db+"/_security", `{"members":{"names":["bob"]},"admins":{}}`, 200)
	}
	c.must("PUT", "/_replicator/_security", `{"members":{"names":["bob"]},"admins":{}}`, 200)
	c.putDocs("src", 0, 5)
	forbiddenBody := `{"error":"forbidden","reason":"` + parse.ReasonHostNotAllowed + `"}`
	unreachableBody := `{"error":"` + jobdata.UnreachableKind + `","reason":"` + jobdata.UnreachableReason + `"}`
	replicate := func(auth, target string) (int, string) {
		return c.reqAs(auth, "POST", "/_replicate", fmt.Sprintf(`{"source":"src","target":%q,"retries_per_request":0}`, target))
	}
	// sameAnswer posts one target per port as bob and wants want from each.
	sameAnswer := func(what string, wantCode int, want string, targets ...string) {
		t.Helper()
		for _, target := range targets {
			code, body := replicate("bob:bobpw", target)
			if code != wantCode || body != want {
				t.Errorf("%s: bob -> %s: %d %s; want %d %s", what, target, code, body, wantCode, want)
			}
		}
	}

	sameAnswer("a denied address", 403, forbiddenBody, "http://127.0.0.1:"+closed+"/x", "http://127.0.0.1:"+open+"/x")
	sameAnswer("a name leading into a denied network", 500, unreachableBody, "http://loop.test:"+closed+"/x", "http://loop.test:"+open+"/x")
	sameAnswer("localhost", 403, forbiddenBody, "http://localhost:"+closed+"/x", "http://localhost:"+open+"/x")
	if n := webHits.Load(); n != 0 {
		t.Fatalf("the denied web server got %d requests", n)
	}

	// Local dbs by name: the server's own URL is always reachable.
	if code, body := c.reqAs("bob:bobpw", "POST", "/_replicate", `{"source":"src","target":"tgt"}`); code != 200 || !strings.Contains(body, `"ok":true`) {
		t.Fatalf("bob replicates local dbs by name: %d %s", code, body)
	}
	if n := c.docCount("tgt"); n != 5 {
		t.Fatalf("tgt has %d docs, want 5", n)
	}

	// A doc: a literal address is refused when written; a name is written
	// and its job shows the one reason. (Other targets than the posts',
	// whose replication ids a doc's job would hold.)
	doc := func(target string) string {
		return fmt.Sprintf(`{"source":"http://bob:bobpw@%s/src","target":%q}`, c.addr, target)
	}
	if code, body := c.reqAs("bob:bobpw", "PUT", "/_replicator/literal", doc("http://127.0.0.1:"+open+"/x")); code != 403 || body != forbiddenBody {
		t.Errorf("bob's doc to a denied address: %d %s", code, body)
	}
	for _, port := range []string{closed, open} {
		id := "byname-" + port
		if code, body := c.reqAs("bob:bobpw", "PUT", "/_replicator/"+id, doc("http://loop.test:"+port+"/y")); code != 201 {
			t.Fatalf("bob's doc to a name: %d %s", code, body)
		}
		m := c.waitState("_replicator", id, "crashing", 30*time.Second)
		if info, _ := m["info"].(map[string]any); info["error"] != jobdata.UnreachableKind+": "+jobdata.UnreachableReason {
			t.Errorf("_scheduler/docs of %s: %v", id, m)
		}
		jobID, _ := m["id"].(string)
		var job struct {
			History []struct{ Type, Reason string } `json:"history"`
		}
		json.Unmarshal([]byte(c.must("GET", "/_scheduler/jobs/"+jobID, "", 200)), &job)
		for _, h := range job.History {
			if h.Type == "crashed" && h.Reason != jobdata.UnreachableKind+": "+jobdata.UnreachableReason {
				t.Errorf("_scheduler/jobs history of %s: %+v", id, h)
			}
		}
	}
	if n := webHits.Load(); n != 0 {
		t.Fatalf("the denied web server got %d requests", n)
	}

	// An admin is not restricted and keeps the detailed errors.
	code, body := replicate("admin:pass", "http://loop.test:"+closed+"/x")
	if code != 500 || !strings.Contains(body, "connection refused") {
		t.Errorf("admin -> a closed port: %d %s", code, body)
	}
	code, body = replicate("admin:pass", "http://127.0.0.1:"+open+"/x")
	if code != 500 || !strings.Contains(body, "could not open http://127.0.0.1:"+open+"/x/") || webHits.Load() == 0 {
		t.Errorf("admin -> an open web port: %d %s (%d requests)", code, body, webHits.Load())
	}

	// localhost allowed by name: bob's replications connect, and a closed
	// port and a web server still read the same.
	c.must("PUT", "/_node/_local/_config/replicator/allowed_hosts", `"localhost, *"`, 200)
	before := webHits.Load()
	c.eventually("allowed_hosts applied", 20*time.Second, func() bool {
		replicate("bob:bobpw", "http://localhost:"+open+"/x")
		return webHits.Load() > before
	})
	sameAnswer("real connection failures", 500, unreachableBody, "http://localhost:"+closed+"/x", "http://localhost:"+open+"/x")
	sameAnswer("a denied address, localhost allowed by name", 403, forbiddenBody, "http://127.0.0.1:"+open+"/x")
}

// TestE2EHostPolicyLocalHost (issue 38 item 1): under `denied_networks =
// 127.0.0.0/8, ::1`, a user who is not an admin names the server itself
// in every spelling of the local host, the unspecified addresses (which
// connect to it on Linux and macOS) included: each `POST /_replicate` and
// `_replicator` doc is refused when posted, and the target is never
// written. Only the server's own URL replicates.
func TestE2EHostPolicyLocalHost(t *testing.T) {
	t.Parallel()
	c := startCouch(t, "denied_networks = 127.0.0.0/8, ::1\n")
	_, port, _ := net.SplitHostPort(c.addr)
	c.must("PUT", "/_users/org.couchdb.user:bob", `{"name":"bob","type":"user","roles":[],"password":"bobpw"}`, 201)
	for _, db := range []string{"src", "tgt", "_replicator"} {
		if db != "_replicator" {
			c.must("PUT", "/"+db, "", 201)
		}
		c.must("PUT", "/"+db+"/_security", `{"members":{"names":["bob"]},"admins":{}}`, 200)
	}
	c.putDocs("src", 0, 3)
	forbiddenBody := `{"error":"forbidden","reason":"` + parse.ReasonHostNotAllowed + `"}`
	cases := []struct {
		host     string
		accepted bool
	}{
		{"0.0.0.0", false},
		{"[::]", false},
		{"[::0]", false},
		{"[0:0:0:0:0:0:0:0]", false},
		{"[::ffff:0.0.0.0]", false},
		{"127.1", false},
		{"2130706433", false},
		{"0x7f000001", false},
		{"0177.0.0.1", false},
		{"[::ffff:127.0.0.1]", false},
		{"[0:0:0:0:0:0:0:1]", false},
		{"localhost", false},
		{"localhost.", false},
		{"LOCALHOST", false},
		{"127.0.0.1", true}, // the server's own URL
	}
	refused := 0
	for i, tc := range cases {
		u := "http://bob:bobpw@" + tc.host + ":" + port
		body := fmt.Sprintf(`{"source":"%s/src","target":"%s/tgt","retries_per_request":0}`, u, u)
		code, got := c.reqAs("bob:bobpw", "POST", "/_replicate", body)
		switch {
		case tc.accepted && (code != 200 || !strings.Contains(got, `"ok":true`)):
			t.Errorf("%s: _replicate %d %s, want it to replicate", tc.host, code, got)
		case !tc.accepted && (code != 403 || got != forbiddenBody):
			t.Errorf("%s: _replicate %d %s, want 403 %s", tc.host, code, got, forbiddenBody)
		}
		code, got = c.reqAs("bob:bobpw", "PUT", fmt.Sprintf("/_replicator/spelling-%d", i), body)
		switch {
		case tc.accepted && code != 201:
			t.Errorf("%s: doc %d %s, want 201", tc.host, code, got)
		case !tc.accepted && (code != 403 || got != forbiddenBody):
			t.Errorf("%s: doc %d %s, want 403 %s", tc.host, code, got, forbiddenBody)
		}
		if !tc.accepted {
			refused++
			if n := c.docCount("tgt"); n != 0 {
				t.Fatalf("%s: the target has %d docs", tc.host, n)
			}
		}
	}
	if n := c.docCount("tgt"); n != 3 {
		t.Errorf("the server's own URL: tgt has %d docs, want 3", n)
	}
	t.Logf("%d spellings of the local host refused, %d accepted", refused, len(cases)-refused)
}

// TestE2EHostPolicyDefault (issue 38 item 2): with no policy set, a user
// who is not an admin cannot make the replicator reach a link-local or
// unspecified address: refused when posted or written, before any
// connection; an admin's doc without the `_admin` role in its user_ctx is
// refused too. (No test lets a connection to those addresses through.)
func TestE2EHostPolicyDefault(t *testing.T) {
	t.Parallel()
	c := startCouch(t, "")
	c.must("PUT", "/_users/org.couchdb.user:bob", `{"name":"bob","type":"user","roles":[],"password":"bobpw"}`, 201)
	c.must("PUT", "/_replicator/_security", `{"members":{"names":["bob"]},"admins":{}}`, 200)
	forbiddenBody := `{"error":"forbidden","reason":"` + parse.ReasonHostNotAllowed + `"}`
	local := "http://bob:bobpw@" + c.addr + "/src"
	for i, target := range []string{
		"http://169.254.169.254/latest/meta-data",
		"http://2852039166/latest/meta-data",
		"http://[::ffff:169.254.169.254]/latest",
		"http://[fe80::1%25eth0]:5984/db",
		"http://[fd00:ec2::254]/latest",
		"http://0.0.0.0:5984/db",
		"http://[::]:5984/db",
	} {
		body := fmt.Sprintf(`{"source":%q,"target":%q}`, local, target)
		if code, got := c.reqAs("bob:bobpw", "POST", "/_replicate", body); code != 403 || got != forbiddenBody {
			t.Errorf("bob -> %s: _replicate %d %s, want 403", target, code, got)
		}
		if code, got := c.reqAs("bob:bobpw", "PUT", fmt.Sprintf("/_replicator/meta-%d", i), body); code != 403 || got != forbiddenBody {
			t.Errorf("bob -> %s: doc %d %s, want 403", target, code, got)
		}
	}
	body := fmt.Sprintf(`{"source":%q,"target":"http://169.254.169.254/latest"}`, local)
	if code, got := c.reqAs("admin:pass", "PUT", "/_replicator/admins", body); code != 403 || !strings.Contains(got, "user_ctx") {
		t.Errorf("an admin's doc without _admin in user_ctx: %d %s, want 403 with the hint", code, got)
	}
}
