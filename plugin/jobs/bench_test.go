package jobs

import (
	"context"
	"crypto/md5"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
	"github.com/couchepi/couchepi/plugin/kv/etcd/etcdtest"
)

// benchPending is the queue size the benchmarks run against.
const benchPending = 100_000

// benchData is a replication-job-sized data blob.
var benchData = []byte(`{"rep":{"source":"http://127.0.0.1:5984/src","target":"http://127.0.0.1:5984/tgt","options":{"continuous":true}},"state":"pending","retries":0}`)

// benchFixture is a bolt queue shared by the benchmarks of one process.
type benchFixture struct {
	once  sync.Once
	dir   string
	store kv.Store
	q     *Queue
	err   error
}

var (
	durable, noSync benchFixture
	benchNext       int // id counter for generated jobs
)

// benchID is the id of the n-th generated job, shaped as replication ids
// are: a hex digest, then the kind.
func benchID(n int) string {
	return fmt.Sprintf("%x+continuous", md5.Sum(binary.BigEndian.AppendUint64(nil, uint64(n))))
}

func TestMain(m *testing.M) {
	etcdtest.ServeMember()
	code := m.Run()
	for _, f := range []*benchFixture{&durable, &noSync} {
		if f.store != nil {
			f.q.Close()
			f.store.Close()
			os.RemoveAll(f.dir)
		}
	}
	os.Exit(code)
}

// addBatch adds n pending jobs in transactions of 10k.
func addBatch(ctx context.Context, q *Queue, n int) error {
	for done := 0; done < n; {
		k := min(10_000, n-done)
		err := q.Transact(ctx, func(tx *Tx) error {
			for i := 0; i < k; i++ {
				if err := tx.Add(typ, benchID(benchNext+i), benchData, time.Time{}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		benchNext += k
		done += k
	}
	return nil
}

// benchQueue returns the durable bolt queue holding benchPending pending
// jobs (topped up between benchmarks).
func benchQueue(b *testing.B) *Queue { return benchFixtureQueue(b, &durable, false) }

func benchFixtureQueue(b *testing.B, fixture *benchFixture, nosync bool) *Queue {
	ctx := context.Background()
	fixture.once.Do(func() {
		fixture.dir, fixture.err = os.MkdirTemp("", "jobs-bench")
		if fixture.err != nil {
			return
		}
		fixture.store, fixture.err = kv.OpenBolt(filepath.Join(fixture.dir, "jobs.db"), kv.BoltOptions{NoSync: nosync})
		if fixture.err != nil {
			return
		}
		fixture.q, _ = New(fixture.store, Options{})
		fixture.err = fixture.q.SetTypeTimeout(ctx, typ, time.Minute)
	})
	if fixture.err != nil {
		b.Fatal(fixture.err)
	}
	n, err := fixture.q.PendingCount(ctx, typ, time.Time{}, 0)
	if err != nil {
		b.Fatal(err)
	}
	if n < benchPending {
		start := time.Now()
		if err := addBatch(ctx, fixture.q, benchPending-n); err != nil {
			b.Fatal(err)
		}
		if benchPending-n > 50_000 {
			b.Logf("setup: %d jobs added in batches of 10k in %s (%.0f jobs/s)", benchPending-n, time.Since(start), float64(benchPending-n)/time.Since(start).Seconds())
		}
	}
	return fixture.q
}

// BenchmarkAdd adds one job per durable transaction to a queue holding 100k
// pending jobs.
func BenchmarkAdd(b *testing.B) {
	q := benchQueue(b)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := q.Add(ctx, typ, fmt.Sprintf("add-%d-%d", benchNext, i), benchData, time.Time{}); err != nil {
			b.Fatal(err)
		}
	}
	benchNext += b.N
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "adds/s")
}

// BenchmarkAddBatch adds jobs 1000 per transaction (the bulk path through
// Transact).
func BenchmarkAddBatch(b *testing.B) {
	q := benchQueue(b)
	ctx := context.Background()
	b.ResetTimer()
	for done := 0; done < b.N; {
		k := min(1000, b.N-done)
		if err := addBatch(ctx, q, k); err != nil {
			b.Fatal(err)
		}
		done += k
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "adds/s")
}

// BenchmarkAccept accepts jobs one by one from 100k pending and reports
// latency percentiles.
func BenchmarkAccept(b *testing.B) { benchAccept(b, benchQueue(b)) }

// BenchmarkAcceptNoSync is BenchmarkAccept without fsync: the queue's own
// cost, separated from the disk's.
func BenchmarkAcceptNoSync(b *testing.B) { benchAccept(b, benchFixtureQueue(b, &noSync, true)) }

func benchAccept(b *testing.B, q *Queue) {
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := q.Accept(ctx, typ, AcceptOptions{NoWait: true}); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50_ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99_ms")
}

// BenchmarkPendingCount counts all 100k due pending jobs.
func BenchmarkPendingCount(b *testing.B) {
	q := benchQueue(b)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n, err := q.PendingCount(ctx, typ, time.Time{}, 0)
		if err != nil || n < benchPending {
			b.Fatalf("%d %v", n, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/count")
}

// BenchmarkPendingCountLimited counts with couch_jobs' default limit 1024.
func BenchmarkPendingCountLimited(b *testing.B) {
	q := benchQueue(b)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := q.PendingCount(ctx, typ, time.Time{}, 1024); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFold folds over every job of the type (≥100k).
func BenchmarkFold(b *testing.B) {
	q := benchQueue(b)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n := 0
		if err := q.Fold(ctx, typ, func(string, State, []byte) error { n++; return nil }); err != nil || n < benchPending {
			b.Fatalf("%d %v", n, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/fold")
}

// BenchmarkMemoryPerJob measures the Go heap growth of adding 100k jobs to a
// queue (the queue keeps no per-job state in memory; bolt's mmap is not heap).
func BenchmarkMemoryPerJob(b *testing.B) {
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		dir := b.TempDir()
		s, err := kv.OpenBolt(filepath.Join(dir, "mem.db"), kv.BoltOptions{NoSync: true})
		if err != nil {
			b.Fatal(err)
		}
		q, _ := New(s, Options{})
		if err := q.SetTypeTimeout(ctx, typ, time.Minute); err != nil {
			b.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		if err := addBatch(ctx, q, benchPending); err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/benchPending, "heap_B/job")
		q.Close()
		s.Close()
	}
}
