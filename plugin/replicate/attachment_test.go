package replicate

import (
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// patternReader yields n deterministic, poorly compressible bytes.
type patternReader struct {
	n, off int
}

func (p *patternReader) Read(b []byte) (int, error) {
	if p.off >= p.n {
		return 0, io.EOF
	}
	k := min(len(b), p.n-p.off)
	for i := 0; i < k; i++ {
		x := uint32(p.off + i)
		x ^= x >> 7
		x *= 2654435761
		b[i] = byte(x >> 13)
	}
	p.off += k
	return k, nil
}

// putAttachment streams an n-byte attachment to path ("db/doc/name?rev=…") and returns its md5.
func putAttachment(t *testing.T, s *testServer, path string, n int) string {
	t.Helper()
	h := md5.New()
	io.Copy(h, &patternReader{n: n})
	req, _ := http.NewRequest("PUT", s.Base+path, &patternReader{n: n})
	req.ContentLength = int64(n)
	req.Header.Set("Content-Type", "application/octet-stream")
	if s.User != "" {
		req.SetBasicAuth(s.User, s.Pass)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("PUT attachment: %d", resp.StatusCode)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// attachmentMD5 streams an attachment from db and hashes it.
func attachmentMD5(t *testing.T, s *testServer, db, doc, name string) (string, int64) {
	t.Helper()
	req, _ := http.NewRequest("GET", s.Base+db+"/"+doc+"/"+name, nil)
	if s.User != "" {
		req.SetBasicAuth(s.User, s.Pass)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET attachment %s/%s: %d", doc, name, resp.StatusCode)
	}
	h := md5.New()
	n, _ := io.Copy(h, resp.Body)
	return hex.EncodeToString(h.Sum(nil)), n
}

// TestLargeAttachmentStreamed replicates a 12 MB attachment and checks it
// arrives intact while the replicator's heap grows far less than its size.
func TestLargeAttachmentStreamed(t *testing.T) {
	s := startServer(t)
	if s.Kind != "minicouch" {
		t.Skip("pouchdb-server answers open_revs with JSON (attachments inline), so nothing can stream")
	}
	const size = 12 << 20
	src, tgt := s.newDB(t, "src"), s.newDB(t, "tgt")
	s.mustDo(t, "PUT", src+"/big", map[string]any{"kind": "big"})
	var doc struct {
		Rev string `json:"_rev"`
	}
	json.Unmarshal(s.mustDo(t, "GET", src+"/big", nil), &doc)
	want := putAttachment(t, s, src+"/big/blob.bin?rev="+doc.Rev, size)
	s.mustDo(t, "PUT", src+"/small", map[string]any{"kind": "small"})

	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var m runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > peak.Load() {
				peak.Store(m.HeapAlloc)
			}
		}
	}()
	res := runRep(t, testRep(s, src, tgt), Options{})
	close(stop)
	wg.Wait()
	got, n := attachmentMD5(t, s, tgt, "big", "blob.bin")
	if got != want || n != size {
		t.Fatalf("attachment on target: md5 %s len %d, want %s len %d", got, n, want, size)
	}
	if res.Stats.DocsWritten != 2 {
		t.Errorf("docs_written %d", res.Stats.DocsWritten)
	}
	growth := int64(peak.Load()) - int64(base.HeapAlloc)
	t.Logf("heap growth during replication: %d KiB for a %d KiB attachment", growth>>10, size>>10)
	if growth > size/3 {
		t.Fatalf("heap grew %d bytes while replicating a %d-byte attachment: not streamed", growth, size)
	}
}

// pieces yields data a few bytes per read, then EOF with the last piece
// when eofWithData.
type pieces struct {
	data        []byte
	size        int
	eofWithData bool
}

func (p *pieces) Read(b []byte) (int, error) {
	if len(p.data) == 0 {
		return 0, io.EOF
	}
	n := copy(b, p.data[:min(p.size, len(p.data))])
	p.data = p.data[n:]
	if len(p.data) == 0 && p.eofWithData {
		return n, io.EOF
	}
	return n, nil
}

// TestFullReader: a streamed attachment reaches the target's PUT in reads
// as full as the source allows (a multipart part gives what one read of
// the connection brought, and each read is one chunk of the PUT), and
// ends with io.EOF once, after the last data.
func TestFullReader(t *testing.T) {
	for _, c := range []struct {
		name        string
		n, piece    int
		eofWithData bool
		want        []int
	}{
		{"fills", 25, 3, false, []int{10, 10, 5}},
		{"eof with data", 25, 3, true, []int{10, 10, 5}},
		{"exact", 20, 5, true, []int{10, 10}},
		{"empty", 0, 5, false, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := fullReader{r: &pieces{data: make([]byte, c.n), size: c.piece, eofWithData: c.eofWithData}}
			var got []int
			buf := make([]byte, 10)
			for {
				n, err := r.Read(buf)
				if n > 0 {
					got = append(got, n)
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("reads of %v bytes, want %v", got, c.want)
			}
		})
	}
}

// TestFullReaderWriteTo: a streamed attachment writes itself to the
// target's PUT in pieces of streamBufSize, as full as the source allows
// (the transport's own copy went in 32 KiB pieces, a chunk of the PUT
// each), all of it and nothing more.
func TestFullReaderWriteTo(t *testing.T) {
	for _, c := range []struct {
		name        string
		n           int
		eofWithData bool
		want        []int
	}{
		{"pieces", 2*streamBufSize + 100, false, []int{streamBufSize, streamBufSize, 100}},
		{"eof with data", streamBufSize + 7, true, []int{streamBufSize, 7}},
		{"empty", 0, false, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			var w writeSizes
			n, err := fullReader{r: &pieces{data: make([]byte, c.n), size: 4 << 10, eofWithData: c.eofWithData}}.WriteTo(&w)
			if err != nil || n != int64(c.n) {
				t.Fatalf("wrote %d bytes, %v; want %d", n, err, c.n)
			}
			if fmt.Sprint(w.sizes) != fmt.Sprint(c.want) {
				t.Fatalf("writes of %v bytes, want %v", w.sizes, c.want)
			}
		})
	}
}

