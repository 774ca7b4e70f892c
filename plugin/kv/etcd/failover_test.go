package etcd_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
	"github.com/couchepi/couchepi/plugin/kv/etcd"
	"github.com/couchepi/couchepi/plugin/kv/etcd/etcdtest"
)

// TestMemberKilled: kill -9 of one member of three, the leader or a
// follower, while reads and transactions stream, fails none of them:
// quorum stands, so each is served by the other members within its
// budget. The budget, 5 s, is more than a failover takes (about 2 s: an
// election timeout, 1 s, plus up to 1 s before a vote) and less than
// etcd's own deadline for a write forwarded to a dead leader (7 s), which
// a request used to wait for.
func TestMemberKilled(t *testing.T) {
	const budget = 5 * time.Second
	for _, victim := range []string{"leader", "follower"} {
		t.Run(victim, func(t *testing.T) {
			c := etcdtest.StartProcessCluster(t, 3)
			s, err := etcd.Open(t.Context(), etcd.Config{Endpoints: c.Endpoints(), Prefix: "killed/"})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var ops, failed atomic.Int64
			var mu sync.Mutex
			var errs []string
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for w := range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						ctx, cancel := context.WithTimeout(context.Background(), budget)
						start := time.Now()
						var err error
						if w%2 == 0 {
							err = s.View(ctx, func(tx kv.ReadTx) error { _, err := tx.Get([]byte("probe")); return err })
						} else {
							err = s.Update(ctx, func(tx kv.Tx) error {
								tx.Add([]byte("n"), 1)
								tx.Set([]byte(fmt.Sprint("w", w, "/", i)), []byte("x"))
								return nil
							})
						}
						cancel()
						ops.Add(1)
						if err != nil {
							failed.Add(1)
							mu.Lock()
							errs = append(errs, fmt.Sprintf("worker %d: %v after %v", w, err, time.Since(start).Round(time.Millisecond)))
							mu.Unlock()
						}
					}
				}()
			}
			time.Sleep(300 * time.Millisecond)
			i := c.Leader()
			if victim == "follower" {
				i = (i + 1) % 3
			}
			killed := time.Now()
			c.Stop(i)
			time.Sleep(6 * time.Second)
			close(stop)
			wg.Wait()
			t.Logf("killed the %s (member %d); %d requests in %v, %d failed", victim, i, ops.Load(), time.Since(killed).Round(time.Millisecond), failed.Load())
			for _, e := range errs {
				t.Error(e)
			}
		})
	}
}
