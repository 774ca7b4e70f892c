//go:build unix

package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/minicouchtest"
	"github.com/couchepi/couchepi/plugin/kv/etcd/etcdtest"
)

// TestFaults (issue 30; make test-faults, or COUCHEPI_FAULTS=1) runs the
// cluster through the faults a production cluster meets, with default
// settings: a 3-member etcd (each member a process of its own), one
// api_frontend node holding every database, and two replication-only
// nodes (replicator v1 and v2, told apart by their User-Agent), with 16
// continuous _replicator jobs, 2 continuous _replicate jobs, a few
// one-shot ones, and a writer at 8 writes/s throughout. Every request of
// the replications goes through a recording proxy in front of the
// frontend. Faults, one after the other: kill -9 of a replication node
// (and its return), SIGSTOP of a replication node past its lease then
// SIGCONT, kill -9 of a plugin process, kill of the etcd leader, quorum
// lost for 2 minutes, and a restart of the frontend. Per fault it prints
// the failover and settle times, the writes a stale owner completed (must
// be 0), checkpoints that went backwards (must be 0) and plugin restarts;
// at the end every acknowledged write is checked on its target with all
// its revisions (lost writes, must be 0).
func TestFaults(t *testing.T) {
	if os.Getenv("COUCHEPI_FAULTS") == "" {
		t.Skip("the fault suite takes about 10 minutes: run it with make test-faults (COUCHEPI_FAULTS=1)")
	}
	f := newFaultCluster(t)
	defer f.report() // also when a fault fails the test half way
	f.run("kill -9 of a replication node", f.killNode)
	f.run("SIGSTOP of a replication node past its lease, then SIGCONT", f.pauseNode)
	f.run("kill -9 of a plugin process", f.killPlugin)
	f.run("kill of the etcd leader", f.killLeader)
	f.run("etcd quorum lost for 2 minutes", f.loseQuorum)
	f.run("frontend restart", f.restartFrontend)
	f.lost = f.verify()
	for _, r := range f.results {
		if r.staleWrites > 0 || r.regressions > 0 || r.err != "" {
			t.Errorf("%s: %d writes by a stale owner, %d checkpoints went backwards %s", r.name, r.staleWrites, r.regressions, r.err)
		}
	}
	if f.lost > 0 {
		t.Errorf("%d acknowledged writes missing on their targets", f.lost)
	}
}

const (
	faultDBs      = 16               // continuous _replicator jobs, one source db each
	faultRate     = 8                // writes per second
	faultLease    = 10 * time.Second // node_lease_sec's default
	faultFailover = 15 * time.Second // the target with default settings
)

// faultResult is what one fault measured.
type faultResult struct {
	name                string
	failover, settle    time.Duration // jobs running elsewhere; a write replicated everywhere
	rebalance           time.Duration // a returning node got its share (0: not measured)
	staleWrites, staleN int           // writes, requests completed by a stale owner
	regressions         int
	restarts            int
	err                 string
}

type faultCluster struct {
	t       *testing.T
	etcd    *etcdtest.Cluster
	front   *couch
	nodes   [2]*couch // replication nodes; nodes[i] runs replicator version agents[i]
	agents  [2]string
	names   [2]string // as _scheduler/jobs names them
	rec     *recorder
	writer  *faultWriter
	jobs    int // continuous jobs
	results []faultResult
	// timedOut lists what the current fault waited for in vain.
	timedOut []string
	lost     int // acknowledged writes missing at the end; -1 until verified
}

