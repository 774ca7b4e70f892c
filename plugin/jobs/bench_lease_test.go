package jobs

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/kv/etcd"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// BenchmarkRunningJobsEtcd (issue 30 item 4): 10,000 running jobs across
// two nodes of a 3-member loopback etcd (COUCHEPI_BENCH_RUNNING changes
// the count), held the two ways a node can hold them: "activity", each
// job updated every activity timeout / 8 (61 s / 8, what the job server
// did before node leases), and "lease", one lease per node renewed every
// second. Reports etcd requests per second at rest (every request both
// nodes send, RunMonitors included, over restSeconds), then stops one
// node (as kill -9 would: no more renewals, nothing given back) and
// reports the seconds until the other accepts the first of its jobs
// (first_s) and all of them, one accept after the other (failover_s).
func BenchmarkRunningJobsEtcd(b *testing.B) {
	n := 10_000
	if v, err := strconv.Atoi(os.Getenv("COUCHEPI_BENCH_RUNNING")); err == nil && v > 0 {
		n = v
	}
	cluster := benchCluster(b)
	run := time.Now().UnixNano()
	for _, mode := range []string{"lease", "activity"} {
		b.Run(fmt.Sprintf("%s/jobs=%d", mode, n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				benchRunning(b, cluster.Endpoints(), fmt.Sprintf("running-%d-%s-%d/", run, mode, i), mode == "lease", n)
			}
		})
	}
}

// restSeconds is how long the at-rest request rate is measured.
const restSeconds = 20

// activityTimeout is the job server's type timeout before node leases.
const activityTimeout = 61 * time.Second

// benchNode is one node of BenchmarkRunningJobsEtcd: a queue whose etcd
// client counts the requests it sends.
type benchNode struct {
	q        *Queue
	requests atomic.Int64
	stop     context.CancelFunc
	wg       sync.WaitGroup
}

func newBenchNode(b *testing.B, endpoints []string, prefix string) *benchNode {
	n := &benchNode{}
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		n.requests.Add(1)
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(count)}})
	if err != nil {
		b.Fatal(err)
	}
	s, err := etcd.Open(context.Background(), etcd.Config{Client: cli, Prefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	q, err := New(s, Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.q, n.stop = q, cancel
	n.wg.Add(1)
	go func() { defer n.wg.Done(); q.RunMonitors(ctx) }()
	b.Cleanup(func() { n.kill(); s.Close(); cli.Close() })
	return n
}

// kill stops the node as kill -9 would: its loops end, nothing is given back.
func (n *benchNode) kill() {
	n.stop()
	n.q.Close()
	n.wg.Wait()
}

func benchRunning(b *testing.B, endpoints []string, prefix string, leased bool, total int) {
	ctx := context.Background()
	nodes := []*benchNode{newBenchNode(b, endpoints, prefix), newBenchNode(b, endpoints, prefix)}
	if err := nodes[0].q.SetTypeTimeout(ctx, typ, activityTimeout); err != nil {
		b.Fatal(err)
	}
	for added := 0; added < total; added += 500 {
		err := nodes[0].q.Transact(ctx, func(tx *Tx) error {
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
	held := make([][]*Job, 2)
	var leases [2]*Lease
	setup := time.Now()
	for k, node := range nodes {
		var l *Lease
		if leased {
			var err error
			if l, err = node.q.Grant(ctx, LeaseOptions{Node: fmt.Sprintf("node%d", k)}); err != nil {
				b.Fatal(err)
			}
			leases[k] = l
		}
		for len(held[k]) < total/2 {
			j, err := node.q.Accept(ctx, typ, AcceptOptions{NoWait: true, Lease: l})
			if err != nil {
				b.Fatalf("accept %d: %v", len(held[k]), err)
			}
			held[k] = append(held[k], j)
		}
	}
	b.Logf("setup: %d jobs accepted by 2 nodes in %s", total, time.Since(setup).Round(time.Second))
	// What each node does at rest to keep its jobs: without a lease, an
	// Update of every job every activity timeout / 8, spread over it.
	for k, node := range nodes {
		if leased {
			continue
		}
		node.wg.Add(1)
		go func(node *benchNode, jobs []*Job) {
			defer node.wg.Done()
			every := activityTimeout / 8 / time.Duration(len(jobs))
			t := time.NewTicker(every)
			defer t.Stop()
			for i := 0; ; i = (i + 1) % len(jobs) {
				select {
				case <-node.q.closed:
					return
				case <-t.C:
				}
				node.q.Update(ctx, jobs[i], nil)
			}
		}(node, held[k])
	}
	time.Sleep(2 * time.Second) // past the setup's tail
	before := nodes[0].requests.Load() + nodes[1].requests.Load()
	time.Sleep(restSeconds * time.Second)
	rest := float64(nodes[0].requests.Load()+nodes[1].requests.Load()-before) / restSeconds
	b.ReportMetric(rest, "etcd_req/s")
	b.Logf("at rest: %.1f etcd requests/s", rest)

	// kill -9 of node 0; node 1's acceptors take its jobs once they are due.
	killed := time.Now()
	nodes[0].kill()
	taken := 0
	for taken < total/2 {
		actx, cancel := context.WithTimeout(ctx, 3*activityTimeout)
		_, err := nodes[1].q.Accept(actx, typ, AcceptOptions{Lease: leases[1]})
		cancel()
		if err != nil {
			b.Logf("accept after the kill: %v; %d of %d taken in %s", err, taken, total/2, time.Since(killed).Round(time.Second))
			b.ReportMetric(-1, "failover_s") // not within the bound
			return
		}
		if taken == 0 {
			b.ReportMetric(time.Since(killed).Seconds(), "first_s")
		}
		taken++
	}
	b.ReportMetric(time.Since(killed).Seconds(), "failover_s")
}
