package store

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// blobFiles lists the files in db's blob directory, sorted.
func blobFiles(t *testing.T, db *DB) []string {
	t.Helper()
	ents, err := os.ReadDir(db.s.blobDir(db.uuid))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// attRef is the blobRef db keeps for digest.
func attRef(t *testing.T, db *DB, digest string) blobRef {
	t.Helper()
	ref, err := db.attachmentRef(digest)
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

// TestLargeBlobsAreFiles: data from fileBlobMin on, however it comes
// (inline, streamed with or without a declared length, staged ahead of a
// multipart write, PUT as an attachment), is kept in a file of its own,
// no chunks, and reads back; smaller data stays in chunks.
func TestLargeBlobsAreFiles(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		size  int
		write func(t *testing.T, db *DB, data []byte)
	}{
		{"inline", fileBlobMin, func(t *testing.T, db *DB, data []byte) {
			put(t, db, fmt.Sprintf(`{"_id":"x","_attachments":{"a":{"content_type":"application/octet-stream","data":%q}}}`, b64(data)))
		}},
		{"stream without length", 3*fileBlobMin + 5, func(t *testing.T, db *DB, data []byte) {
			doc := &Doc{ID: "x", Body: []byte(`{}`), Attachments: []Attachment{{Name: "a", Follows: true, Reader: bytes.NewReader(data)}}}
			if _, err := db.Put(ctx, doc, true); err != nil {
				t.Fatal(err)
			}
		}},
		{"stream with length", fileBlobMin, func(t *testing.T, db *DB, data []byte) {
			doc := &Doc{ID: "x", Body: []byte(`{}`), Attachments: []Attachment{{Name: "a", Follows: true, Length: int64(len(data)), Reader: bytes.NewReader(data)}}}
			if _, err := db.Put(ctx, doc, true); err != nil {
				t.Fatal(err)
			}
		}},
		{"staged", fileBlobMin + 1, func(t *testing.T, db *DB, data []byte) {
			d := mustParse(t, fmt.Sprintf(`{"_id":"x","_attachments":{"a":{"content_type":"application/octet-stream","length":%d,"follows":true}}}`, len(data)))
			if err := db.StageAttachment(ctx, &d.Attachments[0], bytes.NewReader(data)); err != nil {
				t.Fatal(err)
			}
			defer db.ReleaseStaged(&d.Attachments[0])
			if _, err := db.Put(ctx, d, true); err != nil {
				t.Fatal(err)
			}
		}},
		{"put attachment", 2 * fileBlobMin, func(t *testing.T, db *DB, data []byte) {
			if _, err := db.PutAttachment(ctx, "x", "", Attachment{Name: "a", ContentType: "application/octet-stream", Reader: bytes.NewReader(data)}); err != nil {
				t.Fatal(err)
			}
		}},
		{"small stays in chunks", fileBlobMin - 1, func(t *testing.T, db *DB, data []byte) {
			doc := &Doc{ID: "x", Body: []byte(`{}`), Attachments: []Attachment{{Name: "a", Follows: true, Length: int64(len(data)), Reader: bytes.NewReader(data)}}}
			if _, err := db.Put(ctx, doc, true); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := openTest(t)
			db := createTest(t, s, "d")
			data := randomBytes(uint64(c.size), c.size)
			c.write(t, db, data)
			ref := attRef(t, db, digestOf(data))
			files, chunks := blobFiles(t, db), countChunks(t, db)
			want := c.size >= fileBlobMin
			if ref.file != want || (len(files) == 1) != want || (chunks == 0) != want {
				t.Fatalf("%d bytes: file ref %v, files %v, %d chunks; want a file: %v", c.size, ref.file, files, chunks, want)
			}
			if want && files[0] != hex.EncodeToString(ref.id[:]) {
				t.Fatalf("file %s, want %x", files[0], ref.id)
			}
			if got := readAtt(t, db, digestOf(data)); !bytes.Equal(got, data) {
				t.Fatalf("read back %d bytes, want the %d written", len(got), len(data))
			}
		})
	}
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// TestFileBlobRefused: data refused (digest mismatch, too large, a body
// cut short) leaves no file.
func TestFileBlobRefused(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	db := createTest(t, s, "d")
	data := randomBytes(3, 2*fileBlobMin)
	for _, c := range []struct {
		name string
		att  Attachment
		want error
	}{
		{"digest mismatch", Attachment{Name: "a", Follows: true, Length: int64(len(data)), Digest: digestOf([]byte("other")), Reader: bytes.NewReader(data)}, ErrDigestMismatch},
		{"digest mismatch, no length", Attachment{Name: "a", Follows: true, Digest: digestOf([]byte("other")), Reader: bytes.NewReader(data)}, ErrDigestMismatch},
		{"cut short", Attachment{Name: "a", Follows: true, Length: int64(len(data)), Reader: &cutShort{bytes.NewReader(data)}}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := db.Put(ctx, &Doc{ID: "x", Body: []byte(`{}`), Attachments: []Attachment{c.att}}, true)
			if err == nil || c.want != nil && !isErr(err, c.want) {
				t.Fatalf("write: %v, want %v", err, c.want)
			}
			if f := blobFiles(t, db); len(f) != 0 {
				t.Fatalf("files left: %v", f)
			}
			d := mustParse(t, `{"_id":"y","_attachments":{"a":{"follows":true}}}`)
			d.Attachments[0].Digest, d.Attachments[0].Length = c.att.Digest, c.att.Length
			err = db.StageAttachment(ctx, &d.Attachments[0], c.att.Reader)
			db.ReleaseStaged(&d.Attachments[0])
			if err == nil {
				t.Fatal("staged data refused by a write was accepted")
			}
			if f := blobFiles(t, db); len(f) != 0 {
				t.Fatalf("files left after staging: %v", f)
			}
		})
	}
}

// TestFileBlobsCompactAndDelete: compaction deletes the files of blobs
// no revision references and the files a crash left (unreferenced, or
// never renamed), keeps referenced and staged ones; deleting the
// database deletes its directory.
func TestFileBlobsCompactAndDelete(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	db := createTest(t, s, "d")
	keep, drop, held := randomBytes(1, fileBlobMin), randomBytes(2, fileBlobMin), randomBytes(4, fileBlobMin)
	put(t, db, fmt.Sprintf(`{"_id":"keep","_attachments":{"a":{"data":%q}}}`, b64(keep)))
	r := put(t, db, fmt.Sprintf(`{"_id":"drop","_attachments":{"a":{"data":%q}}}`, b64(drop)))
	put(t, db, `{"_id":"drop","_rev":"`+r+`"}`)
	orphan, tmp := filepath.Join(s.blobDir(db.uuid), "0102030405060708"), filepath.Join(s.blobDir(db.uuid), "0807060504030201.tmp")
	for _, p := range []string{orphan, tmp} {
		if err := os.WriteFile(p, []byte("left by a crash"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	d := mustParse(t, `{"_id":"later","_attachments":{"a":{"follows":true}}}`)
	if err := db.StageAttachment(ctx, &d.Attachments[0], bytes.NewReader(held)); err != nil {
		t.Fatal(err)
	}
	if n := len(blobFiles(t, db)); n != 5 {
		t.Fatalf("%d files before compaction, want 5", n)
	}
	if err := db.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	keepRef, heldRef := attRef(t, db, digestOf(keep)), d.Attachments[0].staged.ref
	want := []string{hex.EncodeToString(keepRef.id[:]), hex.EncodeToString(heldRef.id[:])}
	slices.Sort(want)
	if got := blobFiles(t, db); !slices.Equal(got, want) {
		t.Fatalf("files after compaction %v, want the referenced and the staged %v", got, want)
	}
	if got := readAtt(t, db, digestOf(keep)); !bytes.Equal(got, keep) {
		t.Fatal("referenced blob damaged by compaction")
	}
	if _, err := db.Put(ctx, d, true); err != nil {
		t.Fatal(err)
	}
	db.ReleaseStaged(&d.Attachments[0])
	if got := readAtt(t, db, digestOf(held)); !bytes.Equal(got, held) {
		t.Fatal("staged blob damaged by compaction")
	}
	dir := s.blobDir(db.uuid)
	if err := s.DeleteDB("d"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("blob directory of the deleted database: %v", err)
	}
}

// TestFileBlobsSweptAtOpen: Open deletes what a crash left: files no
// entry references, unfinished ones, directories of databases deleted
// while a write was under way; referenced files stay.
func TestFileBlobsSweptAtOpen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	db := createTest(t, s, "d")
	data := randomBytes(5, fileBlobMin+3)
	put(t, db, fmt.Sprintf(`{"_id":"keep","_attachments":{"a":{"data":%q}}}`, b64(data)))
	uuid, ref := db.uuid, attRef(t, db, digestOf(data))
	s.Close()
	leftovers := []string{
		filepath.Join(dir, blobsDirName, uuid, "0102030405060708"),
		filepath.Join(dir, blobsDirName, uuid, "0102030405060709.tmp"),
		filepath.Join(dir, blobsDirName, strings.Repeat("ab", 16), "0102030405060708"),
	}
	for _, p := range leftovers {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte("left by a crash"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s, err = Open(dir, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, p := range leftovers {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left after Open: %v", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, blobsDirName, strings.Repeat("ab", 16))); !os.IsNotExist(err) {
		t.Errorf("directory of no database left after Open: %v", err)
	}
	db, err = s.DB("d")
	if err != nil {
		t.Fatal(err)
	}
	if got := blobFiles(t, db); !slices.Equal(got, []string{hex.EncodeToString(ref.id[:])}) {
		t.Fatalf("files after Open %v, want the referenced one", got)
	}
	if got := readAtt(t, db, digestOf(data)); !bytes.Equal(got, data) {
		t.Fatal("referenced blob damaged by the sweep")
	}
}

// TestLargeChunkedBlobsRead: a blob of fileBlobMin or more that an older
// store kept in chunks still reads.
func TestLargeChunkedBlobsRead(t *testing.T) {
	s := openTest(t)
	db := createTest(t, s, "d")
	data := randomBytes(11, 2*fileBlobMin+7)
	digest := digestOf(data)
	ref := blobRef{id: newBlobID(), length: int64(len(data))}
	err := s.update(func(tx *bolt.Tx) error {
		b, err := db.bucket(tx)
		if err != nil {
			return err
		}
		if ref.chunks, err = putChunks(b.Bucket(bucketBlobs), ref.id, 0, data); err != nil {
			return err
		}
		return b.Bucket(bucketAtts).Put([]byte(digest), ref.encode())
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := readAtt(t, db, digest); !bytes.Equal(got, data) {
		t.Fatalf("chunked blob read back as %d bytes, want its %d", len(got), len(data))
	}
}
