package couchclient

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
)

// turnsPool is a pool whose max_batches_per_host is limit (-1: infinity).
func turnsPool(t *testing.T, limit int) *Pool {
	t.Helper()
	p := NewPool(PoolOptions{})
	t.Cleanup(func() { p.Close() })
	o := parse.DefaultOptions()
	o.MaxBatchesPerHost = limit
	if err := p.Configure(o); err != nil {
		t.Fatal(err)
	}
	return p
}

// startTurn starts c.takeTurn and returns a channel that receives its
// done func once the turn is given.
func startTurn(ctx context.Context, c *Client) <-chan func() {
	ch := make(chan func(), 1)
	go func() {
		done, err := c.takeTurn(ctx)
		if err == nil {
			ch <- done
		}
	}()
	return ch
}

// given waits briefly for a turn; nil when none came.
func given(ch <-chan func(), wait time.Duration) func() {
	select {
	case done := <-ch:
		return done
	case <-time.After(wait):
		return nil
	}
}

// TestBatchTurns: the contract of the batch writes' turns (Request.Turn).
func TestBatchTurns(t *testing.T) {
	ctx := context.Background()
	const brief = 50 * time.Millisecond
	tests := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"at most the limit per server, across clients and dbs", func(t *testing.T) {
			p := turnsPool(t, 2)
			a := p.Endpoint(parse.Endpoint{URL: "http://127.0.0.1:1/a/"}, nil)
			b := p.Endpoint(parse.Endpoint{URL: "http://127.0.0.1:1/b/"}, nil)
			d1, d2 := given(startTurn(ctx, a), time.Second), given(startTurn(ctx, b), time.Second)
			if d1 == nil || d2 == nil {
				t.Fatal("the first two turns were not given at once")
			}
			third := startTurn(ctx, a)
			if given(third, brief) != nil {
				t.Fatal("a third turn was given while two are taken")
			}
			d1()
			d1() // done twice gives one turn back, not two
			d3 := given(third, time.Second)
			if d3 == nil {
				t.Fatal("the waiting turn was not given when one was done")
			}
			if given(startTurn(ctx, b), brief) != nil {
				t.Fatal("a turn was given twice for one done")
			}
			if p.Stats().BatchWaits < 2 {
				t.Errorf("BatchWaits = %d, want at least 2", p.Stats().BatchWaits)
			}
		}},
		{"one server however its URL spells it", func(t *testing.T) {
			for _, urls := range [][2]string{
				{"http://LOCALHOST:1/a/", "http://localhost:1/b/"},
				{"http://example.invalid/a/", "http://example.invalid:80/b/"},
			} {
				p := turnsPool(t, 1)
				a := p.Endpoint(parse.Endpoint{URL: urls[0]}, nil)
				b := p.Endpoint(parse.Endpoint{URL: urls[1]}, nil)
				if given(startTurn(ctx, a), time.Second) == nil {
					t.Fatal("no turn")
				}
				if given(startTurn(ctx, b), brief) != nil {
					t.Errorf("%s and %s took turns of their own", urls[0], urls[1])
				}
			}
		}},
		{"other servers are not held up", func(t *testing.T) {
			p := turnsPool(t, 1)
			a := p.Endpoint(parse.Endpoint{URL: "http://127.0.0.1:1/a/"}, nil)
			other := p.Endpoint(parse.Endpoint{URL: "http://127.0.0.1:2/a/"}, nil)
			if given(startTurn(ctx, a), time.Second) == nil {
				t.Fatal("no turn")
			}
			if given(startTurn(ctx, other), time.Second) == nil {
				t.Fatal("another server's turn waited")
			}
		}},
		{"waiters are served oldest first", func(t *testing.T) {
			p := turnsPool(t, 1)
			c := p.Endpoint(parse.Endpoint{URL: "http://127.0.0.1:1/a/"}, nil)
			held := given(startTurn(ctx, c), time.Second)
			var waiting []<-chan func()
			for i := range 5 {
				waiting = append(waiting, startTurn(ctx, c))
				for p.Stats().BatchWaits != uint64(i+1) { // queued in this order
					time.Sleep(time.Millisecond)
				}
			}
			held()
			for i, ch := range waiting {
				d := given(ch, time.Second)
				if d == nil {
					t.Fatalf("waiter %d not served", i)
				}
				for j, later := range waiting[i+1:] {
					if given(later, 0) != nil {
						t.Fatalf("waiter %d served before waiter %d", i+1+j, i)
					}
				}
				d()
			}
		}},
		{"a waiter whose ctx ends leaves the line", func(t *testing.T) {
			p := turnsPool(t, 1)
			c := p.Endpoint(parse.Endpoint{URL: "http://127.0.0.1:1/a/"}, nil)
			held := given(startTurn(ctx, c), time.Second)
			cctx, cancel := context.WithCancel(ctx)
			errc := make(chan error, 1)
			go func() { _, err := c.takeTurn(cctx); errc <- err }()
			for p.Stats().BatchWaits == 0 {
				time.Sleep(time.Millisecond)
			}
			cancel()
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled", err)
			}
			next := startTurn(ctx, c)
			held()
			if given(next, time.Second) == nil {
				t.Fatal("the turn went to the waiter that left")
			}
		}},
		{"infinity never waits", func(t *testing.T) {
			p := turnsPool(t, -1)
			c := p.Endpoint(parse.Endpoint{URL: "http://127.0.0.1:1/a/"}, nil)
			for i := range 200 {
				if given(startTurn(ctx, c), time.Second) == nil {
					t.Fatalf("turn %d waited", i)
				}
			}
			if w := p.Stats().BatchWaits; w != 0 {
				t.Errorf("BatchWaits = %d", w)
			}
		}},
		{"a lower limit applies as turns are done, a higher one at once", func(t *testing.T) {
			p := turnsPool(t, 3)
			c := p.Endpoint(parse.Endpoint{URL: "http://127.0.0.1:1/a/"}, nil)
			var held []func()
			for range 3 {
				held = append(held, given(startTurn(ctx, c), time.Second))
			}
			o := p.Options()
			o.MaxBatchesPerHost = 1
			p.Configure(o)
			w := startTurn(ctx, c)
			held[0]()
			held[1]()
			if given(w, brief) != nil {
				t.Fatal("a turn was given with 1 taken and the limit 1")
			}
			held[2]()
			d := given(w, time.Second)
			if d == nil {
				t.Fatal("no turn with none taken")
			}
			o.MaxBatchesPerHost = 4
			p.Configure(o)
			for i := range 3 {
				if given(startTurn(ctx, c), time.Second) == nil {
					t.Fatalf("turn %d of the raised limit waited", i+2)
				}
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, tc.run)
	}
}

// TestRequestTurn: Do waits its turn for a Turn request, retries included,
// and never for another request.
func TestRequestTurn(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/db/_bulk_docs" {
			<-release
		}
		w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	p := turnsPool(t, 1)
	c := p.Endpoint(parse.Endpoint{URL: srv.URL + "/db/"}, nil)
	ctx := context.Background()
	do := func(path string, turn bool) <-chan error {
		errc := make(chan error, 1)
		go func() {
			resp, err := c.Do(ctx, &Request{Method: "POST", Path: path, Body: []byte(`{}`), Buffer: true, Turn: turn})
			if err == nil {
				resp.Body.Close()
			}
			errc <- err
		}()
		return errc
	}
	first := do("_bulk_docs", true)
	for p.Stats().Requests == 0 {
		time.Sleep(time.Millisecond)
	}
	second := do("_revs_diff", true)
	for p.Stats().BatchWaits == 0 {
		time.Sleep(time.Millisecond)
	}
	if err := <-do("_changes", false); err != nil {
		t.Fatalf("a request without Turn: %v", err)
	}
	select {
	case err := <-second:
		t.Fatalf("the second Turn request ended (%v) while the first held the turn", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	for _, errc := range []<-chan error{first, second} {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}
