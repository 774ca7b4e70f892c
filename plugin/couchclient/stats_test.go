package couchclient

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/hashicorp/go-hclog"
)

// TestPoolStats: the pool counts attempts, responses, 429s, rate-limiter
// waits and retries as a request goes through Do's rules.
func TestPoolStats(t *testing.T) {
	cases := []struct {
		name      string
		failFirst int // requests answered with status before success
		status    int // -1 = cut the connection
		want      PoolStats
	}{
		// One connection serves every attempt, unless the server cuts it.
		{"ok at once", 0, 0, PoolStats{Requests: 1, ResponsesSuccess: 1, ConnectionsCreated: 1}},
		{"two 429s then ok", 2, 429, PoolStats{Requests: 3, ResponsesSuccess: 3, TooManyRequests: 2, Backoffs: 2, ConnectionsCreated: 1, HostCuts: 2}},
		{"500 then ok", 1, 500, PoolStats{Requests: 2, ResponsesSuccess: 2, Retries: 1, ConnectionsCreated: 1}},
		{"cut connection then ok", 1, -1, PoolStats{Requests: 2, ResponsesSuccess: 1, ResponsesFailure: 1, Retries: 1, ConnectionsCreated: 2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if int(calls.Add(1)) <= tc.failFirst {
					if tc.status == -1 {
						panic(http.ErrAbortHandler)
					}
					w.WriteHeader(tc.status)
					return
				}
				w.Write([]byte(`{"ok":true}`))
			}))
			defer srv.Close()
			p := testPool()
			defer p.Close()
			c := p.Endpoint(parse.Endpoint{URL: srv.URL + "/db/"}, &parse.Rep{RetriesPerRequest: 5})
			resp, err := c.Do(context.Background(), &Request{Method: "GET", Buffer: true})
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got := p.Stats(); got != tc.want {
				t.Errorf("Stats() = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestResponsesFailureOwnStop: an attempt ended by the caller's own
// context (a run stopped, parked or rotated out) or kept back by its
// fence is no failed response; one the server cut is, and is logged with
// its endpoint, at most once a minute.
func TestResponsesFailureOwnStop(t *testing.T) {
	cases := []struct {
		name        string
		ctx         func(context.Context, <-chan struct{}) context.Context // received: the server has the request
		cut         bool                                                   // the server cuts the connection
		wantFailure uint64
		wantLines   int
	}{
		{"cancelled while waiting for the answer", func(ctx context.Context, received <-chan struct{}) context.Context {
			ctx, cancel := context.WithCancel(ctx)
			go func() { <-received; cancel() }()
			return ctx
		}, false, 0, 0},
		{"fenced", func(ctx context.Context, _ <-chan struct{}) context.Context {
			return WithFence(ctx, func() error { return errors.New("job moved") })
		}, false, 0, 0},
		{"connection cut", nil, true, 2, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			received := make(chan struct{}, 2)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				received <- struct{}{}
				if tc.cut {
					panic(http.ErrAbortHandler)
				}
				<-r.Context().Done()
			}))
			defer srv.Close()
			var logs bytes.Buffer
			p := NewPool(PoolOptions{RetryWait: time.Millisecond, Logger: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn})})
			defer p.Close()
			c := p.Endpoint(parse.Endpoint{URL: srv.URL + "/db/"}, &parse.Rep{RetriesPerRequest: 1})
			c.UseLogger(p.log.With("job", "j1"))
			ctx := context.Background()
			if tc.ctx != nil {
				ctx = tc.ctx(ctx, received)
			}
			if _, err := c.Do(ctx, &Request{Method: "GET", Path: "_changes", Buffer: true}); err == nil {
				t.Fatal("Do succeeded")
			}
			if got := p.Stats().ResponsesFailure; got != tc.wantFailure {
				t.Errorf("ResponsesFailure = %d, want %d", got, tc.wantFailure)
			}
			lines := strings.Count(logs.String(), "responses_failure_total")
			if lines != tc.wantLines || lines > 0 && !strings.Contains(logs.String(), "job=j1") {
				t.Errorf("%d log lines naming the job, want %d:\n%s", lines, tc.wantLines, logs.String())
			}
		})
	}
}
