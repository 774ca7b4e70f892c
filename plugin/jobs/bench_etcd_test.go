package jobs

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
	"github.com/couchepi/couchepi/plugin/kv/etcd"
	"github.com/couchepi/couchepi/plugin/kv/etcd/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdNode opens one node's store and queue on the benchmark's etcd, as a
// separate replication node would.
func etcdNode(b *testing.B, endpoints []string, prefix string, opts Options) *Queue {
	s, err := etcd.Open(context.Background(), etcd.Config{Endpoints: endpoints, Prefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	q, err := New(s, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { q.Close(); s.Close() })
	return q
}

// etcdQueues returns n queues (nodes) on the etcd at endpoints, topped up
// to benchPending pending jobs.
func etcdQueues(b *testing.B, endpoints []string, prefix string, n int, opts Options) []*Queue {
	qs := make([]*Queue, n)
	for i := range qs {
		qs[i] = etcdNode(b, endpoints, prefix, opts)
	}
	ctx := context.Background()
	if err := qs[0].SetTypeTimeout(ctx, typ, time.Minute); err != nil {
		b.Fatal(err)
	}
	have, err := qs[0].PendingCount(ctx, typ, time.Time{}, 0)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for have < benchPending {
		// etcd takes 1.5 MiB per request: 500 jobs per transaction.
		k := min(500, benchPending-have)
		err := qs[0].Transact(ctx, func(tx *Tx) error {
			for i := 0; i < k; i++ {
				if err := tx.Add(typ, benchID(benchNext+i), benchData, time.Time{}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		benchNext += k
		have += k
	}
	if d := time.Since(start); d > time.Second {
		b.Logf("setup: topped up to %d pending jobs in %s", benchPending, d.Round(time.Millisecond))
	}
	return qs
}

// BenchmarkAcceptEtcd accepts jobs one by one from 100k pending on a
// 3-member loopback etcd, from one node and from two nodes at once,
// reporting accept latency percentiles and job starts per second: picked
// at random ("plain"), and as the job server picks, from a queue tagged
// by replicator db with Choose offered one job per tag ("choose"). One
// after the other, the accepts of two nodes and the three etcd members
// fill this machine's cores, so their latency is also that of a saturated
// machine; "paced" runs the two nodes at pacedRate accepts a second each
// (a job server starts at most max_churn jobs an interval), timed from
// when each accept was due, so a late one counts its wait (and from its
// call, as own_p50/own_p99). Each node's
// first accept (a started node's) is timed apart, as first_accept_ms. The members run
// in the benchmark's process, or each in its own with
// COUCHEPI_BENCH_ETCD=processes, as they do in production.
func BenchmarkAcceptEtcd(b *testing.B) {
	cluster := benchCluster(b)
	run := time.Now().UnixNano()
	for _, mode := range []struct {
		name   string
		opts   Options
		accept AcceptOptions
	}{
		{"plain", Options{}, AcceptOptions{NoWait: true}},
		{"choose", Options{Tag: benchTag}, AcceptOptions{NoWait: true, Choose: func(c []Candidate) int { return mrand.IntN(len(c)) }}},
	} {
		prefix := fmt.Sprintf("bench-%d-%s/", run, mode.name)
		for _, run := range []struct {
			nodes int
			rate  int // accepts per second per node; 0: one after the other
		}{{1, 0}, {2, 0}, {2, pacedRate}} {
			name := fmt.Sprintf("%s/nodes=%d", mode.name, run.nodes)
			if run.rate > 0 {
				name += fmt.Sprintf("/paced=%d", run.rate*run.nodes)
			}
			b.Run(name, func(b *testing.B) {
				qs := etcdQueues(b, cluster.Endpoints(), prefix, run.nodes, mode.opts)
				benchAcceptAt(b, qs, mode.accept, run.rate)
				if size := etcdSizeInUse(b, cluster.Endpoints()[0]); size > 0 {
					b.ReportMetric(float64(size)/benchPending, "etcd_bytes/job")
				}
			})
		}
	}
}

// benchCluster starts the 3-member etcd of the etcd benchmarks, in this
// process or, with COUCHEPI_BENCH_ETCD=processes, a process per member.
func benchCluster(b *testing.B) *etcdtest.Cluster {
	switch v := os.Getenv("COUCHEPI_BENCH_ETCD"); v {
	case "":
		return etcdtest.StartCluster(b, 3)
	case "processes":
		return etcdtest.StartProcessCluster(b, 3)
	default:
		b.Fatalf("COUCHEPI_BENCH_ETCD=%q: want processes or nothing", v)
		return nil
	}
}

// benchTag spreads generated jobs over 16 tags, as the jobs of 16
// replicator dbs are: by the last digit of their digest, so that a job's
// tag tells nothing of where its id sorts, as a replicator db does not.
func benchTag(_, id string, _ []byte) string { return "db" + id[31:32] }

// etcdSizeInUse is the logical size of the etcd member's database.
func etcdSizeInUse(b *testing.B, endpoint string) int64 {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	st, err := cli.Status(context.Background(), endpoint)
	if err != nil {
		b.Fatal(err)
	}
	return st.DbSizeInUse
}

// BenchmarkAcceptBoltNodes is the same measure on the embedded bolt store
// (one node: bolt has one owner process), for comparison in one run.
func BenchmarkAcceptBoltNodes(b *testing.B) {
	benchAcceptAt(b, []*Queue{benchQueue(b)}, AcceptOptions{NoWait: true}, 0)
}

// pacedRate is the accepts per second of each node in the paced runs.
const pacedRate = 50

// benchAcceptAt accepts b.N jobs from qs, each queue at rate accepts a
// second (0: one after the other).
func benchAcceptAt(b *testing.B, qs []*Queue, opt AcceptOptions, rate int) {
	ctx := context.Background()
	var mu sync.Mutex
	lat := make([]time.Duration, 0, b.N)
	var late []time.Duration // paced: how late a sleep until an accept was due ended
	var own []time.Duration  // paced: the accepts timed from their call, not from when due
	var wg sync.WaitGroup
	per := (b.N + len(qs) - 1) / len(qs)
	// A node's first accept lists the tags of a tagged queue, a count of
	// the whole tag index on etcd: once per node start, not per accept,
	// so it is reported on its own and not among the accepts timed (paced,
	// it would make the accepts due behind it late).
	var first time.Duration
	for _, q := range qs {
		start := time.Now()
		if _, err := q.Accept(ctx, typ, opt); err != nil {
			b.Fatal(err)
		}
		first = max(first, time.Since(start))
	}
	b.ResetTimer()
	for _, q := range qs {
		wg.Add(1)
		go func(q *Queue) {
			defer wg.Done()
			local := make([]time.Duration, 0, per)
			var localLate, localOwn []time.Duration
			begin := time.Now()
			for i := 0; i < per; i++ {
				start := time.Now()
				if rate > 0 {
					start = begin.Add(time.Duration(i) * time.Second / time.Duration(rate))
					if d := time.Until(start); d > 0 {
						time.Sleep(d)
						localLate = append(localLate, time.Since(start))
					}
				}
				called := time.Now()
				if _, err := q.Accept(ctx, typ, opt); err != nil {
					b.Error(err)
					return
				}
				local = append(local, time.Since(start))
				if rate > 0 {
					localOwn = append(localOwn, time.Since(called))
				}
			}
			mu.Lock()
			lat = append(lat, local...)
			late = append(late, localLate...)
			own = append(own, localOwn...)
			mu.Unlock()
		}(q)
	}
	wg.Wait()
	b.StopTimer()
	if len(lat) == 0 {
		return
	}
	b.ReportMetric(float64(first.Microseconds())/1000, "first_accept_ms")
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50_ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99_ms")
	b.ReportMetric(float64(len(lat))/b.Elapsed().Seconds(), "starts/s")
	if len(late) > 0 {
		// The machine's share of the latency: how late a goroutine
		// runs when its sleep ends.
		sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
		b.ReportMetric(float64(late[len(late)/2].Microseconds())/1000, "late_p50_ms")
		b.ReportMetric(float64(late[len(late)*99/100].Microseconds())/1000, "late_p99_ms")
	}
	if len(own) > 0 {
		sort.Slice(own, func(i, j int) bool { return own[i] < own[j] })
		b.ReportMetric(float64(own[len(own)/2].Microseconds())/1000, "own_p50_ms")
		b.ReportMetric(float64(own[len(own)*99/100].Microseconds())/1000, "own_p99_ms")
	}
}

var _ kv.Store = (*etcd.Store)(nil)