func newFaultCluster(t *testing.T) *faultCluster {
	etcdc := etcdtest.StartProcessCluster(t, 3)
	eps := etcdc.Endpoints()
	prefix := fmt.Sprintf("faults-%d/", time.Now().UnixNano())
	f := &faultCluster{t: t, etcd: etcdc, agents: [2]string{"v1", "v2"}, lost: -1}
	f.front = startFaultNode(t, eps, prefix, true, false, "v1")
	for i := range f.nodes {
		f.nodes[i] = startFaultNode(t, eps, prefix, false, true, f.agents[i])
		f.names[i] = "minicouch@" + f.nodes[i].addr
	}
	f.rec = newRecorder(t, f.front.addr)
	for i := 0; i < faultDBs; i++ {
		f.front.must("PUT", fmt.Sprintf("/src%02d", i), "", 201)
	}
	f.writer = startFaultWriter(f.front)
	t.Cleanup(f.writer.stop)
	docs := []string{}
	for i := 0; i < faultDBs; i++ {
		docs = append(docs, fmt.Sprintf(`{"_id":"c%02d","source":%q,"target":%q,"continuous":true,"create_target":true,"checkpoint_interval":5000}`,
			i, f.rec.endpoint(fmt.Sprintf("src%02d", i)), f.rec.endpoint(fmt.Sprintf("tgt%02d", i))))
	}
	for i := 0; i < 4; i++ {
		docs = append(docs, fmt.Sprintf(`{"_id":"o%02d","source":%q,"target":%q,"create_target":true}`,
			i, f.rec.endpoint(fmt.Sprintf("src%02d", i)), f.rec.endpoint(fmt.Sprintf("once%02d", i))))
	}
	f.front.must("POST", "/_replicator/_bulk_docs", `{"docs":[`+strings.Join(docs, ",")+`]}`, 201)
	for i := 0; i < 2; i++ {
		f.front.must("POST", "/_replicate", fmt.Sprintf(`{"source":%q,"target":%q,"continuous":true,"create_target":true,"checkpoint_interval":5000}`,
			f.rec.endpoint(fmt.Sprintf("src%02d", i)), f.rec.endpoint(fmt.Sprintf("rtgt%02d", i))), 202)
	}
	f.jobs = faultDBs + 2
	f.front.eventually("every continuous job running", 120*time.Second, func() bool { return len(f.running()) == f.jobs })
	f.settle("start")
	return f
}

// startFaultNode runs a minicouch of the cluster with default settings
// and the replicator of the given version.
func startFaultNode(t *testing.T, endpoints []string, prefix string, frontend, replication bool, version string) *couch {
	// Nodes sharing a queue share the key sealing its credentials (derived
	// from [chttpd_auth] secret, as CouchDB's nodes share it).
	cfg := "[replicator]\njob_store = etcd\n[etcd]\nendpoints = " + strings.Join(endpoints, ",") + "\nprefix = " + prefix + "\n" +
		"[chttpd_auth]\nsecret = " + clusterSecret(prefix) + "\n" +
		fmt.Sprintf("[node_types]\napi_frontend = %v\nreplication = %v\n", frontend, replication)
	s := minicouchtest.Start(t, minicouchtest.Options{Data: t.TempDir(), Config: cfg, Plugins: []string{minicouchtest.Replicator(t, version)}})
	c := &couch{t: t, s: s, addr: s.Addr}
	if frontend {
		c.waitUp()
	} else {
		c.waitPlugin()
	}
	return c
}

// waitPlugin waits until the node's replicator plugin runs.
func (c *couch) waitPlugin() {
	c.t.Helper()
	c.eventually("the replicator plugin running", 60*time.Second, func() bool {
		pid, err := c.s.PluginPID("replicator")
		return err == nil && pid > 0
	})
}

// running returns the node of every running continuous job.
func (f *faultCluster) running() map[string]string { return runningNodes(f.front) }

// on counts the running jobs on node.
func (f *faultCluster) on(node string) int {
	n := 0
	for _, at := range f.running() {
		if at == node {
			n++
		}
	}
	return n
}

// restarts counts the plugin restarts the nodes' hosts logged so far.
func (f *faultCluster) restarts() int {
	n := 0
	for _, c := range []*couch{f.front, f.nodes[0], f.nodes[1]} {
		n += strings.Count(c.s.Log(), "plugin is down; restarting")
	}
	return n
}

// run runs one fault and records what it measured (also when the fault
// fails the test).
func (f *faultCluster) run(name string, fault func(r *faultResult)) {
	f.t.Logf("fault: %s", name)
	r := faultResult{name: name}
	restarts, regressions := f.restarts(), f.rec.regressionCount()
	f.timedOut = nil
	defer func() {
		r.restarts = f.restarts() - restarts
		r.regressions = f.rec.regressionCount() - regressions
		if len(f.timedOut) > 0 {
			r.err += " (timed out: " + strings.Join(f.timedOut, "; ") + ")"
		}
		if f.t.Failed() && r.err == "" {
			r.err = "(failed)"
		}
		f.results = append(f.results, r)
		f.t.Logf("  failover %v, settle %v, rebalance %v, stale writes %d (requests %d), checkpoint regressions %d, plugin restarts %d %s",
			r.failover.Round(100*time.Millisecond), r.settle.Round(100*time.Millisecond), r.rebalance.Round(100*time.Millisecond),
			r.staleWrites, r.staleN, r.regressions, r.restarts, r.err)
	}()
	fault(&r)
}

