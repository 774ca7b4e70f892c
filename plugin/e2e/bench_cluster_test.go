//go:build unix

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/minicouchtest"
	"github.com/couchepi/couchepi/plugin/kv/etcd/etcdtest"
)

// BenchmarkCluster (issue 39; make bench-cluster) measures a real cluster
// end to end, as an operator would: a 3-member etcd (each member a
// process of its own), one api_frontend-only minicouch holding every
// database and two replication-only minicouch with the replicator plugin,
// default settings but `idle_park_sec = 0` and `max_jobs` large enough.
// Each row runs on fresh nodes under a fresh etcd prefix and prints:
//
//   - start N: 4 writers PUT N continuous `_replicator` docs (20 sources,
//     a target each) one by one through the frontend; seconds until
//     `_scheduler/jobs` lists all N as running, from the first and from
//     the last write; the running jobs per node; then etcd's requests/s
//     at rest (COUCHEPI_BENCH_REST_SEC, 30 s). After the last start row a
//     third replication node joins: seconds until it holds 90 % of its
//     share, the spread over 3 nodes and etcd at rest again.
//   - failover N: one node runs N jobs, the other has max_jobs 0 until it
//     is raised just before the first is killed with SIGKILL; seconds
//     until all N run on the survivor, and until a doc written to every
//     source at the kill is on every target.
//   - handover N: the same with SIGTERM (a rolling restart).
//
// The binaries are built from this tree, or taken from
// COUCHEPI_BENCH_BIN (a directory with minicouch and replicator, e.g. the
// bin/ of `make build` in a worktree of an older commit), so one harness
// measures before and after. Sizes: COUCHEPI_BENCH_START (1000,10000),
// COUCHEPI_BENCH_FAILOVER (500,5000), COUCHEPI_BENCH_HANDOVER (1000); an
// empty list skips the rows, COUCHEPI_BENCH_JOIN=0 skips the join.
// COUCHEPI_BENCH_LIMIT (600 s) bounds every wait: a row that does not get
// there says so with the count it reached.
func BenchmarkCluster(b *testing.B) {
	if os.Getenv("COUCHEPI_BENCH_CLUSTER") == "" {
		b.Skip("set COUCHEPI_BENCH_CLUSTER=1 (make bench-cluster): takes minutes")
	}
	bc := newBenchCluster(b)
	for _, n := range benchSizes("COUCHEPI_BENCH_START", "1000,10000") {
		bc.start(n)
	}
	for _, n := range benchSizes("COUCHEPI_BENCH_FAILOVER", "500,5000") {
		bc.move(n, false)
	}
	for _, n := range benchSizes("COUCHEPI_BENCH_HANDOVER", "1000") {
		bc.move(n, true)
	}
	bc.report()
}

// benchSources is how many source dbs the jobs of a row share.
const benchSources = 20

type benchCluster struct {
	b          *testing.B
	etcd       *etcdtest.Cluster
	minicouch  string
	replicator string
	limit      time.Duration
	rest       time.Duration
	join       bool
	rows       []string
	row        int
	began      time.Time
	etcdPIDs   []int
}

func newBenchCluster(b *testing.B) *benchCluster {
	bc := &benchCluster{b: b, limit: benchSeconds("COUCHEPI_BENCH_LIMIT", 600), rest: benchSeconds("COUCHEPI_BENCH_REST_SEC", 30),
		join: os.Getenv("COUCHEPI_BENCH_JOIN") != "0", began: time.Now()}
	if dir := os.Getenv("COUCHEPI_BENCH_BIN"); dir != "" {
		bc.minicouch, bc.replicator = filepath.Join(dir, "minicouch"), filepath.Join(dir, "replicator")
		for _, p := range []string{bc.minicouch, bc.replicator} {
			if _, err := os.Stat(p); err != nil {
				b.Fatalf("COUCHEPI_BENCH_BIN: %v", err)
			}
		}
	} else {
		bc.minicouch, bc.replicator = minicouchtest.Minicouch(b), minicouchtest.Replicator(b, "")
	}
	bc.etcd = etcdtest.StartProcessCluster(b, 3)
	for _, ep := range bc.etcd.Endpoints() {
		port, _ := strconv.Atoi(ep[strings.LastIndexByte(ep, ':')+1:])
		bc.etcdPIDs = append(bc.etcdPIDs, listenerPID(port))
	}
	bc.printf("binaries: %s, %s; etcd %s", bc.minicouch, bc.replicator, strings.Join(bc.etcd.Endpoints(), ","))
	return bc
}

