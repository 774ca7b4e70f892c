package couchapi

import (
	"bytes"
	"crypto/md5"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// TestMultipartLargePartStreamed: a multipart part above spillThreshold
// goes into the store as it is read, neither held in memory nor copied
// to a temporary file first: with TMPDIR pointing nowhere the write
// still succeeds (it failed with a 500 when large parts went through a
// temp file), the data reads back intact, and a digest that does not
// match, an oversized part and a truncated body are refused as before.
func TestMultipartLargePartStreamed(t *testing.T) {
	t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "missing"))
	ts, srv := newTestServer(t)
	runSteps(t, ts.URL, []step{{name: "db", method: "PUT", path: "/db", status: 201}})
	data := make([]byte, 3*spillThreshold+123)
	for i := range data {
		data[i] = byte(i*7 + i>>11)
	}
	sum := md5.Sum(data)
	digest := "md5-" + base64.StdEncoding.EncodeToString(sum[:])
	doc := func(digest string, length int) string {
		return fmt.Sprintf(`{"_id":"big","_rev":"1-abc","_revisions":{"start":1,"ids":["abc"]},"_attachments":{"a.bin":{"content_type":"application/octet-stream","revpos":1,"digest":%q,"length":%d,"follows":true}}}`, digest, length)
	}
	for _, c := range []struct {
		name   string
		body   func() (string, string)
		status int
		want   string
	}{
		{"wrong digest", func() (string, string) {
			return multipartDoc("multipart/related; boundary={boundary}", doc("md5-AAAAAAAAAAAAAAAAAAAAAA==", len(data)), "a.bin", string(data))
		}, 400, "content_md5_mismatch"},
		{"truncated", func() (string, string) {
			b, ct := multipartDoc("multipart/related; boundary={boundary}", doc(digest, len(data)), "a.bin", string(data))
			return b[:len(b)-100], ct
		}, 400, "bad_request"},
		{"streamed", func() (string, string) {
			return multipartDoc("multipart/related; boundary={boundary}", doc(digest, len(data)), "a.bin", string(data))
		}, 201, `"ok":true`},
	} {
		t.Run(c.name, func(t *testing.T) {
			body, ct := c.body()
			req, _ := http.NewRequest("PUT", ts.URL+"/db/big?new_edits=false", strings.NewReader(body))
			req.SetBasicAuth("admin", "pass")
			req.Header.Set("Content-Type", ct)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.status || !strings.Contains(string(b), c.want) {
				t.Fatalf("PUT: %d %s, want %d with %s", resp.StatusCode, b, c.status, c.want)
			}
		})
	}
	req, _ := http.NewRequest("GET", ts.URL+"/db/big/a.bin", nil)
	req.SetBasicAuth("admin", "pass")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes (status %d), want the %d written", len(got), resp.StatusCode, len(data))
	}
	_ = srv
}

// TestReadPartUpTo: a part is read into one buffer of its declared size
// plus one byte, never grown (a bytes.Buffer grown by doubling allocated
// and copied about twice the data); a wrong or missing declaration still
// reads it all, and more than the limit comes back as limit+1 bytes or
// more, for the caller to stream.
func TestReadPartUpTo(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	for _, c := range []struct {
		name    string
		n, hint int
		limit   int
		wantLen int
		wantCap int // 0: any
	}{
		{"declared", len(data), len(data), len(data), len(data), len(data) + 1},
		{"undeclared", len(data), -1, len(data), len(data), 0},
		{"declared short", len(data), 1000, len(data), len(data), 0},
		{"over the limit", len(data), len(data), 1000, 1001, 1001},
		{"empty", 0, 0, 1000, 0, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := readPartUpTo(bytes.NewReader(data[:c.n]), int64(c.hint), c.limit)
			if err != nil {
				t.Fatal(err)
			}
			if got == nil || len(got) != c.wantLen || !bytes.Equal(got, data[:len(got)]) {
				t.Fatalf("read %d bytes, want %d", len(got), c.wantLen)
			}
			if c.wantCap > 0 && cap(got) != c.wantCap {
				t.Fatalf("buffer of %d bytes, want %d (one allocation of the declared size)", cap(got), c.wantCap)
			}
		})
	}
}
