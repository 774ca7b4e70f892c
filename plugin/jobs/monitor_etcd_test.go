package jobs

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/kv/etcd/etcdtest"
)

// TestReenqueueUnderLoadEtcd: on etcd, where transactions are optimistic,
// the jobs of a dead runner (held by activity, or under a lease) are
// re-enqueued while a live runner keeps writing for its own jobs, whose
// entries sit in the same index ranges. Re-enqueueing hundreds of jobs per
// transaction over a range read conflicted with every one of those writes
// and never committed (issue 30 item 3: a paused node's jobs stayed
// running for the whole 150 s the test waited).
func TestReenqueueUnderLoadEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	cluster := etcdtest.StartCluster(t, 1)
	for _, mode := range []string{"activity", "lease"} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			prefix := fmt.Sprintf("reenqueue-%s-%d/", mode, time.Now().UnixNano())
			open := func() *Queue {
				q := openEtcdQueue(t, cluster.Endpoints(), prefix, Options{MonitorTick: 50 * time.Millisecond, MonitorLease: time.Second})
				return q
			}
			dead, live := open(), open()
			if err := live.SetTypeTimeout(ctx, typ, 2*time.Second); err != nil {
				t.Fatal(err)
			}
			const n = 100
			for i := 0; i < 2*n; i++ {
				mustAdd(t, live, fmt.Sprintf("j%04d", i), "x", time.Time{})
			}
			var deadLease, liveLease *Lease
			if mode == "lease" {
				var err error
				if deadLease, err = dead.Grant(ctx, LeaseOptions{Node: "dead", TTL: 4 * time.Second, Renew: 100 * time.Millisecond}); err != nil {
					t.Fatal(err)
				}
				if liveLease, err = live.Grant(ctx, LeaseOptions{Node: "live", TTL: 20 * time.Second, Renew: 200 * time.Millisecond}); err != nil {
					t.Fatal(err)
				}
			}
			var liveJobs []*Job
			for i := 0; i < n; i++ {
				if _, err := dead.Accept(ctx, typ, AcceptOptions{NoWait: true, Lease: deadLease}); err != nil {
					t.Fatal(err)
				}
				j, err := live.Accept(ctx, typ, AcceptOptions{NoWait: true, Lease: liveLease})
				if err != nil {
					t.Fatal(err)
				}
				liveJobs = append(liveJobs, j)
			}
			dead.Close() // the dead runner: no more renewals or updates
			// The live runner writes for its jobs all the while.
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for w := 0; w < 4; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					for i := w; ; i = (i + 4) % n {
						select {
						case <-stop:
							return
						default:
						}
						live.Update(ctx, liveJobs[i], nil)
					}
				}(w)
			}
			defer func() { close(stop); wg.Wait() }()
			runMonitors(t, live)
			deadline := time.Now().Add(60 * time.Second)
			for {
				pending, err := live.PendingCount(ctx, typ, time.Time{}, 0)
				if err == nil && pending == n {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d of the dead runner's %d jobs re-enqueued after 60 s", pending, n)
				}
				time.Sleep(100 * time.Millisecond)
			}
			for _, j := range liveJobs[:5] {
				if st, _ := live.GetState(ctx, typ, j.ID); st != Running {
					t.Fatalf("a live job was re-enqueued: %s %s", j.ID, st)
				}
			}
		})
	}
}
