package e2e

import (
	"fmt"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/minicouchtest"
)

// parkConfig parks idle continuous jobs after 2 s.
const parkConfig = "idle_park_sec = 2\n"

// parked reports whether a replication doc's job is parked: pending, with
// parked_since in its info.
func (c *couch) parked(db, id string) bool {
	m := c.schedDoc(db, id)
	if m == nil || m["state"] != "pending" {
		return false
	}
	info, _ := m["info"].(map[string]any)
	_, ok := info["parked_since"]
	return ok
}

func (c *couch) waitParked(db, id string) {
	c.t.Helper()
	c.eventually(db+"/"+id+" parked", 30*time.Second, func() bool { return c.parked(db, id) })
}

// waitDoc waits until doc id is in db.
func (c *couch) waitDoc(db, id string, d time.Duration) {
	c.t.Helper()
	c.eventually(db+"/"+id, d, func() bool {
		code, _ := c.req("GET", "/"+url.PathEscape(db)+"/"+id, "")
		return code == 200
	})
}

// TestE2EParkedJobsWake: continuous jobs that caught up are parked and wake
// on a write to a local source (the host's db_updated), on a write to a
// remote source (its _db_updates feed), after a kill -9 of the plugin with
// writes made while it was down, and across a live swap; no change made
// while a job was parked is missed.
func TestE2EParkedJobsWake(t *testing.T) {
	t.Parallel()
	c := startCouch(t, parkConfig)
	remote := &couch{t: t, s: minicouchtest.Start(t, minicouchtest.Options{})}
	remote.addr = remote.s.Addr
	c.must("PUT", "/lsrc", "", 201)
	remote.must("PUT", "/rsrc", "", 201)
	c.putDocs("lsrc", 0, 3)
	remote.putDocs("rsrc", 0, 3)
	c.must("PUT", "/_replicator/local", c.repDoc("lsrc", "ltgt", `,"continuous":true,"create_target":true`), 201)
	c.must("PUT", "/_replicator/remote", fmt.Sprintf(`{"source":%q,"target":%q,"continuous":true,"create_target":true}`,
		remote.endpoint("rsrc"), c.endpoint("rtgt")), 201)
	c.waitParked("_replicator", "local")
	c.waitParked("_replicator", "remote")
	if n := c.docCount("ltgt"); n != 3 {
		t.Fatalf("ltgt has %d docs before parking, want 3", n)
	}

	// Wake on a local write, and on a remote one.
	start := time.Now()
	c.putDocs("lsrc", 3, 1)
	c.waitDoc("ltgt", "d00003", 20*time.Second)
	t.Logf("local write replicated by a parked job after %v", time.Since(start))
	start = time.Now()
	remote.putDocs("rsrc", 3, 1)
	c.waitDoc("rtgt", "d00003", 20*time.Second)
	t.Logf("remote write replicated by a parked job after %v", time.Since(start))
	c.waitParked("_replicator", "local")
	c.waitParked("_replicator", "remote")

	// kill -9 while parked; writes land while the plugin is down.
	_, pid := c.pluginInfo()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c.putDocs("lsrc", 4, 1)
	remote.putDocs("rsrc", 4, 1)
	c.eventually("plugin restarted", 30*time.Second, func() bool {
		_, p := c.pluginInfo()
		return p != 0 && p != pid
	})
	c.waitDoc("ltgt", "d00004", 30*time.Second)
	c.waitDoc("rtgt", "d00004", 30*time.Second)
	c.waitParked("_replicator", "local")
	c.waitParked("_replicator", "remote")

	// A live swap while parked, with writes during it.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for k := 5; k < 10; k++ {
			c.putDocs("lsrc", k, 1)
			remote.putDocs("rsrc", k, 1)
			time.Sleep(50 * time.Millisecond)
		}
	}()
	c.must("POST", "/_node/_local/_plugins/replicator/_reload", fmt.Sprintf(`{"path":%q}`, minicouchtest.Replicator(t, "v2")), 200)
	<-done
	c.waitDoc("ltgt", "d00009", 30*time.Second)
	c.waitDoc("rtgt", "d00009", 30*time.Second)
	c.waitParked("_replicator", "local")
	c.waitParked("_replicator", "remote")
	for _, db := range []string{"ltgt", "rtgt"} {
		if n := c.docCount(db); n != 10 {
			t.Errorf("%s has %d docs, want 10", db, n)
		}
	}
	c.noDuplicates()
}
