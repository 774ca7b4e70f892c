package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/minicouchtest"
)

// Issue 15's many-replications benchmarks. The figures the issue asks for
// come from the full size (COUCHEPI_PARK_DBS=10000, COUCHEPI_PARK_SECONDS=60);
// by default they run at a tenth of it so that `make bench` stays short.
// With COUCHEPI_COUCHDB_URL (a CouchDB's URL with admin credentials) each
// runs a second time against that CouchDB, in the same run, and logs the
// ratios.
//
//	COUCHEPI_PARK_DBS=10000 COUCHEPI_PARK_SECONDS=60 go test ./plugin/e2e -run '^$' -bench 'Park' -benchtime 1x -timeout 120m
//
// COUCHEPI_PARK_CONFIG adds [replicator] settings ("max_batches_per_host = 256;idle_park_sec = 10").

// parkScale reads the benchmark's size from the environment.
func parkScale(defDBs int) (dbs int, phase time.Duration) {
	dbs, phase = defDBs, 20*time.Second
	if v, err := strconv.Atoi(os.Getenv("COUCHEPI_PARK_DBS")); err == nil && v > 0 {
		dbs = v
	}
	if v, err := strconv.Atoi(os.Getenv("COUCHEPI_PARK_SECONDS")); err == nil && v > 0 {
		phase = time.Duration(v) * time.Second
	}
	return dbs, phase
}

// peer is the CouchDB-compatible server a park benchmark runs against:
// minicouch with the replicator, started by the benchmark, or the CouchDB
// at COUCHEPI_COUCHDB_URL.
type peer struct {
	b       *testing.B
	name    string
	base    *url.URL // with admin credentials
	client  *http.Client
	prefix  string        // of every db the benchmark creates
	repDB   string        // the replicator db the benchmark writes to
	catchUp time.Duration // longest wait for the first replication of every source
	// server and plugin are the processes whose CPU and memory are
	// measured (plugin 0: none).
	server, plugin int
	goroutines     func() float64 // the replicator's goroutines, -1 unknown
	// counters reads the replicator's Prometheus counters (nil: none).
	counters func() map[string]float64
	stop     func()
	// sourceBase, when set, is the server URL replication docs name their
	// sources under (a counting proxy, see sourceProxy).
	sourceBase *url.URL
}

// startMinicouchPeer runs minicouch with the replicator at CouchDB's
// scheduler defaults (max_jobs 500 …), unlike startCouch's fast test ones.
// COUCHEPI_PARK_MAX_JOBS sets another max_jobs (a cheaper reproduction of
// the full size: fewer dbs, proportionally fewer slots).
func startMinicouchPeer(b *testing.B) *peer { return startMinicouchPeerWith(b, "") }

// startMinicouchPeerWith is startMinicouchPeer with more [replicator] settings.
func startMinicouchPeerWith(b *testing.B, extra string) *peer {
	data := b.TempDir()
	if v, err := strconv.Atoi(os.Getenv("COUCHEPI_PARK_MAX_JOBS")); err == nil && v >= 0 {
		extra = fmt.Sprintf("max_jobs = %d\n", v)
	}
	// COUCHEPI_PARK_CONFIG: more [replicator] settings, ";"-separated
	// (a setting's effect on these benchmarks).
	for _, kv := range strings.Split(os.Getenv("COUCHEPI_PARK_CONFIG"), ";") {
		if strings.TrimSpace(kv) != "" {
			extra += strings.TrimSpace(kv) + "\n"
		}
	}
	s := minicouchtest.Start(b, minicouchtest.Options{Data: data, StopTimeout: time.Minute,
		Config:  "[replicator]\njobs_store = " + filepath.Join(data, "replicator.db") + "\n" + extra + "[log]\nlevel = warn\n",
		Plugins: []string{minicouchtest.Replicator(b, "v1")}})
	c := &couch{t: b, s: s, addr: s.Addr}
	c.waitUp()
	_, plugin := c.pluginInfo()
	base, _ := url.Parse(c.url())
	return &peer{b: b, name: "minicouch", base: base, client: benchClient(), repDB: "_replicator",
		catchUp: time.Hour, server: s.PID(), plugin: plugin, goroutines: c.pluginGoroutines, counters: c.pluginCounters, stop: c.stop}
}

