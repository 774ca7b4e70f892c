package jobs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkClusterEtcd (issue 39 items 1-3) measures, at the level of the
// job queue, on a real 3-member etcd and with default lease settings
// (TTL 10 s, renewal every second, monitors every second), what a cluster
// of replication nodes does with many jobs:
//
//   - start: 2 nodes wait for jobs; 4 writers add 1,000 jobs one per
//     transaction (as the frontend does for 1,000 docs); seconds from the
//     last add until all are running (start_s), and the adds (add_s);
//   - failover: one node holds N jobs (500, 5,000) and stops as kill -9
//     would (no renewal, nothing given back); seconds until the other
//     runs all of them (failover_s);
//   - handover: one node holds 1,000 jobs and stops cleanly (revokes its
//     lease, as a job server does on SIGTERM after its checkpoints);
//     seconds until the other runs all of them (handover_s).
//
// A node takes jobs as takeJobs does (many per transaction where the
// queue can). It is not a multi-process harness: the job server, the
// frontend and the replications are left out, so the figures are the
// queue's share of the end-to-end ones. Run it with `make bench-cluster`;
// COUCHEPI_BENCH_CLUSTER=1 is required (it takes minutes), and
// COUCHEPI_BENCH_FAILOVER=500,5000 changes the failover sizes.
func BenchmarkClusterEtcd(b *testing.B) {
	if os.Getenv("COUCHEPI_BENCH_CLUSTER") == "" {
		b.Skip("set COUCHEPI_BENCH_CLUSTER=1 (make bench-cluster): takes minutes")
	}
	sizes := []int{500, 5000}
	if v := os.Getenv("COUCHEPI_BENCH_FAILOVER"); v != "" {
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			if n, err := strconv.Atoi(f); err == nil && n > 0 {
				sizes = append(sizes, n)
			}
		}
	}
	cluster := benchCluster(b)
	run := time.Now().UnixNano()
	prefix := func(name string) string { return fmt.Sprintf("cluster-%d-%s/", run, name) }
	b.Run("start/jobs=1000", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			benchClusterStart(b, cluster.Endpoints(), prefix(fmt.Sprint("start", i)), 1000)
		}
	})
	for _, n := range sizes {
		b.Run(fmt.Sprintf("failover/jobs=%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				benchClusterMove(b, cluster.Endpoints(), prefix(fmt.Sprint("failover", n, "-", i)), n, false)
			}
		})
	}
	b.Run("handover/jobs=1000", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			benchClusterMove(b, cluster.Endpoints(), prefix(fmt.Sprint("handover", i)), 1000, true)
		}
	})
}

// clusterNode is a node of BenchmarkClusterEtcd: a queue running its
// monitors, holding a lease, and taking jobs while running.
type clusterNode struct {
	*benchNode
	lease *Lease
	taken atomic.Int64
}

func newClusterNode(b *testing.B, endpoints []string, prefix, name string) *clusterNode {
	n := &clusterNode{benchNode: newBenchNode(b, endpoints, prefix)}
	ctx := context.Background()
	if err := n.q.SetTypeTimeout(ctx, typ, activityTimeout); err != nil {
		b.Fatal(err)
	}
	l, err := n.q.Grant(ctx, LeaseOptions{Node: name})
	if err != nil {
		b.Fatal(err)
	}
	n.lease = l
	return n
}

// run takes jobs with acceptors goroutines until ctx ends.
func (n *clusterNode) run(ctx context.Context, acceptors int) {
	for range acceptors {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			for ctx.Err() == nil {
				js, err := takeJobs(ctx, n.q, n.lease)
				if err != nil {
					if ctx.Err() == nil && !errors.Is(err, ErrClosed) {
						time.Sleep(10 * time.Millisecond)
					}
					continue
				}
				n.taken.Add(int64(len(js)))
			}
		}()
	}
}

// clusterAcceptors is how many acceptors a node runs (the job server's
// max_acceptors default).
const clusterAcceptors = 2

// addJobs adds ids [from, to) with writers concurrent writers, one job per
// transaction.
func addJobs(b *testing.B, q *Queue, from, to, writers int) {
	ctx := context.Background()
	var next atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= to {
					return
				}
				if err := q.Add(ctx, typ, benchID(i), benchData, time.Time{}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// waitTaken waits until the nodes took want jobs in all; false after limit.
func waitTaken(want int64, limit time.Duration, nodes ...*clusterNode) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		var got int64
		for _, n := range nodes {
			got += n.taken.Load()
		}
		if got >= want {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

func benchClusterStart(b *testing.B, endpoints []string, prefix string, total int) {
	nodes := []*clusterNode{newClusterNode(b, endpoints, prefix, "n0"), newClusterNode(b, endpoints, prefix, "n1")}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, n := range nodes {
		n.run(ctx, clusterAcceptors)
	}
	start := time.Now()
	addJobs(b, nodes[0].q, 0, total, 4)
	added := time.Now()
	if !waitTaken(int64(total), 10*time.Minute, nodes...) {
		b.Fatalf("not all %d jobs started within 10 min", total)
	}
	b.ReportMetric(added.Sub(start).Seconds(), "add_s")
	b.ReportMetric(time.Since(added).Seconds(), "start_s")
	b.Logf("1,000 jobs: added in %s, all running %s after the last add (%d on n0, %d on n1)",
		added.Sub(start).Round(time.Millisecond), time.Since(added).Round(time.Millisecond), nodes[0].taken.Load(), nodes[1].taken.Load())
}

// benchClusterMove: node 0 takes total jobs, then stops (clean: revokes
// its lease; else as kill -9 would); node 1 takes them all.
func benchClusterMove(b *testing.B, endpoints []string, prefix string, total int, clean bool) {
	from := newClusterNode(b, endpoints, prefix, "n0")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for added := 0; added < total; added += 500 {
		err := from.q.Transact(ctx, func(tx *Tx) error {
			for i := added; i < min(added+500, total); i++ {
				if err := tx.Add(typ, benchID(i), benchData, time.Time{}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	fctx, stopFrom := context.WithCancel(ctx)
	from.run(fctx, 8)
	setup := time.Now()
	if !waitTaken(int64(total), 30*time.Minute, from) {
		b.Fatalf("setup: not all %d jobs taken", total)
	}
	stopFrom()
	b.Logf("setup: %d jobs taken by one node in %s", total, time.Since(setup).Round(time.Millisecond))
	to := newClusterNode(b, endpoints, prefix, "n1")
	to.run(ctx, clusterAcceptors)
	time.Sleep(2 * time.Second) // both renewing, at rest
	stopped := time.Now()
	if clean {
		if err := from.lease.Revoke(ctx); err != nil {
			b.Fatal(err)
		}
		from.kill()
	} else {
		from.kill()
	}
	if !waitTaken(1, 10*time.Minute, to) {
		b.Fatal("no job moved within 10 min")
	}
	first := time.Since(stopped)
	if !waitTaken(int64(total), 10*time.Minute, to) {
		b.Fatalf("not all %d jobs moved within 10 min (%d did)", total, to.taken.Load())
	}
	name := "failover_s"
	if clean {
		name = "handover_s"
	}
	b.ReportMetric(first.Seconds(), "first_s")
	b.ReportMetric(time.Since(stopped).Seconds(), name)
	b.Logf("%s: %d jobs running on the other node %s after the stop (the first after %s)", name, total, time.Since(stopped).Round(time.Millisecond), first.Round(time.Millisecond))
}
