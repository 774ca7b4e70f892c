package replicate

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/couchclient"
)

// retryAfterGate is a server in front of another that gathers the first
// `jobs` requests it gets, answers them all with 429 and `Retry-After:
// wait`, then passes everything on, noting each request that comes before
// the wait has passed.
type retryAfterGate struct {
	jobs int
	wait time.Duration
	next http.Handler

	mu       sync.Mutex
	gathered int
	release  chan struct{}
	answered time.Time // when the 429s were let go
	early    []string  // requests that came before answered+wait
}

func (g *retryAfterGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	if g.gathered < g.jobs {
		g.gathered++
		if g.gathered == g.jobs {
			g.answered = time.Now()
			close(g.release)
		}
		g.mu.Unlock()
		select {
		case <-g.release:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Retry-After", fmt.Sprint(int(g.wait/time.Second)))
		http.Error(w, `{"error":"too_many_requests","reason":"wait"}`, http.StatusTooManyRequests)
		return
	}
	// Every request gathered was answered after g.answered; any request
	// since was sent after its job read a 429 asking it to wait.
	if time.Since(g.answered) < g.wait {
		g.early = append(g.early, r.Method+" "+r.URL.Path)
	}
	g.mu.Unlock()
	g.next.ServeHTTP(w, r)
}

// TestRetryAfterHoldsEveryJob: 200 jobs replicate through one server that
// answers the first request of each with 429 and Retry-After: 2. No job
// sends that server anything before the 2 s have passed (the hold is the
// server's, shared by all the jobs of the pool), and every job completes.
func TestRetryAfterHoldsEveryJob(t *testing.T) {
	const jobs = 200
	s := startServer(t)
	p := newFaultProxy(t, s)
	src := s.newDB(t, "src")
	addDocs(t, s, src, 0, 5)
	gate := &retryAfterGate{jobs: jobs, wait: 2 * time.Second, next: http.HandlerFunc(p.serve), release: make(chan struct{})}
	gs := httptest.NewServer(gate)
	t.Cleanup(gs.Close)
	ps := &testServer{Kind: s.Kind, Base: gs.URL + "/", User: s.User, Pass: s.Pass}

	pool := couchclient.NewPool(couchclient.PoolOptions{})
	defer pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prefix := fmt.Sprintf("held-%d", time.Now().UnixNano()%1e9)
	errs := make(chan error, jobs)
	started := time.Now()
	for i := range jobs {
		rep := testRep(ps, src, fmt.Sprintf("%s-%03d", prefix, i))
		// Kept small: what is tested is every request after the 429s.
		rep.CreateTarget, rep.WorkerProcesses, rep.UseCheckpoints = true, 1, false
		go func() {
			_, err := Run(ctx, rep, Options{Pool: pool, ServerUUID: "0123456789abcdef0123456789abcdef"})
			errs <- err
		}()
	}
	for range jobs {
		if err := <-errs; err != nil {
			t.Errorf("job failed: %v", err)
		}
	}
	t.Logf("%d jobs done in %v", jobs, time.Since(started))
	gate.mu.Lock()
	if gate.answered.IsZero() {
		t.Fatalf("only %d of %d jobs reached the server", gate.gathered, jobs)
	}
	if len(gate.early) > 0 {
		t.Errorf("%d requests came before Retry-After passed, the first: %v", len(gate.early), gate.early[:min(5, len(gate.early))])
	}
	gate.mu.Unlock()
	for i := range jobs {
		var info struct {
			DocCount int `json:"doc_count"`
		}
		json.Unmarshal(s.mustDo(t, "GET", fmt.Sprintf("%s-%03d", prefix, i), nil), &info)
		if info.DocCount != 5 {
			t.Errorf("target %d holds %d docs, want 5", i, info.DocCount)
		}
	}
	if st := pool.Stats(); st.HostHolds == 0 || st.HostWaits < jobs-1 {
		t.Errorf("HostHolds = %d, HostWaits = %d: want a hold and every job waiting", st.HostHolds, st.HostWaits)
	}
}
