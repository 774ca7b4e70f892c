package e2e

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// TestE2ERotationIdleSource (issue 33 item 6): with max_jobs 2, max_churn
// 1, interval_sec 2 and min_run_time_sec 0, four continuous jobs on one
// idle source take turns: a job that has never run gets its turn within
// an interval or two, whether or not the running ones are idle. With
// idle_park_sec 0 (CouchDB's behaviour: jobs keep their slots and feeds)
// by rotation, never more than max_jobs running; by default by the quiet
// jobs handing their slots on (quiet jobs show as running, see
// docs/replicator.md).
func TestE2ERotationIdleSource(t *testing.T) {
	const settings = "max_jobs = 2\nmax_churn = 1\ninterval_sec = 2\nmin_run_time_sec = 0\n"
	for _, tc := range []struct {
		name, config string
		runtime      bool // the settings come through /_node/_local/_config, as CouchDB's tests set them
		maxRunning   int
	}{
		{"rotation", settings + "idle_park_sec = 0\n", false, 2},
		{"rotation set at runtime", "interval_sec = 30\nidle_park_sec = 0\n", true, 2},
		{"quiet jobs", settings + "idle_park_sec = 60\n", false, 4},
	} {
		t.Run(tc.name, func(t *testing.T) { rotateIdleSource(t, tc.config, tc.runtime, tc.maxRunning) })
	}
}

func rotateIdleSource(t *testing.T, config string, runtime bool, maxRunning int) {
	c := startCouch(t, config)
	if runtime {
		for _, kv := range [][2]string{{"max_jobs", "2"}, {"max_churn", "1"}, {"interval_sec", "2"}, {"min_run_time_sec", "0"}} {
			c.must("PUT", "/_node/_local/_config/replicator/"+kv[0], `"`+kv[1]+`"`, 200)
		}
	}
	c.must("PUT", "/src", "", 201)
	c.putDocs("src", 0, 3)
	for i := 0; i < 4; i++ {
		c.must("PUT", fmt.Sprintf("/_replicator/r%d", i), c.repDoc("src", fmt.Sprintf("t%d", i), `,"continuous":true,"create_target":true`), 201)
	}
	ran := map[string]bool{}
	start := time.Now()
	var firstAll time.Duration
	for time.Since(start) < 14*time.Second && (firstAll == 0 || time.Since(start) < firstAll+2*time.Second) {
		_, body := c.req("GET", "/_scheduler/docs/_replicator", "")
		var list struct {
			Docs []struct {
				DocID string `json:"doc_id"`
				State string `json:"state"`
			} `json:"docs"`
		}
		json.Unmarshal([]byte(body), &list)
		running := 0
		for _, d := range list.Docs {
			if d.State == "running" {
				ran[d.DocID] = true
				running++
			}
		}
		if running > maxRunning {
			t.Fatalf("%d jobs running with max_jobs 2", running)
		}
		if len(ran) == 4 && firstAll == 0 {
			firstAll = time.Since(start)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(ran) != 4 {
		t.Fatalf("in 14 s only %v ran; every job should get its turn within an interval or two", ran)
	}
	if firstAll > 8*time.Second {
		t.Errorf("all four jobs had run only %v after they were created: want within two intervals (2 s, +1/3 jitter)", firstAll)
	}
	t.Logf("all four jobs had run %v after they were created (interval 2 s)", firstAll.Round(100*time.Millisecond))
	for i := 0; i < 4; i++ {
		tgt := fmt.Sprintf("t%d", i)
		c.eventually(tgt+" replicated", 20*time.Second, func() bool { return c.docCount(tgt) == 3 })
	}
}
