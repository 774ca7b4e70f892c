package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/internal/seal"
	"github.com/couchepi/couchepi/plugin/kv/etcd/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// recordKeyLabel is the label the replicator derives its key from
// [chttpd_auth] secret with (plugin/cmd/replicator's secretLabel).
const recordKeyLabel = "couchepi replicator job records v1"

// TestE2ESecretRotation (issue 38 item 6): three nodes sharing a queue in
// etcd (an api_frontend and two replication nodes) rotate [chttpd_auth]
// secret without any job stopping. Each node in turn gets the new secret
// with the old one in [replicator] previous_secrets and restarts; once
// every node did, every job record is sealed with the new key, and each
// node in turn drops the old secret and restarts. Throughout, six
// continuous replications (their dbs on a server outside the cluster)
// deliver every new doc after every restart, no job fails or crashes, and
// no node refuses to start.
func TestE2ESecretRotation(t *testing.T) {
	skipShort(t)
	etcdc := etcdtest.StartCluster(t, 1)
	eps := etcdc.Endpoints()
	prefix := fmt.Sprintf("rotate-%d/", time.Now().UnixNano())
	oldSecret := clusterSecret(prefix)
	const newSecret = "9c4e1a7b3f2d8e6c0a5b4d3e2f1a0c9b8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a"
	oldKey, newKey := seal.KeyFromSecret(oldSecret, recordKeyLabel).ID(), seal.KeyFromSecret(newSecret, recordKeyLabel).ID()

	data := startCouch(t, "")
	data.must("PUT", "/src", "", 201)
	total := 5
	data.putDocs("src", 0, total)
	// One replication node can run every job while the other restarts.
	nodes := []*couch{
		startClusterNode(t, eps, prefix, true, false, ""),
		startClusterNode(t, eps, prefix, false, true, "max_jobs = 6\n"),
		startClusterNode(t, eps, prefix, false, true, "max_jobs = 6\n"),
	}
	front := nodes[0]
	const jobs = 6
	for i := range jobs {
		doc := data.repDoc("src", fmt.Sprintf("t%d", i), `,"continuous":true,"create_target":true`)
		front.must("PUT", fmt.Sprintf("/_replicator/r%d", i), doc, 201)
	}
	deliver := func(step string) {
		t.Helper()
		data.putDocs("src", total, 3)
		total += 3
		start := time.Now()
		for i := range jobs {
			tgt := fmt.Sprintf("t%d", i)
			data.eventually(step+": "+tgt+" caught up", 90*time.Second, func() bool { return data.docCount(tgt) == total })
		}
		t.Logf("%s: every job delivered the new docs within %v", step, time.Since(start).Round(100*time.Millisecond))
	}
	deliver("before the rotation")

	// Watch the jobs throughout, through the frontend when it is up.
	var mu sync.Mutex
	bad := map[string]string{}
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			case <-time.After(250 * time.Millisecond):
			}
			code, b, err := front.s.DoAs("admin", "pass", "GET", "/_scheduler/docs/_replicator", nil)
			if err != nil || code != 200 {
				continue
			}
			var list struct {
				Docs []struct {
					DocID string `json:"doc_id"`
					State string `json:"state"`
				} `json:"docs"`
			}
			json.Unmarshal(b, &list)
			mu.Lock()
			if len(list.Docs) != jobs {
				bad[fmt.Sprintf("%d jobs", len(list.Docs))] = "missing"
			}
			for _, d := range list.Docs {
				if d.State == "failed" || d.State == "crashing" {
					bad[d.DocID] = d.State
				}
			}
			mu.Unlock()
		}
	}()

	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	sealedWith := func() map[string]int {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]int{}
		re := regexp.MustCompile(`"sealed_endpoints":"(s\d\.[0-9a-f]+)\.`)
		for _, kv := range resp.Kvs {
			for _, m := range re.FindAllSubmatch(kv.Value, -1) {
				ids[string(m[1])]++
			}
		}
		return ids
	}
	if ids := sealedWith(); ids["s2."+oldKey] < jobs || len(ids) != 1 {
		t.Fatalf("before the rotation the records are sealed with %v, want s2.%s only", ids, oldKey)
	}

	restart := func(i int, change func(n *couch)) {
		t.Helper()
		n := nodes[i]
		change(n)
		starts := strings.Count(n.s.Log(), "replicator started")
		n.stop()
		n.s.Restart(t)
		// The replicator starts in the background on etcd.
		deadline := time.Now().Add(30 * time.Second)
		for strings.Count(n.s.Log(), "replicator started") == starts {
			if log := n.s.Log(); strings.Contains(log, "could not start") || time.Now().After(deadline) {
				t.Fatalf("node %d did not start again:\n%s", i, log)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if log := n.s.Log(); strings.Contains(log, "does not hold") {
			t.Fatalf("node %d after its restart:\n%s", i, log)
		}
		if n == front {
			n.waitUp()
		}
	}
	for i := range nodes {
		restart(i, func(n *couch) {
			n.must("PUT", "/_node/_local/_config/replicator/previous_secrets", fmt.Sprintf("%q", oldSecret), 200)
			n.must("PUT", "/_node/_local/_config/chttpd_auth/secret", fmt.Sprintf("%q", newSecret), 200)
		})
		deliver(fmt.Sprintf("node %d on the new secret, the old one previous", i))
	}
	// Every node has sealed with the new key since its start, and the last
	// one to start sealed every record again.
	if ids := sealedWith(); ids["s2."+newKey] < jobs || len(ids) != 1 {
		t.Fatalf("with every node on the new secret the records are sealed with %v, want s2.%s only", ids, newKey)
	}
	for i := range nodes {
		restart(i, func(n *couch) {
			n.must("DELETE", "/_node/_local/_config/replicator/previous_secrets", "", 200)
		})
		deliver(fmt.Sprintf("node %d on the new secret alone", i))
	}
	close(stop)
	<-watched
	if ids := sealedWith(); ids["s2."+newKey] < jobs || len(ids) != 1 {
		t.Errorf("after the rotation the records are sealed with %v, want s2.%s only", ids, newKey)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bad) != 0 {
		t.Errorf("jobs failed or crashed during the rotation: %v", bad)
	}
}
