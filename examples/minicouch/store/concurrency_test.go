package store

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// TestConcurrentWriters races writers on shared and distinct documents with
// readers of the changes feed: exactly one edit of each leaf wins, and the
// counters match the data.
func TestConcurrentWriters(t *testing.T) {
	s := openTest(t)
	db := createTest(t, s, "d")
	ctx := context.Background()
	rev := put(t, db, `{"_id":"shared","n":0}`)
	var wins atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				if _, err := db.Put(ctx, mustParse(t, fmt.Sprintf(`{"_id":"shared","_rev":"%s","g":%d}`, rev, g)), true); err == nil {
					wins.Add(1)
				} else if !isErr(err, ErrConflict) {
					t.Errorf("shared put: %v", err)
				}
				put(t, db, fmt.Sprintf(`{"_id":"g%d-%d"}`, g, i))
			}
		}()
	}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	readers.Add(1)
	go func() {
		defer readers.Done()
		var since uint64
		for {
			select {
			case <-stop:
				return
			default:
			}
			res, err := db.Changes(ctx, ChangesOptions{Since: since}, func(Change) error { return nil })
			if err != nil {
				t.Errorf("changes: %v", err)
				return
			}
			since = res.LastSeq
		}
	}()
	wg.Wait()
	close(stop)
	readers.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d concurrent edits of one leaf succeeded, want 1", wins.Load())
	}
	info, _ := db.Info(ctx)
	if info.DocCount != 1+8*25 || info.UpdateSeq != 2+8*25 {
		t.Fatalf("info %+v", info)
	}
}
