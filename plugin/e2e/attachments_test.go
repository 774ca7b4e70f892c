package e2e

import (
	"bytes"
	"crypto/md5"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	"github.com/couchepi/couchepi/examples/minicouch/couchgzip"
)

// rawRequest sends a request to c as admin with the given headers and
// returns the status, headers and body as sent (nothing inflated).
func (c *couch) rawRequest(method, path string, body []byte, headers ...string) (int, http.Header, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(method, strings.TrimSuffix(c.s.URL, "/")+path, bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.SetBasicAuth("admin", "pass")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableCompression: true}}).Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// attState is what must survive a replication unchanged: the doc's rev
// and each attachment's stub with its encoding.
func (c *couch) attState(db string) map[string]string {
	c.t.Helper()
	var all struct {
		Rows []struct {
			ID  string          `json:"id"`
			Doc json.RawMessage `json:"doc"`
		} `json:"rows"`
	}
	if err := json.Unmarshal([]byte(c.must("GET", "/"+db+"/_all_docs?include_docs=true&att_encoding_info=true", "", 200)), &all); err != nil {
		c.t.Fatal(err)
	}
	out := map[string]string{}
	for _, r := range all.Rows {
		var d struct {
			Rev  string                     `json:"_rev"`
			Atts map[string]json.RawMessage `json:"_attachments"`
		}
		json.Unmarshal(r.Doc, &d)
		for name, a := range d.Atts {
			out[r.ID+"/"+name] = d.Rev + " " + string(a)
		}
	}
	return out
}

// TestE2EEncodedAttachmentsReplicated: gzipped attachments cross a
// replication as the stored bytes, never inflated and gzipped again: the
// target keeps the source's digests, lengths and encodings (and so its
// revision ids) although it would compress new data at another level,
// and serves the very same bytes.
func TestE2EEncodedAttachmentsReplicated(t *testing.T) {
	t.Parallel()
	c := startCouch(t, "")
	c.must("PUT", "/asrc", "", 201)
	put := func(path, ctype string, body []byte, headers ...string) {
		t.Helper()
		code, _, b := c.rawRequest("PUT", path, body, append([]string{"Content-Type", ctype}, headers...)...)
		if code != 201 {
			t.Fatalf("PUT %s: %d %s", path, code, b)
		}
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 100<<10)
	for i := range random {
		random[i] = byte(rnd.Uint32())
	}
	var text strings.Builder
	for i := 0; text.Len() < 2<<20; i++ {
		fmt.Fprintf(&text, "line %d of a text that compresses well\n", i)
	}
	gz, err := couchgzip.Gzip([]byte("uploaded gzipped"), 6)
	if err != nil {
		t.Fatal(err)
	}
	put("/asrc/t/hello.txt", "text/plain", []byte("hello"))
	put("/asrc/t/random.bin?rev="+c.revOf("/asrc/t"), "application/octet-stream", random)
	put("/asrc/big/big.txt", "text/plain", []byte(text.String()))
	put("/asrc/e/empty.txt", "text/plain", nil)
	put("/asrc/gz/up.txt", "text/plain", gz, "Content-Encoding", "gzip")
	c.must("PUT", "/asrc/j", `{"v":1,"_attachments":{"x.json":{"content_type":"application/json","data":"eyJhIjoxfQ=="}}}`, 201)
	src := c.attState("asrc")
	if len(src) != 6 || !strings.Contains(src["t/hello.txt"], `"encoding":"gzip"`) || strings.Contains(src["t/random.bin"], `"encoding"`) {
		t.Fatalf("source: %v", src)
	}
	// Data compressed again on the target would get other bytes.
	c.must("PUT", "/_node/_local/_config/attachments/compression_level", `"1"`, 200)
	resp := c.must("POST", "/_replicate", fmt.Sprintf(`{"source":%q,"target":%q,"create_target":true}`, c.endpoint("asrc"), c.endpoint("adst")), 200)
	if !strings.Contains(resp, `"docs_written":5`) || !strings.Contains(resp, `"doc_write_failures":0`) {
		t.Fatalf("replication: %s", resp)
	}
	dst := c.attState("adst")
	for k, v := range src {
		if dst[k] != v {
			t.Errorf("%s\nsource %s\ntarget %s", k, v, dst[k])
		}
	}
	if len(dst) != len(src) {
		t.Errorf("target has %d attachments, source %d", len(dst), len(src))
	}
	for _, path := range []string{"/t/hello.txt", "/t/random.bin", "/big/big.txt", "/e/empty.txt", "/gz/up.txt", "/j/x.json"} {
		_, sh, sb := c.rawRequest("GET", "/asrc"+path, nil, "Accept-Encoding", "gzip")
		_, th, tb := c.rawRequest("GET", "/adst"+path, nil, "Accept-Encoding", "gzip")
		sum := md5.Sum(tb)
		if !bytes.Equal(sb, tb) || sh.Get("Content-Encoding") != th.Get("Content-Encoding") || sh.Get("ETag") != `"`+base64.StdEncoding.EncodeToString(sum[:])+`"` {
			t.Errorf("%s: target serves %d bytes (%s), source %d (%s)", path, len(tb), th.Get("Content-Encoding"), len(sb), sh.Get("Content-Encoding"))
		}
		_, _, plain := c.rawRequest("GET", "/adst"+path, nil)
		want := map[string]string{"/t/hello.txt": "hello", "/big/big.txt": text.String(), "/e/empty.txt": "", "/gz/up.txt": "uploaded gzipped", "/j/x.json": `{"a":1}`, "/t/random.bin": string(random)}[path]
		if string(plain) != want {
			t.Errorf("%s read inflated: %d bytes, want %d", path, len(plain), len(want))
		}
	}
}