// couchDBPeer is the CouchDB at COUCHEPI_COUCHDB_URL, nil when unset. The
// benchmark's dbs are prefixed with the time and deleted at the end; its
// replications are in their own replicator db (prefix/_replicator), which
// is deleted first so that CouchDB stops them.
func couchDBPeer(b *testing.B) *peer {
	raw := os.Getenv("COUCHEPI_COUCHDB_URL")
	if raw == "" {
		return nil
	}
	base, err := url.Parse(strings.TrimSuffix(raw, "/") + "/")
	if err != nil {
		b.Fatalf("COUCHEPI_COUCHDB_URL: %v", err)
	}
	p := &peer{b: b, base: base, client: benchClient(), prefix: fmt.Sprintf("parkbench%d_", time.Now().Unix()),
		catchUp: 10 * time.Minute, goroutines: func() float64 { return -1 }}
	if v, err := strconv.Atoi(os.Getenv("COUCHEPI_COUCHDB_CATCHUP_SECONDS")); err == nil && v > 0 {
		p.catchUp = time.Duration(v) * time.Second
	}
	var info struct{ Version string }
	json.Unmarshal([]byte(p.must("GET", "/", "", 200)), &info)
	p.name = "couchdb-" + info.Version
	p.repDB = p.prefix + "/_replicator"
	p.must("PUT", "/"+url.PathEscape(p.repDB), "", 201)
	port, _ := strconv.Atoi(base.Port())
	p.server = listenerPID(port)
	p.stop = func() {
		p.req("DELETE", "/"+url.PathEscape(p.repDB), "")
		var all []string
		json.Unmarshal([]byte(p.must("GET", "/_all_dbs", "", 200)), &all)
		var mine []string
		for _, db := range all {
			if strings.HasPrefix(db, p.prefix) {
				mine = append(mine, db)
			}
		}
		p.parallel(mine, func(db string) { p.req("DELETE", "/"+url.PathEscape(db), "") })
	}
	return p
}

func benchClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 5 * time.Minute}
}

// listenerPID finds the process listening on 127.0.0.1:port (0 if none
// found), through /proc.
func listenerPID(port int) int {
	raw, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return 0
	}
	inode := ""
	for _, line := range strings.Split(string(raw), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 9 && f[3] == "0A" && strings.HasSuffix(f[1], fmt.Sprintf(":%04X", port)) {
			inode = f[9]
		}
	}
	if inode == "" {
		return 0
	}
	procs, _ := os.ReadDir("/proc")
	for _, d := range procs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); l == "socket:["+inode+"]" {
				return pid
			}
		}
	}
	return 0
}

// req sends a request as the peer's admin.
func (p *peer) req(method, path, body string) (int, string) {
	req, err := http.NewRequest(method, strings.TrimSuffix(p.base.String(), "/")+path, strings.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	pass, _ := p.base.User.Password()
	req.SetBasicAuth(p.base.User.Username(), pass)
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (p *peer) must(method, path, body string, want int) string {
	p.b.Helper()
	code, resp := p.req(method, path, body)
	if code != want {
		p.b.Fatalf("%s: %s %s: %d %s (want %d)", p.name, method, path, code, resp, want)
	}
	return resp
}

// endpoint is db's URL with credentials, as a replication doc names it.
func (p *peer) endpoint(db string) string { return p.base.String() + url.PathEscape(db) }

func (p *peer) repDoc(id, src, tgt, extra string) string {
	srcURL := p.endpoint(src)
	if p.sourceBase != nil {
		srcURL = p.sourceBase.String() + url.PathEscape(src)
	}
	return fmt.Sprintf(`{"_id":%q,"source":%q,"target":%q,"continuous":true%s}`, id, srcURL, p.endpoint(tgt), extra)
}

func (p *peer) docCount(db string) int {
	return docCountOf(p.req("GET", "/"+url.PathEscape(db), ""))
}

// parallel calls fn for every item from 8 goroutines.
func (p *peer) parallel(items []string, fn func(string)) {
	ch := make(chan string)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range ch {
				fn(it)
			}
		}()
	}
	for _, it := range items {
		ch <- it
	}
	close(ch)
	wg.Wait()
}

// createDBs creates the dbs (8 clients at once), each with one seed doc
// ("seed_" + db) when seed is set, and returns how long it took.
func (p *peer) createDBs(dbs []string, seed bool) time.Duration {
	start := time.Now()
	var mu sync.Mutex
	var failed []string
	p.parallel(dbs, func(db string) {
		code, body := p.req("PUT", "/"+url.PathEscape(db), "")
		if code == 201 && seed {
			// Ids unique across dbs: a fan-in target holds one per source.
			code, body = p.req("PUT", "/"+url.PathEscape(db)+"/seed_"+url.PathEscape(db), `{"n":0}`)
		}
		if code != 201 {
			mu.Lock()
			failed = append(failed, fmt.Sprintf("%s: %d %s", db, code, body))
			mu.Unlock()
		}
	})
	if len(failed) > 0 {
		p.b.Fatalf("%s: %d dbs not created, first: %s", p.name, len(failed), failed[0])
	}
	return time.Since(start)
}

