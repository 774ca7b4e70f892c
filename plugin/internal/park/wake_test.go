package park

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/internal/jobstore"
	"github.com/couchepi/couchepi/plugin/jobs"
	"github.com/couchepi/couchepi/plugin/kv"
)

// slowStore is a kv.Store whose transactions take a while, counting how
// many run at once.
type slowStore struct {
	kv.Store
	inFlight, most atomic.Int64
}

func (s *slowStore) Update(ctx context.Context, fn func(kv.Tx) error) error {
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for {
		m := s.most.Load()
		if n <= m || s.most.CompareAndSwap(m, n) {
			break
		}
	}
	time.Sleep(5 * time.Millisecond)
	return s.Store.Update(ctx, fn)
}

// TestWakesBoundedAndDrained (issue 32): every wake, also of a job whose
// source cannot be watched (woken as it is registered), runs within the
// bound of wakers at once, and Stop returns only once none runs, so none
// reaches a queue closed after Stop.
func TestWakesBoundedAndDrained(t *testing.T) {
	store := &slowStore{Store: kv.NewMemory()}
	defer store.Close()
	q, err := jobs.New(store, jobs.Options{Prefix: []byte(jobstore.QueuePrefix), Tag: jobdata.ShareTag})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	if err := q.SetTypeTimeout(ctx, jobdata.JobType, time.Minute); err != nil {
		t.Fatal(err)
	}
	const n = 4 * wakers
	err = q.Transact(ctx, func(tx *jobs.Tx) error {
		for i := 0; i < n; i++ {
			// No db in the source URL: it cannot be watched, so the job is
			// woken as soon as it is registered.
			rep := &parse.Rep{Source: parse.Endpoint{URL: "http://127.0.0.1:1/"}, Target: parse.Endpoint{URL: "http://127.0.0.1:1/tgt/"}, Continuous: true}
			rec := jobdata.New(rep, "", "", "", time.Now())
			rec.Parked = &jobdata.Parked{Since: time.Now().Unix(), Seq: json.RawMessage(`"1"`)}
			id := fmt.Sprintf("j%03d", i)
			if err := tx.Add(jobdata.JobType, id, rec.Encode(testKeys, id), jobstore.ParkedTime()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	store.most.Store(0)
	w := New(Options{Queue: q, Keys: testKeys, LocalURL: "http://127.0.0.1:5984/"})
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	w.Stop()
	if got := store.inFlight.Load(); got != 0 {
		t.Fatalf("%d wakes still running after Stop", got)
	}
	if most := store.most.Load(); most > wakers+1 { // +1: the refresh's own reads
		t.Fatalf("%d queue transactions at once: wakes are bounded by %d", most, wakers)
	}
}
