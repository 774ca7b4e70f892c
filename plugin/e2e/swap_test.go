package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/minicouchtest"
)

// pluginInfo returns the replicator's entry of `GET /_node/_local/_plugins`.
func (c *couch) pluginInfo() (version string, pid int) {
	var ps []struct {
		Name, Version string
		PID           int
	}
	json.Unmarshal([]byte(c.must("GET", "/_node/_local/_plugins", "", 200)), &ps)
	for _, p := range ps {
		if p.Name == "replicator" {
			return p.Version, p.PID
		}
	}
	return "", 0
}

// converged waits until every target has as many docs as the source.
func (c *couch) converged(what string, n int, want int, d time.Duration) {
	c.t.Helper()
	lagging := 0
	deadline := time.Now().Add(d)
	for {
		lagging = 0
		for i := 0; i < n; i++ {
			if c.docCount(fmt.Sprintf("tgt%03d", i)) != want {
				lagging++
			}
		}
		if lagging == 0 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out waiting for %s: %d of %d targets lag", what, lagging, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// noDuplicates checks that `_scheduler/jobs` lists each doc once.
func (c *couch) noDuplicates() {
	c.t.Helper()
	var out struct {
		Jobs []struct {
			DocID *string `json:"doc_id"`
		} `json:"jobs"`
	}
	json.Unmarshal([]byte(c.must("GET", "/_scheduler/jobs?limit=100000", "", 200)), &out)
	seen := map[string]bool{}
	for _, j := range out.Jobs {
		if j.DocID == nil {
			continue
		}
		if seen[*j.DocID] {
			c.t.Fatalf("job of doc %s listed twice", *j.DocID)
		}
		seen[*j.DocID] = true
	}
}

// probeWrites writes to _replicator until stop is closed and returns the
// longest stretch during which writes were refused.
func (c *couch) probeWrites(stop <-chan struct{}) func() time.Duration {
	var longest atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var failingSince time.Time
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			code, _ := c.req("PUT", fmt.Sprintf("/_replicator/_design/probe%d", i), `{}`)
			now := time.Now()
			if code == 201 {
				if !failingSince.IsZero() {
					longest.Store(max(longest.Load(), int64(now.Sub(failingSince))))
				}
				failingSince = time.Time{}
			} else if failingSince.IsZero() {
				failingSince = now
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return func() time.Duration { wg.Wait(); return time.Duration(longest.Load()) }
}

// swapFigures are what a swap run measured.
type swapFigures struct {
	reload     time.Duration // the _reload call
	allRunning time.Duration // from the _reload call until every job runs in v2
	refused    time.Duration // longest stretch of refused _replicator writes
}

// runningCount returns how many jobs `_scheduler/jobs` shows running.
func (c *couch) runningCount() int {
	return strings.Count(c.must("GET", "/_scheduler/jobs?states=running&limit=100000", "", 200), `"pid":"<`)
}

// runSwap: n continuous replications with writes flowing, a v1 → v2 swap,
// a kill -9 of the plugin, then checks every doc arrived, no duplicates.
func runSwap(t testing.TB, n int, extraConfig string) swapFigures {
	var fig swapFigures
	c := startCouch(t, extraConfig)
	c.must("PUT", "/src", "", 201)
	c.putDocs("src", 0, 10)
	for i := 0; i < n; i++ {
		tgt := fmt.Sprintf("tgt%03d", i)
		c.must("PUT", "/_replicator/r"+tgt, c.repDoc("src", tgt, `,"continuous":true,"create_target":true,"checkpoint_interval":500`), 201)
	}
	c.converged("first docs everywhere", n, 10, 60*time.Second)

	// Swap v1 → v2 while writes flow into the source and into _replicator.
	stopProbe := make(chan struct{})
	refused := c.probeWrites(stopProbe)
	writes := make(chan struct{})
	go func() {
		defer close(writes)
		for k := 0; k < 5; k++ {
			c.putDocs("src", 10+k*2, 2)
			time.Sleep(100 * time.Millisecond)
		}
	}()
	v2 := minicouchtest.Replicator(t, "v2")
	start := time.Now()
	c.must("POST", "/_node/_local/_plugins/replicator/_reload", fmt.Sprintf(`{"path":%q}`, v2), 200)
	fig.reload = time.Since(start)
	if !strings.Contains(extraConfig, "max_jobs") {
		c.eventually("all jobs running in v2", 60*time.Second, func() bool { return c.runningCount() == n })
		fig.allRunning = time.Since(start)
	}
	<-writes
	if v, _ := c.pluginInfo(); v != "v2" {
		t.Fatalf("version after swap: %q", v)
	}
	c.converged("docs written during the swap everywhere", n, 20, 60*time.Second)
	close(stopProbe)
	if fig.refused = refused(); fig.refused > time.Second {
		t.Errorf("_replicator writes refused for %v during the swap", fig.refused)
	}
	c.noDuplicates()
	t.Logf("swap of %d continuous replications: reload call %v, all running after %v, longest write refusal %v", n, fig.reload, fig.allRunning, fig.refused)

	// kill -9 of the plugin: the host restarts it and jobs resume.
	_, pid := c.pluginInfo()
	if pid == 0 {
		t.Fatal("no plugin pid")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c.eventually("plugin restarted", 30*time.Second, func() bool {
		_, p := c.pluginInfo()
		return p != 0 && p != pid
	})
	c.putDocs("src", 20, 5)
	c.converged("docs written after kill -9 everywhere", n, 25, 120*time.Second)
	c.noDuplicates()
	return fig
}

// TestE2ESwapAndKill: rotation with more jobs than slots, a live swap and
// a kill -9, with a few replications.
func TestE2ESwapAndKill(t *testing.T) {
	t.Parallel()
	runSwap(t, 5, "max_jobs = 3\nmax_churn = 2\n")
}

// TestE2ESwap200 is the swap test: 200 continuous replications.
func TestE2ESwap200(t *testing.T) {
	if os.Getenv("COUCHEPI_LONG") == "" {
		t.Skip("long test: set COUCHEPI_LONG=1")
	}
	runSwap(t, 200, "")
}

// TestE2ERotationSoak: 30 continuous replications on 5 slots (churn 5)
// through a swap and a kill -9; every one keeps making progress (long).
func TestE2ERotationSoak(t *testing.T) {
	if os.Getenv("COUCHEPI_LONG") == "" {
		t.Skip("long test: set COUCHEPI_LONG=1")
	}
	runSwap(t, 30, "max_jobs = 5\nmax_churn = 5\n")
}