// writeRepDocs writes the replication docs, 1,000 per _bulk_docs.
func (p *peer) writeRepDocs(docs []string) {
	for k := 0; k < len(docs); k += 1000 {
		body := `{"docs":[` + strings.Join(docs[k:min(k+1000, len(docs))], ",") + `]}`
		p.must("POST", "/"+url.PathEscape(p.repDB)+"/_bulk_docs", body, 201)
	}
}

// dbOps measures what issue 15 asks of a server with many dbs: _all_dbs,
// _db_updates (the whole normal feed) and opening dbs (GET /db).
func (p *peer) dbOps(dbs []string) {
	p.b.Helper()
	timed := func(path string) time.Duration {
		start := time.Now()
		if code, body := p.req("GET", path, ""); code != 200 {
			p.b.Logf("%s: GET %s: %d %s", p.name, path, code, strings.TrimSpace(body))
			return -1
		}
		return time.Since(start)
	}
	all := timed("/_all_dbs")
	updates := timed("/_db_updates")
	var opens []time.Duration
	for range 200 {
		opens = append(opens, timed("/"+url.PathEscape(dbs[rand.N(len(dbs))])))
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	p.b.ReportMetric(ms(all), "ms_all_dbs")
	p.b.ReportMetric(ms(updates), "ms_db_updates")
	p.b.ReportMetric(ms(percentile(opens, 50)), "ms_open_db_p50")
	p.b.ReportMetric(ms(percentile(opens, 99)), "ms_open_db_p99")
	p.b.Logf("%s with %d dbs: _all_dbs %v, _db_updates %v, GET /db p50 %v p99 %v", p.name, len(dbs),
		all.Round(time.Microsecond), updates.Round(time.Microsecond), percentile(opens, 50).Round(time.Microsecond), percentile(opens, 99).Round(time.Microsecond))
}

// procFigures are what /proc says of a process.
type procFigures struct {
	cpu     time.Duration // user + system time so far
	rss     int64         // resident set, bytes
	sockets int           // open sockets
	threads int
}

func readProc(pid int) procFigures {
	var f procFigures
	if pid == 0 {
		return f
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		ut, _ := strconv.ParseInt(fields[11], 10, 64)
		st, _ := strconv.ParseInt(fields[12], 10, 64)
		f.cpu = time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ = 100
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(line, ":")
			n, _ := strconv.ParseInt(strings.Fields(v + " 0")[0], 10, 64)
			switch k {
			case "VmRSS":
				f.rss = n * 1024
			case "Threads":
				f.threads = int(n)
			}
		}
	}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && strings.HasPrefix(l, "socket:") {
			f.sockets++
		}
	}
	return f
}

// pluginGoroutines reads the plugin's go_goroutines from the server's
// Prometheus endpoint (-1 when absent).
func (c *couch) pluginGoroutines() float64 {
	_, body := c.req("GET", "/_node/_local/_prometheus", "")
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "go_goroutines{") && strings.Contains(line, `plugin="replicator"`) {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			return v
		}
	}
	return -1
}

// pluginCounters reads the counters (names ending in _total, summed over
// labels) from the server's Prometheus endpoint.
func (c *couch) pluginCounters() map[string]float64 {
	_, body := c.req("GET", "/_node/_local/_prometheus", "")
	m := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ := strings.Cut(f[0], "{")
		if strings.HasSuffix(name, "_total") {
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			m[name] += v
		}
	}
	return m
}

// counterDeltas formats how much the replicator's main counters grew
// from a to b, per second of d.
func counterDeltas(a, b map[string]float64, d time.Duration) string {
	var out []string
	for _, k := range []string{"couchdb_couch_replicator_requests_total", "couchdb_couch_replicator_connection_creates_total",
		"couchepi_replicator_changes_read_total", "couchepi_replicator_docs_written_total", "couchepi_replicator_jobs_slot_handoffs_total", "couchepi_replicator_jobs_resumes_total", "couchepi_replicator_shared_changes_reads_total", "couchepi_replicator_shared_docs_total",
		"couchepi_replicator_jobs_parks_total", "couchepi_replicator_jobs_wakes_total", "couchdb_couch_replicator_jobs_starts_total"} {
		short := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(k, "couchdb_couch_replicator_"), "couchepi_replicator_"), "_total")
		out = append(out, fmt.Sprintf("%s %.0f/s", short, (b[k]-a[k])/d.Seconds()))
	}
	return strings.Join(out, ", ")
}