func benchSizes(env, def string) []int {
	v, ok := os.LookupEnv(env)
	if !ok {
		v = def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	return out
}

func benchSeconds(env string, def int) time.Duration {
	if n, err := strconv.Atoi(os.Getenv(env)); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return time.Duration(def) * time.Second
}

// printf prints a progress line at once (the figures are long in coming).
func (bc *benchCluster) printf(format string, args ...any) {
	fmt.Printf("bench-cluster %6.1fs  %s\n", time.Since(bc.began).Seconds(), fmt.Sprintf(format, args...))
}

// result records one line of the final table.
func (bc *benchCluster) result(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	if avg, err := os.ReadFile("/proc/loadavg"); err == nil {
		line += fmt.Sprintf(" [load %s]", strings.Join(strings.Fields(string(avg))[:3], " "))
	}
	bc.rows = append(bc.rows, line)
	bc.printf("RESULT %s", line)
}

func (bc *benchCluster) report() {
	fmt.Printf("\nbench-cluster results (%s, %s, total %s):\n", bc.minicouch, bc.replicator, time.Since(bc.began).Round(time.Second))
	for _, r := range bc.rows {
		fmt.Println("  " + r)
	}
}

// benchNode is one minicouch of a row.
type benchNode struct {
	*couch
	name string // as _scheduler/jobs names it
}

// node starts a minicouch of the row under prefix.
func (bc *benchCluster) node(prefix string, frontend, replication bool, maxJobs int) *benchNode {
	cfg := "[replicator]\njob_store = etcd\nidle_park_sec = 0\n" + fmt.Sprintf("max_jobs = %d\n", maxJobs) +
		"[etcd]\nendpoints = " + strings.Join(bc.etcd.Endpoints(), ",") + "\nprefix = " + prefix + "\n" +
		"[chttpd_auth]\nsecret = " + clusterSecret(prefix) + "\n" +
		fmt.Sprintf("[node_types]\napi_frontend = %v\nreplication = %v\n", frontend, replication)
	s := minicouchtest.Start(bc.b, minicouchtest.Options{Bin: bc.minicouch, Data: bc.b.TempDir(), Config: cfg,
		Plugins: []string{bc.replicator}, StopTimeout: 2 * time.Minute})
	c := &couch{t: bc.b, s: s, addr: s.Addr}
	if frontend {
		c.waitUp()
	} else {
		c.waitPlugin()
	}
	return &benchNode{couch: c, name: "minicouch@" + s.Addr}
}

// cpuTimes is the CPU time used so far by the row's frontend, its
// replication nodes (minicouch and plugin processes) and the etcd members.
type cpuTimes struct{ front, nodes, etcd time.Duration }

func (r *benchRow) cpu() cpuTimes {
	var c cpuTimes
	proc := func(n *benchNode) time.Duration {
		d := readProc(n.s.PID()).cpu
		if pid, err := n.s.PluginPID("replicator"); err == nil {
			d += readProc(pid).cpu
		}
		return d
	}
	c.front = proc(r.front)
	for _, n := range r.nodes {
		c.nodes += proc(n)
	}
	for _, pid := range r.bc.etcdPIDs {
		c.etcd += readProc(pid).cpu
	}
	return c
}

// since says the CPU used since c, per job.
func (r *benchRow) cpuSince(c cpuTimes, jobs int) string {
	now := r.cpu()
	front, nodes, etcd := now.front-c.front, now.nodes-c.nodes, now.etcd-c.etcd
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(max(jobs, 1)) }
	return fmt.Sprintf("CPU frontend %s, replication nodes %s, etcd %s (%.1f ms per job)",
		secs(front), secs(nodes), secs(etcd), ms(front+nodes+etcd))
}

// benchRow is one row's cluster: a frontend holding the dbs and its
// replication nodes.
type benchRow struct {
	bc     *benchCluster
	prefix string
	front  *benchNode
	nodes  []*benchNode
	client *http.Client
	listed int // jobs _scheduler/jobs listed at the last poll
	// lastStart is when the last running job started, at the last full poll.
	lastStart time.Time
	pprof     string // the frontend plugin's profile address (COUCHEPI_BENCH_PPROF)
	// pprofNode is the first replication node's (the survivor's in a
	// failover or handover row).
	pprofNode string
	// pprofCouch are the profile addresses of the frontend's and the first
	// replication node's minicouch processes.
	pprofCouch, pprofNodeCouch string
}

