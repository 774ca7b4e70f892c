package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestKill9DuringBulkDocs streams _bulk_docs batches into minicouch from
// several clients, kills the server with SIGKILL mid-stream, restarts it on
// the same data dir and checks that every acknowledged doc is there.
func TestKill9DuringBulkDocs(t *testing.T) {
	data := t.TempDir()
	base, proc := startMinicouchIn(t, data)
	c := newBenchClient(base, "admin", "pass")
	if err := c.do("PUT", "/crash", nil, nil); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	acked := map[string]string{}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				var docs []string
				for j := 0; j < 50; j++ {
					docs = append(docs, fmt.Sprintf(`{"_id":"w%d-%05d-%02d","v":%d}`, w, i, j, j))
				}
				var res []struct {
					ID  string `json:"id"`
					Rev string `json:"rev"`
					OK  bool   `json:"ok"`
				}
				if err := c.do("POST", "/crash/_bulk_docs", []byte(`{"docs":[`+strings.Join(docs, ",")+`]}`), &res); err != nil {
					return // the server died under us
				}
				mu.Lock()
				for _, r := range res {
					if r.OK {
						acked[r.ID] = r.Rev
					}
				}
				mu.Unlock()
			}
		}(w)
	}
	time.Sleep(1500 * time.Millisecond)
	if err := proc.Kill(); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	mu.Lock()
	n := len(acked)
	mu.Unlock()
	if n == 0 {
		t.Fatal("no write was acknowledged before the kill")
	}
	base2, _ := startMinicouchIn(t, data)
	c2 := newBenchClient(base2, "admin", "pass")
	var all struct {
		Rows []struct {
			ID    string `json:"id"`
			Value struct {
				Rev string `json:"rev"`
			} `json:"value"`
		} `json:"rows"`
	}
	if err := c2.do("GET", "/crash/_all_docs", nil, &all); err != nil {
		t.Fatal(err)
	}
	have := map[string]string{}
	for _, r := range all.Rows {
		have[r.ID] = r.Value.Rev
	}
	for id, rev := range acked {
		if have[id] != rev {
			t.Fatalf("acknowledged doc %s@%s lost after kill -9 (have %q)", id, rev, have[id])
		}
	}
	var info map[string]json.RawMessage
	if err := c2.do("GET", "/crash", nil, &info); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d acknowledged docs survived kill -9 (%d stored)", n, len(have))
}