// arrivals follows db's changes feed from now and records when each doc
// whose id starts with "w" first arrives.
type arrivals struct {
	mu   sync.Mutex
	seen map[string]time.Time
	resp *http.Response
}

func (p *peer) follow(db string) *arrivals {
	a := &arrivals{seen: map[string]time.Time{}}
	req, _ := http.NewRequest("GET", p.base.String()+url.PathEscape(db)+"/_changes?feed=continuous&since=now&heartbeat=5000", nil)
	pass, _ := p.base.User.Password()
	req.SetBasicAuth(p.base.User.Username(), pass)
	resp, err := (&http.Client{}).Do(req)
	if err != nil || resp.StatusCode != 200 {
		p.b.Fatalf("%s: follow %s: %v", p.name, db, err)
	}
	a.resp = resp
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var row struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(sc.Bytes(), &row) == nil && strings.HasPrefix(row.ID, "w") {
				now := time.Now()
				a.mu.Lock()
				if _, ok := a.seen[row.ID]; !ok {
					a.seen[row.ID] = now
				}
				a.mu.Unlock()
			}
		}
	}()
	return a
}

func (a *arrivals) get(id string) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.seen[id]
	return t, ok
}

// waitReplicated waits until the targets hold want docs in all, or the
// peer's catchUp has passed; it reports how long that took and how many
// docs arrived.
func (p *peer) waitReplicated(tgts []string, want int) {
	start := time.Now()
	total := 0
	for time.Since(start) < p.catchUp {
		total = 0
		for _, t := range tgts {
			total += max(p.docCount(t), 0)
		}
		if total >= want {
			break
		}
		time.Sleep(time.Second)
	}
	took := time.Since(start)
	p.b.ReportMetric(took.Seconds(), "s_until_all_replicated")
	p.b.ReportMetric(float64(total)/float64(want)*100, "%_replicated")
	p.b.Logf("%s: %d of %d sources' docs replicated after %v", p.name, total, want, took.Round(time.Millisecond))
}

// restFigures are what idlePhase measured.
type restFigures struct {
	cpu     float64 // % of one core, server + plugin
	rss     int64   // server + plugin
	running int     // replications in _active_tasks
}

// idlePhase measures the server and the plugin at rest over d.
func (p *peer) idlePhase(jobs int, d time.Duration) restFigures {
	s0, p0 := readProc(p.server), readProc(p.plugin)
	time.Sleep(d)
	s1, p1 := readProc(p.server), readProc(p.plugin)
	cpu := float64(s1.cpu-s0.cpu+p1.cpu-p0.cpu) / float64(d) * 100
	p.b.ReportMetric(cpu, "idle_cpu_%_of_one_core")
	p.b.ReportMetric(float64(s1.rss)/1e6, "server_rss_MB")
	p.b.ReportMetric(float64(s1.sockets), "server_sockets")
	if p.plugin != 0 {
		p.b.ReportMetric(float64(p1.rss)/1e6, "plugin_rss_MB")
		p.b.ReportMetric(float64(p1.rss)/float64(jobs)/1e3, "plugin_rss_KB/job")
		p.b.ReportMetric(float64(p1.sockets), "plugin_sockets")
		p.b.ReportMetric(p.goroutines(), "plugin_goroutines")
	}
	var sj struct {
		TotalRows int `json:"total_rows"`
	}
	json.Unmarshal([]byte(p.must("GET", "/_scheduler/jobs?limit=0", "", 200)), &sj)
	running := strings.Count(p.must("GET", "/_active_tasks", "", 200), `"type":"replication"`)
	p.b.ReportMetric(float64(running), "jobs_running_at_rest")
	p.b.Logf("%s at rest over %v: %.2f%% of one core (server %v, plugin %v cpu), RSS server %.1f MB + plugin %.1f MB, sockets server %d + plugin %d, plugin goroutines %.0f, %d replications running of %d jobs",
		p.name, d, cpu, s1.cpu-s0.cpu, p1.cpu-p0.cpu, float64(s1.rss)/1e6, float64(p1.rss)/1e6, s1.sockets, p1.sockets, p.goroutines(), running, sj.TotalRows)
	return restFigures{cpu: cpu, rss: s1.rss + p1.rss, running: running}
}

// latencyFigures are what writePhase measured; a write that did not
// arrive counts as arriving after the wait.
type latencyFigures struct {
	p50, p99, worst time.Duration
	writes, missing int
}

// arrivalWait is how long writePhase waits for writes after the last one.
const arrivalWait = 2 * time.Minute

