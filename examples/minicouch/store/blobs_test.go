package store

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// countChunks counts the attachment chunks of db, of both layouts.
func countChunks(t *testing.T, db *DB) int {
	t.Helper()
	n := 0
	err := db.view(func(b *bolt.Bucket) error {
		bl := b.Bucket(bucketBlobs)
		return bl.ForEach(func(k, v []byte) error {
			if v == nil {
				n += bl.Bucket(k).Stats().KeyN
			} else {
				n++
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// randomBytes is n seeded random (incompressible, distinct) bytes.
func randomBytes(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestBlobWriteLeavesOtherBlobs: writing an attachment writes about its
// own size to the file, whatever the blobs already stored. With every
// blob's chunks side by side in one bucket, each new blob landed in a
// leaf with chunks of others, which the commit rewrote: about twice the
// data written per attachment.
func TestBlobWriteLeavesOtherBlobs(t *testing.T) {
	for _, size := range []int{64 << 10, fileBlobMin - 1, 3*chunkSize + 100} { // larger ones are files
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			s := openTest(t)
			db := createTest(t, s, "d")
			doc := func(i int) string {
				data := base64.StdEncoding.EncodeToString(randomBytes(uint64(i)+1, size))
				return fmt.Sprintf(`{"_id":"d%d","_attachments":{"a":{"content_type":"application/octet-stream","data":%q}}}`, i, data)
			}
			for i := range 12 {
				put(t, db, doc(i))
			}
			pageAlloc := func() int64 {
				st := s.cur.Load().Stats()
				return st.TxStats.GetPageAlloc()
			}
			before := pageAlloc()
			put(t, db, doc(100))
			written := pageAlloc() - before
			// The attachment's pages, plus the doc's own in the other
			// buckets (a few 16 KiB pages, more when a leaf splits).
			limit := int64(size) + int64(size)/8 + 128<<10
			t.Logf("%d bytes of pages for a %d-byte attachment (limit %d)", written, size, limit)
			if written > limit {
				t.Fatalf("writing a %d-byte attachment allocated %d bytes of pages, want at most %d", size, written, limit)
			}
		})
	}
}

// TestBlobsOfOlderLayout: blobs a store wrote with every chunk in the
// blobs bucket itself are read, and reclaimed by compaction, as before.
func TestBlobsOfOlderLayout(t *testing.T) {
	s := openTest(t)
	db := createTest(t, s, "d")
	data := randomBytes(7, 2*chunkSize+10)
	digest := digestOf(data)
	ref := blobRef{id: newBlobID(), length: int64(len(data)), chunks: 3}
	err := s.update(func(tx *bolt.Tx) error {
		b, err := db.bucket(tx)
		if err != nil {
			return err
		}
		for i := uint32(0); i < ref.chunks; i++ {
			end := min(int(i+1)*chunkSize, len(data))
			if err := b.Bucket(bucketBlobs).Put(chunkKey(ref.id, i), data[int(i)*chunkSize:end]); err != nil {
				return err
			}
		}
		return b.Bucket(bucketAtts).Put([]byte(digest), ref.encode())
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := readAtt(t, db, digest); !bytes.Equal(got, data) {
		t.Fatalf("older blob read back as %d bytes, want its %d", len(got), len(data))
	}
	put(t, db, `{"_id":"keep","_attachments":{"a":{"data":"aGVsbG8="}}}`)
	if n := countChunks(t, db); n != 4 {
		t.Fatalf("%d chunks, want 4", n)
	}
	if err := db.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := countChunks(t, db); n != 1 {
		t.Fatalf("%d chunks after compaction, want 1 (the older blob is referenced by no revision)", n)
	}
	if got := readAtt(t, db, digestOf([]byte("hello"))); string(got) != "hello" {
		t.Fatalf("linked blob damaged: %q", got)
	}
}

// cutShort yields data, then fails as a body cut short does.
type cutShort struct{ r io.Reader }

func (c *cutShort) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// TestStageStreamCutShort: a stream that ends with an error other than
// io.EOF (a request body shorter than its Content-Length) is refused, not
// stored as if whole.
func TestStageStreamCutShort(t *testing.T) {
	s := openTest(t)
	db := createTest(t, s, "d")
	for _, n := range []int{10, chunkSize + 10} {
		_, err := db.stageStream(context.Background(), &cutShort{bytes.NewReader(randomBytes(3, n))}, "", 0, -1, "a", -1)
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("%d bytes cut short: %v, want unexpected EOF", n, err)
		}
	}
	if n := countChunks(t, db); n != 0 {
		t.Fatalf("%d chunks left", n)
	}
}

// TestStageAttachment: data staged ahead of its document's write
// survives a compaction in between, is what the write stores, and is
// dropped when the write fails or never comes.
func TestStageAttachment(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	db := createTest(t, s, "d")
	data := randomBytes(5, 3*chunkSize+7)
	stage := func(id string) *Doc {
		t.Helper()
		d := mustParse(t, fmt.Sprintf(`{"_id":%q,"_attachments":{"a":{"content_type":"application/octet-stream","follows":true}}}`, id))
		if err := db.StageAttachment(ctx, &d.Attachments[0], bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		return d
	}
	d := stage("x")
	if err := db.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Put(ctx, d, true); err != nil {
		t.Fatal(err)
	}
	db.ReleaseStaged(&d.Attachments[0])
	if err := db.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readAtt(t, db, digestOf(data)); !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes, want the %d staged", len(got), len(data))
	}
	if n := countChunks(t, db); n != 4 {
		t.Fatalf("%d chunks, want 4", n)
	}
	// A write that fails (a conflict), and one that never comes.
	d = stage("x")
	if res, err := db.BulkDocs(ctx, []*Doc{d}, true); err != nil || res[0].Err == nil {
		t.Fatalf("conflicting write: %v %+v", err, res)
	}
	db.ReleaseStaged(&d.Attachments[0])
	d = stage("y")
	db.ReleaseStaged(&d.Attachments[0])
	if n := countChunks(t, db); n != 4 {
		t.Fatalf("%d chunks after abandoned writes, want the 4 stored", n)
	}
}

// writeSizes records the size of every write.
type writeSizes struct{ sizes []int }

func (w *writeSizes) Write(p []byte) (int, error) {
	w.sizes = append(w.sizes, len(p))
	return len(p), nil
}

// TestBlobReaderWholeChunks: io.Copy of stored data writes it a chunk at
// a time (an HTTP answer sends each write as one chunk, a syscall or
// more each), not in io.Copy's 32 KiB pieces.
func TestBlobReaderWholeChunks(t *testing.T) {
	s := openTest(t)
	db := createTest(t, s, "d")
	data := randomBytes(9, 2*chunkSize+5)
	sb, err := db.stageStream(context.Background(), bytes.NewReader(data), "", 0, -1, "a", -1)
	if err != nil {
		t.Fatal(err)
	}
	var w writeSizes
	if _, err := io.Copy(&w, &blobReader{db: db, ref: sb.ref}); err != nil {
		t.Fatal(err)
	}
	if want := []int{chunkSize, chunkSize, 5}; fmt.Sprint(w.sizes) != fmt.Sprint(want) {
		t.Fatalf("writes of %v bytes, want %v", w.sizes, want)
	}
}
