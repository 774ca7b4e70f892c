package e2e

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/minicouchtest"
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/internal/jobstore"
	"github.com/couchepi/couchepi/plugin/kv/etcd/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// formatWatch follows every write of the queue's job records in etcd and
// counts the ones that wrote a record back in an older format than one
// already written for that job (a rewrite down).
type formatWatch struct {
	mu     sync.Mutex
	latest map[string]int    // job id → format of its last write
	most   map[string]int    // job id → newest format written for it
	doc    map[string]string // job id → its doc id
	writes map[int]int       // format → writes
	down   []string          // the rewrites down seen
	cancel context.CancelFunc
	done   chan struct{}
}

// watchFormats starts a formatWatch on the queue under prefix.
func watchFormats(t *testing.T, endpoints []string, prefix string) *formatWatch {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// The etcd key of the job rows of type rep_jobs: the store's data
	// prefix, the queue's, then the tuple (1, "rep_jobs") as package jobs
	// packs it (layout.go, tuple.go).
	var one [8]byte
	binary.BigEndian.PutUint64(one[:], 1^(1<<63))
	rows := prefix + "d/" + jobstore.QueuePrefix + "\x15" + string(one[:]) + "\x02" + jobdata.JobType + "\x00"
	w := &formatWatch{latest: map[string]int{}, most: map[string]int{}, doc: map[string]string{}, writes: map[int]int{}, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	ch := cli.Watch(ctx, rows, clientv3.WithPrefix())
	go func() {
		defer close(w.done)
		defer cli.Close()
		for resp := range ch {
			for _, ev := range resp.Events {
				id := strings.TrimSuffix(strings.TrimPrefix(string(ev.Kv.Key), rows+"\x02"), "\x00")
				w.record(id, ev.Type == clientv3.EventTypeDelete, ev.Kv.Value)
			}
		}
	}()
	t.Cleanup(w.stop)
	return w
}

// record notes one write of job id's row (a job row: format byte, state,
// …, data length at [37:41], data from [41]).
func (w *formatWatch) record(id string, deleted bool, row []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if deleted {
		delete(w.latest, id)
		delete(w.most, id)
		return
	}
	if len(row) < 41 {
		w.down = append(w.down, fmt.Sprintf("%s: malformed row %x", id, row))
		return
	}
	data := row[41:]
	if n := int(binary.BigEndian.Uint32(row[37:41])); n != len(data) {
		return // chunked: these tests' records are small
	}
	f := jobdata.FormatOf(data)
	w.writes[f]++
	var r struct {
		Node  string `json:"node"`
		State string `json:"state"`
		DocID string `json:"doc_id"`
	}
	json.Unmarshal(data, &r)
	w.doc[id] = r.DocID
	if f < w.most[id] {
		w.down = append(w.down, fmt.Sprintf("%s: format %d written after %d (node %q, state %s)", id, f, w.most[id], r.Node, r.State))
	}
	w.latest[id] = f
	w.most[id] = max(w.most[id], f)
}

// noneDown fails t if a record was written back in an older format.
func (w *formatWatch) noneDown(t *testing.T) {
	t.Helper()
	if _, down := w.report(); len(down) > 0 {
		t.Fatalf("%d records of the next format written back in an older one:\n%s", len(down), strings.Join(down, "\n"))
	}
}

func (w *formatWatch) stop() {
	w.cancel()
	<-w.done
}

// jobs returns the doc ids of the jobs whose last write was in format f.
func (w *formatWatch) jobs(f int) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ids []string
	for id, lf := range w.latest {
		if lf == f {
			ids = append(ids, w.doc[id])
		}
	}
	sort.Strings(ids)
	return ids
}

func (w *formatWatch) report() (writes map[int]int, down []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	writes = map[int]int{}
	for f, n := range w.writes {
		writes[f] = n
	}
	return writes, append([]string(nil), w.down...)
}

// upgradeNode is newClusterNodeEtcd with the replicator plugin binary
// given: this version's, or the next one's.
func upgradeNode(t *testing.T, endpoints []string, prefix, plugin string, frontend, replication bool) *couch {
	data := t.TempDir()
	cfg := e2eConfig + "job_store = etcd\nmax_jobs = 10\n" +
		"[etcd]\nendpoints = " + strings.Join(endpoints, ",") + "\nprefix = " + prefix + "\n" +
		"[chttpd_auth]\nsecret = " + clusterSecret(prefix) + "\n" +
		fmt.Sprintf("[node_types]\napi_frontend = %v\nreplication = %v\n", frontend, replication)
	s := minicouchtest.Start(t, minicouchtest.Options{Data: data, Config: cfg, Plugins: []string{plugin}})
	return &couch{t: t, s: s, addr: s.Addr}
}