// writePhase writes rate docs per second to random sources for d and
// reports how long each took to reach its target(s) (watched through
// feeds).
func (p *peer) writePhase(srcs []string, tgtOf func(src string) []string, feeds map[string]*arrivals, rate int, d time.Duration) latencyFigures {
	type write struct {
		id, src string
		at      time.Time
	}
	// Open loop: each write is sent on its tick, whether or not the ones
	// before it have been answered, so a slow server cannot lower the rate.
	var (
		mu     sync.Mutex
		writes []write
		wg     sync.WaitGroup
	)
	s0, p0 := readProc(p.server), readProc(p.plugin)
	var c0 map[string]float64
	if p.counters != nil {
		c0 = p.counters()
	}
	begin := time.Now()
	// The plugin's goroutines halfway through, what its GC scans.
	midGoroutines := make(chan float64, 1)
	go func() { time.Sleep(d / 2); midGoroutines <- p.goroutines() }()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	end := time.Now().Add(d)
	for k := 0; time.Now().Before(end); k++ {
		<-tick.C
		src := srcs[rand.N(len(srcs))]
		id := fmt.Sprintf("w%07d", k)
		wg.Add(1)
		go func() {
			defer wg.Done()
			at := time.Now()
			if code, resp := p.req("PUT", "/"+url.PathEscape(src)+"/"+id, `{"n":1}`); code != 201 {
				p.b.Errorf("%s: PUT %s/%s: %d %s", p.name, src, id, code, resp)
				return
			}
			mu.Lock()
			writes = append(writes, write{id, src, at})
			mu.Unlock()
		}()
	}
	tick.Stop()
	wg.Wait()
	s1, p1 := readProc(p.server), readProc(p.plugin)
	cpu := float64(s1.cpu-s0.cpu+p1.cpu-p0.cpu) / float64(time.Since(begin)) * 100
	p.b.ReportMetric(cpu, "write_cpu_%_of_one_core")
	if p.counters != nil {
		p.b.Logf("%s: replicator while writing: %s", p.name, counterDeltas(c0, p.counters(), time.Since(begin)))
	}
	deadline := time.Now().Add(arrivalWait)
	// Latency by when the write was made, in tenths of the phase: a
	// server falling behind shows as a rising p50.
	var window [10][]time.Duration
	var lat []time.Duration
	missing := 0
	for _, w := range writes {
		for _, tgt := range tgtOf(w.src) {
			f := feeds[tgt]
			if f == nil {
				continue
			}
			for {
				var l time.Duration
				t, ok := f.get(w.id)
				switch {
				case ok:
					l = t.Sub(w.at)
				case time.Now().After(deadline):
					missing++
					l = time.Since(w.at)
				default:
					time.Sleep(10 * time.Millisecond)
					continue
				}
				lat = append(lat, l)
				k := min(int(w.at.Sub(begin)*10/max(d, 1)), 9)
				window[k] = append(window[k], l)
				break
			}
		}
	}
	var trend []string
	for _, w := range window {
		trend = append(trend, fmt.Sprintf("%v/%v", percentile(w, 50).Round(10*time.Millisecond), percentile(w, 99).Round(10*time.Millisecond)))
	}
	var worst time.Duration
	for _, l := range lat {
		worst = max(worst, l)
	}
	f := latencyFigures{p50: percentile(lat, 50), p99: percentile(lat, 99), worst: worst, writes: len(writes), missing: missing}
	var c1 map[string]float64
	if p.counters != nil {
		c1 = p.counters() // empty when the scrape failed
	}
	if c1["couchepi_replicator_docs_written_total"] > 0 {
		// CPU per doc written, from the first write until the awaited
		// arrivals: what a busy machine changes least (the latencies
		// above grow with everything else it runs).
		s2, p2 := readProc(p.server), readProc(p.plugin)
		written := c1["couchepi_replicator_docs_written_total"] - c0["couchepi_replicator_docs_written_total"]
		all := s2.cpu - s0.cpu + p2.cpu - p0.cpu
		perDoc := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) / max(written, 1) }
		p.b.ReportMetric(perDoc(all), "cpu_us/doc_written")
		p.b.Logf("%s: %.0f docs written from the first write to the last arrival awaited: CPU %.0f µs per doc (server %.0f, plugin %.0f)",
			p.name, written, perDoc(all), perDoc(s2.cpu-s0.cpu), perDoc(p2.cpu-p0.cpu))
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	p.b.ReportMetric(ms(f.p50), "ms_write_to_target_p50")
	p.b.ReportMetric(ms(f.p99), "ms_write_to_target_p99")
	p.b.ReportMetric(ms(worst), "ms_write_to_target_max")
	p.b.ReportMetric(float64(missing), "writes_not_arrived")
	p.b.Logf("%s: %d writes at %d/s: write to target p50 %v, p99 %v, max %v; %d arrivals awaited, %d not there %v after the last write (counted at their wait); CPU while writing %.0f%% of one core (server %v, plugin %v), plugin goroutines halfway %.0f; p50/p99 by tenth of the phase: %s",
		p.name, len(writes), rate, f.p50.Round(time.Millisecond), f.p99.Round(time.Millisecond), worst.Round(time.Millisecond), len(lat), missing, arrivalWait,
		cpu, s1.cpu-s0.cpu, p1.cpu-p0.cpu, <-midGoroutines, strings.Join(trend, " "))
	return f
}

