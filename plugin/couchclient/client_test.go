package couchclient

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/hashicorp/go-hclog"
)

func testPool() *Pool {
	return NewPool(PoolOptions{RetryWait: 5 * time.Millisecond})
}

func TestRetries(t *testing.T) {
	cases := []struct {
		name       string
		failFirst  int // requests answered with status before success
		status     int
		retries    int
		wantStatus int
		wantErr    bool
		wantCalls  int32
	}{
		{"500 then ok", 2, 500, 5, 200, false, 3},
		{"408 then ok", 1, 408, 5, 200, false, 2},
		{"500 beyond retries returns last response", 10, 503, 2, 503, false, 3},
		{"404 not retried", 10, 404, 5, 404, false, 1},
		{"cut connection then ok", 2, -1, 5, 200, false, 3},
		{"cut connection beyond retries", 10, -1, 1, 0, true, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := calls.Add(1)
				if int(n) <= tc.failFirst {
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
			c := p.Endpoint(parse.Endpoint{URL: srv.URL + "/db/"}, &parse.Rep{RetriesPerRequest: tc.retries})
			resp, err := c.Do(context.Background(), &Request{Method: "GET", Path: "", Buffer: true})
			if tc.wantErr {
				var ce *Error
				if !errors.As(err, &ce) || ce.Kind != "http_request_failed" || !strings.Contains(err.Error(), "GET "+srv.URL+"/db/") {
					t.Fatalf("err = %v, want http_request_failed naming the request", err)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != tc.wantStatus {
					t.Fatalf("status %d want %d", resp.StatusCode, tc.wantStatus)
				}
			}
			if got := calls.Load(); got != tc.wantCalls {
				t.Fatalf("calls %d want %d", got, tc.wantCalls)
			}
		})
	}
}

// TestRateLimit429Convergence: a server accepting at most one request per
// 30 ms answers 429 otherwise; concurrent callers still all succeed, the
// limiter's interval rises above the server's limit and 429s do not use retries.
func TestRateLimit429Convergence(t *testing.T) {
	var mu sync.Mutex
	var last time.Time
	var ok, limited atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		now := time.Now()
		allowed := now.Sub(last) >= 30*time.Millisecond
		if allowed {
			last = now
		}
		mu.Unlock()
		if !allowed {
			limited.Add(1)
			w.WriteHeader(429)
			return
		}
		ok.Add(1)
		w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	p := testPool()
	defer p.Close()
	c := p.Endpoint(parse.Endpoint{URL: srv.URL + "/db/"}, &parse.Rep{RetriesPerRequest: 0})
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 10; j++ {
				resp, err := c.Do(context.Background(), &Request{Method: "GET", Path: "x", Buffer: true})
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Errorf("status %d", resp.StatusCode)
				}
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 40 {
		t.Fatalf("%d successes, want 40", ok.Load())
	}
	if limited.Load() == 0 {
		t.Fatalf("server never limited; test proves nothing")
	}
	t.Logf("429s: %d for 40 requests", limited.Load())
}

func TestMaxBackoff(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(429) }))
	defer srv.Close()
	clk := &fakeClock{t: time.Unix(1000, 0)}
	p := NewPool(PoolOptions{Now: clk.now})
	defer p.Close()
	c := p.Endpoint(parse.Endpoint{URL: srv.URL + "/db/"}, nil)
	key := RateKey{URL: srv.URL + "/db/", Method: "GET"}
	for p.limiter.Interval(key) < MaxInterval {
		clk.advance(100)
		p.limiter.Failure(key)
	}
	_, err := c.Do(context.Background(), &Request{Method: "GET"})
	var ce *Error
	if !errors.As(err, &ce) || ce.Kind != "max_backoff" {
		t.Fatalf("err = %v, want max_backoff", err)
	}
}

