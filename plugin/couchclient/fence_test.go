package couchclient

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/couchepi/couchepi/parse"
)

// TestFence: a request whose fence says no is never completed at the
// server, whether the fence closes before it is sent or while its body is
// being sent, and it is not retried.
func TestFence(t *testing.T) {
	var started, completed atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started.Add(1)
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return // the client gave up mid-body: the request never completed
		}
		completed.Add(1)
		w.Write([]byte(`{"ok":true}`))
	}))
	defer srv.Close()
	p := testPool()
	defer p.Close()
	c := p.Endpoint(parse.Endpoint{URL: srv.URL + "/db/"}, &parse.Rep{RetriesPerRequest: 3})
	big := bytes.Repeat([]byte("x"), 1<<20)
	errLost := errors.New("lease lost")

	tests := []struct {
		name string
		// allow is how many fence checks pass before it says no.
		allow   int64
		req     Request
		wantRun bool // the request reaches the server's handler
	}{
		{name: "closed before a GET", allow: 0, req: Request{Method: "GET", Path: "doc"}},
		{name: "closed before a body", allow: 0, req: Request{Method: "POST", Path: "_bulk_docs", Body: []byte(`{"docs":[]}`)}},
		{name: "closed mid-body", allow: 3, req: Request{Method: "POST", Path: "_bulk_docs", Body: big}, wantRun: true},
		{name: "closed mid-stream", allow: 3, req: Request{Method: "PUT", Path: "_local/x", ContentLength: int64(len(big)),
			GetBody: func(context.Context) (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(big)), nil }}, wantRun: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			started.Store(0)
			completed.Store(0)
			var checks atomic.Int64
			ctx := WithFence(context.Background(), func() error {
				if checks.Add(1) > tc.allow {
					return errLost
				}
				return nil
			})
			resp, err := c.Do(ctx, &tc.req)
			if err == nil {
				Release(resp)
				t.Fatal("request sent through a closed fence")
			}
			if !errors.Is(err, ErrFenced) || !errors.Is(err, errLost) {
				t.Fatalf("error %v: want ErrFenced wrapping the fence's reason", err)
			}
			if n := completed.Load(); n != 0 {
				t.Fatalf("%d requests completed at the server", n)
			}
			if !tc.wantRun && started.Load() != 0 {
				t.Fatalf("%d requests reached the server", started.Load())
			}
			if tc.allow == 0 && checks.Load() != 1 {
				t.Fatalf("fence asked %d times: the request was retried", checks.Load())
			}
		})
	}

	// An open fence changes nothing.
	ctx := WithFence(context.Background(), func() error { return nil })
	resp, err := c.Do(ctx, &Request{Method: "POST", Path: "_bulk_docs", Body: big, Buffer: true})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Bytes(resp)
	if !strings.Contains(string(b), "ok") || completed.Load() != 1 {
		t.Fatalf("open fence: %s, completed %d", b, completed.Load())
	}
}
