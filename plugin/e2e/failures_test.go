package e2e

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestE2EFailuresAsCouchDB (issue #33 items 2 to 5): how replications that
// cannot run show, as CouchDB 3.5 shows them.
func TestE2EFailuresAsCouchDB(t *testing.T) {
	t.Parallel()
	c := startCouch(t, "")
	c.must("PUT", "/src", "", 201)
	c.putDocs("src", 0, 3)

	t.Run("a _replicate job is found by its id before it runs", func(t *testing.T) {
		c.t = t
		c.must("PUT", "/_node/_local/_config/replicator/max_jobs", `"0"`, 200)
		defer c.must("PUT", "/_node/_local/_config/replicator/max_jobs", `"500"`, 200)
		var r struct {
			LocalID string `json:"_local_id"`
		}
		json.Unmarshal([]byte(c.must("POST", "/_replicate", `{"source":"src","target":"waiting","create_target":true,"continuous":true}`, 202)), &r)
		spaced := strings.ReplaceAll(r.LocalID, "+", " ")
		if code, body := c.req("GET", "/_scheduler/jobs/"+url.PathEscape(spaced), ""); code != 200 || !strings.Contains(body, `"id":"`+r.LocalID+`"`) {
			t.Fatalf("_scheduler/jobs/%s of a job that has not run: %d %s", spaced, code, body)
		}
		cancel := `{"replication_id":"` + spaced + `","cancel":true}`
		if code, body := c.req("POST", "/_replicate", cancel); code != 200 || body != `{"ok":true,"_local_id":"`+r.LocalID+`"}` {
			t.Fatalf("cancel by %q: %d %s", spaced, code, body)
		}
		if code, body := c.req("POST", "/_replicate", cancel); code != 404 {
			t.Fatalf("second cancel: %d %s", code, body)
		}
	})
	t.Run("endpoints refusing the credentials", func(t *testing.T) {
		c.t = t
		c.must("PUT", "/locked", "", 201)
		c.must("PUT", "/locked/_security", `{"members":{"names":["nobody"]},"admins":{}}`, 200)
		c.must("PUT", "/_users/org.couchdb.user:joe", `{"name":"joe","type":"user","roles":[],"password":"joepw"}`, 201)
		cases := []struct {
			source, error string
			code          int
		}{
			{"http://joe:joepw@" + c.addr + "/locked", "forbidden", 403},
			{"http://" + c.addr + "/locked", "unauthorized", 401},
		}
		for _, tc := range cases {
			code, body := c.req("POST", "/_replicate", fmt.Sprintf(`{"source":%q,"target":%q,"create_target":true}`, tc.source, c.endpoint("unlocked")))
			if code != tc.code || !strings.HasPrefix(body, `{"error":"`+tc.error+`","reason":"`) || strings.Contains(body, "joepw") {
				t.Errorf("source %s: %d %s, want %d %s", tc.source, code, body, tc.code, tc.error)
			}
		}
	})
	t.Run("a _replicate job that crashes is gone", func(t *testing.T) {
		c.t = t
		var r struct {
			LocalID string `json:"_local_id"`
		}
		json.Unmarshal([]byte(c.must("POST", "/_replicate", `{"source":"nosuchsrc","target":"t9","continuous":true}`, 202)), &r)
		c.eventually("the crashed job gone from _scheduler/jobs/{id}", 20*time.Second, func() bool {
			code, _ := c.req("GET", "/_scheduler/jobs/"+url.PathEscape(r.LocalID), "")
			return code == 404
		})
		if body := c.must("GET", "/_scheduler/jobs", "", 200); strings.Contains(body, r.LocalID) {
			t.Fatalf("crashed job listed: %s", body)
		}
		if code, body := c.req("POST", "/_replicate", `{"replication_id":"`+r.LocalID+`","cancel":true}`); code != 404 {
			t.Fatalf("cancel of the crashed job: %d %s", code, body)
		}
	})
	t.Run("a duplicate of a crashing doc fails, in the doc too", func(t *testing.T) {
		c.t = t
		c.must("PUT", "/_replicator/first", c.repDoc("nosuchdb", "t10", `,"continuous":true`), 201)
		first := c.waitState("_replicator", "first", "crashing", 20*time.Second)
		c.must("PUT", "/_replicator/second", c.repDoc("nosuchdb", "t10", `,"continuous":true`), 201)
		m := c.waitState("_replicator", "second", "failed", 20*time.Second)
		want := fmt.Sprintf("Replication `%s` specified by document `second` already started, triggered by document `first` from db `_replicator`", first["id"])
		if m["info"].(map[string]any)["error"] != want || m["error_count"] != 1.0 {
			t.Fatalf("duplicate: %v", m)
		}
		c.eventually("failed state written into the doc", 10*time.Second, func() bool {
			var d map[string]any
			json.Unmarshal([]byte(c.must("GET", "/_replicator/second", "", 200)), &d)
			rev, _ := d["_rev"].(string)
			return strings.HasPrefix(rev, "2-") && d["_replication_state"] == "failed" && d["_replication_state_reason"] == want && d["_replication_state_time"] != nil
		})
		if body := c.must("GET", "/_scheduler/docs?states=failed", "", 200); !strings.Contains(body, `"doc_id":"second"`) || !strings.Contains(body, `"error_count":1`) {
			t.Fatalf("_scheduler/docs?states=failed: %s", body)
		}
		if m := c.schedDoc("_replicator", "first"); m == nil || m["state"] != "crashing" {
			t.Fatalf("the first doc after its duplicate: %v", m)
		}
	})
}
