package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestE2EActiveTasksFresh (issue 33 item 1): on the node that runs a
// replication, _active_tasks and _scheduler/jobs follow it batch by batch,
// as CouchDB's do, even when its stats are written to the queue rarely
// (stats_update_interval_sec 60, checkpoints a minute apart): a client
// polling through_seq against the source's update_seq to wait for a
// continuous replication to catch up sees it within a second. An entry
// never shows "through_seq": null.
func TestE2EActiveTasksFresh(t *testing.T) {
	c := startCouch(t, "stats_update_interval_sec = 60\n")
	c.must("PUT", "/src", "", 201)
	c.putDocs("src", 0, 5)
	c.must("POST", "/_replicate", fmt.Sprintf(`{"source":%q,"target":%q,"continuous":true,"create_target":true,"checkpoint_interval":60000}`,
		c.endpoint("src"), c.endpoint("tgt")), 202)
	task := func() map[string]json.RawMessage {
		_, body := c.req("GET", "/_active_tasks", "")
		var tasks []map[string]json.RawMessage
		json.Unmarshal([]byte(body), &tasks)
		for _, task := range tasks {
			if string(task["type"]) == `"replication"` {
				if v, ok := task["through_seq"]; ok && string(v) == "null" {
					t.Fatalf("_active_tasks shows through_seq null: %s", body)
				}
				return task
			}
		}
		return nil
	}
	caughtUp := func(want int) func() bool {
		return func() bool {
			tk := task()
			if tk == nil {
				return false
			}
			var info struct {
				UpdateSeq json.RawMessage `json:"update_seq"`
			}
			json.Unmarshal([]byte(c.must("GET", "/src", "", 200)), &info)
			return string(tk["docs_written"]) == fmt.Sprint(want) && string(tk["through_seq"]) == string(info.UpdateSeq)
		}
	}
	c.eventually("the first docs in _active_tasks", 10*time.Second, caughtUp(5))
	c.putDocs("src", 5, 5)
	start := time.Now()
	c.eventually("the new docs in _active_tasks within seconds", 5*time.Second, caughtUp(10))
	t.Logf("_active_tasks caught up %v after the writes (stats written to the queue every 60 s)", time.Since(start).Round(10*time.Millisecond))
	_, body := c.req("GET", "/_scheduler/jobs", "")
	if !strings.Contains(body, `"docs_written":10`) {
		t.Fatalf("_scheduler/jobs lags: %s", body)
	}
}
