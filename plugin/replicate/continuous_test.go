package replicate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
)

// waitDocCount polls db until it holds n docs (doc_count) or the test times out.
func waitDocCount(t *testing.T, s *testServer, db string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var info struct {
			DocCount int `json:"doc_count"`
		}
		json.Unmarshal(s.mustDo(t, "GET", db, nil), &info)
		if info.DocCount >= n {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s did not reach %d docs", db, n)
}

func addDocs(t *testing.T, s *testServer, db string, from, to int) {
	docs := []map[string]any{}
	for i := from; i < to; i++ {
		docs = append(docs, map[string]any{"_id": fmt.Sprintf("c%04d", i), "n": i})
	}
	s.bulk(t, db, true, docs...)
}

// continuousThroughProxy starts a server with a source of n docs and an
// empty target, and returns a continuous replication between them through
// a fault proxy (which counts the requests).
func continuousThroughProxy(t *testing.T, n int) (s *testServer, p *faultProxy, rep *parse.Rep, src, tgt string) {
	s = startServer(t)
	p = newFaultProxy(t, s)
	ps := p.endpointServer(s)
	src, tgt = s.newDB(t, "src"), s.newDB(t, "tgt")
	addDocs(t, s, src, 0, n)
	rep = testRep(ps, src, tgt)
	rep.Continuous = true
	return s, p, rep, src, tgt
}

// TestContinuousResume runs a continuous replication, stops it, adds docs
// and restarts it: the second run must start from the checkpoint written on
// stop and fetch only the new docs.
func TestContinuousResume(t *testing.T) {
	s := startServer(t)
	p := newFaultProxy(t, s)
	ps := p.endpointServer(s)
	src, tgt := s.newDB(t, "src"), s.newDB(t, "tgt")
	addDocs(t, s, src, 0, 200)

	start := func() (context.CancelFunc, chan error) {
		rep := testRep(ps, src, tgt)
		rep.Continuous = true
		rep.ConnectionTimeout = 3000
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := Run(ctx, rep, Options{ServerUUID: "0123456789abcdef0123456789abcdef"})
			done <- err
		}()
		return cancel, done
	}
	cancel, done := start()
	waitDocCount(t, s, tgt, 200)
	addDocs(t, s, src, 200, 230) // arrives through the live feed
	waitDocCount(t, s, tgt, 230)
	cancel()
	if err := <-done; !errors.Is(err, ErrStopped) {
		t.Fatalf("first run: %v, want ErrStopped", err)
	}

	addDocs(t, s, src, 230, 280)
	p.resetCounts()
	cancel, done = start()
	waitDocCount(t, s, tgt, 280)
	time.Sleep(200 * time.Millisecond)
	cancel()
	if err := <-done; !errors.Is(err, ErrStopped) {
		t.Fatalf("second run: %v, want ErrStopped", err)
	}
	if got := p.fetched(); got != 50 {
		t.Errorf("second run fetched %d revisions from the source, want 50 (resume from checkpoint)", got)
	}
	if d := diffTrees(s.contents(t, src), s.contents(t, tgt), nil); len(d) > 0 {
		t.Fatalf("target differs: %v", d)
	}
}

// TestContinuousIdle: a continuous run with IdleAfter reports idleness,
// ends with ErrIdle once caught up and quiet, and has checkpointed all it
// wrote, so a later run resumes without re-fetching anything.
func TestContinuousIdle(t *testing.T) {
	s, p, rep, src, tgt := continuousThroughProxy(t, 50)
	var mu sync.Mutex
	var events []bool
	var last Stats
	start := time.Now()
	_, err := Run(context.Background(), rep, Options{
		ServerUUID: "0123456789abcdef0123456789abcdef",
		IdleAfter:  1500 * time.Millisecond,
		OnIdle: func(idle bool) {
			mu.Lock()
			events = append(events, idle)
			mu.Unlock()
		},
		OnStats: func(st Stats) { mu.Lock(); last = st; mu.Unlock() },
	})
	if !errors.Is(err, ErrIdle) {
		t.Fatalf("Run = %v, want ErrIdle", err)
	}
	if took := time.Since(start); took < 1500*time.Millisecond {
		t.Errorf("parked after %v, before IdleAfter", took)
	}
	mu.Lock()
	if len(events) == 0 || !events[0] {
		t.Errorf("OnIdle calls %v, want a first true", events)
	}
	if string(last.CheckpointedSourceSeq) != string(last.ThroughSeq) || last.DocsWritten != 50 {
		t.Errorf("final stats %+v: want 50 written and everything checkpointed", last)
	}
	mu.Unlock()
	waitDocCount(t, s, tgt, 50)

	addDocs(t, s, src, 50, 60)
	p.resetCounts()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, rep, Options{ServerUUID: "0123456789abcdef0123456789abcdef"})
		done <- err
	}()
	waitDocCount(t, s, tgt, 60)
	cancel()
	if err := <-done; !errors.Is(err, ErrStopped) {
		t.Fatalf("second run: %v", err)
	}
	if got := p.fetched(); got != 10 {
		t.Errorf("the run after the idle one fetched %d revisions, want 10", got)
	}
}
