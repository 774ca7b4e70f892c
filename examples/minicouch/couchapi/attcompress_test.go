package couchapi

import (
	"bytes"
	"compress/gzip"
	"crypto/md5"
	"encoding/base64"
	"encoding/json"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"

	"github.com/couchepi/couchepi/examples/minicouch/couchgzip"
)

// The digest and encoded length CouchDB 3.5.0 gives a text/plain "hello"
// (stored gzipped at its default level), and those of an empty text.
const (
	helloGzipDigest = "md5-iMaiC8wqiFlD2NjLTemvCQ=="
	emptyGzipDigest = "md5-cCkGbCesb17xjWYNV0GXmg=="
	helloMD5        = "md5-XUFAKrxLKna5cZ2REBfFkg=="
)

// rawClient sees responses as sent: no Accept-Encoding added, nothing
// inflated behind the test's back.
var rawClient = &http.Client{Transport: &http.Transport{DisableCompression: true}}

// rawDo sends a request as admin with the given headers (and body) and
// returns the response with its body as sent.
func rawDo(t *testing.T, method, url, body string, headers ...string) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth("admin", "pass")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := rawClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func gunzip(t *testing.T, b []byte) string {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// stubOf reads doc id (with query) and returns its attachment name's
// object.
func stubOf(t *testing.T, base, path, name string) map[string]any {
	t.Helper()
	resp, b := rawDo(t, "GET", base+path, "", "Accept", "application/json")
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	var doc struct {
		Atts map[string]map[string]any `json:"_attachments"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	a, ok := doc.Atts[name]
	if !ok {
		t.Fatalf("%s has no attachment %s: %s", path, name, b)
	}
	return a
}

// TestAttachmentCompressionWrites: every way a compressible attachment
// arrives unencoded stores it gzipped as CouchDB does (same digest, same
// lengths), other types stay as they are, and the encoding shows only
// with att_encoding_info=true.
func TestAttachmentCompressionWrites(t *testing.T) {
	if !couchgzip.CouchDB {
		t.Skip("built without zlib: digests of compressed attachments are not CouchDB's")
	}
	ts, _ := newTestServer(t)
	runSteps(t, ts.URL, []step{{name: "db", method: "PUT", path: "/db", status: 201}})
	type att struct{ digest, encoding string }
	tests := []struct {
		name   string
		write  func(t *testing.T) // writes doc "d" with attachment "a"
		length float64
		att
		encodedLength float64
	}{
		{"standalone PUT text/plain", func(t *testing.T) {
			runSteps(t, ts.URL, []step{{name: "put", method: "PUT", path: "/db/d/a", body: "hello", ctype: "text/plain", status: 201}})
		}, 5, att{helloGzipDigest, "gzip"}, 25},
		{"standalone PUT with Content-MD5 of the data", func(t *testing.T) {
			runSteps(t, ts.URL, []step{{name: "put", method: "PUT", path: "/db/d/a", body: "hello", ctype: "text/plain",
				headers: map[string]string{"Content-MD5": "XUFAKrxLKna5cZ2REBfFkg=="}, status: 201}})
		}, 5, att{helloGzipDigest, "gzip"}, 25},
		{"inline base64", func(t *testing.T) {
			runSteps(t, ts.URL, []step{{name: "put", method: "PUT", path: "/db/d", body: `{"_attachments":{"a":{"content_type":"text/plain","data":"aGVsbG8="}}}`, status: 201}})
		}, 5, att{helloGzipDigest, "gzip"}, 25},
		{"inline with the digest of the data", func(t *testing.T) {
			runSteps(t, ts.URL, []step{{name: "put", method: "PUT", path: "/db/d", body: `{"_attachments":{"a":{"content_type":"text/plain","data":"aGVsbG8=","digest":"` + helloMD5 + `"}}}`, status: 201}})
		}, 5, att{helloGzipDigest, "gzip"}, 25},
		{"inline with the digest read back", func(t *testing.T) {
			runSteps(t, ts.URL, []step{{name: "put", method: "PUT", path: "/db/d", body: `{"_attachments":{"a":{"content_type":"text/plain","data":"aGVsbG8=","digest":"` + helloGzipDigest + `"}}}`, status: 201}})
		}, 5, att{helloGzipDigest, "gzip"}, 25},
		{"inline with an encoding claim: data is unencoded", func(t *testing.T) {
			runSteps(t, ts.URL, []step{{name: "put", method: "PUT", path: "/db/d", body: `{"_attachments":{"a":{"content_type":"text/plain","data":"aGVsbG8=","encoding":"gzip"}}}`, status: 201}})
		}, 5, att{helloGzipDigest, "gzip"}, 25},
		{"_bulk_docs", func(t *testing.T) {
			runSteps(t, ts.URL, []step{{name: "put", method: "POST", path: "/db/_bulk_docs", body: `{"docs":[{"_id":"d","_attachments":{"a":{"content_type":"text/plain","data":"aGVsbG8="}}}]}`, status: 201}})
		}, 5, att{helloGzipDigest, "gzip"}, 25},
		{"multipart follows", func(t *testing.T) {
			if st, b := putMultipart(t, ts.URL, "/db/d", `{"_attachments":{"a":{"content_type":"text/plain","follows":true,"length":5}}}`, map[string]string{"a": "hello"}, []string{"a"}); st != 201 {
				t.Fatalf("%d %s", st, b)
			}
		}, 5, att{helloGzipDigest, "gzip"}, 25},
		{"type with parameters, upper case", func(t *testing.T) {
			runSteps(t, ts.URL, []step{{name: "put", method: "PUT", path: "/db/d/a", body: "hello", ctype: "TEXT/HTML; charset=utf-8", status: 201}})
		}, 5, att{helloGzipDigest, "gzip"}, 25},
		{"application/json", func(t *testing.T) {
			runSteps(t, ts.URL, []step{{name: "put", method: "PUT", path: "/db/d/a", body: "hello", ctype: "application/json", status: 201}})
		}, 5, att{helloGzipDigest, "gzip"}, 25},
		{"empty text", func(t *testing.T) {
			runSteps(t, ts.URL, []step{{name: "put", method: "PUT", path: "/db/d", body: `{"_attachments":{"a":{"content_type":"text/plain","data":""}}}`, status: 201}})
		}, 0, att{emptyGzipDigest, "gzip"}, 20},
		{"octet-stream stays", func(t *testing.T) {
			runSteps(t, ts.URL, []step{{name: "put", method: "PUT", path: "/db/d/a", body: "hello", ctype: "application/octet-stream", status: 201}})
		}, 5, att{helloMD5, ""}, 0},
		{"image/svg+xml is not in the default list", func(t *testing.T) {
			runSteps(t, ts.URL, []step{{name: "put", method: "PUT", path: "/db/d/a", body: "hello", ctype: "image/svg+xml", status: 201}})
		}, 5, att{helloMD5, ""}, 0},
		{"no content type", func(t *testing.T) {
			runSteps(t, ts.URL, []step{{name: "put", method: "PUT", path: "/db/d", body: `{"_attachments":{"a":{"data":"aGVsbG8="}}}`, status: 201}})
		}, 5, att{helloMD5, ""}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runSteps(t, ts.URL, []step{{name: "fresh db", method: "DELETE", path: "/db", status: 200}, {name: "db", method: "PUT", path: "/db", status: 201}})
			tt.write(t)
			a := stubOf(t, ts.URL, "/db/d?att_encoding_info=true", "a")
			if a["digest"] != tt.digest || a["length"] != tt.length || a["stub"] != true {
				t.Errorf("stub %v, want digest %s, length %v", a, tt.digest, tt.length)
			}
			if tt.encoding == "" {
				if _, ok := a["encoding"]; ok {
					t.Errorf("stub %v has an encoding", a)
				}
			} else if a["encoding"] != tt.encoding || a["encoded_length"] != tt.encodedLength {
				t.Errorf("stub %v, want encoding %s, encoded_length %v", a, tt.encoding, tt.encodedLength)
			}
			plain := stubOf(t, ts.URL, "/db/d", "a")
			if _, ok := plain["encoding"]; ok {
				t.Errorf("without att_encoding_info: %v", plain)
			}
			if _, ok := plain["encoded_length"]; ok {
				t.Errorf("without att_encoding_info: %v", plain)
			}
			if plain["digest"] != tt.digest || plain["length"] != tt.length {
				t.Errorf("without att_encoding_info: %v", plain)
			}
		})
	}
}

func md5Of(b []byte) string {
	sum := md5.Sum(b)
	return "md5-" + base64.StdEncoding.EncodeToString(sum[:])
}

// TestAttachmentAcceptEncoding: an attachment stored gzipped goes out as
// stored, with Content-Encoding, when Accept-Encoding takes gzip (as
// mochiweb reads it for CouchDB), else inflated on the fly with its
// decoded length; one uploaded gzipped, whose decoded length nobody
// knows, inflated goes out chunked (its HEAD with Content-Length 0).
func TestAttachmentAcceptEncoding(t *testing.T) {
	ts, _ := newTestServer(t)
	gz, err := couchgzip.Gzip([]byte("hello"), 8)
	if err != nil {
		t.Fatal(err)
	}
	runSteps(t, ts.URL, []step{
		{name: "db", method: "PUT", path: "/db", status: 201},
		{name: "text", method: "PUT", path: "/db/d/a.txt", body: "hello", ctype: "text/plain", status: 201},
		{name: "binary", method: "PUT", path: "/db/b/a.bin", body: "hello", ctype: "application/octet-stream", status: 201},
		{name: "gzip upload", method: "PUT", path: "/db/g/a.txt", body: string(gz), ctype: "text/plain", headers: map[string]string{"Content-Encoding": "gzip"}, status: 201},
	})
	tests := []struct {
		name, method, path, acceptEncoding string
		encoding, length, ranges           string // response headers ("" = absent)
		body                               string // "gzip": the stored gzip bytes
	}{
		{"text, no Accept-Encoding", "GET", "/db/d/a.txt", "", "", "5", "none", "hello"},
		{"text, gzip", "GET", "/db/d/a.txt", "gzip", "gzip", "25", "none", "gzip"},
		{"text, *", "GET", "/db/d/a.txt", "*", "gzip", "25", "none", "gzip"},
		{"text, GZIP", "GET", "/db/d/a.txt", "GZIP", "gzip", "25", "none", "gzip"},
		{"text, gzip and identity", "GET", "/db/d/a.txt", "gzip;q=0.5, identity", "gzip", "25", "none", "gzip"},
		{"text, gzip refused", "GET", "/db/d/a.txt", "gzip;q=0", "", "5", "none", "hello"},
		{"text, gzip refused, * taken", "GET", "/db/d/a.txt", "gzip;q=0, *", "", "5", "none", "hello"},
		{"text, deflate only", "GET", "/db/d/a.txt", "deflate", "", "5", "none", "hello"},
		{"text, unreadable q", "GET", "/db/d/a.txt", "gzip;q=abc", "", "5", "none", "hello"},
		{"text HEAD, gzip", "HEAD", "/db/d/a.txt", "gzip", "gzip", "25", "none", ""},
		{"text HEAD", "HEAD", "/db/d/a.txt", "", "", "5", "none", ""},
		{"binary, gzip", "GET", "/db/b/a.bin", "gzip", "", "5", "bytes", "hello"},
		{"gzip upload, gzip", "GET", "/db/g/a.txt", "gzip", "gzip", "25", "none", "gzip"},
		{"gzip upload HEAD, gzip", "HEAD", "/db/g/a.txt", "gzip", "gzip", "25", "none", ""},
		// length "chunked": no Content-Length, Transfer-Encoding chunked
		// however short the body, as CouchDB 3.5.0 sends it
		{"gzip upload, no Accept-Encoding: no length known", "GET", "/db/g/a.txt", "", "", "chunked", "none", "hello"},
		{"gzip upload HEAD: CouchDB's Content-Length 0", "HEAD", "/db/g/a.txt", "", "", "0", "none", ""},
	}
	// A Range is not served on data stored encoded (Accept-Ranges: none):
	// each GET of it is tried with one too, answered as without.
	ranged := map[string]bool{}
	for _, tt := range tests {
		if tt.method == "GET" && tt.path != "/db/b/a.bin" {
			tt.name += ", Range ignored"
			ranged[tt.name] = true
			tests = append(tests, tt)
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hdr []string
			if tt.acceptEncoding != "" {
				hdr = []string{"Accept-Encoding", tt.acceptEncoding}
			}
			if ranged[tt.name] {
				hdr = append(hdr, "Range", "bytes=1-2")
			}
			resp, b := rawDo(t, tt.method, ts.URL+tt.path, "", hdr...)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			h := resp.Header
			length := h.Get("Content-Length")
			if len(resp.TransferEncoding) > 0 {
				length = strings.Join(resp.TransferEncoding, ",")
				if h.Get("Content-Length") != "" {
					length += "+" + h.Get("Content-Length")
				}
			}
			if h.Get("Content-Encoding") != tt.encoding || length != tt.length || h.Get("Accept-Ranges") != tt.ranges {
				t.Errorf("Content-Encoding %q, length %q, Accept-Ranges %q; want %q, %q, %q",
					h.Get("Content-Encoding"), length, h.Get("Accept-Ranges"), tt.encoding, tt.length, tt.ranges)
			}
			if h.Get("ETag") != `"iMaiC8wqiFlD2NjLTemvCQ=="` && h.Get("ETag") != `"XUFAKrxLKna5cZ2REBfFkg=="` {
				t.Errorf("ETag %s", h.Get("ETag"))
			}
			if h.Get("Content-MD5") != "" {
				t.Errorf("Content-MD5 %s: CouchDB sends none", h.Get("Content-MD5"))
			}
			switch tt.body {
			case "gzip":
				if !bytes.Equal(b, gz) || gunzip(t, b) != "hello" {
					t.Errorf("body %q, want the stored gzip bytes", b)
				}
			default:
				if string(b) != tt.body {
					t.Errorf("body %q, want %q", b, tt.body)
				}
			}
		})
	}
	a := stubOf(t, ts.URL, "/db/g?att_encoding_info=true", "a.txt")
	if a["encoding"] != "gzip" || a["length"] != float64(len(gz)) || a["encoded_length"] != float64(len(gz)) || a["digest"] != md5Of(gz) {
		t.Errorf("a gzip upload is kept as sent, its length unknown (CouchDB reports the encoded one): %v", a)
	}
	runSteps(t, ts.URL, []step{
		{name: "another encoding", method: "PUT", path: "/db/x/a.txt", body: "hello", ctype: "text/plain", headers: map[string]string{"Content-Encoding": "br"}, status: 415,
			want: `{"error":"bad_content_type","reason":"Only gzip and identity content-encodings are supported"}`},
		{name: "identity", method: "PUT", path: "/db/x/a.txt", body: "hello", ctype: "text/plain", headers: map[string]string{"Content-Encoding": "identity"}, status: 201},
	})
}

// TestAttachmentReadsDecoded: inline data is always the decoded data;
// att_encoding_info adds the encoding to stubs and inline data alike, in
// every read that takes it.
func TestAttachmentReadsDecoded(t *testing.T) {
	ts, _ := newTestServer(t)
	runSteps(t, ts.URL, []step{
		{name: "db", method: "PUT", path: "/db", status: 201},
		{name: "doc", method: "PUT", path: "/db/d", body: `{"_attachments":{"a.txt":{"content_type":"text/plain","data":"aGVsbG8="},"e.txt":{"content_type":"text/plain","data":""}}}`, status: 201},
	})
	enc := `"encoding":"gzip","encoded_length":25`
	tests := []struct {
		name, method, path, body string
		has, hasNot              []string
	}{
		{"inline", "GET", "/db/d?attachments=true", "", []string{`"data":"aGVsbG8="`, `"e.txt":{"content_type":"text/plain","revpos":1,"digest":"` + emptyGzipDigest + `","data":""}`}, []string{`"encoding"`}},
		{"inline with encoding info", "GET", "/db/d?attachments=true&att_encoding_info=true", "", []string{`"data":"aGVsbG8=",` + enc + `}`, `"data":"","encoding":"gzip","encoded_length":20}`}, nil},
		{"stub", "GET", "/db/d", "", []string{`"length":5,"stub":true}`}, []string{`"encoding"`}},
		{"stub with encoding info", "GET", "/db/d?att_encoding_info=true", "", []string{`"length":5,"stub":true,` + enc}, nil},
		{"open_revs JSON", "GET", "/db/d?open_revs=all&att_encoding_info=true", "", []string{`"stub":true,` + enc}, nil},
		{"_all_docs", "GET", "/db/_all_docs?include_docs=true&att_encoding_info=true", "", []string{`"stub":true,` + enc}, nil},
		{"_all_docs without", "GET", "/db/_all_docs?include_docs=true", "", []string{`"stub":true}`}, []string{`"encoding"`}},
		{"_changes", "GET", "/db/_changes?include_docs=true&att_encoding_info=true", "", []string{`"stub":true,` + enc}, nil},
		{"_changes without", "GET", "/db/_changes?include_docs=true", "", []string{`"stub":true}`}, []string{`"encoding"`}},
		{"_bulk_get", "POST", "/db/_bulk_get?att_encoding_info=true", `{"docs":[{"id":"d"}]}`, []string{`"stub":true,` + enc}, nil},
		{"_bulk_get data", "POST", "/db/_bulk_get?attachments=true", `{"docs":[{"id":"d"}]}`, []string{`"data":"aGVsbG8="}`}, []string{`"encoding"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hdr := []string{"Accept", "application/json"}
			if tt.body != "" {
				hdr = append(hdr, "Content-Type", "application/json")
			}
			resp, b := rawDo(t, tt.method, ts.URL+tt.path, tt.body, hdr...)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			for _, s := range tt.has {
				if !bytes.Contains(b, []byte(s)) {
					t.Errorf("%s lacks %s", b, s)
				}
			}
			for _, s := range tt.hasNot {
				if bytes.Contains(b, []byte(s)) {
					t.Errorf("%s has %s", b, s)
				}
			}
		})
	}
}

