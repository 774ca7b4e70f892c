package park

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/couchclient"
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

// gatedStore is a kv.Store whose Updates wait while hold is locked, and
// are counted.
type gatedStore struct {
	kv.Store
	hold    sync.RWMutex
	updates atomic.Int64
}

func (s *gatedStore) Update(ctx context.Context, fn func(kv.Tx) error) error {
	s.hold.RLock()
	defer s.hold.RUnlock()
	s.updates.Add(1)
	return s.Store.Update(ctx, fn)
}

// TestDBUpdatedDoesNotWaitForWakes (issue 40): one write to the source of
// a fan-out wakes every job parked on it. DBUpdated returns before the
// wakes are committed (the host delivers one event at a time: waiting
// held up the next events, and with them the signals of the quiet jobs),
// and the wakes share queue transactions instead of one each.
func TestDBUpdatedDoesNotWaitForWakes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"results":[]}`)) // the checks: nothing new
	}))
	defer srv.Close()
	store := &gatedStore{Store: kv.NewMemory()}
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
	const n = 2*wakers*wakeBatch + 5
	err = q.Transact(ctx, func(tx *jobs.Tx) error {
		for i := 0; i < n; i++ {
			rep := &parse.Rep{Source: parse.Endpoint{URL: srv.URL + "/src"}, Target: parse.Endpoint{URL: srv.URL + "/tgt"}, Continuous: true}
			rec := jobdata.New(rep, "", "", "", time.Now())
			rec.Parked = &jobdata.Parked{Since: time.Now().Unix(), Seq: json.RawMessage(`"1"`)}
			id := fmt.Sprintf("j%04d", i)
			if err := tx.Add(jobdata.JobType, id, rec.Encode(testKeys, id), jobstore.ParkedTime()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	pool := couchclient.NewPool(couchclient.PoolOptions{LocalURL: srv.URL + "/"})
	defer pool.Close()
	w := New(Options{Queue: q, Keys: testKeys, Pool: pool, LocalURL: srv.URL + "/"})
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	store.hold.Lock() // no commit gets through
	before := store.updates.Load()
	returned := make(chan struct{})
	go func() {
		w.DBUpdated("src")
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(30 * time.Second):
		store.hold.Unlock()
		t.Fatal("DBUpdated waited for the wakes to be committed")
	}
	store.hold.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for w.Stats().Wakes < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d jobs woken", w.Stats().Wakes, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got, most := store.updates.Load()-before, int64(n/wakeBatch+wakers); got > most {
		t.Fatalf("%d jobs woken in %d queue transactions, want at most %d", n, got, most)
	}
}
