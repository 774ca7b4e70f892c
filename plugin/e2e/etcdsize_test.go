package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/kv/etcd/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestE2EEtcdSizeSoak (issue 30 item 13; COUCHEPI_ETCD_SOAK=1): a 3-member
// etcd, one api_frontend and two replication nodes run 30 continuous
// replications whose sources get a steady stream of writes, with stats
// pushed every second. After COUCHEPI_ETCD_SOAK_WARMUP minutes (12: the
// queue keeps 10 minutes of its transition log, which fills meanwhile),
// it logs the size of etcd's data file every minute for
// COUCHEPI_ETCD_SOAK_MINUTES (10), with the keys under the queue's prefix,
// and, with the store compacting (the default), fails if the file grew by
// more than a tenth over those minutes. COUCHEPI_ETCD_SOAK_COMPACT=0 turns
// compaction off to show the growth it prevents (nothing is asserted
// then).
func TestE2EEtcdSizeSoak(t *testing.T) {
	if os.Getenv("COUCHEPI_ETCD_SOAK") == "" {
		t.Skip("22-minute soak: set COUCHEPI_ETCD_SOAK=1 (and -timeout 60m)")
	}
	envMinutes := func(name string, def, least int) int {
		v := os.Getenv(name)
		if v == "" {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < least {
			t.Fatalf("%s=%q: want a number of minutes ≥ %d", name, v, least)
		}
		return n
	}
	warmup := envMinutes("COUCHEPI_ETCD_SOAK_WARMUP", 12, 0)
	minutes := envMinutes("COUCHEPI_ETCD_SOAK_MINUTES", 10, 1)
	compact := os.Getenv("COUCHEPI_ETCD_SOAK_COMPACT") != "0"
	extra := "stats_update_interval_sec = 1\nmax_jobs = 20\n"
	etcdExtra := ""
	if !compact {
		etcdExtra = "compact_interval_sec = 0\n"
	}
	etcdc := etcdtest.StartCluster(t, 3)
	prefix := fmt.Sprintf("soak-%d/", time.Now().UnixNano())
	front := newClusterNodeEtcd(t, etcdc.Endpoints(), prefix, true, false, extra, etcdExtra)
	front.waitUp()
	newClusterNodeEtcd(t, etcdc.Endpoints(), prefix, false, true, extra, etcdExtra)
	newClusterNodeEtcd(t, etcdc.Endpoints(), prefix, false, true, extra, etcdExtra)

	const jobs = 30
	for i := 0; i < jobs; i++ {
		src := fmt.Sprintf("src%02d", i)
		front.must("PUT", "/"+src, "", 201)
		front.must("PUT", fmt.Sprintf("/_replicator/r%02d", i),
			front.repDoc(src, fmt.Sprintf("tgt%02d", i), `,"continuous":true,"create_target":true`), 201)
	}
	// A steady stream of writes: 20 docs a second over the sources.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			front.req("PUT", fmt.Sprintf("/src%02d/d%07d", n%jobs, n), `{"pad":"`+strings.Repeat("x", 500)+`"}`)
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	cli, err := clientv3.New(clientv3.Config{Endpoints: etcdc.Endpoints(), Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	// size returns the largest data file of the members and its bytes in use.
	size := func() (db, inUse int64, rev int64) {
		for _, ep := range etcdc.Endpoints() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			st, err := cli.Status(ctx, ep)
			cancel()
			if err != nil {
				t.Fatalf("status of %s: %v", ep, err)
			}
			db, inUse, rev = max(db, st.DbSize), max(inUse, st.DbSizeInUse), max(rev, st.Header.Revision)
		}
		return db, inUse, rev
	}
	mb := func(b int64) string { return fmt.Sprintf("%.1f MB", float64(b)/(1<<20)) }
	// census counts the keys under the queue's prefix by what they are.
	spaces := map[byte]string{1: "jobs", 2: "pending", 6: "activity", 7: "chunks", 9: "log", 10: "tagged"}
	census := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatalf("census: %v", err)
		}
		counts := map[string]int{}
		for _, kv := range resp.Kvs {
			k := string(kv.Key[len(prefix):])
			name := "other"
			switch {
			case strings.HasPrefix(k, "d/j/") && len(k) >= 13:
				if name = spaces[k[12]]; name == "" {
					name = "queue other"
				}
			case strings.HasPrefix(k, "d/r/"):
				name = "replicator"
			case strings.HasPrefix(k, "t/"):
				name = "tombstones"
			case strings.HasPrefix(k, "m/c/"):
				name = "commit markers"
			}
			counts[name]++
		}
		var parts []string
		for name, n := range counts {
			parts = append(parts, fmt.Sprintf("%s %d", name, n))
		}
		slices.Sort(parts)
		return fmt.Sprintf("%d keys (%s)", len(resp.Kvs), strings.Join(parts, ", "))
	}
	sample := func(m int) int64 {
		db, inUse, rev := size()
		running := strings.Count(front.must("GET", "/_scheduler/jobs", "", 200), `"pid":"`)
		t.Logf("minute %d: data file %s (%s in use), revision %d, %d jobs running; %s", m, mb(db), mb(inUse), rev, running, census())
		return db
	}
	t.Logf("compaction %v, %d minutes of warm-up", compact, warmup)
	for m := 0; m < warmup; m++ {
		sample(m)
		time.Sleep(time.Minute)
	}
	first := sample(warmup)
	t.Logf("measuring for %d minutes", minutes)
	var last int64
	for m := 1; m <= minutes; m++ {
		time.Sleep(time.Minute)
		last = sample(warmup + m)
	}
	t.Logf("over %d minutes under load: etcd's data file %s -> %s", minutes, mb(first), mb(last))
	if compact && last > first+first/10 {
		t.Errorf("etcd's data file grew from %s to %s in %d minutes: it still grows", mb(first), mb(last), minutes)
	}
}