// TestE2EMixedVersions (issue 39 item 5; make test-upgrade) upgrades a
// cluster on one etcd one node at a time while it replicates: an
// api_frontend and two replication nodes of this version, six continuous
// jobs; then a live swap of one replication node's plugin to the next
// version (a test-only build, tag couchepi_nextformat, that writes job
// records of the next format), that node killed (kill -9) while the other,
// still of this version, runs on, a node of the next version joining, and
// the last replication node swapped too. Through it all, no record of the
// next format is ever written back in this version's (every write of a
// job record in etcd is watched); the node of this version leaves the
// jobs of the next format alone, pending for a node that runs them
// (none fails, and their targets get nothing while no such node lives),
// while it runs the others; the frontend of this version lists every
// job; and jobs written by this version are run by the next one.
func TestE2EMixedVersions(t *testing.T) {
	if os.Getenv("COUCHEPI_UPGRADE") == "" {
		t.Skip("the mixed-version cluster test takes a few minutes: run it with make test-upgrade (COUCHEPI_UPGRADE=1)")
	}
	skipShort(t)
	etcdc := etcdtest.StartCluster(t, 1)
	prefix := fmt.Sprintf("e2e-upgrade-%d/", time.Now().UnixNano())
	cur := minicouchtest.Replicator(t, "v1")
	next := minicouchtest.MustBinary(t, minicouchtest.Build{Pkg: minicouchtest.ReplicatorPkg, LDFlags: "-X main.version=next",
		Tags: "couchepi_nextformat", Race: minicouchtest.RaceEnabled})
	const thisFormat, nextFormat = jobdata.Format, jobdata.Format + 1
	w := watchFormats(t, etcdc.Endpoints(), prefix)

	front := upgradeNode(t, etcdc.Endpoints(), prefix, cur, true, false)
	front.waitUp()
	a := upgradeNode(t, etcdc.Endpoints(), prefix, cur, false, true)
	b := upgradeNode(t, etcdc.Endpoints(), prefix, cur, false, true)
	const jobs = 6
	front.must("PUT", "/src", "", 201)
	docs := 5
	front.putDocs("src", 0, docs)
	for i := 0; i < jobs; i++ {
		front.must("PUT", fmt.Sprintf("/_replicator/r%d", i), front.repDoc("src", fmt.Sprintf("t%d", i), `,"continuous":true,"create_target":true`), 201)
	}
	caughtUp := func(what string, targets []int, n int) {
		t.Helper()
		for _, i := range targets {
			tgt := fmt.Sprintf("t%d", i)
			front.eventually(fmt.Sprintf("%s: %s has %d docs", what, tgt, n), 90*time.Second, func() bool { return front.docCount(tgt) == n })
		}
	}
	all := []int{0, 1, 2, 3, 4, 5}
	caughtUp("this version", all, docs)

	// 1. B upgraded in place (a live swap of its plugin): the jobs it runs
	// from then on are written in the next format.
	b.must("POST", "/_node/_local/_plugins/replicator/_reload", fmt.Sprintf(`{"path":%q}`, next), 200)
	front.eventually("jobs written in the next format", 90*time.Second, func() bool { return len(w.jobs(nextFormat)) >= 2 })
	front.putDocs("src", docs, 5)
	docs += 5
	caughtUp("mixed", all, docs)

	// 2. B killed: A, of this version, is the only replication node. It
	// runs the jobs of this version's format and leaves the others.
	b.s.Kill()
	newer := w.jobs(nextFormat)
	front.eventually("A leaves the jobs of the next format", 90*time.Second, func() bool {
		w.noneDown(t)
		return strings.Contains(a.s.Log(), "no live node runs their format")
	})
	front.putDocs("src", docs, 5)
	var older, behind []int
	for i := 0; i < jobs; i++ {
		if contains(newer, fmt.Sprintf("r%d", i)) {
			behind = append(behind, i)
		} else {
			older = append(older, i)
		}
	}
	caughtUp("A alone", older, docs+5)
	// The frontend, of this version, shows every job, none failed.
	front.eventually("every doc's job listed, none failed", 30*time.Second, func() bool {
		_, body := front.req("GET", "/_scheduler/docs/_replicator", "")
		var list struct {
			Docs []struct {
				DocID string `json:"doc_id"`
				State string `json:"state"`
			} `json:"docs"`
		}
		json.Unmarshal([]byte(body), &list)
		n := 0
		for _, d := range list.Docs {
			if d.State == "failed" || d.State == "completed" || d.State == "crashing" {
				t.Fatalf("doc %s is %s: %s", d.DocID, d.State, body)
			}
			n++
		}
		return n == jobs
	})
	for _, i := range behind {
		if n := front.docCount(fmt.Sprintf("t%d", i)); n != docs {
			t.Fatalf("t%d got %d docs while no node of the next version lived: a node of this version ran its job", i, n)
		}
	}
	docs += 5

	// 3. A node of the next version joins: it runs the jobs A left.
	upgradeNode(t, etcdc.Endpoints(), prefix, next, false, true)
	caughtUp("a node of the next version joined", all, docs)

	// 4. A upgraded in place: every job ends up in the next format (jobs
	// written by this version are run by the next one).
	a.must("POST", "/_node/_local/_plugins/replicator/_reload", fmt.Sprintf(`{"path":%q}`, next), 200)
	front.putDocs("src", docs, 5)
	docs += 5
	caughtUp("every node of the next version", all, docs)
	front.eventually("every job written in the next format", 90*time.Second, func() bool { return len(w.jobs(nextFormat)) == jobs })

	writes, _ := w.report()
	t.Logf("job record writes by format: this version (%d) %d, next (%d) %d; jobs of the next format left by A: %v",
		thisFormat, writes[thisFormat], nextFormat, writes[nextFormat], newer)
	w.noneDown(t)
	if writes[thisFormat] == 0 || writes[nextFormat] == 0 {
		t.Fatalf("writes by format %v: the test saw no mixed cluster", writes)
	}
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}
