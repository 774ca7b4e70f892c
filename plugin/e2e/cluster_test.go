package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/minicouchtest"
	"github.com/couchepi/couchepi/plugin/kv/etcd/etcdtest"
)

// startClusterNode runs minicouch with the replicator on a job queue in
// etcd, with the given node types, and waits until a frontend serves its
// routes.
func startClusterNode(t testing.TB, endpoints []string, prefix string, frontend, replication bool, extra string) *couch {
	c := newClusterNode(t, endpoints, prefix, frontend, replication, extra)
	if frontend {
		c.waitUp()
	}
	return c
}

// newClusterNode is startClusterNode without the wait.
func newClusterNode(t testing.TB, endpoints []string, prefix string, frontend, replication bool, extra string) *couch {
	return newClusterNodeEtcd(t, endpoints, prefix, frontend, replication, extra, "")
}

// newClusterNodeEtcd is newClusterNode with etcdExtra in the [etcd] section.
func newClusterNodeEtcd(t testing.TB, endpoints []string, prefix string, frontend, replication bool, extra, etcdExtra string) *couch {
	skipShort(t)
	data := t.TempDir()
	// The nodes of a queue share the key its records are sealed with
	// (derived from [chttpd_auth] secret, as CouchDB's nodes share it).
	cfg := e2eConfig + "job_store = etcd\n" + extra +
		"[etcd]\nendpoints = " + strings.Join(endpoints, ",") + "\nprefix = " + prefix + "\n" + etcdExtra +
		"[chttpd_auth]\nsecret = " + clusterSecret(prefix) + "\n" +
		fmt.Sprintf("[node_types]\napi_frontend = %v\nreplication = %v\n", frontend, replication)
	s := minicouchtest.Start(t, minicouchtest.Options{
		Data: data, Config: cfg, Plugins: []string{minicouchtest.Replicator(t, "v1")}, Log: nodeLog(t),
	})
	return &couch{t: t, s: s, addr: s.Addr}
}