// saveGoroutines saves the goroutines of the frontend's plugin and of the
// first replication node's under COUCHEPI_BENCH_PPROF, to see where the
// time goes.
func (r *benchRow) saveGoroutines(tag string) {
	for name, addr := range map[string]string{"front": r.pprof, "node": r.pprofNode} {
		if addr == "" {
			continue
		}
		resp, err := http.Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
		if err != nil {
			r.bc.printf("pprof: %v", err)
			continue
		}
		f, err := os.Create(filepath.Join(os.Getenv("COUCHEPI_BENCH_PPROF"), fmt.Sprintf("%s-%s-%s.txt", name, strings.TrimSuffix(r.prefix, "/"), tag)))
		if err == nil {
			bufio.NewReader(resp.Body).WriteTo(f)
			f.Close()
		}
		resp.Body.Close()
	}
}

// profiled runs start, which starts nodes, with COUCHEPI_BENCH_PPROF set:
// their plugins serve Go's profiles on a free address, which it returns
// ("" without the variable).
func profiled(b *testing.B, start func()) (plugin, couch string) {
	if os.Getenv("COUCHEPI_BENCH_PPROF") == "" {
		start()
		return "", ""
	}
	plugin, err := minicouchtest.FreeAddr()
	if err == nil {
		couch, err = minicouchtest.FreeAddr()
	}
	if err != nil {
		b.Fatal(err)
	}
	// The plugin inherits the environment through minicouch.
	os.Setenv("COUCHEPI_REPLICATOR_PPROF", plugin)
	os.Setenv("MINICOUCH_PPROF", couch)
	defer os.Unsetenv("COUCHEPI_REPLICATOR_PPROF")
	defer os.Unsetenv("MINICOUCH_PPROF")
	start()
	return plugin, couch
}

// saveCPUProfiles saves CPU profiles of the row's profiled processes over
// the next d under COUCHEPI_BENCH_PPROF, in the background.
func (r *benchRow) saveCPUProfiles(tag string, d time.Duration) {
	for name, addr := range map[string]string{"front-plugin": r.pprof, "node-plugin": r.pprofNode,
		"front-couch": r.pprofCouch, "node-couch": r.pprofNodeCouch} {
		if addr == "" {
			continue
		}
		go func() {
			resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, int(d.Seconds())))
			if err != nil {
				r.bc.printf("pprof: %v", err)
				return
			}
			defer resp.Body.Close()
			f, err := os.Create(filepath.Join(os.Getenv("COUCHEPI_BENCH_PPROF"), fmt.Sprintf("cpu-%s-%s-%s.pb.gz", name, strings.TrimSuffix(r.prefix, "/"), tag)))
			if err == nil {
				bufio.NewReader(resp.Body).WriteTo(f)
				f.Close()
			}
		}()
	}
}

func (bc *benchCluster) newRow(name string) *benchRow {
	bc.row++
	r := &benchRow{bc: bc, prefix: fmt.Sprintf("bench-%d-%d-%s/", time.Now().UnixNano(), bc.row, name),
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}, Timeout: 2 * time.Minute}}
	r.pprof, r.pprofCouch = profiled(bc.b, func() { r.front = bc.node(r.prefix, true, false, 0) })
	for i := 0; i < benchSources; i++ {
		r.front.must("PUT", fmt.Sprintf("/src%02d", i), "", 201)
		r.front.putDocs(fmt.Sprintf("src%02d", i), 0, 5)
	}
	return r
}

// saveLogs keeps the logs of nodes under COUCHEPI_BENCH_PPROF.
func (r *benchRow) saveLogs(nodes []*benchNode) {
	dir := os.Getenv("COUCHEPI_BENCH_PPROF")
	if dir == "" {
		return
	}
	for i, n := range nodes {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("node%d-%s.log", i, strings.TrimSuffix(r.prefix, "/"))), []byte(n.s.Log()), 0o644)
	}
}

// close kills the row's nodes: their jobs are under a prefix no one reads.
func (r *benchRow) close() {
	for _, n := range append([]*benchNode{r.front}, r.nodes...) {
		n.s.Kill()
	}
	r.client.CloseIdleConnections()
}