// parkResult is one peer's run of a park benchmark.
type parkResult struct {
	name string
	rest restFigures
	lat  latencyFigures
}

// runPeers runs fn against minicouch and, when COUCHEPI_COUCHDB_URL is
// set, against that CouchDB, one after the other, and logs the ratios.
func runPeers(b *testing.B, fn func(b *testing.B, p *peer) parkResult) {
	var results []parkResult
	b.Run("minicouch", func(b *testing.B) {
		for range b.N {
			p := startMinicouchPeer(b)
			results = append(results, fn(b, p))
			p.stop()
		}
	})
	if os.Getenv("COUCHEPI_COUCHDB_URL") == "" {
		b.Log("set COUCHEPI_COUCHDB_URL (a CouchDB URL with admin credentials) to run the same against CouchDB")
		return
	}
	b.Run("couchdb", func(b *testing.B) {
		for range b.N {
			p := couchDBPeer(b)
			results = append(results, fn(b, p))
			p.stop()
		}
	})
	if len(results) < 2 {
		return
	}
	m, c := results[0], results[len(results)-1]
	ratio := func(x, y time.Duration) float64 { return float64(x) / float64(max(y, time.Microsecond)) }
	// Printed, not logged: a benchmark with sub-benchmarks shows no log.
	fmt.Printf("%s: %s / %s: write-to-target p50 %.0f×, p99 %.0f× (at least: a write not arrived counts at its wait); CPU at rest %.1f%% vs %.1f%% of one core; RSS %.0f MB vs %.0f MB; %d vs %d writes not arrived\n", b.Name(),
		c.name, m.name, ratio(c.lat.p50, m.lat.p50), ratio(c.lat.p99, m.lat.p99), c.rest.cpu, m.rest.cpu,
		float64(c.rest.rss)/1e6, float64(m.rest.rss)/1e6, c.lat.missing, m.lat.missing)
}

// BenchmarkParkFanIn (issue 15): N source dbs, each with a continuous
// replication into one target db, at CouchDB's scheduler defaults
// (max_jobs 500). Once all caught up: CPU, memory, sockets and goroutines
// at rest; then 100 writes per second to random sources, with the
// latency until each write is in the target.
func BenchmarkParkFanIn(b *testing.B) {
	n, phase := parkScale(1000)
	runPeers(b, func(b *testing.B, p *peer) parkResult {
		target := p.prefix + "target"
		p.createDBs([]string{target}, false)
		srcs := make([]string, n)
		for k := range srcs {
			srcs[k] = fmt.Sprintf("%ssrc%05d", p.prefix, k)
		}
		created := p.createDBs(srcs, true)
		b.ReportMetric(created.Seconds(), "s_create_and_seed_dbs")
		b.Logf("%s: %d dbs created and seeded in %v (8 clients)", p.name, n, created.Round(time.Millisecond))
		p.dbOps(srcs)
		docs := make([]string, n)
		for k, src := range srcs {
			docs[k] = p.repDoc(fmt.Sprintf("r%05d", k), src, target, "")
		}
		p.writeRepDocs(docs)
		p.waitReplicated([]string{target}, n)
		// Let the idle ones park (idle_park_sec 60 + a margin) before measuring.
		time.Sleep(70 * time.Second)
		rest := p.idlePhase(n, phase)
		feeds := map[string]*arrivals{target: p.follow(target)}
		lat := p.writePhase(srcs, func(string) []string { return []string{target} }, feeds, 100, phase)
		feeds[target].resp.Body.Close()
		return parkResult{p.name, rest, lat}
	})
}

// fanOutScale is the fan-out benchmarks' number of targets (a tenth of
// COUCHEPI_PARK_DBS when set) and phase length.
func fanOutScale() (targets int, phase time.Duration) {
	n, phase := parkScale(100)
	if os.Getenv("COUCHEPI_PARK_DBS") != "" {
		n /= 10
	}
	return n, phase
}

