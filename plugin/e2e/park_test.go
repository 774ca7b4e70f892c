package e2e

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/minicouchtest"
	"github.com/couchepi/couchepi/plugin/kv/etcd/etcdtest"
)

// parkConfig parks idle continuous jobs after 2 s.
const parkConfig = "idle_park_sec = 2\n"

// parked reports whether a replication doc's job is parked: shown
// running, with parked_since in its info.
func (c *couch) parked(db, id string) bool {
	m := c.schedDoc(db, id)
	if m == nil || m["state"] != "running" {
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

// TestE2EParkedShowsRunning: a parked job is what its user sees, a
// running replication: running in _scheduler/docs and _scheduler/jobs
// (and their states=running filters, not states=pending), listed in
// _active_tasks, each with parked_since. (Before: pending, and gone from
// _active_tasks, a minute after the last change.)
func TestE2EParkedShowsRunning(t *testing.T) {
	t.Parallel()
	c := startCouch(t, parkConfig)
	c.must("PUT", "/psrc", "", 201)
	c.putDocs("psrc", 0, 2)
	c.must("PUT", "/_replicator/quiet", c.repDoc("psrc", "ptgt", `,"continuous":true,"create_target":true`), 201)
	c.waitParked("_replicator", "quiet")
	repID, _ := c.schedDoc("_replicator", "quiet")["id"].(string)
	if repID == "" {
		t.Fatal("parked job without a replication id")
	}
	listed := func(path, key string) []map[string]any {
		var out map[string][]map[string]any
		json.Unmarshal([]byte(c.must("GET", path, "", 200)), &out)
		return out[key]
	}
	find := func(list []map[string]any) map[string]any {
		for _, e := range list {
			if e["id"] == repID || e["replication_id"] == repID {
				return e
			}
		}
		return nil
	}
	for _, tc := range []struct {
		path, key string
		want      bool
	}{
		{"/_scheduler/jobs", "jobs", true},
		{"/_scheduler/jobs?states=running", "jobs", true},
		{"/_scheduler/jobs?states=pending", "jobs", false},
		{"/_scheduler/docs?states=running", "docs", true},
		{"/_scheduler/docs?states=pending", "docs", false},
	} {
		e := find(listed(tc.path, tc.key))
		if (e != nil) != tc.want {
			t.Errorf("%s: listed %v, want %v", tc.path, e != nil, tc.want)
			continue
		}
		if e == nil {
			continue
		}
		info, _ := e["info"].(map[string]any)
		if _, ok := info["parked_since"]; !ok {
			t.Errorf("%s: no parked_since in %v", tc.path, e)
		}
		if st, ok := e["state"]; ok && st != "running" {
			t.Errorf("%s: state %v", tc.path, st)
		}
	}
	var tasks []map[string]any
	json.Unmarshal([]byte(c.must("GET", "/_active_tasks", "", 200)), &tasks)
	task := find(tasks)
	if task == nil {
		t.Fatalf("parked job not in _active_tasks: %v", tasks)
	}
	if pid, _ := task["pid"].(string); pid == "" { // Fauxton's Active Tasks page fails on a null pid
		t.Errorf("_active_tasks entry of the parked job has no pid: %v", task)
	}
	if task["parked_since"] == nil || task["continuous"] != true || task["docs_written"] != float64(2) {
		t.Errorf("_active_tasks entry of the parked job: %v", task)
	}
	// It still wakes and replicates.
	c.putDocs("psrc", 2, 1)
	c.waitDoc("ptgt", "d00002", 20*time.Second)
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
	if got := c.metric("couchepi_replicator_jobs_resumes_total"); got != 2 {
		t.Errorf("jobs_resumes_total = %v after both parked jobs woke, want 2 (each starts from what its parked run left)", got)
	}

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

// TestE2EClusterParkedJobsWake (issue 15, item 4): on a job queue shared in
// etcd, a job parked by one replication node is woken and run by another.
// Node A parks every job and is killed with SIGKILL; writes made while no
// replication node runs are found by node B when it starts (it checks the
// sources of the jobs parked in the queue), and later writes wake the jobs
// B parked through the frontend's _db_updates feed.
func TestE2EClusterParkedJobsWake(t *testing.T) {
	skipShort(t)
	etcdc := etcdtest.StartCluster(t, 1)
	eps := etcdc.Endpoints()
	prefix := fmt.Sprintf("park-%d/", time.Now().UnixNano())
	const extra = parkConfig + "max_jobs = 4\n"
	front := startClusterNode(t, eps, prefix, true, false, extra)
	a := startClusterNode(t, eps, prefix, false, true, extra)
	const n = 3
	for i := 0; i < n; i++ {
		front.must("PUT", fmt.Sprintf("/s%d", i), "", 201)
		front.putDocs(fmt.Sprintf("s%d", i), 0, 3)
		front.must("PUT", fmt.Sprintf("/_replicator/p%d", i), front.repDoc(fmt.Sprintf("s%d", i), fmt.Sprintf("t%d", i), `,"continuous":true,"create_target":true`), 201)
	}
	for i := 0; i < n; i++ {
		front.waitParked("_replicator", fmt.Sprintf("p%d", i))
		if got := front.docCount(fmt.Sprintf("t%d", i)); got != 3 {
			t.Fatalf("t%d has %d docs when parked, want 3", i, got)
		}
	}
	if err := a.s.Kill(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		front.putDocs(fmt.Sprintf("s%d", i), 3, 1)
	}
	b := startClusterNode(t, eps, prefix, false, true, extra)
	bname := "minicouch@" + b.addr
	ran := map[string]bool{}
	for i := 0; i < n; i++ {
		tgt := fmt.Sprintf("t%d", i)
		front.eventually(tgt+" has the write made while no node ran", 30*time.Second, func() bool {
			for _, node := range runningNodes(front) {
				ran[node] = true
			}
			code, _ := front.req("GET", "/"+tgt+"/d00003", "")
			return code == 200
		})
	}
	for node := range ran {
		if node != bname {
			t.Errorf("a woken job ran on %s, want only node B (%s)", node, bname)
		}
	}
	for i := 0; i < n; i++ {
		front.waitParked("_replicator", fmt.Sprintf("p%d", i))
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		front.putDocs(fmt.Sprintf("s%d", i), 4, 1)
	}
	for i := 0; i < n; i++ {
		front.waitDoc(fmt.Sprintf("t%d", i), "d00004", 30*time.Second)
	}
	t.Logf("writes to the frontend reached %d jobs parked by node B after %v", n, time.Since(start).Round(time.Millisecond))
	for i := 0; i < n; i++ {
		if got := front.docCount(fmt.Sprintf("t%d", i)); got != 5 {
			t.Errorf("t%d has %d docs, want 5", i, got)
		}
	}
}

// metric reads a counter or gauge of the plugin from the server's
// Prometheus endpoint (-1 when absent).
func (c *couch) metric(name string) float64 {
	_, body := c.req("GET", "/_node/_local/_prometheus", "")
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			return v
		}
	}
	return -1
}

// TestE2EContinuousJobsShareSlots (issue 15): with more continuous jobs
// than max_jobs, all of them with work (a local source replicated into
// four targets and a source on another server into two, both written to
// while they run), caught-up jobs hand their slots on to the ones
// waiting, watching their sources through the host's db_updated and the
// other server's _db_updates, so every target receives every write
// without waiting for rotation or parking. Jobs without a slot stay
// accepted and show as running; no job runs twice. How fast is the
// fan-out benchmark's business (BenchmarkParkFanOut); the bound here is
// only a generous one.
func TestE2EContinuousJobsShareSlots(t *testing.T) {
	t.Parallel()
	// Three slots, six jobs: three replicate, up to three are quiet.
	c := startCouch(t, "idle_park_sec = 60\nmax_jobs = 3\n")
	remote := &couch{t: t, s: minicouchtest.Start(t, minicouchtest.Options{})}
	remote.addr = remote.s.Addr
	const targets, writes = 6, 30
	c.must("PUT", "/fsrc", "", 201)
	remote.must("PUT", "/rsrc", "", 201)
	c.putDocs("fsrc", 0, 1)
	remote.putDocs("rsrc", 0, 1)
	// Jobs f0-f3 read the local source, f4 and f5 the remote one.
	src := func(i int) (*couch, string) {
		if i < 4 {
			return c, "fsrc"
		}
		return remote, "rsrc"
	}
	for i := 0; i < targets; i++ {
		s, db := src(i)
		c.must("PUT", fmt.Sprintf("/_replicator/f%d", i), fmt.Sprintf(`{"source":%q,"target":%q,"continuous":true,"create_target":true}`,
			s.endpoint(db), c.endpoint(fmt.Sprintf("ftgt%d", i))), 201)
	}
	for i := 0; i < targets; i++ {
		c.waitDoc(fmt.Sprintf("ftgt%d", i), "d00000", 60*time.Second)
	}
	handoffs := c.metric("couchepi_replicator_jobs_slot_handoffs_total")
	for k := 1; k <= writes; k++ {
		c.putDocs("fsrc", k, 1)
		remote.putDocs("rsrc", k, 1)
		time.Sleep(50 * time.Millisecond)
	}
	last := fmt.Sprintf("d%05d", writes)
	for i := 0; i < targets; i++ {
		c.waitDoc(fmt.Sprintf("ftgt%d", i), last, 60*time.Second)
	}
	for i := 0; i < targets; i++ {
		if n := c.docCount(fmt.Sprintf("ftgt%d", i)); n != writes+1 {
			t.Errorf("ftgt%d has %d docs, want %d", i, n, writes+1)
		}
	}
	if got := c.metric("couchepi_replicator_jobs_slot_handoffs_total"); got <= handoffs {
		t.Errorf("slot hand-offs %v then %v: the jobs did not share their slots", handoffs, got)
	}
	// Quiet or replicating, every job is running: none is pending,
	// waiting for rotation.
	for i := 0; i < targets; i++ {
		if st := c.schedDoc("_replicator", fmt.Sprintf("f%d", i))["state"]; st != "running" {
			t.Errorf("f%d is %v, want running", i, st)
		}
	}
	c.noDuplicates()
}
