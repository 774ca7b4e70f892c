package jobserver

import (
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/internal/jobstore"
	"github.com/couchepi/couchepi/plugin/internal/monitor"
	"github.com/couchepi/couchepi/plugin/jobs"
	"github.com/couchepi/couchepi/plugin/kv"
	"github.com/couchepi/couchepi/plugin/kv/etcd"
	"github.com/couchepi/couchepi/plugin/kv/etcd/etcdtest"
)

// pendingQueue returns a queue in an embedded store holding n pending
// persistent jobs, and the size of one job record.
func pendingQueue(b *testing.B, n int) (*jobs.Queue, int) {
	store, err := kv.OpenBolt(filepath.Join(b.TempDir(), "jobs.db"), kv.BoltOptions{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	return pendingQueueOn(b, store, n)
}

// pendingQueueOn is pendingQueue on the given store.
func pendingQueueOn(b *testing.B, store kv.Store, n int) (*jobs.Queue, int) {
	ctx := context.Background()
	q, err := jobs.New(store, jobs.Options{Prefix: []byte(jobstore.QueuePrefix), Tag: jobdata.ShareTag})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { q.Close() })
	if err := q.SetTypeTimeout(ctx, jobdata.JobType, TypeTimeout); err != nil {
		b.Fatal(err)
	}
	opts := parse.DefaultOptions()
	now := time.Now()
	size := 0
	for start := 0; start < n; start += 1000 {
		err := q.Transact(ctx, func(tx *jobs.Tx) error {
			for i := start; i < start+1000 && i < n; i++ {
				body := fmt.Sprintf(`{"source":"http://u:p@127.0.0.1:5984/src%d","target":"http://u:p@127.0.0.1:5984/tgt%d","continuous":true}`, i, i)
				rep, err := parse.ReplicationDoc([]byte(body), parse.UserCtx{}, opts)
				if err != nil {
					return err
				}
				db := fmt.Sprintf("db%d/_replicator", i%10)
				id := parse.PersistentJobID("uuid", fmt.Sprintf("doc%06d", i))
				data := jobdata.New(rep, db, "uuid", fmt.Sprintf("doc%06d", i), now).Encode(testKeys, id)
				size = len(data)
				if err := tx.Add(jobdata.JobType, id, data, time.Time{}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	return q, size
}

// BenchmarkCountStates100k: what a Prometheus scrape spends counting the
// job states of 100k jobs (state members only), against decoding every
// record as _scheduler/jobs does.
func BenchmarkCountStates100k(b *testing.B) {
	const n = 100000
	ctx := context.Background()
	q, _ := pendingQueue(b, n)
	recs := jobstore.Records{Q: q, Keys: testKeys}
	b.ResetTimer()
	var count, decode time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		states, err := recs.CountStates(ctx)
		if err != nil || states[jobdata.Pending] != n {
			b.Fatalf("CountStates = %v, %v", states, err)
		}
		count, decode = count+time.Since(t0), decode+decodeAll(b, recs, n)
	}
	b.ReportMetric(float64(count.Microseconds())/1000/float64(b.N), "count_states_ms")
	b.ReportMetric(float64(decode.Microseconds())/1000/float64(b.N), "decode_all_ms")
	b.ReportMetric(float64(decode)/float64(count), "speedup")
}

// decodeAll times decoding every one of the n job records, the baseline
// the listing benchmarks compare with.
func decodeAll(b *testing.B, recs jobstore.Records, n int) time.Duration {
	t0 := time.Now()
	seen := 0
	if err := recs.Fold(context.Background(), func(string, *jobdata.Record) error { seen++; return nil }); err != nil || seen != n {
		b.Fatalf("Fold saw %d records, %v", seen, err)
	}
	return time.Since(t0)
}

// BenchmarkSchedulerDocs100k: one `GET /_scheduler/docs` page (limit 100)
// with 100k jobs, which walks every job's summary and decodes only the
// page, against decoding every record as the listing once did.
func BenchmarkSchedulerDocs100k(b *testing.B) {
	const n = 100000
	q, _ := pendingQueue(b, n)
	recs := jobstore.Records{Q: q, Keys: testKeys}
	h := monitor.New(recs)
	b.ResetTimer()
	var list, decode time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		w := httptest.NewRecorder()
		h.Serve(w, httptest.NewRequest("GET", "/_scheduler/docs?limit=100&skip=50000", nil), true)
		if w.Code != 200 || !strings.Contains(w.Body.String(), `"total_rows":100000`) {
			b.Fatalf("_scheduler/docs: %d %.200s", w.Code, w.Body.String())
		}
		list, decode = list+time.Since(t0), decode+decodeAll(b, recs, n)
	}
	b.ReportMetric(float64(list.Microseconds())/1000/float64(b.N), "scheduler_docs_ms")
	b.ReportMetric(float64(decode.Microseconds())/1000/float64(b.N), "decode_all_ms")
}

// BenchmarkCycle100kPending: one scheduling cycle of the job server and
// one accept with 100k pending persistent jobs in the embedded store, and
// the plugin heap per pending job.
func BenchmarkCycle100kPending(b *testing.B) {
	benchCycle(b, func(n int) (*jobs.Queue, int) { return pendingQueue(b, n) })
}

// BenchmarkCycle100kPendingEtcd is BenchmarkCycle100kPending with the
// queue on a 3-member loopback etcd, as replication nodes share it.
func BenchmarkCycle100kPendingEtcd(b *testing.B) {
	cluster := etcdtest.StartCluster(b, 3)
	benchCycle(b, func(n int) (*jobs.Queue, int) {
		store, err := etcd.Open(context.Background(), etcd.Config{Endpoints: cluster.Endpoints(), Prefix: "cycle/"})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { store.Close() })
		start := time.Now()
		q, size := pendingQueueOn(b, store, n)
		b.Logf("setup: %d jobs in etcd in %s", n, time.Since(start).Round(time.Second))
		return q, size
	})
}

func benchCycle(b *testing.B, fill func(n int) (*jobs.Queue, int)) {
	const n = 100000
	ctx := context.Background()
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	q, size := fill(n)
	s := New(Options{Queue: q, Keys: testKeys}, DefaultConfig()) // not started: the cycle starts no acceptors
	b.ResetTimer()
	var cycle time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		s.Cycle(ctx)
		cycle += time.Since(t0)
	}
	b.StopTimer()
	t0 := time.Now()
	job, err := q.Accept(ctx, jobdata.JobType, jobs.AcceptOptions{NoWait: true, Choose: s.choose})
	if err != nil || job == nil {
		b.Fatal(err)
	}
	accept := time.Since(t0)
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(cycle.Microseconds())/1000/float64(b.N), "cycle_ms")
	b.ReportMetric(float64(accept.Microseconds())/1000, "accept_ms")
	b.ReportMetric(float64(int64(after.HeapInuse)-int64(before.HeapInuse))/n, "heap_B/job")
	b.ReportMetric(float64(size), "record_B")
}