// nodeLog is where a cluster node's output is also written: a new file in
// $COUCHEPI_E2E_LOGDIR when set (to read where a benchmark's time goes
// from the nodes' timestamps), else nowhere.
func nodeLog(t testing.TB) io.Writer {
	dir := os.Getenv("COUCHEPI_E2E_LOGDIR")
	if dir == "" {
		return nil
	}
	f, err := os.CreateTemp(dir, "node-*.log")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// clusterSecret is the [chttpd_auth] secret of the nodes sharing the
// queue under prefix: 64 hex digits, as strong as the replicator requires.
func clusterSecret(prefix string) string {
	sum := sha256.Sum256([]byte("shared-by-" + prefix))
	return hex.EncodeToString(sum[:])
}

// TestE2EClusterOnEtcd (issue 13): one api_frontend-only and two
// replication-only minicouch share a job queue in a 3-member etcd. Jobs
// from _replicator docs and _replicate bodies written to the frontend run
// on both replication nodes within their max_jobs, every doc arrives, and
// the frontend's _scheduler/jobs shows each running job with its node.
func TestE2EClusterOnEtcd(t *testing.T) {
	skipShort(t)
	etcdc := etcdtest.StartCluster(t, 3)
	prefix := fmt.Sprintf("e2e-%d/", time.Now().UnixNano())
	front := startClusterNode(t, etcdc.Endpoints(), prefix, true, false, "")
	workers := []*couch{
		startClusterNode(t, etcdc.Endpoints(), prefix, false, true, "max_jobs = 4\n"),
		startClusterNode(t, etcdc.Endpoints(), prefix, false, true, "max_jobs = 4\n"),
	}
	// Sample the running jobs per node throughout: never over max_jobs.
	stopSampling := make(chan struct{})
	sampled := make(chan map[string]int, 1)
	go func() {
		most := map[string]int{}
		for {
			select {
			case <-stopSampling:
				sampled <- most
				return
			case <-time.After(100 * time.Millisecond):
			}
			per := map[string]int{}
			for _, node := range runningNodes(front) {
				per[node]++
			}
			for node, n := range per {
				most[node] = max(most[node], n)
			}
		}
	}()
	front.must("PUT", "/src", "", 201)
	front.putDocs("src", 0, 20)
	const continuous, oneShot, transient = 5, 3, 2
	for i := 0; i < continuous; i++ {
		front.must("PUT", fmt.Sprintf("/_replicator/c%d", i), front.repDoc("src", fmt.Sprintf("tc%d", i), `,"continuous":true,"create_target":true`), 201)
	}
	for i := 0; i < oneShot; i++ {
		front.must("PUT", fmt.Sprintf("/_replicator/o%d", i), front.repDoc("src", fmt.Sprintf("to%d", i), `,"create_target":true`), 201)
	}
	for i := 0; i < transient; i++ {
		front.must("POST", "/_replicate", fmt.Sprintf(`{"source":%q,"target":%q,"continuous":true,"create_target":true}`, front.endpoint("src"), front.endpoint(fmt.Sprintf("tr%d", i))), 202)
	}
	targets := []string{}
	for i := 0; i < continuous; i++ {
		targets = append(targets, fmt.Sprintf("tc%d", i))
	}
	for i := 0; i < oneShot; i++ {
		targets = append(targets, fmt.Sprintf("to%d", i))
	}
	for i := 0; i < transient; i++ {
		targets = append(targets, fmt.Sprintf("tr%d", i))
	}
	for _, tgt := range targets {
		front.eventually(tgt+" replicated", 60*time.Second, func() bool { return front.docCount(tgt) == 20 })
	}
	for i := 0; i < oneShot; i++ {
		id := fmt.Sprintf("o%d", i)
		front.waitState("_replicator", id, "completed", 30*time.Second)
		// The job ran on a replication node; the frontend, which has the
		// doc, writes the terminal state into it.
		front.eventually(id+" doc says completed", 30*time.Second, func() bool {
			_, body := front.req("GET", "/_replicator/"+id, "")
			return strings.Contains(body, `"_replication_state":"completed"`) && strings.Contains(body, `"_replication_stats":{`)
		})
	}

	// Every continuous job runs, on one of the two replication nodes, at
	// most max_jobs on each.
	nodes := map[string]bool{}
	for _, w := range workers {
		nodes["minicouch@"+w.addr] = true
	}
	var perNode map[string]int
	front.eventually("7 continuous jobs running on both nodes", 30*time.Second, func() bool {
		_, body := front.req("GET", "/_scheduler/jobs", "")
		var list struct {
			Jobs []struct {
				Node any `json:"node"`
				PID  any `json:"pid"`
			} `json:"jobs"`
		}
		json.Unmarshal([]byte(body), &list)
		perNode = map[string]int{}
		for _, j := range list.Jobs {
			if j.PID == nil {
				continue
			}
			n, _ := j.Node.(string)
			if !nodes[n] {
				t.Fatalf("job running on unknown node %q: %s", n, body)
			}
			perNode[n]++
		}
		return len(perNode) == 2 && perNode["minicouch@"+workers[0].addr]+perNode["minicouch@"+workers[1].addr] == continuous+transient
	})

	// A live swap of the replicator on one replication node while the
	// other runs: writes keep flowing and nothing is lost.
	v2 := minicouchtest.Replicator(t, "v2")
	workers[0].must("POST", "/_node/_local/_plugins/replicator/_reload", fmt.Sprintf(`{"path":%q}`, v2), 200)
	if body := workers[0].must("GET", "/_node/_local/_plugins", "", 200); !strings.Contains(body, `"version":"v2"`) {
		t.Fatalf("replication node not swapped to v2: %s", body)
	}
	front.putDocs("src", 20, 5)
	for i := 0; i < continuous; i++ {
		tgt := fmt.Sprintf("tc%d", i)
		front.eventually(tgt+" caught up across the swap", 60*time.Second, func() bool { return front.docCount(tgt) == 25 })
	}
	for i := 0; i < transient; i++ {
		tgt := fmt.Sprintf("tr%d", i)
		front.eventually(tgt+" caught up across the swap", 60*time.Second, func() bool { return front.docCount(tgt) == 25 })
	}
	close(stopSampling)
	for n, most := range <-sampled {
		if most > 4 {
			t.Errorf("node %s ran %d jobs at once, over max_jobs 4", n, most)
		}
	}
	t.Logf("jobs per node: %v", perNode)
}

// tcpProxy forwards 127.0.0.1 connections to target. While it is down it
// drops every connection at once: a network partition, or a server not
// (yet) reachable.
type tcpProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	down   bool
}