// TestSessionAuth covers cookie auth: login once, reuse the cookie, refresh on
// 401, and fall back to basic auth when the server has no _session.
func TestSessionAuth(t *testing.T) {
	cases := []struct {
		name         string
		noSession    bool
		expireAfter  int // the server rejects a cookie after this many uses
		wantSessions int32
		wantBasic    bool
	}{
		{"cookie reused", false, 1000, 1, false},
		{"refreshed on 401", false, 2, 2, false},
		{"no _session falls back to basic", true, 0, 1, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var sessions, basics atomic.Int32
			var uses atomic.Int32
			var cookieGen atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/_session" {
					sessions.Add(1)
					if tc.noSession {
						w.WriteHeader(404)
						return
					}
					r.ParseForm()
					if r.Form.Get("name") != "bob" || r.Form.Get("password") != "s3cret" {
						w.WriteHeader(401)
						return
					}
					g := cookieGen.Add(1)
					uses.Store(0)
					http.SetCookie(w, &http.Cookie{Name: "AuthSession", Value: "c" + string(rune('0'+g)), MaxAge: 600})
					w.Write([]byte(`{"ok":true}`))
					return
				}
				if u, pw, ok := r.BasicAuth(); ok && u == "bob" && pw == "s3cret" {
					basics.Add(1)
					w.Write([]byte(`{}`))
					return
				}
				ck, err := r.Cookie("AuthSession")
				if err != nil || ck.Value != "c"+string(rune('0'+cookieGen.Load())) || int(uses.Add(1)) > tc.expireAfter {
					w.WriteHeader(401)
					return
				}
				w.Write([]byte(`{}`))
			}))
			defer srv.Close()
			p := testPool()
			defer p.Close()
			c := p.Endpoint(parse.Endpoint{URL: srv.URL + "/db/", Auth: &parse.BasicAuth{Username: "bob", Password: "s3cret"}}, nil)
			c.auth.lastRefresh = time.Time{}
			for i := 0; i < 3; i++ {
				if i == 2 {
					// allow the 401-triggered refresh (min 5 s between refreshes)
					c.auth.mu.Lock()
					c.auth.lastRefresh = time.Now().Add(-time.Minute)
					c.auth.mu.Unlock()
				}
				resp, err := c.Do(context.Background(), &Request{Method: "GET", Path: "doc", Buffer: true})
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("request %d: status %d", i, resp.StatusCode)
				}
			}
			if sessions.Load() != tc.wantSessions {
				t.Errorf("_session requests %d, want %d", sessions.Load(), tc.wantSessions)
			}
			if (basics.Load() > 0) != tc.wantBasic {
				t.Errorf("basic auth used %d times, want basic=%v", basics.Load(), tc.wantBasic)
			}
		})
	}
}

// TestHeadersAndRedaction checks merged headers and that errors and logs never carry the password.
func TestHeadersAndRedaction(t *testing.T) {
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		w.WriteHeader(200)
	}))
	p := testPool()
	defer p.Close()
	var logs bytes.Buffer
	p.log = hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Trace})
	c := p.Endpoint(parse.Endpoint{URL: srv.URL + "/db/", Headers: map[string]string{"X-Custom": "v"}}, nil)
	resp, err := c.Do(context.Background(), &Request{Method: "GET", Path: "a"})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got.Get("Accept") != "application/json" || !strings.HasPrefix(got.Get("User-Agent"), "CouchDB-Replicator/") || got.Get("X-Custom") != "v" {
		t.Fatalf("headers %v", got)
	}
	srv.Close()
	c2 := p.Endpoint(parse.Endpoint{URL: srv.URL + "/db/", Auth: &parse.BasicAuth{Username: "u", Password: "topsecret"}}, &parse.Rep{RetriesPerRequest: 1})
	_, err = c2.Do(context.Background(), &Request{Method: "GET", Path: "a"})
	if err == nil {
		t.Fatal("expected an error from a closed server")
	}
	if strings.Contains(err.Error(), "topsecret") || strings.Contains(logs.String(), "topsecret") {
		t.Fatalf("password leaked: %v / %s", err, logs.String())
	}
}

// TestInactivityTimeout: a response that stalls mid-body fails with the
// timeout instead of hanging, while a slow but steady body is fine.
func TestInactivityTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		for i := 0; i < 6; i++ {
			w.Write([]byte("x\n"))
			w.(http.Flusher).Flush()
			d := 50 * time.Millisecond
			if r.URL.Path == "/db/stall" && i == 2 {
				d = 2 * time.Second
			}
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			}
		}
	}))
	defer srv.Close()
	p := testPool()
	defer p.Close()
	c := p.Endpoint(parse.Endpoint{URL: srv.URL + "/db/"}, &parse.Rep{ConnectionTimeout: 200, RetriesPerRequest: 0})
	for _, tc := range []struct {
		path    string
		wantErr bool
	}{{"steady", false}, {"stall", true}} {
		resp, err := c.Do(context.Background(), &Request{Method: "GET", Path: tc.path})
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if (err != nil) != tc.wantErr {
			t.Fatalf("%s: read err %v, wantErr %v", tc.path, err, tc.wantErr)
		}
		if err != nil && !errors.Is(err, ErrInactivity) {
			t.Fatalf("%s: err %v, want inactivity timeout", tc.path, err)
		}
	}
}

