package couchclient

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/couchepi/couchepi/parse"
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