// fanOut creates a seeded source and n targets, each with a continuous
// replication from the source, and waits until every target has the
// seed doc.
func (p *peer) fanOut(n int) (source string, targets []string) {
	source = p.prefix + "source"
	p.createDBs([]string{source}, true)
	targets = make([]string, n)
	docs := make([]string, n)
	for k := range targets {
		targets[k] = fmt.Sprintf("%stgt%05d", p.prefix, k)
		docs[k] = p.repDoc(fmt.Sprintf("r%05d", k), source, targets[k], "")
	}
	// The targets exist before their jobs first run, so every one can be
	// followed on a server that starts only max_jobs at a time.
	p.createDBs(targets, false)
	p.writeRepDocs(docs)
	p.waitReplicated(targets, n)
	return source, targets
}

// BenchmarkParkFanOut (issue 15): one source db replicated continuously
// into N targets (1,000 at full size), default scheduler settings; the
// latency is measured on 20 of the targets, at 10 writes per second
// (COUCHEPI_PARK_FANOUT_RATE; each write is work for every one of the N
// jobs).
func BenchmarkParkFanOut(b *testing.B) {
	n, phase := fanOutScale()
	rate := 10
	if v, err := strconv.Atoi(os.Getenv("COUCHEPI_PARK_FANOUT_RATE")); err == nil && v > 0 {
		rate = v
	}
	runPeers(b, func(b *testing.B, p *peer) parkResult {
		var proxy *sourceProxy
		if os.Getenv("COUCHEPI_FANOUT_SOURCE_PROXY") != "" {
			proxy = startSourceProxy(b, p)
		}
		source, tgts := p.fanOut(n)
		time.Sleep(70 * time.Second)
		rest := p.idlePhase(n, phase)
		feeds := map[string]*arrivals{}
		var mu sync.Mutex
		// In parallel: a server may send a feed's headers only with its
		// first heartbeat.
		p.parallel(tgts[:min(20, n)], func(t string) {
			f := p.follow(t)
			mu.Lock()
			feeds[t] = f
			mu.Unlock()
		})
		var before map[string]int64
		if proxy != nil {
			before = proxy.counts()
		}
		lat := p.writePhase([]string{source}, func(string) []string { return tgts }, feeds, rate, phase)
		for _, f := range feeds {
			f.resp.Body.Close()
		}
		if proxy != nil {
			proxy.report(before, lat.writes)
			proxy.close()
		}
		return parkResult{p.name, rest, lat}
	})
}

// sourceProxy forwards requests to a peer and counts them by kind: the
// fan-out benchmark's sources are named through it
// (COUCHEPI_FANOUT_SOURCE_PROXY=1), to count the requests the source
// receives per write. The source is then another server's to the
// replicator: watched through _db_updates (through the proxy too), not
// the host's db_updated.
type sourceProxy struct {
	b   *testing.B
	srv *httptest.Server
	mu  sync.Mutex
	n   map[string]int64
}

func startSourceProxy(b *testing.B, p *peer) *sourceProxy {
	target := *p.base
	target.User = nil
	rp := httputil.NewSingleHostReverseProxy(&target)
	rp.FlushInterval = -1                    // feeds stream
	rp.ErrorLog = log.New(io.Discard, "", 0) // feeds the replicator ends
	sp := &sourceProxy{b: b, n: map[string]int64{}}
	sp.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sp.mu.Lock()
		sp.n[requestKind(r)]++
		sp.mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	base, _ := url.Parse(sp.srv.URL + "/")
	base.User = p.base.User
	p.sourceBase = base
	return sp
}

// requestKind names a request to a db by its method and the path after
// the db's name (`GET _changes`, `PUT _local`, `GET db`).
func requestKind(r *http.Request) string {
	segs := strings.Split(strings.Trim(r.URL.EscapedPath(), "/"), "/")
	switch {
	case len(segs) == 1 && strings.HasPrefix(segs[0], "_"):
		return r.Method + " " + segs[0]
	case len(segs) == 1:
		return r.Method + " db"
	case segs[1] == "_changes":
		// By feed, and the pending probes (limit=0) apart.
		kind := r.Method + " _changes " + r.URL.Query().Get("feed")
		if r.URL.Query().Get("limit") == "0" {
			kind += " limit=0"
		}
		return kind
	case strings.HasPrefix(segs[1], "_"):
		return r.Method + " " + segs[1]
	}
	return r.Method + " doc"
}

func (sp *sourceProxy) counts() map[string]int64 {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return maps.Clone(sp.n)
}

