package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// processCPU is the CPU time this process has used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkAttachmentWriteRead stores documents with one random 1 MiB
// (or 64 KiB) attachment each as a replicator's multipart PUT does (the
// data staged as it arrives, declared length and digest checked, fsync
// on), then reads the data back: the store's share of
// BenchmarkAttachments in plugin/replicate, without HTTP, from one writer
// or from four (as the replicator's four workers, whose writes share
// commits). It reports the process's CPU per MiB (cpu_ms/MiB), the
// clients' md5 of the data left out.
func BenchmarkAttachmentWriteRead(b *testing.B) {
	for _, c := range []struct {
		size, writers int
	}{{1 << 20, 1}, {1 << 20, 4}, {64 << 10, 1}} {
		b.Run(fmt.Sprintf("%dKiB-%dwriters", c.size>>10, c.writers), func(b *testing.B) {
			s, err := Open(b.TempDir(), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			db, err := s.CreateDB("d")
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			// Document i's data is base i%4 with i in its first 8
			// bytes (a digest of its own); the digests are the
			// client's work, done first.
			var base [4][]byte
			for k := range base {
				base[k] = randomBytes(uint64(k+1), c.size)
			}
			digests := make([]string, b.N)
			for i := range digests {
				binary.BigEndian.PutUint64(base[i%4], uint64(i))
				digests[i] = digestOf(base[i%4])
			}
			b.SetBytes(int64(c.size))
			var next atomic.Int64
			var wg sync.WaitGroup
			cpu0 := processCPU()
			b.ResetTimer()
			for range c.writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var mine [4][]byte
					for k := range mine {
						mine[k] = append([]byte(nil), base[k]...)
					}
					for {
						i := int(next.Add(1)) - 1
						if i >= b.N {
							return
						}
						data := mine[i%4]
						binary.BigEndian.PutUint64(data, uint64(i))
						if err := writeReadAtt(ctx, db, i, data, digests[i]); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/1000/(float64(b.N)*float64(c.size)/(1<<20)), "cpu_ms/MiB")
		})
	}
}

// writeReadAtt writes document i with data as its attachment, as a
// multipart PUT does (staged from 1 MiB on, else in memory), and reads
// the data back.
func writeReadAtt(ctx context.Context, db *DB, i int, data []byte, digest string) error {
	d, err := ParseDoc(fmt.Appendf(nil, `{"_id":"d%d","_attachments":{"a":{"content_type":"application/octet-stream","length":%d,"digest":%q,"follows":true}}}`, i, len(data), digest))
	if err != nil {
		return err
	}
	a := &d.Attachments[0]
	if len(data) >= 1<<20 {
		err = db.StageAttachment(ctx, a, bytes.NewReader(data))
	} else {
		a.Data = data
	}
	if err == nil {
		_, err = db.Put(ctx, d, true)
	}
	db.ReleaseStaged(a)
	if err != nil {
		return err
	}
	rc, _, err := db.OpenAttachment(ctx, digest)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, rc)
	rc.Close()
	return err
}