// within waits up to limit for cond and returns how long it took; on
// timeout it records what did not happen in the fault's result (the table
// says so and the test fails at its end) and returns -1, so the suite
// goes on to the next fault: a run of an older version shows every fault.
func (f *faultCluster) within(what string, limit time.Duration, cond func() bool) time.Duration {
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			f.t.Logf("  timed out after %v waiting for %s", limit, what)
			f.timedOut = append(f.timedOut, what)
			return -1
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Since(start)
}

// settle writes a probe doc to every source and returns how long it took
// to reach every continuous job's target.
func (f *faultCluster) settle(tag string) time.Duration {
	start := time.Now()
	id := "probe-" + strings.ReplaceAll(tag, " ", "-")
	for i := 0; i < faultDBs; i++ {
		f.front.must("PUT", fmt.Sprintf("/src%02d/%s", i, id), `{"probe":true}`, 201)
	}
	if f.within("probe "+id+" replicated everywhere", 5*time.Minute, func() bool {
		for i := 0; i < faultDBs; i++ {
			for _, tgt := range []string{fmt.Sprintf("tgt%02d", i), fmt.Sprintf("rtgt%02d", i)} {
				if strings.HasPrefix(tgt, "rtgt") && i >= 2 {
					continue
				}
				if code, _ := f.front.req("GET", "/"+tgt+"/"+id, ""); code != 200 {
					return false
				}
			}
		}
		return true
	}) < 0 {
		return -1
	}
	return time.Since(start)
}

// waitOff waits until no job runs on node and all run; it returns how
// long that took from since.
func (f *faultCluster) waitOff(node string, since time.Time, limit time.Duration) time.Duration {
	if f.within("jobs off "+node, limit, func() bool {
		nodes := f.running()
		if len(nodes) != f.jobs {
			return false
		}
		for _, at := range nodes {
			if at == node {
				return false
			}
		}
		return true
	}) < 0 {
		return -1
	}
	return time.Since(since)
}

// waitShare waits until node runs its share of the jobs again.
func (f *faultCluster) waitShare(node string, since time.Time) time.Duration {
	if f.within(node+" running its share again", 3*time.Minute, func() bool { return f.on(node) >= f.jobs/2-1 }) < 0 {
		return -1
	}
	return time.Since(since)
}

func (f *faultCluster) killNode(r *faultResult) {
	victim := 1
	if f.on(f.names[0]) > f.on(f.names[1]) {
		victim = 0
	}
	killed := time.Now()
	f.nodes[victim].s.Kill()
	r.failover = f.waitOff(f.names[victim], killed, 2*time.Minute)
	r.settle = f.settle("kill-node")
	back := time.Now()
	f.nodes[victim].s.Restart(f.t)
	f.nodes[victim].waitPlugin()
	r.rebalance = f.waitShare(f.names[victim], back)
}

func (f *faultCluster) pauseNode(r *faultResult) {
	// The node with more jobs, so that its old workers have something to
	// resume (after the first fault a node without rebalancing has none).
	victim := 0
	if f.on(f.names[1]) > f.on(f.names[0]) {
		victim = 1
	}
	node := f.nodes[victim]
	pids := []int{node.s.PID()}
	if pid, err := node.s.PluginPID("replicator"); err == nil && pid > 0 {
		pids = append(pids, pid)
	}
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGSTOP)
	}
	stopped := time.Now()
	r.failover = f.waitOff(f.names[victim], stopped, 2*time.Minute)
	// Resume it well past its lease.
	if wait := 2*faultLease - time.Since(stopped); wait > 0 {
		time.Sleep(wait)
	}
	resumed := time.Now()
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGCONT)
	}
	r.settle = f.settle("pause-node")
	time.Sleep(5 * time.Second)
	// What the resumed node completed before it started anything anew
	// was done by its old workers, for jobs the other node had by then.
	fresh := firstLogAfter(node.s.Log(), "replication started", resumed)
	r.staleWrites, r.staleN = f.rec.count(f.agents[victim], resumed, fresh)
	r.rebalance = f.waitShare(f.names[victim], resumed)
}