// TestProxyAndConnectionReuse: requests go through an http proxy when the
// endpoint names one, and clients of one host share idle connections.
func TestProxyAndConnectionReuse(t *testing.T) {
	var proxied atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.IsAbs() && r.URL.Host == "couch.invalid:5984" {
			proxied.Add(1)
		}
		w.Write([]byte(`{}`))
	}))
	defer proxy.Close()
	p := testPool()
	defer p.Close()
	c := p.Endpoint(parse.Endpoint{URL: "http://couch.invalid:5984/db/", Proxy: proxy.URL}, &parse.Rep{RetriesPerRequest: 0})
	resp, err := c.Do(context.Background(), &Request{Method: "GET", Path: "x", Buffer: true})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if proxied.Load() != 1 {
		t.Fatalf("request did not go through the proxy")
	}

	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{}`)) }))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	a := p.Endpoint(parse.Endpoint{URL: srv.URL + "/a/"}, nil)
	b := p.Endpoint(parse.Endpoint{URL: srv.URL + "/b/"}, nil)
	for i := 0; i < 10; i++ {
		for _, c := range []*Client{a, b} {
			resp, err := c.Do(context.Background(), &Request{Method: "GET", Buffer: true})
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
	}
	if conns.Load() != 1 {
		t.Fatalf("%d connections for 20 sequential requests to one host, want 1", conns.Load())
	}
}

// TestSessionRefreshAtMaxAge: the cookie is renewed at 90 % of its max-age.
func TestSessionRefreshAtMaxAge(t *testing.T) {
	var sessions atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/_session" {
			sessions.Add(1)
			http.SetCookie(w, &http.Cookie{Name: "AuthSession", Value: "c", MaxAge: 1})
			w.Write([]byte(`{"ok":true}`))
			return
		}
		if ck, err := r.Cookie("AuthSession"); err != nil || ck.Value != "c" {
			w.WriteHeader(401)
			return
		}
		w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	p := testPool()
	defer p.Close()
	c := p.Endpoint(parse.Endpoint{URL: srv.URL + "/db/", Auth: &parse.BasicAuth{Username: "u", Password: "p"}}, nil)
	get := func() {
		resp, err := c.Do(context.Background(), &Request{Method: "GET", Buffer: true})
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET: %v %v", err, resp)
		}
		resp.Body.Close()
	}
	get()
	get()
	if n := sessions.Load(); n != 1 {
		t.Fatalf("%d _session requests before expiry, want 1", n)
	}
	time.Sleep(950 * time.Millisecond)
	get()
	if n := sessions.Load(); n != 2 {
		t.Fatalf("%d _session requests after 90%% of max-age, want 2", n)
	}
}

// selfWriting is a body that writes itself (as the replicator's streamed
// attachments do) in pieces of size, and records that it was asked to.
type selfWriting struct {
	data      []byte
	size      int
	wroteSelf bool
}

func (s *selfWriting) Read(p []byte) (int, error) {
	if len(s.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.data)
	s.data = s.data[n:]
	return n, nil
}

func (s *selfWriting) WriteTo(w io.Writer) (int64, error) {
	s.wroteSelf = true
	var total int64
	for len(s.data) > 0 {
		n, err := w.Write(s.data[:min(s.size, len(s.data))])
		total += int64(n)
		s.data = s.data[n:]
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// TestStreamedBodyWritesItself: a streamed request body of unknown length
// that writes itself is sent by its own WriteTo, through the timer and
// the fence, rather than read through the transport's 32 KiB buffer (a
// chunk of the request, and write syscalls, per 32 KiB); the fence still
// stops it midway.
func TestStreamedBodyWritesItself(t *testing.T) {
	var got atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		got.Store(n)
		w.Write([]byte(`{"ok":true}`))
	}))
	defer srv.Close()
	p := testPool()
	defer p.Close()
	c := p.Endpoint(parse.Endpoint{URL: srv.URL + "/db/"}, &parse.Rep{RetriesPerRequest: 0})
	errLost := errors.New("lease lost")
	for _, fenced := range []bool{false, true} {
		body := &selfWriting{data: make([]byte, 3<<20), size: 128 << 10}
		ctx := context.Background()
		checks := 0
		if fenced {
			ctx = WithFence(ctx, func() error {
				if checks++; checks > 6 {
					return errLost
				}
				return nil
			})
		}
		resp, err := c.Do(ctx, &Request{Method: "PUT", Path: "doc", ContentLength: -1, NoRetry: true,
			GetBody: func(context.Context) (io.ReadCloser, error) { return io.NopCloser(body), nil }})
		if !body.wroteSelf {
			t.Fatalf("fenced %v: the body was read, not asked to write itself", fenced)
		}
		if fenced {
			if err == nil {
				Release(resp)
				t.Fatal("a streamed body went through a closed fence")
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		Release(resp)
		if got.Load() != 3<<20 {
			t.Fatalf("server got %d bytes, want %d", got.Load(), 3<<20)
		}
	}
}
