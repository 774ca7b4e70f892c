package store

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkFileAfterDelete creates a database of 20k docs (1 KB each, and
// a 4 KiB attachment each), deletes it, three times per iteration on a
// fresh store with fsync, and reports the file's size at the peak and
// after the last delete, with file compaction off and on (the default
// thresholds). Run with -benchtime 1x.
func BenchmarkFileAfterDelete(b *testing.B) {
	for _, tc := range []struct {
		name string
		min  int64
	}{{"compaction=off", -1}, {"compaction=on", 0}} {
		b.Run(tc.name, func(b *testing.B) {
			var peak, after float64
			for range b.N {
				s, err := Open(b.TempDir(), Options{FileCompactMinFree: tc.min})
				if err != nil {
					b.Fatal(err)
				}
				for c := range 3 {
					name := fmt.Sprintf("big%d", c)
					db, err := s.CreateDB(name)
					if err != nil {
						b.Fatal(err)
					}
					fillDB(b, db, "d", 20_000, 1, 4096)
					peak = max(peak, float64(fileStats(b, s).Size))
					if err := s.DeleteDB(name); err != nil {
						b.Fatal(err)
					}
					waitFileCompaction(s)
				}
				after += float64(fileStats(b, s).Size)
				s.Close()
			}
			const mib = 1 << 20
			b.ReportMetric(peak/mib, "MiB_peak")
			b.ReportMetric(after/float64(b.N)/mib, "MiB_after_delete")
		})
	}
}

// BenchmarkFirstWrite measures the rate of a first large write (100k docs
// of 1 KB in _bulk_docs batches of 1000, with fsync) into: a fresh store
// (the file grows all along), a reused one (a database of the same size
// was created and deleted without file compaction: the write fills free
// pages), and a compacted one (the same, with the file compacted after
// the delete: it grows again). It also reports the compaction's copy time
// and how long writes were paused. Run with -benchtime 1x or 3x.
func BenchmarkFirstWrite(b *testing.B) {
	const total, batch = 100_000, 1000
	for _, mode := range []string{"fresh", "reused", "compacted"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			var elapsed time.Duration
			var copyT, pause time.Duration
			var size float64
			for range b.N {
				b.StopTimer()
				s, err := Open(b.TempDir(), Options{FileCompactMinFree: -1})
				if err != nil {
					b.Fatal(err)
				}
				if mode != "fresh" {
					db, _ := s.CreateDB("old")
					for off := 0; off < total; off += batch {
						if _, err := db.BulkDocs(ctx, benchDocs(fmt.Sprintf("d%d-", off), batch), true); err != nil {
							b.Fatal(err)
						}
					}
					if err := s.DeleteDB("old"); err != nil {
						b.Fatal(err)
					}
					if mode == "compacted" {
						res, err := s.CompactFile(ctx)
						if err != nil {
							b.Fatal(err)
						}
						copyT += res.Copy
						pause += res.WritePause
					}
				}
				db, err := s.CreateDB("new")
				if err != nil {
					b.Fatal(err)
				}
				docs := make([][]*Doc, 0, total/batch)
				for off := 0; off < total; off += batch {
					docs = append(docs, benchDocs(fmt.Sprintf("n%d-", off), batch))
				}
				b.StartTimer()
				start := time.Now()
				for _, d := range docs {
					if _, err := db.BulkDocs(ctx, d, true); err != nil {
						b.Fatal(err)
					}
				}
				elapsed += time.Since(start)
				b.StopTimer()
				size += float64(fileStats(b, s).Size)
				s.Close()
			}
			b.ReportMetric(float64(total*b.N)/elapsed.Seconds(), "docs/s")
			b.ReportMetric(size/float64(b.N)/(1<<20), "MiB_file")
			if mode == "compacted" {
				b.ReportMetric(float64(copyT.Microseconds())/1000/float64(b.N), "ms_copy")
				b.ReportMetric(float64(pause.Microseconds())/1000/float64(b.N), "ms_write_pause")
			}
		})
	}
}

// BenchmarkCompactUnderLoad compacts the file of a store holding a
// 100k-doc database (about 190 MiB) while 16 writers put single documents
// with fsync, and reports the copy time, how long writes were paused, the
// slowest put while the compaction ran, and the slowest before it. Run
// with -benchtime 1x or 3x.
func BenchmarkCompactUnderLoad(b *testing.B) {
	ctx := context.Background()
	s, err := Open(b.TempDir(), Options{FileCompactMinFree: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	db, _ := s.CreateDB("big")
	for off := 0; off < 100_000; off += 1000 {
		if _, err := db.BulkDocs(ctx, benchDocs(fmt.Sprintf("d%d-", off), 1000), true); err != nil {
			b.Fatal(err)
		}
	}
	var copyT, pause, slowDuring, slowBefore time.Duration
	var caught int
	b.ResetTimer()
	for it := range b.N {
		var (
			mu      sync.Mutex
			slowest time.Duration
			stop    atomic.Bool
			wg      sync.WaitGroup
		)
		for g := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; !stop.Load(); i++ {
					t0 := time.Now()
					if _, err := db.Put(ctx, &Doc{ID: fmt.Sprintf("w%d-%d-%d", it, g, i), Body: benchBody}, true); err != nil {
						b.Error(err)
						return
					}
					d := time.Since(t0)
					mu.Lock()
					slowest = max(slowest, d)
					mu.Unlock()
				}
			}()
		}
		time.Sleep(500 * time.Millisecond)
		mu.Lock()
		slowBefore = max(slowBefore, slowest)
		slowest = 0
		mu.Unlock()
		res, err := s.CompactFile(ctx)
		if err != nil {
			b.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		stop.Store(true)
		wg.Wait()
		copyT += res.Copy
		pause += res.WritePause
		caught += res.CaughtUp
		slowDuring = max(slowDuring, slowest)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(copyT)/float64(b.N), "ms_copy")
	b.ReportMetric(ms(pause)/float64(b.N), "ms_write_pause")
	b.ReportMetric(float64(caught)/float64(b.N), "caught_up")
	b.ReportMetric(ms(slowBefore), "ms_slowest_put_before")
	b.ReportMetric(ms(slowDuring), "ms_slowest_put_during")
}
