package replicate

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// randomReader yields n bytes of seeded random data (incompressible, so
// minicouch stores it as it comes).
type randomReader struct {
	r *rand.ChaCha8
	n int64
}

func newRandomReader(seed uint64, n int64) *randomReader {
	var s [32]byte
	for i := range 8 {
		s[i] = byte(seed >> (8 * i))
	}
	return &randomReader{r: rand.NewChaCha8(s), n: n}
}

func (r *randomReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), r.n)]
	r.r.Read(p)
	r.n -= int64(len(p))
	return len(p), nil
}

// putAttDoc creates doc id with one attachment of size random bytes
// (seeded by seed), streamed, and returns the data's md5 in hex.
func putAttDoc(tb testing.TB, s *testServer, db, id string, size int64, seed uint64) string {
	h := md5.New()
	io.Copy(h, newRandomReader(seed, size))
	req, _ := http.NewRequest("PUT", s.Base+db+"/"+id+"/data.bin", newRandomReader(seed, size))
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/octet-stream")
	req.SetBasicAuth(s.User, s.Pass)
	resp, err := benchHTTP.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		tb.Fatalf("PUT %s/%s/data.bin: %d %s", db, id, resp.StatusCode, body)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// fillAttDB writes n docs with one attachment of size bytes each (4 at a
// time) and returns the md5 of each doc's attachment by id.
func fillAttDB(tb testing.TB, s *testServer, db string, n int, size int64) map[string]string {
	sums := make(map[string]string, n)
	var mu sync.Mutex
	work := make(chan int)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				id := fmt.Sprintf("a%06d", i)
				sum := putAttDoc(tb, s, db, id, size, uint64(i)+1)
				mu.Lock()
				sums[id] = sum
				mu.Unlock()
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	return sums
}

// checkAttDB reads a few of the target's attachments back and compares their md5.
func checkAttDB(tb testing.TB, s *testServer, db string, sums map[string]string) {
	checked := 0
	for id, want := range sums {
		if checked == 5 {
			return
		}
		checked++
		req, _ := http.NewRequest("GET", s.Base+db+"/"+id+"/data.bin", nil)
		req.SetBasicAuth(s.User, s.Pass)
		resp, err := benchHTTP.Do(req)
		if err != nil {
			tb.Fatal(err)
		}
		h := md5.New()
		io.Copy(h, resp.Body)
		resp.Body.Close()
		if got := hex.EncodeToString(h.Sum(nil)); resp.StatusCode != 200 || got != want {
			tb.Fatalf("target %s/%s: status %d md5 %s, want %s", db, id, resp.StatusCode, got, want)
		}
	}
}

// BenchmarkAttachments replicates docs with one random attachment each, db
// → db on one minicouch (issue 40): 400 × 1 MiB and 2,000 × 64 KiB
// (COUCHEPI_BENCH_ATT_DOCS scales the count down or up). It reports MB/s
// of attachment data and the CPU time each process spent: per doc
// (srv_cpu_ms/doc, rep_cpu_ms/doc, cpu_ms/doc) and per MiB of data, both
// processes together (cpu_ms/MiB). Run with -benchtime=1x.
func BenchmarkAttachments(b *testing.B) {
	for _, c := range []struct {
		name string
		docs int
		size int64
	}{
		{"1MiB", 400, 1 << 20},
		{"64KiB", 2000, 64 << 10},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := startServer(b)
			if s.Kind != "minicouch" {
				b.Skip("needs minicouch")
			}
			n := c.docs
			if v := envInt("COUCHEPI_BENCH_ATT_DOCS", 0); v > 0 {
				n = v * c.docs / 400
			}
			src := s.newDB(b, "asrc")
			sums := fillAttDB(b, s, src, n, c.size)
			b.ResetTimer()
			for range b.N {
				tgt := s.newDB(b, "atgt")
				rep := testRep(s, src, tgt)
				rep.WorkerBatchSize = 500
				rep.CheckpointInterval = 30000
				t0 := time.Now()
				cpu := startCPU(s)
				stopProf := profileAtt(b, c.name)
				res := runRep(b, rep, Options{})
				dur := time.Since(t0)
				srv, self := cpu.stop()
				stopProf()
				if res.Stats.DocsWritten != int64(n) {
					b.Fatalf("replicated %d docs, want %d", res.Stats.DocsWritten, n)
				}
				checkAttDB(b, s, tgt, sums)
				mib := float64(int64(n)*c.size) / (1 << 20)
				b.ReportMetric(float64(int64(n)*c.size)/1e6/dur.Seconds(), "MB/s")
				b.ReportMetric(float64(n)/dur.Seconds(), "docs/s")
				ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
				if srv[0] >= 0 {
					b.ReportMetric(ms(srv[0])/float64(n), "srv_cpu_ms/doc")
					b.ReportMetric(ms(self)/float64(n), "rep_cpu_ms/doc")
					b.ReportMetric(ms(srv[0]+self)/float64(n), "cpu_ms/doc")
					b.ReportMetric(ms(srv[0]+self)/mib, "cpu_ms/MiB")
					b.ReportMetric((srv[0]+self).Seconds()/dur.Seconds(), "cores")
				}
			}
		})
	}
}