// mpPart is one part of a multipart answer, nested ones flattened.
type mpPart struct {
	header http.Header
	body   []byte
}

func readRawParts(t *testing.T, ctype string, body []byte) []mpPart {
	t.Helper()
	mt, params, err := mime.ParseMediaType(ctype)
	if err != nil || !strings.HasPrefix(mt, "multipart/") {
		return []mpPart{{header: http.Header{"Content-Type": {ctype}}, body: body}}
	}
	var out []mpPart
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	for {
		p, err := mr.NextRawPart()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(p)
		if strings.HasPrefix(p.Header.Get("Content-Type"), "multipart/") {
			out = append(out, readRawParts(t, p.Header.Get("Content-Type"), b)...)
			continue
		}
		out = append(out, mpPart{header: http.Header(p.Header), body: b})
	}
}

// TestAttachmentMultipartEncoded: multipart answers send attachments as
// stored, gzipped ones with Content-Encoding and their encoding in the
// JSON (stubs' too), whatever the Accept-Encoding, as CouchDB does; and
// such a doc written back with new_edits=false, as a replicator writes
// it, is stored with the same bytes, digest and lengths.
func TestAttachmentMultipartEncoded(t *testing.T) {
	ts, _ := newTestServer(t)
	runSteps(t, ts.URL, []step{
		{name: "db", method: "PUT", path: "/db", status: 201},
		{name: "target", method: "PUT", path: "/target", status: 201},
		{name: "doc", method: "PUT", path: "/db/d", body: `{"v":1,"_attachments":{"a.txt":{"content_type":"text/plain","data":"aGVsbG8="},"b.bin":{"content_type":"application/octet-stream","data":"eHl6"}}}`, status: 201},
	})
	tests := []struct {
		name, method, path, body, accept string
		stub                             bool // a.txt goes as a stub
	}{
		{"doc as multipart/related", "GET", "/db/d?attachments=true", "", "multipart/related", false},
		{"open_revs", "GET", "/db/d?open_revs=all&revs=true&latest=true", "", "multipart/mixed", false},
		{"open_revs with atts_since", "GET", `/db/d?open_revs=all&revs=true&atts_since=["1-x"]`, "", "multipart/mixed", false},
		{"_bulk_get", "POST", "/db/_bulk_get?revs=true&attachments=true", `{"docs":[{"id":"d"}]}`, "multipart/mixed", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hdr := []string{"Accept", tt.accept}
			if tt.body != "" {
				hdr = append(hdr, "Content-Type", "application/json")
			}
			resp, b := rawDo(t, tt.method, ts.URL+tt.path, tt.body, hdr...)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			parts := readRawParts(t, resp.Header.Get("Content-Type"), b)
			if len(parts) != 3 {
				t.Fatalf("%d parts: %q", len(parts), b)
			}
			js := string(parts[0].body)
			if !strings.Contains(js, `"a.txt":{"content_type":"text/plain","revpos":1,"digest":"`+helloGzipDigest+`","length":5,"follows":true,"encoding":"gzip","encoded_length":25}`) ||
				!strings.Contains(js, `"b.bin":{"content_type":"application/octet-stream","revpos":1,"digest":"md5-0W+zbwkR+HiZjBNhka9wXg==","length":3,"follows":true}`) {
				t.Errorf("JSON part %s", js)
			}
			for _, p := range parts[1:] {
				switch p.header.Get("Content-Type") {
				case "text/plain":
					if p.header.Get("Content-Encoding") != "gzip" || p.header.Get("Content-Length") != "25" || md5Of(p.body) != helloGzipDigest || gunzip(t, p.body) != "hello" {
						t.Errorf("text part %v %q", p.header, p.body)
					}
				default:
					if p.header.Get("Content-Encoding") != "" || p.header.Get("Content-Length") != "3" || string(p.body) != "xyz" {
						t.Errorf("binary part %v %q", p.header, p.body)
					}
				}
			}
			if tt.name != "doc as multipart/related" {
				return
			}
			// Write it back as a replicator does: the bytes are kept.
			resp, out := rawDo(t, "PUT", ts.URL+"/target/d?new_edits=false", string(b), "Content-Type", resp.Header.Get("Content-Type"))
			if resp.StatusCode != 201 {
				t.Fatalf("write back: %d %s", resp.StatusCode, out)
			}
			a := stubOf(t, ts.URL, "/target/d?att_encoding_info=true", "a.txt")
			if a["digest"] != helloGzipDigest || a["length"] != 5.0 || a["encoding"] != "gzip" || a["encoded_length"] != 25.0 {
				t.Errorf("written back: %v", a)
			}
			if resp, b := rawDo(t, "GET", ts.URL+"/target/d/a.txt", ""); string(b) != "hello" || resp.Header.Get("Content-Length") != "5" {
				t.Errorf("written back, read decoded: %q %v", b, resp.Header)
			}
		})
	}
	// A revision whose attachments all go as stubs is a JSON part of a
	// multipart answer, its stubs with their encoding.
	resp, b := rawDo(t, "GET", ts.URL+"/db/d", "", "Accept", "application/json")
	var cur struct {
		Rev string `json:"_rev"`
	}
	json.Unmarshal(b, &cur)
	resp, b = rawDo(t, "GET", ts.URL+`/db/d?open_revs=all&atts_since=["`+cur.Rev+`"]`, "", "Accept", "multipart/mixed")
	parts := readRawParts(t, resp.Header.Get("Content-Type"), b)
	if resp.StatusCode != 200 || len(parts) != 1 || !bytes.Contains(parts[0].body, []byte(`"length":5,"stub":true,"encoding":"gzip","encoded_length":25}`)) {
		t.Errorf("stubs in multipart/mixed: %d %s", resp.StatusCode, b)
	}
}