func startProxy(t *testing.T, target string) *tcpProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			down := p.down
			p.mu.Unlock()
			if down {
				c.Close()
				continue
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { io.Copy(u, c); u.Close() }()
			go func() { io.Copy(c, u); c.Close() }()
		}
	}()
	t.Cleanup(func() { p.Cut(); ln.Close() })
	return p
}

func (p *tcpProxy) URL() string { return "http://" + p.ln.Addr().String() }

// Cut drops every connection and refuses new ones until Restore.
func (p *tcpProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// Restore lets connections through again.
func (p *tcpProxy) Restore() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// runningNodes returns, per running job id, the node the frontend says
// runs it.
func runningNodes(c *couch) map[string]string {
	_, body := c.req("GET", "/_scheduler/jobs?limit=1000000", "") // the default limit is 100
	var list struct {
		Jobs []struct {
			ID   any `json:"id"`
			Node any `json:"node"`
			PID  any `json:"pid"`
		} `json:"jobs"`
	}
	json.Unmarshal([]byte(body), &list)
	out := map[string]string{}
	for _, j := range list.Jobs {
		if j.PID != nil {
			id, _ := j.ID.(string)
			n, _ := j.Node.(string)
			out[id] = n
		}
	}
	return out
}

// TestE2EClusterFailover (issues 13, 30): with node_lease_sec = 4, the
// jobs of a replication node killed with SIGKILL run on the other node
// within the lease plus a scheduler interval; losing one etcd member stops
// nothing; a replication node cut off from etcd abandons its jobs before
// any other node starts them.
func TestE2EClusterFailover(t *testing.T) {
	skipShort(t)
	etcdc := etcdtest.StartCluster(t, 3)
	eps := etcdc.Endpoints()
	prefix := fmt.Sprintf("failover-%d/", time.Now().UnixNano())
	const extra = "node_lease_sec = 4\nmax_jobs = 10\n"
	front := startClusterNode(t, eps, prefix, true, false, extra)
	w1 := startClusterNode(t, eps, prefix, false, true, extra)
	w2 := startClusterNode(t, eps, prefix, false, true, extra)
	front.must("PUT", "/src", "", 201)
	front.putDocs("src", 0, 10)
	const n = 6
	for i := 0; i < n; i++ {
		front.must("PUT", fmt.Sprintf("/_replicator/c%d", i), front.repDoc("src", fmt.Sprintf("t%d", i), `,"continuous":true,"create_target":true`), 201)
	}
	front.eventually("all jobs running", 30*time.Second, func() bool { return len(runningNodes(front)) == n })
	for i := 0; i < n; i++ {
		tgt := fmt.Sprintf("t%d", i)
		front.eventually(tgt+" replicated", 30*time.Second, func() bool { return front.docCount(tgt) == 10 })
	}

	// Every job has checkpointed what it wrote.
	front.eventually("all jobs checkpointed", 30*time.Second, func() bool {
		_, body := front.req("GET", "/_scheduler/jobs", "")
		var list struct {
			Jobs []struct {
				Info struct {
					Checkpointed any `json:"checkpointed_source_seq"`
					Through      any `json:"through_seq"`
					DocsWritten  int `json:"docs_written"`
				} `json:"info"`
			} `json:"jobs"`
		}
		json.Unmarshal([]byte(body), &list)
		for _, j := range list.Jobs {
			// Its 10 docs written and checkpointed (a job that just
			// started shows checkpointed and through both at 0).
			if j.Info.Checkpointed == nil || j.Info.Checkpointed != j.Info.Through || j.Info.DocsWritten < 10 {
				return false
			}
		}
		return len(list.Jobs) == n
	})

	// kill -9 one replication node: its jobs move to the other.
	w2name := "minicouch@" + w2.addr
	killed := time.Now()
	w2.s.Kill()
	front.eventually("jobs off the killed node", 30*time.Second, func() bool {
		nodes := runningNodes(front)
		if len(nodes) != n {
			return false
		}
		for _, node := range nodes {
			if node == w2name {
				return false
			}
		}
		return true
	})
	t.Logf("failover of the killed node's jobs took %v (node lease 4 s)", time.Since(killed).Round(100*time.Millisecond))
	// They resumed from their checkpoints: the 10 docs already written
	// count (a run from 0 would re-read them and write none).
	defer func() {
		if t.Failed() {
			summary := func(db string) string {
				_, b := front.req("GET", "/"+db+"/_local_docs?include_docs=true", "")
				var l struct {
					Rows []struct {
						ID  string `json:"id"`
						Doc struct {
							Session string            `json:"session_id"`
							History []json.RawMessage `json:"history"`
						} `json:"doc"`
					} `json:"rows"`
				}
				json.Unmarshal([]byte(b), &l)
				out := ""
				for _, r := range l.Rows {
					out += fmt.Sprintf(" %s=%s(%d)", r.ID[7:15], r.Doc.Session[:8], len(r.Doc.History))
				}
				return out
			}
			t.Logf("src:%s", summary("src"))
			for i := 0; i < n; i++ {
				t.Logf("t%d:%s", i, summary(fmt.Sprintf("t%d", i)))
			}
		}
	}()
	front.eventually("moved jobs resumed from checkpoints", 30*time.Second, func() bool {
		_, body := front.req("GET", "/_scheduler/jobs", "")
		var list struct {
			Jobs []struct {
				Info struct {
					DocsWritten int `json:"docs_written"`
				} `json:"info"`
			} `json:"jobs"`
		}
		json.Unmarshal([]byte(body), &list)
		if len(list.Jobs) != n {
			return false
		}
		for _, j := range list.Jobs {
			if j.Info.DocsWritten < 10 {
				return false
			}
		}
		return true
	})
	front.putDocs("src", 10, 5)
	for i := 0; i < n; i++ {
		tgt := fmt.Sprintf("t%d", i)
		front.eventually(tgt+" caught up after failover", 30*time.Second, func() bool { return front.docCount(tgt) == 15 })
	}

	// One etcd member down: nothing stops.
	etcdc.Stop(2)
	front.putDocs("src", 15, 5)
	for i := 0; i < n; i++ {
		tgt := fmt.Sprintf("t%d", i)
		front.eventually(tgt+" caught up with an etcd member down", 60*time.Second, func() bool { return front.docCount(tgt) == 20 })
	}

	// Partition: a new node w3 reaches etcd through a proxy; once it runs
	// jobs, cut it off. It must abandon them before w1 starts them.
	proxy := startProxy(t, strings.TrimPrefix(eps[0], "http://"))
	w3 := startClusterNode(t, []string{proxy.URL()}, prefix, false, true, extra)
	w3name := "minicouch@" + w3.addr
	// Make room on w1 so that w3 takes some jobs: lower w1's max_jobs.
	w1.must("PUT", "/_node/_local/_config/replicator/max_jobs", `"3"`, 200)
	front.eventually("w3 runs jobs", 60*time.Second, func() bool {
		count := 0
		for _, node := range runningNodes(front) {
			if node == w3name {
				count++
			}
		}
		return count > 0
	})
	w1.must("PUT", "/_node/_local/_config/replicator/max_jobs", `"10"`, 200)
	cut := time.Now()
	proxy.Cut()
	front.eventually("w3's jobs on w1", 60*time.Second, func() bool {
		nodes := runningNodes(front)
		if len(nodes) != n {
			return false
		}
		for _, node := range nodes {
			if node != "minicouch@"+w1.addr {
				return false
			}
		}
		return true
	})
	moved := time.Since(cut)
	abandoned := strings.Count(w3.s.Log(), "node lease on the job queue lost")
	if abandoned == 0 {
		t.Fatalf("w3 never abandoned its jobs after the partition; log:\n%s", w3.s.Log())
	}
	if moved < 2*time.Second {
		t.Fatalf("w3's jobs ran on w1 %v after the cut, before w3 could have abandoned them", moved)
	}
	t.Logf("partition: w3 lost its lease %d times; its jobs ran on w1 %v after the cut", abandoned, moved.Round(100*time.Millisecond))
}

// TestE2EEtcdUnavailable (issue 13): a node started while its etcd is
// unreachable comes up anyway: _replicator writes are validated, while
// _replicate and _scheduler/* answer 503; once etcd answers, the doc
// written meanwhile becomes a job and replicates. When etcd goes away
// again, _scheduler/* answers 503 instead of hanging.
func TestE2EEtcdUnavailable(t *testing.T) {
	skipShort(t)
	etcdc := etcdtest.StartCluster(t, 1)
	proxy := startProxy(t, strings.TrimPrefix(etcdc.Endpoints()[0], "http://"))
	proxy.Cut()
	prefix := fmt.Sprintf("down-%d/", time.Now().UnixNano())
	c := newClusterNode(t, []string{proxy.URL()}, prefix, true, true, "")
	c.must("PUT", "/src", "", 201)
	c.putDocs("src", 0, 5)
	if code, body := c.req("PUT", "/_replicator/bad", `{"source":"x"}`); code != 403 {
		t.Fatalf("invalid doc with etcd down: %d %s, want 403 (validation needs no queue)", code, body)
	}
	c.must("PUT", "/_replicator/r", c.repDoc("src", "tgt", `,"create_target":true`), 201)
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/_replicate", fmt.Sprintf(`{"source":%q,"target":%q}`, c.endpoint("src"), c.endpoint("tgt2"))},
		{"GET", "/_scheduler/jobs", ""},
		{"GET", "/_scheduler/docs", ""},
	} {
		if code, body := c.req(r.method, r.path, r.body); code != 503 || !strings.Contains(body, `"service_unavailable"`) {
			t.Errorf("%s %s with etcd down: %d %s, want 503", r.method, r.path, code, body)
		}
	}
	proxy.Restore()
	c.waitUp()
	c.eventually("the doc written while etcd was down replicated", 60*time.Second, func() bool { return c.docCount("tgt") == 5 })
	c.must("PUT", "/_replicator/c", c.repDoc("src", "tgtc", `,"create_target":true,"continuous":true`), 201)
	c.eventually("a continuous replication caught up", 60*time.Second, func() bool { return c.docCount("tgtc") == 5 })

	proxy.Cut()
	start := time.Now()
	code, body := c.req("GET", "/_scheduler/jobs", "")
	if code != 503 || !strings.Contains(body, "job queue is unavailable") {
		t.Errorf("_scheduler/jobs with etcd gone: %d %s, want 503", code, body)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("_scheduler/jobs took %v to answer with etcd gone", d)
	}
	// Issue 30 item 6: an outage of the store is a degraded state, not a
	// dead plugin. Past the host's three failed health checks (a second
	// apart), the plugin still runs and still gives the true reason.
	for time.Since(start) < 8*time.Second {
		if code, body := c.req("GET", "/_scheduler/jobs", ""); code != 503 || !strings.Contains(body, "job queue is unavailable") {
			t.Fatalf("_scheduler/jobs %v into the outage: %d %s, want 503 saying the job queue is unavailable", time.Since(start).Round(time.Second), code, body)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if strings.Contains(c.s.Log(), "restarting") {
		t.Fatalf("the plugin was restarted during the store's outage; log:\n%s", c.s.Log())
	}
	proxy.Restore()
	c.putDocs("src", 5, 1)
	c.eventually("replicating again after the outage", 30*time.Second, func() bool { return c.docCount("tgtc") == 6 })
}
