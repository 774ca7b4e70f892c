package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/minicouchtest"
)

// benchDocs is the number of 1 KB docs per benchmark run
// (MINICOUCH_BENCH_DOCS, default 100000).
func benchDocs() int {
	if n, err := strconv.Atoi(os.Getenv("MINICOUCH_BENCH_DOCS")); err == nil && n > 0 {
		return n
	}
	return 100000
}

const benchBatch = 1000

// benchClient is a CouchDB HTTP client for the benchmarks.
type benchClient struct {
	base, user, pass string
	http             *http.Client
}

func newBenchClient(base, user, pass string) *benchClient {
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	return &benchClient{base: base, user: user, pass: pass, http: &http.Client{Transport: tr, Timeout: 5 * time.Minute}}
}

func (c *benchClient) do(method, path string, body []byte, out any) error {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, c.base+path, r)
	if err != nil {
		return err
	}
	if c.user != "" {
		req.SetBasicAuth(c.user, c.pass)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// docBatch renders batch number i of ~1 KB docs as a _bulk_docs body.
func docBatch(i, size int) []byte {
	pad := strings.Repeat("x", 960)
	var buf bytes.Buffer
	buf.WriteString(`{"docs":[`)
	for j := 0; j < size; j++ {
		if j > 0 {
			buf.WriteByte(',')
		}
		fmt.Fprintf(&buf, `{"_id":"doc-%08d","n":%d,"type":"bench","payload":"%s"}`, i*size+j, i*size+j, pad)
	}
	buf.WriteString(`]}`)
	return buf.Bytes()
}

// ingest writes n docs into db with `workers` concurrent _bulk_docs clients
// and returns docs/s.
func ingest(b *testing.B, c *benchClient, db string, n, workers int) float64 {
	b.Helper()
	if err := c.do("PUT", "/"+db, nil, nil); err != nil {
		b.Fatal(err)
	}
	batches := n / benchBatch
	bodies := make([][]byte, batches)
	for i := range bodies {
		bodies[i] = docBatch(i, benchBatch)
	}
	el := runWorkers(b, batches, workers, func(i int) error {
		return c.do("POST", "/"+db+"/_bulk_docs", bodies[i], nil)
	})
	return float64(batches*benchBatch) / el.Seconds()
}

// runWorkers calls do(0) … do(n-1) from `workers` concurrent goroutines and
// returns the time they took; the first error fails the benchmark.
func runWorkers(b *testing.B, n, workers int, do func(i int) error) time.Duration {
	b.Helper()
	next := make(chan int, n)
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := do(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	return el
}

// readAll reads db as a replicator does — _changes pages of benchBatch, each
// followed by a _bulk_get of those revisions — and returns docs/s.
func readAll(b *testing.B, c *benchClient, db string, n int) float64 {
	b.Helper()
	start := time.Now()
	since := "0"
	read := 0
	for {
		var page struct {
			Results []struct {
				ID      string `json:"id"`
				Changes []struct {
					Rev string `json:"rev"`
				} `json:"changes"`
			} `json:"results"`
			LastSeq any `json:"last_seq"`
		}
		if err := c.do("GET", "/"+db+"/_changes?style=all_docs&limit="+strconv.Itoa(benchBatch)+"&since="+urlQuery(since), nil, &page); err != nil {
			b.Fatal(err)
		}
		if len(page.Results) == 0 {
			break
		}
		type item struct {
			ID  string `json:"id"`
			Rev string `json:"rev"`
		}
		req := struct {
			Docs []item `json:"docs"`
		}{}
		for _, r := range page.Results {
			req.Docs = append(req.Docs, item{r.ID, r.Changes[0].Rev})
		}
		body, _ := json.Marshal(req)
		var got struct {
			Results []struct {
				Docs []map[string]json.RawMessage `json:"docs"`
			} `json:"results"`
		}
		if err := c.do("POST", "/"+db+"/_bulk_get?revs=true&latest=true", body, &got); err != nil {
			b.Fatal(err)
		}
		for _, r := range got.Results {
			for _, d := range r.Docs {
				if _, ok := d["ok"]; ok {
					read++
				}
			}
		}
		switch v := page.LastSeq.(type) {
		case string:
			since = v
		case float64:
			since = strconv.FormatFloat(v, 'f', -1, 64)
		}
	}
	if read != n {
		b.Fatalf("read %d docs, want %d", read, n)
	}
	return float64(read) / time.Since(start).Seconds()
}

func urlQuery(s string) string {
	return strings.NewReplacer("%", "%25", "&", "%26", "+", "%2B", " ", "%20", "#", "%23").Replace(s)
}

// startPouchDBServer runs pouchdb-server (npm) in memory on a free port.
func startPouchDBServer(b *testing.B) string {
	b.Helper()
	bin := filepath.Join(interopDir, ".bin", "pouchdb-server")
	if _, err := os.Stat(bin); err != nil {
		b.Skipf("pouchdb-server is not installed in %s (run `make interop-deps`)", interopDir)
	}
	addr, err := minicouchtest.FreeAddr()
	if err != nil {
		b.Fatal(err)
	}
	_, port, _ := strings.Cut(addr, ":")
	cmd := exec.Command(bin, "--in-memory", "-p", port, "-n")
	cmd.Dir = b.TempDir()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	base := "http://" + addr
	for i := 0; i < 300; i++ {
		if resp, err := http.Get(base + "/"); err == nil {
			resp.Body.Close()
			return base
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.Fatal("pouchdb-server did not start")
	return ""
}

// BenchmarkBulkDocsIngest: 100k × 1 KB docs via _bulk_docs batches of 1000
// over real HTTP (4 concurrent clients), minicouch (fsync on every commit)
// and pouchdb-server in the same run; reports docs/s of each and the ratio.
func BenchmarkBulkDocsIngest(b *testing.B) {
	n := benchDocs()
	mc := newBenchClient(startMinicouch(b), "admin", "pass")
	ps := newBenchClient(startPouchDBServer(b), "", "")
	var mcRate, psRate float64
	for i := 0; i < b.N; i++ {
		db := fmt.Sprintf("ingest%d", i)
		mcRate += ingest(b, mc, db, n, 4)
		psRate += ingest(b, ps, db, n, 4)
	}
	mcRate /= float64(b.N)
	psRate /= float64(b.N)
	b.ReportMetric(mcRate, "minicouch_docs/s")
	b.ReportMetric(psRate, "pouchdb-server_docs/s")
	b.ReportMetric(mcRate/psRate, "ratio")
}

// BenchmarkChangesBulkGetRead: read 100k × 1 KB docs as a replicator does
// (_changes pages + _bulk_get), minicouch and pouchdb-server in the same
// run; reports docs/s of each and the ratio. Loading is not timed.
func BenchmarkChangesBulkGetRead(b *testing.B) {
	n := benchDocs()
	mc := newBenchClient(startMinicouch(b), "admin", "pass")
	ps := newBenchClient(startPouchDBServer(b), "", "")
	ingest(b, mc, "read", n, 4)
	ingest(b, ps, "read", n, 4)
	b.ResetTimer()
	var mcRate, psRate float64
	for i := 0; i < b.N; i++ {
		mcRate += readAll(b, mc, "read", n)
		psRate += readAll(b, ps, "read", n)
	}
	mcRate /= float64(b.N)
	psRate /= float64(b.N)
	b.ReportMetric(mcRate, "minicouch_docs/s")
	b.ReportMetric(psRate, "pouchdb-server_docs/s")
	b.ReportMetric(mcRate/psRate, "ratio")
}

// putEach writes n ~1 KB docs one PUT each from `workers` concurrent
// clients and returns docs/s.
func putEach(b *testing.B, c *benchClient, db string, n, workers int) float64 {
	b.Helper()
	if err := c.do("PUT", "/"+db, nil, nil); err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"type":"bench","payload":"` + strings.Repeat("x", 960) + `"}`)
	el := runWorkers(b, n, workers, func(i int) error {
		return c.do("PUT", fmt.Sprintf("/%s/doc-%08d", db, i), body, nil)
	})
	return float64(n) / el.Seconds()
}

// BenchmarkSingleDocPuts: 5000 × 1 KB docs, one PUT each from 16
// concurrent clients (fsync'd group commits on minicouch), minicouch and
// pouchdb-server in the same run; docs/s of each and the ratio.
func BenchmarkSingleDocPuts(b *testing.B) {
	n := benchDocs() / 20
	mc := newBenchClient(startMinicouch(b), "admin", "pass")
	ps := newBenchClient(startPouchDBServer(b), "", "")
	var mcRate, psRate float64
	for i := 0; i < b.N; i++ {
		db := fmt.Sprintf("puts%d", i)
		mcRate += putEach(b, mc, db, n, 16)
		psRate += putEach(b, ps, db, n, 16)
	}
	mcRate /= float64(b.N)
	psRate /= float64(b.N)
	b.ReportMetric(mcRate, "minicouch_docs/s")
	b.ReportMetric(psRate, "pouchdb-server_docs/s")
	b.ReportMetric(mcRate/psRate, "ratio")
}
