package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestE2ECheckpointTarget (issue 31 item 5): `"checkpoint": "target"` in a
// `_replicator` doc keeps the job's checkpoints on the target alone, which
// `_scheduler/docs`, `_scheduler/jobs` and `_active_tasks` show; values
// other than "both" and "target" are refused at write time and by
// POST /_replicate, with the same reason.
func TestE2ECheckpointTarget(t *testing.T) {
	c := startCouch(t, "")
	c.must("PUT", "/src", "", 201)
	c.putDocs("src", 0, 20)
	const reason = "`checkpoint` must be `both` or `target` (`use_checkpoints: false` writes none)"
	if code, body := c.req("PUT", "/_replicator/bad", c.repDoc("src", "tgt", `,"checkpoint":false`)); code != 403 || forbidden(t, body) != reason {
		t.Errorf("doc with checkpoint false: %d %s", code, body)
	}
	if code, body := c.req("POST", "/_replicate", c.repDoc("src", "tgt", `,"checkpoint":"source"`)); code != 400 || !strings.Contains(body, `"error":"bad_request"`) || !strings.Contains(body, "`checkpoint` must be") {
		t.Errorf("_replicate with checkpoint source: %d %s", code, body)
	}

	c.must("PUT", "/_replicator/r", c.repDoc("src", "tgt", `,"continuous":true,"create_target":true,"checkpoint":"target"`), 201)
	c.eventually("the docs on the target", 20*time.Second, func() bool { return c.docCount("tgt") == 20 })
	var repID string
	c.eventually("_scheduler/docs shows the checkpoint kept on the target", 20*time.Second, func() bool {
		m := c.schedDoc("_replicator", "r")
		info, _ := m["info"].(map[string]any)
		repID, _ = m["id"].(string)
		return m["state"] == "running" && info["checkpoint"] == "target"
	})
	_, jobs := c.req("GET", "/_scheduler/jobs", "")
	if !strings.Contains(jobs, `"checkpoint":"target"`) {
		t.Errorf("_scheduler/jobs does not show it: %s", jobs)
	}
	_, tasks := c.req("GET", "/_active_tasks", "")
	if !strings.Contains(tasks, `"checkpoint":"target","checkpoint_interval"`) {
		t.Errorf("_active_tasks does not show it: %s", tasks)
	}
	base, _, _ := strings.Cut(repID, "+")
	var cp map[string]json.RawMessage
	c.eventually("a checkpoint on the target", 20*time.Second, func() bool {
		code, body := c.req("GET", "/tgt/_local/"+base, "")
		return code == 200 && json.Unmarshal([]byte(body), &cp) == nil
	})
	if string(cp["checkpoint"]) != `"target"` {
		t.Errorf("the target's checkpoint is not marked: %s", fmt.Sprint(cp))
	}
	if code, body := c.req("GET", "/src/_local/"+base, ""); code != 404 {
		t.Errorf("the source has a checkpoint: %d %s", code, body)
	}
}
