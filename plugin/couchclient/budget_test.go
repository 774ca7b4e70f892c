package couchclient

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 27, 21, 40, 0, 0, time.UTC)
	tests := []struct {
		value string
		want  time.Duration
		ok    bool
	}{
		{"2", 2 * time.Second, true},
		{" 5 ", 5 * time.Second, true},
		{"0", 0, true},
		{now.Add(3 * time.Second).Format(http.TimeFormat), 3 * time.Second, true},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0, true},  // passed: no wait
		{"Monday, 27-Nov-26 21:40:07 GMT", 7 * time.Second, true}, // RFC 850, which HTTP still accepts
		{"", 0, false},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"soon", 0, false},
	}
	for _, tc := range tests {
		got, ok := retryAfter(tc.value, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("retryAfter(%q) = %v, %v; want %v, %v", tc.value, got, ok, tc.want, tc.ok)
		}
	}
}

// budgetServer is a server whose requests wait at a gate the test opens,
// counting how many are in its handler at once.
type budgetServer struct {
	*httptest.Server
	mu       sync.Mutex
	in, most int
	gate     chan struct{}
	opened   bool
	answer   func(w http.ResponseWriter, r *http.Request) // nil: 200 {"ok":true}
}

func newBudgetServer(t *testing.T) *budgetServer {
	s := &budgetServer{gate: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.in++
		s.most = max(s.most, s.in)
		gate, answer := s.gate, s.answer
		s.mu.Unlock()
		<-gate
		s.mu.Lock()
		s.in--
		s.mu.Unlock()
		if answer != nil {
			answer(w, r)
			return
		}
		w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(s.Close)
	t.Cleanup(s.open) // before Close, which waits for the handlers: a failed test ends
	return s
}

func (s *budgetServer) inHandler() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.in
}

// open lets every waiting and later request through.
func (s *budgetServer) open() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.opened {
		s.opened = true
		close(s.gate)
	}
}

// waitFor polls cond until it holds, failing the test after a generous bound.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// budgetPool is a pool whose max_requests_per_host is limit (0: infinity).
func budgetPool(t *testing.T, limit int) *Pool {
	t.Helper()
	p := NewPool(PoolOptions{RetryWait: 5 * time.Millisecond})
	t.Cleanup(func() { p.Close() })
	o := parse.DefaultOptions()
	o.MaxRequestsPerHost = limit
	if err := p.Configure(o); err != nil {
		t.Fatal(err)
	}
	return p
}

// send runs n requests on the clients in turn, each in its own goroutine,
// and returns a channel receiving each one's error.
func send(ctx context.Context, n int, r Request, clients ...*Client) <-chan error {
	errs := make(chan error, n)
	for i := range n {
		go func() {
			req := r
			resp, err := clients[i%len(clients)].Do(ctx, &req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != 200 {
					err = errors.New(resp.Status)
				}
			}
			errs <- err
		}()
	}
	return errs
}