// report logs the requests the source received since before, per write.
func (sp *sourceProxy) report(before map[string]int64, writes int) {
	now := sp.counts()
	var kinds []string
	total := int64(0)
	for k, v := range now {
		if v > before[k] {
			kinds = append(kinds, k)
			total += v - before[k]
		}
	}
	slices.Sort(kinds)
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, float64(now[k]-before[k])/float64(max(writes, 1))))
	}
	sp.b.ReportMetric(float64(total)/float64(max(writes, 1)), "source_requests/write")
	changes := int64(0)
	for k, v := range now {
		if strings.Contains(k, " _changes") {
			changes += v - before[k]
		}
	}
	sp.b.ReportMetric(float64(changes)/float64(max(writes, 1)), "source_changes_requests/write")
	sp.b.Logf("source requests per write (%d writes, through the proxy): %.2f in all: %s", writes, float64(total)/float64(max(writes, 1)), strings.Join(parts, ", "))
}

func (sp *sourceProxy) close() { sp.srv.CloseClientConnections(); sp.srv.Close() }

// BenchmarkParkWakeBurst (issue 15): one source replicated continuously
// into N targets (1,000 at full size), every job parked; one write to the
// source wakes them all at once. Each burst is timed from the write until
// every target has the doc (the replicator's docs_written counter has
// grown by N), five times; idle_park_sec is 2 so that the jobs park again
// between bursts. This is the first seconds of BenchmarkParkFanOut's write
// phase, measured alone: the wake path (queue, start, first round) at its
// heaviest.
func BenchmarkParkWakeBurst(b *testing.B) {
	n, _ := fanOutScale()
	p := startMinicouchPeerWith(b, "idle_park_sec = 2\n")
	defer p.stop()
	source, _ := p.fanOut(n)
	written := func() float64 { return p.counters()["couchepi_replicator_docs_written_total"] }
	// The jobs not parked (a parked job is listed in _active_tasks too,
	// with its parked_since).
	running := func() int {
		var tasks []map[string]any
		_, body := p.req("GET", "/_active_tasks", "")
		json.Unmarshal([]byte(body), &tasks)
		n := 0
		for _, t := range tasks {
			if _, parked := t["parked_since"]; !parked {
				n++
			}
		}
		return n
	}
	var bursts, cpus []time.Duration
	b.ResetTimer()
	for k := range 5 {
		deadline := time.Now().Add(5 * time.Minute)
		for running() > 0 {
			if time.Now().After(deadline) {
				b.Fatalf("%d jobs still running 5 minutes after burst %d", running(), k)
			}
			time.Sleep(200 * time.Millisecond)
		}
		c0 := p.counters()
		w0 := c0["couchepi_replicator_docs_written_total"]
		s0, p0 := readProc(p.server), readProc(p.plugin)
		start := time.Now()
		p.must("PUT", "/"+url.PathEscape(source)+fmt.Sprintf("/burst%d", k), `{"n":1}`, 201)
		for written() < w0+float64(n) {
			if time.Since(start) > 5*time.Minute {
				b.Fatalf("burst %d: %v of %d targets written after 5 minutes", k, written()-w0, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
		took := time.Since(start)
		bursts = append(bursts, took)
		s1, p1 := readProc(p.server), readProc(p.plugin)
		cpus = append(cpus, s1.cpu-s0.cpu+p1.cpu-p0.cpu)
		c1 := p.counters()
		delta := func(k string) float64 { return c1[k] - c0[k] }
		b.Logf("burst %d: %d parked jobs woken and the write in every target after %v, CPU %v (server %v, plugin %v) (wakes %.0f, starts %.0f, resumed starts %.0f, requests %.0f, connections created %.0f)",
			k, n, took.Round(time.Millisecond), s1.cpu-s0.cpu+p1.cpu-p0.cpu, s1.cpu-s0.cpu, p1.cpu-p0.cpu, delta("couchepi_replicator_jobs_wakes_total"), delta("couchdb_couch_replicator_jobs_starts_total"),
			delta("couchepi_replicator_jobs_resumes_total"), delta("couchdb_couch_replicator_requests_total"), delta("couchdb_couch_replicator_connection_creates_total"))
	}
	b.StopTimer()
	slices.Sort(bursts)
	b.ReportMetric(float64(bursts[len(bursts)/2])/float64(time.Millisecond), "ms_burst_p50")
	b.ReportMetric(float64(bursts[len(bursts)-1])/float64(time.Millisecond), "ms_burst_max")
	slices.Sort(cpus)
	b.ReportMetric(float64(cpus[len(cpus)/2])/float64(time.Millisecond), "cpu_ms_burst_p50")
}
