package replicate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// benchDocs is the doc count of BenchmarkReplicate100k (COUCHEPI_BENCH_DOCS, default 100000).
func benchDocs() int {
	if n, err := strconv.Atoi(os.Getenv("COUCHEPI_BENCH_DOCS")); err == nil && n > 0 {
		return n
	}
	return 100000
}

// envInt reads a positive int from the environment, else def.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// fillDB writes n ~1 KB docs to db in chunks.
func fillDB(b *testing.B, s *testServer, db string, n int) {
	pad := strings.Repeat("x", 900)
	for i := 0; i < n; i += 1000 {
		var docs []map[string]any
		for j := i; j < min(n, i+1000); j++ {
			docs = append(docs, map[string]any{"_id": fmt.Sprintf("d%07d", j), "n": j, "pad": pad, "tags": []string{"bench", "replicate"}})
		}
		s.bulk(b, db, true, docs...)
	}
}

// url is db's URL with the admin credentials in it (for PouchDB).
func (s *testServer) url(db string) string {
	if s.User == "" {
		return s.Base + db
	}
	return strings.Replace(s.Base, "http://", "http://"+s.User+":"+s.Pass+"@", 1) + db
}

// post sends a JSON POST as admin and returns the body.
func (s *testServer) post(ctx context.Context, path string, body []byte) ([]byte, error) {
	req, _ := http.NewRequestWithContext(ctx, "POST", s.Base+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if s.User != "" {
		req.SetBasicAuth(s.User, s.Pass)
	}
	resp, err := benchHTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("POST %s: %d %s", path, resp.StatusCode, out)
	}
	return out, err
}

var benchHTTP = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32, DisableCompression: true}}

// rawRead reads db the way the replicator must at the least: the whole
// changes feed, then every doc with _bulk_get (4 readers, 500 per request).
// It returns the docs read, as the replicator would write them.
func rawRead(b *testing.B, s *testServer, db string) [][]json.RawMessage {
	ctx := context.Background()
	req, _ := http.NewRequest("GET", s.Base+db+"/_changes?style=all_docs", nil)
	req.SetBasicAuth(s.User, s.Pass)
	resp, err := benchHTTP.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	var ch struct {
		Results []struct {
			ID      string `json:"id"`
			Changes []struct {
				Rev string `json:"rev"`
			} `json:"changes"`
		} `json:"results"`
	}
	json.NewDecoder(resp.Body).Decode(&ch)
	resp.Body.Close()
	type item struct {
		ID  string `json:"id"`
		Rev string `json:"rev"`
	}
	var chunks [][]item
	for i := 0; i < len(ch.Results); i += 500 {
		var c []item
		for _, r := range ch.Results[i:min(len(ch.Results), i+500)] {
			c = append(c, item{r.ID, r.Changes[0].Rev})
		}
		chunks = append(chunks, c)
	}
	out := make([][]json.RawMessage, len(chunks))
	work := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				body, _ := json.Marshal(map[string]any{"docs": chunks[i]})
				res, err := s.post(ctx, db+"/_bulk_get?revs=true&latest=true&attachments=false", body)
				if err != nil {
					b.Error(err)
					continue
				}
				var v struct {
					Results []struct {
						Docs []struct {
							OK json.RawMessage `json:"ok"`
						} `json:"docs"`
					} `json:"results"`
				}
				json.Unmarshal(res, &v)
				for _, r := range v.Results {
					out[i] = append(out[i], r.Docs[0].OK)
				}
			}
		}()
	}
	for i := range chunks {
		work <- i
	}
	close(work)
	wg.Wait()
	return out
}

// rawWrite ingests the chunks into db with `_bulk_docs` new_edits=false (4 writers).
func rawWrite(b *testing.B, s *testServer, db string, chunks [][]json.RawMessage) {
	work := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				var buf bytes.Buffer
				buf.WriteString(`{"new_edits":false,"docs":[`)
				for j, d := range chunks[i] {
					if j > 0 {
						buf.WriteByte(',')
					}
					buf.Write(d)
				}
				buf.WriteString("]}")
				if _, err := s.post(context.Background(), db+"/_bulk_docs", buf.Bytes()); err != nil {
					b.Error(err)
				}
			}
		}()
	}
	for i := range chunks {
		work <- i
	}
	close(work)
	wg.Wait()
}

const pouchScript = `
const PouchDB = require('pouchdb');
const [src, tgt] = process.argv.slice(2);
const start = Date.now();
PouchDB.replicate(new PouchDB(src), new PouchDB(tgt), {batch_size: 500, batches_limit: 10})
  .on('complete', info => { console.log(JSON.stringify({ms: Date.now() - start, written: info.docs_written})); })
  .on('error', err => { console.error(String(err)); process.exit(1); });
`

// pouchReplicate runs PouchDB's replicator between two http dbs and returns its time.
func pouchReplicate(b *testing.B, srcURL, tgtURL string) (time.Duration, int) {
	dir := b.TempDir()
	script := filepath.Join(dir, "rep.js")
	os.WriteFile(script, []byte(pouchScript), 0o644)
	cmd := exec.Command("node", script, srcURL, tgtURL)
	cmd.Env = append(os.Environ(), "NODE_PATH="+filepath.Join(repoRoot(), "test", "interop", "node_modules"))
	out, err := cmd.Output()
	if err != nil {
		b.Logf("PouchDB replicator failed: %v", err)
		return 0, 0
	}
	var v struct {
		MS      int64 `json:"ms"`
		Written int   `json:"written"`
	}
	json.Unmarshal(out, &v)
	return time.Duration(v.MS) * time.Millisecond, v.Written
}

