package store

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/json"
	"io"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"testing"
	"time"
)

func digestOf(b []byte) string {
	s := md5.Sum(b)
	return "md5-" + base64.StdEncoding.EncodeToString(s[:])
}

func readAtt(t *testing.T, db *DB, digest string) []byte {
	t.Helper()
	rc, n, err := db.OpenAttachment(context.Background(), digest)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil || int64(len(b)) != n {
		t.Fatalf("read attachment: %d bytes of %d, %v", len(b), n, err)
	}
	return b
}

func TestAttachmentsInlineAndStubs(t *testing.T) {
	s := openTest(t)
	db := createTest(t, s, "d")
	ctx := context.Background()
	r1 := put(t, db, `{"_id":"a","_attachments":{"hello.txt":{"content_type":"text/plain","data":"aGVsbG8="}}}`)
	d, err := db.Get(ctx, "a", GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantStub := `{"_id":"a","_rev":"` + r1 + `","_attachments":{"hello.txt":{"content_type":"text/plain","revpos":1,"digest":"` + digestOf([]byte("hello")) + `","length":5,"stub":true}}}`
	if got := docJSON(t, d); got != wantStub {
		t.Fatalf("stub json\n got %s\nwant %s", got, wantStub)
	}
	r2 := put(t, db, `{"_id":"a","_rev":"`+r1+`","v":2,"_attachments":{"hello.txt":{"stub":true},"b.bin":{"data":"AAEC"}}}`)
	d, _ = db.Get(ctx, "a", GetOptions{AttsSince: []string{r1}})
	// in the order written, as CouchDB keeps them
	if len(d.Attachments) != 2 || d.Attachments[1].Name != "b.bin" || d.Attachments[1].Stub || d.Attachments[1].RevPos != 2 ||
		d.Attachments[0].Name != "hello.txt" || !d.Attachments[0].Stub || d.Attachments[0].RevPos != 1 {
		t.Fatalf("atts_since: %+v", d.Attachments)
	}
	var buf bytes.Buffer
	if err := db.WriteDocJSON(ctx, &buf, d, false); err != nil {
		t.Fatal(err)
	}
	var parsed map[string]any
	if err := json.Unmarshal(buf.Bytes(), &parsed); err != nil {
		t.Fatalf("inline json invalid: %v\n%s", err, buf.String())
	}
	atts := parsed["_attachments"].(map[string]any)
	if atts["b.bin"].(map[string]any)["data"] != "AAEC" || atts["hello.txt"].(map[string]any)["stub"] != true {
		t.Fatalf("inline json: %s", buf.String())
	}
	buf.Reset()
	db.WriteDocJSON(ctx, &buf, d, true)
	if !strings.Contains(buf.String(), `"b.bin":{"content_type":"application/octet-stream","revpos":2,"digest":"`+digestOf([]byte{0, 1, 2})+`","length":3,"follows":true}`) {
		t.Fatalf("follows json: %s", buf.String())
	}
	d, _ = db.Get(ctx, "a", GetOptions{Attachments: true})
	for _, a := range d.Attachments {
		if a.Stub {
			t.Fatalf("attachments=true left a stub: %+v", a)
		}
	}
	// dropping _attachments drops them; stub of a removed attachment fails
	r3 := put(t, db, `{"_id":"a","_rev":"`+r2+`"}`)
	if _, err := db.Put(ctx, mustParse(t, `{"_id":"a","_rev":"`+r3+`","_attachments":{"hello.txt":{"stub":true}}}`), true); !isErr(err, MissingStub("a", "hello.txt")) {
		t.Fatalf("missing stub: %v", err)
	}
	if got := readAtt(t, db, digestOf([]byte("hello"))); string(got) != "hello" {
		t.Fatalf("data %q", got)
	}
	info, err := db.GetAttachment(ctx, "a", r2, "hello.txt")
	if err != nil || info.Length != 5 {
		t.Fatalf("GetAttachment: %+v %v", info, err)
	}
	if _, err := db.GetAttachment(ctx, "a", "", "hello.txt"); !isErr(err, errMissingAttachment) {
		t.Fatalf("GetAttachment of removed: %v", err)
	}
}

func TestAttachmentEndpoints(t *testing.T) {
	s := openTest(t)
	db := createTest(t, s, "d")
	ctx := context.Background()
	data := []byte("some attachment data")
	r1, err := db.PutAttachment(ctx, "doc", "", Attachment{Name: "f.txt", ContentType: "text/plain", Reader: bytes.NewReader(data), Digest: digestOf(data)})
	if err != nil || !strings.HasPrefix(r1, "1-") {
		t.Fatalf("PutAttachment new doc: %s %v", r1, err)
	}
	if _, err := db.PutAttachment(ctx, "doc", "", Attachment{Name: "g", Reader: bytes.NewReader(data)}); !isErr(err, ErrConflict) {
		t.Fatalf("PutAttachment without rev on existing doc: %v", err)
	}
	if _, err := db.PutAttachment(ctx, "doc", r1, Attachment{Name: "g", Reader: strings.NewReader("x"), Digest: digestOf(data)}); !isErr(err, ErrDigestMismatch) {
		t.Fatalf("digest mismatch: %v", err)
	}
	r2, err := db.PutAttachment(ctx, "doc", r1, Attachment{Name: "g", Reader: strings.NewReader("x")})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := db.Get(ctx, "doc", GetOptions{})
	// as CouchDB: a standalone PUT's attachment comes first
	if len(d.Attachments) != 2 || d.Attachments[1].ContentType != "text/plain" || d.Attachments[0].ContentType != "application/octet-stream" || d.Attachments[0].RevPos != 2 {
		t.Fatalf("after second attachment: %+v", d.Attachments)
	}
	if _, err := db.DeleteAttachment(ctx, "doc", r2, "nope"); !isErr(err, errMissingAttachment) {
		t.Fatalf("delete missing attachment: %v", err)
	}
	r3, err := db.DeleteAttachment(ctx, "doc", r2, "f.txt")
	if err != nil {
		t.Fatal(err)
	}
	d, _ = db.Get(ctx, "doc", GetOptions{})
	if d.Rev != r3 || len(d.Attachments) != 1 || d.Attachments[0].Name != "g" {
		t.Fatalf("after delete: %+v", d)
	}
	// compaction drops old bodies and reclaims the unreferenced blob
	if err := db.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.OpenAttachment(ctx, digestOf(data)); !isErr(err, errMissingAttachment) {
		t.Fatalf("blob not reclaimed: %v", err)
	}
	if got := readAtt(t, db, digestOf([]byte("x"))); string(got) != "x" {
		t.Fatalf("live blob: %q", got)
	}
	if _, err := db.Get(ctx, "doc", GetOptions{Rev: r1}); !isErr(err, ErrNotFound) {
		t.Fatalf("non-leaf body kept after compaction: %v", err)
	}
}

// patternReader yields n deterministic bytes without holding them.
type patternReader struct{ n, off int64 }

func (p *patternReader) Read(b []byte) (int, error) {
	if p.off >= p.n {
		return 0, io.EOF
	}
	k := min(int64(len(b)), p.n-p.off)
	for i := range k {
		b[i] = byte((p.off + i) * 7 % 251)
	}
	p.off += k
	return int(k), nil
}

func TestLargeAttachmentStreams(t *testing.T) {
	s := openTest(t)
	db := createTest(t, s, "d")
	ctx := context.Background()
	const size = 24 << 20
	h := md5.New()
	io.Copy(h, &patternReader{n: size})
	digest := "md5-" + base64.StdEncoding.EncodeToString(h.Sum(nil))

	// Sample the live heap while writing, with an eager GC, to check the
	// attachment is never held whole in memory.
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	stop, peakc := make(chan struct{}), make(chan uint64)
	go func() {
		sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		var peak uint64
		for {
			select {
			case <-stop:
				peakc <- peak
				return
			case <-time.After(time.Millisecond):
			}
			metrics.Read(sample)
			peak = max(peak, sample[0].Value.Uint64())
		}
	}()
	doc := &Doc{ID: "big", Body: []byte(`{}`), Attachments: []Attachment{{Name: "blob", ContentType: "application/octet-stream", Follows: true, Reader: &patternReader{n: size}, Digest: digest}}}
	_, err := db.Put(ctx, doc, true)
	close(stop)
	peak := <-peakc
	if err != nil {
		t.Fatal(err)
	}
	grew := int64(peak) - int64(base.HeapAlloc)
	t.Logf("live heap peak %d bytes above start for a %d byte attachment", grew, size)
	if grew > size/2 {
		t.Errorf("live heap peaked %d bytes above the start writing a %d byte attachment", grew, size)
	}
	rc, n, err := db.OpenAttachment(ctx, digest)
	if err != nil || n != size {
		t.Fatalf("open: %d %v", n, err)
	}
	h2 := md5.New()
	m, err := io.Copy(h2, rc)
	if err != nil || m != size || "md5-"+base64.StdEncoding.EncodeToString(h2.Sum(nil)) != digest {
		t.Fatalf("read back %d bytes, %v", m, err)
	}
	// same data again: stored once
	stored1 := storedFigure(t, db)
	doc2 := &Doc{ID: "big2", Body: []byte(`{}`), Attachments: []Attachment{{Name: "blob", Reader: &patternReader{n: size}}}}
	if _, err := db.Put(ctx, doc2, true); err != nil {
		t.Fatal(err)
	}
	if stored2 := storedFigure(t, db); stored2-stored1 > 4096 {
		t.Fatalf("duplicate attachment stored again: stored %d -> %d", stored1, stored2)
	}
}

func TestReplicatedAttachmentStubs(t *testing.T) {
	s := openTest(t)
	db := createTest(t, s, "d")
	ctx := context.Background()
	putReplicated(t, db, `{"_id":"a","_revisions":{"start":1,"ids":["x"]},"_attachments":{"f":{"data":"aGk=","revpos":1}}}`)
	putReplicated(t, db, `{"_id":"a","_revisions":{"start":3,"ids":["z","y","x"]},"_attachments":{"f":{"stub":true,"revpos":1}}}`)
	d, err := db.Get(ctx, "a", GetOptions{})
	if err != nil || len(d.Attachments) != 1 || d.Attachments[0].RevPos != 1 || d.Attachments[0].Digest != digestOf([]byte("hi")) {
		t.Fatalf("replicated stub: %+v %v", d, err)
	}
	// a stub on a branch whose ancestors are not stored resolves from
	// another stored revision with the same name and revpos
	putReplicated(t, db, `{"_id":"a","_revisions":{"start":4,"ids":["w","v","u"]},"_attachments":{"f":{"stub":true,"revpos":1}}}`)
	if _, err := db.Put(ctx, mustParse(t, `{"_id":"a","_revisions":{"start":4,"ids":["w2","v2"]},"_attachments":{"f":{"stub":true,"revpos":3}}}`), false); !isErr(err, MissingStub("a", "f")) {
		t.Fatalf("stub with unknown revpos: %v", err)
	}
	_, err = db.Put(ctx, mustParse(t, `{"_id":"b","_revisions":{"start":2,"ids":["y","x"]},"_attachments":{"f":{"stub":true}}}`), false)
	if !isErr(err, MissingStub("b", "f")) {
		t.Fatalf("replicated stub without ancestor: %v", err)
	}
}

// TestCompactReclaimsOrphanChunks: chunks staged by a write that never
// committed (a crash between staging and the document's commit) are
// reclaimed by compaction; linked blobs stay.
func TestCompactReclaimsOrphanChunks(t *testing.T) {
	s := openTest(t)
	db := createTest(t, s, "d")
	ctx := context.Background()
	put(t, db, `{"_id":"keep","_attachments":{"a":{"data":"aGVsbG8="}}}`)
	if _, err := db.stageStream(ctx, &patternReader{n: 3*chunkSize + 5}, "", 0, -1, "p", -1); err != nil {
		t.Fatal(err)
	}
	if n := countChunks(t, db); n != 1+4 {
		t.Fatalf("%d chunks before compaction, want 5", n)
	}
	if err := db.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countChunks(t, db); n != 1 {
		t.Fatalf("%d chunks after compaction, want 1", n)
	}
	if got := readAtt(t, db, digestOf([]byte("hello"))); string(got) != "hello" {
		t.Fatalf("linked blob damaged: %q", got)
	}
}
