package couchclient

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/couchepi/couchepi/parse"
)

// TestBufferedBodies checks Bytes and Release: buffered answers (sized by
// Content-Length or chunked) come back whole, stay intact until released,
// and released buffers serve later answers correctly, from the pool that
// read them.
func TestBufferedBodies(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := len(r.URL.Query().Get("fill"))
		body := strings.Repeat(r.URL.Query().Get("c"), n)
		if r.URL.Query().Get("chunked") == "" {
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		} else {
			w.(http.Flusher).Flush()
		}
		io.WriteString(w, body)
	}))
	defer srv.Close()
	p := testPool()
	defer p.Close()
	c := p.Endpoint(parse.Endpoint{URL: srv.URL + "/db/"}, nil)
	ctx := context.Background()
	get := func(q string) *http.Response {
		resp, err := c.Do(ctx, &Request{Method: http.MethodGet, Path: "x", Query: q, Buffer: true, Reuse: true})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	tests := []struct {
		q    string
		want string
	}{
		{"c=a&fill=" + strings.Repeat("x", 100000), strings.Repeat("a", 100000)},
		{"c=b&chunked=1&fill=" + strings.Repeat("x", 70000), strings.Repeat("b", 70000)},
		{"c=c&fill=", ""},
		{"c=d&chunked=1&fill=" + strings.Repeat("x", 10), strings.Repeat("d", 10)},
	}
	var kept []byte
	var keptResp *http.Response
	for i, tc := range tests {
		resp := get(tc.q)
		data, err := Bytes(resp)
		if err != nil || string(data) != tc.want {
			t.Fatalf("request %d: %d bytes, err %v; want %d bytes", i, len(data), err, len(tc.want))
		}
		if i == 0 {
			kept, keptResp = data, resp // held across later requests
			continue
		}
		Release(resp)
		Release(resp) // twice is harmless
	}
	if !bytes.Equal(kept, []byte(tests[0].want)) {
		t.Fatal("a held buffer changed while other answers were released")
	}
	Release(keptResp)
	// A buffered answer without Reuse leaves the recycled buffers alone.
	free := len(p.freeBodies)
	if free == 0 {
		t.Fatal("released buffers were not kept for reuse")
	}
	other := testPool() // released buffers go back to their own pool
	defer other.Close()
	if n := len(other.freeBodies); n != 0 {
		t.Fatalf("another pool holds %d released buffers", n)
	}
	plain, err := c.Do(ctx, &Request{Method: http.MethodGet, Path: "x", Query: "c=f&fill=xy", Buffer: true})
	if err != nil {
		t.Fatal(err)
	}
	if data, err := Bytes(plain); err != nil || string(data) != "ff" || len(p.freeBodies) != free {
		t.Fatalf("buffered without Reuse: %q %v, %d free buffers, want %d", data, err, len(p.freeBodies), free)
	}
	// An unbuffered response: Bytes reads it, Release ignores it.
	resp, err := c.Do(ctx, &Request{Method: http.MethodGet, Path: "x", Query: "c=e&fill=xyz"})
	if err != nil {
		t.Fatal(err)
	}
	if data, err := Bytes(resp); err != nil || string(data) != "eee" {
		t.Fatalf("unbuffered: %q %v", data, err)
	}
	Release(resp)
}