func collect(t *testing.T, n int, errs <-chan error) {
	t.Helper()
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// TestHostBudgetLimit: at most max_requests_per_host requests are in
// flight to one server across its clients and dbs; another server is not
// held up; infinity bounds nothing.
func TestHostBudgetLimit(t *testing.T) {
	ctx := context.Background()
	get := Request{Method: "GET", Buffer: true}
	t.Run("limit across clients", func(t *testing.T) {
		p := budgetPool(t, 3)
		s, other := newBudgetServer(t), newBudgetServer(t)
		a := p.Endpoint(parse.Endpoint{URL: s.URL + "/a/"}, nil)
		b := p.Endpoint(parse.Endpoint{URL: s.URL + "/b/"}, nil)
		errs := send(ctx, 10, get, a, b)
		waitFor(t, "3 requests are in the handler and 7 wait", func() bool {
			return s.inHandler() == 3 && p.BudgetState().Waiting == 7
		})
		// The other server is not held up by the full one.
		other.open()
		c := p.Endpoint(parse.Endpoint{URL: other.URL + "/c/"}, nil)
		collect(t, 1, send(ctx, 1, get, c))
		s.open()
		collect(t, 10, errs)
		if s.most != 3 {
			t.Errorf("%d requests in flight at once, want 3", s.most)
		}
		if st := p.Stats(); st.HostWaits != 7 {
			t.Errorf("HostWaits = %d, want 7", st.HostWaits)
		}
		if w := p.BudgetState().Waiting; w != 0 {
			t.Errorf("Waiting = %d after all were served", w)
		}
	})
	t.Run("infinity", func(t *testing.T) {
		p := budgetPool(t, 0)
		s := newBudgetServer(t)
		var clients []*Client
		for _, db := range []string{"a", "b", "c"} {
			clients = append(clients, p.Endpoint(parse.Endpoint{URL: s.URL + "/" + db + "/"}, nil))
		}
		errs := send(ctx, 30, get, clients...) // 10 each, within each client's 20 connections
		waitFor(t, "all requests are in the handler", func() bool { return s.inHandler() == 30 })
		s.open()
		collect(t, 30, errs)
		if st := p.Stats(); st.HostWaits != 0 {
			t.Errorf("HostWaits = %d, want 0 without a bound", st.HostWaits)
		}
	})
	t.Run("a cancelled waiter leaves", func(t *testing.T) {
		p := budgetPool(t, 1)
		s := newBudgetServer(t)
		a := p.Endpoint(parse.Endpoint{URL: s.URL + "/a/"}, nil)
		first := send(ctx, 1, get, a)
		waitFor(t, "the first request is in the handler", func() bool { return s.inHandler() == 1 })
		cctx, cancel := context.WithCancel(ctx)
		second := send(cctx, 1, get, a)
		waitFor(t, "the second request waits", func() bool { return p.BudgetState().Waiting == 1 })
		cancel()
		if err := <-second; !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled waiter: %v", err)
		}
		if w := p.BudgetState().Waiting; w != 0 {
			t.Errorf("Waiting = %d after the waiter left", w)
		}
		s.open()
		collect(t, 1, first)
		collect(t, 1, send(ctx, 1, get, a)) // its place was not lost
	})
}

// TestHostBudgetCongestion: a round of 429s cuts the server's window in
// half once, not once per answer; later answers widen it until it limits
// nothing and goes.
func TestHostBudgetCongestion(t *testing.T) {
	ctx := context.Background()
	p := budgetPool(t, 0)
	s := newBudgetServer(t)
	var congested atomic.Bool
	congested.Store(true)
	s.answer = func(w http.ResponseWriter, r *http.Request) {
		if congested.Load() {
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Write([]byte(`{"ok":true}`))
	}
	clients := make([]*Client, 8)
	for i := range clients {
		clients[i] = p.Endpoint(parse.Endpoint{URL: s.URL + "/db" + strconv.Itoa(i) + "/"}, nil)
	}
	get := Request{Method: "GET", Buffer: true}
	errs := send(ctx, 8, get, clients...)
	waitFor(t, "8 requests are in the handler", func() bool { return s.inHandler() == 8 })
	// Answer the round with 429s, then hold the retries at a new gate.
	s.mu.Lock()
	gate := s.gate
	s.gate = make(chan struct{})
	s.mu.Unlock()
	close(gate) // the gate open() closes is the new one
	waitFor(t, "the retries fill the window of 4 and the rest wait", func() bool {
		return s.inHandler() == 4 && p.BudgetState().Waiting == 4
	})
	if st := p.Stats(); st.HostCuts != 1 || st.TooManyRequests != 8 {
		t.Errorf("HostCuts = %d (want 1: one cut per round), TooManyRequests = %d (want 8)", st.HostCuts, st.TooManyRequests)
	}
	if g := p.BudgetState().HostsCongested; g != 1 {
		t.Errorf("HostsCongested = %d, want 1", g)
	}
	congested.Store(false)
	s.open()
	collect(t, 8, errs)
	// The window grows by about one per window of answers, up to the 8
	// asked for at once, then goes.
	for i := 0; p.BudgetState().HostsCongested != 0; i++ {
		if i == 100 {
			t.Fatal("the window was still in force after 100 more answers")
		}
		collect(t, 1, send(ctx, 1, get, clients[0]))
	}
}

// TestHostBudgetRetryAfter: a 429 or 503 with Retry-After holds every
// request to its server, from every client and feeds included, until it
// passes.
func TestHostBudgetRetryAfter(t *testing.T) {
	for _, status := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			ctx := context.Background()
			p := budgetPool(t, 0)
			var mu sync.Mutex
			var answered time.Time // when the server sent its Retry-After
			var early []string     // requests that came before it passed
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				defer mu.Unlock()
				if answered.IsZero() {
					w.Header().Set("Retry-After", "1")
					w.WriteHeader(status)
					answered = time.Now()
					return
				}
				if time.Since(answered) < time.Second {
					early = append(early, r.Method+" "+r.URL.Path)
				}
				w.Write([]byte(`{"ok":true,"results":[],"last_seq":"0"}`))
			}))
			defer srv.Close()
			a := p.Endpoint(parse.Endpoint{URL: srv.URL + "/a/"}, &parse.Rep{RetriesPerRequest: 5})
			b := p.Endpoint(parse.Endpoint{URL: srv.URL + "/b/"}, nil)
			first := send(ctx, 1, Request{Method: "GET", Buffer: true}, a)
			waitFor(t, "the hold is in force", func() bool { return p.BudgetState().HostsHeld == 1 })
			feed := send(ctx, 1, Request{Method: "GET", Path: "_changes", Feed: true}, b)
			collect(t, 1, first)
			collect(t, 1, feed)
			mu.Lock()
			defer mu.Unlock()
			if len(early) > 0 {
				t.Errorf("requests sent before Retry-After passed: %v", early)
			}
			if st := p.Stats(); st.HostHolds != 1 {
				t.Errorf("HostHolds = %d, want 1", st.HostHolds)
			}
			waitFor(t, "the hold is over", func() bool { return p.BudgetState().HostsHeld == 0 })
		})
	}
}

