package jobserver

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/internal/jobstore"
	"github.com/couchepi/couchepi/plugin/jobs"
	"github.com/couchepi/couchepi/plugin/kv/etcd"
	"github.com/couchepi/couchepi/plugin/kv/etcd/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// spreadRest is how long BenchmarkSpreadEtcd counts requests at rest.
const spreadRest = 10 * time.Second

// BenchmarkSpreadEtcd (#39 item 4): replication nodes on a 3-member
// loopback etcd (each a queue with its own etcd client, which counts the
// requests it sends, RunMonitors and a lease, as a job server has) take
// the pending jobs as the job server's acceptors do: two acceptors a
// node, AcceptMany under the fair-share bound (TakeBound, MayTake with
// balanceHold). Reports the spread (the largest difference from an even
// share, in %), the seconds until every job was taken, and the etcd
// requests per second of all nodes at rest over spreadRest (renewals and
// monitors: what keeping the jobs costs), which grow with the nodes, not
// with the jobs.
func BenchmarkSpreadEtcd(b *testing.B) {
	cluster := etcdtest.StartCluster(b, 3)
	run := time.Now().UnixNano()
	for _, nodes := range []int{2, 3} {
		for _, n := range []int{1000, 10000} {
			b.Run(fmt.Sprintf("nodes=%d/jobs=%d", nodes, n), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					benchSpread(b, cluster.Endpoints(), fmt.Sprintf("spread-%d-%d-%d-%d/", run, nodes, n, i), nodes, n)
				}
			})
		}
	}
}

// spreadNode is one node of BenchmarkSpreadEtcd.
type spreadNode struct {
	q        *jobs.Queue
	lease    *jobs.Lease
	requests atomic.Int64
	running  atomic.Int64
}

func newSpreadNode(b *testing.B, endpoints []string, prefix, name string) *spreadNode {
	n := &spreadNode{}
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
	q, err := jobs.New(s, jobs.Options{Prefix: []byte(jobstore.QueuePrefix), Tag: jobdata.ShareTag})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); q.RunMonitors(ctx) }()
	if n.lease, err = q.Grant(ctx, jobs.LeaseOptions{Node: name}); err != nil {
		b.Fatal(err)
	}
	n.q = q
	b.Cleanup(func() {
		cancel()
		q.Close()
		wg.Wait()
		s.Close()
		cli.Close()
	})
	return n
}

// accept is one acceptor of the node until nothing is pending.
func (n *spreadNode) accept(ctx context.Context, share *Share, cfg Config) error {
	for {
		deadline := time.Now().Add(balanceHold)
		for !MayTake(n.lease.ID(), int(n.running.Load()), n.q.Leases()) && time.Now().Before(deadline) {
			time.Sleep(250 * time.Millisecond)
		}
		want := min(jobs.MaxAcceptBatch, TakeBound(n.lease.ID(), int(n.running.Load()), n.q.Leases()))
		got, err := n.q.AcceptMany(ctx, jobdata.JobType, want, jobs.AcceptOptions{Lease: n.lease, NoWait: true,
			ChooseMany: func(c, _ []jobs.Candidate) int { return Choose(c, share, nil, cfg) }})
		if errors.Is(err, jobs.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		n.lease.SetLoad(int(n.running.Add(int64(len(got)))), math.MaxInt32)
	}
}

func benchSpread(b *testing.B, endpoints []string, prefix string, count, total int) {
	ctx := context.Background()
	b.StopTimer()
	var nodes []*spreadNode
	for k := 0; k < count; k++ {
		nodes = append(nodes, newSpreadNode(b, endpoints, prefix, fmt.Sprintf("node%d", k)))
	}
	q := nodes[0].q
	if err := q.SetTypeTimeout(ctx, jobdata.JobType, TypeTimeout); err != nil {
		b.Fatal(err)
	}
	for added := 0; added < total; added += 500 {
		err := q.Transact(ctx, func(tx *jobs.Tx) error {
			for i := added; i < min(added+500, total); i++ {
				id := parse32(i)
				data := fmt.Sprintf(`{"db_name":"db%d/_replicator","doc_id":"d%d"}`, i%10, i)
				if err := tx.Add(jobdata.JobType, id, []byte(data), time.Time{}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	for _, n := range nodes {
		n.lease.SetLoad(0, math.MaxInt32)
	}
	time.Sleep(2 * time.Second) // every node's monitors see every lease
	cfg := DefaultConfig()
	b.StartTimer()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 2*count)
	for _, n := range nodes {
		for a := 0; a < 2; a++ {
			wg.Add(1)
			go func() { defer wg.Done(); errs <- n.accept(ctx, NewShare(), cfg) }()
		}
	}
	wg.Wait()
	took := time.Since(start)
	b.StopTimer()
	close(errs)
	for err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	share := float64(total) / float64(count)
	worst := 0.0
	var per []int64
	for _, n := range nodes {
		per = append(per, n.running.Load())
		worst = max(worst, math.Abs(float64(n.running.Load())-share)/share*100)
	}
	time.Sleep(2 * time.Second) // past the last renewals that publish the loads
	var before int64
	for _, n := range nodes {
		before += n.requests.Load()
	}
	time.Sleep(spreadRest)
	var after int64
	for _, n := range nodes {
		after += n.requests.Load()
	}
	rest := float64(after-before) / spreadRest.Seconds()
	b.ReportMetric(worst, "spread_%")
	b.ReportMetric(took.Seconds(), "take_s")
	b.ReportMetric(rest, "etcd_req/s")
	b.Logf("%d nodes, %d jobs: taken in %.1f s, per node %v (spread %.1f %%), at rest %.1f etcd requests/s", count, total, took.Seconds(), per, worst, rest)
}

// parse32 is a job id that looks random (as replication job ids do) for i.
func parse32(i int) string {
	return fmt.Sprintf("%08x%024x", uint32(i)*2654435761, i)
}