func (f *faultCluster) killPlugin(r *faultResult) {
	const victim = 1
	pid, err := f.nodes[victim].s.PluginPID("replicator")
	if err != nil || pid == 0 {
		f.t.Fatalf("no plugin pid: %v", err)
	}
	killed := time.Now()
	syscall.Kill(pid, syscall.SIGKILL)
	f.within("the plugin restarted", time.Minute, func() bool {
		newPID, _ := f.nodes[victim].s.PluginPID("replicator")
		return newPID != 0 && newPID != pid
	})
	r.failover = time.Since(killed)
	// The killed process's jobs replicate again once the new one gave its
	// lease up.
	r.settle = f.settle("kill-plugin")
}

func (f *faultCluster) killLeader(r *faultResult) {
	leader := f.etcd.Leader()
	if leader < 0 {
		panic("no etcd leader")
	}
	killed := time.Now()
	f.etcd.Stop(leader)
	r.settle = f.settle("kill-leader")
	r.failover = time.Since(killed)
	f.etcd.Restart(leader)
}

func (f *faultCluster) loseQuorum(r *faultResult) {
	leader := f.etcd.Leader()
	down := []int{}
	for i := 0; i < 3 && len(down) < 2; i++ {
		if i != leader {
			down = append(down, i)
		}
	}
	lost := time.Now()
	for _, i := range down {
		f.etcd.Stop(i)
	}
	// During the outage: the true reason, and (past half a lease) no
	// node writes for any job.
	for time.Since(lost) < 2*time.Minute {
		code, body := f.front.req("GET", "/_scheduler/jobs", "")
		if code != 503 || !strings.Contains(body, "job queue is unavailable") {
			r.err = fmt.Sprintf("_scheduler/jobs %v into the outage: %d %s", time.Since(lost).Round(time.Second), code, body)
		}
		time.Sleep(10 * time.Second)
	}
	quiet := lost.Add(faultLease/2 + 2*time.Second)
	back := time.Now()
	for _, a := range f.agents {
		w, n := f.rec.count(a, quiet, back)
		r.staleWrites += w
		r.staleN += n
	}
	for _, i := range down {
		f.etcd.Restart(i)
	}
	f.within("_scheduler/jobs answering again", time.Minute, func() bool {
		code, _ := f.front.req("GET", "/_scheduler/jobs", "")
		return code == 200
	})
	r.failover = time.Since(back) // the queue back
	r.settle = f.settle("quorum-back")
}

func (f *faultCluster) restartFrontend(r *faultResult) {
	start := time.Now()
	f.writer.pause()
	f.front.stop()
	f.front.start()
	f.writer.resume()
	r.failover = time.Since(start)
	r.settle = f.settle("frontend-restart")
}

// verify checks, once every job has caught up, that every acknowledged
// write is on its targets with all its revisions; it returns how many are
// missing.
func (f *faultCluster) verify() int {
	f.writer.stop()
	f.settle("final")
	acked := f.writer.acked()
	missing := 0
	for i := 0; i < faultDBs; i++ {
		src := fmt.Sprintf("src%02d", i)
		revs := acked[src]
		if len(revs) == 0 {
			continue
		}
		body, _ := json.Marshal(revs)
		targets := []string{fmt.Sprintf("tgt%02d", i)}
		if i < 2 {
			targets = append(targets, fmt.Sprintf("rtgt%02d", i))
		}
		for _, tgt := range targets {
			_, out := f.front.req("POST", "/"+tgt+"/_revs_diff", string(body))
			var diff map[string]struct {
				Missing []string `json:"missing"`
			}
			if err := json.Unmarshal([]byte(out), &diff); err != nil {
				f.t.Errorf("_revs_diff on %s: %v: %s", tgt, err, out)
				continue
			}
			for id, d := range diff {
				missing += len(d.Missing)
				f.t.Logf("missing on %s: %s %v", tgt, id, d.Missing)
			}
		}
	}
	f.t.Logf("verified %d acknowledged writes on their targets with _revs_diff", f.writer.count())
	return missing
}

