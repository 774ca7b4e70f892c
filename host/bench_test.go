package host

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/couchepi/couchepi/hooks"
)

// BenchmarkBeforeDocUpdateRoundTrip measures one before_doc_update call
// through a real docguard process (accepted write): p50 and p99 in µs.
func BenchmarkBeforeDocUpdateRoundTrip(b *testing.B) {
	h, _ := newTestHost(b, Config{Config: guardConfig(nil)}, Spec{Path: docguardV1})
	ctx := context.Background()
	doc := []byte(`{"_id":"bench","type":"t","owner":"o","n":1}`)
	for i := 0; i < 200; i++ { // warm up connections and code paths
		if _, err := h.BeforeDocUpdate(ctx, "b_guarded", doc, alice); err != nil {
			b.Fatal(err)
		}
	}
	n := max(b.N, 5000)
	lat := make([]time.Duration, n)
	pid := h.Plugins()[0].PID
	hostCPU0, plugCPU0 := processCPU(os.Getpid()), processCPU(pid)
	b.ResetTimer()
	for i := range lat {
		start := time.Now()
		if _, err := h.BeforeDocUpdate(ctx, "b_guarded", doc, alice); err != nil {
			b.Fatal(err)
		}
		lat[i] = time.Since(start)
	}
	b.StopTimer()
	hostCPU, plugCPU := processCPU(os.Getpid())-hostCPU0, processCPU(pid)-plugCPU0
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[n/2].Nanoseconds())/1e3, "p50_µs")
	b.ReportMetric(float64(lat[n*99/100].Nanoseconds())/1e3, "p99_µs")
	// CPU time per call of each process (scheduler wake-ups included):
	// steadier than latency on a shared machine.
	if hostCPU0 >= 0 && plugCPU0 >= 0 {
		b.ReportMetric(float64(hostCPU.Microseconds())/float64(n), "host_cpu_µs/call")
		b.ReportMetric(float64(plugCPU.Microseconds())/float64(n), "plugin_cpu_µs/call")
	}
}

// processCPU returns the user+system CPU time pid has used so far, from
// /proc/<pid>/stat (in clock ticks of 10 ms); -1 where there is no /proc.
func processCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	// Fields after the command name (which may hold spaces): state is the
	// 3rd field, utime and stime the 14th and 15th.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return -1
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// BenchmarkUnsubscribedWrites compares the rate of writes to a db no plugin
// subscribed to, with docguard loaded and without any plugin. A "write" is
// what a server does per write: the host's Subscribed checks around the
// least any CouchDB-compatible server does to store a doc in memory (read
// _id/_rev from the JSON body, compute the new rev as md5 of the body,
// store it in a map). ns/subscribed_check is the host's cost per check.
func BenchmarkUnsubscribedWrites(b *testing.B) {
	empty, _ := newTestHost(b, Config{}, Spec{})
	loaded, _ := newTestHost(b, Config{Config: guardConfig(nil)}, Spec{Path: docguardV1})
	if loaded.Subscribed(hooks.BeforeDocUpdate, "plain") || !loaded.Subscribed(hooks.BeforeDocUpdate, "x_guarded") {
		b.Fatal("subscriptions not as expected")
	}
	doc := []byte(`{"_id":"d","_rev":"1-967a00dff5e02add41819138abb3284d","v":1}`)
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("doc-%d", i)
	}
	run := func(h *Host, n int) time.Duration {
		var mu sync.Mutex
		store := map[string][md5.Size]byte{}
		defer func() { sink = len(store) }()
		ctx := context.Background()
		start := time.Now()
		for i := 0; i < n; i++ {
			body := doc
			if h.Subscribed(hooks.BeforeDocUpdate, "plain") {
				body, _ = h.BeforeDocUpdate(ctx, "plain", body, alice)
			}
			var meta struct {
				ID  string `json:"_id"`
				Rev string `json:"_rev"`
			}
			if err := json.Unmarshal(body, &meta); err != nil {
				b.Fatal(err)
			}
			rev := md5.Sum(body)
			mu.Lock()
			store[keys[i&1023]] = rev
			mu.Unlock()
			if h.Subscribed(hooks.AfterDocWrite, "plain") {
				h.AfterDocWrite(hooks.DocWrite{DB: "plain", DocID: keys[i&1023], Doc: body})
			}
		}
		return time.Since(start)
	}
	// Short interleaved rounds, so load from other processes hits both
	// sides alike; the fastest half of each side's rounds is summed.
	const rounds, perRound = 40, 30_000
	var tEmpty, tLoaded []time.Duration
	b.ResetTimer()
	for r := 0; r < max(rounds, b.N); r++ {
		tEmpty = append(tEmpty, run(empty, perRound))
		tLoaded = append(tLoaded, run(loaded, perRound))
	}
	b.StopTimer()
	rate := func(ts []time.Duration) float64 {
		sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
		var sum time.Duration
		for _, d := range ts[:len(ts)/2] {
			sum += d
		}
		return float64(perRound*(len(ts)/2)) / sum.Seconds()
	}
	rEmpty, rLoaded := rate(tEmpty), rate(tLoaded)
	b.ReportMetric(rEmpty, "writes/s_no_plugin")
	b.ReportMetric(rLoaded, "writes/s_plugin_loaded")
	b.ReportMetric(100*rLoaded/rEmpty, "ratio_%")

	// The cost itself: one Subscribed check for an unsubscribed db.
	const checks = 5_000_000
	start := time.Now()
	hits := 0
	for i := 0; i < checks; i++ {
		if loaded.Subscribed(hooks.AfterDocWrite, "plain") {
			hits++
		}
	}
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/checks, "ns/subscribed_check")
	sink += hits
}

