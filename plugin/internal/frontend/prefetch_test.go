package frontend

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/plugin/kv"
)

// roundTripStore is a kv.Store whose transactions can prefetch
// (kv.PrefetchTx, as etcd's) and count the reads that would each be a
// round trip to the store: every Range, every Prefetch, and every Get of a
// key neither prefetched nor written in the transaction.
type roundTripStore struct {
	kv.Store
	mu    sync.Mutex
	trips int
}

func (s *roundTripStore) Update(ctx context.Context, fn func(kv.Tx) error) error {
	return s.Store.Update(ctx, func(t kv.Tx) error {
		return fn(&roundTripTx{Tx: t, s: s, known: map[string]bool{}})
	})
}

func (s *roundTripStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.trips
}

func (s *roundTripStore) trip() {
	s.mu.Lock()
	s.trips++
	s.mu.Unlock()
}

type roundTripTx struct {
	kv.Tx
	s     *roundTripStore
	known map[string]bool
}

func (t *roundTripTx) Get(key []byte) ([]byte, error) {
	if !t.known[string(key)] {
		t.s.trip()
		t.known[string(key)] = true
	}
	return t.Tx.Get(key)
}

func (t *roundTripTx) Range(begin, end []byte, opt kv.RangeOptions, fn func(k, v []byte) error) error {
	t.s.trip()
	return t.Tx.Range(begin, end, opt, fn)
}

func (t *roundTripTx) Set(key, value []byte) {
	t.known[string(key)] = true
	t.Tx.Set(key, value)
}

func (t *roundTripTx) Prefetch(keys ...[]byte) error {
	t.s.trip()
	for _, k := range keys {
		t.known[string(k)] = true
	}
	return nil
}

// TestBatchReadsJobsAtOnce: a batch of new docs reads their jobs from the
// store in a few requests, not one round trip per doc (on etcd, loaded by
// acceptors, that made 1,000 docs take over a minute to become jobs, #39).
func TestBatchReadsJobsAtOnce(t *testing.T) {
	for _, n := range []int{10, 200} {
		t.Run(fmt.Sprint(n, " docs"), func(t *testing.T) {
			store := &roundTripStore{Store: kv.NewMemory()}
			fx := newFixtureOn(t, store)
			var evs []hooks.DocWrite
			for i := 0; i < n; i++ {
				id := fmt.Sprintf("d%03d", i)
				evs = append(evs, fx.svc.put("_replicator", id, []byte(doc(id, "t"+id, ""))))
			}
			before := store.count()
			if err := fx.f.AfterDocWrites(fx.ctx, "_replicator", evs); err != nil {
				t.Fatal(err)
			}
			trips := store.count() - before
			t.Logf("%d docs: %d round trips", n, trips)
			if trips > 5 {
				t.Errorf("%d new docs took %d store round trips, want a few", n, trips)
			}
			if got := len(fx.jobs()); got != n {
				t.Fatalf("%d jobs, want %d", got, n)
			}
		})
	}
}

// TestStopReplacedOneRoundTrip: the check a write of a _replicator doc
// waits for (is there a run to stop?) reads the db's position and the
// doc's job in one request once the db's uuid is known, not one after the
// other: on a loaded etcd each round trip is what a doc write waits for
// (#39).
func TestStopReplacedOneRoundTrip(t *testing.T) {
	store := &roundTripStore{Store: kv.NewMemory()}
	fx := newFixtureOn(t, store)
	fx.write("_replicator", "first", doc("first", "t0", "")) // the db has a position
	for i, want := range []int{2, 1, 1} {
		id := fmt.Sprintf("new%d", i)
		before := store.count()
		fx.f.StopReplaced(fx.ctx, "_replicator", []byte(doc(id, "t"+id, "")))
		if got := store.count() - before; got > want {
			t.Errorf("write %d of a new doc: %d store round trips before it is stored, want %d", i, got, want)
		}
	}
}
