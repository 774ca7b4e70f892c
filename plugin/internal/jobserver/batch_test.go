package jobserver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/jobs"
	"github.com/couchepi/couchepi/plugin/kv"
)

// TestBatcher: writes of callers waiting at once commit in one
// transaction; one that fails (its job no longer the caller's) writes
// nothing and gets its error, while the others still commit.
func TestBatcher(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ops    int
		halted map[int]bool // ops whose job was taken from them
	}{
		{"all commit together", 5, nil},
		{"one halted", 5, map[int]bool{2: true}},
		{"all halted", 3, map[int]bool{0: true, 1: true, 2: true}},
		{"more than a batch", batchOps + 4, map[int]bool{batchOps + 1: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			q, err := jobs.New(kv.NewMemory(), jobs.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			if err := q.SetTypeTimeout(ctx, "t", time.Minute); err != nil {
				t.Fatal(err)
			}
			var js []*jobs.Job
			for i := 0; i < tc.ops; i++ {
				id := fmt.Sprintf("j%02d", i)
				if err := q.Add(ctx, "t", id, []byte("old"), time.Time{}); err != nil {
					t.Fatal(err)
				}
				j, err := q.Accept(ctx, "t", jobs.AcceptOptions{NoWait: true})
				if err != nil {
					t.Fatal(err)
				}
				if tc.halted[i] { // re-added: the accepted job's lock is gone
					if err := q.Remove(ctx, "t", j.ID); err != nil {
						t.Fatal(err)
					}
				}
				js = append(js, j)
			}
			// Every caller waits before the batch starts: the loop
			// is started by hand once all queued.
			b := &batcher{q: q, timeout: func() time.Duration { return 10 * time.Second }, running: batchLoops}
			var mu sync.Mutex
			seen := map[*jobs.Tx]bool{}
			errs := make([]error, tc.ops)
			kept := make([]bool, tc.ops)
			var wg sync.WaitGroup
			for i, j := range js {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = b.do(ctx, 0, func(tx *jobs.Tx) error {
						mu.Lock()
						seen[tx] = true
						mu.Unlock()
						return tx.Update(j, []byte("new"))
					}, func() { kept[i] = true })
				}()
			}
			for {
				b.mu.Lock()
				n := len(b.queue)
				b.mu.Unlock()
				if n == tc.ops {
					break
				}
				time.Sleep(time.Millisecond)
			}
			b.mu.Lock()
			b.running = 1
			b.mu.Unlock()
			go b.loop()
			wg.Wait()
			for i, j := range js {
				data, err := q.GetData(ctx, "t", j.ID)
				switch {
				case tc.halted[i]:
					if !errors.Is(errs[i], jobs.ErrHalt) && !errors.Is(errs[i], jobs.ErrNotFound) || kept[i] {
						t.Fatalf("op %d: %v (kept %v), want ErrHalt", i, errs[i], kept[i])
					}
				case errs[i] != nil || !kept[i] || string(data) != "new" || err != nil:
					t.Fatalf("op %d: %v (kept %v), data %q (%v)", i, errs[i], kept[i], data, err)
				}
			}
			if len(tc.halted) == 0 && len(seen) != (tc.ops+batchOps-1)/batchOps {
				t.Fatalf("%d ops in %d transactions, want %d", tc.ops, len(seen), (tc.ops+batchOps-1)/batchOps)
			}
		})
	}
}
