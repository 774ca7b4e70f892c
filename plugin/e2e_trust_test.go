package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// Regression tests for the defects of issue 11 (trust: security and
// correctness), end to end through minicouch and the plugin process.

// TestE2ELegacyStateFieldsStripped (issue 11 item 12): a new doc written in
// a legacy state ("triggered", "error") loses every _replication_* field,
// as CouchDB 3.x removes them, and then runs; completed docs keep theirs.
func TestE2ELegacyStateFieldsStripped(t *testing.T) {
	c := startCouch(t, "")
	c.must("PUT", "/src", "", 201)
	c.putDocs("src", 0, 3)
	legacy := `,"create_target":true,"continuous":true,"_replication_state":"%s","_replication_id":"x","_replication_state_time":"2020-01-01T00:00:00Z","_replication_state_reason":"old","_replication_stats":{"docs_written":99}`
	for _, state := range []string{"triggered", "error"} {
		id := "legacy-" + state
		c.must("PUT", "/_replicator/"+id, c.repDoc("src", "tgt-"+state, strings.Replace(legacy, "%s", state, 1)), 201)
		var doc map[string]any
		c.eventually(id+" stripped", 20*time.Second, func() bool {
			code, body := c.req("GET", "/_replicator/"+id, "")
			doc = nil
			json.Unmarshal([]byte(body), &doc)
			if code != 200 {
				return false
			}
			for k := range doc {
				if strings.HasPrefix(k, "_replication_") {
					return false
				}
			}
			return true
		})
		c.eventually(id+" replicated", 20*time.Second, func() bool { return c.docCount("tgt-"+state) == 3 })
	}
	c.must("PUT", "/_replicator/done", c.repDoc("src", "tgt-done", `,"_replication_state":"completed","_replication_id":"x"`), 201)
	time.Sleep(2 * time.Second)
	body := c.must("GET", "/_replicator/done", "", 200)
	if !strings.Contains(body, `"_replication_id":"x"`) {
		t.Fatalf("completed doc lost its fields: %s", body)
	}
}
