package replicate

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/couchclient"
)

// TestBatchTurns: replications into one server send it at most
// max_batches_per_host batch writes (_revs_diff, _bulk_docs) at once, and
// everything still arrives. The target's requests go through a proxy
// that slows them, so that unbounded writes overlap, and counts how many
// are in flight.
func TestBatchTurns(t *testing.T) {
	s := startServer(t)
	src := s.newDB(t, "src")
	var docs []map[string]any
	for i := 0; i < 120; i++ {
		docs = append(docs, map[string]any{"_id": fmt.Sprintf("doc%03d", i), "n": i})
	}
	s.bulk(t, src, true, docs...)
	for _, tc := range []struct {
		limit   string
		bounded int // 0: more than one batch must overlap
	}{
		{"2", 2},
		{"infinity", 0},
	} {
		t.Run(tc.limit, func(t *testing.T) {
			up, _ := url.Parse(strings.TrimSuffix(s.Base, "/"))
			rp := httputil.NewSingleHostReverseProxy(up)
			var mu sync.Mutex
			inFlight, most := 0, 0
			proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				write := r.Method == "POST" && (strings.HasSuffix(r.URL.Path, "/_revs_diff") || strings.HasSuffix(r.URL.Path, "/_bulk_docs"))
				if write {
					mu.Lock()
					inFlight++
					most = max(most, inFlight)
					mu.Unlock()
					time.Sleep(20 * time.Millisecond)
					defer func() { mu.Lock(); inFlight--; mu.Unlock() }()
				}
				rp.ServeHTTP(w, r)
			}))
			defer proxy.Close()
			via := &testServer{Kind: s.Kind, Base: proxy.URL + "/", User: s.User, Pass: s.Pass}

			o := parse.DefaultOptions()
			cfg, err := parse.OptionsFromConfig(map[string]string{"max_batches_per_host": tc.limit})
			if err != nil {
				t.Fatal(err)
			}
			o.MaxBatchesPerHost = cfg.MaxBatchesPerHost
			pool := couchclient.NewPool(couchclient.PoolOptions{})
			defer pool.Close()
			if err := pool.Configure(o); err != nil {
				t.Fatal(err)
			}
			var tgts []string
			var wg sync.WaitGroup
			for range 4 {
				tgt := s.newDB(t, "tgt")
				tgts = append(tgts, tgt)
				rep := testRep(s, src, tgt)
				rep.Target = via.endpoint(tgt)
				rep.WorkerBatchSize = 10
				wg.Add(1)
				go func() { defer wg.Done(); runRep(t, rep, Options{Pool: pool}) }()
			}
			wg.Wait()
			for _, tgt := range tgts {
				if d := diffTrees(s.contents(t, src), s.contents(t, tgt), nil); len(d) > 0 {
					t.Fatalf("%s differs from the source:\n%s", tgt, strings.Join(d, "\n"))
				}
			}
			waits := pool.Stats().BatchWaits
			switch {
			case tc.bounded > 0 && most > tc.bounded:
				t.Errorf("%d batch writes at once, want at most %d", most, tc.bounded)
			case tc.bounded > 0 && waits == 0:
				t.Errorf("no batch waited for its turn")
			case tc.bounded == 0 && (most < 2 || waits != 0):
				t.Errorf("unbounded: %d batch writes at once and %d waits, want several and none", most, waits)
			}
			t.Logf("max_batches_per_host %s: at most %d batch writes at once, %d waited", tc.limit, most, waits)
		})
	}
}