// report prints the table of every fault.
func (f *faultCluster) report() {
	var b strings.Builder
	fmt.Fprintf(&b, "\n| fault | failover s | settle s | rebalance s | stale-owner writes (requests) | checkpoints backwards | plugin restarts |\n|---|---|---|---|---|---|---|\n")
	secs := func(d time.Duration) string {
		if d < 0 {
			return "timed out"
		}
		return fmt.Sprintf("%.1f", d.Seconds())
	}
	for _, r := range f.results {
		fmt.Fprintf(&b, "| %s%s | %s | %s | %s | %d (%d) | %d | %d |\n", r.name, r.err, secs(r.failover), secs(r.settle), secs(r.rebalance),
			r.staleWrites, r.staleN, r.regressions, r.restarts)
	}
	fmt.Fprintf(&b, "\nacknowledged writes: %d, lost: %d (-1: not verified); checkpoint writes seen: %d\n", f.writer.count(), f.lost, f.rec.checkpoints())
	for _, a := range f.agents {
		w, n := f.rec.count(a, time.Time{}, time.Now().Add(time.Hour))
		fmt.Fprintf(&b, "replicator %s: %d requests, %d writes\n", a, n, w)
	}
	for i, c := range []*couch{f.front, f.nodes[0], f.nodes[1]} {
		fmt.Fprintf(&b, "node %d warnings: %s\n", i, warnings(c.s.Log()))
	}
	f.t.Log(b.String())
	fmt.Println(b.String())
}

// warnings counts a log's warning and error lines by message.
func warnings(log string) string {
	counts := map[string]int{}
	for _, line := range strings.Split(log, "\n") {
		_, rest, ok := strings.Cut(line, "[WARN]")
		if !ok {
			if _, rest, ok = strings.Cut(line, "[ERROR]"); !ok {
				continue
			}
		}
		if _, msg, ok := strings.Cut(rest, ": "); ok {
			msg, _, _ = strings.Cut(msg, ":")
			counts[strings.TrimSpace(msg)]++
		}
	}
	var parts []string
	for msg, n := range counts {
		parts = append(parts, fmt.Sprintf("%q ×%d", msg, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// firstLogAfter returns the time of the first log line after t that
// contains what, or the far future when there is none.
func firstLogAfter(log, what string, t time.Time) time.Time {
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.Contains(line, what) {
			continue
		}
		ts, _, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		at, err := time.Parse("2006-01-02T15:04:05.000Z07:00", ts)
		if err == nil && at.After(t) {
			return at
		}
	}
	return time.Now().Add(time.Hour)
}

// recorder is a reverse proxy in front of the frontend that records every
// request it completed (the frontend answered it) by replicator version,
// and the source_last_seq of every checkpoint written, to tell when one
// goes backwards.
type recorder struct {
	t     *testing.T
	srv   *httptest.Server
	proxy *httputil.ReverseProxy

	mu          sync.Mutex
	done        []recorded
	seqs        map[string]int64 // db/_local/id → highest checkpointed seq
	regressions []string
	cps         int
}

type recorded struct {
	at    time.Time
	agent string
	write bool
}

func newRecorder(t *testing.T, upstream string) *recorder {
	r := &recorder{t: t, seqs: map[string]int64{}}
	target, _ := url.Parse("http://" + upstream)
	r.proxy = httputil.NewSingleHostReverseProxy(target)
	r.proxy.ErrorLog = nil
	r.proxy.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, err error) {
		http.Error(w, `{"error":"bad_gateway","reason":"`+err.Error()+`"}`, http.StatusBadGateway)
	}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *recorder) endpoint(db string) string {
	return "http://admin:pass@" + strings.TrimPrefix(r.srv.URL, "http://") + "/" + db
}

func (r *recorder) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return // the client gave up mid-body: nothing reaches the frontend
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	agent := ""
	if ua := req.Header.Get("User-Agent"); strings.HasPrefix(ua, "CouchDB-Replicator/") {
		agent = strings.TrimPrefix(ua, "CouchDB-Replicator/")
	}
	rw := &statusWriter{ResponseWriter: w}
	r.proxy.ServeHTTP(rw, req)
	if rw.code == http.StatusBadGateway || rw.code == 0 {
		return
	}
	path := req.URL.Path
	write := req.Method == "PUT" || req.Method == "DELETE" || req.Method == "POST" && strings.HasSuffix(path, "/_bulk_docs")
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done = append(r.done, recorded{at: time.Now(), agent: agent, write: write})
	if req.Method == "PUT" && strings.Contains(path, "/_local/") && rw.code/100 == 2 {
		r.cps++
		var cp struct {
			Seq json.RawMessage `json:"source_last_seq"`
		}
		json.Unmarshal(body, &cp)
		if n, ok := seqNumber(cp.Seq); ok {
			if prev, seen := r.seqs[path]; seen && n < prev {
				r.regressions = append(r.regressions, fmt.Sprintf("%s: %d after %d (by %s)", path, n, prev, agent))
				r.t.Logf("checkpoint went backwards: %s", r.regressions[len(r.regressions)-1])
			}
			if n > r.seqs[path] {
				r.seqs[path] = n
			}
		}
	}
}

// seqNumber is the leading number of a sequence ("12-g1…" or 12).
func seqNumber(raw json.RawMessage) (int64, bool) {
	s := strings.Trim(string(raw), `"`)
	if i := strings.IndexByte(s, '-'); i >= 0 {
		s = s[:i]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// count returns the writes and requests of agent completed in [from, to).
func (r *recorder) count(agent string, from, to time.Time) (writes, requests int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range r.done {
		if d.agent == agent && !d.at.Before(from) && d.at.Before(to) {
			requests++
			if d.write {
				writes++
			}
		}
	}
	return writes, requests
}

func (r *recorder) regressionCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.regressions)
}

func (r *recorder) checkpoints() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cps
}

