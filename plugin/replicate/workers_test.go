package replicate

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestWorkerPool: batches run on at most max workers, started as batches
// find none idle; every batch offered runs once; idle workers end, and a
// full pool says so (offer false) until one does.
func TestWorkerPool(t *testing.T) {
	tests := []struct {
		name      string
		max       int
		batches   int
		hold      time.Duration // how long a batch takes
		wantStart int           // workers started, at most
	}{
		{"one at a time", 1, 5, 0, 1},
		{"never more than max", 3, 30, 5 * time.Millisecond, 3},
		{"fewer batches than max", 8, 2, 20 * time.Millisecond, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var running, peak, done atomic.Int32
			seen := make(map[int]int)
			var mu sync.Mutex
			p := newWorkerPool(tc.max, 50*time.Millisecond, func(b *batch) bool {
				n := running.Add(1)
				for {
					old := peak.Load()
					if n <= old || peak.CompareAndSwap(old, n) {
						break
					}
				}
				time.Sleep(tc.hold)
				mu.Lock()
				seen[int(b.ord)]++
				mu.Unlock()
				running.Add(-1)
				done.Add(1)
				return true
			})
			for i := range tc.batches {
				b := &batch{ord: uint64(i)}
				for !p.offer(b) {
					select {
					case p.in <- b:
					case <-p.exited:
						continue
					}
					break
				}
			}
			p.close()
			p.wait()
			if int(done.Load()) != tc.batches || len(seen) != tc.batches {
				t.Fatalf("%d batches run (%d distinct), want %d", done.Load(), len(seen), tc.batches)
			}
			for ord, n := range seen {
				if n != 1 {
					t.Errorf("batch %d ran %d times", ord, n)
				}
			}
			if int(peak.Load()) > tc.wantStart {
				t.Errorf("%d workers at once, want at most %d", peak.Load(), tc.wantStart)
			}
		})
	}
}

// TestWorkerPoolIdleWorkersEnd: a worker without a batch for the idle time
// ends; a pool whose workers were all busy gets room back through exited.
func TestWorkerPoolIdleWorkersEnd(t *testing.T) {
	release := make(chan struct{})
	p := newWorkerPool(1, 20*time.Millisecond, func(b *batch) bool {
		if b.ord == 0 {
			<-release
		}
		return true
	})
	if !p.offer(&batch{ord: 0}) {
		t.Fatal("an empty pool refused a batch")
	}
	if p.offer(&batch{ord: 1}) {
		t.Fatal("a full pool took a batch without a free worker")
	}
	close(release)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		t.Fatal("the idle worker did not end")
	}
	p.mu.Lock()
	running := p.running
	p.mu.Unlock()
	if running != 0 {
		t.Fatalf("%d workers running after the idle one ended", running)
	}
	if !p.offer(&batch{ord: 1}) {
		t.Fatal("a pool with room refused a batch")
	}
	p.close()
	p.wait()
}
