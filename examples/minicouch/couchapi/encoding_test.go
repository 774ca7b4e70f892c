package couchapi

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func gzipped(parts ...string) string {
	var b bytes.Buffer
	for _, p := range parts { // one gzip member per part
		zw := gzip.NewWriter(&b)
		zw.Write([]byte(p))
		zw.Close()
	}
	return b.String()
}

// TestRequestEncoding: JSON bodies are read through their Content-Encoding
// as CouchDB reads them; a gzip bomb meets the size limit on its inflated
// size.
func TestRequestEncoding(t *testing.T) {
	ts, srv := newTestServer(t)
	srv.cfg.Set("chttpd", "max_http_request_size", "65536")
	gz := map[string]string{"Content-Encoding": "gzip"}
	doc := gzipped(`{"_id":"a","v":1}`)
	bomb := gzipped(`{"pad":"` + strings.Repeat("0", 1<<20) + `"}`)
	runSteps(t, ts.URL, []step{
		{name: "create db", method: "PUT", path: "/enc", status: 201},
		{name: "gzip doc PUT", method: "PUT", path: "/enc/b", body: gzipped(`{"v":2}`), headers: gz, status: 201, has: []string{`"id":"b"`}},
		{name: "gzip POST", method: "POST", path: "/enc", body: doc, headers: gz, status: 201, has: []string{`"id":"a"`}},
		{name: "written as sent", method: "GET", path: "/enc/b", status: 200, has: []string{`"v":2`}},
		{name: "gzip _bulk_docs", method: "POST", path: "/enc/_bulk_docs", body: gzipped(`{"docs":[{"_id":"c"},{"_id":"d"}]}`), headers: gz, status: 201, has: []string{`"id":"c"`, `"id":"d"`}},
		{name: "concatenated members are one body", method: "PUT", path: "/enc/e", body: gzipped(`{"v":`, `3}`), headers: gz, status: 201},
		{name: "gzip _all_docs keys", method: "POST", path: "/enc/_all_docs", body: gzipped(`{"keys":["a"]}`), headers: gz, status: 200, has: []string{`"id":"a"`}},
		{name: "upper-case name", method: "PUT", path: "/enc/f", body: gzipped(`{}`), headers: map[string]string{"Content-Encoding": "GZIP"}, status: 201},
		{name: "identity", method: "PUT", path: "/enc/g", body: `{}`, headers: map[string]string{"Content-Encoding": "identity"}, status: 201},
		{name: "not gzip", method: "PUT", path: "/enc/h", body: `{"v":1}`, headers: gz, status: 400,
			want: `{"error":"bad_request","reason":"Request body is not properly gzipped."}`},
		{name: "truncated", method: "PUT", path: "/enc/h", body: doc[:len(doc)-6], headers: gz, status: 400,
			want: `{"error":"bad_request","reason":"Request body is not properly gzipped."}`},
		{name: "bad checksum", method: "PUT", path: "/enc/h", body: doc[:len(doc)-8] + "\x00\x00\x00\x00" + doc[len(doc)-4:], headers: gz, status: 400,
			want: `{"error":"bad_request","reason":"Request body is not properly gzipped."}`},
		{name: "bomb", method: "PUT", path: "/enc/h", body: bomb, headers: gz, status: 413, has: []string{`"too_large"`}},
		{name: "deflate", method: "PUT", path: "/enc/h", body: `{}`, headers: map[string]string{"Content-Encoding": "deflate"}, status: 415,
			want: `{"error":"bad_content_type","reason":"deflate is not a supported content encoding."}`},
		{name: "unknown", method: "POST", path: "/enc/_bulk_docs", body: `{"docs":[]}`, headers: map[string]string{"Content-Encoding": "br"}, status: 415,
			want: `{"error":"bad_content_type","reason":"br is not a supported content encoding."}`},
		{name: "nothing lost to the refusals", method: "GET", path: "/enc/h", status: 404},
	})
	if len(bomb) > 65536 {
		t.Fatalf("the bomb is %d bytes compressed: it tests nothing", len(bomb))
	}
}

// FuzzGzipBody: whatever the bytes, an inflated body never yields more
// than its limit, and every failure is the limit's (413) or the
// encoding's (400).
func FuzzGzipBody(f *testing.F) {
	f.Add([]byte(gzipped(`{"a":1}`)), int64(1024))
	f.Add([]byte(gzipped(`{"a":`, `1}`)), int64(1024))
	f.Add([]byte(gzipped(strings.Repeat("x", 5000))), int64(100))
	f.Add([]byte("\x1f\x8b\x08\x00"), int64(10))
	f.Add([]byte("{}"), int64(10))
	f.Fuzz(func(t *testing.T, body []byte, max int64) {
		if max < 0 || max > 1<<20 {
			return
		}
		r := httptest.NewRequest("PUT", "/db/doc", bytes.NewReader(body))
		r.Header.Set("Content-Encoding", "gzip")
		inflateBody(r, max)
		if r.Header.Get("Content-Encoding") != "" || r.ContentLength != -1 {
			t.Fatal("the inflated request still declares its encoding or length")
		}
		out, err := io.ReadAll(r.Body)
		if int64(len(out)) > max {
			t.Fatalf("read %d bytes past the limit %d", len(out), max)
		}
		var mbe *http.MaxBytesError
		if err != nil && !errors.As(err, &mbe) && !errors.Is(err, errBadGzip) {
			t.Fatalf("error %v is neither the limit's nor the encoding's", err)
		}
		if herr := bodyReadError(err); err != nil && herr.Status != 413 && herr != errNotGzipped {
			t.Fatalf("answer %+v", herr)
		}
	})
}
