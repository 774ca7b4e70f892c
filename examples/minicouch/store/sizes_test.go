package store

import (
	"context"
	"encoding/base64"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/couchepi/couchepi/examples/minicouch/couchgzip"
	bolt "go.etcd.io/bbolt"
)

// gzipText is an AttachmentPolicy that gzips text/plain.
type gzipText struct{}

func (gzipText) CompressionLevel(ct string) int {
	if ct == "text/plain" {
		return 8
	}
	return 0
}
func (gzipText) MaxAttachmentSize() int64 { return -1 }

// TestSizes: sizes.external counts, as CouchDB 3.5 does, each document's
// leaf bodies and, once per distinct attachment among its leaves, the
// attachment's stored bytes (att_len); sizes.active the same with the
// revisions as stored; sizes.file at least active. The counters, moved
// by each write, equal a full recount after every step: update, a shared
// attachment, delete, re-create, a conflict, compaction, restart, and the
// recount of a store written before them.
func TestSizes(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	s.SetAttachmentPolicy(gzipText{})
	db := createTest(t, s, "d")
	ctx := context.Background()
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	bin := strings.Repeat("\x01\x02\x03", 400)   // 1200 bytes, stored as is
	other := strings.Repeat("\x07", 500)         // 500 bytes
	text := strings.Repeat("hello sizes ", 1000) // text/plain: stored gzipped
	gz, _ := couchgzip.Gzip([]byte(text), 8)
	const gzSlack = 64 // gzip output of the same level may differ by a few bytes
	var revA string
	steps := []struct {
		name     string
		do       func(t *testing.T)
		external int64 // exact, unless slack
		slack    int64
	}{
		{"doc with an attachment", func(t *testing.T) {
			revA = put(t, db, `{"_id":"a","a":1,"_attachments":{"f":{"content_type":"app/bin","data":"`+b64(bin)+`"}}}`)
		}, 7 + 1200, 0},
		{"update keeping it as a stub", func(t *testing.T) {
			revA = put(t, db, `{"_id":"a","_rev":"`+revA+`","a":22,"_attachments":{"f":{"stub":true}}}`)
		}, 8 + 1200, 0},
		{"another doc with the same data", func(t *testing.T) {
			put(t, db, `{"_id":"b","b":1,"_attachments":{"g":{"content_type":"app/bin","data":"`+b64(bin)+`"}}}`)
		}, 8 + 1200 + 7 + 1200, 0},
		{"delete", func(t *testing.T) {
			d := &Doc{ID: "a", Rev: revA, Deleted: true, Body: []byte(`{}`)}
			if _, err := db.Put(ctx, d, true); err != nil {
				t.Fatal(err)
			}
		}, 2 + 7 + 1200, 0},
		{"re-create", func(t *testing.T) {
			put(t, db, `{"_id":"a","a":1}`)
		}, 7 + 7 + 1200, 0},
		{"a conflict with another attachment", func(t *testing.T) {
			putReplicated(t, db, `{"_id":"b","_rev":"1-ffffffffffffffffffffffffffffffff","b":2,"_attachments":{"g":{"content_type":"app/bin","data":"`+b64(other)+`"}}}`)
		}, 7 + 7 + 1200 + 7 + 500, 0},
		{"the conflict resolved", func(t *testing.T) {
			d := &Doc{ID: "b", Rev: "1-ffffffffffffffffffffffffffffffff", Deleted: true, Body: []byte(`{}`)}
			if _, err := db.Put(ctx, d, true); err != nil {
				t.Fatal(err)
			}
		}, 7 + 7 + 1200 + 2, 0},
		{"a compressible attachment, counted gzipped", func(t *testing.T) {
			put(t, db, `{"_id":"c","_attachments":{"t":{"content_type":"text/plain","data":"`+b64(text)+`"}}}`)
		}, 7 + 7 + 1200 + 2 + 2 + int64(len(gz)), gzSlack},
		{"compaction", func(t *testing.T) {
			if err := db.compact(ctx); err != nil {
				t.Fatal(err)
			}
		}, 7 + 7 + 1200 + 2 + 2 + int64(len(gz)), gzSlack},
		{"restart", func(t *testing.T) {
			s.Close()
			if s, err = Open(dir, Options{NoSync: true}); err != nil {
				t.Fatal(err)
			}
			if db, err = s.DB("d"); err != nil {
				t.Fatal(err)
			}
		}, 7 + 7 + 1200 + 2 + 2 + int64(len(gz)), gzSlack},
		{"a store written before sizes_version, recounted when opened", func(t *testing.T) {
			s.Close()
			b, err := bolt.Open(filepath.Join(dir, FileName), 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Update(func(tx *bolt.Tx) error {
				m := tx.Bucket(bucketDBs).Bucket([]byte("d")).Bucket(bucketMeta)
				for _, k := range [][]byte{metaFile, metaActive, metaExternal, metaSizesVersion} {
					if err := m.Delete(k); err != nil {
						return err
					}
				}
				return putU64(m, metaExternal, 17) // the old rule's figure
			}); err != nil {
				t.Fatal(err)
			}
			b.Close()
			if s, err = Open(dir, Options{NoSync: true}); err != nil {
				t.Fatal(err)
			}
			if db, err = s.DB("d"); err != nil {
				t.Fatal(err)
			}
		}, 7 + 7 + 1200 + 2 + 2 + int64(len(gz)), gzSlack},
	}
	for _, st := range steps {
		st.do(t)
		info, err := db.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := info.Sizes
		if d := got.External - st.external; d < -st.slack || d > st.slack {
			t.Errorf("%s: external %d, want %d", st.name, got.External, st.external)
		}
		if got.Active < got.External || got.File < got.Active {
			t.Errorf("%s: sizes %+v, want file >= active >= external", st.name, got)
		}
		var recount docSizes
		if err := db.view(func(b *bolt.Bucket) error {
			recount, err = sumLeafSizes(b)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if got.Active != recount.active || got.External != recount.external {
			t.Errorf("%s: counters %+v, a recount %+v", st.name, got, recount)
		}
	}
}

// TestSizesLargeAttachments is the figure: 400 docs with a 1 MiB
// attachment each are ~419 MB external, as in CouchDB 3.5.0 (the same
// data here: the store keeps it once, each doc counts it).
func TestSizesLargeAttachments(t *testing.T) {
	s := openTest(t)
	db := createTest(t, s, "d")
	ctx := context.Background()
	const n, size = 400, 1 << 20
	data := []byte(strings.Repeat("\x00\x01\x02\x03", size/4))
	for i := range n {
		d := &Doc{ID: fmt.Sprintf("doc%03d", i), Body: []byte(`{}`),
			Attachments: []Attachment{{Name: "blob", ContentType: "application/octet-stream", Data: data}}}
		if _, err := db.Put(ctx, d, true); err != nil {
			t.Fatal(err)
		}
	}
	info, err := db.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(n * (size + 2)); info.Sizes.External != want || info.Sizes.Active < want || info.Sizes.File < info.Sizes.Active {
		t.Errorf("sizes %+v, want external %d, active and file at least that", info.Sizes, want)
	}
	t.Logf("sizes %+v", info.Sizes)
}