// TestMaxAttachmentSize: `[couchdb] max_attachment_size` refuses an
// attachment above it with CouchDB's 413, by its declared length before
// reading, or by the bytes it turns out to have (as they arrive: a gzip
// upload by its encoded bytes, text to be compressed by its own), and a
// doc write as a whole, as CouchDB's validate_attachment_sizes does.
func TestMaxAttachmentSize(t *testing.T) {
	ts, srv := newTestServer(t)
	srv.cfg.Set("couchdb", "max_attachment_size", "10")
	gzSmall, _ := couchgzip.Gzip([]byte("x"), 8) // 1 byte, 21 encoded
	tooLarge := func(name string) string { return `{"error":"attachment_too_large","reason":"` + name + `"}` }
	runSteps(t, ts.URL, []step{
		{name: "db", method: "PUT", path: "/db", status: 201},
		{name: "11 bytes", method: "PUT", path: "/db/a/a.txt", body: "hello world", ctype: "text/plain", status: 413, want: tooLarge("a.txt")},
		{name: "10 bytes", method: "PUT", path: "/db/a/a.txt", body: "helloworld", ctype: "text/plain", status: 201},
		{name: "gzip upload counted encoded", method: "PUT", path: "/db/gz/a.txt", body: string(gzSmall), ctype: "text/plain", headers: map[string]string{"Content-Encoding": "gzip"}, status: 413, want: tooLarge("a.txt")},
		{name: "inline", method: "PUT", path: "/db/b", body: `{"_attachments":{"b.txt":{"data":"aGVsbG8gd29ybGQ="}}}`, status: 413, want: tooLarge("b.txt")},
		{name: "a stub declaring more", method: "PUT", path: "/db/c", body: `{"_attachments":{"c":{"stub":true,"length":11}}}`, status: 413, want: tooLarge("c")},
		{name: "_bulk_docs as a whole", method: "POST", path: "/db/_bulk_docs", body: `{"docs":[{"_id":"ok"},{"_id":"big","_attachments":{"b":{"data":"aGVsbG8gd29ybGQ="}}}]}`, status: 413, want: tooLarge("b")},
		{name: "nothing of it written", method: "GET", path: "/db/ok", status: 404},
	})
	// A body without a declared length is counted as it is read.
	req, _ := http.NewRequest("PUT", ts.URL+"/db/chunked/a.bin", io.MultiReader(strings.NewReader("hello "), strings.NewReader("world")))
	req.SetBasicAuth("admin", "pass")
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := rawClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if req.ContentLength != 0 || resp.StatusCode != 413 || !jsonEqual(b, []byte(tooLarge("a.bin"))) {
		t.Errorf("chunked: %d %s", resp.StatusCode, b)
	}
	// Multipart data that follows: by its declared length, else by its bytes.
	if st, b := putMultipart(t, ts.URL, "/db/m", `{"_attachments":{"m":{"follows":true,"length":11}}}`, map[string]string{"m": "hello world"}, []string{"m"}); st != 413 || !jsonEqual([]byte(b), []byte(tooLarge("m"))) {
		t.Errorf("multipart, declared: %d %s", st, b)
	}
	if st, b := putMultipart(t, ts.URL, "/db/m", `{"_attachments":{"m":{"follows":true}}}`, map[string]string{"m": "hello world"}, []string{"m"}); st != 413 || !jsonEqual([]byte(b), []byte(tooLarge("m"))) {
		t.Errorf("multipart, undeclared: %d %s", st, b)
	}
	srv.cfg.Set("couchdb", "max_attachment_size", "100")
	runSteps(t, ts.URL, []step{
		{name: "text counted before compression", method: "PUT", path: "/db/t/a.txt", body: strings.Repeat("a", 1000), ctype: "text/plain", status: 413, want: tooLarge("a.txt")},
		{name: "infinity", method: "PUT", path: "/_node/_local/_config/couchdb/max_attachment_size", body: `"infinity"`, status: 200},
		{name: "no bound", method: "PUT", path: "/db/t/a.txt", body: strings.Repeat("a", 1000), ctype: "text/plain", status: 201},
	})
}

