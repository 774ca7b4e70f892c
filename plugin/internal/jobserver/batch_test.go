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
	"github.com/couchepi/couchepi/plugin/kv/kvtest"
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
			q := batchQueue(t, kv.NewMemory())
			var js []*jobs.Job
			for i := 0; i < tc.ops; i++ {
				j := addAccepted(t, q, i, nil)
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
					errs[i] = b.do(ctx, 0, j, nil, func(tx *jobs.Tx) error {
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

// TestBatcherGathersWhileBusy: writes that come one after another, while
// the batcher's loops are busy, wait and then commit together. Before, a
// loop that found one write handed it back to its caller and went idle,
// so writes that did not come at the very same moment each took a
// transaction of their own (about 2,000 commits for 500 jobs starting).
func TestBatcherGathersWhileBusy(t *testing.T) {
	ctx := context.Background()
	q := batchQueue(t, kv.NewMemory())
	const first, later = batchLoops, batchOps // first keep every loop busy
	var js []*jobs.Job
	for i := 0; i < first+later; i++ {
		js = append(js, addAccepted(t, q, i, nil))
	}
	b := &batcher{q: q, timeout: func() time.Duration { return 10 * time.Second }}
	gate := make(chan struct{})
	var mu sync.Mutex
	seen := map[*jobs.Tx]bool{}
	var wg sync.WaitGroup
	errs := make([]error, len(js))
	call := func(i int) {
		defer wg.Done()
		errs[i] = b.do(ctx, 0, js[i], nil, func(tx *jobs.Tx) error {
			<-gate
			mu.Lock()
			seen[tx] = true
			mu.Unlock()
			return tx.Update(js[i], []byte("new"))
		}, func() {})
	}
	// One after another: each is running (or waiting for the store)
	// before the next comes.
	for i := 0; i < first; i++ {
		wg.Add(1)
		go call(i)
		waitFor(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.queue) == 0 && b.running == i+1 })
	}
	for i := first; i < len(js); i++ {
		wg.Add(1)
		go call(i)
	}
	// The later writes wait while the loops are busy (handed back, each
	// would go alone and never queue).
	waitFor(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.queue) == later })
	close(gate)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
	}
	if want := first + 1; len(seen) > want {
		t.Fatalf("%d writes coming one after another took %d transactions, want at most %d", len(js), len(seen), want)
	}
}

// TestBatchReadsAtOnce: a group commit reads what its writes read (each
// job's row and holder, the lease, a caller's keys) in one request before
// running them, and a write alone in one too: on etcd each read was a
// round trip of its own, three a job, before every commit.
func TestBatchReadsAtOnce(t *testing.T) {
	for _, n := range []int{1, 2, batchOps} {
		t.Run(fmt.Sprint(n, " writes"), func(t *testing.T) {
			ctx := context.Background()
			store := &kvtest.RoundTrips{Store: kv.NewMemory()}
			q := batchQueue(t, store)
			l, err := q.Grant(ctx, jobs.LeaseOptions{Node: "n1", TTL: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			var js []*jobs.Job
			for i := 0; i < n; i++ {
				js = append(js, addAccepted(t, q, i, l))
			}
			b := &batcher{q: q, timeout: func() time.Duration { return 10 * time.Second }, running: batchLoops}
			var wg sync.WaitGroup
			errs := make([]error, n)
			for i, j := range js {
				wg.Add(1)
				go func() {
					defer wg.Done()
					key := []byte(fmt.Sprintf("caller/%d", i))
					errs[i] = b.do(ctx, 0, j, [][]byte{key}, func(tx *jobs.Tx) error {
						if _, err := tx.KV().Get(key); err != nil {
							return err
						}
						return tx.Update(j, []byte("new"))
					}, func() {})
				}()
			}
			waitFor(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.queue) == n })
			before := store.Count()
			b.mu.Lock()
			b.running = 1
			b.mu.Unlock()
			go b.loop()
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("write %d: %v", i, err)
				}
			}
			if got := store.Count() - before; got != 1 {
				t.Fatalf("%d writes read the store in %d round trips, want 1", n, got)
			}
		})
	}
}

// batchQueue is a queue on store with type "t", closed when the test ends.
func batchQueue(t *testing.T, store kv.Store) *jobs.Queue {
	t.Helper()
	q, err := jobs.New(store, jobs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	if err := q.SetTypeTimeout(context.Background(), "t", time.Minute); err != nil {
		t.Fatal(err)
	}
	return q
}

// addAccepted adds job j<i> of type "t" with data "old" to q and accepts
// it, under l when not nil.
func addAccepted(t *testing.T, q *jobs.Queue, i int, l *jobs.Lease) *jobs.Job {
	t.Helper()
	ctx := context.Background()
	if err := q.Add(ctx, "t", fmt.Sprintf("j%02d", i), []byte("old"), time.Time{}); err != nil {
		t.Fatal(err)
	}
	j, err := q.Accept(ctx, "t", jobs.AcceptOptions{NoWait: true, Lease: l})
	if err != nil {
		t.Fatal(err)
	}
	return j
}
