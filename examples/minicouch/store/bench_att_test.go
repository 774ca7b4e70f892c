package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
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

// BenchmarkAttachmentWriteRead stores a document with one random 1 MiB
// (or 64 KiB) attachment per iteration as a replicator's multipart PUT
// does (the data staged as it arrives, declared length and digest
// checked, fsync on), then reads the data back: the store's share of
// BenchmarkAttachments in plugin/replicate, without HTTP, in one
// goroutine, so that its CPU per MiB (cpu_ms/MiB) holds on a busy machine.
func BenchmarkAttachmentWriteRead(b *testing.B) {
	for _, size := range []int{1 << 20, 64 << 10} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
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
			data := randomBytes(1, size)
			b.SetBytes(int64(size))
			cpu0 := processCPU()
			b.ResetTimer()
			for i := range b.N {
				binary.BigEndian.PutUint64(data, uint64(i)) // a digest of its own
				b.StopTimer()
				digest := digestOf(data) // the client's work, not counted
				cpu0 -= processCPU()
				b.StartTimer()
				cpu0 += processCPU()
				d := mustParse(b, fmt.Sprintf(`{"_id":"d%d","_attachments":{"a":{"content_type":"application/octet-stream","length":%d,"digest":%q,"follows":true}}}`, i, size, digest))
				a := &d.Attachments[0]
				var err error
				if size >= 1<<20 {
					err = db.StageAttachment(ctx, a, bytes.NewReader(data))
				} else {
					a.Data = data
				}
				if err == nil {
					_, err = db.Put(ctx, d, true)
				}
				db.ReleaseStaged(a)
				if err != nil {
					b.Fatal(err)
				}
				rc, _, err := db.OpenAttachment(ctx, digest)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, rc)
				rc.Close()
			}
			b.StopTimer()
			b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/1000/(float64(b.N)*float64(size)/(1<<20)), "cpu_ms/MiB")
		})
	}
}
