package e2e

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/kv/etcd/etcdtest"
)

// TestE2EEtcdMemberKilled (issue 37 item 4): kill -9 of one etcd member
// of three, the leader, while clients keep sending `POST /_replicate`,
// `_replicator` doc writes and `_scheduler/jobs` reads: quorum stands, so
// none of them fails.
func TestE2EEtcdMemberKilled(t *testing.T) {
	skipShort(t)
	etcdc := etcdtest.StartProcessCluster(t, 3)
	prefix := fmt.Sprintf("e2e-kill-%d/", time.Now().UnixNano())
	c := startClusterNode(t, etcdc.Endpoints(), prefix, true, true, "")
	c.must("PUT", "/src", "", 201)
	c.putDocs("src", 0, 3)

	type request struct {
		name string
		send func(i int) (int, string)
		want int
	}
	requests := []request{
		{"POST /_replicate", func(i int) (int, string) {
			return c.req("POST", "/_replicate", fmt.Sprintf(`{"source":%q,"target":%q,"continuous":true,"create_target":true}`,
				c.endpoint("src"), c.endpoint(fmt.Sprint("tr", i))))
		}, 202},
		{"PUT /_replicator doc", func(i int) (int, string) {
			return c.req("PUT", fmt.Sprintf("/_replicator/d%d", i), c.repDoc("src", fmt.Sprint("td", i), `,"continuous":true,"create_target":true`))
		}, 201},
		{"GET /_scheduler/jobs", func(int) (int, string) { return c.req("GET", "/_scheduler/jobs?limit=1", "") }, 200},
	}
	stop := make(chan struct{})
	var mu sync.Mutex
	var sent int
	slowest := map[string]time.Duration{}
	var failures []string
	var wg sync.WaitGroup
	for _, r := range requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				start := time.Now()
				code, body := r.send(i)
				took := time.Since(start)
				mu.Lock()
				sent++
				slowest[r.name] = max(slowest[r.name], took)
				if code != r.want {
					failures = append(failures, fmt.Sprintf("%s #%d: %d %s after %v", r.name, i, code, strings.TrimSpace(body), took.Round(time.Millisecond)))
				}
				mu.Unlock()
			}
		}()
	}
	time.Sleep(2 * time.Second)
	leader := etcdc.Leader()
	if leader < 0 {
		t.Fatal("no etcd leader")
	}
	etcdc.Stop(leader)
	time.Sleep(10 * time.Second)
	close(stop)
	wg.Wait()
	t.Logf("%d requests, etcd leader (member %d) killed 2 s in, 10 s more after; slowest: %v", sent, leader, slowest)
	for _, f := range failures {
		t.Error(f)
	}
}