func (r *benchRow) doc(i int) string {
	return fmt.Sprintf(`{"source":%q,"target":%q,"continuous":true,"create_target":true}`,
		r.front.endpoint(fmt.Sprintf("src%02d", i%benchSources)), r.front.endpoint(fmt.Sprintf("t%05d", i)))
}

// do sends one request to the frontend as the admin.
func (r *benchRow) do(method, path, body string) (int, error) {
	req, err := http.NewRequest(method, r.front.s.URL+strings.TrimPrefix(path, "/"), strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.SetBasicAuth("admin", "pass")
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = bufio.NewReader(resp.Body).WriteTo(discard{})
	return resp.StatusCode, err
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// parallel runs fn(i) for i in [0, n) on workers goroutines.
func parallel(n, workers int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				fn(i)
			}
		}()
	}
	wg.Wait()
}

// running reads the frontend's _scheduler/jobs: the running jobs per node
// (and how many jobs it lists in all). ok is false when the read failed.
func (r *benchRow) running() (total int, per map[string]int, ok bool) {
	code, body := r.front.req("GET", "/_scheduler/jobs?limit=1000000", "") // the default limit is 100
	var list struct {
		Jobs []struct {
			Node    any `json:"node"`
			PID     any `json:"pid"`
			History []struct {
				Timestamp time.Time `json:"timestamp"`
				Type      string    `json:"type"`
			} `json:"history"`
		} `json:"jobs"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &list) != nil {
		return 0, nil, false
	}
	per = map[string]int{}
	r.lastStart = time.Time{}
	for _, j := range list.Jobs {
		if j.PID != nil {
			n, _ := j.Node.(string)
			per[n]++
			total++
			for _, ev := range j.History { // newest first
				if ev.Type == "started" {
					if ev.Timestamp.After(r.lastStart) {
						r.lastStart = ev.Timestamp
					}
					break
				}
			}
		}
	}
	r.listed = len(list.Jobs)
	return total, per, true
}

// startedBy is when the last of the running jobs started, by their own
// records (the end of the second of its "started" event: they count in
// whole seconds), once a poll saw them all running at at: a poll of 1,000
// jobs takes seconds under load, so the poll's time says less. It is
// never later than at, which it returns when the records cannot be read.
func (r *benchRow) startedBy(at time.Time) time.Time {
	for i := 0; i < 5; i++ {
		if _, _, ok := r.running(); ok && !r.lastStart.IsZero() {
			// A job that started again since the poll (rebalanced, say)
			// does not make it later than the poll saw.
			if end := r.lastStart.Add(time.Second); end.Before(at) {
				return end
			}
			return at
		}
		time.Sleep(time.Second)
	}
	return at
}

// count reads how many jobs _scheduler/jobs lists as running, and in all,
// without their records (a cheaper read than running's); ok is false when
// a read failed.
func (r *benchRow) count() (running int, ok bool) {
	rows := func(query string) (int, bool) {
		code, body := r.front.req("GET", "/_scheduler/jobs?limit=0"+query, "")
		var list struct {
			TotalRows *int `json:"total_rows"`
		}
		if code != 200 || json.Unmarshal([]byte(body), &list) != nil || list.TotalRows == nil {
			return 0, false
		}
		return *list.TotalRows, true
	}
	running, ok = rows("&states=running")
	if listed, lok := rows(""); ok && lok {
		r.listed = listed
	}
	return running, ok
}

// waitRunning polls until cond holds of the running jobs, no more often
// than every half second and never more than a third of the time (a read
// of 10,000 jobs is work for the frontend and etcd); false after limit.
// With perNode it reads every running job's node (running), else only
// the count (count; per is then nil). A failed read counts for nothing.
func (r *benchRow) waitRunning(limit time.Duration, perNode bool, cond func(total int, per map[string]int) bool) (int, map[string]int, bool) {
	began := time.Now()
	deadline := began.Add(limit)
	var said time.Time
	total, per, failed := 0, map[string]int{}, 0
	for {
		polled := time.Now()
		var t int
		var p map[string]int
		ok := false
		if perNode {
			t, p, ok = r.running()
		} else {
			t, ok = r.count()
		}
		if ok {
			total, per = t, p
			if cond(total, per) {
				return total, per, true
			}
		} else {
			failed++
		}
		if time.Now().After(deadline) {
			return total, per, false
		}
		if time.Since(said) >= 5*time.Second {
			r.bc.printf("  after %s: %d running, %d jobs listed (read took %s; %d reads failed)", secs(time.Since(began)), total, r.listed, time.Since(polled).Round(time.Millisecond), failed)
			r.saveGoroutines(fmt.Sprintf("%03.0fs", time.Since(began).Seconds()))
			said = time.Now()
		}
		time.Sleep(max(500*time.Millisecond, 2*time.Since(polled)))
	}
}

// spreadNow reads the running jobs per node, retrying a failed read.
func (r *benchRow) spreadNow() map[string]int {
	for i := 0; ; i++ {
		_, per, ok := r.running()
		if ok || i == 5 {
			return per
		}
		time.Sleep(time.Second)
	}
}

// spread says how many jobs run on each node and the largest deviation
// from an even share.
func (r *benchRow) spread(per map[string]int) string {
	var counts []string
	total, worst := 0, 0.0
	for _, n := range r.nodes {
		total += per[n.name]
	}
	for _, n := range r.nodes {
		counts = append(counts, strconv.Itoa(per[n.name]))
		if total > 0 {
			share := float64(total) / float64(len(r.nodes))
			worst = max(worst, 100*abs(float64(per[n.name])-share)/share)
		}
	}
	return fmt.Sprintf("%s (±%.1f %%)", strings.Join(counts, "/"), worst)
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

// start writes n docs with 4 writers and waits until all n jobs run on
// the row's 2 replication nodes; on the last start row a third joins.
func (bc *benchCluster) start(n int) {
	r := bc.newRow(fmt.Sprint("start", n))
	defer r.close()
	defer func() { r.saveLogs(append([]*benchNode{r.front}, r.nodes...)) }()
	var node0 *benchNode
	r.pprofNode, r.pprofNodeCouch = profiled(bc.b, func() { node0 = bc.node(r.prefix, false, true, n) })
	r.nodes = []*benchNode{node0, bc.node(r.prefix, false, true, n)}
	bc.printf("start %d: writing docs", n)
	var failed atomic.Int64
	cpu, etcd := r.cpu(), bc.etcdMetrics()
	first := time.Now()
	if os.Getenv("COUCHEPI_BENCH_PPROF") != "" {
		r.saveCPUProfiles("start", benchSeconds("COUCHEPI_BENCH_CPU_SEC", 30))
	}
	writing := make(chan struct{})
	go func() {
		for {
			select {
			case <-writing:
				return
			case <-time.After(5 * time.Second):
				r.saveGoroutines(fmt.Sprintf("write-%03.0fs", time.Since(first).Seconds()))
			}
		}
	}()
	parallel(n, 4, func(i int) {
		if code, err := r.do("PUT", fmt.Sprintf("/_replicator/r%05d", i), r.doc(i)); err != nil || code != 201 {
			if failed.Add(1) == 1 {
				bc.printf("start %d: doc %d: %d %v", n, i, code, err)
			}
		}
	})
	last := time.Now()
	close(writing)
	bc.printf("start %d: %d docs written in %s (%d failed); waiting for the jobs", n, n, secs(last.Sub(first)), failed.Load())
	total, _, ok := r.waitRunning(bc.limit, false, func(total int, _ map[string]int) bool { return total >= n })
	bc.printf("start %d: while writing and waiting: %s", n, etcdRates(etcd, bc.etcdMetrics(), time.Since(first)))
	if !ok {
		// No spread: reading every job again can take minutes on a
		// cluster that did not get there.
		bc.result("start %5d jobs, 2 nodes: writes %s; NOT all running %s after the last write: %d of %d (%d jobs listed); %s",
			n, secs(last.Sub(first)), secs(bc.limit), total, n, r.listed, r.cpuSince(cpu, n))
		return
	}
	seen := time.Now()
	cpuUsed := r.cpuSince(cpu, n)
	done := r.startedBy(seen)
	bc.result("start %5d jobs, 2 nodes: writes %s; all running %s after the first write, %s after the last (a poll saw it after %s); spread %s; %s",
		n, secs(last.Sub(first)), secs(done.Sub(first)), secs(done.Sub(last)), secs(seen.Sub(last)), r.spread(r.spreadNow()), cpuUsed)
	bc.atRest(r, fmt.Sprintf("%d jobs, 2 nodes", n))
	if !bc.join || n != slices.Max(benchSizes("COUCHEPI_BENCH_START", "1000,10000")) {
		return
	}
	r.nodes = append(r.nodes, bc.node(r.prefix, false, true, n))
	joined := time.Now()
	third := r.nodes[2].name
	share := n / 3
	_, per, ok := r.waitRunning(bc.limit, true, func(_ int, per map[string]int) bool { return per[third] >= share*9/10 })
	if ok {
		bc.result("join  %5d jobs, 3rd node: 90 %% of its share after %s; spread %s", n, secs(time.Since(joined)), r.spread(per))
	} else {
		bc.result("join  %5d jobs, 3rd node: NOT 90 %% of its share after %s; spread %s", n, secs(bc.limit), r.spread(per))
	}
	time.Sleep(30 * time.Second)
	per = r.spreadNow()
	bc.result("      %5d jobs, 3 nodes, 30 s later: spread %s", n, r.spread(per))
	bc.atRest(r, fmt.Sprintf("%d jobs, 3 nodes", n))
}

// move runs n jobs on one replication node, then kills it (or stops it
// cleanly) and waits until all run on the other and a doc written to
// every source at the stop reaches every target.
func (bc *benchCluster) move(n int, clean bool) {
	what := "failover"
	if clean {
		what = "handover"
	}
	r := bc.newRow(fmt.Sprint(what, n))
	defer r.close()
	var survivor *benchNode
	r.pprofNode, r.pprofNodeCouch = profiled(bc.b, func() { survivor = bc.node(r.prefix, false, true, 0) })
	victim := bc.node(r.prefix, false, true, n+10)
	r.nodes = []*benchNode{victim, survivor}
	defer r.saveLogs([]*benchNode{r.front, victim, survivor})
	setup := time.Now()
	for k := 0; k < n; k += 500 {
		var docs []string
		for i := k; i < min(k+500, n); i++ {
			docs = append(docs, fmt.Sprintf(`{"_id":"r%05d",`, i)+strings.TrimPrefix(r.doc(i), "{"))
		}
		r.front.must("POST", "/_replicator/_bulk_docs", `{"docs":[`+strings.Join(docs, ",")+`]}`, 201)
	}
	total, _, ok := r.waitRunning(bc.limit, false, func(total int, _ map[string]int) bool { return total >= n })
	if !ok {
		bc.result("%s %5d jobs: setup: only %d of %d running after %s", what, n, total, n, secs(bc.limit))
		return
	}
	replicated := func(i int) bool { return r.front.docCount(fmt.Sprintf("t%05d", i)) >= 5 }
	if missing := r.waitTargets(n, bc.limit, replicated); missing > 0 {
		bc.result("%s %5d jobs: setup: %d targets not replicated after %s", what, n, missing, secs(bc.limit))
		return
	}
	bc.printf("%s %d: setup took %s", what, n, secs(time.Since(setup)))
	survivor.must("PUT", "/_node/_local/_config/replicator/max_jobs", fmt.Sprintf(`"%d"`, n+10), 200)
	moved := r.spreadNow()[victim.name]
	r.nodes = []*benchNode{survivor} // the CPU counted from here on
	defer victim.s.Kill()
	cpu := r.cpu()
	if os.Getenv("COUCHEPI_BENCH_PPROF") != "" {
		r.saveCPUProfiles("move", benchSeconds("COUCHEPI_BENCH_CPU_SEC", 30))
	}
	stopped := time.Now()
	exited := make(chan time.Duration, 1)
	if clean {
		victim.s.Signal(syscall.SIGTERM)
		go func() {
			if _, ok := victim.s.Wait(bc.limit); ok {
				exited <- time.Since(stopped)
			}
		}()
	} else {
		victim.s.Kill()
	}
	parallel(benchSources, 4, func(i int) {
		r.front.must("PUT", fmt.Sprintf("/src%02d/after", i), `{"at":"stop"}`, 201)
	})
	_, per, ok := r.waitRunning(bc.limit, true, func(_ int, per map[string]int) bool { return per[survivor.name] >= n })
	if !ok {
		bc.result("%s %5d jobs (%d on the stopped node): NOT all running on the other after %s: %d of %d", what, n, moved, secs(bc.limit), per[survivor.name], n)
		return
	}
	seen := time.Now()
	running := r.startedBy(seen).Sub(stopped)
	missing := r.waitTargets(n, bc.limit, func(i int) bool {
		code, err := r.do("GET", fmt.Sprintf("/t%05d/after", i), "")
		return err == nil && code == 200
	})
	written := time.Since(stopped)
	if missing > 0 {
		bc.result("%s %5d jobs (%d on the stopped node): all running on the other %s after the stop; the write at the stop NOT on %d targets after %s",
			what, n, moved, secs(running), missing, secs(written))
		return
	}
	exit := ""
	select {
	case d := <-exited:
		exit = fmt.Sprintf("the stopped node exited after %s; ", secs(d))
	default:
	}
	bc.result("%s %5d jobs (%d on the stopped node): %sall running on the other %s after the stop; the write at the stop on every target after %s; %s",
		what, n, moved, exit, secs(running), secs(written), r.cpuSince(cpu, n))
}

// waitTargets waits until done(i) holds for every target i in [0, n)
// and returns for how many it did not within limit.
func (r *benchRow) waitTargets(n int, limit time.Duration, done func(i int) bool) int {
	left := make([]int, n)
	for i := range left {
		left[i] = i
	}
	deadline := time.Now().Add(limit)
	for len(left) > 0 && time.Now().Before(deadline) {
		var mu sync.Mutex
		var still []int
		parallel(len(left), 8, func(k int) {
			if !done(left[k]) {
				mu.Lock()
				still = append(still, left[k])
				mu.Unlock()
			}
		})
		left = still
		if len(left) > 0 {
			time.Sleep(200 * time.Millisecond)
		}
	}
	return len(left)
}

// atRest measures what the etcd members serve while the row's cluster is
// at rest: requests/s (gRPC messages received, summed over the members)
// by method, and proposals committed/s (the writes).
func (bc *benchCluster) atRest(r *benchRow, what string) {
	time.Sleep(5 * time.Second)
	before := bc.etcdMetrics()
	time.Sleep(bc.rest)
	bc.result("rest  %s: %s", what, etcdRates(before, bc.etcdMetrics(), bc.rest))
}

// etcdRates says what etcd served between two reads of its metrics d
// apart: requests/s by method, proposals committed/s (the writes).
func etcdRates(before, after map[string]float64, d time.Duration) string {
	per := map[string]float64{}
	var reqs float64
	for k, v := range after {
		if method, ok := strings.CutPrefix(k, "msg:"); ok {
			if r := (v - before[k]) / d.Seconds(); r > 0 {
				per[method] += r
				reqs += r
			}
		}
	}
	methods := make([]string, 0, len(per))
	for m := range per {
		methods = append(methods, m)
	}
	sort.Slice(methods, func(i, j int) bool { return per[methods[i]] > per[methods[j]] })
	var parts []string
	for _, m := range methods {
		parts = append(parts, fmt.Sprintf("%s %.1f", m, per[m]))
	}
	proposals := (after["proposals"] - before["proposals"]) / d.Seconds()
	return fmt.Sprintf("etcd %.1f requests/s (%s), %.1f proposals committed/s, over %s", reqs, strings.Join(parts, ", "), proposals, secs(d))
}

// etcdMetrics reads the members' /metrics: "msg:<method>" is
// grpc_server_msg_received_total summed over the members (each request
// reaches one member), "proposals" etcd_server_proposals_committed_total
// of the first member (every member commits every proposal).
func (bc *benchCluster) etcdMetrics() map[string]float64 {
	out := map[string]float64{}
	for i, ep := range bc.etcd.Endpoints() {
		resp, err := http.Get(ep + "/metrics")
		if err != nil {
			bc.b.Fatalf("etcd metrics: %v", err)
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			name, rest, _ := strings.Cut(line, " ")
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				continue
			}
			switch {
			case strings.HasPrefix(name, "grpc_server_msg_received_total{"):
				out["msg:"+label(name, "grpc_method")] += v
			case name == "etcd_server_proposals_committed_total" && i == 0:
				out["proposals"] = v
			}
		}
		resp.Body.Close()
	}
	return out
}

// label returns the value of label key in a Prometheus series name.
func label(series, key string) string {
	_, after, ok := strings.Cut(series, key+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(after, `"`)
	return v
}
