package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestKill9DuringBulkDocs streams _bulk_docs batches into minicouch from
// several clients, kills the server with SIGKILL mid-stream, restarts it on
// the same data dir and checks that every acknowledged doc is there.
func TestKill9DuringBulkDocs(t *testing.T) {
	s := startServer(t)
	c := newBenchClient(baseURL(s), "admin", "pass")
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
	// Kill once writes are flowing: after the first acknowledgement (however
	// slow the machine) plus a little more streaming.
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	if err := s.Kill(); err != nil {
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
	s.Restart(t)
	c2 := newBenchClient(baseURL(s), "admin", "pass")
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

// TestSIGTERMCleanShutdown stops minicouch with SIGTERM while a continuous
// _changes feed is open: the process exits 0 promptly and the data dir
// opens again.
func TestSIGTERMCleanShutdown(t *testing.T) {
	s := startServer(t)
	c := newBenchClient(baseURL(s), "admin", "pass")
	if err := c.do("PUT", "/db", nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.do("PUT", "/db/a", []byte(`{"x":1}`), nil); err != nil {
		t.Fatal(err)
	}
	feed := make(chan error, 1)
	go func() { feed <- c.do("GET", "/db/_changes?feed=continuous&heartbeat=500", nil, nil) }()
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	if err := s.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	st, ok := s.Wait(15 * time.Second)
	if !ok {
		t.Fatal("minicouch did not exit after SIGTERM")
	}
	if !st.Success() {
		t.Fatalf("exit status %v", st)
	}
	if took := time.Since(start); took > 8*time.Second {
		t.Errorf("shutdown took %v", took)
	}
	select {
	case <-feed:
	case <-time.After(5 * time.Second):
		t.Error("the continuous feed was not ended by the shutdown")
	}
	s.Restart(t)
	var doc map[string]any
	if err := newBenchClient(baseURL(s), "admin", "pass").do("GET", "/db/a", nil, &doc); err != nil || doc["x"] != float64(1) {
		t.Fatalf("after restart: %v %v", doc, err)
	}
}