// TestAttachmentCompressionConfig: `[attachments] compression_level` and
// `compressible_types` are read at every write, with CouchDB's rules: a
// level outside 1..9 stores everything as it comes; each type is a
// pattern whose `*` matches anything.
func TestAttachmentCompressionConfig(t *testing.T) {
	ts, srv := newTestServer(t)
	runSteps(t, ts.URL, []step{{name: "db", method: "PUT", path: "/db", status: 201}})
	level1, _ := couchgzip.Gzip([]byte("hello"), 1)
	level8, _ := couchgzip.Gzip([]byte("hello"), 8)
	tests := []struct {
		name, level, types, ctype string
		want                      []byte // stored bytes; nil: "hello" unencoded
	}{
		{"defaults", "", "", "text/plain", level8},
		{"level 0", "0", "", "text/plain", nil},
		{"level 10", "10", "", "text/plain", nil},
		{"level 1", "1", "", "text/plain", level1},
		{"not a number: the default", "x", "", "text/plain", level8},
		{"own list", "", "image/*, application/x-*", "image/png", level8},
		{"own list, prefix pattern", "", "image/*, application/x-*", "application/x-sh", level8},
		{"own list leaves text", "", "image/*, application/x-*", "text/plain", nil},
		{"spaces around commas", "", " image/png , text/csv", "text/csv", level8},
		{"an exact type is not a prefix", "", "text/csv", "text/csvx", nil},
		{"empty list", "", ",", "text/plain", nil},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for key, v := range map[string]string{"compression_level": tt.level, "compressible_types": tt.types} {
				if v == "" {
					srv.cfg.Delete("attachments", key)
				} else {
					srv.cfg.Set("attachments", key, v)
				}
			}
			path := "/db/d" + string(rune('a'+i)) + "/a"
			runSteps(t, ts.URL, []step{{name: "put", method: "PUT", path: path, body: "hello", ctype: tt.ctype, status: 201}})
			resp, b := rawDo(t, "GET", ts.URL+path, "", "Accept-Encoding", "gzip")
			if tt.want == nil {
				if resp.Header.Get("Content-Encoding") != "" || string(b) != "hello" {
					t.Errorf("stored %q, %v; want it unencoded", b, resp.Header)
				}
				return
			}
			if resp.Header.Get("Content-Encoding") != "gzip" || !bytes.Equal(b, tt.want) {
				t.Errorf("stored %q, %v; want %q", b, resp.Header, tt.want)
			}
		})
	}
}