// faultWriter writes to the source dbs at faultRate, a new doc or an
// update of an earlier one, and remembers every revision acknowledged.
type faultWriter struct {
	c       *couch
	mu      sync.Mutex
	revs    map[string]map[string][]string // db → id → acknowledged revs
	last    map[string]map[string]string   // db → id → current rev
	latest  map[string]string              // db → the doc created last
	n       int
	paused  bool
	stopped chan struct{}
	done    chan struct{}
	once    sync.Once
}

func startFaultWriter(c *couch) *faultWriter {
	w := &faultWriter{c: c, revs: map[string]map[string][]string{}, last: map[string]map[string]string{}, latest: map[string]string{},
		stopped: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

func (w *faultWriter) run() {
	defer close(w.done)
	t := time.NewTicker(time.Second / faultRate)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-w.stopped:
			return
		case <-t.C:
		}
		w.mu.Lock()
		paused := w.paused
		w.mu.Unlock()
		if paused {
			continue
		}
		db := fmt.Sprintf("src%02d", i%faultDBs)
		id := fmt.Sprintf("w%06d", i)
		body := fmt.Sprintf(`{"n":%d}`, i)
		if i%3 == 2 { // an update of the db's latest new doc
			w.mu.Lock()
			id = w.latest[db]
			rev := w.last[db][id]
			w.mu.Unlock()
			if rev == "" {
				continue
			}
			body = fmt.Sprintf(`{"n":%d,"_rev":%q}`, i, rev)
		}
		code, resp := w.c.req("PUT", "/"+db+"/"+id, body)
		if code != 201 && code != 202 {
			continue // not acknowledged: not checked
		}
		var ok struct {
			Rev string `json:"rev"`
		}
		json.Unmarshal([]byte(resp), &ok)
		w.mu.Lock()
		if w.revs[db] == nil {
			w.revs[db], w.last[db] = map[string][]string{}, map[string]string{}
		}
		w.revs[db][id] = append(w.revs[db][id], ok.Rev)
		if w.last[db][id] == "" {
			w.latest[db] = id
		}
		w.last[db][id] = ok.Rev
		w.n++
		w.mu.Unlock()
	}
}

func (w *faultWriter) pause()  { w.mu.Lock(); w.paused = true; w.mu.Unlock() }
func (w *faultWriter) resume() { w.mu.Lock(); w.paused = false; w.mu.Unlock() }

func (w *faultWriter) stop() {
	w.once.Do(func() { close(w.stopped) })
	<-w.done
}

func (w *faultWriter) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// acked returns a copy of every acknowledged revision, by db and doc id.
func (w *faultWriter) acked() map[string]map[string][]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]map[string][]string{}
	for db, docs := range w.revs {
		out[db] = map[string][]string{}
		for id, revs := range docs {
			out[db][id] = append([]string(nil), revs...)
		}
	}
	return out
}
