package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// failureMetrics returns every failure counter and gauge of the
// replicator (by name, summed over labels) from the Prometheus endpoint.
func (c *couch) failureMetrics() map[string]float64 {
	c.t.Helper()
	body := c.must("GET", "/_node/_local/_prometheus", "", 200)
	out := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ := strings.Cut(line, " ")
		name, _, _ = strings.Cut(name, "{")
		if !strings.HasPrefix(name, "couchdb_couch_replicator_") && !strings.HasPrefix(name, "couchepi_replicator_") {
			continue
		}
		if !strings.Contains(name, "fail") && !strings.Contains(name, "crash") &&
			!strings.Contains(name, "max_backoffs") && !strings.Contains(name, "stalls") {
			continue
		}
		f := strings.Fields(line)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		out[name] += v
	}
	if len(out) == 0 {
		c.t.Fatal("no failure metric in /_node/_local/_prometheus")
	}
	return out
}

// sameFailures fails the test when a failure metric moved since before.
func (c *couch) sameFailures(after string, before map[string]float64) {
	c.t.Helper()
	for name, v := range c.failureMetrics() {
		if v != before[name] {
			c.t.Errorf("%s: %s went from %v to %v", after, name, before[name], v)
		}
	}
}

// waitMetric waits until a counter reaches at least n.
func (c *couch) waitMetric(name string, n float64) {
	c.t.Helper()
	c.eventually(fmt.Sprintf("%s >= %v", name, n), 30*time.Second, func() bool { return c.metric(name) >= n })
}

// TestE2EFailureCountersQuiet (issue 37 item 6): what a healthy
// replication does in its life — parking when idle, waking on a write,
// giving its slot up at rotation, being replaced by an edit of its doc,
// stopping when its doc is deleted — moves none of the failure counters
// an operator alerts on: a request or checkpoint cut short by the
// replicator's own stop is no failed response nor failed checkpoint.
func TestE2EFailureCountersQuiet(t *testing.T) {
	t.Run("park wake edit stop", func(t *testing.T) {
		t.Parallel()
		c := startCouch(t, "idle_park_sec = 2\ncheckpoint_interval = 500\n")
		before := c.failureMetrics()
		c.must("PUT", "/src", "", 201)
		c.putDocs("src", 0, 3)
		c.must("PUT", "/_replicator/a", c.repDoc("src", "t1", `,"continuous":true,"create_target":true`), 201)
		c.waitMetric("couchepi_replicator_jobs_parks_total", 1)
		c.sameFailures("parking", before)

		c.putDocs("src", 3, 1)
		c.waitDoc("t1", "d00003", 20*time.Second)
		c.waitMetric("couchepi_replicator_jobs_wakes_total", 1)
		c.waitMetric("couchepi_replicator_jobs_parks_total", 2)
		c.sameFailures("waking and parking again", before)

		// An edit while the job runs: writes keep it busy.
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 4; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				c.putDocs("src", i, 1)
			}
		}()
		c.waitDoc("t1", "d00006", 20*time.Second)
		rev := c.revOf("/_replicator/a")
		c.must("PUT", "/_replicator/a", c.repDoc("src", "t2", `,"continuous":true,"create_target":true,"_rev":"`+rev+`"`), 201)
		c.waitDoc("t2", "d00006", 20*time.Second)
		close(stop)
		<-done
		c.sameFailures("a doc edit", before)

		rev = c.revOf("/_replicator/a")
		c.must("DELETE", "/_replicator/a?rev="+rev, "", 200)
		c.eventually("job gone", 20*time.Second, func() bool {
			code, _ := c.req("GET", "/_scheduler/docs/_replicator/a", "")
			return code == 404
		})
		c.sameFailures("a clean stop", before)
	})
	t.Run("rotation", func(t *testing.T) {
		t.Parallel()
		c := startCouch(t, "max_jobs = 1\nmax_churn = 1\ninterval_sec = 2\nmin_run_time_sec = 0\nidle_park_sec = 0\ncheckpoint_interval = 500\n")
		before := c.failureMetrics()
		c.must("PUT", "/src", "", 201)
		c.putDocs("src", 0, 3)
		for i := range 2 {
			c.must("PUT", fmt.Sprintf("/_replicator/r%d", i), c.repDoc("src", fmt.Sprint("t", i), `,"continuous":true,"create_target":true`), 201)
		}
		c.waitMetric("couchdb_couch_replicator_jobs_stops_total", 3)
		c.sameFailures("rotation", before)
	})
}