// writeSizes records the size of every write.
type writeSizes struct{ sizes []int }

func (w *writeSizes) Write(p []byte) (int, error) {
	w.sizes = append(w.sizes, len(p))
	return len(p), nil
}

// TestSmallAttachmentsInline checks that docs whose attachments are small
// and stored as they came are fetched with _bulk_get (data inline) and
// written with _bulk_docs, not one GET and one PUT each, and arrive whole:
// same revisions, data and digests. Larger ones, and ones the source
// stores gzipped (whose inline data is inflated, unlike their digest),
// still go one by one.
func TestSmallAttachmentsInline(t *testing.T) {
	s := startServer(t)
	if s.Kind != "minicouch" {
		t.Skip("needs minicouch (gzip-stored attachments)")
	}
	src, tgt := s.newDB(t, "src"), s.newDB(t, "tgt")
	type att struct {
		doc, name, ctype string
		size             int
		oneByOne         bool
	}
	atts := []att{
		{"empty", "e.bin", "application/octet-stream", 0, false},
		{"small", "s.bin", "application/octet-stream", 64 << 10, false},
		{"two", "a.bin", "application/octet-stream", 100 << 10, false},
		{"two", "b.bin", "application/octet-stream", 100 << 10, false},
		{"limit", "l.bin", "application/octet-stream", inlineAttMax, false},
		{"over", "o.bin", "application/octet-stream", inlineAttMax + 1, true},
		{"pair", "p1.bin", "application/octet-stream", 200 << 10, true},
		{"pair", "p2.bin", "application/octet-stream", 200 << 10, true},
		{"text", "t.txt", "text/plain", 10 << 10, true},
	}
	for i := range 30 {
		atts = append(atts, att{fmt.Sprintf("many%02d", i), "m.bin", "application/octet-stream", 40 << 10, false})
	}
	sums := map[string]string{}
	for _, a := range atts {
		path := src + "/" + a.doc + "/" + a.name
		if status, body := s.do(t, "GET", src+"/"+a.doc, nil); status == 200 {
			var d struct {
				Rev string `json:"_rev"`
			}
			json.Unmarshal(body, &d)
			path += "?rev=" + d.Rev
		}
		sums[a.doc+"/"+a.name] = putTypedAttachment(t, s, path, a.ctype, a.size)
	}
	s.mustDo(t, "PUT", src+"/plain", map[string]any{"x": 1})

	p := newFaultProxy(t, s)
	res := runRep(t, testRep(p.endpointServer(s), src, tgt), Options{})
	docs := map[string]bool{"plain": true}
	for _, a := range atts {
		docs[a.doc] = true
	}
	if res.Stats.DocsWritten != int64(len(docs)) || res.Stats.DocWriteFailures != 0 {
		t.Fatalf("docs_written %d, doc_write_failures %d, want %d and 0", res.Stats.DocsWritten, res.Stats.DocWriteFailures, len(docs))
	}
	p.mu.Lock()
	for _, a := range atts {
		if n := p.counts["PUT "+a.doc]; (n > 0) != a.oneByOne {
			t.Errorf("doc %s: %d PUTs, want one by one %v", a.doc, n, a.oneByOne)
		}
	}
	p.mu.Unlock()
	for _, a := range atts {
		got, n := attachmentMD5(t, s, tgt, a.doc, a.name)
		if got != sums[a.doc+"/"+a.name] || n != int64(a.size) {
			t.Errorf("%s/%s on target: md5 %s len %d, want %s len %d", a.doc, a.name, got, n, sums[a.doc+"/"+a.name], a.size)
		}
	}
	for d := range docs {
		q := "/" + d + "?att_encoding_info=true&revs=true"
		if a, b := string(s.mustDo(t, "GET", src+q, nil)), string(s.mustDo(t, "GET", tgt+q, nil)); a != b {
			t.Errorf("doc %s differs:\nsource %s\ntarget %s", d, a, b)
		}
	}
}

// putTypedAttachment is putAttachment with a content type.
func putTypedAttachment(t *testing.T, s *testServer, path, ctype string, n int) string {
	t.Helper()
	h := md5.New()
	io.Copy(h, &patternReader{n: n})
	req, _ := http.NewRequest("PUT", s.Base+path, &patternReader{n: n})
	req.ContentLength = int64(n)
	req.Header.Set("Content-Type", ctype)
	req.SetBasicAuth(s.User, s.Pass)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("PUT %s: %d %s", path, resp.StatusCode, body)
	}
	return hex.EncodeToString(h.Sum(nil))
}