// BenchmarkReplicate100k replicates COUCHEPI_BENCH_DOCS (default 100k) 1 KB docs
// one-shot and reports docs/s next to, in the same run, the source's raw read
// rate (_changes + _bulk_get), the target's raw _bulk_docs ingest rate, and
// PouchDB's replicator between the same kind of endpoints. Run with -benchtime=1x.
// It also reports the CPU time per doc of each process in each phase (from
// /proc/<pid>/stat) and the cores each phase kept busy: when a phase keeps
// both cores busy its rate is CPU-bound, and replication, which runs both
// servers and the replicator at once, cannot beat rep_cpu_bound_docs/s.
func BenchmarkReplicate100k(b *testing.B) {
	s := startServer(b) // source server
	ts := s             // target server
	if os.Getenv("COUCHEPI_BENCH_ONE_SERVER") == "" {
		ts = startExtraServer(b)
	}
	n := benchDocs()
	src := s.newDB(b, "bsrc")
	fillDB(b, s, src, n)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		cpu := startCPU(s)
		chunks := rawRead(b, s, src)
		readDur := time.Since(t0)
		readSrv, readClient := cpu.stop()
		rawTgt := ts.newDB(b, "braw")
		t0 = time.Now()
		cpu = startCPU(ts)
		rawWrite(b, ts, rawTgt, chunks)
		writeDur := time.Since(t0)
		writeSrv, writeClient := cpu.stop()
		chunks = nil

		tgt := ts.newDB(b, "btgt")
		t0 = time.Now()
		cpu = startCPU(s, ts)
		rep := testRep(s, src, tgt)
		rep.Target = ts.endpoint(tgt)
		rep.WorkerBatchSize = envInt("COUCHEPI_BENCH_BATCH", 500)
		rep.WorkerProcesses = envInt("COUCHEPI_BENCH_WORKERS", 4)
		rep.CheckpointInterval = 30000
		res := runRep(b, rep, Options{})
		repDur := time.Since(t0)
		repSrv, repSelf := cpu.stop()
		if res.Stats.DocsWritten != int64(n) {
			b.Fatalf("replicated %d docs, want %d", res.Stats.DocsWritten, n)
		}

		pouchTgt := ts.newDB(b, "bpouch")
		pouchDur, pouchWritten := pouchReplicate(b, s.url(src), ts.url(pouchTgt))

		rate := func(d time.Duration) float64 { return float64(n) / d.Seconds() }
		slower := min(rate(readDur), rate(writeDur))
		b.ReportMetric(rate(repDur), "docs/s")
		b.ReportMetric(rate(readDur), "raw_read_docs/s")
		b.ReportMetric(rate(writeDur), "raw_write_docs/s")
		b.ReportMetric(rate(repDur)/slower, "ratio_vs_slower_raw")
		// Reading and writing share the machine's cores: the rate of doing
		// both one after the other is what a CPU-bound pair of servers allows.
		serial := 1 / (1/rate(readDur) + 1/rate(writeDur))
		b.ReportMetric(rate(repDur)/serial, "ratio_vs_serial_raw")
		reportCPU(b, n, ts == s, readDur, readSrv, readClient, writeDur, writeSrv, writeClient, repDur, repSrv, repSelf)
		if pouchDur > 0 && pouchWritten == n {
			b.ReportMetric(rate(pouchDur), "pouchdb_docs/s")
			b.ReportMetric(pouchDur.Seconds()/repDur.Seconds(), "speedup_vs_pouchdb")
		}
	}
}

// reportCPU reports where the CPU time of each phase went, per doc, and how
// many cores each phase kept busy: raw phases run one server and the client,
// replication runs both servers and the replicator on the same cores, so
// the replication rate is bounded by cores / (CPU seconds per doc summed over
// all three processes).
func reportCPU(b *testing.B, n int, oneServer bool,
	readDur time.Duration, readSrv []time.Duration, readClient time.Duration,
	writeDur time.Duration, writeSrv []time.Duration, writeClient time.Duration,
	repDur time.Duration, repSrv []time.Duration, repSelf time.Duration) {
	if readSrv[0] < 0 || writeSrv[0] < 0 || repSrv[0] < 0 || repSrv[1] < 0 {
		return // no /proc
	}
	perDoc := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(n) }
	cores := func(d, wall time.Duration) float64 { return d.Seconds() / wall.Seconds() }
	b.ReportMetric(perDoc(readSrv[0]), "read_src_cpu_us/doc")
	b.ReportMetric(perDoc(writeSrv[0]), "write_tgt_cpu_us/doc")
	b.ReportMetric(cores(readSrv[0]+readClient, readDur), "read_cores")
	b.ReportMetric(cores(writeSrv[0]+writeClient, writeDur), "write_cores")
	repServers := repSrv[0] + repSrv[1]
	if oneServer {
		repServers = repSrv[0]
	} else {
		b.ReportMetric(perDoc(repSrv[0]), "rep_src_cpu_us/doc")
		b.ReportMetric(perDoc(repSrv[1]), "rep_tgt_cpu_us/doc")
	}
	b.ReportMetric(perDoc(repSelf), "rep_replicator_cpu_us/doc")
	b.ReportMetric(cores(repServers+repSelf, repDur), "rep_cores")
	total := repServers + repSelf
	if total > 0 {
		b.ReportMetric(float64(runtime.NumCPU())*float64(n)/total.Seconds(), "rep_cpu_bound_docs/s")
	}
}