// TestHostBudgetHoldOtherServers: a server's hold (here the longest, 60 s)
// holds none of the others.
func TestHostBudgetHoldOtherServers(t *testing.T) {
	p := budgetPool(t, 0)
	held := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "3600")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer held.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"ok":true}`))
	}))
	defer other.Close()
	hctx, stop := context.WithCancel(context.Background())
	stuck := send(hctx, 1, Request{Method: "GET", Buffer: true}, p.Endpoint(parse.Endpoint{URL: held.URL + "/a/"}, nil))
	waitFor(t, "the hold is in force", func() bool { return p.BudgetState().HostsHeld == 1 })
	b := p.budgetOf(parse.Origin(mustURL(t, held.URL)))
	b.mu.Lock()
	if left := time.Until(b.holdUntil); left > maxHold {
		t.Errorf("held for %v more: a Retry-After of an hour is cut to %v", left, maxHold)
	}
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // well under the hold
	defer cancel()
	collect(t, 1, send(ctx, 1, Request{Method: "GET", Buffer: true}, p.Endpoint(parse.Endpoint{URL: other.URL + "/c/"}, nil)))
	stop()
	if err := <-stuck; !errors.Is(err, context.Canceled) {
		t.Errorf("the held request ended with %v before its hold passed", err)
	}
}

// TestHostBudgetRetryAfterLogin: a Retry-After on the answer to the session
// login holds the request the login was for, and every other, too.
func TestHostBudgetRetryAfterLogin(t *testing.T) {
	p := budgetPool(t, 0)
	var mu sync.Mutex
	var answered time.Time
	var early []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if answered.IsZero() {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			answered = time.Now()
			return
		}
		if time.Since(answered) < time.Second {
			early = append(early, r.Method+" "+r.URL.Path)
		}
		if r.URL.Path == "/_session" {
			http.SetCookie(w, &http.Cookie{Name: "AuthSession", Value: "c00kie"})
		}
		w.Write([]byte(`{"ok":true}`))
	}))
	defer srv.Close()
	c := p.Endpoint(parse.Endpoint{URL: srv.URL + "/db/", Auth: &parse.BasicAuth{Username: "u", Password: "p"}}, nil)
	collect(t, 1, send(context.Background(), 1, Request{Method: "GET", Buffer: true}, c))
	mu.Lock()
	defer mu.Unlock()
	if answered.IsZero() {
		t.Fatal("no request reached the server")
	}
	if len(early) > 0 {
		t.Errorf("requests sent before Retry-After passed: %v", early)
	}
	if st := p.Stats(); st.HostHolds != 1 {
		t.Errorf("HostHolds = %d, want 1", st.HostHolds)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
