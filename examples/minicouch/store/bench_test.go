package store

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

var benchBody = []byte(`{"type":"bench","payload":"` + strings.Repeat("p", 960) + `"}`)

func benchDocs(prefix string, n int) []*Doc {
	docs := make([]*Doc, n)
	for i := range docs {
		docs[i] = &Doc{ID: fmt.Sprintf("%s%08d", prefix, i), Body: benchBody}
	}
	return docs
}

// BenchmarkBulkIngest writes 100k × 1 KB docs in _bulk_docs batches of 1000
// per iteration, with fsync (run with -benchtime 1x).
func BenchmarkBulkIngest(b *testing.B) { benchIngest(b, true) }

// BenchmarkBulkIngestReplicated is BenchmarkBulkIngest with new_edits=false
// and a 3-revision _revisions per doc, as a replicator writes to a target.
func BenchmarkBulkIngestReplicated(b *testing.B) { benchIngest(b, false) }

func benchIngest(b *testing.B, newEdits bool) {
	s, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const total, batch = 100_000, 1000
	ctx := context.Background()
	b.ResetTimer()
	for it := range b.N {
		db, err := s.CreateDB(fmt.Sprintf("bench%d", it))
		if err != nil {
			b.Fatal(err)
		}
		for off := 0; off < total; off += batch {
			b.StopTimer()
			docs := benchDocs(fmt.Sprintf("d%d-", off), batch)
			if !newEdits {
				for i, d := range docs {
					h := fmt.Sprintf("%032x", off+i)
					d.Revisions = &Revisions{Start: 3, IDs: []string{h, "b" + h[1:], "a" + h[1:]}}
				}
			}
			b.StartTimer()
			res, err := db.BulkDocs(ctx, docs, newEdits)
			if err != nil || res[0].Err != nil {
				b.Fatal(err, res[0].Err)
			}
		}
	}
	b.ReportMetric(float64(total*b.N)/b.Elapsed().Seconds(), "docs/s")
}

// BenchmarkChanges reads the changes feed of a 100k-doc database.
func BenchmarkChanges(b *testing.B) {
	s, err := Open(b.TempDir(), Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	db, _ := s.CreateDB("c")
	ctx := context.Background()
	const total = 100_000
	for off := 0; off < total; off += 1000 {
		db.BulkDocs(ctx, benchDocs(fmt.Sprintf("d%d-", off), 1000), true)
	}
	b.ResetTimer()
	rows := 0
	for range b.N {
		db.Changes(ctx, ChangesOptions{}, func(Change) error { rows++; return nil })
	}
	b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "changes/s")
}

// BenchmarkConcurrentPut measures single-document PUTs with fsync from 64
// concurrent writers (group commit): 20k puts per iteration, so it is
// -benchtime 1x friendly.
func BenchmarkConcurrentPut(b *testing.B) {
	s, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	db, _ := s.CreateDB("p")
	ctx := context.Background()
	const writers, perIter = 64, 20_000
	var n atomic.Int64
	b.ResetTimer()
	for range b.N {
		var wg sync.WaitGroup
		for range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range perIter / writers {
					id := fmt.Sprintf("doc%09d", n.Add(1))
					if _, err := db.Put(ctx, &Doc{ID: id, Body: benchBody}, true); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	b.ReportMetric(float64(n.Load())/b.Elapsed().Seconds(), "puts/s")
}

// BenchmarkReplicationRead reads a 100k-doc database the way a replicator
// does: the changes feed, then every changed leaf with open_revs and
// _revisions (as _bulk_get?revs=true does).
func BenchmarkReplicationRead(b *testing.B) {
	s, err := Open(b.TempDir(), Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	db, _ := s.CreateDB("r")
	ctx := context.Background()
	const total = 100_000
	for off := 0; off < total; off += 1000 {
		db.BulkDocs(ctx, benchDocs(fmt.Sprintf("d%d-", off), 1000), true)
	}
	b.ResetTimer()
	docs := 0
	for range b.N {
		_, err := db.Changes(ctx, ChangesOptions{}, func(c Change) error {
			res, err := db.OpenRevs(ctx, c.ID, c.Revs, GetOptions{Revs: true})
			if err != nil || len(res) != 1 || res[0].Doc == nil {
				b.Fatalf("open_revs %s: %v", c.ID, err)
			}
			if _, err := res[0].Doc.MarshalJSON(); err != nil {
				b.Fatal(err)
			}
			docs++
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(docs)/b.Elapsed().Seconds(), "docs/s")
}