// TestRevisionIDsAsCouchDB: the same writes get the revision ids CouchDB
// 3.5.0 gave them (read from one): attachment digests and order count,
// so this holds only with CouchDB's gzip bytes.
func TestRevisionIDsAsCouchDB(t *testing.T) {
	if !couchgzip.CouchDB {
		t.Skip("built without zlib: digests of compressed attachments are not CouchDB's")
	}
	ts, _ := newTestServer(t)
	rev := func(resp *http.Response, b []byte) string {
		t.Helper()
		var r struct{ Rev string }
		if err := json.Unmarshal(b, &r); err != nil || resp.StatusCode/100 != 2 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		return r.Rev
	}
	u := ts.URL + "/db"
	rawDo(t, "PUT", u, "")
	js := "application/json"
	bin := "application/octet-stream"
	tests := []struct {
		name, method, path, ctype, body, want string
	}{
		{"PUT /db/d/hello.txt", "PUT", "/d/hello.txt", "text/plain", "hello", "1-cc8f24d15370e2b5bdde8079698301d2"},
		{"an empty text", "PUT", "/e/empty.txt", "text/plain", "", "1-f18a5fb429a1993856cfe9a641d1dd99"},
		{"a gzip upload", "PUT", "/gz/h.txt", "text/plain", "gzip:hello", "1-e1df38747cc7c636f1cc99b7e89f13ad"},
		{"seven attachments", "PUT", "/inl", js, `{"_attachments":{"a.txt":{"content_type":"text/plain","data":"aGVsbG8="},"b.bin":{"content_type":"application/octet-stream","data":"aGVsbG8="},"c":{"content_type":"TEXT/HTML; charset=utf-8","data":"aGVsbG8="},"d":{"content_type":"application/json","data":"aGVsbG8="},"e":{"content_type":"image/svg+xml","data":"aGVsbG8="},"f":{"data":"aGVsbG8="}, "g":{"content_type":" text/plain ;x=y","data":"aGVsbG8="}}}`, "1-a1151bf90cc15439625c3aeedc4364a3"},
		{"attachments out of name order", "PUT", "/ord", js, `{"_attachments":{"b":{"content_type":"application/octet-stream","data":"eHl6"},"a":{"content_type":"application/octet-stream","data":"eHl6"}}}`, "1-a7726d09a63e7ad02e6fc8586617ebd1"},
		{"a standalone PUT on them", "PUT", "/ord/c?rev=1-a7726d09a63e7ad02e6fc8586617ebd1", bin, "xyz", "2-8a1d2302fd7e44be7fb1e0646093a2cc"},
		{"a body", "PUT", "/b1", js, `{"a":1,"b":[1,2,3],"c":{"d":null,"e":true},"f":1.5,"g":"str\u00e9","h":-5,"i":1e2,"j":12345678901234567890,"k":[],"l":{},"m":[1,"x",2.0],"n":300,"o":-2147483649,"p":"\ud83d\ude00","q":[256,1],"r":false,"s":0.1,"t":-0,"u":"a\"b\\c\n","v":2147483647,"w":-2147483648,"x":-1.5e-300}`, "1-de6ac9a09f7b3f5932032296315469b0"},
		{"new", "PUT", "/b5", js, `{"v":1}`, "1-7a7e4b29f3af401e69b6f86e4c26b727"},
		{"edit", "PUT", "/b5?rev=1-7a7e4b29f3af401e69b6f86e4c26b727", js, `{"v":2}`, "2-d0df861eb528e79690cd2ff3c4d394f3"},
		{"delete", "DELETE", "/b5?rev=2-d0df861eb528e79690cd2ff3c4d394f3", "", "", "3-9b72b0117fa1058c3b8485ca2583dea3"},
		{"recreate", "PUT", "/b5", js, `{"v":3}`, "4-eaa9706a35c0c31f160a9ca72e0a72d3"},
		{"replicated, not hex", "PUT", "/b6?new_edits=false", js, `{"_rev":"1-abc","v":1}`, "1-abc"},
		{"an edit on it", "PUT", "/b6?rev=1-abc", js, `{"v":2}`, "2-e4d9269042dd9ce6d528359cc48ead40"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, hdr := tt.body, []string{}
			if tt.ctype != "" {
				hdr = append(hdr, "Content-Type", tt.ctype)
			}
			if s, ok := strings.CutPrefix(body, "gzip:"); ok {
				z, _ := couchgzip.Gzip([]byte(s), 8)
				body, hdr = string(z), append(hdr, "Content-Encoding", "gzip")
			}
			if got := rev(rawDo(t, tt.method, u+tt.path, body, hdr...)); got != tt.want {
				t.Errorf("rev %s, CouchDB: %s", got, tt.want)
			}
		})
	}
	// CouchDB's order, the standalone PUT's attachment first.
	_, b := rawDo(t, "GET", u+"/ord", "", "Accept", js)
	if i, j, k := bytes.Index(b, []byte(`"c":`)), bytes.Index(b, []byte(`"b":`)), bytes.Index(b, []byte(`"a":`)); !(i < j && j < k) {
		t.Errorf("attachment order: %s", b)
	}
}