// profileAtt, with COUCHEPI_BENCH_ATT_PPROF=dir, writes CPU profiles of
// the replication to dir: this process's (the replicator) while it runs,
// and minicouch's for its first COUCHEPI_BENCH_ATT_PPROF_S seconds (5),
// when minicouch was started with MINICOUCH_PPROF=addr.
func profileAtt(tb testing.TB, name string) (stop func()) {
	dir := os.Getenv("COUCHEPI_BENCH_ATT_PPROF")
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, "rep-"+name+".pprof"))
	if err != nil {
		tb.Fatal(err)
	}
	pprof.StartCPUProfile(f)
	done := make(chan struct{})
	go func() {
		defer close(done)
		addr := os.Getenv("MINICOUCH_PPROF")
		if addr == "" {
			return
		}
		resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, envInt("COUCHEPI_BENCH_ATT_PPROF_S", 5)))
		if err != nil {
			tb.Log(err)
			return
		}
		defer resp.Body.Close()
		out, _ := os.Create(filepath.Join(dir, "srv-"+name+".pprof"))
		io.Copy(out, resp.Body)
		out.Close()
		if os.Getenv("COUCHEPI_BENCH_ATT_TRACE") != "" {
			resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/trace?seconds=1", addr))
			if err == nil {
				out, _ := os.Create(filepath.Join(dir, "srv-"+name+".trace"))
				io.Copy(out, resp.Body)
				out.Close()
				resp.Body.Close()
			}
		}
	}()
	return func() {
		pprof.StopCPUProfile()
		f.Close()
		<-done
	}
}

// procStatus reads a byte figure (VmHWM, RssAnon, …) of /proc/<pid>/status,
// 0 where unknown.
func procStatus(pid, field string) int64 {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// vmHWM is a process's peak resident set size in bytes.
func vmHWM(pid string) int64 { return procStatus(pid, "VmHWM") }

// anonPeak samples the anonymous resident memory (RssAnon: heap and
// stacks, not the mapped store file) of processes until stop is closed,
// and returns the highest seen of each.
func anonPeak(stop <-chan struct{}, pids ...string) func() []int64 {
	peak := make([]int64, len(pids))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			for i, p := range pids {
				peak[i] = max(peak[i], procStatus(p, "RssAnon"))
			}
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	return func() []int64 { <-done; return peak }
}

// resetHWM restarts a process's peak RSS count (clear_refs 5), where the
// kernel allows it.
func resetHWM(pid string) bool {
	return os.WriteFile("/proc/"+pid+"/clear_refs", []byte("5"), 0) == nil
}

// TestAttachmentPeakRSS replicates 10 × 100 MiB attachments db → db on one
// minicouch and logs the peak RSS of minicouch and of this process (the
// replicator) during the replication: VmHWM, which counts the pages of
// minicouch's memory-mapped store file it read, and the highest RssAnon
// sampled (heap and stacks). It is a measurement, run only with
// COUCHEPI_ATT_RSS=1 (it writes 2 GiB): go test -run AttachmentPeakRSS -v.
// COUCHEPI_ATT_RSS_MIB changes the attachment size.
func TestAttachmentPeakRSS(t *testing.T) {
	if os.Getenv("COUCHEPI_ATT_RSS") == "" {
		t.Skip("set COUCHEPI_ATT_RSS=1 to measure")
	}
	s := startServer(t)
	if s.Kind != "minicouch" {
		t.Skip("needs minicouch")
	}
	size := int64(envInt("COUCHEPI_ATT_RSS_MIB", 100)) << 20
	src, tgt := s.newDB(t, "rsrc"), s.newDB(t, "rtgt")
	sums := fillAttDB(t, s, src, 10, size)
	srvPID, selfPID := strconv.Itoa(s.pid()), strconv.Itoa(os.Getpid())
	srvBefore, selfBefore := vmHWM(srvPID), vmHWM(selfPID)
	if !resetHWM(srvPID) || !resetHWM(selfPID) {
		t.Log("cannot reset VmHWM: the peaks below include the fill")
	}
	rep := testRep(s, src, tgt)
	stop := make(chan struct{})
	anon := anonPeak(stop, srvPID, selfPID)
	t0 := time.Now()
	res := runRep(t, rep, Options{})
	dur := time.Since(t0)
	close(stop)
	peaks := anon()
	if res.Stats.DocsWritten != 10 {
		t.Fatalf("replicated %d docs, want 10", res.Stats.DocsWritten)
	}
	t.Logf("10 × %d MiB in %.1fs (%.0f MB/s); during replication: minicouch peak RSS %d MiB (%d MiB after the fill), peak RssAnon %d MiB; replicator (test process) peak RSS %d MiB (%d MiB before), peak RssAnon %d MiB",
		size>>20, dur.Seconds(), float64(10*size)/1e6/dur.Seconds(),
		vmHWM(srvPID)>>20, srvBefore>>20, peaks[0]>>20, vmHWM(selfPID)>>20, selfBefore>>20, peaks[1]>>20)
	checkAttDB(t, s, tgt, sums)
}