// BenchmarkReloadPause swaps docguard v1 ↔ v2 under continuous writes to a
// guarded db and reports the longest time a write waited (slowest single
// write) and the longest run of refused writes.
func BenchmarkReloadPause(b *testing.B) {
	h, srv := newTestHost(b, Config{Config: guardConfig(nil)}, Spec{Path: docguardV1})
	srv.createDB("p_guarded")
	var (
		mu        sync.Mutex
		slowest   time.Duration
		refusing  time.Time
		longest   time.Duration
		refused   int
		written   int
		stop      = make(chan struct{})
		wg        sync.WaitGroup
		doc       = `"type":"t","owner":"o","created_at":"now"`
		reloadDur time.Duration
	)
	for k := 0; k < 4; k++ {
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				_, err := srv.put(context.Background(), "p_guarded", []byte(fmt.Sprintf(`{"_id":"w%d-%d",%s}`, k, i, doc)), alice)
				end := time.Now()
				mu.Lock()
				written++
				slowest = max(slowest, end.Sub(start))
				if err != nil {
					refused++
					if refusing.IsZero() {
						refusing = start
					}
				} else if !refusing.IsZero() {
					longest = max(longest, end.Sub(refusing))
					refusing = time.Time{}
				}
				mu.Unlock()
			}
		}(k)
	}
	time.Sleep(200 * time.Millisecond)
	b.ResetTimer()
	swaps := max(b.N, 4)
	for i := 0; i < swaps; i++ {
		next := docguardV2
		if i%2 == 1 {
			next = docguardV1
		}
		start := time.Now()
		if err := h.Reload(context.Background(), "docguard", Spec{Path: next}); err != nil {
			b.Fatal(err)
		}
		reloadDur = max(reloadDur, time.Since(start))
		time.Sleep(200 * time.Millisecond)
	}
	b.StopTimer()
	close(stop)
	wg.Wait()
	b.ReportMetric(float64(slowest.Microseconds())/1e3, "slowest_write_ms")
	b.ReportMetric(float64(longest.Microseconds())/1e3, "longest_refusal_ms")
	b.ReportMetric(float64(refused), "refused_writes")
	b.ReportMetric(float64(written), "writes")
	b.ReportMetric(float64(reloadDur.Milliseconds()), "reload_ms")
}

// sink keeps benchmark results alive.
var sink int