// TestCopyKeepsStoredAttachments: COPY writes each attachment's stored
// bytes as they are, as CouchDB 3.5.0 does within a shard: a text stored
// uncompressed (compression off when it was written) stays uncompressed
// with its digest, one stored gzipped stays so, an upload gzipped by the
// client keeps its unknown length.
func TestCopyKeepsStoredAttachments(t *testing.T) {
	ts, srv := newTestServer(t)
	runSteps(t, ts.URL, []step{{name: "db", method: "PUT", path: "/db", status: 201}})
	gz, err := couchgzip.Gzip([]byte("hello"), 8)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, level, ctype, body string
		headers                  map[string]string
	}{
		{"text stored with compression off", "0", "text/plain", "hello", nil},
		{"text stored with Content-Encoding identity, compression off", "0", "text/plain", "hello", map[string]string{"Content-Encoding": "identity"}},
		{"text stored gzipped", "", "text/plain", "hello", nil},
		{"text stored at level 1", "1", "text/plain", "hello", nil},
		{"binary", "", "application/octet-stream", "hello", nil},
		{"gzip upload", "", "text/plain", string(gz), map[string]string{"Content-Encoding": "gzip"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src, dst := "/db/s"+string(rune('a'+i)), "d"+string(rune('a'+i))
			if tt.level != "" {
				srv.cfg.Set("attachments", "compression_level", tt.level)
			}
			runSteps(t, ts.URL, []step{{name: "src", method: "PUT", path: src + "/a.txt", body: tt.body, ctype: tt.ctype, headers: tt.headers, status: 201}})
			srv.cfg.Delete("attachments", "compression_level") // CouchDB's default, 8, at COPY
			runSteps(t, ts.URL, []step{{name: "copy", method: "COPY", path: src, headers: map[string]string{"Destination": dst}, status: 201}})
			was := stubOf(t, ts.URL, src+"?att_encoding_info=true", "a.txt")
			got := stubOf(t, ts.URL, "/db/"+dst+"?att_encoding_info=true", "a.txt")
			for _, k := range []string{"digest", "length", "encoding", "encoded_length", "content_type"} {
				if got[k] != was[k] {
					t.Errorf("copy's %s %v, the source's %v", k, got[k], was[k])
				}
			}
			_, a := rawDo(t, "GET", ts.URL+src+"/a.txt", "", "Accept-Encoding", "gzip")
			_, b := rawDo(t, "GET", ts.URL+"/db/"+dst+"/a.txt", "", "Accept-Encoding", "gzip")
			if !bytes.Equal(a, b) {
				t.Errorf("copy's stored bytes %q, the source's %q", b, a)
			}
		})
	}
}
